/* links_gpu.c — see links_gpu.h. Nominal figures come from the topology (topology/topo.c): an NVLink pair's bonded
 * NVLink bandwidth per direction, else the slower of the two GPUs' PCIe links; host copies against the GPU's PCIe
 * link. A figure with no nominal value shows none. */
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "links_gpu.h"
#include "../topology/gpu_bw.h"
#include "../topology/gpu_probe.h"
#include "../topology/topo.h"

typedef struct {
    double pair[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS]; /* GB/s per direction, 0: unknown */
    double host[TFB_BW_MAX_GPUS];
    char kind[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS][8];
} nominal;

/* The topology's GPU with this PCI bus id (driver order to topology order), or -1. */
static int topo_index(const tfb_topo *t, const char *bus_id) {
    unsigned d, b, v;
    if (sscanf(bus_id, "%x:%x:%x", &d, &b, &v) != 3) return -1;
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].domain == d && t->gpus[i].bus == b && t->gpus[i].dev == v) return i;
    return -1;
}

static void nominal_from_topology(const tfb_gpu_probe *p, int n, nominal *nom) {
    tfb_topo t;
    char err[300];
    memset(nom, 0, sizeof *nom);
    if (tfb_topo_load(NULL, NULL, &t, err, sizeof err) != TFB_OK) return;
    for (int a = 0; a < n; a++) {
        int ta = topo_index(&t, p->dev[a].bus_id);
        if (ta >= 0) nom->host[a] = t.gpus[ta].pcie_gbs;
        for (int b = 0; b < n && ta >= 0; b++) {
            int tb = topo_index(&t, p->dev[b].bus_id);
            if (tb < 0 || a == b) continue;
            const tfb_gpu_pair *q = &t.pair[ta][tb];
            double pcie = t.gpus[ta].pcie_gbs < t.gpus[tb].pcie_gbs ? t.gpus[ta].pcie_gbs : t.gpus[tb].pcie_gbs;
            nom->pair[a][b] = q->kind == TFB_LINK_NV ? q->nvlink_gbs : pcie;
            if (q->kind == TFB_LINK_NV) snprintf(nom->kind[a][b], sizeof nom->kind[a][b], "NV%d", q->nvlinks);
            else snprintf(nom->kind[a][b], sizeof nom->kind[a][b], "%s", tfb_link_name(q->kind));
        }
    }
    tfb_topo_free(&t);
}

static void print_cell(double v, double nominal_gbs, const char *unit) {
    char pct[16] = "";
    if (nominal_gbs > 0 && unit[0] == 'G') snprintf(pct, sizeof pct, " (%3.0f%%)", 100.0 * v / nominal_gbs);
    printf("  %9.2f%-7s", v, pct);
}

static void print_matrix(const char *title, double m[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS], int n, const nominal *nom,
                         double nominal_factor, const char *unit) {
    char name[16];
    printf("%s (%s%s):\n      ", title, unit, unit[0] == 'G' ? ", % of nominal" : "");
    for (int b = 0; b < n; b++) {
        snprintf(name, sizeof name, "GPU%d", b);
        printf("  %9s       ", name);
    }
    printf("\n");
    for (int a = 0; a < n; a++) {
        printf("  GPU%d", a);
        for (int b = 0; b < n; b++) {
            if (a == b) printf("  %9s       ", "-");
            else print_cell(m[a][b], nom->pair[a][b] * nominal_factor, unit);
        }
        printf("\n");
    }
}

static cJSON *matrix_json(double m[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS], int n) {
    cJSON *rows = cJSON_CreateArray();
    for (int a = 0; a < n; a++) {
        double row[TFB_BW_MAX_GPUS];
        for (int b = 0; b < n; b++) row[b] = a == b ? 0 : m[a][b];
        cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(row, n));
    }
    return rows;
}

static cJSON *result_json(const tfb_gpu_bw *r, const tfb_gpu_probe *p, const nominal *nom) {
    cJSON *o = cJSON_CreateObject(), *gpus = cJSON_CreateArray(), *kinds = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "bytes_per_copy", (double)r->bytes);
    cJSON_AddNumberToObject(o, "timed_copies", r->iters);
    cJSON_AddStringToObject(o, "definition", "GB/s = bytes / host time between synchronisations, after one untimed "
                            "copy; both_ways sums the two directions; latency: a 4-byte copy, peer access on; "
                            "nominal: NVLink bandwidth per direction of the pair, else the slower PCIe link");
    for (int g = 0; g < r->n; g++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", p->dev[g].name);
        cJSON_AddStringToObject(x, "bus_id", p->dev[g].bus_id);
        cJSON_AddNumberToObject(x, "h2d_gb_s", r->h2d[g]);
        cJSON_AddNumberToObject(x, "d2h_gb_s", r->d2h[g]);
        cJSON_AddNumberToObject(x, "pcie_nominal_gb_s", nom->host[g]);
        cJSON_AddItemToArray(gpus, x);
        cJSON *row = cJSON_CreateArray();
        for (int b = 0; b < r->n; b++) cJSON_AddItemToArray(row, cJSON_CreateString(g == b ? "X" : nom->kind[g][b]));
        cJSON_AddItemToArray(kinds, row);
    }
    cJSON_AddItemToObject(o, "gpus", gpus);
    cJSON_AddItemToObject(o, "link_kind", kinds);
    cJSON_AddItemToObject(o, "nominal_gb_s", matrix_json((double (*)[TFB_BW_MAX_GPUS])nom->pair, r->n));
    cJSON_AddItemToObject(o, "one_way_gb_s", matrix_json((double (*)[TFB_BW_MAX_GPUS])r->one_way, r->n));
    cJSON_AddItemToObject(o, "one_way_peer_off_gb_s", matrix_json((double (*)[TFB_BW_MAX_GPUS])r->no_peer, r->n));
    cJSON_AddItemToObject(o, "both_ways_gb_s", matrix_json((double (*)[TFB_BW_MAX_GPUS])r->both, r->n));
    cJSON_AddItemToObject(o, "latency_us", matrix_json((double (*)[TFB_BW_MAX_GPUS])r->latency_us, r->n));
    if (!r->complete) cJSON_AddStringToObject(o, "incomplete", r->why);
    return o;
}

static void print_result(const tfb_gpu_bw *r, const tfb_gpu_probe *p, const nominal *nom) {
    printf("\nGPU copies on this node (%d GPU%s, %zu B per copy, %d timed after 1; host clock between "
           "synchronisations):\n", r->n, r->n == 1 ? "" : "s", r->bytes, r->iters);
    for (int g = 0; g < r->n; g++) {
        printf("  GPU%d %-28s %s  host->GPU", g, p->dev[g].name, p->dev[g].bus_id);
        print_cell(r->h2d[g], nom->host[g], "GB/s");
        printf(" GPU->host");
        print_cell(r->d2h[g], nom->host[g], "GB/s");
        printf(" (pinned)\n");
    }
    if (r->n > 1) {
        print_matrix("one way, peer access on", (double (*)[TFB_BW_MAX_GPUS])r->one_way, r->n, nom, 1.0, "GB/s");
        print_matrix("one way, peer access off", (double (*)[TFB_BW_MAX_GPUS])r->no_peer, r->n, nom, 1.0, "GB/s");
        print_matrix("both ways at once, summed", (double (*)[TFB_BW_MAX_GPUS])r->both, r->n, nom, 2.0, "GB/s");
        print_matrix("latency of a 4-byte copy, peer access on", (double (*)[TFB_BW_MAX_GPUS])r->latency_us, r->n,
                     nom, 1.0, "us");
    }
    if (!r->complete) printf("  incomplete: %s\n", r->why);
}

cJSON *tfb_links_gpu_copies(size_t bytes, int iters, double deadline_s, int *failed) {
    static tfb_gpu_probe p; /* large: kept off the stack */
    tfb_gpu_bw r;
    nominal nom;
    *failed = 0;
    tfb_gpu_probe_run(&p);
    if (!p.driver_found || p.init_error || p.n == 0) return NULL;
    *failed = !tfb_gpu_bw_measure(p.n, bytes, iters, deadline_s, &r);
    nominal_from_topology(&p, r.n, &nom);
    print_result(&r, &p, &nom);
    return result_json(&r, &p, &nom);
}
