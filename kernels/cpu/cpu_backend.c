/* cpu_backend.c — the CPU backend's memory functions and GEMM (OpenBLAS), and its constructor.
 *
 * GEMM with FP16/BF16 inputs widens the 16-bit operands to FP32 in a scratch buffer owned by the backend and runs
 * SGEMM: 16-bit storage, FP32 arithmetic and accumulation, the numerics of tensor cores. TF32 GEMMs round FP32
 * operands to TF32 in the same scratch buffers: the CPU emulates tensor-core TF32, it has no faster path for it. Batched GEMMs run one
 * SGEMM per matrix with all threads on each. The training ops live in cpu_ops.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <omp.h>
#include "cpu.h"
#include "../half.h"

typedef struct {
    float *scratch[TFB_CPU_SLOTS];   /* FP32 work buffers that grow to the largest request */
    size_t floats[TFB_CPU_SLOTS];
    size_t in_use, peak;             /* bytes held through alloc(), and the most held at once since the reset */
    size_t limit;                    /* test hook TFB_TEST_DEVICE_MEMORY_MIB: alloc() fails beyond it (0: none) */
    double *marks; int n_marks;      /* timing marks: monotonic clock seconds (n_marks) */
} cpu_ctx;

enum { HEADER = 64 };                /* each block starts with its size, keeping the 64-byte alignment */

float *tfb_cpu_scratch(void *ctx, int slot, size_t n) {
    cpu_ctx *c = ctx;
    if (n > c->floats[slot]) {
        free(c->scratch[slot]);
        c->scratch[slot] = malloc(n * sizeof(float));
        c->floats[slot] = c->scratch[slot] ? n : 0;
    }
    return c->scratch[slot];
}

static void *cpu_alloc(void *ctx, size_t bytes) {
    cpu_ctx *c = ctx;
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    if (c->limit && c->in_use + rounded > c->limit) {
        fprintf(stderr, "tfbench[rank %d, cpu]: out of memory (TFB_TEST_DEVICE_MEMORY_MIB): asked for %.3f GiB with "
                "%.3f GiB free of %.3f GiB\n", tfb_log_rank, rounded / 1073741824.0,
                (c->limit - c->in_use) / 1073741824.0, c->limit / 1073741824.0);
        return NULL;
    }
    if (rounded > SIZE_MAX - HEADER || posix_memalign(&p, 64, rounded + HEADER) != 0) return NULL;
    memset(p, 0, rounded + HEADER);
    *(size_t *)p = rounded;
    c->in_use += rounded;
    if (c->in_use > c->peak) c->peak = c->in_use;
    return (char *)p + HEADER;
}

static void cpu_free(void *ctx, void *p) {
    cpu_ctx *c = ctx;
    if (!p) return;
    char *block = (char *)p - HEADER;
    c->in_use -= *(size_t *)block;
    free(block);
}

static void cpu_mem_stats(void *ctx, size_t *in_use, size_t *peak, int reset_peak) {
    cpu_ctx *c = ctx;
    if (reset_peak) c->peak = c->in_use;
    if (in_use) *in_use = c->in_use;
    if (peak) *peak = c->peak;
}

static tfb_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
    return TFB_OK;
}

static tfb_status cpu_fill(void *ctx, float *x, float value, size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = value;
    return TFB_OK;
}

static tfb_status cpu_normal_fill(void *ctx, float *x, size_t rows, size_t per, uint64_t row0, tfb_philox_key key) {
    (void)ctx;
    size_t pairs = (per + 1) / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (size_t r = 0; r < rows; r++)
        for (size_t p = 0; p < pairs; p++) {
            float *row = x + r * per, a, b;
            tfb_normal_pair(key, row0 + r, 2 * p, &a, &b);
            row[2 * p] = a;
            if (2 * p + 1 < per) row[2 * p + 1] = b;
        }
    return TFB_OK;
}

static tfb_status cpu_sync(void *ctx) { (void)ctx; return TFB_OK; }

static tfb_status cpu_marks_reserve(void *ctx, int n) {
    cpu_ctx *c = ctx;
    if (n < 0) return TFB_ERR_ARG;
    if (n <= c->n_marks) return TFB_OK;
    double *m = realloc(c->marks, (size_t)n * sizeof *m);
    TFB_CHECK_ALLOC(m);
    c->marks = m;
    c->n_marks = n;
    return TFB_OK;
}

/* Every op has finished when it returns, so the mark is the clock now. */
static tfb_status cpu_mark(void *ctx, int i) {
    cpu_ctx *c = ctx;
    if (i < 0 || i >= c->n_marks) return TFB_ERR_ARG;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->marks[i] = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return TFB_OK;
}

static tfb_status cpu_mark_seconds(void *ctx, int a, int b, double *seconds) {
    cpu_ctx *c = ctx;
    if (a < 0 || b < 0 || a >= c->n_marks || b >= c->n_marks) return TFB_ERR_ARG;
    *seconds = c->marks[b] - c->marks[a];
    return TFB_OK;
}

/* Extent in elements of one stored matrix of `rows` x `cols` (as stored) with leading dimension ld. */
static size_t gemm_extent(int rows, int cols, int ld) { return (size_t)(rows - 1) * (size_t)ld + (size_t)cols; }

static void widen_16(float *dst, const uint16_t *src, size_t n, tfb_dtype t) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = t == TFB_F16 ? tfb_f16_to_f32(src[i]) : tfb_bf16_to_f32(src[i]);
}

static void round_tf32(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = tfb_f32_round_tf32(src[i]);
}

void tfb_cpu_narrow(void *dst, tfb_dtype t, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) tfb_cpu_store(dst, t, i, src[i]);
}

const float *tfb_cpu_as_f32(void *ctx, int slot, const void *p, tfb_dtype t, int tf32, size_t n) {
    if (t == TFB_F32 && !tf32) return p;
    float *dst = tfb_cpu_scratch(ctx, slot, n);
    if (dst && t == TFB_F32) round_tf32(dst, p, n);
    else if (dst) widen_16(dst, p, n, t);
    return dst;
}

/* Total span in elements covered by all the matrices of one operand (the last one ends it). */
static size_t gemm_span(const tfb_gemm_desc *d, int rows, int cols, int ld, long long stride, long long outer) {
    return (size_t)tfb_gemm_offset(d, stride, outer, d->batch - 1) + gemm_extent(rows, cols, ld);
}

/* Rounds only C's own elements (the rows and matrices the GEMM wrote) from the FP32 copy f into d->c. */
static void gemm_narrow(const tfb_gemm_desc *d, const float *f) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < d->batch; i++)
        for (int r = 0; r < d->m; r++) {
            size_t o = (size_t)tfb_gemm_offset(d, d->stride_c, d->outer_c, i) + (size_t)r * d->ldc;
            for (int j = 0; j < d->n; j++) tfb_cpu_store(d->c, d->c_type, o + j, f[o + j]);
        }
}

static tfb_status cpu_gemm_widen(void *ctx, const tfb_gemm_desc *d, const float **a, const float **b) {
    int ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
    int br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
    TFB_CHECK_ALLOC(*a = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_GEMM_A, d->a, d->in_type, d->tf32,
                                        gemm_span(d, ar, ac, d->lda, d->stride_a, d->outer_a)));
    TFB_CHECK_ALLOC(*b = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_GEMM_B, d->b, d->in_type, d->tf32,
                                        gemm_span(d, br, bc, d->ldb, d->stride_b, d->outer_b)));
    return TFB_OK;
}

/* A 16-bit C is computed in an FP32 copy of its whole span (gaps included, so rows ldc apart keep their place),
 * widened first when beta reads it, and rounded back once. */
static tfb_status cpu_gemm(void *ctx, const tfb_gemm_desc *d) {
    const float *a = d->a, *b = d->b;
    if (!tfb_gemm_desc_valid(d)) return TFB_ERR_ARG;
    if (d->in_type != TFB_F32 || d->tf32) TFB_CHECK(cpu_gemm_widen(ctx, d, &a, &b));
    size_t c_span = gemm_span(d, d->m, d->n, d->ldc, d->stride_c, d->outer_c);
    float *c = d->c;
    if (d->c_type != TFB_F32) {
        TFB_CHECK_ALLOC(c = tfb_cpu_scratch(ctx, TFB_CPU_SLOT_GEMM_C, c_span));
        if (d->beta != 0.0f) widen_16(c, d->c, c_span, d->c_type);
    }
    for (int i = 0; i < d->batch; i++) {
        cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans, d->trans_b ? CblasTrans : CblasNoTrans,
                    d->m, d->n, d->k, d->alpha, a + tfb_gemm_offset(d, d->stride_a, d->outer_a, i), d->lda,
                    b + tfb_gemm_offset(d, d->stride_b, d->outer_b, i), d->ldb, d->beta,
                    c + tfb_gemm_offset(d, d->stride_c, d->outer_c, i), d->ldc);
    }
    if (d->c_type != TFB_F32) gemm_narrow(d, c);
    return TFB_OK;
}

static void cpu_destroy(tfb_backend *be) {
    cpu_ctx *c = be->ctx;
    for (int i = 0; i < TFB_CPU_SLOTS; i++) free(c->scratch[i]);
    free(c->marks);
    free(c);
    free(be);
}

tfb_status tfb_cpu_backend_create(int threads, tfb_backend **out) {
    tfb_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return TFB_ERR_NOMEM; }
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    *be = (tfb_backend){.name = "cpu", .ctx = c, .threads = threads, .alloc = cpu_alloc, .free = cpu_free,
                        .mem_stats = cpu_mem_stats,
                        .copy_h2d = cpu_copy, .copy_d2h = cpu_copy, .copy_d2d = cpu_copy, .fill = cpu_fill,
                        .normal_fill = cpu_normal_fill,
                        .sync = cpu_sync, .marks_reserve = cpu_marks_reserve, .mark = cpu_mark,
                        .mark_seconds = cpu_mark_seconds, .gemm = cpu_gemm, .destroy = cpu_destroy};
    const char *limit = getenv("TFB_TEST_DEVICE_MEMORY_MIB"); /* a CPU standing in for a GPU of this memory */
    if (limit && atof(limit) > 0) be->device_memory_bytes = c->limit = (size_t)(atof(limit) * 1048576.0);
    tfb_cpu_margin_enable(); /* test hook TFB_TEST_DECISION_MARGIN */
    tfb_cpu_ops_install(be);
    tfb_cpu_conv_install(be);
    tfb_cpu_shard_install(be);
    tfb_cpu_attn_install(be);
    *out = be;
    return TFB_OK;
}
