/* bert_layer.c — the kernel sequence of one post-LN encoder layer, forward and backward (see bert_layer.h).
 *
 * Attention runs as strided batched GEMMs over heads, one call per sample, reading Q, K and V in place from the
 * fused (N, 3H) projection. The softmax scale is applied inside the softmax op. No allocation happens here.
 */
#include <math.h>
#include "bert_layer.h"

enum { SITE_ATT = 0, SITE_ATTN_OUT = 1, SITE_FFN_OUT = 2 };

size_t bert_layer_lp_elems(int batch, int seq, int hidden, int heads, int ffn) {
    size_t n = (size_t)batch * seq;
    size_t m = n * (size_t)(ffn > 3 * hidden ? ffn : 3 * hidden);
    size_t att = (size_t)batch * heads * seq * seq;
    return m > att ? m : att;
}

tfb_dropout_key bert_dropout_key(const bert_ctx *c, uint32_t site, uint64_t elem0) {
    return (tfb_dropout_key){.seed = c->seed, .site = site, .step = (uint32_t)c->step, .offset = elem0};
}

/* The operand a GEMM reads for activation x (n elements): x itself in FP32, else its cast into slot `slot`. */
static tfb_status lp_act(const bert_ctx *c, int slot, const float *x, size_t n, const void **out) {
    if (c->gemm_type == TFB_F32) { *out = x; return TFB_OK; }
    if (n > c->lp_elems) return TFB_ERR_ARG;
    TFB_CHECK(c->be->cast(c->be->ctx, c->lp[slot], c->gemm_type, x, TFB_F32, n));
    *out = c->lp[slot];
    return TFB_OK;
}

/* The operand a GEMM reads for weight w: the master in FP32, else its 16-bit copy at the same offset. */
static const void *lp_weight(const bert_ctx *c, const float *w) {
    if (c->gemm_type == TFB_F32) return w;
    return c->lp_weights + (w - c->master_base);
}

static tfb_status gemm(const bert_ctx *c, int ta, int tb, int m, int n, int k, const void *a, int lda,
                       long long sa, const void *b, int ldb, long long sb, float beta, float *out, int ldc,
                       long long sc, int batch) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = beta,
                       .a = a, .lda = lda, .stride_a = sa, .b = b, .ldb = ldb, .stride_b = sb, .c = out,
                       .ldc = ldc, .stride_c = sc, .batch = batch, .in_type = c->gemm_type};
    return c->be->gemm(c->be->ctx, &d);
}

/* Byte offset helper for 16-bit or FP32 operands: element offset `e` into operand p. */
static const void *at(const bert_ctx *c, const void *p, size_t e) {
    return (const char *)p + e * tfb_dtype_size(c->gemm_type);
}

tfb_status bert_linear_fwd(const bert_ctx *c, float *out, const float *in, const float *w, const float *b, int n,
                           int in_f, int out_f) {
    const void *x;
    TFB_CHECK(lp_act(c, 0, in, (size_t)n * in_f, &x));
    TFB_CHECK(gemm(c, 0, 1, n, out_f, in_f, x, in_f, 0, lp_weight(c, w), in_f, 0, 0.0f, out, out_f, 0, 1));
    if (b) TFB_CHECK(c->be->bias_add(c->be->ctx, out, b, n, out_f));
    return TFB_OK;
}

tfb_status bert_linear_bwd(const bert_ctx *c, float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int in_f, int out_f) {
    const void *dy, *x;
    TFB_CHECK(lp_act(c, 0, dout, (size_t)n * out_f, &dy));
    TFB_CHECK(lp_act(c, 1, in, (size_t)n * in_f, &x));
    if (din) TFB_CHECK(gemm(c, 0, 0, n, in_f, out_f, dy, out_f, 0, lp_weight(c, w), in_f, 0, 0.0f, din, in_f, 0, 1));
    TFB_CHECK(gemm(c, 1, 0, out_f, in_f, n, dy, out_f, 0, x, in_f, 0, 1.0f, dw, in_f, 0, 1));
    if (db) TFB_CHECK(c->be->bias_grad(c->be->ctx, db, dout, n, out_f));
    return TFB_OK;
}

static uint32_t site_of(int layer, int place) { return (uint32_t)(layer + 1) * 8u + (uint32_t)place; }

/* ctx (N, H) = Dropout(softmax(Q K^T * scale)) V per sample and head; saves att and att_d. */
static tfb_status attention_fwd(const bert_ctx *c, int layer, bert_layer_acts *a) {
    int s = c->seq, H = c->hidden, A = c->heads, d = H / A;
    size_t att_n = (size_t)c->batch * A * s * s, per_sample = (size_t)A * s * s;
    const void *qkv, *att_d;
    TFB_CHECK(lp_act(c, 0, a->qkv, (size_t)c->batch * s * 3 * H, &qkv));
    for (int b = 0; b < c->batch; b++) {
        size_t row0 = (size_t)b * s * 3 * H;
        TFB_CHECK(gemm(c, 0, 1, s, s, d, at(c, qkv, row0), 3 * H, d, at(c, qkv, row0 + H), 3 * H, d, 0.0f,
                       a->att + b * per_sample, s, (long long)s * s, A));
    }
    TFB_CHECK(c->be->softmax_fwd(c->be->ctx, a->att, a->att, c->batch * A * s, s, 1.0f / sqrtf((float)d),
                                 c->key_len, A * s));
    TFB_CHECK(c->be->dropout_fwd(c->be->ctx, a->att_d, a->att, att_n, c->dropout,
                                 bert_dropout_key(c, site_of(layer, SITE_ATT), c->sample0 * per_sample)));
    TFB_CHECK(lp_act(c, 1, a->att_d, att_n, &att_d));
    for (int b = 0; b < c->batch; b++) {
        size_t row0 = (size_t)b * s * 3 * H;
        TFB_CHECK(gemm(c, 0, 0, s, d, s, at(c, att_d, b * per_sample), s, (long long)s * s,
                       at(c, qkv, row0 + 2 * H), 3 * H, d, 0.0f, a->ctx + (size_t)b * s * H, H, d, A));
    }
    return TFB_OK;
}

/* out (N, H) = residual + Dropout(proj), then LayerNorm into y. proj is overwritten. */
static tfb_status residual_ln_fwd(const bert_ctx *c, uint32_t site, float *proj, const float *residual, float *h,
                                  float *mean, float *rstd, float *y, const float *g, const float *beta) {
    size_t n = (size_t)c->batch * c->seq * c->hidden;
    TFB_CHECK(c->be->dropout_fwd(c->be->ctx, proj, proj, n, c->dropout,
                                 bert_dropout_key(c, site, c->sample0 * (size_t)c->seq * c->hidden)));
    TFB_CHECK(c->be->residual_add(c->be->ctx, h, residual, proj, n));
    return c->be->layernorm_fwd(c->be->ctx, y, mean, rstd, h, g, beta, c->batch * c->seq, c->hidden, 1e-12f);
}

tfb_status bert_layer_fwd(const bert_ctx *c, int layer, const bert_layer_w *w, const float *x, bert_layer_acts *a) {
    int N = c->batch * c->seq, H = c->hidden, F = c->ffn;
    float *proj = a->y; /* y is written last: use it as the projection buffer first */
    TFB_CHECK(bert_linear_fwd(c, a->qkv, x, w->qkv_w, w->qkv_b, N, H, 3 * H));
    TFB_CHECK(attention_fwd(c, layer, a));
    TFB_CHECK(bert_linear_fwd(c, proj, a->ctx, w->ao_w, w->ao_b, N, H, H));
    TFB_CHECK(residual_ln_fwd(c, site_of(layer, SITE_ATTN_OUT), proj, x, a->h1, a->ln1_mean, a->ln1_rstd, a->x1,
                              w->ln1_g, w->ln1_b));
    TFB_CHECK(bert_linear_fwd(c, a->u, a->x1, w->ff1_w, w->ff1_b, N, H, F));
    TFB_CHECK(c->be->act_fwd(c->be->ctx, TFB_ACT_GELU, a->g, a->u, (size_t)N * F));
    TFB_CHECK(bert_linear_fwd(c, proj, a->g, w->ff2_w, w->ff2_b, N, F, H));
    TFB_CHECK(residual_ln_fwd(c, site_of(layer, SITE_FFN_OUT), proj, a->x1, a->h2, a->ln2_mean, a->ln2_rstd, proj,
                              w->ln2_g, w->ln2_b));
    return TFB_OK;
}

/* From dctx (N, H) to dqkv (N, 3H), through the saved att and att_d. */
static tfb_status attention_bwd(const bert_ctx *c, int layer, const bert_layer_acts *a, const float *dctx,
                                const bert_layer_scratch *s) {
    int S = c->seq, H = c->hidden, A = c->heads, d = H / A;
    size_t att_n = (size_t)c->batch * A * S * S, per_sample = (size_t)A * S * S;
    const void *qkv, *dc, *att_d, *datt;
    TFB_CHECK(lp_act(c, 0, a->qkv, (size_t)c->batch * S * 3 * H, &qkv));
    TFB_CHECK(lp_act(c, 1, dctx, (size_t)c->batch * S * H, &dc));
    TFB_CHECK(lp_act(c, 2, a->att_d, att_n, &att_d));
    for (int b = 0; b < c->batch; b++) {
        size_t row0 = (size_t)b * S * 3 * H, crow = (size_t)b * S * H;
        TFB_CHECK(gemm(c, 0, 1, S, S, d, at(c, dc, crow), H, d, at(c, qkv, row0 + 2 * H), 3 * H, d, 0.0f,
                       s->datt + b * per_sample, S, (long long)S * S, A));
        TFB_CHECK(gemm(c, 1, 0, S, d, S, at(c, att_d, b * per_sample), S, (long long)S * S, at(c, dc, crow), H, d,
                       0.0f, s->dqkv + row0 + 2 * H, 3 * H, d, A));
    }
    TFB_CHECK(c->be->dropout_bwd(c->be->ctx, s->datt, s->datt, att_n, c->dropout,
                                 bert_dropout_key(c, site_of(layer, SITE_ATT), c->sample0 * per_sample)));
    TFB_CHECK(c->be->softmax_bwd(c->be->ctx, s->datt, s->datt, a->att, c->batch * A * S, S,
                                 1.0f / sqrtf((float)d)));
    TFB_CHECK(lp_act(c, 2, s->datt, att_n, &datt));
    for (int b = 0; b < c->batch; b++) {
        size_t row0 = (size_t)b * S * 3 * H;
        TFB_CHECK(gemm(c, 0, 0, S, d, S, at(c, datt, b * per_sample), S, (long long)S * S, at(c, qkv, row0 + H),
                       3 * H, d, 0.0f, s->dqkv + row0, 3 * H, d, A));
        TFB_CHECK(gemm(c, 1, 0, S, d, S, at(c, datt, b * per_sample), S, (long long)S * S, at(c, qkv, row0), 3 * H,
                       d, 0.0f, s->dqkv + row0 + H, 3 * H, d, A));
    }
    return TFB_OK;
}

tfb_status bert_layer_bwd(const bert_ctx *c, int layer, const bert_layer_w *w, const bert_layer_w *dw,
                          const float *x, const bert_layer_acts *a, const bert_layer_scratch *s, float *grad) {
    tfb_backend *be = c->be;
    int N = c->batch * c->seq, H = c->hidden, F = c->ffn;
    size_t nh = (size_t)N * H, elem0 = c->sample0 * (size_t)c->seq * H;
    /* grad holds dy; t1 <- dh2 */
    TFB_CHECK(be->layernorm_bwd(be->ctx, s->t1, dw->ln2_g, dw->ln2_b, grad, a->h2, a->ln2_mean, a->ln2_rstd,
                                w->ln2_g, N, H));
    TFB_CHECK(be->dropout_bwd(be->ctx, s->t2, s->t1, nh, c->dropout,
                              bert_dropout_key(c, site_of(layer, SITE_FFN_OUT), elem0)));
    TFB_CHECK(bert_linear_bwd(c, s->dff, dw->ff2_w, dw->ff2_b, s->t2, a->g, w->ff2_w, N, F, H));
    TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_GELU, s->dff, s->dff, a->u, (size_t)N * F));
    TFB_CHECK(bert_linear_bwd(c, s->t2, dw->ff1_w, dw->ff1_b, s->dff, a->x1, w->ff1_w, N, H, F));
    TFB_CHECK(be->residual_add(be->ctx, s->t1, s->t1, s->t2, nh)); /* t1 <- dx1 */
    TFB_CHECK(be->layernorm_bwd(be->ctx, s->t2, dw->ln1_g, dw->ln1_b, s->t1, a->h1, a->ln1_mean, a->ln1_rstd,
                                w->ln1_g, N, H)); /* t2 <- dh1 */
    TFB_CHECK(be->dropout_bwd(be->ctx, s->t1, s->t2, nh, c->dropout,
                              bert_dropout_key(c, site_of(layer, SITE_ATTN_OUT), elem0)));
    TFB_CHECK(bert_linear_bwd(c, grad, dw->ao_w, dw->ao_b, s->t1, a->ctx, w->ao_w, N, H, H)); /* grad <- dctx */
    TFB_CHECK(attention_bwd(c, layer, a, grad, s));
    TFB_CHECK(bert_linear_bwd(c, s->t1, dw->qkv_w, dw->qkv_b, s->dqkv, x, w->qkv_w, N, H, 3 * H));
    return be->residual_add(be->ctx, grad, s->t1, s->t2, nh);
}
