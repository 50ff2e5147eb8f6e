/* test_bert_layer.c — one BERT encoder layer of tfbench (bench/bert_layer.c on the CPU backend) against the
 * reference PyTorch computed once (scripts/make-layer-fixture.py, tests/fixtures/bert_layer): the output, the input
 * gradient and every weight gradient, each within 1e-4 of the reference relative to its largest element (FP32).
 * Then the same layer in FP16 and BF16 (16-bit GEMM inputs) within the tolerance their rounding allows, and, on a
 * whole bert-mini, that each layer's LN2 hands the next layer its 16-bit input (no cast between layers) and that
 * the forward pass reads nothing back (each micro-batch's loss waits in the loss log for the driver's one read).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "rel_error.h"
#include "../bench/bert.h"
#include "../bench/bert_layer.h"
#include "../bench/npy.h"

enum { B = 2, S = 8, H = 32, A = 4, F = 128 };
static const char *dir = "tests/fixtures/bert_layer";

static float *load(const char *name, size_t want) {
    char path[512];
    float *d = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (tfb_npy_read_f32(path, &d, &n) != TFB_OK || n != want) {
        printf("FAIL load_%s: cannot read %s (%zu elements, want %zu)\n", name, path, n, want);
        exit(1);
    }
    return d;
}

typedef struct { const char *name; size_t n; } wspec;
static const wspec W[12] = {{"qkv_w", 3 * H * H}, {"qkv_b", 3 * H}, {"ao_w", H * H}, {"ao_b", H}, {"ln1_g", H},
                            {"ln1_b", H}, {"ff1_w", F * H}, {"ff1_b", F}, {"ff2_w", H * F}, {"ff2_b", H},
                            {"ln2_g", H}, {"ln2_b", H}};

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

/* A backend that counts the calls of every op the layer launches, passing them on to the CPU backend. */
static tfb_backend *inner;
static int calls;
static tfb_status count_gemm(void *ctx, const tfb_gemm_desc *d) { calls++; return inner->gemm(ctx, d); }
static tfb_status count_dropout_fwd(void *ctx, void *o, tfb_dtype t, const float *i, size_t n, float p,
                                    tfb_dropout_key k) {
    calls++;
    return inner->dropout_fwd(ctx, o, t, i, n, p, k);
}
static tfb_status count_dropout_bwd(void *ctx, float *o, const float *i, size_t n, float p, tfb_dropout_key k) {
    calls++;
    return inner->dropout_bwd(ctx, o, i, n, p, k);
}
static tfb_status count_attn_fwd(void *ctx, const tfb_attn_softmax_desc *d) {
    calls++;
    return inner->attn_softmax_fwd(ctx, d);
}
static tfb_status count_attn_bwd(void *ctx, const tfb_attn_softmax_desc *d, void *din, tfb_dtype t, void *datt,
                                 tfb_dtype dt) {
    calls++;
    return inner->attn_softmax_bwd(ctx, d, din, t, datt, dt);
}
static tfb_status count_permute(void *ctx, void *o, tfb_dtype t, size_t ol, const void *i, tfb_dtype it, size_t il,
                                const float *bias, int a, int b, int c, int d) {
    calls++;
    return inner->permute_0213(ctx, o, t, ol, i, it, il, bias, a, b, c, d);
}

/* GEMM, dropout, attention softmax and permutation calls of one forward and backward at `batch` samples (c->be
 * replaced meanwhile). */
static int launches(bert_ctx *c, int batch, const bert_layer_w *w, const bert_layer_w *dw, const float *x,
                    bert_layer_acts *a, const bert_layer_scratch *s, float *grad) {
    tfb_backend counting = *c->be;
    counting.gemm = count_gemm, counting.dropout_fwd = count_dropout_fwd, counting.dropout_bwd = count_dropout_bwd;
    counting.permute_0213 = count_permute, counting.attn_softmax_fwd = count_attn_fwd;
    counting.attn_softmax_bwd = count_attn_bwd;
    inner = c->be;
    bert_ctx cc = *c;
    cc.be = &counting, cc.batch = batch, cc.dropout = 0.1f;
    calls = 0;
    int ok = bert_layer_fwd(&cc, 0, w, x, a) == TFB_OK && bert_layer_bwd(&cc, 0, w, dw, x, a, s, grad) == TFB_OK;
    return ok ? calls : -1;
}

/* fused: attention through attn_fused_fwd/bwd (no (s, s) tensors), against the same PyTorch reference. */
static void run(tfb_backend *be, tfb_dtype t, double tol, const char *tag, int fused) {
    size_t N = B * S, total = 0;
    for (int i = 0; i < 12; i++) total += W[i].n;
    float *master = zeros(total), *grads = zeros(total);
    uint16_t *lp = calloc(total, 2);
    bert_layer_w w, dw;
    float **wp = (float **)&w, **gp = (float **)&dw;
    size_t off = 0;
    for (int i = 0; i < 12; i++) {
        float *v = load(W[i].name, W[i].n);
        memcpy(master + off, v, W[i].n * 4);
        free(v);
        wp[i] = master + off;
        gp[i] = grads + off;
        off += W[i].n;
    }
    if (t != TFB_F32) be->cast(be->ctx, lp, t, master, TFB_F32, total);
    int key_len[B] = {8, 5};
    size_t lpn = bert_layer_lp_elems(B, S, H, A, F, fused);
    bert_ctx c = {.be = be, .gemm_type = t, .batch = B, .seq = S, .hidden = H, .heads = A, .ffn = F,
                  .key_len = key_len, .fused_attention = fused, .lp_elems = lpn, .master_base = master,
                  .lp_weights = lp};
    for (int i = 0; i < 3; i++) c.lp[i] = calloc(lpn, 2);
    c.qkv = zeros(N * 3 * H);
    bert_layer_acts a = {.qkv_hm = zeros(N * 3 * H), .att = fused ? NULL : zeros(B * A * S * S),
                         .att_d = fused ? NULL : zeros(B * A * S * S), .lse = fused ? zeros(B * A * S) : NULL, .ctx = zeros(N * H), .h1 = zeros(N * H), .ln1_mean = zeros(N),
                         .ln1_rstd = zeros(N), .x1 = zeros(N * H), .u = zeros(N * F), .g = zeros(N * F),
                         .h2 = zeros(N * H), .ln2_mean = zeros(N), .ln2_rstd = zeros(N), .y = zeros(N * H)};
    if (t != TFB_F32) a.x_lp = zeros(N * H), a.x1_lp = zeros(N * H); /* the kept 16-bit casts */
    bert_layer_scratch s = {zeros(N * H), zeros(N * H), zeros(N * 3 * H), fused ? NULL : zeros(B * A * S * S),
                            zeros(N * F), fused ? zeros(B * A * S) : NULL};
    float *x = load("x", N * H), *grad = load("dy", N * H), *y = load("y", N * H), *dx = load("dx", N * H);
    char name[96];
    int ok_f = bert_layer_fwd(&c, 0, &w, x, &a) == TFB_OK;
    double ey = tfb_rel_error(y, a.y, N * H);
    snprintf(name, sizeof name, "bert_layer_%s_forward_vs_pytorch", tag);
    EXPECT(name, ok_f && ey < tol, "rel err %g (tolerance %g)", ey, tol);
    if (t != TFB_F32) { /* rounding to 16 bits must show: otherwise the 16-bit path did not run */
        snprintf(name, sizeof name, "bert_layer_%s_rounding_visible", tag);
        EXPECT(name, ey > 1e-5, "rel err %g equals FP32's", ey);
    }
    int ok_b = bert_layer_bwd(&c, 0, &w, &dw, x, &a, &s, grad) == TFB_OK;
    double ex = tfb_rel_error(dx, grad, N * H);
    snprintf(name, sizeof name, "bert_layer_%s_input_grad_vs_pytorch", tag);
    EXPECT(name, ok_b && ex < tol, "rel err %g (tolerance %g)", ex, tol);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < 12; i++) {
        char g[16];
        snprintf(g, sizeof g, "d%s", W[i].name);
        float *ref = load(g, W[i].n);
        double e = tfb_rel_error(ref, gp[i], W[i].n);
        if (e > worst) { worst = e; worst_name = W[i].name; }
        free(ref);
    }
    snprintf(name, sizeof name, "bert_layer_%s_weight_grads_vs_pytorch", tag);
    EXPECT(name, worst < tol, "worst %s rel err %g (tolerance %g)", worst_name, worst, tol);
    if (t == TFB_F32 && !fused) { /* attention is one call per op over all (sample, head) pairs, not one per sample */
        int one = launches(&c, 1, &w, &dw, x, &a, &s, grad), two = launches(&c, B, &w, &dw, x, &a, &s, grad);
        EXPECT("bert_layer_launches_independent_of_batch", one > 0 && one == two, "batch 1: %d calls, batch %d: %d",
               one, B, two);
    }
}

static int casts;
static tfb_status count_cast(void *ctx, void *d, tfb_dtype dt, const void *s, tfb_dtype st, size_t n) {
    casts++;
    return inner->cast(ctx, d, dt, s, st, n);
}

/* One FP16 forward of bert-mini (4 layers) with and without checkpointing: casts counted, the loss returned. */
static int model_forward_casts(tfb_backend *be, int checkpointing, double *loss) {
    const bert_config *cfg = bert_config_find("bert-mini");
    tfb_backend counting = *be;
    counting.cast = count_cast;
    inner = be;
    tfb_workload_config wc = {.local_batch = 2, .global_batch = 2, .seq_len = 16, .masked = 3, .gemm_type = TFB_F16,
                              .dropout = 0.1f, .seed = 5, .dp_size = 1, .pp_size = 1, .slots = 1,
                              .checkpointing = checkpointing};
    tfb_workload *wl = NULL;
    if (bert_create(cfg, &wc, &counting, &wl) != TFB_OK) return -1;
    int ok = wl->load_batch(wl->self, 0, 0, 0) == TFB_OK;
    casts = 0;
    ok &= wl->forward(wl->self, 0, 0, 0) == TFB_OK && tfb_loss_log_read(&wl->loss_log, &counting, 1, loss) == TFB_OK;
    int n = casts;
    wl->destroy(wl->self);
    return ok ? n : -1;
}

/* Without checkpointing a layer's LN2 writes the next layer's 16-bit input: the stage casts L - 1 fewer times than
 * with it (each layer casting its own input), and the loss is bit for bit the same. */
static void test_layer_input_chain(tfb_backend *be) {
    double l0 = 0, l1 = 1;
    int chained = model_forward_casts(be, 0, &l0), each = model_forward_casts(be, 1, &l1);
    int L = bert_config_find("bert-mini")->layers;
    EXPECT("bert_fp16_layers_take_their_input_from_ln2_not_a_cast", chained >= 0 && each - chained == L - 1 &&
                                                                          l0 == l1,
           "%d casts chained, %d each layer (%d layers), loss %.9g vs %.9g", chained, each, L, l0, l1);
}

/* One FP32 forward of bert-mini on step `step`'s batch, loaded after prepare_batch made step `ahead`'s (-1: none);
 * NaN when a call fails or the workload has no prepare_batch. */
static double model_forward_loss(tfb_backend *be, int step, int ahead) {
    tfb_workload_config wc = {.local_batch = 2, .global_batch = 2, .seq_len = 16, .masked = 3, .gemm_type = TFB_F32,
                              .dropout = 0.1f, .seed = 5, .dp_size = 1, .pp_size = 1, .slots = 1};
    tfb_workload *wl = NULL;
    double loss = NAN;
    if (bert_create(bert_config_find("bert-mini"), &wc, be, &wl) != TFB_OK) return NAN;
    int ok = ahead < 0 || (wl->prepare_batch && wl->prepare_batch(wl->self, ahead, 0) == TFB_OK);
    ok = ok && wl->load_batch(wl->self, step, 0, 0) == TFB_OK && wl->forward(wl->self, step, 0, 0) == TFB_OK &&
         tfb_loss_log_read(&wl->loss_log, be, 1, &loss) == TFB_OK;
    wl->destroy(wl->self);
    return ok ? loss : NAN;
}

/* A batch made ahead (prepare_batch, while the device finishes the step before) is the batch load_batch would make,
 * and one made for another step is not used. */
static void test_batch_made_ahead(tfb_backend *be) {
    double direct = model_forward_loss(be, 3, -1), ahead = model_forward_loss(be, 3, 3);
    double stale = model_forward_loss(be, 3, 4), other = model_forward_loss(be, 4, -1);
    EXPECT("bert_batch_made_ahead_is_the_batch_load_makes", isfinite(direct) && direct == ahead && direct == stale &&
                                                                 direct != other,
           "loss %.9g direct, %.9g made ahead, %.9g after another step's made ahead, %.9g the next step's", direct,
           ahead, stale, other);
}

static int waits; /* copies to the host and synchronisations */
static tfb_status count_d2h(void *ctx, void *dst, const void *src, size_t bytes) {
    waits++;
    return inner->copy_d2h(ctx, dst, src, bytes);
}
static tfb_status count_sync(void *ctx) {
    waits++;
    return inner->sync(ctx);
}
static tfb_status no_ready(void *ctx, size_t watermark) {
    (void)ctx, (void)watermark;
    return TFB_OK;
}

/* Micro-batch mb of step 0 through one activation set: forward (waits counted), then backward (frees the set). */
static int micro_batch(tfb_workload *wl, int mb, int *forward_waits) {
    if (wl->load_batch(wl->self, 0, mb, 0) != TFB_OK) return 0;
    waits = 0;
    int ok = wl->forward(wl->self, 0, mb, 0) == TFB_OK;
    *forward_waits += waits;
    return ok && wl->backward(wl->self, 0, mb, 0, 0.5f, no_ready, NULL) == TFB_OK;
}

/* The forward pass reads nothing back: each micro-batch's loss stays in its own loss log entry until the driver
 * reads the step's entries in one copy (two micro-batches here; the second leaves the first's entry alone). */
static void test_forward_reads_nothing_back(tfb_backend *be) {
    tfb_backend counting = *be;
    counting.copy_d2h = count_d2h;
    counting.sync = count_sync;
    inner = be;
    tfb_workload_config wc = {.local_batch = 2, .global_batch = 4, .seq_len = 16, .masked = 3, .gemm_type = TFB_F32,
                              .dropout = 0.1f, .seed = 5, .dp_size = 1, .pp_size = 1, .slots = 1, .microbatches = 2};
    tfb_workload *wl = NULL;
    int fwd_waits = 0, read_waits = -1, ok = bert_create(bert_config_find("bert-mini"), &wc, &counting, &wl) == TFB_OK;
    double first = NAN, again = NAN, both = NAN, past = NAN;
    ok = ok && micro_batch(wl, 0, &fwd_waits) && tfb_loss_log_read(&wl->loss_log, &counting, 1, &first) == TFB_OK;
    ok = ok && micro_batch(wl, 1, &fwd_waits) && tfb_loss_log_read(&wl->loss_log, &counting, 1, &again) == TFB_OK;
    waits = 0;
    ok = ok && tfb_loss_log_read(&wl->loss_log, &counting, 2, &both) == TFB_OK;
    read_waits = waits;
    ok = ok && tfb_loss_log_read(&wl->loss_log, &counting, 3, &past) == TFB_ERR_STATE; /* past the step's entries */
    if (wl) wl->destroy(wl->self);
    EXPECT("bert_forward_reads_nothing_back_loss_log_read_once", ok && fwd_waits == 0 && read_waits == 1 &&
                                                                    isfinite(first) && first == again &&
                                                                    isfinite(both - first) && both - first != first,
           "ok %d, %d waits in forward, %d in the read; losses %.9g, %.9g after the second micro-batch, sum %.9g", ok,
           fwd_waits, read_waits, first, again, both);
}

int main(void) {
    tfb_backend *be;
    char why[128];
    if (tfb_backend_open(&(tfb_backend_spec){.name = "cpu", .threads = 2}, &be, why, sizeof why) != TFB_OK) { printf("FAIL backend_open: %s\n", why); return 1; }
    run(be, TFB_F32, 1e-4, "fp32", 0);
    run(be, TFB_F16, 5e-3, "fp16", 0); /* 11-bit significands: ~5e-4 per operand, a few GEMMs deep */
    run(be, TFB_BF16, 4e-2, "bf16", 0); /* 8-bit significands: ~4e-3 per operand */
    run(be, TFB_F32, 1e-4, "fp32_fused_attention", 1);
    run(be, TFB_F16, 5e-3, "fp16_fused_attention", 1);
    run(be, TFB_BF16, 4e-2, "bf16_fused_attention", 1);
    test_layer_input_chain(be);
    test_batch_made_ahead(be);
    test_forward_reads_nothing_back(be);
    be->destroy(be);
    return test_failures ? 1 : 0;
}
