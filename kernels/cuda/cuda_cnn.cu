/* cuda_cnn.cu — the CUDA backend's batch norm (training mode, with the cross-rank sums of synchronised batch norm
 * left to the caller) and pooling, computing what cpu_conv.c computes: two-pass moments, biased batch variance,
 * the same backward formula, max pooling with a saved argmax (index within the image plane) and global average
 * pooling. NCHW only, FP32. Channel reductions run one block per channel. Convolutions are in cuda_blas.cu.
 */
#include <math.h>
#include "cuda_internal.h"

#define CH_THREADS 256

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

/* element e of channel ch's n*hw values */
__device__ __forceinline__ size_t ch_index(size_t e, int ch, int c, int hw) {
    return ((e / hw) * c + ch) * hw + e % hw;
}

__global__ void k_bn_moments(float *mean, float *var, const float *x, int n, int c, int hw) {
    int ch = blockIdx.x;
    size_t count = (size_t)n * hw;
    float s = 0.0f, ss = 0.0f;
    for (size_t e = threadIdx.x; e < count; e += blockDim.x) s += x[ch_index(e, ch, c, hw)];
    float m = tfb_block_sum(s) / (float)count;
    for (size_t e = threadIdx.x; e < count; e += blockDim.x) {
        float d = x[ch_index(e, ch, c, hw)] - m;
        ss += d * d;
    }
    ss = tfb_block_sum(ss);
    if (threadIdx.x == 0) { mean[ch] = m; var[ch] = ss / (float)count; }
}

static tfb_status cuda_bn_moments(void *ctx, float *mean, float *var, const float *x, int n, int c, int hw) {
    if (c < 1) return TFB_OK;
    k_bn_moments<<<c, CH_THREADS, 0, S(ctx)>>>(mean, var, x, n, c, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bn_apply(float *y, const float *x, const float *mean, const float *var, const float *gamma,
                           const float *beta, size_t total, int c, int hw, float eps) {
    TFB_GRID_LOOP(e, total) {
        int ch = (int)(e / hw % c);
        float scale = gamma[ch] * rsqrtf(var[ch] + eps);
        y[e] = x[e] * scale + (beta[ch] - mean[ch] * scale);
    }
}

static tfb_status cuda_bn_apply(void *ctx, float *y, const float *x, const float *mean, const float *var,
                                const float *gamma, const float *beta, int n, int c, int hw, float eps) {
    size_t total = (size_t)n * c * hw;
    k_bn_apply<<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, mean, var, gamma, beta, total, c, hw, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bn_bwd_reduce(float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *mean, const float *var, int n, int c, int hw,
                                float eps) {
    int ch = blockIdx.x;
    size_t count = (size_t)n * hw;
    float rstd = rsqrtf(var[ch] + eps), m = mean[ch], s = 0.0f, sx = 0.0f;
    for (size_t e = threadIdx.x; e < count; e += blockDim.x) {
        size_t i = ch_index(e, ch, c, hw);
        s += dy[i];
        sx += dy[i] * (x[i] - m);
    }
    s = tfb_block_sum(s);
    sx = tfb_block_sum(sx) * rstd;
    if (threadIdx.x != 0) return;
    sum_dy[ch] = s;
    sum_dy_xhat[ch] = sx;
    dgamma[ch] += sx;
    dbeta[ch] += s;
}

static tfb_status cuda_bn_bwd_reduce(void *ctx, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                     const float *dy, const float *x, const float *mean, const float *var, int n,
                                     int c, int hw, float eps) {
    if (c < 1) return TFB_OK;
    k_bn_bwd_reduce<<<c, CH_THREADS, 0, S(ctx)>>>(sum_dy, sum_dy_xhat, dgamma, dbeta, dy, x, mean, var, n, c, hw, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bn_bwd_apply(float *dx, const float *dy, const float *x, const float *mean, const float *var,
                               const float *gamma, const float *sum_dy, const float *sum_dy_xhat, double count,
                               size_t total, int c, int hw, float eps) {
    TFB_GRID_LOOP(e, total) {
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
    k_bn_bwd_apply<<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(dx, dy, x, mean, var, gamma, sum_dy,
                                                                           sum_dy_xhat, count, total, c, hw, eps);
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

__global__ void k_maxpool_fwd(float *y, int *argmax, const float *x, size_t outputs, pool_shape s) {
    TFB_GRID_LOOP(o, outputs) {
        size_t plane = o / ((size_t)s.p * s.q);
        int i = (int)(o / s.q % s.p), j = (int)(o % s.q), arg = -1;
        const float *in = x + plane * s.h * s.w;
        float best = -INFINITY;
        for (int a = 0; a < s.r; a++)
            for (int b = 0; b < s.r; b++) {
                int ih = i * s.stride - s.pad + a, iw = j * s.stride - s.pad + b;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                if (in[ih * s.w + iw] > best || arg < 0) { best = in[ih * s.w + iw]; arg = ih * s.w + iw; }
            }
        y[o] = best;
        argmax[o] = arg;
    }
}

static tfb_status cuda_maxpool_fwd(void *ctx, float *y, int *argmax, const float *x, int n, int c, int h, int w,
                                   int r, int stride, int pad, int p, int q) {
    size_t outputs = (size_t)n * c * p * q;
    pool_shape s = {h, w, r, stride, pad, p, q};
    k_maxpool_fwd<<<tfb_cuda_blocks(outputs), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, argmax, x, outputs, s);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_maxpool_bwd(float *dx, const float *dy, const int *argmax, size_t outputs, int hw, int pq) {
    TFB_GRID_LOOP(o, outputs) atomicAdd(&dx[(o / pq) * hw + argmax[o]], dy[o]);
}

static tfb_status cuda_maxpool_bwd(void *ctx, float *dx, const float *dy, const int *argmax, int n, int c, int hw,
                                   int pq) {
    size_t outputs = (size_t)n * c * pq;
    TFB_CHECK_CUDA(cudaMemsetAsync(dx, 0, (size_t)n * c * hw * sizeof(float), S(ctx)));
    k_maxpool_bwd<<<tfb_cuda_blocks(outputs), TFB_CUDA_THREADS, 0, S(ctx)>>>(dx, dy, argmax, outputs, hw, pq);
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

__global__ void k_avgpool_bwd(float *dx, const float *dy, size_t total, int hw) {
    TFB_GRID_LOOP(e, total) dx[e] = dy[e / hw] / (float)hw;
}

static tfb_status cuda_avgpool_bwd(void *ctx, float *dx, const float *dy, int n, int c, int hw) {
    size_t total = (size_t)n * c * hw;
    k_avgpool_bwd<<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(dx, dy, total, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

void tfb_cuda_cnn_install(tfb_backend *be) {
    be->bn_moments = cuda_bn_moments;
    be->bn_apply = cuda_bn_apply;
    be->bn_bwd_reduce = cuda_bn_bwd_reduce;
    be->bn_bwd_apply = cuda_bn_bwd_apply;
    be->bn_running_update = cuda_bn_running_update;
    be->maxpool_fwd = cuda_maxpool_fwd;
    be->maxpool_bwd = cuda_maxpool_bwd;
    be->avgpool_fwd = cuda_avgpool_fwd;
    be->avgpool_bwd = cuda_avgpool_bwd;
}
