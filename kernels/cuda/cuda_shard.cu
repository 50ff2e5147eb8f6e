/* cuda_shard.cu — the CUDA backend's tensor-parallel shard ops, computing what cpu_shard.c computes: the embedding
 * lookup of a vocabulary shard (its backward is the whole table's, in cuda_ops.cu), the three passes of a
 * cross-entropy whose classes are split across ranks (the all-reduces between them are the caller's), a strided
 * 2-D copy and attention's tokens x heads <-> heads x tokens permutation. Communication is not here.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include "cuda_internal.h"

#define ROW_THREADS 256

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

__device__ __forceinline__ int in_shard(int id, int row0, int rows) { return id >= row0 && id - row0 < rows; }

/* one block per row i of out (n, h): the shard's row ids[i] - row0, or zeros when another rank holds it */
__global__ void k_embedding_fwd_shard(float *out, const float *table, const int *ids, int h, int row0, int rows,
                                      int accumulate) {
    int id = ids[blockIdx.x], hit = in_shard(id, row0, rows);
    float *o = out + (size_t)blockIdx.x * h;
    const float *t = hit ? table + (size_t)(id - row0) * h : NULL;
    TFB_ROW_LOOP(j, h) {
        float v = hit ? t[j] : 0.0f;
        o[j] = accumulate ? o[j] + v : v;
    }
}

static tfb_status cuda_embedding_fwd_shard(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                           int row0, int rows, int accumulate) {
    if (n < 1) return TFB_OK;
    k_embedding_fwd_shard<<<n, tfb_row_threads(h), 0, S(ctx)>>>(out, table, ids, h, row0, rows, accumulate);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_xent_shard_max(float *rowmax, const float *logits, int v, int valid) {
    const float *x = logits + (size_t)blockIdx.x * v;
    float mx = -FLT_MAX;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, x[j]);
    mx = tfb_block_max(mx);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}

static tfb_status cuda_xent_shard_max(void *ctx, float *rowmax, const float *logits, int n, int v, int valid) {
    if (n < 1) return TFB_OK;
    k_xent_shard_max<<<n, ROW_THREADS, 0, S(ctx)>>>(rowmax, logits, v, valid);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_xent_shard_sum(float *sums, const float *logits, const int *labels, const float *rowmax, int v,
                                 int valid, int col0) {
    int i = blockIdx.x, label = labels[i];
    const float *x = logits + (size_t)i * v;
    float s = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) s += expf(x[j] - rowmax[i]);
    s = tfb_block_sum(s);
    if (threadIdx.x != 0) return;
    sums[2 * i] = s;
    sums[2 * i + 1] = in_shard(label, col0, valid) ? x[label - col0] : 0.0f;
}

static tfb_status cuda_xent_shard_sum(void *ctx, float *sums, const float *logits, const int *labels,
                                      const float *rowmax, int n, int v, int valid, int col0) {
    if (n < 1) return TFB_OK;
    k_xent_shard_sum<<<n, ROW_THREADS, 0, S(ctx)>>>(sums, logits, labels, rowmax, v, valid, col0);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_xent_shard_bwd(float *dlogits, const float *logits, const int *labels, const float *rowmax,
                                 const float *sums, int v, int valid, int col0, float dscale) {
    int i = blockIdx.x, hit = in_shard(labels[i], col0, valid), at = labels[i] - col0;
    const float *x = logits + (size_t)i * v;
    float *dx = dlogits + (size_t)i * v, inv = 1.0f / sums[2 * i], mx = rowmax[i];
    for (int j = threadIdx.x; j < v; j += blockDim.x)
        dx[j] = j < valid ? expf(x[j] - mx) * inv * dscale - (hit && j == at ? dscale : 0.0f) : 0.0f;
}

static tfb_status cuda_xent_shard_bwd(void *ctx, float *dlogits, const float *logits, const int *labels,
                                      const float *rowmax, const float *sums, int n, int v, int valid, int col0,
                                      float dscale) {
    if (n < 1) return TFB_OK;
    k_xent_shard_bwd<<<n, ROW_THREADS, 0, S(ctx)>>>(dlogits, logits, labels, rowmax, sums, v, valid, col0, dscale);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_copy_2d(void *ctx, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                               size_t cols) {
    if (rows == 0 || cols == 0) return TFB_OK;
    TFB_CHECK_CUDA(cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float), cols * sizeof(float),
                                     rows, cudaMemcpyDeviceToDevice, S(ctx)));
    return TFB_OK;
}

/* One block per input row (i0, i1): its n2 runs of n3 values are read in order and each run is written to output
 * row (i0, i2) at column i1 n3, so reads and writes stay coalesced and the only per-element division is by n3 in
 * 32 bits (a row holds fewer than 2^31 values). */
__global__ void k_permute_0213(void *out, int out_type, size_t out_ld, const void *in, int in_type, size_t in_ld,
                               const float *bias, int n1, int n2, int n3) {
    unsigned row = blockIdx.x, i0 = row / n1, i1 = row - i0 * n1, width = (unsigned)n2 * n3;
    size_t src = (size_t)row * in_ld, dst = (size_t)i0 * n2 * out_ld + (size_t)i1 * n3;
    for (unsigned e = threadIdx.x; e < width; e += blockDim.x) {
        unsigned i2 = e / n3;
        float v = tfb_load_elem(in, in_type, src + e);
        tfb_store_elem(out, out_type, dst + (size_t)i2 * out_ld + (e - i2 * n3), bias ? v + bias[e] : v);
    }
}

static tfb_status cuda_permute_0213(void *ctx, void *out, tfb_dtype out_type, size_t out_ld, const void *in,
                                    tfb_dtype in_type, size_t in_ld, const float *bias, int n0, int n1, int n2,
                                    int n3) {
    long long rows = (long long)n0 * n1, width = (long long)n2 * n3;
    if (rows == 0 || width == 0) return TFB_OK;
    if (rows > INT_MAX || width > INT_MAX) return TFB_ERR_ARG;
    k_permute_0213<<<(unsigned)rows, tfb_row_threads((int)width), 0, S(ctx)>>>(out, (int)out_type, out_ld, in,
                                                                               (int)in_type, in_ld, bias, n1, n2, n3);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

void tfb_cuda_shard_install(tfb_backend *be) {
    be->embedding_fwd_shard = cuda_embedding_fwd_shard;
    be->xent_shard_max = cuda_xent_shard_max;
    be->xent_shard_sum = cuda_xent_shard_sum;
    be->xent_shard_bwd = cuda_xent_shard_bwd;
    be->copy_2d = cuda_copy_2d;
    be->permute_0213 = cuda_permute_0213;
}
