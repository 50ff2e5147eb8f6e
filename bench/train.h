/* train.h — one configuration of a run: a layout (data x tensor x pipeline) of the job's ranks, its workload
 * stage on each rank, warm-up and timed trials of training steps following the pipeline schedule, and the
 * measurements reduced across the ranks taking part into one record on world rank 0.
 *
 * Collective over the whole job: ranks outside the layout build (empty) sub-communicators with the others and
 * return at once; the caller makes them wait outside the timed window. This file prints nothing but fault and
 * progress messages and writes no results (run.c does).
 */
#ifndef TFB_TRAIN_H
#define TFB_TRAIN_H
#include "comm.h"
#include "options.h"
#include "strategy.h"
#include "../results/event_log.h"
#include "../results/record.h"

typedef struct {
    tfb_options *o;              /* o->lr is filled with the workload's default when 0 */
    tfb_comm *world;
    tfb_backend *be;
    double peak_tflops_rank;     /* this rank's peak, for MFU */
    const char *peak_source;
    tfb_event_log *log;          /* rank 0 only, else NULL */
    int exit_step;               /* TFB_TEST_EXIT_STEP (-1: none) */
    int progress;                /* rank 0 prints a progress line */
    int dump;                    /* write --dump files for this configuration */
    int node;                    /* this rank's node (0 .. nodes - 1) */
} tfb_train_env;

/* Runs layout s; world rank 0's *rec receives the record (arrays owned by it: tfb_record_free). */
tfb_status tfb_train_run(const tfb_train_env *env, const tfb_strategy *s, tfb_run_record *rec);
void tfb_record_free(tfb_run_record *rec);

#endif
