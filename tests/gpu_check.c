/* gpu_check.c — every op of a device backend (default: cuda) against the CPU backend, the numerical oracle.
 *
 * Each check draws fresh random inputs (never zeros), uploads the same bits to both backends, poisons the outputs
 * with NaN first (an element the device never writes fails), runs the op on both and compares: the error is the
 * largest |device - cpu| over the largest |cpu| of the output (normwise relative), and any NaN fails. Tolerances by
 * precision: FP32 1e-5, TF32 5e-3, FP16/BF16 2e-2. Prints one table row per check and exits 0 when all pass, 1 when
 * any fails, 2 when the device backend cannot be opened (the reason is printed). A few rows check the backend
 * rather than an op: its timing marks, its communicator of one rank (MPI starts for those rows only), and on a GPU
 * the probe behind the watchdog's hang report.
 *
 * `--device cpu` checks the CPU backend against itself, which exercises this harness without a GPU; the test hook
 * TFB_TEST_GPU_CHECK_BREAK=NAME perturbs one element of that check's device output, so the suite can show a broken
 * op is caught. `--only WORD,...` runs only the check groups whose call in gc_run_all contains one of the words
 * (`--only attn_fused,layernorm`), so a slow tool (compute-sanitizer) can run a few kernels; a list that selects
 * nothing is an error (exit 2). Whole training steps and the benchmark are in scripts/gpu-check.sh.
 *
 * Built a second time as gpu_check_emu (TFB_GPU_CHECK_EMU=1, with tests/emu/), it also knows `--device cuda-emu`:
 * the CUDA backend's own kernels run on the CPU, sized for `--sms N` streaming multiprocessors (default 4), so
 * their logic is checked on a machine with no GPU; GEMM and convolution run the backend's own cuBLAS and cuDNN
 * calls, computed by the stand-ins in tests/emu/ (emu_cublas.cpp, emu_cudnn.cpp).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../kernels/backend.h"
#include "../kernels/half.h"
#include "../bench/comm.h"
#include "rel_error.h"
#if TFB_GPU_CHECK_EMU
#include "emu/cuda_emu_backend.h"
#endif

#ifndef TFB_GPU_CHECK_EMU
#define TFB_GPU_CHECK_EMU 0
#endif
#define TOL_FP32 1e-5
#define TOL_TF32 5e-3
#define TOL_16 2e-2

typedef struct {
    void *p[2];        /* [0] on the CPU backend, [1] on the device backend */
    size_t n, esize;
} pair;

typedef struct {
    tfb_backend *be[2];
    uint64_t rng;
    int failed, checks;
    const char *brk;   /* the check whose device output the test hook perturbs */
    const char *only;  /* --only: comma-separated words; a check group runs when its call contains one */
    int groups;        /* check groups run */
    int mpi;           /* MPI was started (by the communicator's checks), so main finalizes it */
} gc_ctx;

static gc_ctx G;

/* Whether the check group written `call` in gc_run_all runs: always without --only, else when the call's text
 * contains one of --only's comma-separated words (counted in G.groups). */
static int gc_selected(const char *call) {
    const char *w = G.only;
    while (w && *w) {
        size_t n = strcspn(w, ",");
        char word[64];
        if (n > 0 && n < sizeof word) {
            memcpy(word, w, n);
            word[n] = '\0';
            if (strstr(call, word)) break;
        }
        w += n + (w[n] == ',');
    }
    int run = !G.only || (w && *w);
    G.groups += run;
    return run;
}

#define GC_RUN(call)                    \
    do {                                \
        if (gc_selected(#call)) (call); \
    } while (0)

static float urand(void) {
    G.rng ^= G.rng << 13; G.rng ^= G.rng >> 7; G.rng ^= G.rng << 17;
    return (float)((G.rng >> 11) * (1.0 / 9007199254740992.0));
}

/* uniform in [lo, hi), never exactly zero */
static float rnd(float lo, float hi) {
    float v = lo + (hi - lo) * urand();
    return v == 0.0f ? 0.5f * hi : v;
}

static pair upload(const void *host, size_t n, size_t esize) {
    pair t = {{NULL, NULL}, n, esize};
    for (int b = 0; b < 2; b++) {
        t.p[b] = G.be[b]->alloc(G.be[b]->ctx, n * esize);
        if (!t.p[b] || G.be[b]->copy_h2d(G.be[b]->ctx, t.p[b], host, n * esize) != TFB_OK) {
            fprintf(stderr, "gpu_check: could not allocate or upload %zu bytes\n", n * esize);
            exit(1);
        }
    }
    return t;
}

static pair rand_f32(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = rnd(lo, hi);
    pair t = upload(h, n, 4);
    free(h);
    return t;
}

/* n values of type t (FP32, FP16 or BF16) in [lo, hi) */
static pair rand_typed_in(size_t n, tfb_dtype t, float lo, float hi) {
    if (t == TFB_F32) return rand_f32(n, lo, hi);
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = t == TFB_F16 ? tfb_f32_to_f16(rnd(lo, hi)) : tfb_f32_to_bf16(rnd(lo, hi));
    pair p = upload(h, n, 2);
    free(h);
    return p;
}
static pair rand_typed(size_t n, tfb_dtype t) { return rand_typed_in(n, t, -1, 1); }

static pair rand_int(size_t n, int lo, int hi) {
    int *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = lo + (int)(urand() * (hi - lo));
    pair t = upload(h, n, 4);
    free(h);
    return t;
}

/* n ids in [0, rows) and their order for the embedding backward (tfb_embed_order) */
static void rand_ids_order(int n, int rows, pair *ids, pair *order) {
    int *h = malloc((size_t)n * sizeof *h), *o = malloc((size_t)n * sizeof *o);
    int *count = malloc(((size_t)rows + 1) * sizeof *count);
    for (int i = 0; i < n; i++) h[i] = (int)(urand() * rows);
    tfb_embed_order(h, n, rows, o, count);
    *ids = upload(h, (size_t)n, 4);
    *order = upload(o, (size_t)n, 4);
    free(h);
    free(o);
    free(count);
}

/* an output: NaN everywhere, so an element the op does not write fails */
static pair poisoned(size_t n) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    pair t = upload(h, n, 4);
    free(h);
    return t;
}

/* a 16-bit output: 0x7fff, a NaN in FP16 and in BF16, everywhere */
static pair poisoned16(size_t n) {
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = 0x7fff;
    pair t = upload(h, n, 2);
    free(h);
    return t;
}

static void release(pair *t) {
    for (int b = 0; b < 2; b++) G.be[b]->free(G.be[b]->ctx, t->p[b]);
}

static float *download(int b, const pair *t) {
    float *h = malloc(t->n * sizeof *h);
    if (G.be[b]->sync(G.be[b]->ctx) != TFB_OK || G.be[b]->copy_d2h(G.be[b]->ctx, h, t->p[b], t->n * 4) != TFB_OK) {
        fprintf(stderr, "gpu_check: the device failed (see above)\n");
        exit(1);
    }
    return h;
}

/* Compares outputs (FP32) of check `name`, prints its row. */
static void verdict(const char *name, const char *prec, double tol, const pair *outs, int n_outs) {
    double err = 0;
    for (int o = 0; o < n_outs; o++) {
        float *ref = download(0, &outs[o]), *dev = download(1, &outs[o]);
        if (G.brk && strcmp(G.brk, name) == 0 && o == 0) dev[outs[o].n / 2] += 1.0f + fabsf(dev[outs[o].n / 2]);
        err = fmax(err, tfb_rel_error(ref, dev, outs[o].n));
        free(ref);
        free(dev);
    }
    int ok = err <= tol;
    G.checks++;
    G.failed += !ok;
    printf("| %-40s | %-4s | %10.3g | %7.0e | %-4s |\n", name, prec, err, tol, ok ? "PASS" : "FAIL");
}

#define F(t) ((float *)(t).p[b])
#define I(t) ((int *)(t).p[b])
#define V(t) ((t).p[b])
/* Runs `call` on the CPU backend (b = 0) and the device backend (b = 1). */
#define BOTH(call)                                                            \
    for (int b = 0; b < 2; b++) {                                             \
        tfb_backend *be = G.be[b];                                            \
        if ((call) != TFB_OK) { fprintf(stderr, "gpu_check: %s failed on %s\n", #call, be->name); exit(1); } \
    }

static const char *prec_name(tfb_dtype t, int tf32) {
    return t == TFB_F16 ? "fp16" : t == TFB_BF16 ? "bf16" : tf32 ? "tf32" : "fp32";
}

static double prec_tol(tfb_dtype t, int tf32) { return t != TFB_F32 ? TOL_16 : tf32 ? TOL_TF32 : TOL_FP32; }

/* ---- dense algebra ---- */

static void check_gemm(int ta, int tb, int batch, tfb_dtype t, int tf32) {
    int m = 67, n = 45, k = 131;
    int lda = ta ? m : k, ldb = tb ? k : n;
    long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    pair a = rand_typed((size_t)sa * batch, t), bb = rand_typed((size_t)sb * batch, t), c = rand_f32((size_t)sc * batch, -1, 1);
    char name[40];
    BOTH(be->gemm(be->ctx, &(tfb_gemm_desc){.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f,
                                            .beta = 0.25f, .a = V(a), .lda = lda, .stride_a = sa, .b = V(bb),
                                            .ldb = ldb, .stride_b = sb, .c = F(c), .ldc = n, .stride_c = sc,
                                            .batch = batch, .in_type = t, .tf32 = tf32}));
    snprintf(name, sizeof name, "gemm %s%s x%d", ta ? "T" : "N", tb ? "T" : "N", batch);
    verdict(name, prec_name(t, tf32), prec_tol(t, tf32), &c, 1);
    release(&a); release(&bb); release(&c);
}

/* A GEMM writing its 16-bit C in the input type t, rows wider apart than n (the gaps keep their values), beta
 * reading the old C: compared as FP32 widenings. */
static void check_gemm_c16(int ta, int tb, int batch, tfb_dtype t) {
    int m = 67, n = 45, k = 131, ldc = n + 3;
    int lda = ta ? m : k, ldb = tb ? k : n;
    long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * ldc;
    size_t nc = (size_t)sc * batch;
    pair a = rand_typed((size_t)sa * batch, t), bb = rand_typed((size_t)sb * batch, t), c = rand_typed(nc, t);
    pair cw = poisoned(nc);
    char name[40];
    BOTH(be->gemm(be->ctx, &(tfb_gemm_desc){.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f,
                                            .beta = 0.25f, .a = V(a), .lda = lda, .stride_a = sa, .b = V(bb),
                                            .ldb = ldb, .stride_b = sb, .c = V(c), .ldc = ldc, .stride_c = sc,
                                            .batch = batch, .in_type = t, .c_type = t}));
    BOTH(be->cast(be->ctx, F(cw), TFB_F32, V(c), t, nc));
    snprintf(name, sizeof name, "gemm %s%s x%d c16", ta ? "T" : "N", tb ? "T" : "N", batch);
    verdict(name, prec_name(t, 0), TOL_16, &cw, 1);
    release(&a); release(&bb); release(&c); release(&cw);
}

/* Attention's GEMMs grouped by sample (batch_inner = heads) on a token-major X (NB S, 3W) holding Q, K and V of NA
 * heads of width D. C in FP32 or, with c16, in the input type. */
enum { GG_NB = 3, GG_NA = 4, GG_S = 37, GG_D = 16, GG_W = GG_NA * GG_D, GG_LD = 3 * GG_W };

/* The scores Q K^T, head-major, into a poisoned C. */
static void check_gemm_grouped_scores(tfb_dtype t, int c16) {
    enum { NB = GG_NB, NA = GG_NA, S = GG_S, D = GG_D, W = GG_W, LD = GG_LD };
    size_t nx = (size_t)NB * S * LD, np = (size_t)NB * NA * S * S;
    tfb_dtype ct = c16 ? t : TFB_F32;
    pair x = rand_typed(nx, t), p = c16 ? poisoned16(np) : poisoned(np), pw = poisoned(np);
    char name[48];
    BOTH(be->gemm(be->ctx, &(tfb_gemm_desc){.trans_b = 1, .m = S, .n = S, .k = D, .alpha = 0.125f, .a = V(x),
                                            .lda = LD, .stride_a = D, .outer_a = S * LD, .b = (char *)V(x) + W *
                                            tfb_dtype_size(t), .ldb = LD, .stride_b = D, .outer_b = S * LD,
                                            .c = V(p), .ldc = S, .stride_c = S * S, .outer_c = NA * S * S,
                                            .batch = NB * NA, .in_type = t, .c_type = ct, .batch_inner = NA}));
    BOTH(be->cast(be->ctx, F(pw), TFB_F32, V(p), ct, np));
    snprintf(name, sizeof name, "gemm grouped QK^T%s", c16 ? " c16" : "");
    verdict(name, prec_name(t, 0), prec_tol(t, 0), &pw, 1);
    release(&x); release(&p); release(&pw);
}

/* P V (ta 0) or P^T V (ta 1), P random, written into the heads' columns of a token-major C (NB S, 3W) whose other
 * columns keep their values (beta 0.25 reads the old C, so an unwritten head element fails too). */
static void check_gemm_grouped_tokens(int ta, tfb_dtype t, int c16) {
    enum { NB = GG_NB, NA = GG_NA, S = GG_S, D = GG_D, W = GG_W, LD = GG_LD };
    size_t nx = (size_t)NB * S * LD, np = (size_t)NB * NA * S * S;
    tfb_dtype ct = c16 ? t : TFB_F32;
    pair x = rand_typed(nx, t), y = rand_typed(nx, ct), yw = poisoned(nx), pr = rand_typed(np, t);
    char name[48];
    BOTH(be->gemm(be->ctx, &(tfb_gemm_desc){.trans_a = ta, .m = S, .n = D, .k = S, .alpha = 1.0f, .beta = 0.25f,
                                            .a = V(pr), .lda = S, .stride_a = S * S, .outer_a = NA * S * S,
                                            .b = (char *)V(x) + 2 * W * tfb_dtype_size(t), .ldb = LD, .stride_b = D,
                                            .outer_b = S * LD, .c = V(y), .ldc = LD, .stride_c = D,
                                            .outer_c = S * LD, .batch = NB * NA, .in_type = t, .c_type = ct,
                                            .batch_inner = NA}));
    BOTH(be->cast(be->ctx, F(yw), TFB_F32, V(y), ct, nx));
    snprintf(name, sizeof name, "gemm grouped %s->tokens%s", ta ? "P^T V" : "P V", c16 ? " c16" : "");
    verdict(name, prec_name(t, 0), prec_tol(t, 0), &yw, 1);
    release(&x); release(&y); release(&yw); release(&pr);
}

/* Each grouped GEMM with an FP32 C; in 16 bits, the scores and P^T V again with a 16-bit C. */
static void check_gemm_grouped(tfb_dtype t) {
    int c16 = t != TFB_F32;
    check_gemm_grouped_scores(t, 0);
    check_gemm_grouped_tokens(0, t, 0);
    if (c16) check_gemm_grouped_scores(t, 1);
    check_gemm_grouped_tokens(1, t, c16);
}

static void check_conv(int r, int stride, int pad, tfb_dtype t, int tf32, tfb_layout layout) {
    tfb_conv_desc d = {.n = 3, .c = 8, .h = 13, .w = 13, .k = 12, .r = r, .s = r, .stride = stride, .pad = pad,
                       .layout = layout, .in_type = t, .tf32 = tf32};
    const char *lay = layout == TFB_NHWC ? " nhwc" : "";
    d.p = (d.h + 2 * pad - r) / stride + 1;
    d.q = d.p;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * r * r, ny = (size_t)d.n * d.k * d.p * d.q;
    pair x = rand_typed(nx, t), w = rand_typed(nw, t), dy = rand_typed(ny, t);
    pair y = poisoned(ny), dx = poisoned(nx), dw = rand_f32(nw, -1, 1);
    char name[40];
    BOTH(be->conv_fwd(be->ctx, &d, F(y), V(x), V(w)));
    snprintf(name, sizeof name, "conv_fwd %dx%d/%d%s", r, r, stride, lay);
    verdict(name, prec_name(t, tf32), prec_tol(t, tf32), &y, 1);
    if (t != TFB_F32) { /* y and dx kept in 16 bits, as a 16-bit ResNet keeps its activations and gradients */
        pair y16 = poisoned16(ny), yw = poisoned(ny), dx16 = poisoned16(nx), dxw = poisoned(nx);
        tfb_conv_desc d16 = d;
        d16.y_type = d16.dx_type = t;
        BOTH(be->conv_fwd(be->ctx, &d16, V(y16), V(x), V(w)));
        BOTH(be->cast(be->ctx, F(yw), TFB_F32, V(y16), t, ny));
        snprintf(name, sizeof name, "conv_fwd %dx%d/%d%s y16", r, r, stride, lay);
        verdict(name, prec_name(t, tf32), TOL_16, &yw, 1);
        BOTH(be->conv_bwd_data(be->ctx, &d16, V(dx16), V(dy), V(w)));
        BOTH(be->cast(be->ctx, F(dxw), TFB_F32, V(dx16), t, nx));
        snprintf(name, sizeof name, "conv_bwd_data %dx%d/%d%s dx16", r, r, stride, lay);
        verdict(name, prec_name(t, tf32), TOL_16, &dxw, 1);
        release(&y16); release(&yw); release(&dx16); release(&dxw);
    }
    BOTH(be->conv_bwd_data(be->ctx, &d, F(dx), V(dy), V(w)));
    snprintf(name, sizeof name, "conv_bwd_data %dx%d/%d%s", r, r, stride, lay);
    verdict(name, prec_name(t, tf32), prec_tol(t, tf32), &dx, 1);
    BOTH(be->conv_bwd_filter(be->ctx, &d, F(dw), V(x), V(dy)));
    snprintf(name, sizeof name, "conv_bwd_filter %dx%d/%d%s", r, r, stride, lay);
    verdict(name, prec_name(t, tf32), prec_tol(t, tf32), &dw, 1);
    release(&x); release(&w); release(&dy); release(&y); release(&dx); release(&dw);
}

/* ---- transformer ops ---- */

static void check_embedding(void) {
    int n = 300, h = 300, rows = 50;
    pair table = rand_f32((size_t)rows * h, -1, 1), ids = rand_int((size_t)n, 0, rows);
    pair out = poisoned((size_t)n * h), acc = rand_f32((size_t)n * h, -1, 1);
    BOTH(be->embedding_fwd(be->ctx, F(out), F(table), I(ids), n, h, 0));
    verdict("embedding_fwd", "fp32", TOL_FP32, &out, 1);
    BOTH(be->embedding_fwd(be->ctx, F(acc), F(table), I(ids), n, h, 1));
    verdict("embedding_fwd accumulate", "fp32", TOL_FP32, &acc, 1);
    BOTH(be->embedding_fwd_shard(be->ctx, F(out), F(table), I(ids), n, h, 20, 25, 0));
    verdict("embedding_fwd_shard", "fp32", TOL_FP32, &out, 1);
    release(&table); release(&ids); release(&out); release(&acc);
}

/* The scatter-add of n tokens' gradients over `rows` ids (2: a run of hundreds per id, as token types; 50: runs
 * of a few, crossing chunk edges; 600: mostly single tokens), whole and on a shard of half the rows from 2/5 of
 * the way, in the sequence backend.h fixes: so the device must give the CPU's bits (tolerance 0). */
static void check_embedding_bwd(int n, int rows) {
    int h = 300, r0 = rows * 2 / 5, rs = rows / 2;
    pair ids, order, dout = rand_f32((size_t)n * h, -1, 1), dt = rand_f32((size_t)rows * h, -1, 1);
    pair ds = rand_f32((size_t)rs * h, -1, 1);
    char name[48];
    rand_ids_order(n, rows, &ids, &order);
    BOTH(be->embedding_bwd(be->ctx, F(dt), F(dout), I(ids), I(order), n, h));
    snprintf(name, sizeof name, "embedding_bwd %d tokens, %d ids", n, rows);
    verdict(name, "fp32", 0.0, &dt, 1);
    BOTH(be->embedding_bwd_shard(be->ctx, F(ds), F(dout), I(ids), I(order), n, h, r0, rs));
    snprintf(name, sizeof name, "embedding_bwd_shard %d tokens, %d ids", n, rows);
    verdict(name, "fp32", 0.0, &ds, 1);
    release(&ids); release(&order); release(&dout); release(&dt); release(&ds);
}

/* A gather's backward: distinct ids (a permutation of the rows), no order. */
static void check_embedding_bwd_distinct(void) {
    int n = 200, h = 300;
    int *perm = malloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    pair ids = upload(perm, (size_t)n, 4), dout = rand_f32((size_t)n * h, -1, 1), dt = rand_f32((size_t)n * h, -1, 1);
    free(perm);
    BOTH(be->embedding_bwd(be->ctx, F(dt), F(dout), I(ids), NULL, n, h));
    verdict("embedding_bwd distinct ids", "fp32", TOL_FP32, &dt, 1);
    release(&ids); release(&dout); release(&dt);
}

static void check_layernorm(void) {
    int n = 1030, h = 768; /* three row blocks per column tile in the parameter gradients' reduction */
    size_t nh = (size_t)n * h;
    pair x = rand_f32(nh, -2, 3), g = rand_f32((size_t)h, 0.5f, 1.5f), be_ = rand_f32((size_t)h, -1, 1);
    pair y = poisoned(nh), mean = poisoned((size_t)n), rstd = poisoned((size_t)n), dy = rand_f32(nh, -1, 1);
    pair dx = poisoned(nh), dg = rand_f32((size_t)h, -1, 1), db = rand_f32((size_t)h, -1, 1);
    BOTH(be->layernorm_fwd(be->ctx, F(y), F(mean), F(rstd), F(x), F(g), F(be_), n, h, 1e-5f));
    pair fwd[3] = {y, mean, rstd};
    verdict("layernorm_fwd", "fp32", TOL_FP32, fwd, 3);
    BOTH(be->layernorm_bwd(be->ctx, F(dx), F(dg), F(db), F(dy), F(x), F(mean), F(rstd), F(g), n, h));
    pair bwd[3] = {dx, dg, db};
    verdict("layernorm_bwd", "fp32", TOL_FP32, bwd, 3);
    release(&x); release(&g); release(&be_); release(&y); release(&mean); release(&rstd); release(&dy);
    release(&dx); release(&dg); release(&db);
}

/* The fused residual + dropout + LayerNorm (a transformer sublayer's tail): rows of 1000 columns from counter 13,
 * so rows straddle the four-counter Philox groups. */
typedef struct { pair x, bias, res, g, beta, h, y, lp, mean, rstd, dy, dh, dx, dg, db; int n, cols; } rln_bufs;

static tfb_residual_ln_desc rln_desc(const rln_bufs *r, int b, tfb_dtype t, float p) {
    return (tfb_residual_ln_desc){.h = F(r->h), .y = F(r->y), .y_lp = t == TFB_F32 ? NULL : V(r->lp), .lp_type = t,
                                  .mean = F(r->mean), .rstd = F(r->rstd), .x = F(r->x), .bias = F(r->bias),
                                  .residual = F(r->res), .gamma = F(r->g), .beta = F(r->beta), .rows = r->n,
                                  .cols = r->cols, .eps = 1e-5f, .p = p,
                                  .key = {.seed = 5, .site = 17, .step = 3, .offset = 13}};
}

static tfb_status rln_fwd(tfb_backend *be, const rln_bufs *r, int b, tfb_dtype t, float p, void *x_and_y) {
    tfb_residual_ln_desc d = rln_desc(r, b, t, p);
    if (x_and_y) d.x = d.y = x_and_y; /* in place, as BERT's second sublayer runs it */
    return be->residual_ln_fwd(be->ctx, &d);
}

/* x of type t, as the projection's 16-bit GEMM writes it (one rank) */
static tfb_status rln_fwd_x16(tfb_backend *be, const rln_bufs *r, int b, tfb_dtype t, float p, const void *x16) {
    tfb_residual_ln_desc d = rln_desc(r, b, t, p);
    d.x = x16, d.x_type = t;
    return be->residual_ln_fwd(be->ctx, &d);
}

/* dx of type t into r->dx (FP32) or r->lp (16-bit) */
static tfb_status rln_bwd(tfb_backend *be, const rln_bufs *r, int b, float p, tfb_dtype t) {
    tfb_residual_ln_desc d = rln_desc(r, b, TFB_F32, p);
    void *dx = t == TFB_F32 ? V(r->dx) : V(r->lp);
    return be->residual_ln_bwd(be->ctx, &d, F(r->dh), dx, t, F(r->dg), F(r->db), F(r->dy));
}

/* FP32 (t): the forward, the same in place, and the backward; FP16/BF16: the 16-bit copy of y. */
static void check_residual_ln(tfb_dtype t, float p) {
    rln_bufs r = {.n = 130, .cols = 1000};
    size_t nh = (size_t)r.n * r.cols, c = (size_t)r.cols;
    r.x = rand_f32(nh, -2, 2), r.bias = rand_f32(c, -1, 1), r.res = rand_f32(nh, -2, 2), r.g = rand_f32(c, 0.5f, 1.5f);
    r.beta = rand_f32(c, -1, 1), r.h = poisoned(nh), r.y = poisoned(nh), r.lp = poisoned16(nh);
    r.mean = poisoned((size_t)r.n), r.rstd = poisoned((size_t)r.n), r.dy = rand_f32(nh, -1, 1), r.dh = poisoned(nh);
    r.dx = poisoned(nh), r.dg = rand_f32(c, -1, 1), r.db = rand_f32(c, -1, 1);
    pair xy = poisoned(nh), lpw = poisoned(nh);
    char name[48];
    BOTH(rln_fwd(be, &r, b, t, p, NULL));
    if (t != TFB_F32) {
        BOTH(be->cast(be->ctx, F(lpw), TFB_F32, V(r.lp), t, nh));
        snprintf(name, sizeof name, "residual_ln_fwd y16 p=%g", p);
        verdict(name, prec_name(t, 0), TOL_16, &lpw, 1);
        pair x16 = poisoned16(nh);
        BOTH(be->cast(be->ctx, V(x16), t, F(r.x), TFB_F32, nh));
        BOTH(rln_fwd_x16(be, &r, b, t, p, V(x16)));
        pair fwd[4] = {r.h, r.y, r.mean, r.rstd};
        snprintf(name, sizeof name, "residual_ln_fwd x16 p=%g", p);
        verdict(name, prec_name(t, 0), TOL_16, fwd, 4);
        release(&x16);
        BOTH(rln_bwd(be, &r, b, p, t));
        BOTH(be->cast(be->ctx, F(lpw), TFB_F32, V(r.lp), t, nh));
        pair bwd[4] = {r.dh, lpw, r.dg, r.db};
        snprintf(name, sizeof name, "residual_ln_bwd dx16 p=%g", p);
        verdict(name, prec_name(t, 0), TOL_16, bwd, 4);
    } else {
        pair fwd[4] = {r.h, r.y, r.mean, r.rstd};
        snprintf(name, sizeof name, "residual_ln_fwd p=%g", p);
        verdict(name, "fp32", TOL_FP32, fwd, 4);
        BOTH(be->copy_2d(be->ctx, F(xy), r.cols, F(r.x), r.cols, r.n, r.cols));
        BOTH(rln_fwd(be, &r, b, t, p, F(xy)));
        snprintf(name, sizeof name, "residual_ln_fwd in place p=%g", p);
        verdict(name, "fp32", TOL_FP32, &xy, 1);
        BOTH(rln_bwd(be, &r, b, p, TFB_F32));
        pair bwd[4] = {r.dh, r.dx, r.dg, r.db};
        snprintf(name, sizeof name, "residual_ln_bwd p=%g", p);
        verdict(name, "fp32", TOL_FP32, bwd, 4);
    }
    pair all[] = {r.x, r.bias, r.res, r.g, r.beta, r.h, r.y, r.lp, r.mean, r.rstd, r.dy, r.dh, r.dx, r.dg, r.db, xy, lpw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}

static void check_softmax(void) {
    int rows = 96, cols = 128;
    size_t n = (size_t)rows * cols;
    pair x = rand_f32(n, -4, 4), y = poisoned(n), klen = rand_int(8, 1, cols + 1), dy = rand_f32(n, -1, 1);
    pair dx = poisoned(n);
    BOTH(be->softmax_fwd(be->ctx, F(y), F(x), rows, cols, 0.125f, I(klen), rows / 8));
    verdict("softmax_fwd masked", "fp32", TOL_FP32, &y, 1);
    BOTH(be->softmax_bwd(be->ctx, F(dx), TFB_F32, F(dy), F(y), rows, cols, 0.125f));
    verdict("softmax_bwd", "fp32", TOL_FP32, &dx, 1);
    BOTH(be->softmax_fwd(be->ctx, F(y), F(x), rows, cols, 1.0f, NULL, 1));
    verdict("softmax_fwd", "fp32", TOL_FP32, &y, 1);
    release(&x); release(&y); release(&klen); release(&dy); release(&dx);
}

/* Attention's fused softmax + dropout: att_d in type t, rows of `cols` columns (warp-per-row kernels up to 1024,
 * the two-op fallback above) with the dropout counters from `offset`, so rows straddle Philox groups when it or
 * cols is not a multiple of four; 4 key lengths of 12 rows each. */
typedef struct {
    pair x, klen, att, att_d, datt, datt2, din;
    int rows, cols;
    tfb_dtype t;
    float p;
    uint64_t off;
} asm_bufs;

static tfb_attn_softmax_desc asm_desc(const asm_bufs *a, int b, const float *in, float *att) {
    return (tfb_attn_softmax_desc){.att = att, .att_d = V(a->att_d), .att_type = a->t, .in = in,
                                   .key_len = I(a->klen), .rows = a->rows, .cols = a->cols, .rows_per_key = 12,
                                   .scale = 0.125f, .p = a->p, .key = {.seed = 8, .site = 21, .step = 2,
                                                                        .offset = a->off}};
}

/* v (of type t)'s FP32 view: v itself, or its cast into w */
static pair f32_view(pair v, tfb_dtype t, pair *w) {
    if (t == TFB_F32) return v;
    BOTH(be->cast(be->ctx, F(*w), TFB_F32, V(v), t, w->n));
    return *w;
}

static void check_attn_softmax(tfb_dtype t, float p, int cols, uint64_t off) {
    asm_bufs a = {.rows = 48, .cols = cols, .t = t, .p = p, .off = off};
    size_t n = (size_t)a.rows * cols;
    a.x = rand_f32(n, -8, 8), a.klen = rand_int(4, 1, cols + 1), a.att = poisoned(n);
    a.att_d = t == TFB_F32 ? poisoned(n) : poisoned16(n), a.din = t == TFB_F32 ? poisoned(n) : poisoned16(n);
    a.datt = rand_f32(n, -1, 1), a.datt2 = poisoned(n);
    pair w = poisoned(n), xa = poisoned(n);
    char name[64], tag[32];
    snprintf(tag, sizeof tag, "%dc @%llu p=%g", cols, (unsigned long long)off, p);
    BOTH(be->copy_2d(be->ctx, F(a.datt2), cols, F(a.datt), cols, a.rows, cols)); /* the in-place call's input */
    BOTH(be->copy_2d(be->ctx, F(xa), cols, F(a.x), cols, a.rows, cols));
    BOTH(be->attn_softmax_fwd(be->ctx, (tfb_attn_softmax_desc[]){asm_desc(&a, b, F(a.x), F(a.att))}));
    pair fwd[2] = {a.att, f32_view(a.att_d, t, &w)};
    snprintf(name, sizeof name, "attn_softmax_fwd %s", tag);
    verdict(name, prec_name(t, 0), t == TFB_F32 ? TOL_FP32 : TOL_16, fwd, 2);
    BOTH(be->attn_softmax_fwd(be->ctx, (tfb_attn_softmax_desc[]){asm_desc(&a, b, F(xa), F(xa))}));
    snprintf(name, sizeof name, "attn_softmax_fwd in place %s", tag);
    verdict(name, "fp32", TOL_FP32, &xa, 1);
    BOTH(be->attn_softmax_bwd(be->ctx, (tfb_attn_softmax_desc[]){asm_desc(&a, b, F(a.x), F(a.att))}, V(a.din), t,
                              F(a.datt), TFB_F32));
    pair din = f32_view(a.din, t, &w);
    snprintf(name, sizeof name, "attn_softmax_bwd %s", tag);
    verdict(name, prec_name(t, 0), t == TFB_F32 ? TOL_FP32 : TOL_16, &din, 1);
    if (t == TFB_F32) {
        BOTH(be->attn_softmax_bwd(be->ctx, (tfb_attn_softmax_desc[]){asm_desc(&a, b, F(a.x), F(a.att))},
                                  F(a.datt2), t, F(a.datt2), TFB_F32));
        snprintf(name, sizeof name, "attn_softmax_bwd in place %s", tag);
        verdict(name, "fp32", TOL_FP32, &a.datt2, 1);
    }
    pair all[] = {a.x, a.klen, a.att, a.att_d, a.datt, a.datt2, a.din, w, xa};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}

/* Fused attention (tfb_attn_desc) in type t on B = 2 samples, A = 3 heads of 5 (the dropout counters of heads 2..4,
 * as a tensor-group rank holds them), sequences of s with key lengths klen0 and klen1 (a partial key tile, or a
 * whole tile masked): forward ctx and lse, then backward dQ, dK, dV (into the columns of a token-major QKV
 * gradient whose other columns keep their values) and the row sums. Each backend's backward reads its own
 * forward. */
static void check_attn_fused(tfb_dtype t, int s, int klen0, int klen1, float p) {
    enum { B = 2, A = 3, D = 64, W = A * D, LDC = W + 8, LDD = 3 * W + 8 };
    size_t nq = (size_t)3 * B * A * s * D, nc = (size_t)B * s * LDC, nd = (size_t)B * s * LDD, nl = (size_t)B * A * s;
    int kl[B] = {klen0, klen1};
    /* the columns outside the heads start small, so the error is scaled by what the op writes */
    pair qkv = rand_typed(nq, t), ctx = rand_typed_in(nc, t, -1e-3f, 1e-3f), lse = poisoned(nl);
    pair dctx = rand_typed(nc, t), dqkv = rand_typed_in(nd, t, -1e-3f, 1e-3f), rowdot = poisoned(nl);
    pair klen = upload(kl, B, 4);
    pair cw = poisoned(nc), dw = poisoned(nd);
    tfb_attn_desc d[2];
    tfb_attn_grads g[2];
    char name[64];
    size_t es = tfb_dtype_size(t);
    for (int b = 0; b < 2; b++) {
        d[b] = (tfb_attn_desc){.qkv = V(qkv), .ctx = V(ctx), .ldc = LDC, .lse = F(lse), .key_len = I(klen),
                               .batch = B, .heads = A, .heads_total = 5, .seq = s, .head_dim = D, .type = t,
                               .scale = 0.125f, .p = p, .key = {.seed = 4, .site = 17, .step = 3,
                                                                 .offset = (uint64_t)2 * s * s}};
        g[b] = (tfb_attn_grads){.dctx = V(dctx), .dq = V(dqkv), .dk = (char *)V(dqkv) + W * es,
                                .dv = (char *)V(dqkv) + 2 * W * es, .ldd = LDD, .rowdot = F(rowdot)};
        if (!G.be[b]->attn_fused_supports(G.be[b]->ctx, &d[b])) {
            printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "attn_fused (not supported)", prec_name(t, 0), "-", "-",
                   "FAIL");
            G.checks++, G.failed++;
            return;
        }
    }
    BOTH(be->attn_fused_fwd(be->ctx, &d[b]));
    pair fwd[2] = {f32_view(ctx, t, &cw), lse};
    snprintf(name, sizeof name, "attn_fused_fwd s=%d keys %d,%d p=%g", s, klen0, klen1, p);
    verdict(name, prec_name(t, 0), TOL_16, fwd, 2);
    BOTH(be->attn_fused_bwd(be->ctx, &d[b], &g[b]));
    pair bwd[2] = {f32_view(dqkv, t, &dw), rowdot};
    snprintf(name, sizeof name, "attn_fused_bwd s=%d keys %d,%d p=%g", s, klen0, klen1, p);
    verdict(name, prec_name(t, 0), TOL_16, bwd, 2);
    pair all[] = {qkv, ctx, lse, dctx, dqkv, rowdot, klen, cw, dw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}

/* The BERT layer's form in 16 bits (t): scores and probabilities in t, in place in one buffer, att_d in t; the
 * backward from att_d's gradient in t, din written over it; rows of `cols` columns (the warp kernels, or past 1024
 * the two ops forward and the block-per-row kernel backward). */
static void check_attn_softmax_p16(tfb_dtype t, int cols) {
    asm_bufs a = {.rows = 48, .cols = cols, .t = t, .p = 0.1f, .off = 3};
    size_t n = (size_t)a.rows * cols;
    pair x = rand_f32(n, -8, 8), sc = poisoned16(n), scw = poisoned(n), w = poisoned(n);
    a.klen = rand_int(4, 1, cols + 1), a.att_d = poisoned16(n), a.din = poisoned16(n), a.datt = rand_f32(n, -1, 1);
    char name[64];
    BOTH(be->cast(be->ctx, V(sc), t, F(x), TFB_F32, n));
    tfb_attn_softmax_desc d[2];
    for (int b = 0; b < 2; b++) {
        d[b] = asm_desc(&a, b, NULL, NULL);
        d[b].att = V(sc), d[b].in = V(sc), d[b].prob_type = t;
    }
    BOTH(be->attn_softmax_fwd(be->ctx, &d[b]));
    BOTH(be->cast(be->ctx, F(scw), TFB_F32, V(sc), t, n));
    pair fwd[2] = {scw, f32_view(a.att_d, t, &w)};
    snprintf(name, sizeof name, "attn_softmax_fwd p16 in place %dc", cols);
    verdict(name, prec_name(t, 0), TOL_16, fwd, 2);
    BOTH(be->cast(be->ctx, V(a.din), t, F(a.datt), TFB_F32, n));
    BOTH(be->attn_softmax_bwd(be->ctx, &d[b], V(a.din), t, V(a.din), t));
    pair din = f32_view(a.din, t, &w);
    snprintf(name, sizeof name, "attn_softmax_bwd p16 in place %dc", cols);
    verdict(name, prec_name(t, 0), TOL_16, &din, 1);
    pair all[] = {x, sc, scw, w, a.klen, a.att_d, a.din, a.datt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}

static void check_elementwise(void) {
    size_t n = 100003;
    static const char *const act_names[3] = {"gelu", "tanh", "relu"};
    pair x = rand_f32(n, -4, 4), y = poisoned(n), dy = rand_f32(n, -1, 1), dx = poisoned(n);
    char name[40];
    for (int a = 0; a < 3; a++) {
        BOTH(be->act_fwd(be->ctx, (tfb_act)a, F(y), F(x), n));
        snprintf(name, sizeof name, "act_fwd %s", act_names[a]);
        verdict(name, "fp32", TOL_FP32, &y, 1);
        BOTH(be->act_bwd(be->ctx, (tfb_act)a, F(dx), F(dy), F(x), n));
        snprintf(name, sizeof name, "act_bwd %s", act_names[a]);
        verdict(name, "fp32", TOL_FP32, &dx, 1);
    }
    BOTH(be->residual_add(be->ctx, F(y), F(x), F(dy), n));
    verdict("residual_add", "fp32", TOL_FP32, &y, 1);
    BOTH(be->fill(be->ctx, F(y), 0.375f, n));
    verdict("fill", "fp32", TOL_FP32, &y, 1);
    BOTH(be->copy_d2d(be->ctx, F(dx), F(x), n * 4));
    verdict("copy_d2d", "fp32", TOL_FP32, &dx, 1);
    release(&x); release(&y); release(&dy); release(&dx);
}

/* A residual block's sum + ReLU: out and a in type t (FP32 or 16-bit), b in FP32 or t; and its backward, two
 * gradients of types t and b_type summed into t and masked by that output, then one FP32 gradient masked alone. */
static void check_add_relu(tfb_dtype t, tfb_dtype b_type) {
    size_t n = 100003;
    char name[40];
    pair a = rand_typed(n, t), bb = rand_typed(n, b_type), y = t == TFB_F32 ? poisoned(n) : poisoned16(n);
    pair yw = poisoned(n), dy = rand_f32(n, -1, 1), dx = poisoned(n);
    pair g = t == TFB_F32 ? poisoned(n) : poisoned16(n), gw = poisoned(n);
    const char *p = prec_name(t, 0), *pb = prec_name(b_type, 0);
    double tol = t == TFB_F32 ? TOL_FP32 : TOL_16;
    BOTH(be->add_relu(be->ctx, V(y), t, V(a), t, V(bb), b_type, n, 1));
    BOTH(be->cast(be->ctx, F(yw), TFB_F32, V(y), t, n));
    snprintf(name, sizeof name, "add_relu b %s", pb);
    verdict(name, p, tol, &yw, 1);
    BOTH(be->add_relu_bwd(be->ctx, V(g), t, V(a), t, V(bb), b_type, V(y), t, n));
    BOTH(be->cast(be->ctx, F(gw), TFB_F32, V(g), t, n));
    snprintf(name, sizeof name, "add_relu_bwd b %s", pb);
    verdict(name, p, tol, &gw, 1);
    BOTH(be->add_relu_bwd(be->ctx, F(dx), TFB_F32, F(dy), TFB_F32, NULL, TFB_F32, V(y), t, n));
    verdict("add_relu_bwd mask only", p, TOL_FP32, &dx, 1);
    release(&a); release(&bb); release(&y); release(&yw); release(&dy); release(&dx); release(&g); release(&gw);
}

/* act_bias_bwd's descriptor: GELU (pre NULL: the identity), din of din_type (NULL: the bias gradient alone) */
static tfb_act_bias_bwd_desc ab_desc(void *din, tfb_dtype din_type, float *dbias, const void *dout, tfb_dtype dout_type,
                                     const void *pre, tfb_dtype pre_type, const float *bias, int n, int h) {
    return (tfb_act_bias_bwd_desc){.act = TFB_ACT_GELU, .din = din, .din_type = din_type, .dbias = dbias,
                                   .dout = dout, .dout_type = dout_type, .pre = pre, .pre_type = pre_type,
                                   .bias = bias, .n = n, .h = h};
}
#define ACT_BIAS_BWD(...) be->act_bias_bwd(be->ctx, (tfb_act_bias_bwd_desc[]){ab_desc(__VA_ARGS__)})

static void check_bias(void) {
    int n = 517, h = 600;
    pair x = rand_f32((size_t)n * h, -1, 1), bias = rand_f32((size_t)h, -1, 1), db = rand_f32((size_t)h, -1, 1);
    BOTH(be->bias_add(be->ctx, F(x), F(bias), n, h));
    verdict("bias_add", "fp32", TOL_FP32, &x, 1);
    BOTH(be->bias_grad(be->ctx, F(db), F(x), n, h));
    verdict("bias_grad", "fp32", TOL_FP32, &db, 1);
    pair pre = rand_f32((size_t)n * h, -3, 3), y = poisoned((size_t)n * h), dy = rand_f32((size_t)n * h, -1, 1);
    BOTH(be->bias_act_fwd(be->ctx, TFB_ACT_GELU, F(y), TFB_F32, F(pre), TFB_F32, F(bias), n, h));
    pair fwd[2] = {y, pre};
    verdict("bias_act_fwd gelu", "fp32", TOL_FP32, fwd, 2);
    BOTH(ACT_BIAS_BWD(F(dy), TFB_F32, F(db), F(dy), TFB_F32, F(pre), TFB_F32, F(bias), n, h));
    pair bwd[2] = {dy, db};
    verdict("act_bias_bwd gelu", "fp32", TOL_FP32, bwd, 2);
    release(&x); release(&bias); release(&db); release(&pre); release(&y); release(&dy);
}

/* Device output a of two runs from equal starts (c the second run's) as bits: the error is the largest difference
 * over the largest |a|, and anything but 0 fails. */
static void verdict_same(const char *name, const pair *a, const pair *c) {
    float *x = download(1, a), *y = download(1, c);
    double err = tfb_rel_error(x, y, a->n);
    int ok = memcmp(x, y, a->n * sizeof *x) == 0;
    free(x);
    free(y);
    G.checks++;
    G.failed += !ok;
    printf("| %-40s | %-4s | %10.3g | %7.0e | %-4s |\n", name, "fp32", err, 0.0, ok ? "PASS" : "FAIL");
}

/* The cross-entropy's loss sum over 8192 rows (a third of them ignored), twice: the same bits. */
static void check_repeatable_loss(void) {
    int n = 8192, v = 200;
    pair logits = rand_f32((size_t)n * v, -3, 3), labels = rand_int((size_t)n, -v / 2, v), loss[2];
    for (int r = 0; r < 2; r++) {
        loss[r] = poisoned(1);
        BOTH(be->xent_fwd(be->ctx, F(loss[r]), F(logits), I(labels), n, v));
    }
    verdict_same("repeatable: xent loss sum", &loss[0], &loss[1]);
    verdict("xent loss sum (8192 rows)", "fp32", TOL_FP32, &loss[0], 1);
    release(&logits); release(&labels); release(&loss[0]); release(&loss[1]);
}

/* The embedding backward of 8192 tokens over two ids (token types' shape at bert-large's batch), twice onto equal
 * tables: the same bits. */
static void check_repeatable_embedding(void) {
    int n = 8192, h = 1024, rows = 2;
    pair ids, order, dout = rand_f32((size_t)n * h, -1, 1), dt[2];
    float *zeros = calloc((size_t)rows * h, sizeof *zeros);
    rand_ids_order(n, rows, &ids, &order);
    for (int r = 0; r < 2; r++) {
        dt[r] = upload(zeros, (size_t)rows * h, 4);
        BOTH(be->embedding_bwd(be->ctx, F(dt[r]), F(dout), I(ids), I(order), n, h));
    }
    free(zeros);
    verdict_same("repeatable: embedding_bwd", &dt[0], &dt[1]);
    release(&ids); release(&order); release(&dout); release(&dt[0]); release(&dt[1]);
}

/* The column reductions give the same bits every run (bert-large's FFN shape: 16 row blocks per column tile,
 * which arrive in a different order each run on a GPU): bias_grad, act_bias_bwd's bias gradient, and the
 * LayerNorm parameter gradients, each run twice onto equal accumulators. */
static void check_repeatable(void) {
    int n = 8192, h = 1024;
    size_t nh = (size_t)n * h;
    pair dy = rand_f32(nh, -1, 1), x = rand_f32(nh, -2, 2), g = rand_f32((size_t)h, 0.5f, 1.5f);
    pair mean = rand_f32((size_t)n, -0.1f, 0.1f), rstd = rand_f32((size_t)n, 0.5f, 1.5f), dx = poisoned(nh);
    pair acc[2][3];
    float *zeros = calloc((size_t)h, sizeof *zeros);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) acc[r][k] = upload(zeros, (size_t)h, 4);
    free(zeros);
    for (int r = 0; r < 2; r++) {
        BOTH(be->bias_grad(be->ctx, F(acc[r][0]), F(dy), n, h));
        BOTH(ACT_BIAS_BWD(NULL, TFB_F32, F(acc[r][0]), F(dy), TFB_F32, F(x), TFB_F32, NULL, n, h));
        BOTH(be->layernorm_bwd(be->ctx, F(dx), F(acc[r][1]), F(acc[r][2]), F(dy), F(x), F(mean), F(rstd), F(g),
                               n, h));
    }
    verdict_same("repeatable: bias_grad + act_bias_bwd", &acc[0][0], &acc[1][0]);
    verdict_same("repeatable: layernorm dgamma", &acc[0][1], &acc[1][1]);
    verdict_same("repeatable: layernorm dbeta", &acc[0][2], &acc[1][2]);
    verdict("layernorm dgamma (8192 rows)", "fp32", TOL_FP32, &acc[0][1], 1);
    release(&dy); release(&x); release(&g); release(&mean); release(&rstd); release(&dx);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) release(&acc[r][k]);
}

static void check_dropout(void) {
    size_t n = 50001;
    pair x = rand_f32(n, -1, 1), y = poisoned(n), dx = poisoned(n);
    tfb_dropout_key key = {.seed = 1234, .site = 17, .step = 3, .offset = 4097};
    BOTH(be->dropout_fwd(be->ctx, F(y), TFB_F32, F(x), n, 0.1f, key));
    verdict("dropout_fwd (same mask)", "fp32", TOL_FP32, &y, 1);
    BOTH(be->dropout_bwd(be->ctx, F(dx), F(x), n, 0.1f, key));
    verdict("dropout_bwd", "fp32", TOL_FP32, &dx, 1);
    release(&x); release(&y); release(&dx);
}

static void check_xent(void) {
    int n = 64, v = 3001;
    int *lab = malloc((size_t)n * sizeof *lab);
    for (int i = 0; i < n; i++) lab[i] = i % 7 == 3 ? -1 : (int)(urand() * v);
    pair labels = upload(lab, (size_t)n, 4), logits = rand_f32((size_t)n * v, -5, 5), loss = poisoned(1);
    pair dl = poisoned((size_t)n * v);
    free(lab);
    BOTH(be->xent_fwd(be->ctx, F(loss), F(logits), I(labels), n, v));
    verdict("xent_fwd", "fp32", TOL_FP32, &loss, 1);
    BOTH(be->xent_bwd(be->ctx, F(dl), F(logits), I(labels), n, v, 0.01f));
    verdict("xent_bwd", "fp32", TOL_FP32, &dl, 1);
    release(&labels); release(&logits); release(&loss); release(&dl);
}

static void check_xent_shard(void) {
    int n = 48, v = 520, valid = 500, col0 = 1000;
    pair labels = rand_int((size_t)n, 900, 1600), logits = rand_f32((size_t)n * v, -5, 5);
    pair mx = poisoned((size_t)n), sums = poisoned((size_t)2 * n), dl = poisoned((size_t)n * v);
    BOTH(be->xent_shard_max(be->ctx, F(mx), F(logits), n, v, valid));
    verdict("xent_shard_max", "fp32", TOL_FP32, &mx, 1);
    BOTH(be->xent_shard_sum(be->ctx, F(sums), F(logits), I(labels), F(mx), n, v, valid, col0));
    verdict("xent_shard_sum", "fp32", TOL_FP32, &sums, 1);
    BOTH(be->xent_shard_bwd(be->ctx, F(dl), F(logits), I(labels), F(mx), F(sums), n, v, valid, col0, 0.5f));
    verdict("xent_shard_bwd", "fp32", TOL_FP32, &dl, 1);
    release(&labels); release(&logits); release(&mx); release(&sums); release(&dl);
}

/* Synthetic images: the device's logf/cosf/sinf may differ from the host's in the last bit, hence a tolerance.
 * Rows of 40001 values: an odd count (a half pair at the end), more pairs than a row's blocks hold at once. */
static void check_normal_fill(void) {
    pair x = poisoned(3 * 40001);
    tfb_philox_key k = tfb_philox_key_make(G.rng, 3);
    BOTH(be->normal_fill(be->ctx, F(x), 3, 40001, 12345, k));
    verdict("normal_fill (images)", "fp32", TOL_FP32, &x, 1);
    release(&x);
}

/* K heads out of a (2 samples, 5 tokens, 3 heads x 100) slice of a wider qkv row, without and with K's bias, and
 * the way back into it (rows of 300 and 500 values: a CUDA block strides over each). */
static void check_permute(void) {
    enum { D = 100, ROW = 9 * D };
    pair in = rand_f32(2 * 5 * ROW, -1, 1), hm = poisoned(2 * 3 * 5 * D), back = rand_f32(2 * 5 * ROW, -1, 1);
    pair bias = rand_f32(3 * D, -1, 1), hmb = poisoned(2 * 3 * 5 * D);
    BOTH(be->permute_0213(be->ctx, F(hm), TFB_F32, 5 * D, F(in) + 3 * D, TFB_F32, ROW, NULL, 2, 5, 3, D));
    verdict("permute_0213 (tokens->heads)", "fp32", TOL_FP32, &hm, 1);
    BOTH(be->permute_0213(be->ctx, F(hmb), TFB_F32, 5 * D, F(in) + 3 * D, TFB_F32, ROW, F(bias), 2, 5, 3, D));
    verdict("permute_0213 + bias (tokens->heads)", "fp32", TOL_FP32, &hmb, 1);
    BOTH(be->permute_0213(be->ctx, F(back) + 3 * D, TFB_F32, ROW, F(hm), TFB_F32, 5 * D, NULL, 2, 3, 5, D));
    verdict("permute_0213 (heads->tokens)", "fp32", TOL_FP32, &back, 1);
    release(&in); release(&hm); release(&back); release(&bias); release(&hmb);
}

/* Ops that write a BERT layer's GEMM operands straight in 16 bits (type t), against the CPU's. */
static void check_typed_outputs(tfb_dtype t) {
    int rows = 96, cols = 128, n = 517, h = 600;
    size_t e = (size_t)rows * cols, nh = (size_t)n * h;
    char name[48];
    const char *p = prec_name(t, 0);
#define TYPED_ROW(op) (snprintf(name, sizeof name, "%s out16", op), name)
    pair x = rand_f32(e, -4, 4), y = poisoned(e), dy = rand_f32(e, -1, 1), o16 = poisoned16(nh), ow = poisoned(nh);
    pair pre = rand_f32(nh, -3, 3), bias = rand_f32((size_t)h, -1, 1);
    tfb_dropout_key key = {.seed = 99, .site = 9, .step = 1, .offset = 13};
    BOTH(be->softmax_fwd(be->ctx, F(y), F(x), rows, cols, 0.125f, NULL, 1));
    BOTH(be->softmax_bwd(be->ctx, V(o16), t, F(dy), F(y), rows, cols, 0.125f));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, e));
    pair ow_e = ow;
    ow_e.n = e;
    verdict(TYPED_ROW("softmax_bwd"), p, TOL_16, &ow_e, 1);
    BOTH(be->dropout_fwd(be->ctx, V(o16), t, F(x), e, 0.1f, key));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, e));
    verdict(TYPED_ROW("dropout_fwd"), p, TOL_16, &ow_e, 1);
    BOTH(be->permute_0213(be->ctx, V(o16), t, 4 * 32, F(x), TFB_F32, 128, F(bias), 24, 4, 4, 32));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, e));
    verdict(TYPED_ROW("permute_0213 + bias"), p, TOL_16, &ow_e, 1);
    BOTH(be->bias_act_fwd(be->ctx, TFB_ACT_GELU, V(o16), t, F(pre), TFB_F32, F(bias), n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, nh));
    pair fwd[2] = {ow, pre};
    verdict(TYPED_ROW("bias_act_fwd gelu"), p, TOL_16, fwd, 2);
    pair dyh = rand_f32(nh, -1, 1), db = rand_f32((size_t)h, -1, 1), d16 = poisoned16(nh);
    pair dy16 = poisoned16(nh);
    BOTH(ACT_BIAS_BWD(V(d16), t, F(db), F(dyh), TFB_F32, F(pre), TFB_F32, F(bias), n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(d16), t, nh));
    pair bwd[2] = {ow, db};
    verdict(TYPED_ROW("act_bias_bwd gelu"), p, TOL_16, bwd, 2);
    BOTH(ACT_BIAS_BWD(V(dy16), t, F(db), F(dyh), TFB_F32, NULL, TFB_F32, NULL, n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(dy16), t, nh));
    verdict(TYPED_ROW("act_bias_bwd no pre (cast)"), p, TOL_16, bwd, 2);
#undef TYPED_ROW
    release(&x); release(&y); release(&dy); release(&o16); release(&ow); release(&pre); release(&bias);
    release(&dyh); release(&db); release(&d16); release(&dy16);
}

/* Ops that read a GEMM result kept in 16 bits (type t): the head permutes, GELU forward and backward with their
 * bias added in FP32. Outputs FP32, against the CPU's. */
static void check_typed_inputs(tfb_dtype t) {
    int n = 517, h = 600;
    size_t nh = (size_t)n * h;
    char name[48];
    const char *p = prec_name(t, 0);
#define TYPED_ROW(op) (snprintf(name, sizeof name, "%s in16", op), name)
    pair x16 = rand_typed(nh, t), bias = rand_f32((size_t)h, -1, 1), y = poisoned(nh), o16 = poisoned16(nh);
    pair ow = poisoned(nh), dy = rand_f32(nh, -1, 1), db = rand_f32((size_t)h, -1, 1);
    BOTH(be->permute_0213(be->ctx, F(y), TFB_F32, 11 * 100, V(x16), t, h, F(bias), 47, 11, 6, 100));
    verdict(TYPED_ROW("permute_0213 + bias"), p, TOL_16, &y, 1);
    BOTH(be->permute_0213(be->ctx, V(o16), t, 11 * 100, V(x16), t, h, NULL, 47, 11, 6, 100));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, nh));
    verdict(TYPED_ROW("permute_0213 16-bit to 16-bit"), p, TOL_16, &ow, 1);
    BOTH(be->bias_act_fwd(be->ctx, TFB_ACT_GELU, V(o16), t, V(x16), t, F(bias), n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, nh));
    verdict(TYPED_ROW("bias_act_fwd gelu"), p, TOL_16, &ow, 1);
    BOTH(ACT_BIAS_BWD(V(o16), t, F(db), F(dy), TFB_F32, V(x16), t, F(bias), n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(o16), t, nh));
    pair bwd[2] = {ow, db};
    verdict(TYPED_ROW("act_bias_bwd gelu"), p, TOL_16, bwd, 2);
    /* the BERT layer's form: dout a 16-bit GEMM result, GELU's gradient written over it */
    pair g16 = rand_typed(nh, t);
    BOTH(ACT_BIAS_BWD(V(g16), t, F(db), V(g16), t, V(x16), t, F(bias), n, h));
    BOTH(be->cast(be->ctx, F(ow), TFB_F32, V(g16), t, nh));
    verdict(TYPED_ROW("act_bias_bwd gelu dout16 in place"), p, TOL_16, bwd, 2);
    BOTH(ACT_BIAS_BWD(NULL, t, F(db), V(x16), t, NULL, t, NULL, n, h));
    verdict(TYPED_ROW("act_bias_bwd bias grad only"), p, TOL_16, &db, 1);
#undef TYPED_ROW
    release(&x16); release(&bias); release(&y); release(&o16); release(&ow); release(&dy); release(&db);
    release(&g16);
}

static void check_copy_2d(void) {
    pair src = rand_f32((size_t)40 * 96, -1, 1), dst = poisoned((size_t)40 * 64);
    BOTH(be->copy_2d(be->ctx, F(dst), 64, F(src) + 16, 96, 40, 64));
    verdict("copy_2d", "fp32", TOL_FP32, &dst, 1);
    release(&src); release(&dst);
}

/* ---- optimizers, casts, the finite check ---- */

static void check_optimizers(void) {
    size_t n = 70001;
    pair w = rand_f32(n, -1, 1), g = rand_f32(n, -1, 1), m = rand_f32(n, -0.1f, 0.1f), v = rand_f32(n, 1e-4f, 1e-2f);
    tfb_adamw_hparams ah = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                            .step = 7, .grad_scale = 0.5f};
    BOTH(be->adamw(be->ctx, F(w), F(g), F(m), F(v), n, &ah));
    pair outs[3] = {w, m, v};
    verdict("adamw", "fp32", TOL_FP32, outs, 3);
    tfb_sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .grad_scale = 0.25f};
    BOTH(be->sgd(be->ctx, F(w), F(g), F(m), n, &sh));
    pair souts[2] = {w, m};
    verdict("sgd", "fp32", TOL_FP32, souts, 2);
    /* decay inside these element ranges only, large enough that decay in the wrong place shows (lr wd = 1e-2) */
    uint64_t runs_host[4] = {0, 1000, 40000, 70000};
    pair runs = upload(runs_host, 4, sizeof(uint64_t));
    ah.lr = sh.lr = 0.1f;
    ah.weight_decay = sh.weight_decay = 0.1f;
    BOTH(be->adamw_pool(be->ctx, F(w), F(g), F(m), F(v), n, (const uint64_t *)runs.p[b], 2, &ah, NULL, TFB_F32));
    verdict("adamw_pool (decay runs)", "fp32", TOL_FP32, outs, 3);
    BOTH(be->sgd_pool(be->ctx, F(w), F(g), F(m), n, (const uint64_t *)runs.p[b], 2, &sh, NULL, TFB_F32));
    verdict("sgd_pool (decay runs)", "fp32", TOL_FP32, souts, 2);
    /* the 16-bit weight copy written by the update itself */
    pair lp = poisoned16(n), lpw = poisoned(n);
    BOTH(be->adamw_pool(be->ctx, F(w), F(g), F(m), F(v), n, (const uint64_t *)runs.p[b], 2, &ah, V(lp), TFB_BF16));
    BOTH(be->cast(be->ctx, F(lpw), TFB_F32, V(lp), TFB_BF16, n));
    verdict("adamw_pool, writing w_lp16", "fp32", TOL_FP32, outs, 3);
    verdict("adamw_pool w_lp16", "bf16", TOL_16, &lpw, 1);
    BOTH(be->sgd_pool(be->ctx, F(w), F(g), F(m), n, (const uint64_t *)runs.p[b], 2, &sh, V(lp), TFB_F16));
    BOTH(be->cast(be->ctx, F(lpw), TFB_F32, V(lp), TFB_F16, n));
    verdict("sgd_pool, writing w_lp16", "fp32", TOL_FP32, souts, 2);
    verdict("sgd_pool w_lp16", "fp16", TOL_16, &lpw, 1);
    release(&w); release(&g); release(&m); release(&v); release(&runs); release(&lp); release(&lpw);
}

static void check_cast(tfb_dtype t) {
    size_t n = 65537;
    pair x = rand_f32(n, -70000, 70000), half = rand_typed(n, t), back = poisoned(n);
    BOTH(be->cast(be->ctx, V(half), t, F(x), TFB_F32, n));
    BOTH(be->cast(be->ctx, F(back), TFB_F32, V(half), t, n));
    /* the round trip must be bit-exact with the CPU's rounding (FP16 overflow to inf included) */
    float *ref = download(0, &back), *dev = download(1, &back);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= tfb_f32_bits(ref[i]) == tfb_f32_bits(dev[i]);
    G.checks++;
    G.failed += !same;
    printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", t == TFB_F16 ? "cast fp32>fp16>fp32" : "cast fp32>bf16>fp32",
           prec_name(t, 0), same ? "bit-exact" : "differs", "exact", same ? "PASS" : "FAIL");
    free(ref); free(dev);
    release(&x); release(&half); release(&back);
}

static void check_finite(void) {
    size_t n = 12345;
    pair x = rand_f32(n, -1, 1);
    int fin[2][2];
    BOTH(be->check_finite(be->ctx, F(x), n, &fin[b][0]));
    float inf = INFINITY;
    for (int b = 0; b < 2; b++) G.be[b]->copy_h2d(G.be[b]->ctx, F(x) + n - 1, &inf, 4);
    BOTH(be->check_finite(be->ctx, F(x), n, &fin[b][1]));
    int ok = fin[0][0] == 1 && fin[1][0] == 1 && fin[0][1] == 0 && fin[1][1] == 0;
    G.checks++;
    G.failed += !ok;
    printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "check_finite", "fp32", ok ? "agrees" : "differs", "exact",
           ok ? "PASS" : "FAIL");
    release(&x);
}

/* Timing marks: one around a large GEMM on the device must be positive and no longer than the host clock around the
 * same work (queued after a sync, read after the next); the CPU backend's marks are the host clock. */
static double host_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check_marks(void) {
    int n = 1024, ok = 1;
    pair a = rand_f32((size_t)n * n, -1, 1), c = rand_f32((size_t)n * n, -1, 1);
    double dev_s = 0, host_s = 0;
    tfb_backend *be = G.be[1];
    int b = 1;
    tfb_gemm_desc d = {.m = n, .n = n, .k = n, .alpha = 1, .a = F(a), .lda = n, .b = F(a), .ldb = n, .c = F(c),
                       .ldc = n, .batch = 1, .in_type = TFB_F32};
    ok &= be->marks_reserve(be->ctx, 2) == TFB_OK && be->sync(be->ctx) == TFB_OK;
    double t0 = host_now();
    ok &= be->mark(be->ctx, 0) == TFB_OK && be->gemm(be->ctx, &d) == TFB_OK && be->mark(be->ctx, 1) == TFB_OK;
    ok &= be->sync(be->ctx) == TFB_OK;
    host_s = host_now() - t0;
    ok &= be->mark_seconds(be->ctx, 0, 1, &dev_s) == TFB_OK && dev_s > 0 && dev_s <= host_s * 1.001 + 1e-6;
    ok &= be->mark(be->ctx, 2) == TFB_ERR_ARG; /* past the reserved marks */
    G.checks++;
    G.failed += !ok;
    printf("| %-40s | %-4s | %7.3f ms | %7.3f | %-4s |\n", "timing marks (vs host ms)", "fp32", dev_s * 1e3,
           host_s * 1e3, ok ? "PASS" : "FAIL");
    release(&a);
    release(&c);
}

/* The hang report's probe on a GPU: with GEMMs queued (about 50 ms of FP32 work on an H200) it names unfinished
 * work on the compute stream, and after sync() it has nothing to say. The emulated backend finishes each op as it
 * is queued, so only a GPU runs this. */
static void check_pending(void) {
    tfb_backend *be = G.be[1];
    int n = 4096, busy = 0, idle = 0;
    size_t numel = (size_t)n * n;
    float *a = be->alloc(be->ctx, numel * sizeof(float)), *c = be->alloc(be->ctx, numel * sizeof(float));
    char text[512] = "", after[512] = "";
    int ok = a && c && be->fill(be->ctx, a, 0.5f, numel) == TFB_OK && be->sync(be->ctx) == TFB_OK;
    tfb_gemm_desc d = {.m = n, .n = n, .k = n, .alpha = 1, .a = a, .lda = n, .b = a, .ldb = n, .c = c, .ldc = n,
                       .batch = 1, .in_type = TFB_F32};
    for (int i = 0; ok && i < 20; i++) ok = be->gemm(be->ctx, &d) == TFB_OK;
    busy = ok && be->pending_text(be->ctx, text, sizeof text) && strstr(text, "compute stream");
    ok &= be->sync(be->ctx) == TFB_OK;
    idle = ok && !be->pending_text(be->ctx, after, sizeof after);
    ok &= busy && idle;
    G.checks++;
    G.failed += !ok;
    printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "pending work named, none after sync", "fp32",
           busy ? (idle ? "named" : "stays") : "missed", "-", ok ? "PASS" : "FAIL");
    if (!ok) printf("gpu_check: pending_text while busy: \"%s\"; after sync: \"%s\"\n", text, after);
    if (a) be->free(be->ctx, a);
    if (c) be->free(be->ctx, c);
}

/* ---- the device communicator ---- */

/* A communicator of this rank alone: MPI's for the CPU backend (b = 0), the device backend's wrapping of it (b = 1). */
static tfb_comm *comm_alone(tfb_comm *world, int b) {
    tfb_comm *c = NULL, *dev = NULL;
    if (world->split(world, world->rank, 0, &c) != TFB_OK || !c) return NULL;
    if (b == 0) return c;
    if (G.be[1]->comm_wrap(G.be[1]->ctx, c, &dev) != TFB_OK) c->destroy(c);
    return dev;
}

/* The communicators check_comm_alone made, whichever it could. */
static void comm_alone_release(tfb_comm *world, tfb_comm *solo[2]) {
    for (int b = 0; b < 2; b++)
        if (solo[b]) solo[b]->destroy(solo[b]);
    if (world) world->destroy(world);
}

/* The device backend's communicator of one rank against MPI's on host memory: its collectives are copies or nothing
 * (exact), and a send or a receive, which has no peer, is refused as a bug in tfbench (it prints why) before it
 * reaches NCCL, so the hang report's record of operations holds nothing unfinished afterwards. */
static void check_comm_alone(void) {
    size_t n = 1000;
    tfb_comm *world = NULL, *solo[2] = {NULL, NULL};
    G.mpi = tfb_comm_mpi_world(NULL, NULL, &world) == TFB_OK;
    for (int b = 0; G.mpi && b < 2; b++) solo[b] = comm_alone(world, b);
    if (!solo[0] || !solo[1]) {
        G.checks++;
        G.failed++;
        printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "comm alone: made", "-", G.mpi ? "not made" : "no MPI", "-",
               "FAIL");
        comm_alone_release(world, solo);
        return;
    }
    pair x = rand_f32(n, -1, 1), in_place = rand_f32(n, -1, 1), gathered = poisoned(n), scattered = poisoned(n);
    pair swapped = poisoned(n);
    tfb_comm_request *req[2] = {NULL, NULL};
    BOTH(solo[b]->allgather(solo[b], V(x), V(gathered), n, TFB_COMM_F32));
    BOTH(solo[b]->reduce_scatter(solo[b], V(x), V(scattered), n, TFB_COMM_F32));
    BOTH(solo[b]->sendrecv(solo[b], V(x), n, 0, V(swapped), n, 0, TFB_COMM_F32, 0));
    BOTH(solo[b]->allreduce(solo[b], V(in_place), n, TFB_COMM_F32, TFB_SUM));
    BOTH(solo[b]->bcast(solo[b], V(in_place), n, TFB_COMM_F32, 0));
    BOTH(solo[b]->iallreduce(solo[b], V(in_place), n, TFB_COMM_F32, TFB_SUM, &req[b]));
    BOTH(solo[b]->wait(solo[b], req[b]));
    verdict("comm alone all-gather", "fp32", 0, &gathered, 1);
    verdict("comm alone reduce-scatter", "fp32", 0, &scattered, 1);
    verdict("comm alone send/receive to itself", "fp32", 0, &swapped, 1);
    verdict("comm alone all-reduce, broadcast", "fp32", 0, &in_place, 1);
    tfb_comm *d = solo[1];
    char pending[256] = "";
    int refused = d->send(d, x.p[1], n, TFB_COMM_F32, 0, 0) == TFB_ERR_STATE &&
                  d->recv(d, swapped.p[1], n, TFB_COMM_F32, 0, 0) == TFB_ERR_STATE &&
                  G.be[1]->sync(G.be[1]->ctx) == TFB_OK &&
                  !(G.be[1]->pending_text && G.be[1]->pending_text(G.be[1]->ctx, pending, sizeof pending));
    G.checks++;
    G.failed += !refused;
    printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "comm alone send, receive refused", "fp32",
           refused ? "refused" : "not so", "-", refused ? "PASS" : "FAIL");
    if (!refused && *pending) printf("gpu_check: unfinished after the refusals: \"%s\"\n", pending);
    pair all[] = {x, in_place, gathered, scattered, swapped};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(&all[i]);
    comm_alone_release(world, solo);
}

/* ---- convolutional-network ops ---- */

#define BN_ROW(op) (snprintf(name, sizeof name, "%s%s", op, tag), name)

/* Batch norm's backward with its fused ReLU on the device against the CPU's plain backward of dy masked where the
 * device's own forward output y is not positive: so the device's recomputed mask must be its forward's. The
 * input gradient also in FP16, as the convolution's backward reads it. */
static void check_bn_relu_bwd(int n, int c, int hw, const char *tag, pair x, pair dy, pair y, pair mean, pair var,
                              pair g, pair bt) {
    char name[64];
    size_t nx = (size_t)n * c * hw;
    float *yd = download(1, &y), *dyh = download(0, &dy);
    for (size_t i = 0; i < nx; i++) dyh[i] = yd[i] > 0 ? dyh[i] : 0.0f;
    pair dym = upload(dyh, nx, 4), s = poisoned(2 * (size_t)c), acc = rand_f32(2 * (size_t)c, -1, 1);
    pair dx = poisoned(nx), h = rand_typed(nx, TFB_F16);
    free(yd);
    free(dyh);
    BOTH(be->bn_bwd_reduce(be->ctx, F(s), F(s) + c, F(acc), F(acc) + c, b ? F(dy) : F(dym), TFB_F32, F(x), TFB_F32,
                           F(mean), F(var), F(g), F(bt), n, c, hw, 1e-5f, b));
    pair red[2] = {s, acc};
    verdict(BN_ROW("bn_bwd_reduce_relu"), "fp32", TOL_FP32, red, 2);
    BOTH(be->bn_bwd_apply(be->ctx, V(h), TFB_F16, b ? F(dy) : F(dym), TFB_F32, F(x), TFB_F32, F(mean), F(var), F(g),
                          F(bt), F(s), F(s) + c, (double)n * hw, n, c, hw, 1e-5f, b));
    BOTH(be->cast(be->ctx, F(dx), TFB_F32, V(h), TFB_F16, nx));
    verdict(BN_ROW("bn_bwd_apply_relu"), "fp16", TOL_16, &dx, 1);
    release(&dym); release(&s); release(&acc); release(&dx); release(&h);
}

/* One shape; `tag` names the rows after the first shape's. The CUDA channel reductions split each channel over
 * several blocks when there are few channels: 16 channels give every plane a block of its own, 100 channels of 10
 * planes split them unevenly, and 640 channels (more than four blocks per SM on an H200) take one block each. */
static void check_batchnorm_shape(int n, int c, int hw, const char *tag) {
    char name[64];
    size_t nx = (size_t)n * c * hw;
    pair x = rand_f32(nx, -2, 3), g = rand_f32((size_t)c, 0.5f, 1.5f), bt = rand_f32((size_t)c, -1, 1);
    pair mean = poisoned((size_t)c), var = poisoned((size_t)c), y = poisoned(nx), dy = rand_f32(nx, -1, 1);
    pair sdy = poisoned((size_t)c), sdx = poisoned((size_t)c), dg = rand_f32((size_t)c, -1, 1);
    pair db = rand_f32((size_t)c, -1, 1), dx = poisoned(nx), rm = rand_f32((size_t)c, -1, 1),
                       rv = rand_f32((size_t)c, 0.5f, 2);
    BOTH(be->bn_moments(be->ctx, F(mean), F(var), F(x), TFB_F32, n, c, hw));
    pair mom[2] = {mean, var};
    verdict(BN_ROW("bn_moments"), "fp32", TOL_FP32, mom, 2);
    pair yr = poisoned(nx);
    BOTH(be->bn_apply(be->ctx, F(yr), TFB_F32, F(x), TFB_F32, F(mean), F(var), F(g), F(bt), n, c, hw, 1e-5f, 1));
    verdict(BN_ROW("bn_apply_relu"), "fp32", TOL_FP32, &yr, 1);
    release(&yr);
    BOTH(be->bn_apply(be->ctx, F(y), TFB_F32, F(x), TFB_F32, F(mean), F(var), F(g), F(bt), n, c, hw, 1e-5f, 0));
    verdict(BN_ROW("bn_apply"), "fp32", TOL_FP32, &y, 1);
    BOTH(be->bn_bwd_reduce(be->ctx, F(sdy), F(sdx), F(dg), F(db), F(dy), TFB_F32, F(x), TFB_F32, F(mean), F(var),
                           F(g), F(bt), n, c, hw, 1e-5f, 0));
    pair red[4] = {sdy, sdx, dg, db};
    verdict(BN_ROW("bn_bwd_reduce"), "fp32", TOL_FP32, red, 4);
    BOTH(be->bn_bwd_apply(be->ctx, F(dx), TFB_F32, F(dy), TFB_F32, F(x), TFB_F32, F(mean), F(var), F(g), F(bt),
                          F(sdy), F(sdx), (double)n * hw, n, c, hw, 1e-5f, 0));
    verdict(BN_ROW("bn_bwd_apply"), "fp32", TOL_FP32, &dx, 1);
    check_bn_relu_bwd(n, c, hw, tag, x, dy, y, mean, var, g, bt);
    BOTH(be->bn_running_update(be->ctx, F(rm), F(rv), F(mean), F(var), c, 0.1f, (double)n * hw));
    pair run[2] = {rm, rv};
    verdict(BN_ROW("bn_running_update"), "fp32", TOL_FP32, run, 2);
    pair msum = rand_f32((size_t)c, -3, 3), mine = rand_f32((size_t)c, -1, 1), share = rand_f32((size_t)c, 0.1f, 2);
    BOTH(be->bn_moments_merge(be->ctx, F(msum), F(share), F(mine), c, 3));
    pair merged[2] = {msum, share};
    verdict(BN_ROW("bn_moments_merge"), "fp32", TOL_FP32, merged, 2);
    pair all[] = {x, g, bt, mean, var, y, dy, sdy, sdx, dg, db, dx, rm, rv, msum, mine, share};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}

/* Batch norm of a 16-bit network: x (a convolution's output) in type t, y written in t, FP32 statistics; the
 * backward from an FP32 dy (a stage's last block) and from a dy in t. */
static void check_batchnorm_16(int n, int c, int hw, tfb_dtype t, const char *tag) {
    char name[64];
    size_t nx = (size_t)n * c * hw;
    pair x = rand_typed(nx, t), g = rand_f32((size_t)c, 0.5f, 1.5f), bt = rand_f32((size_t)c, -1, 1);
    pair mean = poisoned((size_t)c), var = poisoned((size_t)c), y = poisoned16(nx), yw = poisoned(nx);
    pair s = poisoned(2 * (size_t)c), acc = rand_f32(2 * (size_t)c, -1, 1);
    pair dx = poisoned16(nx), dxw = poisoned(nx), dys[2] = {rand_f32(nx, -1, 1), rand_typed(nx, t)};
    const char *p = prec_name(t, 0);
    BOTH(be->bn_moments(be->ctx, F(mean), F(var), V(x), t, n, c, hw));
    pair mom[2] = {mean, var}, xo = rand_typed_in(nx, t, 40, 44);
    verdict(BN_ROW("bn_moments x16"), p, TOL_FP32, mom, 2);
    BOTH(be->bn_moments(be->ctx, F(mean), F(var), V(xo), t, n, c, hw)); /* a mean ten deviations from 0 */
    verdict(BN_ROW("bn_moments x16 offset"), p, TOL_FP32, mom, 2);
    release(&xo);
    BOTH(be->bn_apply(be->ctx, V(y), t, V(x), t, F(mean), F(var), F(g), F(bt), n, c, hw, 1e-5f, 1));
    BOTH(be->cast(be->ctx, F(yw), TFB_F32, V(y), t, nx));
    verdict(BN_ROW("bn_apply_relu x16 y16"), p, TOL_16, &yw, 1);
    for (int k = 0; k < 2; k++) {
        const char *dyn = k ? " dy16" : "";
        tfb_dtype dt = k ? t : TFB_F32;
        pair dy = dys[k], red[2] = {s, acc};
        BOTH(be->bn_bwd_reduce(be->ctx, F(s), F(s) + c, F(acc), F(acc) + c, V(dy), dt, V(x), t, F(mean), F(var), F(g),
                               F(bt), n, c, hw, 1e-5f, k)); /* the ReLU's mask with dy16 */
        snprintf(name, sizeof name, "bn_bwd_reduce%s x16%s%s", k ? "_relu" : "", dyn, tag);
        verdict(name, p, TOL_FP32, red, 2);
        BOTH(be->bn_bwd_apply(be->ctx, V(dx), t, V(dy), dt, V(x), t, F(mean), F(var), F(g), F(bt), F(s), F(s) + c,
                              (double)n * hw, n, c, hw, 1e-5f, k));
        BOTH(be->cast(be->ctx, F(dxw), TFB_F32, V(dx), t, nx));
        snprintf(name, sizeof name, "bn_bwd_apply%s x16%s%s", k ? "_relu" : "", dyn, tag);
        verdict(name, p, TOL_16, &dxw, 1);
    }
    pair all[] = {x, g, bt, mean, var, y, yw, dys[0], dys[1], s, acc, dx, dxw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) release(&all[i]);
}
#undef BN_ROW

static void check_batchnorm(void) {
    check_batchnorm_shape(6, 16, 49, "");
    check_batchnorm_shape(10, 100, 7, " c100");
    check_batchnorm_shape(3, 640, 5, " c640");
    /* NHWC tensors as (rows, c, 1): the CUDA column kernels, with a partial channel block (100) and few splits */
    check_batchnorm_shape(2000, 64, 1, " nhwc c64");
    check_batchnorm_shape(777, 100, 1, " nhwc c100");
    check_batchnorm_shape(300, 2048, 1, " nhwc c2048");
    check_batchnorm_16(6, 16, 49, TFB_F16, "");
    check_batchnorm_16(2000, 64, 1, TFB_F16, " nhwc c64");
    check_batchnorm_16(777, 100, 1, TFB_BF16, " nhwc c100");
}

static void check_pooling(int c, tfb_layout layout) {
    int n = 2, h = 41, w = 41, r = 3, stride = 2, pad = 1, p = (h + 2 * pad - r) / stride + 1; /* 21 x 21 */
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * p;
    const char *lay = layout == TFB_NHWC ? " nhwc" : "";
    char name[40];
#define POOL_ROW(op) (snprintf(name, sizeof name, "%s%s", op, lay), name)
    tfb_pool_desc d = {.n = n, .c = c, .h = h, .w = w, .r = r, .stride = stride, .pad = pad, .p = p, .q = p,
                       .layout = layout};
    pair x = rand_f32(nx, -1, 1), y = poisoned(ny), arg = poisoned(ny), dy = rand_f32(ny, -1, 1), dx = poisoned(nx);
    BOTH(be->maxpool_fwd(be->ctx, F(y), I(arg), F(x), TFB_F32, &d));
    verdict(POOL_ROW("maxpool_fwd"), "fp32", TOL_FP32, &y, 1);
    /* overlapping windows: up to four dy add into one dx, in the same order on both backends */
    BOTH(be->maxpool_bwd(be->ctx, F(dx), TFB_F32, F(dy), TFB_F32, I(arg), &d));
    verdict(POOL_ROW("maxpool_bwd"), "fp32", TOL_FP32, &dx, 1);
    if (c > 8) { /* a 16-bit stem output and its gradient (NHWC), as a 16-bit ResNet pools them */
        pair x16 = rand_typed(nx, TFB_F16), y16 = poisoned16(ny), yw = poisoned(ny), dy16 = rand_typed(ny, TFB_F16);
        pair dx16 = poisoned16(nx);
        BOTH(be->maxpool_fwd(be->ctx, V(y16), I(arg), V(x16), TFB_F16, &d));
        BOTH(be->cast(be->ctx, F(yw), TFB_F32, V(y16), TFB_F16, ny));
        verdict(POOL_ROW("maxpool_fwd x16"), "fp16", TOL_16, &yw, 1);
        BOTH(be->maxpool_bwd(be->ctx, F(dx), TFB_F32, V(dy16), TFB_F16, I(arg), &d));
        verdict(POOL_ROW("maxpool_bwd dy16"), "fp16", TOL_FP32, &dx, 1);
        BOTH(be->maxpool_bwd(be->ctx, V(dx16), TFB_F16, V(dy16), TFB_F16, I(arg), &d));
        BOTH(be->cast(be->ctx, F(dx), TFB_F32, V(dx16), TFB_F16, nx)); /* one FP32 sum, rounded alike */
        verdict(POOL_ROW("maxpool_bwd dx16"), "fp16", TOL_FP32, &dx, 1);
        release(&x16); release(&y16); release(&yw); release(&dy16); release(&dx16);
    }
    pair ay = poisoned((size_t)n * c), adx = poisoned(nx);
    BOTH(be->avgpool_fwd(be->ctx, F(ay), F(x), n, c, h * w, layout));
    verdict(POOL_ROW("avgpool_fwd"), "fp32", TOL_FP32, &ay, 1);
    BOTH(be->avgpool_bwd(be->ctx, F(adx), F(ay), n, c, h * w, layout));
    verdict(POOL_ROW("avgpool_bwd"), "fp32", TOL_FP32, &adx, 1);
#undef POOL_ROW
    release(&x); release(&y); release(&arg); release(&dy); release(&dx); release(&ay); release(&adx);
}

/* GEMM and convolution, in every precision and layout. */
static void gc_run_libraries(void) {
    static const tfb_dtype types[4] = {TFB_F32, TFB_F32, TFB_F16, TFB_BF16};
    for (int i = 0; i < 4; i++) {
        int tf32 = i == 1;
        check_gemm(0, 0, 1, types[i], tf32);
        check_gemm(1, 0, 1, types[i], tf32);
        check_gemm(0, 1, 3, types[i], tf32);
        check_gemm(1, 1, 2, types[i], tf32);
        if (types[i] != TFB_F32) check_gemm_c16(0, 1, 1, types[i]), check_gemm_c16(1, 0, 3, types[i]);
        if (!tf32) check_gemm_grouped(types[i]);
        for (int l = 0; l < 2; l++) {
            tfb_layout layout = l ? TFB_NHWC : TFB_NCHW;
            check_conv(3, 1, 1, types[i], tf32, layout);
            check_conv(1, 2, 0, types[i], tf32, layout);
            check_conv(7, 2, 3, types[i], tf32, layout);
        }
    }
}

static void gc_run_all(void) {
    GC_RUN(gc_run_libraries());
    GC_RUN(check_embedding());
    GC_RUN(check_embedding_bwd(1000, 2));
    GC_RUN(check_embedding_bwd(300, 50));
    GC_RUN(check_embedding_bwd(300, 600));
    GC_RUN(check_embedding_bwd_distinct());
    GC_RUN(check_layernorm());
    GC_RUN(check_residual_ln(TFB_F32, 0.1f));
    GC_RUN(check_residual_ln(TFB_F32, 0.0f));
    GC_RUN(check_residual_ln(TFB_F16, 0.1f));
    GC_RUN(check_residual_ln(TFB_BF16, 0.1f));
    GC_RUN(check_softmax());
    GC_RUN(check_attn_softmax(TFB_F32, 0.1f, 128, 0));
    GC_RUN(check_attn_softmax(TFB_F32, 0.0f, 128, 0));
    GC_RUN(check_attn_softmax(TFB_F32, 0.1f, 77, 13));
    GC_RUN(check_attn_softmax(TFB_F32, 0.1f, 512, 2));
    GC_RUN(check_attn_softmax(TFB_F32, 0.1f, 1100, 1));
    GC_RUN(check_attn_softmax(TFB_F16, 0.1f, 128, 0));
    GC_RUN(check_attn_softmax(TFB_BF16, 0.1f, 384, 5));
    GC_RUN(check_attn_fused(TFB_F16, 128, 128, 37, 0.1f));
    GC_RUN(check_attn_fused(TFB_BF16, 128, 100, 50, 0.1f));
    GC_RUN(check_attn_fused(TFB_F16, 64, 64, 1, 0.0f));
    GC_RUN(check_attn_softmax_p16(TFB_F16, 128));
    GC_RUN(check_attn_softmax_p16(TFB_BF16, 77));
    GC_RUN(check_attn_softmax_p16(TFB_F16, 1100));
    GC_RUN(check_elementwise());
    GC_RUN(check_add_relu(TFB_F32, TFB_F32));
    GC_RUN(check_add_relu(TFB_F16, TFB_F32));
    GC_RUN(check_add_relu(TFB_F16, TFB_F16));
    GC_RUN(check_add_relu(TFB_BF16, TFB_BF16));
    GC_RUN(check_bias());
    GC_RUN(check_repeatable());
    GC_RUN(check_repeatable_loss());
    GC_RUN(check_repeatable_embedding());
    GC_RUN(check_dropout());
    GC_RUN(check_xent());
    GC_RUN(check_xent_shard());
    GC_RUN(check_copy_2d());
    GC_RUN(check_permute());
    GC_RUN(check_typed_outputs(TFB_F16));
    GC_RUN(check_typed_outputs(TFB_BF16));
    GC_RUN(check_typed_inputs(TFB_F16));
    GC_RUN(check_typed_inputs(TFB_BF16));
    GC_RUN(check_normal_fill());
    GC_RUN(check_optimizers());
    GC_RUN(check_cast(TFB_F16));
    GC_RUN(check_cast(TFB_BF16));
    GC_RUN(check_finite());
    if (G.be[1]->mark && G.be[1]->gemm) GC_RUN(check_marks());
    if (G.be[1]->pending_text && strcmp(G.be[1]->name, "cuda") == 0) GC_RUN(check_pending());
    GC_RUN(check_batchnorm());
    GC_RUN(check_pooling(4, TFB_NCHW));
    GC_RUN(check_pooling(40, TFB_NHWC)); /* 40 channels: warps span images' pixels */
    /* last: it starts MPI, and a failure there (which ends the program) then costs no other row */
    if (G.be[1]->comm_wrap) GC_RUN(check_comm_alone());
}

static void usage_exit(void) {
    fprintf(stderr, "usage: gpu_check [--device %s] [--seed N] [--only WORD,...]%s\n",
            TFB_GPU_CHECK_EMU ? "cuda-emu|cpu" : "cuda|cpu", TFB_GPU_CHECK_EMU ? " [--sms N]" : "");
    exit(2);
}

/* G.be[1]: a backend of this build by name, or (gpu_check_emu) the emulated CUDA kernels. */
static tfb_status open_device(const char *device, int sms, char *why, size_t why_len) {
#if TFB_GPU_CHECK_EMU
    if (strcmp(device, "cuda-emu") == 0) return tfb_cuda_emu_backend_create(sms, NULL, &G.be[1]);
    if (strcmp(device, "cpu") != 0) { /* this program's cuBLAS and cuDNN are the emulator's stand-ins */
        snprintf(why, why_len, "gpu_check_emu runs cuda-emu or cpu; build/tests/gpu_check checks a GPU");
        return TFB_ERR_ARG;
    }
#endif
    (void)sms;
    return tfb_backend_open(&(tfb_backend_spec){.name = device, .threads = 4, .local_size = 1}, &G.be[1], why,
                            why_len);
}

int main(int argc, char **argv) {
    const char *device = TFB_GPU_CHECK_EMU ? "cuda-emu" : "cuda";
    char why[320] = "";
    int sms = 4;
    G.rng = 0x9E3779B97F4A7C15ull;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) G.rng ^= strtoull(argv[++i], NULL, 10) * 0x100000001B3ull;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) G.only = argv[++i];
        else if (TFB_GPU_CHECK_EMU && strcmp(argv[i], "--sms") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            sms = atoi(argv[++i]);
        else usage_exit();
    }
    G.brk = getenv("TFB_TEST_GPU_CHECK_BREAK");
    if (tfb_backend_open_cpu(4, &G.be[0]) != TFB_OK) return 1;
    if (open_device(device, sms, why, sizeof why) != TFB_OK) {
        fprintf(stderr, "gpu_check: --device %s: %s\n", device, why);
        return 2;
    }
    printf("gpu_check: %s%s%s against the CPU backend (error: max |device - cpu| / max |cpu|)\n", G.be[1]->name,
           G.be[1]->device_name ? " on " : "", G.be[1]->device_name ? G.be[1]->device_name : "");
    printf("| %-40s | %-4s | %10s | %7s | %-4s |\n", "check", "prec", "error", "tol", "");
    printf("|------------------------------------------|------|------------|---------|------|\n");
    gc_run_all();
    int rc = G.failed ? 1 : 0;
    if (G.groups == 0) {
        fprintf(stderr, "gpu_check: --only %s: no check group's call contains any of these words\n", G.only);
        rc = 2;
    } else printf("gpu_check: %d of %d checks passed\n", G.checks - G.failed, G.checks);
    G.be[1]->destroy(G.be[1]);
    G.be[0]->destroy(G.be[0]);
    if (G.mpi) tfb_comm_mpi_finalize();
    return rc;
}
