/* grid.h — how the ranks of a job are arranged for hybrid parallelism: D data-parallel replicas, each a pipeline
 * of P stages, each stage a tensor-parallel group of T ranks (D * T * P ranks take part; any others sit out).
 *
 * Rank order puts the tensor group innermost (adjacent ranks, which share the fastest links), then data, then
 * pipeline: rank = (pp_rank * D + dp_rank) * T + tp_rank. The sub-communicators are built with split() on the
 * parent communicator, so every rank of the parent must call tfb_grid_create. This file does no arithmetic on
 * models (which layouts a model accepts is checked in run.c) and no timing.
 */
#ifndef TFB_GRID_H
#define TFB_GRID_H
#include "comm.h"

typedef struct {
    int dp, tp, pp;                 /* group sizes */
    int dp_rank, tp_rank, pp_rank;  /* this rank's coordinates (0 when it sits out) */
    int active;                     /* this rank takes part */
    tfb_comm *job;                  /* the D * T * P ranks taking part (NULL when sitting out) */
    tfb_comm *dp_comm;              /* same stage and tensor rank: gradients averaged here */
    tfb_comm *tp_comm;              /* same replica and stage: the tensor-parallel group */
    tfb_comm *pp_comm;              /* same replica and tensor rank: the stages, ordered */
} tfb_grid;

/* Collective over `parent`. Returns TFB_ERR_ARG when dp * tp * pp exceeds the parent's size. */
tfb_status tfb_grid_create(tfb_comm *parent, int dp, int tp, int pp, tfb_grid *out);
void tfb_grid_destroy(tfb_grid *l);

#endif
