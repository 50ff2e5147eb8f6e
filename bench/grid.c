/* grid.c — see grid.h. */
#include <string.h>
#include "grid.h"

static tfb_status split_or_null(tfb_comm *parent, int active, int color, int key, tfb_comm **out) {
    return parent->split(parent, active ? color : -1, key, out);
}

tfb_status tfb_grid_create(tfb_comm *parent, int dp, int tp, int pp, tfb_grid *out) {
    memset(out, 0, sizeof *out);
    if (dp < 1 || tp < 1 || pp < 1 || (long)dp * tp * pp > parent->size) return TFB_ERR_ARG;
    int r = parent->rank, used = dp * tp * pp;
    *out = (tfb_grid){.dp = dp, .tp = tp, .pp = pp, .active = r < used};
    if (out->active) {
        out->tp_rank = r % tp;
        out->dp_rank = (r / tp) % dp;
        out->pp_rank = r / (tp * dp);
    }
    int a = out->active, t = out->tp_rank, d = out->dp_rank, p = out->pp_rank;
    tfb_status st = split_or_null(parent, a, 0, r, &out->job);
    if (st == TFB_OK) st = split_or_null(parent, a, p * tp + t, d, &out->dp_comm);
    if (st == TFB_OK) st = split_or_null(parent, a, p * dp + d, t, &out->tp_comm);
    if (st == TFB_OK) st = split_or_null(parent, a, d * tp + t, p, &out->pp_comm);
    if (st != TFB_OK) tfb_grid_destroy(out);
    return st;
}

void tfb_grid_destroy(tfb_grid *l) {
    tfb_comm **c[] = {&l->job, &l->dp_comm, &l->tp_comm, &l->pp_comm};
    for (int i = 0; i < 4; i++)
        if (*c[i]) { (*c[i])->destroy(*c[i]); *c[i] = NULL; }
}
