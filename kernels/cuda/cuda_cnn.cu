/* cuda_cnn.cu — the CUDA backend's batch norm (training mode, with the cross-rank sums of synchronised batch norm
 * left to the caller) and pooling, computing what cpu_conv.c computes: two-pass moments, biased batch variance,
 * the same backward formula, max pooling with a saved argmax (index within the image plane) and global average
 * pooling. NCHW only, FP32. Convolutions are in cuda_blas.cu.
 *
 * A channel's reduction covers n planes of hw values. Each channel's planes are split over enough blocks to give
 * every SM a few (64 channels alone would leave half of an H100 idle), each block writes a partial sum, and the
 * next kernel adds a channel's partials in a fixed order: deterministic, no atomics. Element-wise kernels index
 * with 32-bit arithmetic when the tensor allows (a 64-bit division per element would make them compute-bound).
 */
#include <math.h>
#include "cuda_internal.h"

#define CH_THREADS 256
#define BLOCKS_PER_SM 4

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

/* ---- channel reductions ---- */

/* Blocks per channel: enough for BLOCKS_PER_SM per SM over all channels, never more than the planes. */
static int split_of(const cuda_ctx *c, int channels, int n) {
    int target = BLOCKS_PER_SM * (c->sms > 0 ? c->sms : 1);
    int s = channels >= target ? 1 : (target + channels - 1) / channels;
    return s < n ? s : n;
}

/* Partial-sum space for `values` sums per block of a (channels x splits) grid. */
static tfb_status partials_reserve(cuda_ctx *c, int channels, int splits, int values, float **out) {
    TFB_CHECK(tfb_cuda_grow(c, &c->partials, &c->partials_bytes, (size_t)channels * splits * values * sizeof(float)));
    *out = (float *)c->partials;
    return TFB_OK;
}

/* Block b of a (channels x splits) grid: its channel and its planes [*i0, *i1) of n. */
__device__ __forceinline__ int block_planes(int n, int splits, int *i0, int *i1) {
    int s = blockIdx.x % splits;
    *i0 = (int)((long long)n * s / splits);
    *i1 = (int)((long long)n * (s + 1) / splits);
    return blockIdx.x / splits;
}

/* Offset of element e (0 .. (i1 - i0) hw) of the block's planes, from the first of them. */
__device__ __forceinline__ size_t block_offset(unsigned e, unsigned hw, int c) {
    unsigned plane = e / hw;
    return (size_t)plane * c * hw + (e - plane * hw);
}

/* The sum of a channel's partials (v-th of `values` per block), in block order, in double. */
__device__ __forceinline__ double channel_total(const float *partial, int ch, int splits, int values, int v) {
    double t = 0;
    for (int s = 0; s < splits; s++) t += partial[((size_t)ch * splits + s) * values + v];
    return t;
}

__global__ void k_bn_sum(float *partial, const float *x, int n, int c, int hw, int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    const float *base = x + ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float s = 0.0f;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) s += base[block_offset(e, hw, c)];
    s = tfb_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* The mean from the first pass's partials; partial sums of squared deviations from it. */
__global__ void k_bn_sqdev(float *mean, float *partial_sq, const float *partial_sum, const float *x, int n, int c,
                           int hw, int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    float m = (float)(channel_total(partial_sum, ch, splits, 1, 0) / ((double)n * hw));
    const float *base = x + ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float ss = 0.0f;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) {
        float d = base[block_offset(e, hw, c)] - m;
        ss += d * d;
    }
    ss = tfb_block_sum(ss);
    if (threadIdx.x != 0) return;
    partial_sq[blockIdx.x] = ss;
    if (blockIdx.x % splits == 0) mean[ch] = m;
}

__global__ void k_bn_var(float *var, const float *partial_sq, int c, double count, int splits) {
    TFB_GRID_LOOP(ch, (size_t)c) var[ch] = (float)(channel_total(partial_sq, (int)ch, splits, 1, 0) / count);
}

/* 32-bit element indices (and their strides) stay below 2^32 for tensors under 2^31 elements. */
static int index32(size_t elements) { return elements < ((size_t)1 << 31); }

static tfb_status cuda_bn_moments(void *ctx, float *mean, float *var, const float *x, int n, int c, int hw) {
    cuda_ctx *cc = (cuda_ctx *)ctx;
    float *p;
    if (c < 1 || n < 1) return TFB_OK;
    if (!index32((size_t)n * hw)) return TFB_ERR_ARG; /* one channel of 2^31 values: no network here has one */
    int splits = split_of(cc, c, n), blocks = c * splits;
    TFB_CHECK(partials_reserve(cc, c, splits, 2, &p));
    k_bn_sum<<<blocks, CH_THREADS, 0, S(ctx)>>>(p, x, n, c, hw, splits);
    TFB_CHECK_LAUNCH();
    k_bn_sqdev<<<blocks, CH_THREADS, 0, S(ctx)>>>(mean, p + blocks, p, x, n, c, hw, splits);
    TFB_CHECK_LAUNCH();
    k_bn_var<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(var, p + blocks, c, (double)n * hw, splits);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- element-wise batch norm, indexed in I (unsigned when the tensor has under 2^31 elements) ---- */

template <typename I>
__global__ void k_bn_apply(float *y, const float *x, const float *mean, const float *var, const float *gamma,
                           const float *beta, I total, I c, I hw, float eps) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        int ch = (int)(e / hw % c);
        float scale = gamma[ch] * rsqrtf(var[ch] + eps);
        y[e] = x[e] * scale + (beta[ch] - mean[ch] * scale);
    }
}

static tfb_status cuda_bn_apply(void *ctx, float *y, const float *x, const float *mean, const float *var,
                                const float *gamma, const float *beta, int n, int c, int hw, float eps) {
    size_t total = (size_t)n * c * hw;
    if (index32(total))
        k_bn_apply<unsigned><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            y, x, mean, var, gamma, beta, (unsigned)total, (unsigned)c, (unsigned)hw, eps);
    else
        k_bn_apply<size_t><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, mean, var, gamma, beta,
                                                                                    total, (size_t)c, (size_t)hw, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* Partial (sum dy, sum dy (x - mean)) of each block's planes. */
__global__ void k_bn_bwd_partial(float *partial, const float *dy, const float *x, const float *mean, int n, int c,
                                 int hw, int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    size_t first = ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float m = mean[ch], s = 0.0f, sx = 0.0f;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) {
        size_t i = first + block_offset(e, hw, c);
        s += dy[i];
        sx += dy[i] * (x[i] - m);
    }
    s = tfb_block_sum(s);
    sx = tfb_block_sum(sx);
    if (threadIdx.x != 0) return;
    partial[2 * (size_t)blockIdx.x] = s;
    partial[2 * (size_t)blockIdx.x + 1] = sx;
}

__global__ void k_bn_bwd_finish(float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, const float *partial,
                                const float *var, int c, int splits, float eps) {
    TFB_GRID_LOOP(ch, (size_t)c) {
        float s = (float)channel_total(partial, (int)ch, splits, 2, 0);
        float sx = (float)channel_total(partial, (int)ch, splits, 2, 1) * rsqrtf(var[ch] + eps);
        sum_dy[ch] = s;
        sum_dy_xhat[ch] = sx;
        dgamma[ch] += sx;
        dbeta[ch] += s;
    }
}

static tfb_status cuda_bn_bwd_reduce(void *ctx, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                     const float *dy, const float *x, const float *mean, const float *var, int n,
                                     int c, int hw, float eps) {
    cuda_ctx *cc = (cuda_ctx *)ctx;
    float *p;
    if (c < 1 || n < 1) return TFB_OK;
    if (!index32((size_t)n * hw)) return TFB_ERR_ARG; /* one channel of 2^31 values: no network here has one */
    int splits = split_of(cc, c, n);
    TFB_CHECK(partials_reserve(cc, c, splits, 2, &p));
    k_bn_bwd_partial<<<c * splits, CH_THREADS, 0, S(ctx)>>>(p, dy, x, mean, n, c, hw, splits);
    TFB_CHECK_LAUNCH();
    k_bn_bwd_finish<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(sum_dy, sum_dy_xhat, dgamma, dbeta, p,
                                                                                var, c, splits, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

template <typename I>
__global__ void k_bn_bwd_apply(float *dx, const float *dy, const float *x, const float *mean, const float *var,
                               const float *gamma, const float *sum_dy, const float *sum_dy_xhat, double count,
                               I total, I c, I hw, float eps) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        int ch = (int)(e / hw % c);
        float rstd = rsqrtf(var[ch] + eps), g = gamma[ch] * rstd;
        float mdy = (float)(sum_dy[ch] / count), mdx = (float)(sum_dy_xhat[ch] / count);
        float xhat = (x[e] - mean[ch]) * rstd;
        dx[e] = g * (dy[e] - mdy - xhat * mdx);
    }
}

static tfb_status cuda_bn_bwd_apply(void *ctx, float *dx, const float *dy, const float *x, const float *mean,
                                    const float *var, const float *gamma, const float *sum_dy,
                                    const float *sum_dy_xhat, double count, int n, int c, int hw, float eps) {
    size_t total = (size_t)n * c * hw;
    if (index32(total))
        k_bn_bwd_apply<unsigned><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            dx, dy, x, mean, var, gamma, sum_dy, sum_dy_xhat, count, (unsigned)total, (unsigned)c, (unsigned)hw, eps);
    else
        k_bn_bwd_apply<size_t><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            dx, dy, x, mean, var, gamma, sum_dy, sum_dy_xhat, count, total, (size_t)c, (size_t)hw, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bn_moments_merge(float *mean, float *var, const float *mine, int c, int ranks) {
    TFB_GRID_LOOP(ch, (size_t)c) {
        float m = mean[ch] / (float)ranks, d = mine[ch] - m;
        mean[ch] = m;
        var[ch] = (var[ch] + d * d) / (float)ranks;
    }
}

static tfb_status cuda_bn_moments_merge(void *ctx, float *mean, float *var, const float *mine, int c, int ranks) {
    if (c < 1) return TFB_OK;
    k_bn_moments_merge<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(mean, var, mine, c, ranks);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bn_running_update(float *run_mean, float *run_var, const float *mean, const float *var, int c,
                                    float momentum, double unbias) {
    TFB_GRID_LOOP(ch, (size_t)c) {
        run_mean[ch] = (1 - momentum) * run_mean[ch] + momentum * mean[ch];
        run_var[ch] = (1 - momentum) * run_var[ch] + momentum * (float)(var[ch] * unbias);
    }
}

static tfb_status cuda_bn_running_update(void *ctx, float *run_mean, float *run_var, const float *mean,
                                         const float *var, int c, float momentum, double count) {
    double unbias = count > 1 ? count / (count - 1) : 1.0;
    k_bn_running_update<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(run_mean, run_var, mean, var, c,
                                                                                     momentum, unbias);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- pooling ---- */

struct pool_shape { int h, w, r, stride, pad, p, q; };

/* One block per (image, channel) plane; its threads stride over the plane's p x q outputs. */
__global__ void k_maxpool_fwd(float *y, int *argmax, const float *x, pool_shape s) {
    int pq = s.p * s.q;
    const float *in = x + (size_t)blockIdx.x * s.h * s.w;
    float *out = y + (size_t)blockIdx.x * pq;
    int *arg_out = argmax + (size_t)blockIdx.x * pq;
    TFB_ROW_LOOP(o, pq) {
        int i = o / s.q, j = o - i * s.q, arg = -1;
        float best = -INFINITY;
        for (int a = 0; a < s.r; a++)
            for (int b = 0; b < s.r; b++) {
                int ih = i * s.stride - s.pad + a, iw = j * s.stride - s.pad + b;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                if (in[ih * s.w + iw] > best || arg < 0) { best = in[ih * s.w + iw]; arg = ih * s.w + iw; }
            }
        out[o] = best;
        arg_out[o] = arg;
    }
}

static tfb_status cuda_maxpool_fwd(void *ctx, float *y, int *argmax, const float *x, int n, int c, int h, int w,
                                   int r, int stride, int pad, int p, int q) {
    pool_shape s = {h, w, r, stride, pad, p, q};
    if ((long long)n * c < 1 || p * q < 1) return TFB_OK;
    k_maxpool_fwd<<<(unsigned)(n * c), tfb_row_threads(p * q), 0, S(ctx)>>>(y, argmax, x, s);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_maxpool_bwd(float *dx, const float *dy, const int *argmax, int hw, int pq) {
    float *d = dx + (size_t)blockIdx.x * hw;
    size_t o0 = (size_t)blockIdx.x * pq;
    TFB_ROW_LOOP(o, pq) atomicAdd(&d[argmax[o0 + o]], dy[o0 + o]);
}

static tfb_status cuda_maxpool_bwd(void *ctx, float *dx, const float *dy, const int *argmax, int n, int c, int hw,
                                   int pq) {
    TFB_CHECK_CUDA(cudaMemsetAsync(dx, 0, (size_t)n * c * hw * sizeof(float), S(ctx)));
    if ((long long)n * c < 1 || pq < 1) return TFB_OK;
    k_maxpool_bwd<<<(unsigned)(n * c), tfb_row_threads(pq), 0, S(ctx)>>>(dx, dy, argmax, hw, pq);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_avgpool_fwd(float *y, const float *x, size_t planes, int hw) {
    TFB_GRID_LOOP(plane, planes) {
        float s = 0.0f;
        for (int j = 0; j < hw; j++) s += x[plane * hw + j];
        y[plane] = s / hw;
    }
}

static tfb_status cuda_avgpool_fwd(void *ctx, float *y, const float *x, int n, int c, int hw) {
    size_t planes = (size_t)n * c;
    k_avgpool_fwd<<<tfb_cuda_blocks(planes), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, planes, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_avgpool_bwd(float *dx, const float *dy, int hw) {
    float *d = dx + (size_t)blockIdx.x * hw, g = dy[blockIdx.x] / (float)hw;
    TFB_ROW_LOOP(j, hw) d[j] = g;
}

static tfb_status cuda_avgpool_bwd(void *ctx, float *dx, const float *dy, int n, int c, int hw) {
    if ((long long)n * c < 1 || hw < 1) return TFB_OK;
    k_avgpool_bwd<<<(unsigned)(n * c), tfb_row_threads(hw), 0, S(ctx)>>>(dx, dy, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

void tfb_cuda_cnn_install(tfb_backend *be) {
    be->bn_moments = cuda_bn_moments;
    be->bn_apply = cuda_bn_apply;
    be->bn_bwd_reduce = cuda_bn_bwd_reduce;
    be->bn_bwd_apply = cuda_bn_bwd_apply;
    be->bn_moments_merge = cuda_bn_moments_merge;
    be->bn_running_update = cuda_bn_running_update;
    be->maxpool_fwd = cuda_maxpool_fwd;
    be->maxpool_bwd = cuda_maxpool_bwd;
    be->avgpool_fwd = cuda_avgpool_fwd;
    be->avgpool_bwd = cuda_avgpool_bwd;
}
