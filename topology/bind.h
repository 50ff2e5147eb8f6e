/* bind.h — where each rank of a node runs: a plan of cores (and the NUMA nodes they belong to) per node-local
 * rank, from the topology and a mode, and its application to this process with hwloc. Modes: gpu (the cores
 * local to the rank's GPU, shared out among the ranks on that GPU's locality), core (the node's cores shared out
 * in contiguous blocks, which follow NUMA nodes), numa (a whole NUMA node per rank, round robin), none.
 *
 * The plan is pure (testable on saved and synthetic topologies); binding is applied only when the topology is
 * this machine's. Threads per rank follow the plan's core count. This file does not decide the default mode.
 */
#ifndef TFB_BIND_H
#define TFB_BIND_H
#include "topo.h"

typedef enum { TFB_BIND_NONE = 0, TFB_BIND_CORE, TFB_BIND_NUMA, TFB_BIND_GPU } tfb_bind_mode;

typedef struct {
    tfb_bind_mode mode;       /* the mode used (gpu falls back to core without GPUs) */
    int gpu;                  /* the rank's GPU (gpu mode), else -1 */
    int cores;                /* cores in the set */
    char cpulist[512];        /* hardware threads of those cores, as a list */
    char numalist[128];       /* NUMA nodes they belong to, as a list */
} tfb_bind_plan;

/* TFB_ERR_ARG for an unknown mode name. */
tfb_status tfb_bind_mode_parse(const char *name, int have_gpus, tfb_bind_mode *mode);
const char *tfb_bind_mode_name(tfb_bind_mode m);
/* The plan for node-local rank `rank` of `ranks`. */
tfb_status tfb_bind_plan_make(const tfb_topo *t, tfb_bind_mode mode, int rank, int ranks, tfb_bind_plan *p);
/* Binds this process's threads and memory to the plan (nothing for none, or a topology not of this machine). */
tfb_status tfb_bind_apply(const tfb_topo *t, const tfb_bind_plan *p);
/* The CPU binding in force now, as a list (read back from the operating system). */
void tfb_bind_read(const tfb_topo *t, char *cpulist, size_t len);

#endif
