/* energy.c — see energy.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "energy.h"

/* Is this rank the lowest job rank with its key (its node; on GPUs its node and GPU)? *nodes gets the number of
 * distinct keys: the meters the job needs. */
static int node_leader(tfb_comm *job, uint64_t node, int *nodes) {
    uint64_t *all = calloc((size_t)job->size, sizeof *all);
    int leader = 1;
    *nodes = 0;
    if (!all || job->allgather(job, &node, all, 1, TFB_COMM_U64) != TFB_OK) { free(all); return -1; }
    for (int r = 0; r < job->size; r++) {
        int first = 1;
        for (int q = 0; q < r; q++) first &= all[q] != all[r];
        *nodes += first;
        if (r < job->rank && all[r] == node) leader = 0;
    }
    free(all);
    return leader;
}

static void unmeasured(tfb_run_record *rec, const char *why) {
    rec->energy_j = -1;
    rec->throttle_events = -1;
    snprintf(rec->energy_why, sizeof rec->energy_why, "%s", why);
}

/* The GPU's PCI id packed into the low 24 bits beside the node (0 and 0 on the CPU backend). */
static uint64_t meter_key(int node, const tfb_backend *be, unsigned pci[3]) {
    pci[0] = pci[1] = pci[2] = 0;
    if (be->device_pci_bus_id) sscanf(be->device_pci_bus_id, "%x:%x:%x", &pci[0], &pci[1], &pci[2]);
    return (uint64_t)node << 40 | (uint64_t)(pci[0] & 0xffff) << 24 | (pci[1] & 0xff) << 16 | (pci[2] & 0x1f) << 8;
}

tfb_power_meter *tfb_energy_open(tfb_comm *job, int node, const tfb_backend *be, tfb_run_record *rec) {
    unsigned pci[3];
    int nodes, leader = node_leader(job, meter_key(node, be, pci), &nodes), have = 0, need = 0;
    char why[200] = "";
    tfb_power_meter *m = NULL;
    if (leader > 0 && be->device_pci_bus_id) m = tfb_power_open_gpu(pci[0], pci[1], pci[2], why, sizeof why);
    else if (leader > 0 && strcmp(be->name, "cpu") == 0) m = tfb_power_open(why, sizeof why);
    else if (leader > 0) snprintf(why, sizeof why, "no energy meter for the %s backend", be->name);
    have = m != NULL, need = leader > 0;
    if (leader < 0 || job->allreduce(job, &have, 1, TFB_COMM_I32, TFB_SUM) != TFB_OK ||
        job->allreduce(job, &need, 1, TFB_COMM_I32, TFB_SUM) != TFB_OK) {
        tfb_power_close(m);
        unmeasured(rec, "the ranks could not agree on who measures");
        return NULL;
    }
    unmeasured(rec, why[0] ? why : "not every node could read its energy counters");
    if (have != need || need != nodes) { /* unmeasured: no sampling thread runs beside the steps */
        tfb_power_close(m);
        return NULL;
    }
    rec->energy_j = 0;
    snprintf(rec->energy_source, sizeof rec->energy_source, "%s", tfb_power_source(m));
    rec->energy_why[0] = '\0';
    tfb_power_start(m);
    return m;
}

void tfb_energy_finish(tfb_comm *job, tfb_power_meter *m, tfb_run_record *rec) {
    double f[4] = {0, 0, 0, 0};   /* joules, peak W, SM clock sum, meters with a clock */
    int samples = 1 << 30, every = rec->energy_j >= 0;
    long thr = 0;
    if (m) tfb_power_stop(m, &f[0], &f[1], &samples, &thr);
    f[2] = tfb_power_mean_clock_mhz(m);
    f[3] = f[2] > 0;
    double known = m && thr >= 0 ? 1 : m ? 0 : 1, events = thr > 0 ? (double)thr : 0;
    tfb_power_close(m);
    if (job->allreduce(job, f, 4, TFB_COMM_F64, TFB_SUM) != TFB_OK ||
        job->allreduce(job, &samples, 1, TFB_COMM_I32, TFB_MIN) != TFB_OK ||
        job->allreduce(job, &known, 1, TFB_COMM_F64, TFB_MIN) != TFB_OK ||
        job->allreduce(job, &events, 1, TFB_COMM_F64, TFB_SUM) != TFB_OK) {
        unmeasured(rec, "the energy figures could not be gathered");
        return;
    }
    if (!every) return;
    if (!(f[0] > 0)) { unmeasured(rec, "the energy counters did not advance during the timed windows"); return; }
    rec->energy_j = f[0];
    rec->energy_peak_w = f[1];
    rec->energy_samples = samples;
    rec->energy_clock_mhz = f[3] > 0 ? f[2] / f[3] : 0;
    rec->throttle_events = known > 0 ? (long)events : -1;
}
