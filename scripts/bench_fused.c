/* bench_fused.c — times each fused op of the BERT layer against the separate ops it replaces, at bert-large's layer
 * shapes (BATCH x sequence 128, hidden 1024, 16 heads of 64, FFN 4096, dropout 0.1), on one backend. Each figure is
 * the median of 5 samples of 20 back-to-back calls, the backend synchronised at each sample's edges, after one
 * warm-up sample; it is the time per call. Inputs an op overwrites in place (attention's incoming gradient, which
 * dropout's backward scales by 1 / (1 - p) each call) are restored before each sample, outside the clock, so every
 * sample sees values of the same range. The last column is the fused op's least traffic (each input read once,
 * each output written once) over its time: how near it runs to the memory's bandwidth. Two rows time a GEMM with
 * the op reading its result, the result written in 16 bits against FP32 (the FFN up-projection with GELU, the QKV
 * projection with its permutes to heads; FF2's input gradient with GELU's backward); they have no traffic
 * column, the GEMM's time being mostly arithmetic.
 * The p16 rows time attention's softmax on 16-bit scores, probabilities and gradient against the FP32 ones, and
 * the x16 and dx16 rows a sublayer tail reading the projection's 16-bit result and writing its 16-bit gradient
 * against FP32 (and a cast). The grouped rows time attention's GEMMs reading and writing token-major tensors
 * (GEMMs grouped by sample) against head-major ones with the permutes between. The last two, on a GPU, time the
 * fused attention (attn_fused_fwd/bwd) against the layer's unfused 16-bit sequence of GEMMs and softmax passes.
 * It does not check values: tests/test_ops (CPU) and tests/gpu_check (device against CPU) do.
 * usage: bench_fused [cpu|cuda] [BATCH] [fp16|bf16]   (defaults: cuda 32 fp16)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../kernels/backend.h"
#include "../bench/clock.h"
#include "../bench/stats.h"

enum { SEQ = 128, HIDDEN = 1024, HEADS = 16, FFN = 4096, SAMPLES = 5, CALLS = 20 };

typedef struct {
    tfb_backend *be;
    tfb_dtype t;                  /* the 16-bit type the fused ops write for the GEMMs */
    int batch, n;                 /* n = batch * SEQ tokens */
    size_t nh, nf, na;            /* elements of (n, HIDDEN), (n, FFN) and (batch, HEADS, SEQ, SEQ) */
    float *x, *res, *h, *y, *dy, *dh, *dx;  /* (n, HIDDEN) each */
    void *y16, *dy16;                        /* (n, HIDDEN) in t */
    float *bias, *gamma, *beta, *dgamma, *dbeta, *dbias; /* (HIDDEN) each */
    float *mean, *rstd;                      /* (n) */
    float *scores, *att, *datt, *datt0;      /* (batch, HEADS, SEQ, SEQ) each; datt0: datt's first values */
    void *att16, *din16, *p16, *datt16;      /* (batch, HEADS, SEQ, SEQ) in t; p16: scores, then probabilities */
    float *qkv, *qkv_b;                      /* (n, 3 HIDDEN), (3 HIDDEN) */
    void *heads16;                           /* 3 x (batch, HEADS, SEQ, 64) in t: Q, K, V head-major */
    float *pre, *dout, *dpre, *fbias;        /* (n, FFN) x 3, (FFN) */
    void *dpre16;                            /* (n, FFN) in t */
    void *x16, *w1_16, *wqkv16;              /* (n, HIDDEN), (FFN, HIDDEN), (3 HIDDEN, HIDDEN) in t: GEMM operands */
    void *u16, *g16, *qkv16;                 /* (n, FFN), (n, FFN), (n, 3 HIDDEN) in t: GEMM results, GELU output */
    float *lse, *rowdot;                     /* (batch, HEADS, SEQ): fused attention's row statistics */
} bf;

typedef tfb_status (*bf_fn)(bf *b);

static tfb_status restore_datt(bf *b) {
    return b->be->copy_d2d(b->be->ctx, b->datt, b->datt0, b->na * sizeof(float));
}

static const tfb_dropout_key KEY = {.seed = 1, .site = 2, .step = 3, .offset = 0};
static const float P = 0.1f;

#define BF_CHECK(call)                                                                              \
    do {                                                                                            \
        if ((call) != TFB_OK) {                                                                     \
            fprintf(stderr, "bench_fused: %s failed at %s:%d\n", #call, __FILE__, __LINE__);        \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* ---- the pairs: fused op, then the separate ops it replaces ---- */

static tfb_residual_ln_desc rln_desc(const bf *b) {
    return (tfb_residual_ln_desc){.h = b->h, .y = b->y, .y_lp = b->y16, .lp_type = b->t, .mean = b->mean,
                                  .rstd = b->rstd, .x = b->x, .bias = b->bias, .residual = b->res,
                                  .gamma = b->gamma, .beta = b->beta, .rows = b->n, .cols = HIDDEN, .eps = 1e-12f,
                                  .p = P, .key = KEY};
}
static tfb_status rln_fwd_fused(bf *b) {
    tfb_residual_ln_desc d = rln_desc(b);
    return b->be->residual_ln_fwd(b->be->ctx, &d);
}
static tfb_status rln_fwd_separate(bf *b) {
    void *c = b->be->ctx;
    TFB_CHECK(b->be->bias_add(c, b->x, b->bias, b->n, HIDDEN));
    TFB_CHECK(b->be->dropout_fwd(c, b->h, TFB_F32, b->x, b->nh, P, KEY));
    TFB_CHECK(b->be->residual_add(c, b->h, b->h, b->res, b->nh));
    TFB_CHECK(b->be->layernorm_fwd(c, b->y, b->mean, b->rstd, b->h, b->gamma, b->beta, b->n, HIDDEN, 1e-12f));
    return b->be->cast(c, b->y16, b->t, b->y, TFB_F32, b->nh);
}
static tfb_status rln_fwd_x16(bf *b) { /* the projection's result as its 16-bit GEMM wrote it */
    tfb_residual_ln_desc d = rln_desc(b);
    d.x = b->x16, d.x_type = b->t;
    return b->be->residual_ln_fwd(b->be->ctx, &d);
}
static tfb_status rln_bwd_fused(bf *b) {
    tfb_residual_ln_desc d = rln_desc(b);
    return b->be->residual_ln_bwd(b->be->ctx, &d, b->dh, b->dx, TFB_F32, b->dgamma, b->dbeta, b->dy);
}
/* the layer's sublayer backward now: dx written as the projection's 16-bit operand, its bias gradient summed over
 * it; before: dx in FP32, then cast with the bias gradient summed in the same pass */
static tfb_status rln_bwd_dx16(bf *b) {
    tfb_residual_ln_desc d = rln_desc(b);
    TFB_CHECK(b->be->residual_ln_bwd(b->be->ctx, &d, b->dh, b->dy16, b->t, b->dgamma, b->dbeta, b->dy));
    tfb_act_bias_bwd_desc g = {.dbias = b->dbias, .dout = b->dy16, .dout_type = b->t, .n = b->n, .h = HIDDEN};
    return b->be->act_bias_bwd(b->be->ctx, &g);
}
static tfb_status rln_bwd_dx32(bf *b) {
    tfb_residual_ln_desc d = rln_desc(b);
    TFB_CHECK(b->be->residual_ln_bwd(b->be->ctx, &d, b->dh, b->dx, TFB_F32, b->dgamma, b->dbeta, b->dy));
    tfb_act_bias_bwd_desc g = {.din = b->dy16, .din_type = b->t, .dbias = b->dbias, .dout = b->dx, .n = b->n,
                               .h = HIDDEN};
    return b->be->act_bias_bwd(b->be->ctx, &g);
}
static tfb_status rln_bwd_separate(bf *b) {
    TFB_CHECK(b->be->layernorm_bwd(b->be->ctx, b->dh, b->dgamma, b->dbeta, b->dy, b->h, b->mean, b->rstd, b->gamma,
                                   b->n, HIDDEN));
    return b->be->dropout_bwd(b->be->ctx, b->dx, b->dh, b->nh, P, KEY);
}

static tfb_attn_softmax_desc attn_desc(const bf *b) {
    return (tfb_attn_softmax_desc){.att = b->att, .att_d = b->att16, .att_type = b->t, .in = b->scores,
                                   .rows = b->batch * HEADS * SEQ, .cols = SEQ, .rows_per_key = HEADS * SEQ,
                                   .scale = 0.125f, .p = P, .key = KEY};
}
static tfb_status attn_fwd_fused(bf *b) {
    tfb_attn_softmax_desc d = attn_desc(b);
    return b->be->attn_softmax_fwd(b->be->ctx, &d);
}
static tfb_status attn_fwd_separate(bf *b) {
    TFB_CHECK(b->be->softmax_fwd(b->be->ctx, b->att, b->scores, b->batch * HEADS * SEQ, SEQ, 0.125f, NULL, 1));
    return b->be->dropout_fwd(b->be->ctx, b->att16, b->t, b->att, b->na, P, KEY);
}
static tfb_status attn_bwd_fused(bf *b) {
    tfb_attn_softmax_desc d = attn_desc(b);
    return b->be->attn_softmax_bwd(b->be->ctx, &d, b->din16, b->t, b->datt, TFB_F32);
}
/* the BERT layer's 16-bit form: scores and probabilities in t, in place */
static tfb_attn_softmax_desc attn_desc16(const bf *b) {
    tfb_attn_softmax_desc d = attn_desc(b);
    d.att = b->p16, d.in = b->p16, d.prob_type = b->t;
    return d;
}
static tfb_status attn16_fwd(bf *b) {
    tfb_attn_softmax_desc d = attn_desc16(b);
    return b->be->attn_softmax_fwd(b->be->ctx, &d);
}
static tfb_status attn16_bwd(bf *b) {
    tfb_attn_softmax_desc d = attn_desc16(b);
    return b->be->attn_softmax_bwd(b->be->ctx, &d, b->din16, b->t, b->datt16, b->t); /* datt16 is only read */
}
static tfb_status attn_bwd_separate(bf *b) {
    TFB_CHECK(b->be->dropout_bwd(b->be->ctx, b->datt, b->datt, b->na, P, KEY));
    return b->be->softmax_bwd(b->be->ctx, b->din16, b->t, b->datt, b->att, b->batch * HEADS * SEQ, SEQ, 0.125f);
}

/* Q, K and V to head-major in t, each with its third of the bias (NULL: none) */
static tfb_status qkv_heads(bf *b, const float *bias) {
    size_t es = tfb_dtype_size(b->t), d = HIDDEN / HEADS;
    for (int i = 0; i < 3; i++)
        TFB_CHECK(b->be->permute_0213(b->be->ctx, (char *)b->heads16 + i * b->nh * es, b->t, SEQ * d,
                                      b->qkv + i * HIDDEN, TFB_F32, 3 * HIDDEN, bias ? bias + i * HIDDEN : NULL,
                                      b->batch, SEQ, HEADS, (int)d));
    return TFB_OK;
}
static tfb_status heads_fused(bf *b) { return qkv_heads(b, b->qkv_b); }
static tfb_status heads_separate(bf *b) {
    TFB_CHECK(b->be->bias_add(b->be->ctx, b->qkv, b->qkv_b, b->n, 3 * HIDDEN));
    return qkv_heads(b, NULL);
}

/* GELU's backward (pre NULL: the cast) from dout of type dt into din of type t, its bias gradient into dbias */
static tfb_status gelu_bwd(bf *b, void *din, tfb_dtype t, float *dbias, const void *dout, tfb_dtype dt,
                           const void *pre, tfb_dtype pt, int h) {
    tfb_act_bias_bwd_desc d = {.act = TFB_ACT_GELU, .din = din, .din_type = t, .dbias = dbias, .dout = dout,
                               .dout_type = dt, .pre = pre, .pre_type = pt, .bias = b->fbias, .n = b->n, .h = h};
    return b->be->act_bias_bwd(b->be->ctx, &d);
}

static tfb_status cast_bias_fused(bf *b) {
    return gelu_bwd(b, b->dy16, b->t, b->dbias, b->dy, TFB_F32, NULL, TFB_F32, HIDDEN);
}
static tfb_status cast_bias_separate(bf *b) {
    TFB_CHECK(b->be->bias_grad(b->be->ctx, b->dbias, b->dy, b->n, HIDDEN));
    return b->be->cast(b->be->ctx, b->dy16, b->t, b->dy, TFB_F32, b->nh);
}

static tfb_status gelu_bwd_fused(bf *b) {
    return gelu_bwd(b, b->dpre16, b->t, b->fbias, b->dout, TFB_F32, b->pre, TFB_F32, FFN);
}
static tfb_status gelu_bwd_separate(bf *b) {
    TFB_CHECK(gelu_bwd(b, b->dpre, TFB_F32, b->fbias, b->dout, TFB_F32, b->pre, TFB_F32, FFN));
    return b->be->cast(b->be->ctx, b->dpre16, b->t, b->dpre, TFB_F32, b->nf);
}

/* out (n, rows of w) = x16 w^T, in ct */
static tfb_status gemm_xwt(bf *b, const void *w, int out_f, void *out, tfb_dtype ct) {
    tfb_gemm_desc d = {.trans_b = 1, .m = b->n, .n = out_f, .k = HIDDEN, .alpha = 1.0f, .a = b->x16, .lda = HIDDEN,
                       .b = w, .ldb = HIDDEN, .c = out, .ldc = out_f, .batch = 1, .in_type = b->t, .c_type = ct};
    return b->be->gemm(b->be->ctx, &d);
}
static tfb_status ff1_c16(bf *b) {
    TFB_CHECK(gemm_xwt(b, b->w1_16, FFN, b->u16, b->t));
    return b->be->bias_act_fwd(b->be->ctx, TFB_ACT_GELU, b->g16, b->t, b->u16, b->t, b->fbias, b->n, FFN);
}
static tfb_status ff1_c32(bf *b) {
    TFB_CHECK(gemm_xwt(b, b->w1_16, FFN, b->pre, TFB_F32));
    return b->be->bias_act_fwd(b->be->ctx, TFB_ACT_GELU, b->g16, b->t, b->pre, TFB_F32, b->fbias, b->n, FFN);
}
/* the QKV projection and its three permutes to heads, from its result in type ct (at out) */
static tfb_status qkv_from(bf *b, void *out, tfb_dtype ct) {
    size_t es = tfb_dtype_size(b->t), cs = tfb_dtype_size(ct), d = HIDDEN / HEADS;
    TFB_CHECK(gemm_xwt(b, b->wqkv16, 3 * HIDDEN, out, ct));
    for (int i = 0; i < 3; i++)
        TFB_CHECK(b->be->permute_0213(b->be->ctx, (char *)b->heads16 + i * b->nh * es, b->t, SEQ * d,
                                      (char *)out + (size_t)i * HIDDEN * cs, ct, 3 * HIDDEN, b->qkv_b + i * HIDDEN,
                                      b->batch, SEQ, HEADS, (int)d));
    return TFB_OK;
}
static tfb_status qkv_c16(bf *b) { return qkv_from(b, b->qkv16, b->t); }

/* FF2's input gradient dy16 (n, HIDDEN) W2 (HIDDEN, FFN) in type ct at out, then GELU's backward into dpre16: in
 * 16 bits in place over the GEMM's result with a 16-bit pre (the layer now), or from FP32 with an FP32 pre */
static tfb_status ff2_dx_from(bf *b, void *out, tfb_dtype ct) {
    tfb_gemm_desc d = {.m = b->n, .n = FFN, .k = HIDDEN, .alpha = 1.0f, .a = b->dy16, .lda = HIDDEN, .b = b->w1_16,
                       .ldb = FFN, .c = out, .ldc = FFN, .batch = 1, .in_type = b->t, .c_type = ct};
    TFB_CHECK(b->be->gemm(b->be->ctx, &d));
    if (ct == TFB_F32) return gelu_bwd(b, b->dpre16, b->t, b->fbias, out, ct, b->pre, TFB_F32, FFN);
    return gelu_bwd(b, b->dpre16, b->t, b->fbias, out, ct, b->u16, b->t, FFN);
}
static tfb_status ff2_dx_c16(bf *b) { return ff2_dx_from(b, b->dpre16, b->t); }
static tfb_status ff2_dx_c32(bf *b) { return ff2_dx_from(b, b->dpre, TFB_F32); }
static tfb_status qkv_c32(bf *b) { return qkv_from(b, b->qkv, TFB_F32); }

/* Attention's GEMMs over (sample, head) pairs in t: an operand's matrix (b, i) at p + b outer + i stride, rows ld
 * apart. Head-major: (batch, HEADS, SEQ, HD); scores: (batch, HEADS, SEQ, SEQ); token-major: columns of (n, ld). */
enum { HD = HIDDEN / HEADS };
typedef struct {
    const void *p;
    int ld;
    long long stride, outer;
} bf_op;
static bf_op hm_op(const void *p) { return (bf_op){p, HD, SEQ * HD, HEADS * SEQ * HD}; }
static bf_op sc_op(const void *p) { return (bf_op){p, SEQ, SEQ * SEQ, HEADS * SEQ * SEQ}; }
static bf_op tok_op(const bf *b, const void *p, int col, int ld) {
    return (bf_op){(const char *)p + (size_t)col * tfb_dtype_size(b->t), ld, HD, (long long)SEQ * ld};
}
/* grouped by sample, as the BERT layer calls it (all head-major: the backend runs one strided batch) */
static tfb_status att_gemm(bf *b, int ta, int tb, int m, int n, int k, bf_op x, bf_op y, bf_op c) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .a = x.p, .lda = x.ld,
                       .stride_a = x.stride, .outer_a = x.outer, .b = y.p, .ldb = y.ld, .stride_b = y.stride,
                       .outer_b = y.outer, .c = (void *)c.p, .ldc = c.ld, .stride_c = c.stride, .outer_c = c.outer,
                       .batch = b->batch * HEADS, .batch_inner = HEADS, .in_type = b->t, .c_type = b->t};
    return b->be->gemm(b->be->ctx, &d);
}
/* head-major (batch, HEADS, SEQ, HD) at hm -> token-major columns col.. of (n, ld) at tok, and back */
static tfb_status from_hm(bf *b, void *tok, int col, int ld, const void *hm) {
    return b->be->permute_0213(b->be->ctx, (char *)tok + (size_t)col * tfb_dtype_size(b->t), b->t, (size_t)ld, hm,
                               b->t, SEQ * HD, NULL, b->batch, HEADS, SEQ, HD);
}
/* V, K, Q: blocks 2, 1, 0 of heads16; the probabilities (and their gradient) p16; scratch: din16 (2 x nh fits) */
static const void *hm_block(const bf *b, int q) { return (const char *)b->heads16 + q * b->nh * tfb_dtype_size(b->t); }
static void *scratch_block(const bf *b, int q) { return (char *)b->din16 + q * b->nh * tfb_dtype_size(b->t); }

/* the context P V written token-major into y16 by grouped GEMMs, against head-major and a permute */
static tfb_status ctx_tokens(bf *b) {
    return att_gemm(b, 0, 0, SEQ, HD, SEQ, sc_op(b->p16), hm_op(hm_block(b, 2)), tok_op(b, b->y16, 0, HIDDEN));
}
static tfb_status ctx_heads(bf *b) {
    TFB_CHECK(att_gemm(b, 0, 0, SEQ, HD, SEQ, sc_op(b->p16), hm_op(hm_block(b, 2)), hm_op(scratch_block(b, 0))));
    return from_hm(b, b->y16, 0, HIDDEN, scratch_block(b, 0));
}
/* attention's backward GEMMs: dP = dO V^T (into att16), dV = P^T dO, dQ = dS K, dK = dS^T Q, dO (dy16) read and
 * dQ, dK, dV (qkv16) written token-major, against one permute to heads and three back */
static tfb_status att_bwd_tokens(bf *b) {
    bf_op dout = tok_op(b, b->dy16, 0, HIDDEN), p = sc_op(b->p16);
    TFB_CHECK(att_gemm(b, 0, 1, SEQ, SEQ, HD, dout, hm_op(hm_block(b, 2)), sc_op(b->att16)));
    TFB_CHECK(att_gemm(b, 1, 0, SEQ, HD, SEQ, p, dout, tok_op(b, b->qkv16, 2 * HIDDEN, 3 * HIDDEN)));
    TFB_CHECK(att_gemm(b, 0, 0, SEQ, HD, SEQ, p, hm_op(hm_block(b, 1)), tok_op(b, b->qkv16, 0, 3 * HIDDEN)));
    return att_gemm(b, 1, 0, SEQ, HD, SEQ, p, hm_op(hm_block(b, 0)), tok_op(b, b->qkv16, HIDDEN, 3 * HIDDEN));
}
static tfb_status att_bwd_heads(bf *b) {
    bf_op dout = hm_op(scratch_block(b, 0)), p = sc_op(b->p16), out = hm_op(scratch_block(b, 1));
    TFB_CHECK(b->be->permute_0213(b->be->ctx, scratch_block(b, 0), b->t, SEQ * HD, b->dy16, b->t, HIDDEN, NULL,
                                  b->batch, SEQ, HEADS, HD));
    TFB_CHECK(att_gemm(b, 0, 1, SEQ, SEQ, HD, dout, hm_op(hm_block(b, 2)), sc_op(b->att16)));
    TFB_CHECK(att_gemm(b, 1, 0, SEQ, HD, SEQ, p, dout, out));
    TFB_CHECK(from_hm(b, b->qkv16, 2 * HIDDEN, 3 * HIDDEN, out.p));
    TFB_CHECK(att_gemm(b, 0, 0, SEQ, HD, SEQ, p, hm_op(hm_block(b, 1)), out));
    TFB_CHECK(from_hm(b, b->qkv16, 0, 3 * HIDDEN, out.p));
    TFB_CHECK(att_gemm(b, 1, 0, SEQ, HD, SEQ, p, hm_op(hm_block(b, 0)), out));
    return from_hm(b, b->qkv16, HIDDEN, 3 * HIDDEN, out.p);
}

/* fused attention (one op, no (s, s) tensors) against the layer's unfused 16-bit sequence: forward, the scores'
 * GEMM, softmax + dropout in place and P V into tokens; backward, the softmax's backward and the four GEMMs */
static tfb_attn_desc fused_desc(const bf *b) {
    return (tfb_attn_desc){.qkv = b->heads16, .ctx = b->y16, .ldc = HIDDEN, .lse = b->lse, .batch = b->batch,
                           .heads = HEADS, .heads_total = HEADS, .seq = SEQ, .head_dim = HD, .type = b->t,
                           .scale = 0.125f, .p = P, .key = KEY};
}
static tfb_status attn_fused_fwd(bf *b) {
    tfb_attn_desc d = fused_desc(b);
    return b->be->attn_fused_fwd(b->be->ctx, &d);
}
static tfb_status attn_unfused_fwd(bf *b) {
    TFB_CHECK(att_gemm(b, 0, 1, SEQ, SEQ, HD, hm_op(hm_block(b, 0)), hm_op(hm_block(b, 1)), sc_op(b->p16)));
    TFB_CHECK(attn16_fwd(b));
    return ctx_tokens(b);
}
static tfb_status attn_fused_bwd(bf *b) { /* after attn_fused_fwd has written lse */
    tfb_attn_desc d = fused_desc(b);
    size_t es = tfb_dtype_size(b->t);
    tfb_attn_grads g = {.dctx = b->dy16, .dq = b->qkv16, .dk = (char *)b->qkv16 + HIDDEN * es,
                        .dv = (char *)b->qkv16 + 2 * HIDDEN * es, .ldd = 3 * HIDDEN, .rowdot = b->rowdot};
    return b->be->attn_fused_bwd(b->be->ctx, &d, &g);
}
static tfb_status attn_unfused_bwd(bf *b) {
    TFB_CHECK(attn16_bwd(b));
    return att_bwd_tokens(b);
}

/* ---- buffers and timing ---- */

/* n floats on the backend, standard normal values from stream `id` */
static float *bf_normal(bf *b, size_t n, uint32_t id) {
    float *p = b->be->alloc(b->be->ctx, n * sizeof(float));
    if (!p) { fprintf(stderr, "bench_fused: out of memory (%zu bytes)\n", n * sizeof(float)); exit(1); }
    BF_CHECK(b->be->normal_fill(b->be->ctx, p, 1, n, 0, tfb_philox_key_make(7, id)));
    return p;
}
static void *bf_lp(bf *b, size_t n) {
    void *p = b->be->alloc(b->be->ctx, n * tfb_dtype_size(b->t));
    if (!p) { fprintf(stderr, "bench_fused: out of memory (%zu elements)\n", n); exit(1); }
    return p;
}

static void bf_alloc(bf *b) {
    uint32_t id = 0;
    b->n = b->batch * SEQ, b->nh = (size_t)b->n * HIDDEN, b->nf = (size_t)b->n * FFN;
    b->na = (size_t)b->batch * HEADS * SEQ * SEQ;
    float **nh[] = {&b->x, &b->res, &b->h, &b->y, &b->dy, &b->dh, &b->dx};
    for (size_t i = 0; i < sizeof nh / sizeof nh[0]; i++) *nh[i] = bf_normal(b, b->nh, id++);
    float **hs[] = {&b->bias, &b->gamma, &b->beta, &b->dgamma, &b->dbeta, &b->dbias};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) *hs[i] = bf_normal(b, HIDDEN, id++);
    b->mean = bf_normal(b, (size_t)b->n, id++), b->rstd = bf_normal(b, (size_t)b->n, id++);
    b->scores = bf_normal(b, b->na, id++), b->att = bf_normal(b, b->na, id++), b->datt = bf_normal(b, b->na, id++);
    b->datt0 = bf_normal(b, b->na, id++);
    b->qkv = bf_normal(b, 3 * b->nh, id++), b->qkv_b = bf_normal(b, 3 * HIDDEN, id++);
    b->pre = bf_normal(b, b->nf, id++), b->dout = bf_normal(b, b->nf, id++), b->dpre = bf_normal(b, b->nf, id++);
    b->fbias = bf_normal(b, FFN, id++);
    b->y16 = bf_lp(b, b->nh), b->dy16 = bf_lp(b, b->nh), b->att16 = bf_lp(b, b->na), b->din16 = bf_lp(b, b->na);
    b->heads16 = bf_lp(b, 3 * b->nh), b->dpre16 = bf_lp(b, b->nf);
    b->x16 = bf_lp(b, b->nh), b->w1_16 = bf_lp(b, (size_t)FFN * HIDDEN), b->wqkv16 = bf_lp(b, 3 * HIDDEN * HIDDEN);
    b->u16 = bf_lp(b, b->nf), b->g16 = bf_lp(b, b->nf), b->qkv16 = bf_lp(b, 3 * b->nh), b->p16 = bf_lp(b, b->na);
    BF_CHECK(b->be->cast(b->be->ctx, b->p16, b->t, b->scores, TFB_F32, b->na));
    b->datt16 = bf_lp(b, b->na);
    b->lse = bf_normal(b, (size_t)b->batch * HEADS * SEQ, id++);
    b->rowdot = bf_normal(b, (size_t)b->batch * HEADS * SEQ, id++);
    BF_CHECK(b->be->cast(b->be->ctx, b->datt16, b->t, b->datt0, TFB_F32, b->na));
    float *w = bf_normal(b, (size_t)FFN * HIDDEN, id++); /* GEMM operands of normal values, not zeros */
    BF_CHECK(b->be->cast(b->be->ctx, b->x16, b->t, b->x, TFB_F32, b->nh));
    BF_CHECK(b->be->cast(b->be->ctx, b->w1_16, b->t, w, TFB_F32, (size_t)FFN * HIDDEN));
    BF_CHECK(b->be->cast(b->be->ctx, b->wqkv16, b->t, w, TFB_F32, (size_t)3 * HIDDEN * HIDDEN));
    b->be->free(b->be->ctx, w);
}

/* Seconds per call of fn: the median of SAMPLES samples of CALLS calls, after one warm-up sample; restore (or
 * NULL) runs before each sample, untimed. */
static double bf_time(bf *b, bf_fn fn, bf_fn restore) {
    double t[SAMPLES];
    for (int s = -1; s < SAMPLES; s++) {
        if (restore) BF_CHECK(restore(b));
        BF_CHECK(b->be->sync(b->be->ctx));
        double t0 = tfb_clock_s();
        for (int i = 0; i < CALLS; i++) BF_CHECK(fn(b));
        BF_CHECK(b->be->sync(b->be->ctx));
        if (s >= 0) t[s] = (tfb_clock_s() - t0) / CALLS;
    }
    return tfb_percentile(t, SAMPLES, 50);
}

typedef struct {
    const char *name, *separate;
    bf_fn fused, apart, restore;
    double bytes_per_elem; /* least traffic per element of `elems` (FP32 4, 16-bit 2); 0: a GEMM's row, none */
    int elems;             /* 0: (n, HIDDEN), 1: (n, FFN), 2: attention (batch, HEADS, SEQ, SEQ), 3: (n, 3 HIDDEN) */
} bf_pair;

static const bf_pair PAIRS[] = {
    {"residual_ln_fwd", "bias_add dropout residual_add layernorm cast", rln_fwd_fused, rln_fwd_separate, NULL, 18, 0},
    {"residual_ln_fwd x16", "residual_ln_fwd (FP32 x)", rln_fwd_x16, rln_fwd_fused, NULL, 16, 0},
    {"residual_ln_bwd", "layernorm_bwd dropout_bwd", rln_bwd_fused, rln_bwd_separate, NULL, 16, 0},
    {"residual_ln_bwd dx16+bias grad", "residual_ln_bwd (FP32 dx) + cast, bias grad", rln_bwd_dx16, rln_bwd_dx32,
     NULL, 16, 0},
    {"attn_softmax_fwd", "softmax_fwd dropout_fwd", attn_fwd_fused, attn_fwd_separate, NULL, 10, 2},
    {"attn_softmax_bwd", "dropout_bwd softmax_bwd", attn_bwd_fused, attn_bwd_separate, restore_datt, 10, 2},
    {"permute_0213 + bias (QKV)", "bias_add permute_0213", heads_fused, heads_separate, NULL, 6, 3},
    {"act_bias_bwd cast + bias grad", "bias_grad cast", cast_bias_fused, cast_bias_separate, NULL, 6, 0},
    {"act_bias_bwd gelu out16", "act_bias_bwd (FP32) cast", gelu_bwd_fused, gelu_bwd_separate, NULL, 10, 1},
    {"attn_softmax_fwd p16", "attn_softmax_fwd (FP32 scores, probabilities)", attn16_fwd, attn_fwd_fused, NULL, 6,
     2},
    {"attn_softmax_bwd p16", "attn_softmax_bwd (FP32 probabilities, datt)", attn16_bwd, attn_bwd_fused, restore_datt,
     6, 2},
    {"FF1 gemm c16 + gelu in16", "FF1 gemm (FP32 C) + gelu in FP32", ff1_c16, ff1_c32, NULL, 0, 1},
    {"QKV gemm c16 + 3 permutes in16", "QKV gemm (FP32 C) + 3 permutes in FP32", qkv_c16, qkv_c32, NULL, 0, 3},
    {"FF2 dX gemm c16 + gelu bwd", "FF2 dX gemm (FP32 C) + gelu bwd from FP32", ff2_dx_c16, ff2_dx_c32, NULL, 0, 1},
    {"attn P V grouped -> tokens", "P V head-major + permute to tokens", ctx_tokens, ctx_heads, NULL, 0, 2},
    {"attn bwd gemms grouped, tokens", "the 4 gemms head-major + 4 permutes", att_bwd_tokens, att_bwd_heads, NULL,
     0, 2},
    /* last, GPU backends only: the CPU's fused attention is the plain reference, not a fast path */
    {"attention fused fwd", "QK^T gemm, attn_softmax_fwd p16, P V -> tokens", attn_fused_fwd, attn_unfused_fwd, NULL,
     0, 2},
    {"attention fused bwd", "attn_softmax_bwd p16 + the 4 gemms, tokens", attn_fused_bwd, attn_unfused_bwd, NULL, 0,
     2},
};
enum { FUSED_ATTENTION_ROWS = 2 };

static void bf_row(bf *b, const bf_pair *p) {
    size_t e = p->elems == 0 ? b->nh : p->elems == 1 ? b->nf : p->elems == 2 ? b->na : 3 * b->nh;
    double tf = bf_time(b, p->fused, p->restore), ts = bf_time(b, p->apart, p->restore);
    char gbs[16] = "-";
    if (p->bytes_per_elem > 0) snprintf(gbs, sizeof gbs, "%.1f", p->bytes_per_elem * (double)e / tf / 1e9);
    printf("| %-30s | %-45s | %9.1f | %9.1f | %6.2fx | %8s |\n", p->name, p->separate, tf * 1e6, ts * 1e6, ts / tf,
           gbs);
}

static void usage_exit(void) {
    fprintf(stderr, "usage: bench_fused [cpu|cuda] [BATCH] [fp16|bf16]\n");
    exit(2);
}

int main(int argc, char **argv) {
    bf b = {.batch = argc > 2 ? atoi(argv[2]) : 32, .t = TFB_F16};
    const char *dev = argc > 1 ? argv[1] : "cuda";
    if (argc > 4 || b.batch < 1 || b.batch > 4096) usage_exit();
    if (argc > 3 && strcmp(argv[3], "bf16") == 0) b.t = TFB_BF16;
    else if (argc > 3 && strcmp(argv[3], "fp16") != 0) usage_exit();
    char why[320];
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (tfb_backend_open(&(tfb_backend_spec){.name = dev, .threads = threads > 0 ? threads : 1, .local_size = 1},
                         &b.be, why, sizeof why) != TFB_OK) {
        fprintf(stderr, "bench_fused: --device %s: %s\n", dev, why);
        return 2;
    }
    bf_alloc(&b);
    printf("bench_fused: %s%s%s, bert-large layer shapes at batch %d, sequence %d, %s outputs; us per call (median "
           "of %d x %d calls)\n", b.be->name, b.be->device_name ? " on " : "", b.be->device_name ? b.be->device_name : "",
           b.batch, SEQ, b.t == TFB_F16 ? "fp16" : "bf16", SAMPLES, CALLS);
    printf("| %-30s | %-45s | %9s | %9s | %7s | %8s |\n", "fused op", "separate ops", "fused us", "separate",
           "speedup", "GB/s");
    printf("|--------------------------------|-----------------------------------------------|-----------|-----------|"
           "---------|----------|\n");
    size_t rows = sizeof PAIRS / sizeof PAIRS[0];
    if (strcmp(b.be->name, "cpu") == 0) rows -= FUSED_ATTENTION_ROWS;
    for (size_t i = 0; i < rows; i++) bf_row(&b, &PAIRS[i]);
    b.be->destroy(b.be);
    return 0;
}
