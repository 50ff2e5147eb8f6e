/* estimate.h — `tfbench estimate`: the memory each device of a layout needs, from the same plan the workloads
 * allocate (built in plan-only mode, nothing allocated), beside the published rules of thumb, and the largest batch
 * that fits on each GPU of the catalog. Runs anywhere without MPI or a GPU. It does not measure anything.
 */
#ifndef TFB_ESTIMATE_H
#define TFB_ESTIMATE_H
#include <stddef.h>
#include "options.h"
#include "strategy.h"

/* One device's planned memory, in bytes as allocated. */
typedef struct {
    size_t params, grads, lowp, optimizer, activations, workspace, inputs, comm, total;
    size_t numel;          /* parameters held */
    int layers, slots;     /* layers (blocks) held, activation sets */
    int pp_rank;
} tfb_estimate_device;

/* The device of layout s with the largest total (over every stage and tensor rank). */
tfb_status tfb_estimate_layout(const tfb_options *o, const tfb_strategy *s, tfb_estimate_device *worst);
/* The largest --batch for options o on layout s (its micro-batches kept) whose every device fits in limit_bytes;
 * 0 when none does. */
int tfb_estimate_largest_batch(const tfb_options *o, const tfb_strategy *s, double limit_bytes);
int tfb_estimate_main(int argc, char **argv);

#endif
