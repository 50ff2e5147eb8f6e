/* cpu_shard.c — the CPU backend's ops for tensors split across a tensor-parallel group: the embedding lookup of a
 * vocabulary shard (its backward is the whole table's, in cpu_ops.c), the three passes of a cross-entropy whose
 * classes are split across ranks (the ranks combine the per-row partial results with small all-reduces between
 * the passes), a strided 2-D copy for gathering and slicing channel shards, and the tokens x heads <-> heads x
 * tokens permutation of attention. Communication is the caller's; these ops only see one rank's shard.
 */
#include <math.h>
#include <float.h>
#include <string.h>
#include "cpu.h"

static int in_shard(int id, int row0, int rows) { return id >= row0 && id - row0 < rows; }

static tfb_status cpu_embedding_fwd_shard(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                          int row0, int rows, int accumulate) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *dst = out + (size_t)i * h;
        int hit = in_shard(ids[i], row0, rows);
        const float *src = table + (size_t)(hit ? ids[i] - row0 : 0) * h;
        if (accumulate && hit)
            for (int j = 0; j < h; j++) dst[j] += src[j];
        else if (!accumulate && hit)
            memcpy(dst, src, (size_t)h * sizeof(float));
        else if (!accumulate)
            memset(dst, 0, (size_t)h * sizeof(float));
    }
    return TFB_OK;
}

static tfb_status cpu_xent_shard_max(void *ctx, float *rowmax, const float *logits, int n, int v, int valid) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v;
        float mx = -FLT_MAX;
        for (int j = 0; j < valid; j++) mx = fmaxf(mx, x[j]);
        rowmax[i] = mx;
    }
    return TFB_OK;
}

static tfb_status cpu_xent_shard_sum(void *ctx, float *sums, const float *logits, const int *labels,
                                     const float *rowmax, int n, int v, int valid, int col0) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v;
        double s = 0.0;
        for (int j = 0; j < valid; j++) s += expf(x[j] - rowmax[i]);
        sums[2 * i] = (float)s;
        sums[2 * i + 1] = in_shard(labels[i], col0, valid) ? x[labels[i] - col0] : 0.0f;
    }
    return TFB_OK;
}

static tfb_status cpu_xent_shard_bwd(void *ctx, float *dlogits, const float *logits, const int *labels,
                                     const float *rowmax, const float *sums, int n, int v, int valid, int col0,
                                     float dscale) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * v;
        float *dx = dlogits + (size_t)i * v, inv = 1.0f / sums[2 * i];
        for (int j = 0; j < valid; j++) dx[j] = expf(x[j] - rowmax[i]) * inv * dscale;
        for (int j = valid; j < v; j++) dx[j] = 0.0f;
        if (in_shard(labels[i], col0, valid)) dx[labels[i] - col0] -= dscale;
    }
    return TFB_OK;
}

static tfb_status cpu_copy_2d(void *ctx, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                              size_t cols) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * dst_ld, src + r * src_ld, cols * sizeof(float));
    return TFB_OK;
}

/* Runs of n3 values are copied (same type, no bias) or widened, summed with the bias and rounded into out. */
static tfb_status cpu_permute_0213(void *ctx, void *out, tfb_dtype out_type, size_t out_ld, const void *in,
                                   tfb_dtype in_type, size_t in_ld, const float *bias, int n0, int n1, int n2,
                                   int n3) {
    (void)ctx;
    size_t es = tfb_dtype_size(in_type);
#pragma omp parallel for collapse(2) schedule(static)
    for (int i0 = 0; i0 < n0; i0++)
        for (int i1 = 0; i1 < n1; i1++) {
            size_t src = ((size_t)i0 * n1 + i1) * in_ld;
            for (int i2 = 0; i2 < n2; i2++) {
                size_t o = ((size_t)i0 * n2 + i2) * out_ld + (size_t)i1 * n3, run = src + (size_t)i2 * n3;
                const float *b = bias ? bias + (size_t)i2 * n3 : NULL;
                if (out_type == in_type && !b)
                    memcpy((char *)out + o * es, (const char *)in + run * es, (size_t)n3 * es);
                else
                    for (int i3 = 0; i3 < n3; i3++) {
                        float v = tfb_cpu_load(in, in_type, run + i3);
                        tfb_cpu_store(out, out_type, o + i3, b ? v + b[i3] : v);
                    }
            }
        }
    return TFB_OK;
}

void tfb_cpu_shard_install(tfb_backend *be) {
    be->embedding_fwd_shard = cpu_embedding_fwd_shard;
    be->xent_shard_max = cpu_xent_shard_max;
    be->xent_shard_sum = cpu_xent_shard_sum;
    be->xent_shard_bwd = cpu_xent_shard_bwd;
    be->copy_2d = cpu_copy_2d;
    be->permute_0213 = cpu_permute_0213;
}
