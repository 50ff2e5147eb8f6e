/* cuda_shard.cu — the CUDA backend's tensor-parallel shard ops, computing what cpu_shard.c computes: the embedding
 * lookup of a vocabulary shard, the three passes of a cross-entropy whose classes are split across ranks (the
 * all-reduces between them are the caller's), a strided 2-D copy and attention's tokens x heads <-> heads x tokens
 * permutation. Communication is not here.
 */
#include <float.h>
#include <math.h>
#include "cuda_internal.h"

#define ROW_THREADS 256

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

__device__ __forceinline__ int in_shard(int id, int row0, int rows) { return id >= row0 && id - row0 < rows; }

__global__ void k_embedding_fwd_shard(float *out, const float *table, const int *ids, int n, int h, int row0,
                                      int rows, int accumulate) {
    TFB_GRID_LOOP(e, (size_t)n * h) {
        int id = ids[e / h];
        int hit = in_shard(id, row0, rows);
        float v = hit ? table[(size_t)(id - row0) * h + e % h] : 0.0f;
        out[e] = accumulate ? out[e] + v : v;
    }
}

static tfb_status cuda_embedding_fwd_shard(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                           int row0, int rows, int accumulate) {
    k_embedding_fwd_shard<<<tfb_cuda_blocks((size_t)n * h), TFB_CUDA_THREADS, 0, S(ctx)>>>(out, table, ids, n, h,
                                                                                          row0, rows, accumulate);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_embedding_bwd_shard(float *dtable, const float *dout, const int *ids, int n, int h, int row0,
                                      int rows) {
    TFB_GRID_LOOP(e, (size_t)n * h) {
        int id = ids[e / h];
        if (in_shard(id, row0, rows)) atomicAdd(&dtable[(size_t)(id - row0) * h + e % h], dout[e]);
    }
}

static tfb_status cuda_embedding_bwd_shard(void *ctx, float *dtable, const float *dout, const int *ids, int n,
                                           int h, int row0, int rows) {
    k_embedding_bwd_shard<<<tfb_cuda_blocks((size_t)n * h), TFB_CUDA_THREADS, 0, S(ctx)>>>(dtable, dout, ids, n, h,
                                                                                          row0, rows);
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

/* One thread per element, i3 fastest: reads and writes are coalesced along rows of n3. */
__global__ void k_permute_0213(float *out, size_t out_ld, const float *in, size_t in_ld, int n1, int n2, int n3,
                               size_t total) {
    TFB_GRID_LOOP(e, total) {
        size_t i3 = e % n3, r = e / n3, i2 = r % n2, i01 = r / n2, i1 = i01 % n1, i0 = i01 / n1;
        out[(i0 * n2 + i2) * out_ld + i1 * n3 + i3] = in[i01 * in_ld + i2 * n3 + i3];
    }
}

static tfb_status cuda_permute_0213(void *ctx, float *out, size_t out_ld, const float *in, size_t in_ld, int n0,
                                    int n1, int n2, int n3) {
    size_t total = (size_t)n0 * n1 * n2 * n3;
    if (total == 0) return TFB_OK;
    k_permute_0213<<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(out, out_ld, in, in_ld, n1, n2, n3, total);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

void tfb_cuda_shard_install(tfb_backend *be) {
    be->embedding_fwd_shard = cuda_embedding_fwd_shard;
    be->embedding_bwd_shard = cuda_embedding_bwd_shard;
    be->xent_shard_max = cuda_xent_shard_max;
    be->xent_shard_sum = cuda_xent_shard_sum;
    be->xent_shard_bwd = cuda_xent_shard_bwd;
    be->copy_2d = cuda_copy_2d;
    be->permute_0213 = cuda_permute_0213;
}
