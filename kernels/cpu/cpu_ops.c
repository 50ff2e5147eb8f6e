/* cpu_ops.c — the CPU backend's training ops in plain C with OpenMP: the reference every other backend is checked
 * against, so each op is written for clarity first and vectorisable loops second.
 *
 * Row-parallel ops split rows across threads; column reductions (bias and LayerNorm parameter gradients) split
 * columns into blocks so no two threads add into the same element. Memory and GEMM are in cpu_backend.c.
 */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "../half.h"
#include "../dropout.h"
#include "../update.h"
#include "../act.h"

#define COL_BLOCK 64

static tfb_status cpu_embedding_fwd(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                    int accumulate) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *src = table + (size_t)ids[i] * h;
        float *dst = out + (size_t)i * h;
        if (accumulate)
            for (int j = 0; j < h; j++) dst[j] += src[j];
        else
            memcpy(dst, src, (size_t)h * sizeof(float));
    }
    return TFB_OK;
}

static int embed_in_shard(int id, int row0, int rows) { return id >= row0 && id - row0 < rows; }

/* Columns [c0, c1) of the scatter without an order: row i of dout added to row ids[i], in index order. */
static void embed_rows_add(float *dtable, const float *dout, const int *ids, int n, int h, int c0, int c1, int row0,
                           int rows) {
    for (int i = 0; i < n; i++) {
        if (!embed_in_shard(ids[i], row0, rows)) continue;
        float *dst = dtable + (size_t)(ids[i] - row0) * h;
        const float *src = dout + (size_t)i * h;
        for (int j = c0; j < c1; j++) dst[j] += src[j];
    }
}

/* Columns [c0, c1) of the scatter in the order's sequence (backend.h): for each id's run [s, e) of the order, the
 * pieces between chunk edges summed from zero, the pieces added in order, then the total to the id's row. */
static void embed_runs_add(float *dtable, const float *dout, const int *ids, const int *order, int n, int h, int c0,
                           int c1, int row0, int rows) {
    float total[COL_BLOCK], piece[COL_BLOCK];
    int w = c1 - c0;
    for (int s = 0, e; s < n; s = e) {
        int id = ids[order[s]];
        for (e = s + 1; e < n && ids[order[e]] == id; e++) {}
        if (!embed_in_shard(id, row0, rows)) continue;
        memset(total, 0, sizeof total);
        for (int p = s, q; p < e; p = q) {
            q = (p / TFB_EMBED_CHUNK + 1) * TFB_EMBED_CHUNK;
            if (q > e) q = e;
            memset(piece, 0, sizeof piece);
            for (int t = p; t < q; t++)
                for (int j = 0; j < w; j++) piece[j] += dout[(size_t)order[t] * h + c0 + j];
            for (int j = 0; j < w; j++) total[j] += piece[j];
        }
        float *dst = dtable + (size_t)(id - row0) * h + c0;
        for (int j = 0; j < w; j++) dst[j] += total[j];
    }
}

/* Columns are split across threads, so repeated ids never race. */
static tfb_status embed_scatter(float *dtable, const float *dout, const int *ids, const int *order, int n, int h,
                                int row0, int rows) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < h; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < h ? c0 + COL_BLOCK : h;
        if (order) embed_runs_add(dtable, dout, ids, order, n, h, c0, c1, row0, rows);
        else embed_rows_add(dtable, dout, ids, n, h, c0, c1, row0, rows);
    }
    return TFB_OK;
}

static tfb_status cpu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int *ids, const int *order,
                                    int n, int h) {
    (void)ctx;
    return embed_scatter(dtable, dout, ids, order, n, h, 0, INT_MAX);
}

static tfb_status cpu_embedding_bwd_shard(void *ctx, float *dtable, const float *dout, const int *ids,
                                          const int *order, int n, int h, int row0, int rows) {
    (void)ctx;
    return embed_scatter(dtable, dout, ids, order, n, h, row0, rows);
}

static tfb_status cpu_layernorm_fwd(void *ctx, float *out, float *mean, float *rstd, const float *in,
                                    const float *gamma, const float *beta, int n, int h, float eps) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = in + (size_t)i * h;
        float *y = out + (size_t)i * h;
        double s = 0.0, ss = 0.0;
        for (int j = 0; j < h; j++) s += x[j];
        float mu = (float)(s / h);
        for (int j = 0; j < h; j++) ss += (double)(x[j] - mu) * (x[j] - mu);
        float r = 1.0f / sqrtf((float)(ss / h) + eps);
        for (int j = 0; j < h; j++) y[j] = (x[j] - mu) * r * gamma[j] + beta[j];
        mean[i] = mu;
        rstd[i] = r;
    }
    return TFB_OK;
}

static void layernorm_param_grads(float *dgamma, float *dbeta, const float *dout, const float *in,
                                  const float *mean, const float *rstd, int n, int h) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < h; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < h ? c0 + COL_BLOCK : h;
        float dg[COL_BLOCK] = {0}, db[COL_BLOCK] = {0};
        for (int i = 0; i < n; i++) {
            const float *x = in + (size_t)i * h, *dy = dout + (size_t)i * h;
            for (int j = c0; j < c1; j++) {
                dg[j - c0] += dy[j] * (x[j] - mean[i]) * rstd[i];
                db[j - c0] += dy[j];
            }
        }
        for (int j = c0; j < c1; j++) { dgamma[j] += dg[j - c0]; dbeta[j] += db[j - c0]; }
    }
}

static tfb_status cpu_layernorm_bwd(void *ctx, float *din, float *dgamma, float *dbeta, const float *dout,
                                    const float *in, const float *mean, const float *rstd, const float *gamma,
                                    int n, int h) {
    (void)ctx;
    layernorm_param_grads(dgamma, dbeta, dout, in, mean, rstd, n, h);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = in + (size_t)i * h, *dy = dout + (size_t)i * h;
        float *dx = din + (size_t)i * h;
        float mu = mean[i], r = rstd[i], sum_g = 0.0f, sum_gx = 0.0f;
        for (int j = 0; j < h; j++) {
            float g = dy[j] * gamma[j];
            sum_g += g;
            sum_gx += g * (x[j] - mu) * r;
        }
        sum_g /= h;
        sum_gx /= h;
        for (int j = 0; j < h; j++) {
            float xhat = (x[j] - mu) * r;
            dx[j] = r * (dy[j] * gamma[j] - sum_g - xhat * sum_gx);
        }
    }
    return TFB_OK;
}

static tfb_status cpu_softmax_fwd(void *ctx, float *out, const float *in, int rows, int cols, float scale,
                                  const int *key_len, int rows_per_key) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * cols;
        float *y = out + (size_t)r * cols;
        int valid = key_len ? key_len[r / rows_per_key] : cols;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j < valid; j++) mx = fmaxf(mx, scale * x[j]);
        for (int j = 0; j < valid; j++) { y[j] = expf(scale * x[j] - mx); sum += y[j]; }
        float inv = 1.0f / sum;
        for (int j = 0; j < valid; j++) y[j] *= inv;
        for (int j = valid; j < cols; j++) y[j] = 0.0f;
    }
    return TFB_OK;
}

static tfb_status cpu_softmax_bwd(void *ctx, void *din, tfb_dtype din_type, const float *dout, const float *out,
                                  int rows, int cols, float scale) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        size_t r0 = (size_t)r * cols;
        const float *dy = dout + r0, *y = out + r0;
        float dot = 0.0f;
        for (int j = 0; j < cols; j++) dot += dy[j] * y[j];
        for (int j = 0; j < cols; j++) tfb_cpu_store(din, din_type, r0 + j, scale * y[j] * (dy[j] - dot));
    }
    return TFB_OK;
}

static tfb_status cpu_act_fwd(void *ctx, tfb_act act, float *out, const float *in, size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = tfb_act_value((int)act, in[i]);
    return TFB_OK;
}

static tfb_status cpu_act_bwd(void *ctx, tfb_act act, float *din, const float *dout, const float *in, size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) din[i] = dout[i] * tfb_act_slope((int)act, in[i]);
    return TFB_OK;
}

static tfb_status cpu_bias_add(void *ctx, float *x, const float *bias, int n, int h) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < h; j++) x[(size_t)i * h + j] += bias[j];
    return TFB_OK;
}

static tfb_status cpu_bias_grad(void *ctx, float *dbias, const float *dout, int n, int h) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < h; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < h ? c0 + COL_BLOCK : h;
        float acc[COL_BLOCK] = {0};
        for (int i = 0; i < n; i++)
            for (int j = c0; j < c1; j++) acc[j - c0] += dout[(size_t)i * h + j];
        for (int j = c0; j < c1; j++) dbias[j] += acc[j - c0];
    }
    return TFB_OK;
}

static tfb_status cpu_bias_act_fwd(void *ctx, tfb_act act, void *out, tfb_dtype out_type, const void *pre,
                                   tfb_dtype pre_type, const float *bias, int n, int h) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < h; j++) {
            size_t e = (size_t)i * h + j;
            tfb_cpu_store(out, out_type, e, tfb_act_value((int)act, tfb_cpu_load(pre, pre_type, e) + bias[j]));
        }
    return TFB_OK;
}

/* Column blocks as in bias_grad: each thread writes its columns of din and sums them in row order. */
static tfb_status cpu_act_bias_bwd(void *ctx, const tfb_act_bias_bwd_desc *d) {
    (void)ctx;
    int n = d->n, h = d->h;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < h; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < h ? c0 + COL_BLOCK : h;
        float acc[COL_BLOCK] = {0};
        for (int i = 0; i < n; i++)
            for (int j = c0; j < c1; j++) {
                size_t e = (size_t)i * h + j;
                float g = tfb_cpu_load(d->dout, d->dout_type, e);
                if (d->pre)
                    g *= tfb_act_slope((int)d->act,
                                       tfb_cpu_load(d->pre, d->pre_type, e) + (d->bias ? d->bias[j] : 0.0f));
                if (d->din) tfb_cpu_store(d->din, d->din_type, e, g);
                acc[j - c0] += g;
            }
        for (int j = c0; j < c1; j++) d->dbias[j] += acc[j - c0];
    }
    return TFB_OK;
}

static tfb_status cpu_residual_add(void *ctx, float *out, const float *a, const float *b, size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return TFB_OK;
}

/* One thread per group of four global indices (kernels/dropout.h); in place is fine for an FP32 out. */
static void dropout_apply(void *out, tfb_dtype t, const float *in, size_t n, float p, tfb_dropout_key key) {
    uint64_t g0, g1;
    tfb_dropout_groups(key, n, &g0, &g1);
#pragma omp parallel for schedule(static)
    for (uint64_t g = g0; g < g1; g++) {
        float f[4];
        tfb_dropout_factors(key, p, g, f);
        for (int q = 0; q < 4; q++) {
            long long e = tfb_dropout_elem(key, n, g, q);
            if (e >= 0) tfb_cpu_store(out, t, (size_t)e, f[q] > 0.0f ? in[e] * f[q] : 0.0f);
        }
    }
}

static tfb_status cpu_dropout_fwd(void *ctx, void *out, tfb_dtype out_type, const float *in, size_t n, float p,
                                  tfb_dropout_key key) {
    (void)ctx;
    if (p > 0.0f) dropout_apply(out, out_type, in, n, p, key);
    else if (out_type != TFB_F32) tfb_cpu_narrow(out, out_type, in, n);
    else if (out != in) memmove(out, in, n * sizeof(float));
    return TFB_OK;
}

/* The backward of dropout is the same mask and scale applied to the incoming gradient. */
static tfb_status cpu_dropout_bwd(void *ctx, float *din, const float *dout, size_t n, float p, tfb_dropout_key key) {
    return cpu_dropout_fwd(ctx, din, TFB_F32, dout, n, p, key);
}

/* The reference is the composition itself, op by op in the order the unfused layer ran them: h = x + bias, h =
 * Dropout(h), h = residual + h, y = LayerNorm(h), then y's narrowed copy. */
static tfb_status cpu_residual_ln_fwd(void *ctx, const tfb_residual_ln_desc *d) {
    size_t n = (size_t)d->rows * d->cols;
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < d->rows; i++)
        for (int j = 0; j < d->cols; j++) {
            size_t e = (size_t)i * d->cols + j;
            float x = tfb_cpu_load(d->x, d->x_type, e);
            d->h[e] = d->bias ? x + d->bias[j] : x;
        }
    TFB_CHECK(cpu_dropout_fwd(ctx, d->h, TFB_F32, d->h, n, d->p, d->key));
    TFB_CHECK(cpu_residual_add(ctx, d->h, d->residual, d->h, n));
    TFB_CHECK(cpu_layernorm_fwd(ctx, d->y, d->mean, d->rstd, d->h, d->gamma, d->beta, d->rows, d->cols, d->eps));
    if (d->y_lp) tfb_cpu_narrow(d->y_lp, d->lp_type, d->y, n);
    return TFB_OK;
}

/* Dropout's backward is its forward's mask and scale, so dx of any type is the forward writing that type. */
static tfb_status cpu_residual_ln_bwd(void *ctx, const tfb_residual_ln_desc *d, float *dh, void *dx, tfb_dtype dx_type,
                                      float *dgamma, float *dbeta, const float *dy) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    TFB_CHECK(cpu_layernorm_bwd(ctx, dh, dgamma, dbeta, dy, d->h, d->mean, d->rstd, d->gamma, d->rows, d->cols));
    return cpu_dropout_fwd(ctx, dx, dx_type, dh, (size_t)d->rows * d->cols, d->p, d->key);
}

/* Attention's softmax and dropout: the reference is the two ops in turn. 16-bit scores are widened into a scratch
 * block, whose softmax is rounded into att and widened back, so the dropout reads the probabilities as stored. */
static tfb_status cpu_attn_softmax_fwd(void *ctx, const tfb_attn_softmax_desc *d) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    size_t n = (size_t)d->rows * d->cols;
    if (d->prob_type == TFB_F32) {
        TFB_CHECK(cpu_softmax_fwd(ctx, d->att, d->in, d->rows, d->cols, d->scale, d->key_len, d->rows_per_key));
        return cpu_dropout_fwd(ctx, d->att_d, d->att_type, d->att, n, d->p, d->key);
    }
    float *s;
    TFB_CHECK_ALLOC(s = (float *)tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_ATTN, d->in, d->prob_type, 0, n));
    TFB_CHECK(cpu_softmax_fwd(ctx, s, s, d->rows, d->cols, d->scale, d->key_len, d->rows_per_key));
    tfb_cpu_narrow(d->att, d->prob_type, s, n);
    TFB_CHECK_ALLOC(s = (float *)tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_ATTN, d->att, d->prob_type, 0, n));
    return cpu_dropout_fwd(ctx, d->att_d, d->att_type, s, n, d->p, d->key);
}

/* A 16-bit datt_d is widened into scratch (an FP32 one is scaled in place), so din may alias it. */
static tfb_status cpu_attn_softmax_bwd(void *ctx, const tfb_attn_softmax_desc *d, void *din, tfb_dtype din_type,
                                       void *datt_d, tfb_dtype datt_type) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    size_t n = (size_t)d->rows * d->cols;
    const float *att;
    float *g;
    TFB_CHECK_ALLOC(att = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_ATTN, d->att, d->prob_type, 0, n));
    TFB_CHECK_ALLOC(g = (float *)tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_ATTN_D, datt_d, datt_type, 0, n));
    TFB_CHECK(cpu_dropout_bwd(ctx, g, g, n, d->p, d->key));
    return cpu_softmax_bwd(ctx, din, din_type, g, att, d->rows, d->cols, d->scale);
}

static tfb_status cpu_xent_fwd(void *ctx, float *loss_sum, const float *logits, const int *labels, int n, int v) {
    (void)ctx;
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0) continue;
        const float *x = logits + (size_t)i * v;
        float mx = -INFINITY;
        double s = 0.0;
        for (int j = 0; j < v; j++) mx = fmaxf(mx, x[j]);
        for (int j = 0; j < v; j++) s += expf(x[j] - mx);
        // cppcheck-suppress invalidFunctionArg ; s >= 1: the largest logit contributes exp(0)
        total += log(s) + mx - x[labels[i]];
    }
    *loss_sum = (float)total;
    return TFB_OK;
}

static tfb_status cpu_xent_bwd(void *ctx, float *dlogits, const float *logits, const int *labels, int n, int v,
                               float dscale) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v;
        float *dx = dlogits + (size_t)i * v;
        if (labels[i] < 0) { memset(dx, 0, (size_t)v * sizeof(float)); continue; }
        float mx = -INFINITY, s = 0.0f;
        for (int j = 0; j < v; j++) mx = fmaxf(mx, x[j]);
        for (int j = 0; j < v; j++) s += expf(x[j] - mx);
        float inv = 1.0f / s;
        for (int j = 0; j < v; j++) dx[j] = expf(x[j] - mx) * inv * dscale;
        dx[labels[i]] -= dscale;
    }
    return TFB_OK;
}

static void adamw_range(float *w, const float *g, float *m, float *v, size_t a, size_t b,
                        const tfb_adamw_hparams *hp, float decay) {
    float c1, c2;
    tfb_adamw_corrections(hp, &c1, &c2);
#pragma omp parallel for schedule(static)
    for (size_t i = a; i < b; i++) tfb_adamw_elem(&w[i], g[i], &m[i], &v[i], hp, decay, c1, c2);
}

static void sgd_range(float *w, const float *g, float *buf, size_t a, size_t b, const tfb_sgd_hparams *hp,
                      float decay) {
#pragma omp parallel for schedule(static)
    for (size_t i = a; i < b; i++) tfb_sgd_elem(&w[i], g[i], &buf[i], hp, decay);
}

static tfb_status cpu_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                            const tfb_adamw_hparams *hp) {
    (void)ctx;
    adamw_range(w, g, m, v, 0, n, hp, hp->weight_decay);
    return TFB_OK;
}

static tfb_status cpu_sgd(void *ctx, float *w, const float *g, float *buf, size_t n, const tfb_sgd_hparams *hp) {
    (void)ctx;
    sgd_range(w, g, buf, 0, n, hp, hp->weight_decay);
    return TFB_OK;
}

/* A pool by stretches: cut k (0 <= k <= 2 n_runs) ends stretch k, which decays when k is odd (inside a run). The
 * runs must be ascending, disjoint and inside the pool. */
static int runs_valid(const uint64_t *runs, int n_runs, size_t n) {
    for (int k = 0; k < 2 * n_runs; k++)
        if (runs[k] > n || (k > 0 && runs[k] < runs[k - 1])) return 0;
    return 1;
}

static size_t pool_cut(const uint64_t *runs, int n_runs, size_t n, int k) {
    return k < 2 * n_runs ? (size_t)runs[k] : n;
}

/* The 16-bit weight copy, when asked for (the CPU writes it in a second pass; a GPU in the update's). */
static tfb_status pool_lowp(const float *w, size_t n, void *w_lp, tfb_dtype lp_type) {
    if (w_lp) tfb_cpu_narrow(w_lp, lp_type, w, n);
    return TFB_OK;
}

static tfb_status cpu_adamw_pool(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                                 const uint64_t *runs, int n_runs, const tfb_adamw_hparams *hp, void *w_lp,
                                 tfb_dtype lp_type) {
    (void)ctx;
    if (!runs_valid(runs, n_runs, n)) return TFB_ERR_ARG;
    for (int k = 0; k <= 2 * n_runs; k++) {
        size_t a = k ? pool_cut(runs, n_runs, n, k - 1) : 0;
        adamw_range(w, g, m, v, a, pool_cut(runs, n_runs, n, k), hp, k % 2 ? hp->weight_decay : 0.0f);
    }
    return pool_lowp(w, n, w_lp, lp_type);
}

static tfb_status cpu_sgd_pool(void *ctx, float *w, const float *g, float *buf, size_t n, const uint64_t *runs,
                               int n_runs, const tfb_sgd_hparams *hp, void *w_lp, tfb_dtype lp_type) {
    (void)ctx;
    if (!runs_valid(runs, n_runs, n)) return TFB_ERR_ARG;
    for (int k = 0; k <= 2 * n_runs; k++) {
        size_t a = k ? pool_cut(runs, n_runs, n, k - 1) : 0;
        sgd_range(w, g, buf, a, pool_cut(runs, n_runs, n, k), hp, k % 2 ? hp->weight_decay : 0.0f);
    }
    return pool_lowp(w, n, w_lp, lp_type);
}

static float load_elem(const void *p, tfb_dtype t, size_t i) {
    if (t == TFB_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == TFB_F16 ? tfb_f16_to_f32(h) : tfb_bf16_to_f32(h);
}

static tfb_status cpu_cast(void *ctx, void *dst, tfb_dtype dst_type, const void *src, tfb_dtype src_type,
                           size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) tfb_cpu_store(dst, dst_type, i, load_elem(src, src_type, i));
    return TFB_OK;
}

static tfb_status cpu_check_finite(void *ctx, const float *x, size_t n, int *all_finite) {
    (void)ctx;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    *all_finite = !bad;
    return TFB_OK;
}

void tfb_cpu_ops_install(tfb_backend *be) {
    be->embedding_fwd = cpu_embedding_fwd;
    be->embedding_bwd = cpu_embedding_bwd;
    be->embedding_bwd_shard = cpu_embedding_bwd_shard;
    be->layernorm_fwd = cpu_layernorm_fwd;
    be->layernorm_bwd = cpu_layernorm_bwd;
    be->residual_ln_fwd = cpu_residual_ln_fwd;
    be->residual_ln_bwd = cpu_residual_ln_bwd;
    be->softmax_fwd = cpu_softmax_fwd;
    be->softmax_bwd = cpu_softmax_bwd;
    be->attn_softmax_fwd = cpu_attn_softmax_fwd;
    be->attn_softmax_bwd = cpu_attn_softmax_bwd;
    be->act_fwd = cpu_act_fwd;
    be->act_bwd = cpu_act_bwd;
    be->bias_add = cpu_bias_add;
    be->bias_grad = cpu_bias_grad;
    be->residual_add = cpu_residual_add;
    be->bias_act_fwd = cpu_bias_act_fwd;
    be->act_bias_bwd = cpu_act_bias_bwd;
    be->dropout_fwd = cpu_dropout_fwd;
    be->dropout_bwd = cpu_dropout_bwd;
    be->xent_fwd = cpu_xent_fwd;
    be->xent_bwd = cpu_xent_bwd;
    be->adamw = cpu_adamw;
    be->sgd = cpu_sgd;
    be->adamw_pool = cpu_adamw_pool;
    be->sgd_pool = cpu_sgd_pool;
    be->cast = cpu_cast;
    be->check_finite = cpu_check_finite;
}
