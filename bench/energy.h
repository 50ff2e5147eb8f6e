/* energy.h — energy of a configuration's timed windows across the job: on the CPU backend one rank per node (the
 * lowest job rank on it) opens that node's meter (bench/power.h); on a GPU backend one rank per GPU opens that
 * GPU's meter; the others measure nothing, and the figures are summed into the run record. A configuration is
 * reported as measured only when every node (every GPU) of its job measured. It
 * never fails a run: an error in the collective leaves the energy unmeasured with the reason.
 */
#ifndef TFB_ENERGY_H
#define TFB_ENERGY_H
#include "comm.h"
#include "power.h"
#include "../kernels/backend.h"
#include "../results/record.h"

/* Collective over job. Returns this rank's meter (NULL when it does not measure); rec->energy_* filled with the
 * reason when no node can. `node` is this rank's node; `be` the backend (its GPU, when it has one). */
tfb_power_meter *tfb_energy_open(tfb_comm *job, int node, const tfb_backend *be, tfb_run_record *rec);
/* Collective over job: stops the meter, sums over nodes into rec (world rank 0's record is the one reported). */
void tfb_energy_finish(tfb_comm *job, tfb_power_meter *m, tfb_run_record *rec);

#endif
