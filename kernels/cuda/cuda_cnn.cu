/* cuda_cnn.cu — the CUDA backend's batch norm (training mode, with the cross-rank sums of synchronised batch norm
 * left to the caller) and pooling, computing what cpu_conv.c computes: two-pass moments (one pass of shifted sums
 * for a 16-bit x, whose values carry far fewer bits than the sums' rounding loses), biased batch variance,
 * the same backward formula, max pooling with a saved argmax (index within the image plane; the backward gathers
 * each input's gradient in the CPU's order, so it is deterministic and needs no FP32 scratch) and global average
 * pooling, in FP32, NCHW and NHWC, and a residual block's sum + ReLU. Batch norm reads its input x in FP32 or 16
 * bits (a 16-bit network's convolution outputs) and writes its output in either; statistics and sums are FP32
 * (double across blocks); the block sum reads and writes either type.
 * Convolutions are in cuda_conv.cu.
 *
 * A channel's reduction covers n planes of hw values. Each channel's planes are split over enough blocks to give
 * every SM a few (64 channels alone would leave half of an H100 idle), each block writes a partial sum, and the
 * next kernel adds a channel's partials in a fixed order: deterministic, no atomics. An NHWC tensor arrives as
 * (n*h*w, c, 1): planes of one value each, which the plane kernels would read 4 bytes a warp at a time, so hw == 1
 * takes column kernels instead (a block's warps read 32 adjacent channels of a row range, 128 contiguous bytes a
 * load) that write the same partials. Element-wise kernels index with 32-bit arithmetic when the tensor allows (a
 * 64-bit division per element would make them compute-bound).
 */
#include <limits.h>
#include <math.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "cuda_internal.h"
#include "../act.h"

#define CH_THREADS 256
#define BLOCKS_PER_SM 4

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

/* Element i of an FP32 or 16-bit tensor as FP32, and x stored into one (16-bit: rounded to nearest even). */
__device__ __forceinline__ float ldf(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ldf(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void stf(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void stf(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* Runs the statement with T the C++ type of tfb_dtype t (the kernels' template argument). */
#define TYPE_CASE(t, T, ...)                                                        \
    do {                                                                            \
        if ((t) == TFB_F16) { typedef __half T; __VA_ARGS__; }                      \
        else if ((t) == TFB_BF16) { typedef __nv_bfloat16 T; __VA_ARGS__; }         \
        else { typedef float T; __VA_ARGS__; }                                      \
    } while (0)

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

template <typename X> __global__ void k_bn_sum(float *partial, const X *x, int n, int c, int hw, int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    const X *base = x + ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float s = 0.0f;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) s += ldf(base, block_offset(e, hw, c));
    s = tfb_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* The mean from the first pass's partials; partial sums of squared deviations from it. */
template <typename X>
__global__ void k_bn_sqdev(float *mean, float *partial_sq, const float *partial_sum, const X *x, int n, int c, int hw,
                           int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    float m = (float)(channel_total(partial_sum, ch, splits, 1, 0) / ((double)n * hw));
    const X *base = x + ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float ss = 0.0f;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) {
        float d = ldf(base, block_offset(e, hw, c)) - m;
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

/* The per-channel tensors a batch-norm backward kernel reads, and its fused ReLU. */
struct bn_bwd {
    const float *mean, *var, *gamma, *beta;
    float eps;
    int relu;
};

__device__ __forceinline__ void bn_affine_of(const bn_bwd &bn, int ch, float *scale, float *shift) {
    tfb_bn_affine(bn.mean[ch], bn.var[ch], bn.gamma[ch], bn.beta[ch], bn.eps, scale, shift);
}

/* ---- the column path (hw == 1): blocks of COL_X channels x COL_Y row lanes, grid (channel blocks, splits) ---- */

#define COL_X 32
#define COL_Y 8
#define COL_UNROLL 4
#define COL_BLOCKS_PER_SM 8 /* 2048 threads an SM: the loads in flight a column reduction needs */

/* Row splits: enough for COL_BLOCKS_PER_SM blocks per SM over all channel blocks, at least COL_Y rows each. */
static int col_split_of(const cuda_ctx *c, int channels, int rows) {
    int col_blocks = (channels + COL_X - 1) / COL_X, target = COL_BLOCKS_PER_SM * (c->sms > 0 ? c->sms : 1);
    int s = (target + col_blocks - 1) / col_blocks, most = (rows + COL_Y - 1) / COL_Y;
    s = s < most ? s : most;
    return s > 0 ? s : 1;
}

static dim3 col_grid(int channels, int splits) { return dim3((unsigned)((channels + COL_X - 1) / COL_X), (unsigned)splits); }

/* This block's channel and its rows [*r0, *r1) of `rows`. */
__device__ __forceinline__ int col_rows(int rows, int splits, int *r0, int *r1) {
    *r0 = (int)((long long)rows * blockIdx.y / splits);
    *r1 = (int)((long long)rows * (blockIdx.y + 1) / splits);
    return blockIdx.x * COL_X + threadIdx.x;
}

/* Sum over the block's COL_Y row lanes, valid in lane 0; safe to call repeatedly in one kernel. */
__device__ __forceinline__ float col_block_sum(float v) {
    __shared__ float sh[COL_Y][COL_X + 1];
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0)
        for (int y = 1; y < COL_Y; y++) v += sh[y][threadIdx.x];
    __syncthreads();
    return v;
}

/* a gated by batch norm's ReLU: a where b * scale + shift > 0 (when relu) */
__device__ __forceinline__ float col_gate(float a, float b, float scale, float shift, int relu) {
    return !relu || tfb_bn_value(b, scale, shift) > 0.0f ? a : 0.0f;
}

/* Over this lane's rows of [r0, r1) (every COL_Y-th, from r0 + threadIdx.y), with COL_UNROLL rows' loads in
 * flight: *s_out = sum of a[r, ch]; *t_out = MODE 1: sum of (a - m)^2, MODE 2: sum of a (b - m), MODE 0: 0.
 * MODE 2 gates a by the ReLU of bn (scale, shift) when relu. */
template <int MODE, typename A, typename B>
__device__ __forceinline__ void col_lane(const A *a, const B *b, float m, int r0, int r1, int c, int ch,
                                         float *s_out, float *t_out, float scale = 0.0f, float shift = 0.0f,
                                         int relu = 0) {
    float s[COL_UNROLL] = {0}, t[COL_UNROLL] = {0};
    int r = r0 + threadIdx.y;
    for (; r + (COL_UNROLL - 1) * COL_Y < r1; r += COL_UNROLL * COL_Y) {
        float va[COL_UNROLL], vb[COL_UNROLL];
#pragma unroll
        for (int u = 0; u < COL_UNROLL; u++) {
            size_t i = (size_t)(r + u * COL_Y) * c + ch;
            vb[u] = MODE == 2 ? ldf(b, i) : 0.0f;
            va[u] = MODE == 2 ? col_gate(ldf(a, i), vb[u], scale, shift, relu) : ldf(a, i);
        }
#pragma unroll
        for (int u = 0; u < COL_UNROLL; u++) {
            s[u] += va[u];
            if (MODE == 1) t[u] += (va[u] - m) * (va[u] - m);
            if (MODE == 2) t[u] += va[u] * (vb[u] - m);
        }
    }
    for (; r < r1; r += COL_Y) {
        size_t i = (size_t)r * c + ch;
        float vb = MODE == 2 ? ldf(b, i) : 0.0f;
        float va = MODE == 2 ? col_gate(ldf(a, i), vb, scale, shift, relu) : ldf(a, i);
        s[0] += va;
        if (MODE == 1) t[0] += (va - m) * (va - m);
        if (MODE == 2) t[0] += va * (vb - m);
    }
    *s_out = *t_out = 0.0f;
#pragma unroll
    for (int u = 0; u < COL_UNROLL; u++) { *s_out += s[u]; *t_out += t[u]; }
}

template <typename X> __global__ void k_col_sum(float *partial, const X *x, int rows, int c, int splits) {
    int r0, r1, ch = col_rows(rows, splits, &r0, &r1);
    float s = 0.0f, unused = 0.0f;
    if (ch < c) col_lane<0>(x, (const float *)NULL, 0.0f, r0, r1, c, ch, &s, &unused);
    s = col_block_sum(s);
    if (threadIdx.y == 0 && ch < c) partial[(size_t)ch * splits + blockIdx.y] = s;
}

/* The mean from the first pass's partials (one thread per channel: the column path has many splits, too many
 * for every thread of the next kernel to add up). */
__global__ void k_bn_mean(float *mean, const float *partial_sum, int c, double count, int splits) {
    TFB_GRID_LOOP(ch, (size_t)c) mean[ch] = (float)(channel_total(partial_sum, (int)ch, splits, 1, 0) / count);
}

template <typename X>
__global__ void k_col_sqdev(float *partial_sq, const float *mean, const X *x, int rows, int c, int splits) {
    int r0, r1, ch = col_rows(rows, splits, &r0, &r1);
    float s = 0.0f, ss = 0.0f;
    if (ch < c) col_lane<1>(x, (const float *)NULL, mean[ch], r0, r1, c, ch, &s, &ss);
    ss = col_block_sum(ss);
    if (threadIdx.y == 0 && ch < c) partial_sq[(size_t)ch * splits + blockIdx.y] = ss;
}

/* One-pass moments of a 16-bit x: each block's sums of x and of (x - k)^2, k being the channel's first value
 * (image 0, pixel 0: at ch hw in either layout), which every block of the channel reads. */
__device__ __forceinline__ size_t channel_first(int ch, int hw) { return (size_t)ch * hw; }

template <typename X>
__global__ void k_bn_sum_sq(float *partial_sum, float *partial_sq, const X *x, int n, int c, int hw, int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    float k = ldf(x, channel_first(ch, hw)), s = 0.0f, ss = 0.0f;
    const X *base = x + ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) {
        float v = ldf(base, block_offset(e, hw, c));
        s += v;
        ss += (v - k) * (v - k);
    }
    s = tfb_block_sum(s);
    ss = tfb_block_sum(ss);
    if (threadIdx.x != 0) return;
    partial_sum[blockIdx.x] = s;
    partial_sq[blockIdx.x] = ss;
}

/* The column path's form: block (COL_X channels, COL_Y row lanes), its rows of every channel. */
template <typename X>
__global__ void k_col_sum_sq(float *partial_sum, float *partial_sq, const X *x, int rows, int c, int splits) {
    int r0, r1, ch = col_rows(rows, splits, &r0, &r1);
    float s = 0.0f, ss = 0.0f;
    if (ch < c) col_lane<1>(x, (const float *)NULL, ldf(x, channel_first(ch, 1)), r0, r1, c, ch, &s, &ss);
    s = col_block_sum(s);
    ss = col_block_sum(ss);
    if (threadIdx.y != 0 || ch >= c) return;
    partial_sum[(size_t)ch * splits + blockIdx.y] = s;
    partial_sq[(size_t)ch * splits + blockIdx.y] = ss;
}

/* mean = S / count, var = Q / count - (mean - k)^2 in double from the one-pass partials (never below 0). */
template <typename X>
__global__ void k_bn_shifted_moments(float *mean, float *var, const float *partial_sum, const float *partial_sq,
                                     const X *x, int c, int hw, double count, int splits) {
    TFB_GRID_LOOP(ch, (size_t)c) {
        double m = channel_total(partial_sum, (int)ch, splits, 1, 0) / count;
        double d = m - ldf(x, channel_first((int)ch, hw));
        double v = channel_total(partial_sq, (int)ch, splits, 1, 0) / count - d * d;
        mean[ch] = (float)m;
        var[ch] = (float)(v > 0.0 ? v : 0.0);
    }
}

/* Partial (sum g, sum g (x - mean)) of the block's rows, g = dy gated by the ReLU (bn_bwd), in the plane kernels'
 * layout. */
template <typename D, typename X>
__global__ void k_col_bwd_partial(float *partial, const D *dy, const X *x, bn_bwd bn, int rows, int c,
                                  int splits) {
    int r0, r1, ch = col_rows(rows, splits, &r0, &r1);
    float s = 0.0f, sx = 0.0f;
    if (ch < c) {
        float scale, shift;
        bn_affine_of(bn, ch, &scale, &shift);
        col_lane<2>(dy, x, bn.mean[ch], r0, r1, c, ch, &s, &sx, scale, shift, bn.relu);
    }
    s = col_block_sum(s);
    sx = col_block_sum(sx);
    if (threadIdx.y != 0 || ch >= c) return;
    partial[2 * ((size_t)ch * splits + blockIdx.y)] = s;
    partial[2 * ((size_t)ch * splits + blockIdx.y) + 1] = sx;
}

/* 32-bit element indices (and their strides) stay below 2^32 for tensors under 2^31 elements. */
static int index32(size_t elements) { return elements < ((size_t)1 << 31); }

/* A 16-bit x in one pass (shifted sums): its values carry 8 to 11 significant bits, far above the sums' rounding,
 * and the pass saves a read of the tensor. */
template <typename X>
static tfb_status bn_moments_one_pass(void *ctx, float *mean, float *var, const X *x, int n, int c, int hw) {
    cuda_ctx *cc = (cuda_ctx *)ctx;
    float *p;
    int splits = hw == 1 ? col_split_of(cc, c, n) : split_of(cc, c, n), blocks = c * splits;
    TFB_CHECK(partials_reserve(cc, c, splits, 2, &p));
    if (hw == 1) k_col_sum_sq<<<col_grid(c, splits), dim3(COL_X, COL_Y), 0, S(ctx)>>>(p, p + blocks, x, n, c, splits);
    else k_bn_sum_sq<<<blocks, CH_THREADS, 0, S(ctx)>>>(p, p + blocks, x, n, c, hw, splits);
    TFB_CHECK_LAUNCH();
    k_bn_shifted_moments<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(mean, var, p, p + blocks, x, c,
                                                                                      hw, (double)n * hw, splits);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

template <typename X>
static tfb_status bn_moments_typed(void *ctx, float *mean, float *var, const X *x, int n, int c, int hw) {
    cuda_ctx *cc = (cuda_ctx *)ctx;
    float *p;
    if (c < 1 || n < 1) return TFB_OK;
    if (!index32((size_t)n * hw)) return TFB_ERR_ARG; /* one channel of 2^31 values: no network here has one */
    if (sizeof(X) == 2) return bn_moments_one_pass(ctx, mean, var, x, n, c, hw);
    int splits = hw == 1 ? col_split_of(cc, c, n) : split_of(cc, c, n), blocks = c * splits;
    TFB_CHECK(partials_reserve(cc, c, splits, 2, &p));
    if (hw == 1) {
        k_col_sum<<<col_grid(c, splits), dim3(COL_X, COL_Y), 0, S(ctx)>>>(p, x, n, c, splits);
        TFB_CHECK_LAUNCH();
        k_bn_mean<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(mean, p, c, (double)n, splits);
        TFB_CHECK_LAUNCH();
        k_col_sqdev<<<col_grid(c, splits), dim3(COL_X, COL_Y), 0, S(ctx)>>>(p + blocks, mean, x, n, c, splits);
    } else {
        k_bn_sum<<<blocks, CH_THREADS, 0, S(ctx)>>>(p, x, n, c, hw, splits);
        TFB_CHECK_LAUNCH();
        k_bn_sqdev<<<blocks, CH_THREADS, 0, S(ctx)>>>(mean, p + blocks, p, x, n, c, hw, splits);
    }
    TFB_CHECK_LAUNCH();
    k_bn_var<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(var, p + blocks, c, (double)n * hw, splits);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_bn_moments(void *ctx, float *mean, float *var, const void *x, tfb_dtype x_type, int n, int c,
                                  int hw) {
    TYPE_CASE(x_type, X, return bn_moments_typed(ctx, mean, var, (const X *)x, n, c, hw));
}

/* ---- element-wise batch norm, indexed in I (unsigned when the tensor has under 2^31 elements) ---- */

/* ---- element-wise batch norm: a small kernel computes each channel's coefficients once (no square root or
 * double division per element), then NHWC tensors (hw == 1) take a (channel, row) grid whose threads keep their
 * channel's coefficients in registers and walk rows (no division for the channel), and NCHW ones a grid-stride
 * loop indexed in I (unsigned when the tensor has under 2^31 elements) ---- */

/* coef (2, c): bn_apply's scale and shift per channel */
__global__ void k_bn_apply_coeffs(float *coef, const float *mean, const float *var, const float *gamma,
                                  const float *beta, int c, float eps) {
    TFB_GRID_LOOP(ch, (size_t)c) tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &coef[ch], &coef[c + ch]);
}

__device__ __forceinline__ float bn_out(float x, float scale, float shift, int relu) {
    float v = tfb_bn_value(x, scale, shift);
    return relu ? tfb_act_value(TFB_ACT_RELU, v) : v;
}

template <typename Y, typename X, typename I>
__global__ void k_bn_apply(Y *y, const X *x, const float *coef, I total, I c, I hw, int relu) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        int ch = (int)(e / hw % c);
        stf(y, e, bn_out(ldf(x, e), coef[ch], coef[c + ch], relu));
    }
}

/* (rows, c): block (COL_X channels, COL_Y row lanes), grid (channel blocks, row splits) */
template <typename Y, typename X>
__global__ void k_bn_apply_rows(Y *y, const X *x, const float *coef, int rows, int c, int relu) {
    int ch = blockIdx.x * COL_X + threadIdx.x;
    if (ch >= c) return;
    float scale = coef[ch], shift = coef[c + ch];
    for (int r = blockIdx.y * COL_Y + threadIdx.y; r < rows; r += gridDim.y * COL_Y) {
        size_t i = (size_t)r * c + ch;
        stf(y, i, bn_out(ldf(x, i), scale, shift, relu));
    }
}

/* Row splits for the element-wise (rows, c) kernels: COL_BLOCKS_PER_SM blocks per SM over all channel blocks. */
static dim3 rows_grid(const cuda_ctx *cc, int rows, int c) {
    return col_grid(c, col_split_of(cc, c, rows));
}

template <typename Y, typename X>
static tfb_status bn_apply_typed(void *ctx, Y *y, const X *x, const float *coef, int n, int c, int hw, int relu) {
    size_t total = (size_t)n * c * hw;
    if (hw == 1)
        k_bn_apply_rows<Y, X><<<rows_grid((cuda_ctx *)ctx, n, c), dim3(COL_X, COL_Y), 0, S(ctx)>>>(y, x, coef, n, c,
                                                                                                  relu);
    else if (index32(total))
        k_bn_apply<Y, X, unsigned><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            y, x, coef, (unsigned)total, (unsigned)c, (unsigned)hw, relu);
    else
        k_bn_apply<Y, X, size_t><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, coef, total, (size_t)c,
                                                                                           (size_t)hw, relu);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_bn_apply(void *ctx, void *y, tfb_dtype y_type, const void *x, tfb_dtype x_type,
                                const float *mean, const float *var, const float *gamma, const float *beta, int n,
                                int c, int hw, float eps, int relu) {
    float *coef;
    if ((size_t)n * c * hw == 0) return TFB_OK;
    if (n > INT_MAX / (hw > 0 ? hw : 1)) return TFB_ERR_ARG;
    TFB_CHECK(partials_reserve((cuda_ctx *)ctx, c, 1, 2, &coef));
    k_bn_apply_coeffs<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(coef, mean, var, gamma, beta, c,
                                                                                   eps);
    TFB_CHECK_LAUNCH();
    TYPE_CASE(y_type, Y, TYPE_CASE(x_type, X, return bn_apply_typed(ctx, (Y *)y, (const X *)x, coef, n, c, hw,
                                                                     relu)));
    return TFB_OK;
}

/* Partial (sum g, sum g (x - mean)) of each block's planes, g = dy gated by the ReLU. */
template <typename D, typename X>
__global__ void k_bn_bwd_partial(float *partial, const D *dy, const X *x, bn_bwd bn, int n, int c, int hw,
                                 int splits) {
    int i0, i1, ch = block_planes(n, splits, &i0, &i1);
    size_t first = ((size_t)i0 * c + ch) * hw;
    unsigned count = (unsigned)(i1 - i0) * (unsigned)hw;
    float m = bn.mean[ch], s = 0.0f, sx = 0.0f, scale, shift;
    bn_affine_of(bn, ch, &scale, &shift);
    for (unsigned e = threadIdx.x; e < count; e += blockDim.x) {
        size_t i = first + block_offset(e, hw, c);
        float xi = ldf(x, i), g = col_gate(ldf(dy, i), xi, scale, shift, bn.relu);
        s += g;
        sx += g * (xi - m);
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

template <typename D, typename X>
static tfb_status bn_bwd_partials(void *ctx, float *p, const D *dy, const X *x, const bn_bwd &bn, int n, int c,
                                  int hw, int splits) {
    if (hw == 1) k_col_bwd_partial<<<col_grid(c, splits), dim3(COL_X, COL_Y), 0, S(ctx)>>>(p, dy, x, bn, n, c, splits);
    else k_bn_bwd_partial<<<c * splits, CH_THREADS, 0, S(ctx)>>>(p, dy, x, bn, n, c, hw, splits);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_bn_bwd_reduce(void *ctx, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                     const void *dy, tfb_dtype dy_type, const void *x, tfb_dtype x_type,
                                     const float *mean, const float *var, const float *gamma, const float *beta,
                                     int n, int c, int hw, float eps, int relu) {
    cuda_ctx *cc = (cuda_ctx *)ctx;
    float *p;
    if (c < 1 || n < 1) return TFB_OK;
    if (!index32((size_t)n * hw)) return TFB_ERR_ARG; /* one channel of 2^31 values: no network here has one */
    int splits = hw == 1 ? col_split_of(cc, c, n) : split_of(cc, c, n);
    bn_bwd bn = {mean, var, gamma, beta, eps, relu};
    TFB_CHECK(partials_reserve(cc, c, splits, 2, &p));
    TYPE_CASE(dy_type, D, TYPE_CASE(x_type, X, TFB_CHECK(bn_bwd_partials(ctx, p, (const D *)dy, (const X *)x, bn, n,
                                                                          c, hw, splits))));
    k_bn_bwd_finish<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(sum_dy, sum_dy_xhat, dgamma, dbeta, p,
                                                                                var, c, splits, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* coef (7, c) per channel: gamma rstd, mean g, mean g xhat, rstd, mean, and bn_apply's scale and shift (the gate);
 * the means of the sums in double, as the CPU computes them */
enum { BC_G, BC_MDY, BC_MDX, BC_RSTD, BC_MEAN, BC_SCALE, BC_SHIFT, BC_N };
__global__ void k_bn_bwd_coeffs(float *coef, bn_bwd bn, const float *sum_dy, const float *sum_dy_xhat, double count,
                                int c) {
    TFB_GRID_LOOP(ch, (size_t)c) {
        float rstd = rsqrtf(bn.var[ch] + bn.eps);
        coef[BC_G * c + ch] = bn.gamma[ch] * rstd;
        coef[BC_MDY * c + ch] = (float)(sum_dy[ch] / count);
        coef[BC_MDX * c + ch] = (float)(sum_dy_xhat[ch] / count);
        coef[BC_RSTD * c + ch] = rstd;
        coef[BC_MEAN * c + ch] = bn.mean[ch];
        bn_affine_of(bn, (int)ch, &coef[BC_SCALE * c + ch], &coef[BC_SHIFT * c + ch]);
    }
}

/* One channel's coefficients, read once. */
struct bn_dx {
    float g, mdy, mdx, rstd, mean, scale, shift;
    __device__ __forceinline__ bn_dx(const float *coef, int c, int ch)
        : g(coef[BC_G * c + ch]), mdy(coef[BC_MDY * c + ch]), mdx(coef[BC_MDX * c + ch]),
          rstd(coef[BC_RSTD * c + ch]), mean(coef[BC_MEAN * c + ch]), scale(coef[BC_SCALE * c + ch]),
          shift(coef[BC_SHIFT * c + ch]) {}
    __device__ __forceinline__ float of(float dy, float x, int relu) const {
        float xhat = (x - mean) * rstd;
        return g * (col_gate(dy, x, scale, shift, relu) - mdy - xhat * mdx);
    }
};

/* dx of type T (FP32, or 16-bit rounded to nearest even as it is written) from dy of type D and x of type X */
template <typename T, typename D, typename X, typename I>
__global__ void k_bn_bwd_apply(T *dx, const D *dy, const X *x, const float *coef, I total, I c, I hw, int relu) {
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        int ch = (int)(e / hw % c);
        stf(dx, e, bn_dx(coef, (int)c, ch).of(ldf(dy, e), ldf(x, e), relu));
    }
}

template <typename T, typename D, typename X>
__global__ void k_bn_bwd_apply_rows(T *dx, const D *dy, const X *x, const float *coef, int rows, int c,
                                    int relu) {
    int ch = blockIdx.x * COL_X + threadIdx.x;
    if (ch >= c) return;
    bn_dx k(coef, c, ch);
    for (int r = blockIdx.y * COL_Y + threadIdx.y; r < rows; r += gridDim.y * COL_Y) {
        size_t i = (size_t)r * c + ch;
        stf(dx, i, k.of(ldf(dy, i), ldf(x, i), relu));
    }
}

template <typename T, typename D, typename X>
static tfb_status bn_bwd_apply_typed(void *ctx, T *dx, const D *dy, const X *x, const float *coef, int n, int c,
                                     int hw, int relu) {
    size_t total = (size_t)n * c * hw;
    if (hw == 1)
        k_bn_bwd_apply_rows<T, D, X><<<rows_grid((cuda_ctx *)ctx, n, c), dim3(COL_X, COL_Y), 0, S(ctx)>>>(
            dx, dy, x, coef, n, c, relu);
    else if (index32(total))
        k_bn_bwd_apply<T, D, X, unsigned><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            dx, dy, x, coef, (unsigned)total, (unsigned)c, (unsigned)hw, relu);
    else
        k_bn_bwd_apply<T, D, X, size_t><<<tfb_cuda_blocks(total), TFB_CUDA_THREADS, 0, S(ctx)>>>(
            dx, dy, x, coef, total, (size_t)c, (size_t)hw, relu);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_bn_bwd_apply(void *ctx, void *dx, tfb_dtype dx_type, const void *dy, tfb_dtype dy_type,
                                    const void *x, tfb_dtype x_type, const float *mean, const float *var,
                                    const float *gamma, const float *beta, const float *sum_dy,
                                    const float *sum_dy_xhat, double count, int n, int c, int hw, float eps,
                                    int relu) {
    bn_bwd bn = {mean, var, gamma, beta, eps, relu};
    float *coef;
    if ((size_t)n * c * hw == 0) return TFB_OK;
    if (n > INT_MAX / (hw > 0 ? hw : 1)) return TFB_ERR_ARG;
    TFB_CHECK(partials_reserve((cuda_ctx *)ctx, c, 1, BC_N, &coef));
    k_bn_bwd_coeffs<<<tfb_cuda_blocks((size_t)c), TFB_CUDA_THREADS, 0, S(ctx)>>>(coef, bn, sum_dy, sum_dy_xhat, count,
                                                                                 c);
    TFB_CHECK_LAUNCH();
    TYPE_CASE(dx_type, T, TYPE_CASE(dy_type, D, TYPE_CASE(x_type, X, return bn_bwd_apply_typed(
        ctx, (T *)dx, (const D *)dy, (const X *)x, coef, n, c, hw, relu))));
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

/* The largest x in output (i, j)'s window, x's plane element a = ih * w + iw sitting at x[a * step]; *arg gets
 * its a (the first of equal values), -1 when the window lies wholly in the padding. */
template <typename T>
__device__ __forceinline__ float window_max(const T *x, size_t step, const tfb_pool_desc &s, int i, int j, int *arg) {
    float best = -INFINITY;
    int at = -1;
    for (int a = 0; a < s.r; a++)
        for (int b = 0; b < s.r; b++) {
            int ih = i * s.stride - s.pad + a, iw = j * s.stride - s.pad + b;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            float v = ldf(x, (size_t)(ih * s.w + iw) * step);
            if (v > best || at < 0) { best = v; at = ih * s.w + iw; }
        }
    *arg = at;
    return best;
}

/* One block per (image, channel) plane; its threads stride over the plane's p x q outputs. x and y of type T. */
template <typename T>
__global__ void k_maxpool_fwd(T *y, int *argmax, const T *x, tfb_pool_desc s) {
    int pq = s.p * s.q;
    const T *in = x + (size_t)blockIdx.x * s.h * s.w;
    size_t out = (size_t)blockIdx.x * pq;
    TFB_ROW_LOOP(o, pq) {
        int i = o / s.q, j = o - i * s.q;
        stf(y, out + o, window_max(in, 1, s, i, j, &argmax[out + o])); /* a value of x: exact in T */
    }
}

/* NHWC: one block per output row (image, i); its threads stride over the row's q x c outputs, channels fastest,
 * so a warp reads adjacent channels (one division per output). */
template <typename T>
__global__ void k_maxpool_fwd_nhwc(T *y, int *argmax, const T *x, tfb_pool_desc s) {
    int b = blockIdx.x / s.p, i = blockIdx.x - b * s.p, qc = s.q * s.c;
    const T *img = x + (size_t)b * s.h * s.w * s.c;
    size_t out = (size_t)blockIdx.x * qc;
    TFB_ROW_LOOP(e, qc) {
        int j = e / s.c, ch = e - j * s.c;
        stf(y, out + e, window_max(img + ch, (size_t)s.c, s, i, j, &argmax[out + e]));
    }
}

/* Images (h w c or p q c values) index within an int, as the kernels do, and the grids (n c planes, n h or n p
 * rows) fit a launch. */
static int pool_fits(const tfb_pool_desc *d) {
    return (long long)d->h * d->w * d->c < INT_MAX && (long long)d->p * d->q * d->c < INT_MAX &&
           (long long)d->n * d->c < INT_MAX && (long long)d->n * d->h < INT_MAX && (long long)d->n * d->p < INT_MAX;
}

static tfb_status cuda_maxpool_fwd(void *ctx, void *y, int *argmax, const void *x, tfb_dtype t,
                                   const tfb_pool_desc *d) {
    if ((size_t)d->n * d->c * d->p * d->q < 1) return TFB_OK;
    if (!pool_fits(d)) return TFB_ERR_ARG;
    if (d->layout == TFB_NCHW)
        TYPE_CASE(t, T, k_maxpool_fwd<T><<<(unsigned)(d->n * d->c), tfb_row_threads(d->p * d->q), 0, S(ctx)>>>(
                            (T *)y, argmax, (const T *)x, *d));
    else
        TYPE_CASE(t, T, k_maxpool_fwd_nhwc<T><<<(unsigned)(d->n * d->p), tfb_row_threads(d->q * d->c), 0, S(ctx)>>>(
                            (T *)y, argmax, (const T *)x, *d));
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* The outputs [*lo, *hi] of `out` along one axis whose windows hold input position x. */
__device__ __forceinline__ void pool_taps(int x, int r, int stride, int pad, int out, int *lo, int *hi) {
    int first = x + pad - r + 1, last = (x + pad) / stride;
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    *hi = last < out - 1 ? last : out - 1;
}

/* dx at plane index a: the dy of the outputs (i0..i1, j0..j1) whose argmax is a, in row-major output order; out0
 * the plane's first output, step the distance between adjacent outputs. */
template <typename D>
__device__ __forceinline__ float pool_gather(const D *dy, const int *argmax, size_t out0, size_t step, int q, int a,
                                             int i0, int i1, int j0, int j1) {
    float g = 0.0f;
    for (int i = i0; i <= i1; i++)
        for (int j = j0; j <= j1; j++) {
            size_t o = out0 + ((size_t)i * q + j) * step;
            if (argmax[o] == a) g += ldf(dy, o);
        }
    return g;
}

/* Gathers, one thread per dx element (no atomics, no memset): a block per (image, channel) plane... */
template <typename X, typename D>
__global__ void k_maxpool_bwd(X *dx, const D *dy, const int *argmax, tfb_pool_desc s) {
    size_t in0 = (size_t)blockIdx.x * s.h * s.w, out0 = (size_t)blockIdx.x * s.p * s.q;
    TFB_ROW_LOOP(e, s.h * s.w) {
        int ih = e / s.w, iw = e - ih * s.w, i0, i1, j0, j1;
        pool_taps(ih, s.r, s.stride, s.pad, s.p, &i0, &i1);
        pool_taps(iw, s.r, s.stride, s.pad, s.q, &j0, &j1);
        stf(dx, in0 + e, pool_gather(dy, argmax, out0, 1, s.q, e, i0, i1, j0, j1));
    }
}

/* ... or, NHWC, a block per image row (image, ih) of w x c values, channels fastest. */
template <typename X, typename D>
__global__ void k_maxpool_bwd_nhwc(X *dx, const D *dy, const int *argmax, tfb_pool_desc s) {
    int b = blockIdx.x / s.h, ih = blockIdx.x - b * s.h, wc = s.w * s.c, i0, i1;
    pool_taps(ih, s.r, s.stride, s.pad, s.p, &i0, &i1);
    size_t in0 = (size_t)blockIdx.x * wc, img_out = (size_t)b * s.p * s.q * s.c;
    TFB_ROW_LOOP(e, wc) {
        int iw = e / s.c, ch = e - iw * s.c, j0, j1;
        pool_taps(iw, s.r, s.stride, s.pad, s.q, &j0, &j1);
        stf(dx, in0 + e, pool_gather(dy, argmax, img_out + ch, (size_t)s.c, s.q, ih * s.w + iw, i0, i1, j0, j1));
    }
}

static tfb_status cuda_maxpool_bwd(void *ctx, void *dx, tfb_dtype dx_type, const void *dy, tfb_dtype dy_type,
                                   const int *argmax, const tfb_pool_desc *d) {
    if ((size_t)d->n * d->c * d->h * d->w < 1) return TFB_OK;
    if (!pool_fits(d)) return TFB_ERR_ARG;
    if (d->layout == TFB_NCHW)
        TYPE_CASE(dx_type, X, TYPE_CASE(dy_type, D, k_maxpool_bwd<X, D><<<(unsigned)(d->n * d->c),
                  tfb_row_threads(d->h * d->w), 0, S(ctx)>>>((X *)dx, (const D *)dy, argmax, *d)));
    else
        TYPE_CASE(dx_type, X, TYPE_CASE(dy_type, D, k_maxpool_bwd_nhwc<X, D><<<(unsigned)(d->n * d->h),
                  tfb_row_threads(d->w * d->c), 0, S(ctx)>>>((X *)dx, (const D *)dy, argmax, *d)));
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

/* NHWC: a thread per (image, channel), stepping over the image's pixels c apart (a warp reads adjacent channels). */
__global__ void k_avgpool_fwd_nhwc(float *y, const float *x, size_t total, int c, int hw) {
    TFB_GRID_LOOP(o, total) {
        size_t b = o / (size_t)c;
        const float *in = x + b * hw * c + (o - b * c);
        float s = 0.0f;
        for (int j = 0; j < hw; j++) s += in[(size_t)j * c];
        y[o] = s / hw;
    }
}

static tfb_status cuda_avgpool_fwd(void *ctx, float *y, const float *x, int n, int c, int hw, tfb_layout layout) {
    size_t planes = (size_t)n * c;
    if (planes < 1) return TFB_OK;
    if (layout == TFB_NCHW) k_avgpool_fwd<<<tfb_cuda_blocks(planes), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, planes, hw);
    else k_avgpool_fwd_nhwc<<<tfb_cuda_blocks(planes), TFB_CUDA_THREADS, 0, S(ctx)>>>(y, x, planes, c, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_avgpool_bwd(float *dx, const float *dy, int hw) {
    float *d = dx + (size_t)blockIdx.x * hw, g = dy[blockIdx.x] / (float)hw;
    TFB_ROW_LOOP(j, hw) d[j] = g;
}

/* NHWC: block per (image, pixel) row of c channels. */
__global__ void k_avgpool_bwd_nhwc(float *dx, const float *dy, int c, int hw) {
    unsigned b = blockIdx.x / (unsigned)hw;
    float *d = dx + (size_t)blockIdx.x * c;
    const float *g = dy + (size_t)b * c;
    TFB_ROW_LOOP(ch, c) d[ch] = g[ch] / (float)hw;
}

static tfb_status cuda_avgpool_bwd(void *ctx, float *dx, const float *dy, int n, int c, int hw, tfb_layout layout) {
    if ((long long)n * c < 1 || hw < 1) return TFB_OK;
    if (layout == TFB_NCHW) k_avgpool_bwd<<<(unsigned)(n * c), tfb_row_threads(hw), 0, S(ctx)>>>(dx, dy, hw);
    else k_avgpool_bwd_nhwc<<<(unsigned)(n * hw), tfb_row_threads(c), 0, S(ctx)>>>(dx, dy, c, hw);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- a residual block's sum + ReLU, and its backward: the gradients' sum masked by the ReLU's output ---- */

template <typename O, typename A, typename B>
__global__ void k_add_relu(O *out, const A *a, const B *b, size_t n, int relu) {
    TFB_GRID_LOOP(i, n) {
        float v = ldf(a, i) + ldf(b, i);
        stf(out, i, relu && !(v > 0.0f) ? 0.0f : v);
    }
}

static tfb_status cuda_add_relu(void *ctx, void *out, tfb_dtype out_type, const void *a, tfb_dtype a_type,
                                const void *b, tfb_dtype b_type, size_t n, int relu) {
    if (n < 1) return TFB_OK;
    TYPE_CASE(out_type, O, TYPE_CASE(a_type, A, TYPE_CASE(b_type, B,
        k_add_relu<O, A, B><<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>((O *)out, (const A *)a,
                                                                                 (const B *)b, n, relu))));
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* The backward's operands may each be absent or of any type: they are loaded by tfb_load_elem (a switch on the
 * type) rather than through 81 instantiations. */
template <typename O>
__global__ void k_add_relu_bwd(O *din, const void *a, int a_type, const void *b, int b_type, const void *y,
                               int y_type, size_t n) {
    TFB_GRID_LOOP(i, n) {
        float v = tfb_load_elem(a, a_type, i) + (b ? tfb_load_elem(b, b_type, i) : 0.0f);
        stf(din, i, !y || tfb_load_elem(y, y_type, i) > 0.0f ? v : 0.0f);
    }
}

static tfb_status cuda_add_relu_bwd(void *ctx, void *din, tfb_dtype din_type, const void *a, tfb_dtype a_type,
                                    const void *b, tfb_dtype b_type, const void *y, tfb_dtype y_type, size_t n) {
    if (n < 1) return TFB_OK;
    TYPE_CASE(din_type, O, k_add_relu_bwd<O><<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(
        (O *)din, a, (int)a_type, b, (int)b_type, y, (int)y_type, n));
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
    be->add_relu = cuda_add_relu;
    be->add_relu_bwd = cuda_add_relu_bwd;
}
