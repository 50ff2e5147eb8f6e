/* cpu_attn.c — the CPU backend's fused attention (backend.h, tfb_attn_desc): the reference the CUDA kernels are
 * checked against, in plain loops, one (sample, head) pair per OpenMP iteration, each thread's FP32 copy of its
 * pair carved from one scratch slot of the backend. It computes what the interface states in the order a reader
 * can follow: the scores of a row, their maximum and log-sum-exp, the dropped-out probabilities rounded to the
 * type where they meet V. It is deliberately neither tiled like the GPU kernels nor fast: bert_layer.c takes it
 * only when --attention fused is asked for on the CPU.
 */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "cpu.h"
#include "../dropout.h"

static int cpu_attn_supports(void *ctx, const tfb_attn_desc *d) {
    (void)ctx;
    (void)d;
    return 1;
}

/* The dropout factor of probability (b, h, i, j): 0 where dropped, 1 / (1 - p) where kept. */
static float attn_factor(const tfb_attn_desc *d, int b, int h, int i, int j) {
    if (d->p == 0.0f) return 1.0f;
    uint64_t idx = d->key.offset + (((uint64_t)b * d->heads_total + (uint64_t)h) * d->seq + (uint64_t)i) * d->seq +
                   (uint64_t)j;
    float f[4];
    tfb_dropout_factors(d->key, d->p, idx >> 2, f);
    return f[idx & 3];
}

/* x rounded to type t (a GEMM operand's precision), as FP32 */
static float attn_round(tfb_dtype t, float x) {
    uint16_t h;
    if (t == TFB_F32) return x;
    tfb_cpu_store(&h, t, 0, x);
    return tfb_cpu_load(&h, t, 0);
}

/* One (sample, head) block of the operands, widened to FP32: Q, K, V (s, d) each from qkv, and for the backward
 * the context and its gradient (s, d) from their token-major columns. */
typedef struct {
    float *q, *k, *v, *o, *dout;
} attn_block;

static void attn_block_load(const tfb_attn_desc *d, int b, int h, const void *dctx, attn_block *a) {
    int s = d->seq, hd = d->head_dim;
    size_t sd = (size_t)s * hd, blk = sd * d->heads * d->batch, at = ((size_t)b * d->heads + h) * sd;
    for (size_t e = 0; e < sd; e++) {
        a->q[e] = tfb_cpu_load(d->qkv, d->type, at + e);
        a->k[e] = tfb_cpu_load(d->qkv, d->type, blk + at + e);
        a->v[e] = tfb_cpu_load(d->qkv, d->type, 2 * blk + at + e);
    }
    if (!dctx) return;
    for (int i = 0; i < s; i++)
        for (int c = 0; c < hd; c++) {
            size_t t = ((size_t)b * s + i) * d->ldc + (size_t)h * hd + c;
            a->o[(size_t)i * hd + c] = tfb_cpu_load(d->ctx, d->type, t);
            a->dout[(size_t)i * hd + c] = tfb_cpu_load(dctx, d->type, t);
        }
}

static float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += x[c] * y[c];
    return s;
}

/* Keys sample b's queries see, clamped to 1 .. seq as the CUDA kernels clamp them. */
static int key_count(const tfb_attn_desc *d, int b) {
    int n = d->key_len ? d->key_len[b] : d->seq;
    return n < 1 ? 1 : n > d->seq ? d->seq : n;
}

/* Work room of `per` floats for each OpenMP thread, carved from the backend's scratch slot FUSED (NULL when out of
 * memory); thread t's starts at t * per. */
static float *attn_scratch(void *ctx, size_t per) {
    return tfb_cpu_scratch(ctx, TFB_CPU_SLOT_FUSED, per * (size_t)omp_get_max_threads());
}

/* Row i of block (b, h): its log-sum-exp, and the context row from the dropped-out, rounded probabilities. */
static void attn_row_fwd(const tfb_attn_desc *d, int b, int h, int i, const attn_block *a, float *sc, float *o) {
    int hd = d->head_dim, n = key_count(d, b);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < n; j++) {
        sc[j] = d->scale * dot(a->q + (size_t)i * hd, a->k + (size_t)j * hd, hd);
        m = fmaxf(m, sc[j]);
    }
    for (int j = 0; j < n; j++) l += expf(sc[j] - m);
    // cppcheck-suppress invalidFunctionArg ; l >= 1: the largest score contributes exp(0)
    float lse = m + logf(l);
    d->lse[((size_t)b * d->heads + h) * d->seq + i] = lse;
    for (int c = 0; c < hd; c++) o[c] = 0.0f;
    for (int j = 0; j < n; j++) {
        float pd = attn_round(d->type, attn_factor(d, b, h, i, j) * expf(sc[j] - lse));
        for (int c = 0; c < hd; c++) o[c] += pd * a->v[(size_t)j * hd + c];
    }
}

static tfb_status cpu_attn_fwd(void *ctx, const tfb_attn_desc *d) {
    if (!tfb_attn_desc_valid(d)) return TFB_ERR_ARG;
    int s = d->seq, hd = d->head_dim;
    size_t per = (size_t)3 * s * hd + s + hd;
    float *room;
    TFB_CHECK_ALLOC(room = attn_scratch(ctx, per));
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < d->batch * d->heads; bh++) {
        int b = bh / d->heads, h = bh % d->heads;
        float *buf = room + per * (size_t)omp_get_thread_num();
        attn_block a = {.q = buf, .k = buf + (size_t)s * hd, .v = buf + (size_t)2 * s * hd};
        float *sc = buf + (size_t)3 * s * hd, *o = sc + s;
        attn_block_load(d, b, h, NULL, &a);
        for (int i = 0; i < s; i++) {
            attn_row_fwd(d, b, h, i, &a, sc, o);
            for (int c = 0; c < hd; c++)
                tfb_cpu_store(d->ctx, d->type, ((size_t)b * s + i) * d->ldc + (size_t)h * hd + c, o[c]);
        }
    }
    return TFB_OK;
}

/* Row i's contribution to dQ (its own row), dK and dV (every key it sees). */
static void attn_row_bwd(const tfb_attn_desc *d, int b, int h, int i, const attn_block *a, float rowdot,
                         float *dq, float *dk, float *dv) {
    int hd = d->head_dim, n = key_count(d, b);
    const float *qi = a->q + (size_t)i * hd, *doi = a->dout + (size_t)i * hd;
    float lse = d->lse[((size_t)b * d->heads + h) * d->seq + i];
    for (int j = 0; j < n; j++) {
        const float *kj = a->k + (size_t)j * hd;
        float p = expf(d->scale * dot(qi, kj, hd) - lse), f = attn_factor(d, b, h, i, j);
        float pd = attn_round(d->type, f * p), dpd = dot(doi, a->v + (size_t)j * hd, hd);
        float ds = attn_round(d->type, p * (f * dpd - rowdot));
        for (int c = 0; c < hd; c++) {
            dq[(size_t)i * hd + c] += ds * kj[c];
            dk[(size_t)j * hd + c] += ds * qi[c];
            dv[(size_t)j * hd + c] += pd * doi[c];
        }
    }
}

/* g's (s, d) block of sample b, head h: x * scale rounded into its columns. */
static void attn_store(const tfb_attn_desc *d, const tfb_attn_grads *g, void *out, int b, int h, const float *x,
                       float scale) {
    int s = d->seq, hd = d->head_dim;
    for (int i = 0; i < s; i++)
        for (int c = 0; c < hd; c++)
            tfb_cpu_store(out, d->type, ((size_t)b * s + i) * g->ldd + (size_t)h * hd + c,
                          scale * x[(size_t)i * hd + c]);
}

static tfb_status cpu_attn_bwd(void *ctx, const tfb_attn_desc *d, const tfb_attn_grads *g) {
    if (!tfb_attn_desc_valid(d) || !tfb_attn_grads_valid(d, g)) return TFB_ERR_ARG;
    int s = d->seq, hd = d->head_dim;
    size_t sd = (size_t)s * hd;
    float *room;
    TFB_CHECK_ALLOC(room = attn_scratch(ctx, 8 * sd));
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < d->batch * d->heads; bh++) {
        int b = bh / d->heads, h = bh % d->heads;
        float *buf = room + 8 * sd * (size_t)omp_get_thread_num();
        attn_block a = {.q = buf, .k = buf + sd, .v = buf + 2 * sd, .o = buf + 3 * sd, .dout = buf + 4 * sd};
        float *dq = buf + 5 * sd, *dk = buf + 6 * sd, *dv = buf + 7 * sd, *rowdot = g->rowdot + (size_t)bh * s;
        memset(dq, 0, 3 * sd * sizeof(float)); /* dq, dk, dv: the rows add into them */
        attn_block_load(d, b, h, g->dctx, &a);
        for (int i = 0; i < s; i++) {
            rowdot[i] = dot(a.dout + (size_t)i * hd, a.o + (size_t)i * hd, hd);
            attn_row_bwd(d, b, h, i, &a, rowdot[i], dq, dk, dv);
        }
        attn_store(d, g, g->dq, b, h, dq, d->scale);
        attn_store(d, g, g->dk, b, h, dk, d->scale);
        attn_store(d, g, g->dv, b, h, dv, 1.0f);
    }
    return TFB_OK;
}

void tfb_cpu_attn_install(tfb_backend *be) {
    be->attn_fused_supports = cpu_attn_supports;
    be->attn_fused_fwd = cpu_attn_fwd;
    be->attn_fused_bwd = cpu_attn_bwd;
}
