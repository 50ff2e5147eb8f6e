/* topo_nvml.c — the NVML side of the topology: see tfb_topo_join_nvml in topo.h. */
#include <stdlib.h>
#include <string.h>
#include "topo.h"
#include "nvml.h"

static int nvml_index(const tfb_nvml *nv, const tfb_gpu *g) {
    for (int k = 0; k < tfb_nvml_count(nv); k++) {
        const tfb_nvml_gpu *x = tfb_nvml_gpu_info(nv, k);
        if (x->domain == g->domain && x->bus == g->bus && x->dev == g->dev) return k;
    }
    return -1;
}

static void count_links(const tfb_nvml_gpu *a, const tfb_gpu *peer, int *direct, int *to_switch, int *version) {
    *direct = *to_switch = *version = 0;
    for (int l = 0; l < a->n_links; l++) {
        const tfb_nvlink *k = &a->link[l];
        if (k->version > *version) *version = k->version;
        if (k->to_switch) ++*to_switch;
        else if (peer && k->domain == peer->domain && k->bus == peer->bus && k->dev == peer->dev) ++*direct;
    }
}

static void classify(tfb_topo *t, const tfb_nvml *nv, const int *idx) {
    for (int i = 0; i < t->n_gpus; i++)
        for (int j = 0; j < t->n_gpus; j++) {
            if (i == j || idx[i] < 0 || idx[j] < 0) continue;
            int direct, sw_i, sw_j, v_i, v_j, unused;
            count_links(tfb_nvml_gpu_info(nv, idx[i]), &t->gpus[j], &direct, &sw_i, &v_i);
            count_links(tfb_nvml_gpu_info(nv, idx[j]), NULL, &unused, &sw_j, &v_j);
            int n = direct ? direct : sw_i < sw_j ? sw_i : sw_j;
            tfb_gpu_pair *p = &t->pair[i][j];
            if (!n) continue;
            p->kind = TFB_LINK_NV;
            p->nvlinks = n;
            p->via_switch = !direct;
            p->nvlink_gbs = n * tfb_nvlink_gbs(v_i < v_j ? v_i : v_j);
        }
}

void tfb_topo_join_nvml(tfb_topo *t) {
    const char *stub = getenv("TFB_TEST_LIBNVML");
    if (!t->is_this_machine && !(stub && stub[0])) return;
    char err[200];
    tfb_nvml *nv = tfb_nvml_open(err, sizeof err);
    if (!nv) return;
    int idx[TFB_TOPO_MAX_GPUS];
    for (int i = 0; i < t->n_gpus; i++) {
        tfb_gpu *g = &t->gpus[i];
        idx[i] = nvml_index(nv, g);
        if (idx[i] < 0) continue;
        const tfb_nvml_gpu *x = tfb_nvml_gpu_info(nv, idx[i]);
        snprintf(g->uuid, sizeof g->uuid, "%s", x->uuid);
        g->pcie_gen = x->pcie_gen;
        g->pcie_width = x->pcie_width;
        g->pcie_gen_max = x->pcie_gen_max;
        g->pcie_width_max = x->pcie_width_max;
        if (x->pcie_gen > 0) g->pcie_gbs = tfb_pcie_gbs(x->pcie_gen, x->pcie_width);
        t->nvml = 1;
    }
    if (t->nvml) classify(t, nv, idx);
    tfb_nvml_close(nv);
}
