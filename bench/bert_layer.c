/* bert_layer.c — the kernel sequence of one post-LN encoder layer, forward and backward (see bert_layer.h).
 *
 * Attention's GEMMs are each one batched call over every (sample, head) pair, not one call per sample: the launch
 * count per layer does not grow with the batch. Q, K and V are head-major copies (permuted out of the fused (N, 3H)
 * projection, the bias added on the way, and saved for the backward); the context, its gradient and dQ, dK, dV
 * stay token-major ((N, width) tensors, head i of a sample in columns i d .. i d + d - 1), read and written in
 * place by GEMMs grouped by sample (tfb_gemm_desc.batch_inner), with no permute to or from heads. The
 * probabilities and their dropout come from one row pass (attn_softmax_fwd,
 * scale and key mask inside), and their gradient from one (attn_softmax_bwd). The scores and the probabilities
 * saved for that backward are in the GEMM type (PyTorch's autocast keeps FP32 probabilities; here the row's
 * arithmetic is FP32 and only the stored values are rounded). With ctx->fused_attention the scores' GEMM, the
 * softmax and the context's GEMM are one backend op (attn_fused_fwd, and attn_fused_bwd for the four backward
 * GEMMs and the softmax's backward) that writes no (s, s) tensor: the layer saves each query row's log-sum-exp
 * instead of att and att_d, with the same dropout counters.
 *
 * Every activation a GEMM reads is made once, in the GEMM type, by the op that produces it where the op can write
 * that type (the permute to heads, the attention softmax, GELU, the LayerNorm giving x1 and, for the next layer,
 * the LayerNorm giving y), else by one cast kept for the backward (a stage's first input): the backward's
 * weight-gradient GEMMs read the forward's operands, with no second cast and no second permute. The same holds for
 * gradients (the GELU backward, the attention softmax's backward, the sublayer tails' backward); a
 * bias gradient is then one column-sum pass over the 16-bit gradient. The QKV bias is added by the permute to heads,
 * not by a pass of its own. The GEMM results and gradients read only by such an op (the QKV projection, the
 * attention scores, the FFN up-projection, and in the backward FF2's input gradient and the probabilities') and
 * those attention's GEMMs make or read token-major (the context, its gradient, dQ, dK and dV) are written in the
 * GEMM type by the GEMM itself, so nothing reads or writes them in FP32.
 *
 * Each sublayer ends in one fused op (residual_ln_fwd): its output projection's bias, dropout, the residual sum and
 * LayerNorm in one pass, instead of four, reading the projection's result as its GEMM wrote it (16-bit, in slot 0,
 * unless a tensor group sums it). Its backward (residual_ln_bwd) gives both the residual's gradient (FP32)
 * and the projection's (its GEMM operand); the residual's is then accumulated by the GEMM that adds the branch's
 * input gradient to it (beta 1), with no separate sum outside tensor parallelism. No allocation happens here.
 */
#include <math.h>
#include "bert_layer.h"
#include "workload.h"

enum { SITE_ATT = 0, SITE_ATTN_OUT = 1, SITE_FFN_OUT = 2 };

size_t bert_layer_lp_elems(int batch, int seq, int hidden, int heads, int ffn, int fused_attention) {
    size_t n = (size_t)batch * seq;
    size_t m = n * (size_t)(ffn > 3 * hidden ? ffn : 3 * hidden);
    size_t att = fused_attention ? 0 : (size_t)batch * heads * seq * seq;
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

/* dout's (n, out_f) GEMM operand: dout itself in FP32, else its cast into slot 0. The cast also adds dout's
 * column sums to *db when set (the bias gradient, in the same pass) and clears *db, so it is not summed again. */
static tfb_status grad_operand(const bert_ctx *c, const float *dout, int n, int out_f, float **db, const void **dy) {
    if (c->gemm_type == TFB_F32 || !*db) return lp_act(c, 0, dout, (size_t)n * out_f, dy);
    if ((size_t)n * out_f > c->lp_elems) return TFB_ERR_ARG;
    tfb_act_bias_bwd_desc d = {.din = c->lp[0], .din_type = c->gemm_type, .dbias = *db, .dout = dout,
                               .dout_type = TFB_F32, .n = n, .h = out_f}; /* no pre: the cast */
    TFB_CHECK(c->be->act_bias_bwd(c->be->ctx, &d));
    *dy = c->lp[0];
    *db = NULL;
    return TFB_OK;
}

/* x's operand kept for the backward: x itself in FP32 runs (keep NULL), else its cast into keep (unless ready:
 * written there already). */
static tfb_status keep_operand(const bert_ctx *c, void *keep, int ready, const float *x, size_t n, const void **out) {
    *out = keep ? (const void *)keep : (const void *)x;
    return keep && !ready ? c->be->cast(c->be->ctx, keep, c->gemm_type, x, TFB_F32, n) : TFB_OK;
}

/* The operand of an activation x whose cast, if any, was kept in keep. */
static const void *kept_operand(const void *keep, const float *x) { return keep ? keep : (const void *)x; }

/* The operand a GEMM reads for weight w: the master in FP32, else its 16-bit copy at the same offset. */
static const void *lp_weight(const bert_ctx *c, const float *w) {
    if (c->gemm_type == TFB_F32) return w;
    return c->lp_weights + (w - c->master_base);
}

/* out of type ct: FP32, or the GEMM type for a result whose readers take it so */
static tfb_status gemm(const bert_ctx *c, int ta, int tb, int m, int n, int k, const void *a, int lda,
                       long long sa, const void *b, int ldb, long long sb, float beta, void *out, tfb_dtype ct,
                       int ldc, long long sc, int batch) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = beta,
                       .a = a, .lda = lda, .stride_a = sa, .b = b, .ldb = ldb, .stride_b = sb, .c = out,
                       .ldc = ldc, .stride_c = sc, .batch = batch, .in_type = c->gemm_type,
                       .tf32 = c->tf32, .c_type = ct};
    return c->be->gemm(c->be->ctx, &d);
}

/* Byte offset helper for 16-bit or FP32 operands: element offset `e` into operand p (at_out: into an output). */
static const void *at(const bert_ctx *c, const void *p, size_t e) {
    return (const char *)p + e * tfb_dtype_size(c->gemm_type);
}
static void *at_out(const bert_ctx *c, void *p, size_t e) { return (char *)p + e * tfb_dtype_size(c->gemm_type); }

/* As bert_linear_fwd, the input given as its GEMM operand x (of the GEMM type). */
static tfb_status linear_fwd_op(const bert_ctx *c, float *out, const void *x, const float *w, const float *b, int n,
                                int in_f, int out_f) {
    TFB_CHECK(gemm(c, 0, 1, n, out_f, in_f, x, in_f, 0, lp_weight(c, w), in_f, 0, 0.0f, out, TFB_F32, out_f, 0, 1));
    return b ? c->be->bias_add(c->be->ctx, out, b, n, out_f) : TFB_OK;
}

/* out (n, out_f) = x W^T in the GEMM type, without a bias (its reader adds it): x is the GEMM operand. */
static tfb_status linear_fwd_lp(const bert_ctx *c, void *out, const void *x, const float *w, int n, int in_f,
                                int out_f) {
    return gemm(c, 0, 1, n, out_f, in_f, x, in_f, 0, lp_weight(c, w), in_f, 0, 0.0f, out, c->gemm_type, out_f, 0, 1);
}

tfb_status bert_linear_fwd(const bert_ctx *c, float *out, const float *in, const float *w, const float *b, int n,
                           int in_f, int out_f) {
    const void *x;
    TFB_CHECK(lp_act(c, 0, in, (size_t)n * in_f, &x));
    return linear_fwd_op(c, out, x, w, b, n, in_f, out_f);
}

/* dW += dy^T x and db += colsum(dout), dy being dout already in the GEMM type and x the input's GEMM operand. */
static tfb_status linear_bwd_weight(const bert_ctx *c, float *dw, float *db, const void *dy, const float *dout,
                                   const void *x, int n, int in_f, int out_f) {
    TFB_CHECK(gemm(c, 1, 0, out_f, in_f, n, dy, out_f, 0, x, in_f, 0, 1.0f, dw, TFB_F32, in_f, 0, 1));
    return db ? c->be->bias_grad(c->be->ctx, db, dout, n, out_f) : TFB_OK;
}

/* As bert_linear_bwd, the input given as its GEMM operand x, and din (of type dt: FP32, or the GEMM type for a
 * gradient only an element-wise op reads) = dX + din_beta * din (1: accumulated by the GEMM, as a residual's
 * gradient is). dy is dout's GEMM operand when its producer wrote one, else NULL (dout is cast into slot 0); dout
 * itself is read only for db. */
static tfb_status linear_bwd_beta(const bert_ctx *c, void *din, tfb_dtype dt, float din_beta, float *dw, float *db,
                                  const float *dout, const void *dy, const void *x, const float *w, int n, int in_f,
                                  int out_f) {
    if (!dw) db = NULL;
    if (!dy) TFB_CHECK(grad_operand(c, dout, n, out_f, &db, &dy));
    if (din)
        TFB_CHECK(gemm(c, 0, 0, n, in_f, out_f, dy, out_f, 0, lp_weight(c, w), in_f, 0, din_beta, din, dt, in_f, 0,
                       1));
    return dw ? linear_bwd_weight(c, dw, db, dy, dout, x, n, in_f, out_f) : TFB_OK;
}

static tfb_status linear_bwd_op(const bert_ctx *c, float *din, float *dw, float *db, const float *dout, const void *x,
                                const float *w, int n, int in_f, int out_f) {
    return linear_bwd_beta(c, din, TFB_F32, 0.0f, dw, db, dout, NULL, x, w, n, in_f, out_f);
}

/* din = dy W in the GEMM type (a gradient that only element-wise ops or attention's GEMMs read: the context's,
 * GELU's backward; rounded once as the GEMM writes it, as autocast's GEMM gradients are) and dW += dy^T x, dy being
 * the
 * output gradient's GEMM operand; the bias gradient is the caller's. */
static tfb_status linear_bwd_lp(const bert_ctx *c, void *din, float *dw, const void *dy, const void *x, const float *w,
                                int n, int in_f, int out_f) {
    return linear_bwd_beta(c, din, c->gemm_type, 0.0f, dw, NULL, NULL, dy, x, w, n, in_f, out_f);
}

tfb_status bert_linear_bwd(const bert_ctx *c, float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int in_f, int out_f) {
    const void *x = in;
    if (dw) TFB_CHECK(lp_act(c, 1, in, (size_t)n * in_f, &x));
    return linear_bwd_op(c, din, dw, db, dout, x, w, n, in_f, out_f);
}

int bert_ctx_local_width(const bert_ctx *c) {
    return c->heads * (c->head_dim ? c->head_dim : c->hidden / c->heads);
}

static int has_group(const bert_ctx *c) { return c->tp && c->tp->size > 1; }

/* out (n, out_f) = x W^T summed over the tensor group: a row-parallel linear layer without its bias, which the
 * residual LayerNorm reading out adds (after the sum, once). out is of type ot: the GEMM type on one rank (its
 * only reader is that LayerNorm), FP32 when a tensor group sums it. */
static tfb_status row_parallel_fwd(const bert_ctx *c, void *out, tfb_dtype ot, const void *x, const float *w, int n,
                                   int in_f, int out_f) {
    TFB_CHECK(gemm(c, 0, 1, n, out_f, in_f, x, in_f, 0, lp_weight(c, w), in_f, 0, 0.0f, out, ot, out_f, 0, 1));
    if (!has_group(c)) return TFB_OK;
    if (ot != TFB_F32) return TFB_ERR_ARG;
    return tfb_workload_tp_allreduce(c->wl, c->tp, out, (size_t)n * out_f, TFB_SUM);
}

/* As bert_col_parallel_bwd, the input given as its GEMM operand x, and dout's as dy (or NULL) as in
 * linear_bwd_beta. */
static tfb_status col_parallel_bwd_op(const bert_ctx *c, float *din, float *dw, float *db, const float *dout,
                                      const void *dy, const void *x, const float *w, int n, int in_f, int out_f) {
    if (!has_group(c)) return linear_bwd_beta(c, din, TFB_F32, 0.0f, dw, db, dout, dy, x, w, n, in_f, out_f);
    if (!dw) db = NULL;
    if (!dy) TFB_CHECK(grad_operand(c, dout, n, out_f, &db, &dy)); /* cast once: slot 0 holds it through both */
    TFB_CHECK(gemm(c, 0, 0, n, in_f, out_f, dy, out_f, 0, lp_weight(c, w), in_f, 0, 0.0f, din, TFB_F32, in_f, 0, 1));
    tfb_comm_request *req = NULL; /* dX's sum over the group runs while the weight gradient is computed */
    TFB_CHECK(c->tp->iallreduce(c->tp, din, (size_t)n * in_f, TFB_COMM_F32, TFB_SUM, &req));
    TFB_CHECK(linear_bwd_weight(c, dw, db, dy, dout, x, n, in_f, out_f));
    TFB_CHECK(tfb_workload_mark(c->wl, TFB_MARK_WORK));
    TFB_CHECK(c->tp->wait(c->tp, req));
    TFB_CHECK(tfb_workload_mark(c->wl, TFB_MARK_TP));
    c->wl->tp_bus_bytes += 2.0 * (c->tp->size - 1) / c->tp->size * (double)n * in_f * sizeof(float);
    return TFB_OK;
}

tfb_status bert_col_parallel_bwd(const bert_ctx *c, float *din, float *dw, float *db, const float *dout,
                                 const float *in, const float *w, int n, int in_f, int out_f) {
    const void *x;
    TFB_CHECK(lp_act(c, 1, in, (size_t)n * in_f, &x));
    return col_parallel_bwd_op(c, din, dw, db, dout, NULL, x, w, n, in_f, out_f);
}

static uint32_t site_of(int layer, int place) { return (uint32_t)(layer + 1) * 8u + (uint32_t)place; }

/* Attention's softmax and its dropout, forward (g NULL: a->att, a->att_d from the scores in a->att) or backward
 * (g: att_d's gradient in the GEMM type, overwritten by the scores' gradient in that type). Without tensor
 * parallelism the batch's (batch, A, s, s) block is contiguous in the dropout's global counter space and takes one
 * call; a rank holding some of the heads takes one call per sample, its heads sitting at global head tp_rank * A. */
static tfb_status attention_softmax(const bert_ctx *c, int layer, const bert_layer_acts *a, void *g) {
    int s = c->seq, A = c->heads, At = c->heads_total ? c->heads_total : A, head_dim = bert_ctx_local_width(c) / A;
    size_t per_sample = (size_t)A * s * s, esz = tfb_dtype_size(c->gemm_type);
    int calls = At == A ? 1 : c->batch;
    for (int b = 0; b < calls; b++) {
        size_t o = b * per_sample;
        uint64_t elem0 = ((c->sample0 + (uint64_t)b) * At + (uint64_t)c->tp_rank * A) * s * s;
        tfb_attn_softmax_desc d = {.att = (char *)a->att + o * esz, .att_d = (char *)a->att_d + o * esz,
                                   .att_type = c->gemm_type, .in = (char *)a->att + o * esz,
                                   .prob_type = c->gemm_type, .key_len = c->key_len ? c->key_len + b : NULL,
                                   .rows = (calls == 1 ? c->batch : 1) * A * s, .cols = s, .rows_per_key = A * s,
                                   .scale = 1.0f / sqrtf((float)head_dim), .p = c->dropout,
                                   .key = bert_dropout_key(c, site_of(layer, SITE_ATT), elem0)};
        if (!g) TFB_CHECK(c->be->attn_softmax_fwd(c->be->ctx, &d));
        else TFB_CHECK(c->be->attn_softmax_bwd(c->be->ctx, &d, (char *)g + o * esz, c->gemm_type, (char *)g + o * esz,
                                               c->gemm_type));
    }
    return TFB_OK;
}

/* Attention's shapes on this rank: A heads of width d (W = A d), sequences of s, nw = batch * s * W elements in each
 * of Q, K and V. */
typedef struct {
    int s, A, d, W;
    size_t nw;
} heads_view;

static heads_view heads_of(const bert_ctx *c) {
    int W = bert_ctx_local_width(c);
    return (heads_view){.s = c->seq, .A = c->heads, .d = W / c->heads, .W = W, .nw = (size_t)c->batch * c->seq * W};
}

/* One operand of attention's GEMMs: the matrix of (sample b, head i) at p + b * outer + i * stride (elements), rows
 * ld apart. */
typedef struct {
    const void *p;
    int ld;
    long long stride, outer;
} head_operand;

/* Block q (0: Q, 1: K, 2: V) of the saved head-major qkv_hm: (batch, A, s, d). */
static head_operand hm_block(const bert_ctx *c, const heads_view *h, const void *qkv_hm, int q) {
    long long sd = (long long)h->s * h->d;
    return (head_operand){at(c, qkv_hm, (size_t)q * h->nw), h->d, sd, h->A * sd};
}
/* Scores, probabilities and their gradients: (batch, A, s, s). */
static head_operand scores_of(const heads_view *h, const void *p) {
    long long ss = (long long)h->s * h->s;
    return (head_operand){p, h->s, ss, h->A * ss};
}
/* Token-major columns: head i of sample b is columns [i d, (i + 1) d) of rows b s .. b s + s - 1 of an (N, ld)
 * tensor starting at p; no permute to or from head-major copies. */
static head_operand tokens_of(const heads_view *h, const void *p, int ld) {
    return (head_operand){p, ld, h->d, (long long)h->s * ld};
}

/* One batched GEMM over all (sample, head) pairs, grouped by sample: C_i = op(A_i) op(B_i), C of the GEMM type. */
static tfb_status heads_gemm(const bert_ctx *c, const heads_view *h, int ta, int tb, int m, int n, int k,
                             head_operand a, head_operand b, head_operand out) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .a = a.p, .lda = a.ld,
                       .stride_a = a.stride, .b = b.p, .ldb = b.ld, .stride_b = b.stride, .c = (void *)out.p,
                       .ldc = out.ld, .stride_c = out.stride, .batch = c->batch * h->A, .in_type = c->gemm_type,
                       .tf32 = c->tf32, .c_type = c->gemm_type, .batch_inner = h->A,
                       .outer_a = a.outer, .outer_b = b.outer, .outer_c = out.outer};
    return c->be->gemm(c->be->ctx, &d);
}

/* q, k, v head-major in the GEMM type from qkv (N, 3W, in the GEMM type) plus its bias b (3W), into qkv_hm: the
 * attention GEMMs' operands, saved for the backward. */
static tfb_status qkv_heads(const bert_ctx *c, const heads_view *h, const void *qkv, const float *b, void *qkv_hm) {
    for (int i = 0; i < 3; i++)
        TFB_CHECK(c->be->permute_0213(c->be->ctx, at_out(c, qkv_hm, i * h->nw), c->gemm_type, (size_t)h->s * h->d,
                                      at(c, qkv, (size_t)i * h->W), c->gemm_type, 3 * (size_t)h->W, b + i * h->W,
                                      c->batch, h->s, h->A, h->d));
    return TFB_OK;
}

/* The fused attention op of this layer: the unfused path's shapes, mask and dropout counters (attention_softmax's
 * elem0 for local sample 0, the rank's first head), the context token-major in the GEMM type. */
static tfb_attn_desc fused_of(const bert_ctx *c, int layer, const bert_layer_acts *a) {
    heads_view h = heads_of(c);
    int At = c->heads_total ? c->heads_total : h.A;
    uint64_t elem0 = (c->sample0 * (uint64_t)At + (uint64_t)c->tp_rank * h.A) * h.s * h.s;
    return (tfb_attn_desc){.qkv = a->qkv_hm, .ctx = a->ctx, .ldc = h.W, .lse = a->lse, .key_len = c->key_len,
                           .batch = c->batch, .heads = h.A, .heads_total = At, .seq = h.s, .head_dim = h.d,
                           .type = c->gemm_type, .scale = 1.0f / sqrtf((float)h.d), .p = c->dropout,
                           .key = bert_dropout_key(c, site_of(layer, SITE_ATT), elem0)};
}

/* ctx (N, Hl) = Dropout(softmax(Q K^T * scale)) V for every sample and head, Q, K, V being qkv + qkv_b; saves
 * qkv_hm, att, att_d and ctx (fused: qkv_hm, lse and ctx). The context's GEMM writes it token-major, in the GEMM
 * type. */
static tfb_status attention_fwd(const bert_ctx *c, int layer, const void *qkv, const float *qkv_b,
                                bert_layer_acts *a) {
    heads_view h = heads_of(c);
    int s = h.s, d = h.d;
    TFB_CHECK(qkv_heads(c, &h, qkv, qkv_b, a->qkv_hm));
    if (c->fused_attention) {
        tfb_attn_desc fd = fused_of(c, layer, a);
        return c->be->attn_fused_fwd(c->be->ctx, &fd);
    }
    TFB_CHECK(heads_gemm(c, &h, 0, 1, s, s, d, hm_block(c, &h, a->qkv_hm, 0), hm_block(c, &h, a->qkv_hm, 1),
                         scores_of(&h, a->att)));
    TFB_CHECK(attention_softmax(c, layer, a, NULL));
    return heads_gemm(c, &h, 0, 0, s, d, s, scores_of(&h, a->att_d), hm_block(c, &h, a->qkv_hm, 2),
                      tokens_of(&h, a->ctx, h.W));
}

/* A sublayer's residual, dropout and LayerNorm (ln 1 or 2): h = residual + Dropout(proj + bias), y = LN(h), and
 * y's 16-bit copy into y_lp when set. */
static tfb_residual_ln_desc residual_ln_of(const bert_ctx *c, int layer, int ln, const bert_layer_w *w,
                                           const bert_layer_acts *a) {
    int site = ln == 1 ? SITE_ATTN_OUT : SITE_FFN_OUT;
    tfb_residual_ln_desc d = {.lp_type = c->gemm_type, .rows = c->batch * c->seq, .cols = c->hidden, .eps = 1e-12f,
                              .p = c->dropout,
                              .key = bert_dropout_key(c, site_of(layer, site),
                                                      c->sample0 * (size_t)c->seq * c->hidden)};
    d.h = ln == 1 ? a->h1 : a->h2;
    d.mean = ln == 1 ? a->ln1_mean : a->ln2_mean;
    d.rstd = ln == 1 ? a->ln1_rstd : a->ln2_rstd;
    d.gamma = ln == 1 ? w->ln1_g : w->ln2_g;
    d.beta = ln == 1 ? w->ln1_b : w->ln2_b;
    d.bias = ln == 1 ? w->ao_b : w->ff2_b;
    return d;
}

tfb_status bert_layer_fwd(const bert_ctx *c, int layer, const bert_layer_w *w, const float *x, bert_layer_acts *a) {
    int N = c->batch * c->seq, H = c->hidden, F = c->ffn, W = bert_ctx_local_width(c);
    /* the projections' results: in the GEMM type into slot 0 on one rank, else FP32 in y (written last) */
    int lp = c->gemm_type != TFB_F32 && !has_group(c);
    void *proj = lp ? c->lp[0] : (void *)a->y;
    tfb_dtype pt = lp ? c->gemm_type : TFB_F32;
    const void *xo;
    TFB_CHECK(keep_operand(c, a->x_lp, a->x_lp_ready, x, (size_t)N * H, &xo));
    TFB_CHECK(linear_fwd_lp(c, c->qkv, xo, w->qkv_w, N, H, 3 * W)); /* the bias is added on the way to heads */
    TFB_CHECK(attention_fwd(c, layer, c->qkv, w->qkv_b, a));
    TFB_CHECK(row_parallel_fwd(c, proj, pt, a->ctx, w->ao_w, N, W, H));
    tfb_residual_ln_desc d = residual_ln_of(c, layer, 1, w, a);
    d.x = proj, d.x_type = pt, d.residual = x, d.y = a->x1, d.y_lp = a->x1_lp;
    TFB_CHECK(c->be->residual_ln_fwd(c->be->ctx, &d));
    TFB_CHECK(linear_fwd_lp(c, a->u, kept_operand(a->x1_lp, a->x1), w->ff1_w, N, H, F));
    TFB_CHECK(c->be->bias_act_fwd(c->be->ctx, TFB_ACT_GELU, a->g, c->gemm_type, a->u, c->gemm_type, w->ff1_b, N, F));
    TFB_CHECK(row_parallel_fwd(c, proj, pt, a->g, w->ff2_w, N, F, H));
    d = residual_ln_of(c, layer, 2, w, a);
    d.x = proj, d.x_type = pt, d.residual = a->x1, d.y = a->y, d.y_lp = a->y_lp;
    return c->be->residual_ln_fwd(c->be->ctx, &d);
}

/* From dctx (N, Hl, in the GEMM type) to dqkv (N, 3Hl, in the GEMM type: the QKV projection's GEMM operand),
 * through the saved qkv_hm, att and att_d. The GEMMs read dctx and write dQ, dK and dV token-major, in place in
 * their columns of dqkv; the probabilities' gradient leaves its GEMM in the GEMM type (slot 1, or scratch datt in
 * FP32 runs) and the softmax backward overwrites it with the scores'. */
static tfb_status attention_bwd(const bert_ctx *c, int layer, const bert_layer_acts *a, const void *dctx,
                                const bert_layer_scratch *sc, void *dqkv) {
    heads_view h = heads_of(c);
    int s = h.s, d = h.d, W3 = 3 * h.W;
    if (c->fused_attention) {
        tfb_attn_desc fd = fused_of(c, layer, a);
        tfb_attn_grads g = {.dctx = dctx, .dq = dqkv, .dk = at_out(c, dqkv, (size_t)h.W),
                            .dv = at_out(c, dqkv, 2 * (size_t)h.W), .ldd = W3, .rowdot = sc->rowdot};
        return c->be->attn_fused_bwd(c->be->ctx, &fd, &g);
    }
    void *datt = c->gemm_type == TFB_F32 ? (void *)sc->datt : c->lp[1];
    head_operand dc = tokens_of(&h, dctx, h.W), q = hm_block(c, &h, a->qkv_hm, 0), k = hm_block(c, &h, a->qkv_hm, 1);
    TFB_CHECK(heads_gemm(c, &h, 0, 1, s, s, d, dc, hm_block(c, &h, a->qkv_hm, 2), scores_of(&h, datt)));
    TFB_CHECK(heads_gemm(c, &h, 1, 0, s, d, s, scores_of(&h, a->att_d), dc,
                         tokens_of(&h, at_out(c, dqkv, 2 * (size_t)h.W), W3))); /* dV */
    TFB_CHECK(attention_softmax(c, layer, a, datt));
    TFB_CHECK(heads_gemm(c, &h, 0, 0, s, d, s, scores_of(&h, datt), k, tokens_of(&h, dqkv, W3))); /* dQ */
    return heads_gemm(c, &h, 1, 0, s, d, s, scores_of(&h, datt), q,
                      tokens_of(&h, at_out(c, dqkv, (size_t)h.W), W3)); /* dK */
}

/* dbias (h) += the column sums of dout (n, h), a gradient in the GEMM type (a GEMM operand already) */
static tfb_status bias_grad_of(const bert_ctx *c, float *dbias, const void *dout, int n, int h) {
    tfb_act_bias_bwd_desc d = {.dbias = dbias, .dout = dout, .dout_type = c->gemm_type, .n = n, .h = h};
    return c->be->act_bias_bwd(c->be->ctx, &d);
}

/* din (n, in_f) += a column-parallel layer's dX, dout's GEMM operand being dy or NULL as in linear_bwd_beta. On one
 * rank the GEMM accumulates it (beta 1); in a tensor group dX is summed over the group in scratch (n, in_f) first,
 * then added. */
static tfb_status col_parallel_bwd_acc(const bert_ctx *c, float *din, float *scratch, float *dw, float *db,
                                       const float *dout, const void *dy, const void *x, const float *w, int n,
                                       int in_f, int out_f) {
    if (!has_group(c)) return linear_bwd_beta(c, din, TFB_F32, 1.0f, dw, db, dout, dy, x, w, n, in_f, out_f);
    TFB_CHECK(col_parallel_bwd_op(c, scratch, dw, db, dout, dy, x, w, n, in_f, out_f));
    return c->be->residual_add(c->be->ctx, din, din, scratch, (size_t)n * in_f);
}

tfb_status bert_layer_bwd(const bert_ctx *c, int layer, const bert_layer_w *w, const bert_layer_w *dw,
                          const float *x, const bert_layer_acts *a, const bert_layer_scratch *s, float *grad) {
    tfb_backend *be = c->be;
    int N = c->batch * c->seq, H = c->hidden, F = c->ffn, W = bert_ctx_local_width(c);
    tfb_residual_ln_desc d2 = residual_ln_of(c, layer, 2, w, a), d1 = residual_ln_of(c, layer, 1, w, a);
    /* grad holds dy; t1 <- dh2 (x1's gradient through the residual), t2 <- the FFN output's gradient */
    int f32 = c->gemm_type == TFB_F32;
    /* gradients only element-wise ops read, in the GEMM type: in 16-bit runs in slots (free when each is made) */
    void *dff = f32 ? (void *)s->dff : c->lp[1], *dctx = f32 ? (void *)s->t1 : c->lp[2];
    void *dqkv = f32 ? (void *)s->dqkv : c->lp[0], *dproj = f32 ? (void *)s->t2 : c->lp[0]; /* dproj: an output
                                                        * projection's gradient, written as its GEMM operand */
    TFB_CHECK(be->residual_ln_bwd(be->ctx, &d2, s->t1, dproj, c->gemm_type, dw->ln2_g, dw->ln2_b, grad));
    TFB_CHECK(bias_grad_of(c, dw->ff2_b, dproj, N, H));
    TFB_CHECK(linear_bwd_lp(c, dff, dw->ff2_w, dproj, a->g, w->ff2_w, N, F, H));
    tfb_act_bias_bwd_desc gelu = {.act = TFB_ACT_GELU, .din = dff, .din_type = c->gemm_type, .dbias = dw->ff1_b,
                                  .dout = dff, .dout_type = c->gemm_type, .pre = a->u, .pre_type = c->gemm_type,
                                  .bias = w->ff1_b, .n = N, .h = F}; /* in place: dU is the FF1 GEMM's operand */
    TFB_CHECK(be->act_bias_bwd(be->ctx, &gelu));
    TFB_CHECK(col_parallel_bwd_acc(c, s->t1, s->t2, dw->ff1_w, NULL, NULL, dff, kept_operand(a->x1_lp, a->x1),
                                   w->ff1_w, N, H, F)); /* t1 <- dx1 */
    /* grad <- dh1 (the layer input's gradient through the residual), dproj <- the attention projection's gradient */
    TFB_CHECK(be->residual_ln_bwd(be->ctx, &d1, grad, dproj, c->gemm_type, dw->ln1_g, dw->ln1_b, s->t1));
    TFB_CHECK(bias_grad_of(c, dw->ao_b, dproj, N, H));
    TFB_CHECK(linear_bwd_lp(c, dctx, dw->ao_w, dproj, a->ctx, w->ao_w, N, W, H));
    TFB_CHECK(attention_bwd(c, layer, a, dctx, s, dqkv));
    TFB_CHECK(bias_grad_of(c, dw->qkv_b, dqkv, N, 3 * W));
    return col_parallel_bwd_acc(c, grad, s->t2, dw->qkv_w, NULL, NULL, dqkv, kept_operand(a->x_lp, x), w->qkv_w, N,
                                H, 3 * W);
}
