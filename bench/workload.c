/* workload.c — what every workload shares: parameter initialisation on the host and its upload, the mapping
 * between a parameter's whole tensor and this rank's shard, the pipeline partition of units, activation-set
 * bookkeeping and the timed tensor-parallel all-reduce (see workload.h).
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include "clock.h"
#include "watchdog.h"
#include "workload.h"

tfb_status tfb_workload_refresh_lowp(const tfb_workload *wl, tfb_backend *be) {
    if (!wl->lowp_pool) return TFB_OK;
    return be->cast(be->ctx, wl->lowp_pool, wl->gemm_type, wl->param_pool, TFB_F32, wl->numel);
}

/* Row of the whole tensor that local row i holds (>= full_rows: padding). */
static long shard_row(const tfb_param_info *p, int tp_rank, int i) {
    int per_block = p->rows / p->blocks, b = i / per_block, j = i % per_block;
    long full_block = p->blocks > 1 ? p->full_rows / p->blocks : 0;
    return b * full_block + (long)tp_rank * per_block + j;
}

void tfb_shard_extract(const tfb_param_info *p, int tp_rank, const float *full, float *local) {
    size_t cols = (size_t)p->cols, fcols = (size_t)p->full_cols;
    if (p->shard == TFB_SHARD_NONE) { memcpy(local, full, p->numel * sizeof(float)); return; }
    for (int i = 0; i < p->rows; i++) {
        if (p->shard == TFB_SHARD_COLS) {
            memcpy(local + i * cols, full + i * fcols + (size_t)tp_rank * cols, cols * sizeof(float));
            continue;
        }
        long r = shard_row(p, tp_rank, i);
        if (r < p->full_rows) memcpy(local + i * cols, full + (size_t)r * cols, cols * sizeof(float));
        else memset(local + i * cols, 0, cols * sizeof(float));
    }
}

void tfb_shard_insert(const tfb_param_info *p, int tp_rank, const float *local, float *full) {
    size_t cols = (size_t)p->cols, fcols = (size_t)p->full_cols;
    if (p->shard == TFB_SHARD_NONE) { memcpy(full, local, p->numel * sizeof(float)); return; }
    for (int i = 0; i < p->rows; i++) {
        if (p->shard == TFB_SHARD_COLS) {
            memcpy(full + i * fcols + (size_t)tp_rank * cols, local + i * cols, cols * sizeof(float));
            continue;
        }
        long r = shard_row(p, tp_rank, i);
        if (r < p->full_rows) memcpy(full + (size_t)r * cols, local + i * cols, cols * sizeof(float));
    }
}

tfb_status tfb_param_reorder(const tfb_param_info *p, float *full, int to_stored) {
    if (p->taps <= 1) return TFB_OK;
    int taps = p->taps, chans = p->full_cols / taps;
    float *row = malloc((size_t)p->full_cols * sizeof *row);
    TFB_CHECK_ALLOC(row);
    for (int r = 0; r < p->full_rows; r++) {
        float *x = full + (size_t)r * p->full_cols;
        memcpy(row, x, (size_t)p->full_cols * sizeof *row);
        for (int ch = 0; ch < chans; ch++)
            for (int t = 0; t < taps; t++) {
                if (to_stored) x[t * chans + ch] = row[ch * taps + t];
                else x[ch * taps + t] = row[t * chans + ch];
            }
    }
    free(row);
    return TFB_OK;
}

tfb_status tfb_workload_init_params(tfb_workload *wl, tfb_backend *be, tfb_param_init_fn init, const void *ctx) {
    size_t biggest = 0;
    for (int i = 0; i < wl->n_params; i++) {
        size_t n = (size_t)wl->params[i].full_rows * wl->params[i].full_cols;
        if (n > biggest) biggest = n;
    }
    float *host = malloc(wl->numel * sizeof(float)), *full = malloc(biggest * sizeof(float) + 1);
    tfb_status st = host && full ? TFB_OK : TFB_ERR_NOMEM;
    for (int i = 0; i < wl->n_params && st == TFB_OK; i++) {
        init(full, &wl->params[i], ctx);
        st = tfb_param_reorder(&wl->params[i], full, 1);
        if (st == TFB_OK) tfb_shard_extract(&wl->params[i], wl->tp_rank, full, host + wl->params[i].offset);
    }
    if (st == TFB_OK) st = be->copy_h2d(be->ctx, wl->param_pool, host, wl->numel * sizeof(float));
    free(host);
    free(full);
    return st;
}

/* Linear partition by dynamic programming: best[k][j] = smallest largest part placing units [0, j) in k parts. */
tfb_status tfb_partition(const double *costs, int n, int parts, int *first) {
    if (parts < 1 || n < 1 || parts > n) return TFB_ERR_ARG;
    size_t w = (size_t)n + 1, cells = w * ((size_t)parts + 1);
    double *prefix = calloc(w, sizeof *prefix), *best = calloc(cells, sizeof *best);
    int *cut = calloc(cells, sizeof *cut);
    if (!prefix || !best || !cut) { free(prefix); free(best); free(cut); return TFB_ERR_NOMEM; }
    for (int j = 0; j < n; j++) prefix[j + 1] = prefix[j] + costs[j];
    for (size_t c = 1; c < w; c++) best[c] = DBL_MAX; /* no units in zero parts: only [0, 0) */
    for (int k = 1; k <= parts; k++)
        for (int j = k; j <= n; j++) {
            best[(size_t)k * w + (size_t)j] = DBL_MAX;
            for (int c = k - 1; c < j; c++) {
                double prev = best[(size_t)(k - 1) * w + (size_t)c], part = prefix[j] - prefix[c];
                double v = prev > part ? prev : part;
                size_t at = (size_t)k * w + (size_t)j;
                if (prev < DBL_MAX && v < best[at]) { best[at] = v; cut[at] = c; }
            }
        }
    first[parts] = n;
    for (int k = parts, j = n; k >= 1; k--) {
        j = cut[(size_t)k * w + (size_t)j];
        first[k - 1] = j;
    }
    free(prefix);
    free(best);
    free(cut);
    return TFB_OK;
}

tfb_status tfb_workload_slot_take(tfb_workload *wl, int slot, int slots, unsigned char *busy) {
    if (slot < 0 || slot >= slots || busy[slot]) return TFB_ERR_ARG;
    busy[slot] = 1;
    if (++wl->slots_in_use > wl->slots_peak) wl->slots_peak = wl->slots_in_use;
    return TFB_OK;
}

void tfb_workload_slot_give(tfb_workload *wl, int slot, unsigned char *busy) {
    if (!busy[slot]) return;
    busy[slot] = 0;
    wl->slots_in_use--;
}

double tfb_workload_unit_start(const tfb_workload *wl, tfb_backend *be) {
    if (!wl->unit_s || be->sync(be->ctx) != TFB_OK) return 0;
    return tfb_clock_s();
}

tfb_status tfb_workload_unit_stop(tfb_workload *wl, tfb_backend *be, int unit, double t0) {
    tfb_watchdog_tick(); /* a unit done is progress: the deadline holds for one unit, not a whole phase */
    if (!wl->unit_s) return TFB_OK;
    TFB_CHECK(be->sync(be->ctx));
    wl->unit_s[unit] += tfb_clock_s() - t0;
    return TFB_OK;
}

tfb_status tfb_workload_mark(const tfb_workload *wl, tfb_mark_kind kind) {
    return wl->mark ? wl->mark(wl->mark_ctx, kind) : TFB_OK;
}

tfb_status tfb_workload_tp_allreduce(tfb_workload *wl, tfb_comm *tp, float *buf, size_t n, tfb_comm_op op) {
    if (!tp || tp->size == 1) return TFB_OK;
    TFB_CHECK(tfb_workload_mark(wl, TFB_MARK_WORK));
    TFB_CHECK(tp->allreduce(tp, buf, n, TFB_COMM_F32, op));
    wl->tp_bus_bytes += 2.0 * (tp->size - 1) / tp->size * (double)n * sizeof(float);
    return tfb_workload_mark(wl, TFB_MARK_TP);
}
