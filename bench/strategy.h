/* strategy.h — which layouts a job runs: one named by the command line (--parallel data|tensor|pipeline or
 * --dp/--tp/--pp), or, for the comparison run, every strategy at every power-of-two scale up to the job's size;
 * and whether a layout fits the model (whole heads per rank, channels that divide, a unit per stage, a batch
 * that divides into replicas and micro-batches). Pure logic: no communication, no workloads built.
 */
#ifndef TFB_STRATEGY_H
#define TFB_STRATEGY_H
#include "options.h"
#include "schedule.h"
#include "workload.h"

typedef struct {
    const char *name;            /* "single", "data", "tensor", "pipeline", "hybrid" */
    int dp, tp, pp, microbatches;
    tfb_schedule_kind schedule;
    int global_batch;            /* samples per step over the whole layout */
    char skip[200];              /* why the layout cannot run this model; empty when it can */
    const char *skip_dim;        /* which dimension does not fit: "tensor", "pipeline" or "batch" */
} tfb_strategy;

enum { TFB_MAX_STRATEGIES = 64 };

/* The layouts to run for options o on `world` ranks; returns how many (at most max). */
int tfb_strategy_list(const tfb_options *o, int world, tfb_strategy *out, int max);
/* Fills s->skip when the layout does not fit the model; returns 1 when it fits. */
int tfb_strategy_fits(const tfb_options *o, tfb_strategy *s);
/* The workload configuration of the rank at (dp_rank, pp_rank) holding `slots` activation sets: everything the
 * options and the layout decide (no communicators, costs or hooks: the caller adds those). */
tfb_workload_config tfb_strategy_workload_config(const tfb_options *o, const tfb_strategy *s, int dp_rank,
                                                 int pp_rank, int slots);
/* Activation sets stage pp_rank holds at once under the layout's schedule. */
int tfb_strategy_slots(const tfb_strategy *s, int pp_rank);

#endif
