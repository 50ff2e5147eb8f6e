/* test_ops.c — every CPU-backend op checked against an independent reference: backward passes against central
 * finite differences of L = sum(out * R) for random R (FP32, h = 1e-2 on O(1) inputs; tolerance: relative L2 error
 * of the whole gradient < 5e-3), GEMM against a naive triple loop (all transposes, batches, FP16/BF16 inputs,
 * TF32 against loops over inputs rounded to 11 significant bits), fused ops against the separate ops they replace,
 * AdamW against the closed form, conversions against known bit patterns, Philox against the Random123 known-answer
 * vectors, and the dropout mask's independence from how a tensor is split.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fd.h"
#include "rel_error.h"
#include "../kernels/backend.h"
#include "../kernels/half.h"
#include "../kernels/philox.h"

static tfb_backend *be;


/* ---- LayerNorm ---- */
typedef struct { int n, h; float *x, *g, *b, *y, *mean, *rstd, *r; } ln_case;
static double ln_loss(void *p) {
    ln_case *c = p;
    be->layernorm_fwd(be->ctx, c->y, c->mean, c->rstd, c->x, c->g, c->b, c->n, c->h, 1e-5f);
    return dot(c->y, c->r, (size_t)c->n * c->h);
}
static void test_layernorm(void) {
    ln_case c = {.n = 6, .h = 24};
    size_t nh = (size_t)c.n * c.h;
    c.x = rand_vec(nh); c.g = rand_vec(c.h); c.b = rand_vec(c.h); c.r = rand_vec(nh);
    c.y = malloc(nh * 4); c.mean = malloc(c.n * 4); c.rstd = malloc(c.n * 4);
    float *dx = malloc(nh * 4), *dg = calloc(c.h, 4), *db = calloc(c.h, 4);
    ln_loss(&c);
    be->layernorm_bwd(be->ctx, dx, dg, db, c.r, c.x, c.mean, c.rstd, c.g, c.n, c.h);
    double ex = fd_error(c.x, nh, dx, ln_loss, &c), eg = fd_error(c.g, c.h, dg, ln_loss, &c);
    double eb = fd_error(c.b, c.h, db, ln_loss, &c);
    EXPECT("layernorm_bwd_input_vs_fd", ex < FD_TOL, "rel err %g", ex);
    EXPECT("layernorm_bwd_gamma_vs_fd", eg < FD_TOL, "rel err %g", eg);
    EXPECT("layernorm_bwd_beta_vs_fd", eb < FD_TOL, "rel err %g", eb);
}

/* ---- residual + dropout + LayerNorm, fused: the separate ops' values, and its backward against differences ---- */
typedef struct { tfb_residual_ln_desc d; float *x, *res, *bias, *r; } rln_case;
static double rln_loss(void *p) {
    rln_case *c = p;
    be->residual_ln_fwd(be->ctx, &c->d);
    return dot(c->d.y, c->r, (size_t)c->d.rows * c->d.cols);
}

/* The unfused sequence the layer ran before: bias_add, dropout_fwd, residual_add, layernorm_fwd, cast. */
static void rln_separate(const rln_case *c, float *h, float *y, uint16_t *y_lp, float *mean, float *rstd) {
    const tfb_residual_ln_desc *d = &c->d;
    size_t n = (size_t)d->rows * d->cols;
    memcpy(h, c->x, n * 4);
    be->bias_add(be->ctx, h, c->bias, d->rows, d->cols);
    be->dropout_fwd(be->ctx, h, TFB_F32, h, n, d->p, d->key);
    be->residual_add(be->ctx, h, c->res, h, n);
    be->layernorm_fwd(be->ctx, y, mean, rstd, h, d->gamma, d->beta, d->rows, d->cols, d->eps);
    be->cast(be->ctx, y_lp, TFB_BF16, y, TFB_F32, n);
}

static void test_residual_ln(void) {
    rln_case c = {.d = {.rows = 5, .cols = 22, .eps = 1e-5f, .p = 0.3f, .lp_type = TFB_BF16,
                        .key = {.seed = 9, .site = 4, .step = 2, .offset = 3}}}; /* rows straddle Philox groups */
    size_t n = 5 * 22;
    c.x = rand_vec(n), c.res = rand_vec(n), c.bias = rand_vec(22), c.r = rand_vec(n);
    float *g = rand_vec(22), *b = rand_vec(22), *h = malloc(n * 4), *y = malloc(n * 4), *st = malloc(4 * 5 * 4);
    float *h2 = malloc(n * 4), *y2 = malloc(n * 4), *x2 = malloc(n * 4);
    uint16_t *lp = malloc(n * 2), *lp2 = malloc(n * 2);
    c.d = (tfb_residual_ln_desc){.h = h, .y = y, .y_lp = lp, .lp_type = TFB_BF16, .mean = st, .rstd = st + 5, .x = c.x,
                                 .bias = c.bias, .residual = c.res, .gamma = g, .beta = b, .rows = 5, .cols = 22,
                                 .eps = 1e-5f, .p = 0.3f, .key = c.d.key};
    rln_loss(&c);
    rln_separate(&c, h2, y2, lp2, st + 10, st + 15);
    int same = tfb_rel_error(h2, h, n) == 0 && tfb_rel_error(y2, y, n) == 0 && memcmp(lp, lp2, n * 2) == 0 &&
               tfb_rel_error(st + 10, st, 10) == 0;
    EXPECT("residual_ln_fwd_equals_bias_dropout_residual_layernorm_cast", same, "fused and separate ops differ");
    memcpy(x2, c.x, n * 4); /* x aliasing y, as the layer's second sublayer calls it */
    tfb_residual_ln_desc in_place = c.d;
    in_place.x = x2, in_place.y = x2, in_place.y_lp = NULL;
    be->residual_ln_fwd(be->ctx, &in_place);
    EXPECT("residual_ln_fwd_in_place", tfb_rel_error(y2, x2, n) == 0, "x aliasing y changes y");
    uint16_t *x16 = malloc(n * 2); /* x as a 16-bit GEMM wrote it: the same as its FP32 widening */
    float *hw = malloc(n * 4), *yw = malloc(n * 4), *ht = malloc(n * 4), *yt = malloc(n * 4), *s2 = malloc(20 * 4);
    be->cast(be->ctx, x16, TFB_F16, c.x, TFB_F32, n);
    be->cast(be->ctx, x2, TFB_F32, x16, TFB_F16, n);
    tfb_residual_ln_desc typed = c.d, widened = c.d;
    typed.x = x16, typed.x_type = TFB_F16, typed.h = ht, typed.y = yt, typed.y_lp = NULL;
    typed.mean = s2, typed.rstd = s2 + 5;
    widened.x = x2, widened.h = hw, widened.y = yw, widened.y_lp = NULL, widened.mean = s2 + 10, widened.rstd = s2 + 15;
    be->residual_ln_fwd(be->ctx, &widened);
    be->residual_ln_fwd(be->ctx, &typed);
    EXPECT("residual_ln_fwd_fp16_x_reads_as_its_fp32_widening", tfb_rel_error(hw, ht, n) == 0 &&
                                                                   tfb_rel_error(yw, yt, n) == 0, "%s", "differs");
    free(x16), free(hw), free(yw), free(ht), free(yt), free(s2);
    float *dh = malloc(n * 4), *dx = malloc(n * 4), *dg = calloc(22, 4), *db = calloc(22, 4), *dbias = calloc(22, 4);
    be->residual_ln_bwd(be->ctx, &c.d, dh, dx, TFB_F32, dg, db, c.r);
    be->bias_grad(be->ctx, dbias, dx, 5, 22);
    double ex = fd_error(c.x, n, dx, rln_loss, &c), er = fd_error(c.res, n, dh, rln_loss, &c);
    double eb = fd_error(c.bias, 22, dbias, rln_loss, &c), eg = fd_error(g, 22, dg, rln_loss, &c);
    double ebeta = fd_error(b, 22, db, rln_loss, &c);
    EXPECT("residual_ln_bwd_vs_fd", ex < FD_TOL && er < FD_TOL && eb < FD_TOL && eg < FD_TOL && ebeta < FD_TOL,
           "rel err x %g residual %g bias %g gamma %g beta %g", ex, er, eb, eg, ebeta);
    uint16_t *dx16 = malloc(n * 2), *want = malloc(n * 2); /* dx as the projection's 16-bit GEMM operand */
    float *dh2 = malloc(n * 4);
    be->residual_ln_bwd(be->ctx, &c.d, dh2, dx16, TFB_BF16, dg, db, c.r);
    be->cast(be->ctx, want, TFB_BF16, dx, TFB_F32, n);
    EXPECT("residual_ln_bwd_bf16_dx_is_the_fp32_dx_rounded", memcmp(dx16, want, n * 2) == 0 &&
                                                               tfb_rel_error(dh, dh2, n) == 0, "%s", "differs");
    free(dx16), free(want), free(dh2);
    free(h), free(y), free(st), free(h2), free(y2), free(x2), free(lp), free(lp2), free(dh), free(dx), free(dg);
    free(db), free(dbias), free(g), free(b), free(c.x), free(c.res), free(c.bias), free(c.r);
}

/* ---- softmax with scale and key mask ---- */
typedef struct { int rows, cols; float scale; int *klen; float *x, *y, *r; } sm_case;
static double sm_loss(void *p) {
    sm_case *c = p;
    be->softmax_fwd(be->ctx, c->y, c->x, c->rows, c->cols, c->scale, c->klen, 2);
    return dot(c->y, c->r, (size_t)c->rows * c->cols);
}
static void test_softmax(void) {
    int klen[3] = {16, 9, 1};
    sm_case c = {.rows = 6, .cols = 16, .scale = 0.7f, .klen = klen};
    size_t n = (size_t)c.rows * c.cols;
    c.x = rand_vec(n); c.r = rand_vec(n); c.y = malloc(n * 4);
    float *dx = malloc(n * 4);
    sm_loss(&c);
    int masked_zero = 1;
    for (int r = 0; r < c.rows; r++) {
        double s = 0;
        for (int j = 0; j < c.cols; j++) {
            s += c.y[r * c.cols + j];
            if (j >= klen[r / 2] && c.y[r * c.cols + j] != 0.0f) masked_zero = 0;
        }
        if (fabs(s - 1) > 1e-5) masked_zero = 0;
    }
    EXPECT("softmax_rows_sum_to_one_and_mask_zeroes", masked_zero, "row sums or masked columns wrong");
    be->softmax_bwd(be->ctx, dx, TFB_F32, c.r, c.y, c.rows, c.cols, c.scale);
    double e = fd_error(c.x, n, dx, sm_loss, &c);
    EXPECT("softmax_bwd_vs_fd", e < FD_TOL, "rel err %g", e);
}

/* ---- attention softmax + dropout, fused: the separate ops' values, and its backward against differences ---- */
typedef struct { tfb_attn_softmax_desc d; float *x, *r; } asm_case;
static double asm_loss(void *p) {
    asm_case *c = p;
    be->attn_softmax_fwd(be->ctx, &c->d);
    return dot(c->d.att_d, c->r, (size_t)c->d.rows * c->d.cols);
}

/* att and att_d of the fused op equal softmax_fwd then dropout_fwd; a BF16 att_d is the FP32 one rounded. */
static int asm_matches_separate(const asm_case *c) {
    size_t n = (size_t)c->d.rows * c->d.cols;
    float *y = malloc(n * 4), *yd = malloc(n * 4);
    uint16_t *lp = malloc(n * 2);
    be->softmax_fwd(be->ctx, y, c->x, c->d.rows, c->d.cols, c->d.scale, c->d.key_len, c->d.rows_per_key);
    be->dropout_fwd(be->ctx, yd, TFB_F32, y, n, c->d.p, c->d.key);
    tfb_attn_softmax_desc b = c->d;
    b.att_d = lp, b.att_type = TFB_BF16;
    be->attn_softmax_fwd(be->ctx, &b);
    int same = tfb_rel_error(y, c->d.att, n) == 0 && tfb_rel_error(yd, c->d.att_d, n) == 0;
    for (size_t i = 0; i < n; i++) same &= lp[i] == tfb_f32_to_bf16(yd[i]);
    free(y), free(yd), free(lp);
    return same;
}

static void test_attn_softmax(void) {
    int klen[3] = {16, 9, 1};
    size_t n = 6 * 16;
    asm_case c = {.x = rand_vec(n), .r = rand_vec(n)};
    float *att = malloc(n * 4), *att_d = malloc(n * 4), *dx = malloc(n * 4), *datt = malloc(n * 4);
    c.d = (tfb_attn_softmax_desc){.att = att, .att_d = att_d, .att_type = TFB_F32, .in = c.x, .key_len = klen,
                                  .rows = 6, .cols = 16, .rows_per_key = 2, .scale = 0.7f, .p = 0.25f,
                                  .key = {.seed = 3, .site = 8, .step = 4, .offset = 5}};
    asm_loss(&c);
    int dropped = 0;
    for (size_t i = 0; i < n; i++) dropped += att[i] != 0 && att_d[i] == 0;
    EXPECT("attn_softmax_fwd_equals_softmax_then_dropout", asm_matches_separate(&c) && dropped > 0,
           "fused and separate ops differ, or nothing dropped (%d)", dropped);
    memcpy(datt, c.r, n * 4);
    be->attn_softmax_bwd(be->ctx, &c.d, dx, TFB_F32, datt, TFB_F32);
    double e = fd_error(c.x, n, dx, asm_loss, &c);
    EXPECT("attn_softmax_bwd_vs_fd", e < FD_TOL, "rel err %g", e);
    memcpy(datt, c.r, n * 4); /* din aliasing datt_d, as FP32 runs call it */
    be->attn_softmax_bwd(be->ctx, &c.d, datt, TFB_F32, datt, TFB_F32);
    EXPECT("attn_softmax_bwd_in_place", tfb_rel_error(dx, datt, n) == 0, "aliasing changes din");
    free(att), free(att_d), free(dx), free(datt), free(c.x), free(c.r);
}

/* 16-bit scores and probabilities (prob_type t), in place as the BERT layer runs it: att is the FP32 softmax of the
 * widened scores rounded, att_d the dropout of att as stored, and the backward reads att widened. */
static void attn_softmax_p16_test(tfb_dtype t, const char *name) {
    enum { R = 6, C = 16, E = R * C };
    int klen[3] = {16, 9, 1};
    float *x = rand_vec(E), *g = rand_vec(E), *w = malloc(E * 4), *ra = malloc(E * 4), *rd = malloc(E * 4);
    float *att_d = malloc(E * 4), *dx = malloc(E * 4), *rdx = malloc(E * 4), *datt = malloc(E * 4);
    uint16_t *p16 = malloc(E * 2), *r16 = malloc(E * 2);
    tfb_dropout_key key = {.seed = 3, .site = 8, .step = 4, .offset = 5};
    be->cast(be->ctx, p16, t, x, TFB_F32, E);
    be->cast(be->ctx, w, TFB_F32, p16, t, E);
    be->softmax_fwd(be->ctx, ra, w, R, C, 0.7f, klen, 2); /* the reference, op by op */
    be->cast(be->ctx, r16, t, ra, TFB_F32, E);
    be->cast(be->ctx, ra, TFB_F32, r16, t, E);
    be->dropout_fwd(be->ctx, rd, TFB_F32, ra, E, 0.25f, key);
    memcpy(rdx, g, E * 4);
    be->dropout_bwd(be->ctx, rdx, rdx, E, 0.25f, key);
    be->softmax_bwd(be->ctx, rdx, TFB_F32, rdx, ra, R, C, 0.7f);
    tfb_attn_softmax_desc d = {.att = p16, .att_d = att_d, .att_type = TFB_F32, .in = p16, .prob_type = t,
                               .key_len = klen, .rows = R, .cols = C, .rows_per_key = 2, .scale = 0.7f, .p = 0.25f,
                               .key = key};
    int ok = be->attn_softmax_fwd(be->ctx, &d) == TFB_OK;
    ok &= memcmp(p16, r16, E * 2) == 0 && tfb_rel_error(rd, att_d, E) == 0;
    memcpy(datt, g, E * 4);
    ok &= be->attn_softmax_bwd(be->ctx, &d, dx, TFB_F32, datt, TFB_F32) == TFB_OK && tfb_rel_error(rdx, dx, E) == 0;
    /* the layer's form: datt_d 16-bit as its GEMM wrote it, din written over it; the reference from its widening */
    uint16_t *g16 = malloc(E * 2), *want = malloc(E * 2);
    be->cast(be->ctx, g16, t, g, TFB_F32, E);
    be->cast(be->ctx, rdx, TFB_F32, g16, t, E);
    be->dropout_bwd(be->ctx, rdx, rdx, E, 0.25f, key);
    be->softmax_bwd(be->ctx, want, t, rdx, ra, R, C, 0.7f);
    ok &= be->attn_softmax_bwd(be->ctx, &d, g16, t, g16, t) == TFB_OK && memcmp(g16, want, E * 2) == 0;
    free(g16); free(want);
    EXPECT(name, ok, "%s", "differs from softmax, rounding, dropout and their backward op by op");
    free(x); free(g); free(w); free(ra); free(rd); free(att_d); free(dx); free(rdx); free(datt); free(p16); free(r16);
}

/* ---- GELU, tanh ---- */
typedef struct { tfb_act act; size_t n; float *x, *y, *r; } act_case;
static double act_loss(void *p) {
    act_case *c = p;
    be->act_fwd(be->ctx, c->act, c->y, c->x, c->n);
    return dot(c->y, c->r, c->n);
}
static void test_act(tfb_act act, const char *name) {
    act_case c = {.act = act, .n = 200};
    c.x = rand_vec(c.n); c.r = rand_vec(c.n); c.y = malloc(c.n * 4);
    for (size_t i = 0; i < c.n; i++) c.x[i] *= 3;
    float *dx = malloc(c.n * 4);
    be->act_bwd(be->ctx, act, dx, c.r, c.x, c.n);
    double e = fd_error(c.x, c.n, dx, act_loss, &c);
    EXPECT(name, e < FD_TOL, "rel err %g", e);
    float one = 1.0f, y;
    be->act_fwd(be->ctx, TFB_ACT_GELU, &y, &one, 1);
    if (act == TFB_ACT_GELU) EXPECT("gelu_value_at_1_is_erf_form", fabsf(y - 0.8413447f) < 1e-6f, "gelu(1) = %.7f", y);
}

/* ---- cross-entropy ---- */
typedef struct { int n, v; int *lab; float *x, loss; } xe_case;
static double xe_loss(void *p) {
    xe_case *c = p;
    be->xent_fwd(be->ctx, &c->loss, c->x, c->lab, c->n, c->v);
    return c->loss;
}
static void test_xent(void) {
    int lab[4] = {3, 0, -1, 9};
    xe_case c = {.n = 4, .v = 10, .lab = lab};
    size_t n = 40;
    c.x = rand_vec(n);
    float *dx = malloc(n * 4);
    be->xent_bwd(be->ctx, dx, c.x, lab, c.n, c.v, 1.0f);
    double e = fd_error(c.x, n, dx, xe_loss, &c);
    EXPECT("xent_bwd_vs_fd_with_ignored_row", e < FD_TOL, "rel err %g", e);
    float uniform[10] = {0}, l;
    int one = 4;
    be->xent_fwd(be->ctx, &l, uniform, &one, 1, 10);
    EXPECT("xent_uniform_is_log_v", fabsf(l - logf(10)) < 1e-6f, "loss %g", l);
}

/* ---- embedding: forward gathers, backward scatter-adds repeated ids ---- */
typedef struct { int n, h; int *ids; float *t, *y, *r; } emb_case;
static double emb_loss(void *p) {
    emb_case *c = p;
    be->embedding_fwd(be->ctx, c->y, c->t, c->ids, c->n, c->h, 0);
    return dot(c->y, c->r, (size_t)c->n * c->h);
}
static void test_embedding(void) {
    int ids[5] = {2, 0, 2, 4, 2}, order[5], count[6];
    emb_case c = {.n = 5, .h = 70, .ids = ids};
    c.t = rand_vec(5 * 70); c.r = rand_vec(5 * 70); c.y = malloc(5 * 70 * 4);
    float *dt = calloc(5 * 70, 4);
    tfb_embed_order(ids, 5, 5, order, count);
    be->embedding_bwd(be->ctx, dt, c.r, ids, order, c.n, c.h);
    double e = fd_error(c.t, 5 * 70, dt, emb_loss, &c);
    EXPECT("embedding_bwd_vs_fd_repeated_ids", e < FD_TOL, "rel err %g", e);
}

/* The order is the token indices sorted by id, ties in index order. */
static void test_embed_order(void) {
    enum { N = 300, V = 7 };
    int ids[N], order[N], count[V + 1], seen[N] = {0}, ok = 1;
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + i / 11) % V;
    tfb_embed_order(ids, N, V, order, count);
    for (int p = 0; p < N; p++) {
        ok &= order[p] >= 0 && order[p] < N && !seen[order[p]]++;
        if (p > 0) ok &= ids[order[p - 1]] < ids[order[p]] || (ids[order[p - 1]] == ids[order[p]] &&
                                                                order[p - 1] < order[p]);
    }
    EXPECT("embed_order_is_a_stable_sort_by_id", ok, "order broken");
}

/* The backward's documented sequence, written out per id: for each chunk of TFB_EMBED_CHUNK positions of the
 * order, the id's tokens there summed from zero, these pieces added in order, then the total added to the row.
 * The backend's ordered scatter must give these bits; three ids with runs of ~100 cross several chunks, and h = 70
 * spans two of the CPU's column blocks. */
static void test_embedding_sequence(void) {
    enum { N = 300, H = 70, V = 3 };
    int ids[N], order[N], count[V + 1];
    float *dout = rand_vec(N * H), *dt = rand_vec(V * H), *ref = malloc(V * H * 4);
    for (int i = 0; i < N; i++) ids[i] = (i * 7 + i / 13) % V;
    memcpy(ref, dt, V * H * 4);
    tfb_embed_order(ids, N, V, order, count);
    for (int v = 0; v < V; v++)
        for (int j = 0; j < H; j++) {
            float total = 0.0f;
            for (int k = 0; k * TFB_EMBED_CHUNK < N; k++) {
                float piece = 0.0f;
                for (int p = k * TFB_EMBED_CHUNK; p < N && p < (k + 1) * TFB_EMBED_CHUNK; p++)
                    if (ids[order[p]] == v) piece += dout[order[p] * H + j];
                total += piece;
            }
            ref[v * H + j] += total;
        }
    be->embedding_bwd(be->ctx, dt, dout, ids, order, N, H);
    EXPECT("embedding_bwd_sums_in_the_documented_sequence", tfb_rel_error(ref, dt, V * H) == 0, "%s", "values differ");
    free(dout); free(dt); free(ref);
}

/* ---- bias ---- */
static void test_bias(void) {
    int n = 7, h = 130;
    float *dy = rand_vec((size_t)n * h), *db = calloc(h, 4), *x = calloc((size_t)n * h, 4), *b = rand_vec(h);
    be->bias_grad(be->ctx, db, dy, n, h);
    be->bias_add(be->ctx, x, b, n, h);
    double err = 0;
    for (int j = 0; j < h; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) { s += dy[i * h + j]; err = fmax(err, fabs((double)x[i * h + j] - b[j])); }
        err = fmax(err, fabs(s - db[j]));
    }
    EXPECT("bias_add_and_grad_vs_loops", err < 1e-5, "max err %g", err);
}

/* ---- dropout: rate, scaling, backward = same mask, split-invariance ---- */
static void test_dropout(void) {
    size_t n = 100003;
    float *x = malloc(n * 4), *y = malloc(n * 4), *y2 = malloc(n * 4), *d = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    tfb_dropout_key k = {.seed = 7, .site = 3, .step = 5, .offset = 0};
    be->dropout_fwd(be->ctx, y, TFB_F32, x, n, 0.1f, k);
    size_t kept = 0;
    int scale_ok = 1;
    for (size_t i = 0; i < n; i++) {
        kept += y[i] != 0;
        if (y[i] != 0 && fabsf(y[i] - 1 / 0.9f) > 1e-6f) scale_ok = 0;
    }
    double rate = 1.0 - (double)kept / n;
    EXPECT("dropout_rate_and_scale", fabs(rate - 0.1) < 0.005 && scale_ok, "rate %g scale_ok %d", rate, scale_ok);
    tfb_dropout_key k1 = k, k2 = k;
    k2.offset = 40001; /* split at an offset that is not a multiple of 4 */
    be->dropout_fwd(be->ctx, y2, TFB_F32, x, 40001, 0.1f, k1);
    be->dropout_fwd(be->ctx, y2 + 40001, TFB_F32, x, n - 40001, 0.1f, k2);
    EXPECT("dropout_mask_independent_of_split", memcmp(y, y2, n * 4) == 0, "masks differ");
    be->dropout_bwd(be->ctx, d, x, n, 0.1f, k);
    EXPECT("dropout_bwd_uses_forward_mask", memcmp(y, d, n * 4) == 0, "masks differ");
    k.step = 6;
    be->dropout_fwd(be->ctx, y2, TFB_F32, x, n, 0.1f, k);
    EXPECT("dropout_mask_changes_with_step", memcmp(y, y2, n * 4) != 0, "same mask");
}

/* ---- fused bias + activation: the same numbers as the separate ops ---- */
static void test_fused_bias_act(void) {
    int n = 37, h = 150; /* h spans several column blocks, one partial */
    size_t nh = (size_t)n * h;
    float *x = rand_vec(nh), *bias = rand_vec(h), *dout = rand_vec(nh), *db0 = rand_vec(h);
    float *pre1 = malloc(nh * 4), *pre2 = malloc(nh * 4), *y1 = malloc(nh * 4), *y2 = malloc(nh * 4);
    float *d1 = malloc(nh * 4), *d2 = malloc(nh * 4), *db1 = malloc(h * 4), *db2 = malloc(h * 4);
    int same_fwd = 1, same_bwd = 1;
    for (int a = 0; a < 3; a++) {
        memcpy(pre1, x, nh * 4); memcpy(pre2, x, nh * 4); memcpy(db1, db0, h * 4); memcpy(db2, db0, h * 4);
        be->bias_add(be->ctx, pre1, bias, n, h);
        be->act_fwd(be->ctx, (tfb_act)a, y1, pre1, nh);
        be->bias_act_fwd(be->ctx, (tfb_act)a, y2, TFB_F32, pre2, TFB_F32, bias, n, h); /* pre2 is left as it is */
        same_fwd &= tfb_rel_error(y1, y2, nh) == 0 && tfb_rel_error(pre2, x, nh) == 0;
        be->act_bwd(be->ctx, (tfb_act)a, d1, dout, pre1, nh);
        be->bias_grad(be->ctx, db1, d1, n, h);
        memcpy(d2, dout, nh * 4);
        tfb_act_bias_bwd_desc d = {.act = (tfb_act)a, .din = d2, .dbias = db2, .dout = d2, .pre = pre2,
                                   .bias = bias, .n = n, .h = h}; /* in place */
        be->act_bias_bwd(be->ctx, &d);
        same_bwd &= tfb_rel_error(d1, d2, nh) == 0 && tfb_rel_error(db1, db2, h) == 0;
    }
    memcpy(db1, db0, h * 4); memcpy(db2, db0, h * 4);
    be->bias_grad(be->ctx, db1, dout, n, h);
    tfb_act_bias_bwd_desc id = {.din = d2, .dbias = db2, .dout = dout, .bias = bias, .n = n, .h = h}; /* identity */
    be->act_bias_bwd(be->ctx, &id);
    int same_id = tfb_rel_error(d2, dout, nh) == 0 && tfb_rel_error(db1, db2, h) == 0;
    memcpy(db2, db0, h * 4);
    memcpy(d1, d2, nh * 4);
    id.din = NULL, id.dout = x; /* the bias gradient alone: d2 untouched */
    be->act_bias_bwd(be->ctx, &id);
    memcpy(db1, db0, h * 4);
    be->bias_grad(be->ctx, db1, x, n, h);
    int grad_only = tfb_rel_error(db1, db2, h) == 0 && tfb_rel_error(d1, d2, nh) == 0;
    EXPECT("bias_act_fwd_equals_bias_add_then_act", same_fwd, "fused forward differs");
    EXPECT("act_bias_bwd_without_pre_is_a_copy_and_bias_grad", same_id, "differs from dout and bias_grad");
    EXPECT("act_bias_bwd_without_din_is_bias_grad_alone", grad_only, "differs from bias_grad, or wrote din");
    EXPECT("act_bias_bwd_equals_act_bwd_then_bias_grad", same_bwd, "fused backward differs");
    free(x); free(bias); free(dout); free(db0); free(pre1); free(pre2); free(y1); free(y2);
    free(d1); free(d2); free(db1); free(db2);
}

/* ---- GEMM ---- */
static float elem(const float *p, int ld, int trans, int r, int c) { return trans ? p[c * ld + r] : p[r * ld + c]; }
/* x rounded to 11 significant bits, ties to even (TF32), written independently of kernels/half.h */
static double round_11_bits(double x) {
    int e;
    double m = frexp(x, &e);
    return ldexp(nearbyint(ldexp(m, 11)), e - 11);
}
/* the largest error of one GEMM against loops; tf32: the loops see TF32-rounded inputs, and *unrounded gets the
 * error against loops over the unrounded ones */
static double gemm_case_tf32(int ta, int tb, int batch, tfb_dtype t, int tf32, double *unrounded);
static double gemm_case(int ta, int tb, int batch, tfb_dtype t) { return gemm_case_tf32(ta, tb, batch, t, 0, NULL); }
static double gemm_case_tf32(int ta, int tb, int batch, tfb_dtype t, int tf32, double *unrounded) {
    int m = 5, n = 7, k = 9, lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
    long long sa = (long long)lda * (ta ? k : m), sb = (long long)ldb * (tb ? n : k), sc = (long long)ldc * m;
    float *a = rand_vec((size_t)sa * batch), *b = rand_vec((size_t)sb * batch), *c = rand_vec((size_t)sc * batch);
    float *c0 = malloc((size_t)sc * batch * 4);
    memcpy(c0, c, (size_t)sc * batch * 4);
    uint16_t *a16 = malloc((size_t)sa * batch * 2), *b16 = malloc((size_t)sb * batch * 2);
    if (t != TFB_F32) { /* the reference sees the rounded 16-bit values */
        be->cast(be->ctx, a16, t, a, TFB_F32, (size_t)sa * batch);
        be->cast(be->ctx, b16, t, b, TFB_F32, (size_t)sb * batch);
        be->cast(be->ctx, a, TFB_F32, a16, t, (size_t)sa * batch);
        be->cast(be->ctx, b, TFB_F32, b16, t, (size_t)sb * batch);
    }
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f, .beta = 0.25f,
                       .a = t == TFB_F32 ? (void *)a : a16, .lda = lda, .stride_a = sa,
                       .b = t == TFB_F32 ? (void *)b : b16, .ldb = ldb, .stride_b = sb, .c = c, .ldc = ldc,
                       .stride_c = sc, .batch = batch, .in_type = t, .tf32 = tf32};
    be->gemm(be->ctx, &d);
    double err = 0, err_raw = 0;
    for (int q = 0; q < batch; q++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0, raw = 0;
                for (int l = 0; l < k; l++) {
                    double x = elem(a + q * sa, lda, ta, i, l), y = elem(b + q * sb, ldb, tb, l, j);
                    raw += x * y;
                    s += tf32 ? round_11_bits(x) * round_11_bits(y) : x * y;
                }
                double c_in = 0.25 * c0[q * sc + i * ldc + j], got = c[q * sc + i * ldc + j];
                err = fmax(err, fabs(0.5 * s + c_in - got));
                err_raw = fmax(err_raw, fabs(0.5 * raw + c_in - got));
            }
    if (unrounded) *unrounded = err_raw;
    free(a); free(b); free(c); free(c0); free(a16); free(b16);
    return err;
}
static void test_gemm(void) {
    double worst = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) worst = fmax(worst, gemm_case(ta, tb, 3, TFB_F32));
    EXPECT("gemm_fp32_all_transposes_batched_vs_loops", worst < 1e-5, "max err %g", worst);
    double e16 = fmax(gemm_case(0, 1, 2, TFB_F16), gemm_case(1, 0, 2, TFB_F16));
    double eb16 = fmax(gemm_case(0, 1, 2, TFB_BF16), gemm_case(1, 1, 2, TFB_BF16));
    EXPECT("gemm_fp16_inputs_fp32_accumulate", e16 < 1e-5, "max err %g", e16);
    EXPECT("gemm_bf16_inputs_fp32_accumulate", eb16 < 1e-5, "max err %g", eb16);
    double raw = 0, et = fmax(gemm_case_tf32(0, 0, 1, TFB_F32, 1, &raw), gemm_case_tf32(1, 1, 2, TFB_F32, 1, NULL));
    EXPECT("gemm_tf32_rounds_inputs_to_11_bits", et < 1e-5, "max err %g against loops over rounded inputs", et);
    EXPECT("gemm_tf32_differs_from_fp32", raw > 1e-4, "max err %g against unrounded inputs: no rounding", raw);
}

/* ---- AdamW against the closed form of its first step ---- */
static void test_adamw(void) {
    float w[2] = {1.0f, -2.0f}, g[2] = {0.5f, -0.25f}, m[2] = {0}, v[2] = {0};
    tfb_adamw_hparams hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                            .step = 1, .grad_scale = 0.5f};
    be->adamw(be->ctx, w, g, m, v, 2, &hp);
    /* step 1: m_hat = g', v_hat = g'^2, update = sign(g'); w -= lr * (sign + wd * w) */
    double e0 = fabs(w[0] - (1.0 - 0.1 * (1.0 + 0.01 * 1.0))), e1 = fabs(w[1] - (-2.0 - 0.1 * (-1.0 + 0.01 * -2.0)));
    EXPECT("adamw_first_step_closed_form", e0 < 1e-6 && e1 < 1e-6, "errors %g %g", e0, e1);
    EXPECT("adamw_moments", fabsf(m[0] - 0.025f) < 1e-7f && fabsf(v[0] - 0.0000625f) < 1e-9f, "m %g v %g", m[0], v[0]);
}

/* ---- the pool updates equal tensor-by-tensor updates with decay exactly inside the runs ---- */
static int differ(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 1;
    return 0;
}

static void test_pool_updates(void) {
    enum { N = 1000 };
    static float w[2][N], g[N], m[2][N], v[2][N];
    const uint64_t runs[6] = {0, 100, 250, 600, 999, 1000}; /* decay: [0,100) [250,600) [999,1000) */
    for (int i = 0; i < N; i++) {
        w[0][i] = w[1][i] = sinf((float)i), g[i] = cosf(0.37f * (float)i);
        m[0][i] = m[1][i] = 0.01f * (float)(i % 7), v[0][i] = v[1][i] = 1e-3f * (float)(1 + i % 5);
    }
    tfb_adamw_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .step = 3, .grad_scale = 0.5f}, off = hp;
    off.weight_decay = 0.0f;
    static uint16_t lp[2][N]; /* the 16-bit weight copy written by the update, against the updated w rounded */
    be->adamw_pool(be->ctx, w[0], g, m[0], v[0], N, runs, 3, &hp, lp[0], TFB_BF16);
    be->cast(be->ctx, lp[1], TFB_BF16, w[0], TFB_F32, N);
    int lp_same = !memcmp(lp[0], lp[1], sizeof lp[0]);
    const size_t cut[7] = {0, 100, 250, 600, 999, 1000, N};
    for (int k = 0; k < 6; k++) /* even pieces decay, odd ones do not */
        be->adamw(be->ctx, w[1] + cut[k], g + cut[k], m[1] + cut[k], v[1] + cut[k], cut[k + 1] - cut[k],
                  k % 2 == 0 ? &hp : &off);
    int bad = differ(w[0], w[1], N) || differ(m[0], m[1], N) || differ(v[0], v[1], N);
    EXPECT("adamw_pool_equals_tensor_by_tensor", !bad, "%s", "differs");
    tfb_sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.05f, .grad_scale = 0.25f}, soff = sh;
    soff.weight_decay = 0.0f;
    be->sgd_pool(be->ctx, w[0], g, m[0], N, runs, 3, &sh, lp[0], TFB_F16);
    be->cast(be->ctx, lp[1], TFB_F16, w[0], TFB_F32, N);
    lp_same &= !memcmp(lp[0], lp[1], sizeof lp[0]);
    for (int k = 0; k < 6; k++)
        be->sgd(be->ctx, w[1] + cut[k], g + cut[k], m[1] + cut[k], cut[k + 1] - cut[k], k % 2 == 0 ? &sh : &soff);
    bad = differ(w[0], w[1], N) || differ(m[0], m[1], N);
    EXPECT("sgd_pool_equals_tensor_by_tensor", !bad, "%s", "differs");
    EXPECT("pool_updates_write_the_16bit_copy_of_the_updated_weights", lp_same, "%s", "differs from a cast");
    EXPECT("pool_update_rejects_unsorted_runs",
           be->sgd_pool(be->ctx, w[0], g, m[0], N, (const uint64_t[]){500, 600, 100, 200}, 2, &sh, NULL, TFB_F32) ==
               TFB_ERR_ARG,
           "%s", "accepted");
}

/* ---- conversions and the finiteness check ---- */
static void test_casts(void) {
    EXPECT("f16_max_normal", tfb_f32_to_f16(65504.0f) == 0x7BFF, "got %04x", tfb_f32_to_f16(65504.0f));
    EXPECT("f16_overflow_is_inf", tfb_f32_to_f16(65520.0f) == 0x7C00 && isinf(tfb_f16_to_f32(0x7C00)), "no inf");
    EXPECT("f16_one_and_subnormal", tfb_f32_to_f16(1.0f) == 0x3C00 && tfb_f32_to_f16(5.9604645e-8f) == 0x0001 &&
                                        tfb_f16_to_f32(0x0001) == 5.9604645e-8f, "bits wrong");
    EXPECT("f16_round_to_nearest_even", tfb_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00 &&
                                            tfb_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02, "rounding wrong");
    EXPECT("bf16_round_trip", tfb_f32_to_bf16(1.0f) == 0x3F80 && tfb_bf16_to_f32(0x4049) == 3.140625f &&
                                  tfb_f32_to_bf16(3.14159265f) == 0x4049, "bits wrong");
    float x[5] = {1, 2, 3, 4, 5};
    int ok = 0;
    be->check_finite(be->ctx, x, 5, &ok);
    int before = ok;
    x[3] = NAN;
    be->check_finite(be->ctx, x, 5, &ok);
    EXPECT("check_finite_finds_nan", before == 1 && ok == 0, "before %d after %d", before, ok);
}

/* ---- normal_fill: Box-Muller over the Philox stream, element by element, and the moments of a normal ---- */
static void test_normal_fill(void) {
    enum { ROWS = 3, PER = 2001 }; /* odd: the last pair of a row keeps one value */
    static float x[ROWS * PER];
    tfb_philox_key k = tfb_philox_key_make(42, 7);
    be->normal_fill(be->ctx, x, ROWS, PER, 1000, k);
    int bad = 0;
    double sum = 0, sq = 0;
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < PER; i += 2) {
            tfb_philox_ctr c = tfb_philox_block(k, ((uint64_t)(1000 + r) << 24) + ((uint64_t)i << 1), 1);
            float u1 = tfb_u32_to_unit(c.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(c.v[1]);
            float rad = sqrtf(-2.0f * logf(u1));
            bad += x[r * PER + i] != rad * cosf(6.28318530718f * u2);
            if (i + 1 < PER) bad += x[r * PER + i + 1] != rad * sinf(6.28318530718f * u2);
        }
    for (int i = 0; i < ROWS * PER; i++) sum += x[i], sq += (double)x[i] * x[i];
    double mean = sum / (ROWS * PER), var = sq / (ROWS * PER) - mean * mean;
    EXPECT("normal_fill_matches_box_muller_loops", bad == 0, "%d wrong", bad);
    EXPECT("normal_fill_moments", fabs(mean) < 0.05 && fabs(var - 1) < 0.08, "mean %g var %g", mean, var);
}

/* ---- permute_0213 against index loops, and its inverse restoring the input ---- */
static void test_permute(void) {
    enum { N0 = 2, N1 = 5, N2 = 3, N3 = 4, LD = 3 * N2 * N3 };
    float in[N0 * N1 * LD], out[N0 * N2 * N1 * N3], back[N0 * N1 * LD], bias[N2 * N3];
    for (int i = 0; i < N0 * N1 * LD; i++) in[i] = (float)i + 0.5f, back[i] = -1.0f;
    for (int i = 0; i < N2 * N3; i++) bias[i] = 1000.0f * (float)(i + 1);
    const float *src = in + N2 * N3; /* the middle third of each row, as K inside a QKV row */
    be->permute_0213(be->ctx, out, TFB_F32, N1 * N3, src, TFB_F32, LD, NULL, N0, N1, N2, N3);
    int bad = 0;
    for (int i0 = 0; i0 < N0; i0++)
        for (int i1 = 0; i1 < N1; i1++)
            for (int i2 = 0; i2 < N2; i2++)
                for (int i3 = 0; i3 < N3; i3++)
                    bad += out[((i0 * N2 + i2) * N1 + i1) * N3 + i3] != src[(i0 * N1 + i1) * LD + i2 * N3 + i3];
    EXPECT("permute_0213_matches_loops", bad == 0, "%d wrong", bad);
    be->permute_0213(be->ctx, back + N2 * N3, TFB_F32, LD, out, TFB_F32, N1 * N3, NULL, N0, N2, N1, N3);
    for (int i = 0; i < N0 * N1 * LD; i++) {
        int inside = i % LD >= N2 * N3 && i % LD < 2 * N2 * N3;
        bad += inside ? back[i] != in[i] : back[i] != -1.0f;
    }
    EXPECT("permute_0213_inverse_restores_only_its_columns", bad == 0, "%d wrong", bad);
    be->permute_0213(be->ctx, out, TFB_F32, N1 * N3, src, TFB_F32, LD, bias, N0, N1, N2, N3);
    for (int i0 = 0; i0 < N0; i0++)
        for (int i1 = 0; i1 < N1; i1++)
            for (int i2 = 0; i2 < N2; i2++)
                for (int i3 = 0; i3 < N3; i3++)
                    bad += out[((i0 * N2 + i2) * N1 + i1) * N3 + i3] !=
                           src[(i0 * N1 + i1) * LD + i2 * N3 + i3] + bias[i2 * N3 + i3];
    EXPECT("permute_0213_adds_the_bias_of_each_input_column", bad == 0, "%d wrong", bad);
}

/* ---- ops writing a 16-bit output (GEMM operands): the FP32 output rounded, bit for bit; sums from FP32 ---- */
static void typed_out_test(tfb_dtype t, const char *name) {
    enum { R = 6, C = 40, E = R * C };
    float *x = rand_vec(E), *dy = rand_vec(E), *pre = rand_vec(E), *pre2 = malloc(E * 4), *bias = rand_vec(C);
    float *y = malloc(E * 4), *att = malloc(E * 4);
    uint16_t *h = malloc(E * 2), *r = malloc(E * 2);
    float db[2][C] = {{0}}; /* act_bias_bwd's bias gradients, FP32 and 16-bit runs */
    int same = 1;
    tfb_dropout_key k = {.seed = 7, .site = 3, .step = 2, .offset = 5};
    be->softmax_fwd(be->ctx, att, x, R, C, 0.5f, NULL, 1);
    for (int op = 0; op < 8; op++) {
        tfb_dtype ts[2] = {TFB_F32, t};
        memset(y, 0, E * 4); /* the permute writes half of them */
        memset(h, 0, E * 2);
        for (int i = 0; i < 2; i++) {
            void *out = i ? (void *)h : (void *)y;
            memcpy(pre2, pre, E * 4);
            if (op == 0) be->softmax_bwd(be->ctx, out, ts[i], dy, att, R, C, 0.5f);
            if (op == 1) be->bias_act_fwd(be->ctx, TFB_ACT_GELU, out, ts[i], pre2, TFB_F32, bias, R, C);
            if (op == 2) be->dropout_fwd(be->ctx, out, ts[i], x, E, 0.25f, k);
            if (op == 3) be->dropout_fwd(be->ctx, out, ts[i], x, E, 0.0f, k);
            if (op == 4) be->permute_0213(be->ctx, out, ts[i], 2 * 5, x, TFB_F32, C, NULL, R / 2, 2, 4, 5);
            if (op == 5) be->permute_0213(be->ctx, out, ts[i], 2 * 5, x, TFB_F32, C, bias, R / 2, 2, 4, 5);
            tfb_act_bias_bwd_desc ab = {.act = TFB_ACT_GELU, .din = out, .din_type = ts[i], .dbias = db[i],
                                        .dout = dy, .pre = op == 6 ? pre : NULL, .bias = bias, .n = R, .h = C};
            if (op == 6 || op == 7) be->act_bias_bwd(be->ctx, &ab);
        }
        be->cast(be->ctx, r, t, y, TFB_F32, E);
        same &= !memcmp(h, r, E * 2);
        for (int j = 0; j < C; j++) same &= db[0][j] == db[1][j]; /* the sums are of FP32 values in both */
        if (!same) { printf("  op %d differs\n", op); break; }
    }
    EXPECT(name, same, "a 16-bit output is not the FP32 one rounded");
    free(x); free(dy); free(pre); free(pre2); free(bias); free(y); free(att); free(h); free(r);
}

/* ---- ops reading a 16-bit input (GEMM results): the same numbers as on its FP32 widening, bit for bit ---- */
static void typed_in_test(tfb_dtype t, const char *name) {
    enum { R = 6, C = 40, E = R * C };
    float *x = rand_vec(E), *dy = rand_vec(E), *bias = rand_vec(C), *w = malloc(E * 4), *y = malloc(E * 4);
    float *y2 = malloc(E * 4);
    uint16_t *x16 = malloc(E * 2);
    float db[2][C] = {{0}};
    be->cast(be->ctx, x16, t, x, TFB_F32, E);
    be->cast(be->ctx, w, TFB_F32, x16, t, E); /* w: x16 widened */
    int same = 1;
    for (int op = 0; op < 4; op++) {
        for (int i = 0; i < 2; i++) {
            const void *in = i ? (const void *)x16 : (const void *)w;
            tfb_dtype it = i ? t : TFB_F32;
            float *out = i ? y2 : y;
            memset(out, 0, E * 4);
            tfb_act_bias_bwd_desc ab = {.act = TFB_ACT_GELU, .din = out, .dbias = db[i], .dout = dy, .pre = in,
                                        .pre_type = it, .bias = bias, .n = R, .h = C};
            if (op == 3) ab.dout = in, ab.dout_type = it, ab.pre = dy, ab.pre_type = TFB_F32; /* a 16-bit dout */
            if (op == 0) be->bias_act_fwd(be->ctx, TFB_ACT_GELU, out, TFB_F32, in, it, bias, R, C);
            if (op == 1 || op == 3) be->act_bias_bwd(be->ctx, &ab);
            if (op == 2) be->permute_0213(be->ctx, out, TFB_F32, 2 * 5, in, it, C, bias, R / 2, 2, 4, 5);
        }
        same &= tfb_rel_error(y, y2, E) == 0;
        for (int j = 0; j < C; j++) same &= db[0][j] == db[1][j];
        if (!same) { printf("  op %d differs\n", op); break; }
    }
    EXPECT(name, same, "a 16-bit input gives other numbers than its FP32 widening");
    free(x); free(dy); free(bias); free(w); free(y); free(y2); free(x16);
}

/* A GEMM writing a 16-bit C (rows ldc apart, beta reading the old C) against the FP32 GEMM rounded; the gaps
 * between rows are left alone, and a C type other than FP32 or the input type is refused. */
static void gemm_c16_test(tfb_dtype t, const char *name) {
    enum { M = 5, N = 7, K = 9, LDC = 10, B = 2, SC = M * LDC + 3 };
    float *a = rand_vec(M * K * B), *b = rand_vec(K * N * B), *c = rand_vec(SC * B), *r = malloc(SC * B * 4);
    uint16_t *a16 = malloc(M * K * B * 2), *b16 = malloc(K * N * B * 2), *c16 = malloc(SC * B * 2);
    uint16_t *want = malloc(SC * B * 2);
    be->cast(be->ctx, a16, t, a, TFB_F32, M * K * B);
    be->cast(be->ctx, b16, t, b, TFB_F32, K * N * B);
    be->cast(be->ctx, c16, t, c, TFB_F32, SC * B);
    be->cast(be->ctx, r, TFB_F32, c16, t, SC * B); /* the reference starts from the same C */
    tfb_gemm_desc d = {.m = M, .n = N, .k = K, .alpha = 0.5f, .beta = 0.75f, .a = a16, .lda = K, .stride_a = M * K,
                       .b = b16, .ldb = N, .stride_b = K * N, .c = r, .ldc = LDC, .stride_c = SC, .batch = B,
                       .in_type = t};
    int ok = be->gemm(be->ctx, &d) == TFB_OK;
    be->cast(be->ctx, want, t, r, TFB_F32, SC * B); /* the gaps: C's old values again */
    d.c = c16, d.c_type = t;
    ok &= be->gemm(be->ctx, &d) == TFB_OK && memcmp(c16, want, SC * B * 2) == 0;
    d.c_type = t == TFB_F16 ? TFB_BF16 : TFB_F16;
    ok &= be->gemm(be->ctx, &d) == TFB_ERR_ARG;
    EXPECT(name, ok, "%s", "the 16-bit C is not the FP32 one rounded, or a mismatched C type was taken");
    free(a); free(b); free(c); free(r); free(a16); free(b16); free(c16); free(want);
}

/* Matrix q's offset in an operand grouped by g matrices (stride apart) whose groups are outer apart: written out
 * here, apart from kernels/backend.h's. */
static long long grouped_at(int q, int g, long long stride, long long outer) { return q / g * outer + q % g * stride; }

/* The largest error of d (FP32, alpha 0.5, beta 0.25, grouped by d->batch_inner) against loops; c0 is C before. */
static double grouped_error(const tfb_gemm_desc *d, const float *c0) {
    const float *a = d->a, *b = d->b, *c = d->c;
    double err = 0;
    int g = d->batch_inner;
    for (int q = 0; q < d->batch; q++)
        for (int i = 0; i < d->m; i++)
            for (int j = 0; j < d->n; j++) {
                double s = 0;
                for (int l = 0; l < d->k; l++)
                    s += (double)elem(a + grouped_at(q, g, d->stride_a, d->outer_a), d->lda, d->trans_a, i, l) *
                         elem(b + grouped_at(q, g, d->stride_b, d->outer_b), d->ldb, d->trans_b, l, j);
                long long e = grouped_at(q, g, d->stride_c, d->outer_c) + (long long)i * d->ldc + j;
                err = fmax(err, fabs(0.5 * s + 0.25 * c0[e] - c[e]));
            }
    return err;
}

/* Attention's GEMMs grouped by sample (batch_inner = heads) on token-major tensors: X (NB S, LD) holds Q, K and V
 * of NA heads of width D side by side. Scores P = Q K^T (head-major, every operand grouped), then Y = P V written
 * token-major into the columns of heads of an (NB S, LD) tensor: both against loops, Y's other columns left as
 * they were; a 16-bit Y is the FP32 one rounded (gaps included), and groups that do not divide the batch are
 * refused. */
static void test_gemm_grouped(void) {
    enum { NB = 2, NA = 3, S = 4, D = 5, W = NA * D, LD = 3 * W + 2, NX = NB * S * LD, NP = NB * NA * S * S };
    float *x = rand_vec(NX), *p = rand_vec(NP), *p0 = malloc(NP * 4), *y = rand_vec(NX), *y0 = malloc(NX * 4);
    memcpy(p0, p, NP * 4);
    memcpy(y0, y, NX * 4);
    tfb_gemm_desc qk = {.trans_b = 1, .m = S, .n = S, .k = D, .alpha = 0.5f, .beta = 0.25f, .a = x, .lda = LD,
                        .stride_a = D, .outer_a = S * LD, .b = x + W, .ldb = LD, .stride_b = D, .outer_b = S * LD,
                        .c = p, .ldc = S, .stride_c = S * S, .outer_c = NA * S * S, .batch = NB * NA,
                        .batch_inner = NA};
    int ok = be->gemm(be->ctx, &qk) == TFB_OK;
    double e_qk = grouped_error(&qk, p0);
    tfb_gemm_desc pv = {.m = S, .n = D, .k = S, .alpha = 0.5f, .beta = 0.25f, .a = p, .lda = S, .stride_a = S * S,
                        .outer_a = NA * S * S, .b = x + 2 * W, .ldb = LD, .stride_b = D, .outer_b = S * LD,
                        .c = y + 1, .ldc = LD, .stride_c = D, .outer_c = S * LD, .batch = NB * NA, .batch_inner = NA};
    ok &= be->gemm(be->ctx, &pv) == TFB_OK;
    double e_pv = grouped_error(&pv, y0 + 1);
    int gaps = 1;
    for (int r = 0; r < NB * S; r++)
        for (int j = 0; j < LD; j++)
            if (j < 1 || j > W) gaps &= y[r * LD + j] == y0[r * LD + j];
    EXPECT("gemm_grouped_token_major_vs_loops", ok && e_qk < 1e-5 && e_pv < 1e-5 && gaps,
           "errors %g %g, columns outside the heads %s", e_qk, e_pv, gaps ? "kept" : "written");
    uint16_t *x16 = malloc(NX * 2), *p16 = malloc(NP * 2), *y16 = malloc(NX * 2), *want = malloc(NX * 2);
    be->cast(be->ctx, x16, TFB_F16, x, TFB_F32, NX);
    be->cast(be->ctx, p16, TFB_F16, p, TFB_F32, NP);
    be->cast(be->ctx, y16, TFB_F16, y0, TFB_F32, NX);
    be->cast(be->ctx, y, TFB_F32, y16, TFB_F16, NX); /* the reference starts from the same Y */
    tfb_gemm_desc h = pv;
    h.a = p16, h.b = x16 + 2 * W, h.c = y + 1, h.in_type = TFB_F16;
    ok = be->gemm(be->ctx, &h) == TFB_OK;
    be->cast(be->ctx, want, TFB_F16, y, TFB_F32, NX);
    h.c = y16 + 1, h.c_type = TFB_F16;
    ok &= be->gemm(be->ctx, &h) == TFB_OK && memcmp(y16, want, NX * 2) == 0;
    h.batch_inner = 4;
    ok &= be->gemm(be->ctx, &h) == TFB_ERR_ARG;
    EXPECT("gemm_grouped_c16_is_the_fp32_c_rounded", ok, "%s",
           "the grouped 16-bit C is not the FP32 one rounded, or groups not dividing the batch were taken");
    free(x); free(p); free(p0); free(y); free(y0); free(x16); free(p16); free(y16); free(want);
}

/* ---- fused attention: the unfused ops' values, its backward against differences, heads of a tensor group ---- */
enum { AB = 2, AA = 2, AS = 8, AD = 4, AW = AA * AD, ALD = AW + 3, AQ = 3 * AB * AA * AS * AD, AC = AB * AS * ALD };
typedef struct { tfb_attn_desc d; float *qkv, *ctx, *r; } attn_case;

static double attn_loss(void *p) {
    attn_case *c = p;
    be->attn_fused_fwd(be->ctx, &c->d);
    return dot(c->ctx, c->r, AC);
}

/* The unfused layer's sequence, loops for its GEMMs: scores, attn_softmax_fwd (mask and dropout), P_d V. */
static void attn_unfused(const attn_case *c, float *ctx) {
    enum { BLK = AB * AA * AS * AD, NP = AB * AA * AS * AS };
    float *sc = malloc(NP * 4), *att = malloc(NP * 4), *att_d = malloc(NP * 4);
    const float *q = c->qkv, *k = q + BLK, *v = k + BLK;
    for (int bh = 0; bh < AB * AA; bh++)
        for (int i = 0; i < AS; i++)
            for (int j = 0; j < AS; j++) {
                float s = 0;
                for (int e = 0; e < AD; e++) s += q[(bh * AS + i) * AD + e] * k[(bh * AS + j) * AD + e];
                sc[(bh * AS + i) * AS + j] = s;
            }
    tfb_attn_softmax_desc sd = {.att = att, .att_d = att_d, .in = sc, .key_len = c->d.key_len, .rows = AB * AA * AS,
                                .cols = AS, .rows_per_key = AA * AS, .scale = c->d.scale, .p = c->d.p,
                                .key = c->d.key};
    be->attn_softmax_fwd(be->ctx, &sd);
    memcpy(ctx, c->ctx, AC * 4);
    for (int bh = 0; bh < AB * AA; bh++)
        for (int i = 0; i < AS; i++)
            for (int e = 0; e < AD; e++) {
                float o = 0;
                for (int j = 0; j < AS; j++) o += att_d[(bh * AS + i) * AS + j] * v[(bh * AS + j) * AD + e];
                ctx[((bh / AA) * AS + i) * ALD + (bh % AA) * AD + e] = o;
            }
    free(sc), free(att), free(att_d);
}

/* The gradients, token-major in dqkv (3 blocks of AW columns, ld ALD3), gathered head-major like qkv. */
static void attn_gather(const float *dqkv, int ld, float *out) {
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < AB; b++)
            for (int h = 0; h < AA; h++)
                for (int i = 0; i < AS; i++)
                    for (int e = 0; e < AD; e++)
                        out[(((t * AB + b) * AA + h) * AS + i) * AD + e] = dqkv[(b * AS + i) * ld + t * AW + h * AD + e];
}

static attn_case attn_case_make(const int *klen) {
    attn_case c = {.qkv = rand_vec(AQ), .ctx = rand_vec(AC), .r = rand_vec(AC)};
    c.d = (tfb_attn_desc){.qkv = c.qkv, .ctx = c.ctx, .ldc = ALD, .lse = malloc(AB * AA * AS * 4), .key_len = klen,
                          .batch = AB, .heads = AA, .heads_total = AA, .seq = AS, .head_dim = AD, .scale = 0.6f,
                          .p = 0.2f, .key = {.seed = 5, .site = 9, .step = 2, .offset = 12}};
    return c;
}

static void test_attn_fused(void) {
    enum { LDD = 3 * AW + 1 };
    int klen[AB] = {AS, 5};
    attn_case c = attn_case_make(klen);
    float *want = malloc(AC * 4), *dqkv = rand_vec(AB * AS * LDD), *g = malloc(AQ * 4), *rowdot = malloc(AB * AA * AS * 4);
    float *keep = malloc(AC * 4);
    memcpy(keep, c.ctx, AC * 4);
    attn_unfused(&c, want);
    int ok = be->attn_fused_supports(be->ctx, &c.d) && be->attn_fused_fwd(be->ctx, &c.d) == TFB_OK;
    int dropped = 0, gaps = 1;
    for (int r = 0; r < AB * AS; r++)
        for (int j = AW; j < ALD; j++) gaps &= c.ctx[r * ALD + j] == keep[r * ALD + j];
    EXPECT("attn_fused_fwd_equals_the_unfused_ops", ok && tfb_rel_error(want, c.ctx, AC) < 1e-5 && gaps,
           "rel err %g, columns outside the heads %s", tfb_rel_error(want, c.ctx, AC), gaps ? "kept" : "written");
    tfb_attn_desc nod = c.d;
    nod.p = 0;
    be->attn_fused_fwd(be->ctx, &nod);
    for (int i = 0; i < AC; i++) dropped += c.ctx[i] != want[i];
    EXPECT("attn_fused_dropout_applies", dropped > 0, "p = 0 gives the same context as p = 0.2");
    be->attn_fused_fwd(be->ctx, &c.d);
    float *spare = malloc(AB * AS * LDD * 4);
    memcpy(spare, dqkv, AB * AS * LDD * 4);
    tfb_attn_grads gr = {.dctx = c.r, .dq = dqkv, .dk = dqkv + AW, .dv = dqkv + 2 * AW, .ldd = LDD, .rowdot = rowdot};
    ok = be->attn_fused_bwd(be->ctx, &c.d, &gr) == TFB_OK;
    attn_gather(dqkv, LDD, g);
    int last = 1;
    for (int r = 0; r < AB * AS; r++) last &= dqkv[r * LDD + 3 * AW] == spare[r * LDD + 3 * AW];
    double e = fd_error(c.qkv, AQ, g, attn_loss, &c);
    EXPECT("attn_fused_bwd_vs_fd", ok && e < FD_TOL && last, "rel err %g, column past dV %s", e, last ? "kept" : "written");
    free(want), free(dqkv), free(g), free(rowdot), free(keep), free(spare);
    free(c.qkv), free(c.ctx), free(c.r), free(c.d.lse);
}

/* A rank of a tensor group holding head 1 of 2 draws head 1's dropout masks: its context columns equal those of
 * the whole layer's call, bit for bit; and 16-bit operands give the FP32 result of their widened values. */
static void test_attn_fused_heads(void) {
    enum { BLK = AB * AA * AS * AD, HB = AB * AS * AD };
    int klen[AB] = {6, AS};
    attn_case c = attn_case_make(klen);
    be->attn_fused_fwd(be->ctx, &c.d);
    float *one = malloc(3 * HB * 4), *ctx1 = malloc(AB * AS * AD * 4), lse1[AB * AS];
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < AB; b++)
            memcpy(one + (t * AB + b) * AS * AD, c.qkv + t * BLK + (b * AA + 1) * AS * AD, AS * AD * 4);
    tfb_attn_desc d = c.d;
    d.qkv = one, d.ctx = ctx1, d.ldc = AD, d.lse = lse1, d.heads = 1, d.key.offset += AS * AS;
    int same = be->attn_fused_fwd(be->ctx, &d) == TFB_OK;
    for (int r = 0; r < AB * AS; r++)
        for (int e = 0; e < AD; e++) same &= ctx1[r * AD + e] == c.ctx[r * ALD + AD + e];
    EXPECT("attn_fused_head_of_a_group_draws_the_layers_masks", same, "%s", "head 1 alone differs from the whole call");
    uint16_t *q16 = malloc(AQ * 2), *c16 = calloc(AC, 2);
    float *wide = malloc(AQ * 4), *got = malloc(AC * 4);
    be->cast(be->ctx, q16, TFB_BF16, c.qkv, TFB_F32, AQ);
    be->cast(be->ctx, wide, TFB_F32, q16, TFB_BF16, AQ);
    d = c.d;
    d.qkv = wide;
    be->attn_fused_fwd(be->ctx, &d);
    d.qkv = q16, d.ctx = c16, d.type = TFB_BF16;
    be->attn_fused_fwd(be->ctx, &d);
    be->cast(be->ctx, got, TFB_F32, c16, TFB_BF16, AC);
    double e = 0, s = 0;
    for (int r = 0; r < AB * AS; r++)
        for (int j = 0; j < AW; j++) {
            e = fmax(e, fabs((double)got[r * ALD + j] - c.ctx[r * ALD + j]));
            s = fmax(s, fabs((double)c.ctx[r * ALD + j]));
        }
    EXPECT("attn_fused_bf16_within_2e-2_of_fp32", e < 2e-2 * s && e > 0, "max err %g of %g", e, s);
    free(one), free(ctx1), free(q16), free(c16), free(wide), free(got);
    free(c.qkv), free(c.ctx), free(c.r), free(c.d.lse);
}

/* ---- timing marks: the CPU backend's are the host clock, in order, and an index past the reserve is an error ---- */
static void test_marks(void) {
    double a = -1, b = -1, back = 1;
    int ok = be->marks_reserve(be->ctx, 3) == TFB_OK && be->mark(be->ctx, 0) == TFB_OK;
    volatile double sink = 0;
    for (int i = 0; i < 2000000; i++) sink += i * 1e-9;
    ok &= be->mark(be->ctx, 1) == TFB_OK && be->mark(be->ctx, 2) == TFB_OK;
    ok &= be->mark_seconds(be->ctx, 0, 1, &a) == TFB_OK && be->mark_seconds(be->ctx, 1, 2, &b) == TFB_OK;
    ok &= be->mark_seconds(be->ctx, 1, 0, &back) == TFB_OK;
    EXPECT("marks_time_in_order", ok && a > 0 && b >= 0 && b < a && back == -a, "%g %g %g", a, b, back);
    EXPECT("marks_past_reserve_rejected", be->mark(be->ctx, 3) == TFB_ERR_ARG &&
                                              be->mark_seconds(be->ctx, 0, 3, &a) == TFB_ERR_ARG, "%s", "past 3");
}

/* ---- Philox4x32-10 known answers (Random123 kat_vectors) ---- */
static void test_philox(void) {
    tfb_philox_ctr z = tfb_philox4x32_10((tfb_philox_ctr){{0, 0, 0, 0}}, (tfb_philox_key){{0, 0}});
    tfb_philox_ctr f = tfb_philox4x32_10((tfb_philox_ctr){{~0u, ~0u, ~0u, ~0u}}, (tfb_philox_key){{~0u, ~0u}});
    tfb_philox_ctr p = tfb_philox4x32_10((tfb_philox_ctr){{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                         (tfb_philox_key){{0xa4093822u, 0x299f31d0u}});
    EXPECT("philox_kat_zero", z.v[0] == 0x6627e8d5u && z.v[1] == 0xe169c58du && z.v[2] == 0xbc57ac4cu &&
                                  z.v[3] == 0x9b00dbd8u, "%08x %08x %08x %08x", z.v[0], z.v[1], z.v[2], z.v[3]);
    EXPECT("philox_kat_ones", f.v[0] == 0x408f276du && f.v[1] == 0x41c83b0eu && f.v[2] == 0xa20bc7c6u &&
                                  f.v[3] == 0x6d5451fdu, "%08x %08x %08x %08x", f.v[0], f.v[1], f.v[2], f.v[3]);
    EXPECT("philox_kat_pi", p.v[0] == 0xd16cfe09u && p.v[1] == 0x94fdccebu && p.v[2] == 0x5001e420u &&
                                p.v[3] == 0x24126ea1u, "%08x %08x %08x %08x", p.v[0], p.v[1], p.v[2], p.v[3]);
}

int main(void) {
    char why[128];
    if (tfb_backend_open(&(tfb_backend_spec){.name = "cpu", .threads = 2}, &be, why, sizeof why) != TFB_OK) { printf("FAIL backend_open: %s\n", why); return 1; }
    test_layernorm();
    test_residual_ln();
    test_softmax();
    test_attn_softmax();
    attn_softmax_p16_test(TFB_F16, "attn_softmax_fp16_scores_in_place_equal_the_ops_in_turn");
    attn_softmax_p16_test(TFB_BF16, "attn_softmax_bf16_scores_in_place_equal_the_ops_in_turn");
    test_act(TFB_ACT_GELU, "gelu_bwd_vs_fd");
    test_act(TFB_ACT_TANH, "tanh_bwd_vs_fd");
    test_xent();
    test_embedding();
    test_embed_order();
    test_embedding_sequence();
    test_bias();
    test_dropout();
    test_gemm();
    test_fused_bias_act();
    test_adamw();
    test_pool_updates();
    test_casts();
    test_philox();
    test_marks();
    test_permute();
    typed_out_test(TFB_F16, "fp16_outputs_of_softmax_bwd_gelu_fwd_bwd_dropout_permute_are_fp32_rounded");
    typed_out_test(TFB_BF16, "bf16_outputs_of_softmax_bwd_gelu_fwd_bwd_dropout_permute_are_fp32_rounded");
    typed_in_test(TFB_F16, "fp16_inputs_of_gelu_fwd_bwd_dout_and_permute_read_as_their_fp32_widening");
    typed_in_test(TFB_BF16, "bf16_inputs_of_gelu_fwd_bwd_dout_and_permute_read_as_their_fp32_widening");
    gemm_c16_test(TFB_F16, "gemm_fp16_c_is_the_fp32_c_rounded");
    gemm_c16_test(TFB_BF16, "gemm_bf16_c_is_the_fp32_c_rounded");
    test_gemm_grouped();
    test_attn_fused();
    test_attn_fused_heads();
    test_normal_fill();
    be->destroy(be);
    return test_failures ? 1 : 0;
}
