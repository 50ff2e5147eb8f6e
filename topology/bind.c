/* bind.c — see bind.h. */
#include <stdio.h>
#include <string.h>
#include <hwloc.h>
#include "bind.h"

static const char *const NAMES[] = {"none", "core", "numa", "gpu"};

const char *tfb_bind_mode_name(tfb_bind_mode m) { return NAMES[m]; }

tfb_status tfb_bind_mode_parse(const char *name, int have_gpus, tfb_bind_mode *mode) {
    if (strcmp(name, "auto") == 0) { *mode = have_gpus ? TFB_BIND_GPU : TFB_BIND_CORE; return TFB_OK; }
    for (int i = 0; i < 4; i++)
        if (strcmp(name, NAMES[i]) == 0) { *mode = (tfb_bind_mode)i; return TFB_OK; }
    return TFB_ERR_ARG;
}

/* Cores [r * n / R, (r + 1) * n / R) of those inside `within` (all when NULL); with more ranks than cores,
 * core r mod n. */
static void share_cores(hwloc_topology_t topo, hwloc_const_bitmap_t within, int r, int R, hwloc_bitmap_t out) {
    int n = 0, i = 0;
    hwloc_obj_t c = NULL;
    while ((c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c)))
        n += !within || hwloc_bitmap_isincluded(c->cpuset, within);
    if (n == 0) { if (within) hwloc_bitmap_copy(out, within); return; }
    int lo = R <= n ? r * n / R : r % n, hi = R <= n ? (r + 1) * n / R : r % n + 1;
    while ((c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c))) {
        if (within && !hwloc_bitmap_isincluded(c->cpuset, within)) continue;
        if (i >= lo && i < hi) hwloc_bitmap_or(out, out, c->cpuset);
        i++;
    }
}

/* The ranks whose GPU has the same locality as rank's, and rank's place among them. */
static void gpu_peers(const tfb_topo *t, int rank, int ranks, int *index, int *count) {
    int g = rank % t->n_gpus;
    *index = *count = 0;
    for (int r = 0; r < ranks; r++) {
        if (strcmp(t->gpus[r % t->n_gpus].cpulist, t->gpus[g].cpulist) != 0) continue;
        if (r < rank) (*index)++;
        (*count)++;
    }
}

static void fill_lists(hwloc_topology_t topo, hwloc_const_bitmap_t set, tfb_bind_plan *p) {
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    hwloc_cpuset_to_nodeset(topo, set, nodes);
    hwloc_bitmap_list_snprintf(p->cpulist, sizeof p->cpulist, set);
    hwloc_bitmap_list_snprintf(p->numalist, sizeof p->numalist, nodes);
    p->cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
    hwloc_bitmap_free(nodes);
}

tfb_status tfb_bind_plan_make(const tfb_topo *t, tfb_bind_mode mode, int rank, int ranks, tfb_bind_plan *p) {
    hwloc_topology_t topo = (hwloc_topology_t)t->hw;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    TFB_CHECK_ALLOC(set);
    if (mode == TFB_BIND_GPU && t->n_gpus == 0) mode = TFB_BIND_CORE;
    *p = (tfb_bind_plan){.mode = mode, .gpu = -1};
    if (mode == TFB_BIND_NONE) {
        hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
    } else if (mode == TFB_BIND_CORE) {
        share_cores(topo, NULL, rank, ranks, set);
    } else if (mode == TFB_BIND_NUMA) {
        int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)(n ? rank % n : 0));
        hwloc_bitmap_copy(set, node ? node->cpuset : hwloc_topology_get_topology_cpuset(topo));
    } else {
        int index, count;
        hwloc_bitmap_t local = hwloc_bitmap_alloc();
        p->gpu = rank % t->n_gpus;
        hwloc_bitmap_list_sscanf(local, t->gpus[p->gpu].cpulist);
        gpu_peers(t, rank, ranks, &index, &count);
        share_cores(topo, local, index, count, set);
        hwloc_bitmap_free(local);
    }
    fill_lists(topo, set, p);
    hwloc_bitmap_free(set);
    return TFB_OK;
}

tfb_status tfb_bind_apply(const tfb_topo *t, const tfb_bind_plan *p) {
    hwloc_topology_t topo = (hwloc_topology_t)t->hw;
    if (p->mode == TFB_BIND_NONE || !t->is_this_machine) return TFB_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    int ok = set && nodes && hwloc_bitmap_list_sscanf(set, p->cpulist) == 0 &&
             hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0;
    if (ok && hwloc_bitmap_list_sscanf(nodes, p->numalist) == 0) /* memory binding is best effort */
        (void)hwloc_set_membind(topo, nodes, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(nodes);
    return ok ? TFB_OK : TFB_ERR_IO;
}

void tfb_bind_read(const tfb_topo *t, char *cpulist, size_t len) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_get_cpubind((hwloc_topology_t)t->hw, set, HWLOC_CPUBIND_PROCESS) == 0)
        hwloc_bitmap_list_snprintf(cpulist, len, set);
    else
        snprintf(cpulist, len, "unknown");
    hwloc_bitmap_free(set);
}
