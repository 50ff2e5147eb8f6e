/* cuda_attn.cu — fused attention on tensor cores (backend.h, tfb_attn_desc), the "flash attention" scheme: no
 * kernel writes an (s, s) tensor. Forward: one block per (64-query tile, head, sample) makes two passes over the
 * key tiles, the first for each row's maximum and sum of exponentials (its log-sum-exp, saved), the second for the
 * dropped-out probabilities and the context. Backward, from the saved log-sum-exp: each row's sum of dctx * ctx;
 * dK and dV per 64-key tile, over 32-query tiles; dQ per 64-query tile, over 32-key tiles. The two backward
 * kernels each recompute the scores and dP_d (seven tile products instead of five) so that every gradient
 * element is written by one block in a fixed order: no atomics, and runs repeat bit for bit.
 *
 * Tile products are wmma 16x16x16 fragments with FP32 accumulation, FP16 on every architecture built and BF16 from
 * sm_80; operands are staged in shared memory (static, under 48 KiB a block). A warp owns 16 rows of a tile's
 * product; the softmax's row arithmetic reads the scores from shared memory, whose row layout is known (a
 * fragment's is not). Shapes: head width 64, sequence length a multiple of 64 (attn_fused_supports); for others
 * --attention fused is refused and the unfused ops (the default) serve. Not here: the permute that makes Q, K
 * and V head-major (cuda_ops.cu).
 */
#include <math.h>
#include <type_traits>
#include <mma.h>
#include "cuda_internal.h"

using namespace nvcuda;

#define FA_D 64        /* head width */
#define FA_T 64        /* rows of the outer tile: queries (forward, dQ) or keys (dK, dV) */
#define FA_U 32        /* rows of the backward kernels' inner tiles */
#define FA_THREADS 128 /* four warps */

/* BF16 fragments need sm_80; the kernels compile to nothing below it (attn_fused_supports refuses those GPUs). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_HAS(T) (!std::is_same<T, __nv_bfloat16>::value)
#else
#define FA_HAS(T) true
#endif

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> fa_acc;

template <typename T> __device__ __forceinline__ T fa_cast(float x);
template <> __device__ __forceinline__ __half fa_cast<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 fa_cast<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float fa_wide(__half x) { return __half2float(x); }
__device__ __forceinline__ float fa_wide(__nv_bfloat16 x) { return __bfloat162float(x); }

/* Block t (0: Q, 1: K, 2: V) of (sample b, head h) in qkv: (s, 64) row-major. */
template <typename T> __device__ __forceinline__ const T *fa_block(const tfb_attn_desc &d, int t, int b, int h) {
    size_t sd = (size_t)d.seq * FA_D;
    return (const T *)d.qkv + ((size_t)t * d.batch * d.heads + (size_t)b * d.heads + h) * sd;
}

/* Row i of (sample b, head h) in a token-major tensor p, ld elements a row. */
template <typename T> __device__ __forceinline__ T *fa_token_row(const void *p, size_t ld, const tfb_attn_desc &d,
                                                                int b, int h, int i) {
    return (T *)p + ((size_t)b * d.seq + i) * ld + (size_t)h * FA_D;
}

/* rows x 64 elements from src (rows ld elements apart) into shared dst (64 apart), by the whole block; 16-byte
 * copies where src allows them. */
template <typename T> __device__ void fa_load(T *dst, const T *src, size_t ld, int rows) {
    if ((uintptr_t)src % 16 == 0 && ld % 8 == 0) {
        for (int e = threadIdx.x; e < rows * 8; e += blockDim.x) {
            int r = e >> 3, c = (e & 7) * 8;
            *(uint4 *)(dst + r * FA_D + c) = *(const uint4 *)(src + (size_t)r * ld + c);
        }
    } else {
        for (int e = threadIdx.x; e < rows * FA_D; e += blockDim.x) dst[e] = src[(size_t)(e / FA_D) * ld + e % FA_D];
    }
}

/* Where a k-step of 16 starts in an A (16 x k) or B (k x 16) operand of layout L, ld elements apart. */
template <typename L> __device__ __forceinline__ int fa_a_step(int k, int ld) {
    return std::is_same<L, wmma::row_major>::value ? k : k * ld;
}
template <typename L> __device__ __forceinline__ int fa_b_step(int k, int ld) {
    return std::is_same<L, wmma::row_major>::value ? k * ld : k;
}

/* acc += A (16 x kd) B (kd x 16), both in shared memory; row_major: element (r, c) at r ld + c, col_major: c ld + r. */
template <typename T, typename LA, typename LB>
__device__ __forceinline__ void fa_mma(fa_acc &acc, const T *a, int lda, const T *b, int ldb, int kd) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
    for (int k = 0; k < kd; k += 16) {
        wmma::load_matrix_sync(fa, a + fa_a_step<LA>(k, lda), lda);
        wmma::load_matrix_sync(fb, b + fa_b_step<LB>(k, ldb), ldb);
        wmma::mma_sync(acc, fa, fb, acc);
    }
}

/* out (16 x 16, FP32, ldo apart) = A (16 x 64, rows 64 apart) B^T, B (16 x 64) row-major: a tile of Q K^T or
 * dO V^T. */
template <typename T> __device__ __forceinline__ void fa_abt(float *out, int ldo, const T *a, const T *b) {
    fa_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    fa_mma<T, wmma::row_major, wmma::col_major>(acc, a, FA_D, b, FA_D, FA_D);
    wmma::store_matrix_sync(out, acc, ldo, wmma::mem_row_major);
}

/* The dropout counter of probability (b, h, i, j) (backend.h). */
__device__ __forceinline__ uint64_t fa_counter(const tfb_attn_desc &d, int b, int h, int i, int j) {
    return d.key.offset + (((uint64_t)b * d.heads_total + h) * d.seq + (uint64_t)i) * d.seq + (uint64_t)j;
}

/* The run of four factors at key j (a multiple of 4) of row i. */
__device__ __forceinline__ void fa_factors(const tfb_attn_desc &d, int b, int h, int i, int j, float f[4]) {
    f[0] = f[1] = f[2] = f[3] = 1.0f;
    if (d.p > 0.0f) tfb_dropout_run(d.key, d.p, fa_counter(d, b, h, i, j), f);
}

/* Keys that count for sample b, and the key tiles of `tile` rows that hold them. */
__device__ __forceinline__ int fa_keys(const tfb_attn_desc &d, int b) {
    return d.key_len ? min(max(d.key_len[b], 1), d.seq) : d.seq;
}
__device__ __forceinline__ int fa_key_end(int keys, int tile) { return (keys + tile - 1) / tile * tile; }

/* ---- forward ---- */

/* ss rows 16 warp .. 16 warp + 15 (FA_T apart) = this warp's 16 query rows of qs times the 64 keys of kv, transposed */
template <typename T> __device__ __forceinline__ void fa_warp_scores(float *ss, const T *qs, const T *kv, int warp) {
    for (int n = 0; n < 4; n++) fa_abt(ss + warp * 16 * FA_T + n * 16, FA_T, qs + warp * 16 * FA_D, kv + n * 16 * FA_D);
}

/* Pass 1 over one key tile: this lane's half of its row's 64 scores in ss folded into the running maximum m and
 * sum l (each lane pair holds its row's). */
__device__ __forceinline__ void fa_row_stats(const float *srow, float scale, int valid, float &m, float &l) {
    float tm = -INFINITY, part = 0.0f;
    for (int c = 0; c < 32; c++) tm = fmaxf(tm, c < valid ? scale * srow[c] : -INFINITY);
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
    float mn = fmaxf(m, tm);
    for (int c = 0; c < 32 && mn > -INFINITY; c++) part += c < valid ? expf(scale * srow[c] - mn) : 0.0f;
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    if (mn == -INFINITY) return;
    l = (m > -INFINITY ? l * expf(m - mn) : 0.0f) + part;
    m = mn;
}

template <typename T> __global__ void __launch_bounds__(FA_THREADS) k_fa_fwd(tfb_attn_desc d) {
    if constexpr (FA_HAS(T)) {
        __shared__ __align__(32) T qs[FA_T * FA_D], kv[FA_T * FA_D], ps[FA_T * FA_T];
        __shared__ __align__(32) float ss[FA_T * FA_T];
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1;
        int q0 = blockIdx.x * FA_T, h = blockIdx.y, b = blockIdx.z, row = warp * 16 + (lane >> 1);
        int keys = fa_keys(d, b), kend = fa_key_end(keys, FA_T);
        const T *K = fa_block<T>(d, 1, b, h), *V = fa_block<T>(d, 2, b, h);
        fa_load(qs, fa_block<T>(d, 0, b, h) + (size_t)q0 * FA_D, FA_D, FA_T);
        float m = -INFINITY, l = 0.0f;
        for (int k0 = 0; k0 < kend; k0 += FA_T) { /* pass 1: each row's maximum and sum of exponentials */
            __syncthreads(); /* kv free again */
            fa_load(kv, K + (size_t)k0 * FA_D, FA_D, FA_T);
            __syncthreads();
            fa_warp_scores(ss, qs, kv, warp);
            __syncwarp();
            fa_row_stats(ss + row * FA_T + half * 32, d.scale, keys - k0 - half * 32, m, l);
        }
        float lse = m + logf(l);
        if (half == 0) d.lse[((size_t)b * d.heads + h) * d.seq + q0 + row] = lse;
        fa_acc o[4];
        for (int n = 0; n < 4; n++) wmma::fill_fragment(o[n], 0.0f);
        for (int k0 = 0; k0 < kend; k0 += FA_T) { /* pass 2: the dropped-out probabilities times V */
            __syncthreads();
            fa_load(kv, K + (size_t)k0 * FA_D, FA_D, FA_T);
            __syncthreads();
            fa_warp_scores(ss, qs, kv, warp);
            __syncwarp();
            for (int c = half * 32; c < half * 32 + 32; c += 4) {
                float f[4];
                fa_factors(d, b, h, q0 + row, k0 + c, f);
                for (int q = 0; q < 4; q++) {
                    int j = c + q;
                    float p = k0 + j < keys ? expf(d.scale * ss[row * FA_T + j] - lse) : 0.0f;
                    ps[row * FA_T + j] = fa_cast<T>(f[q] > 0.0f ? p * f[q] : 0.0f);
                }
            }
            __syncthreads(); /* every warp is done with K */
            fa_load(kv, V + (size_t)k0 * FA_D, FA_D, FA_T);
            __syncthreads();
            for (int n = 0; n < 4; n++)
                fa_mma<T, wmma::row_major, wmma::row_major>(o[n], ps + warp * 16 * FA_T, FA_T, kv + n * 16, FA_D, FA_T);
        }
        for (int n = 0; n < 4; n++)
            wmma::store_matrix_sync(ss + warp * 16 * FA_T + n * 16, o[n], FA_T, wmma::mem_row_major);
        __syncwarp();
        T *out = fa_token_row<T>(d.ctx, (size_t)d.ldc, d, b, h, q0 + row);
        for (int c = half * 32; c < half * 32 + 32; c++) out[c] = fa_cast<T>(ss[row * FA_T + c]);
    }
}

/* ---- backward ---- */

typedef struct {
    tfb_attn_desc d;
    tfb_attn_grads g;
} fa_bwd_args;

/* rowdot (b, h, i) = sum over the head's 64 columns of dctx * ctx, one warp a row. */
template <typename T> __global__ void k_fa_rowdot(fa_bwd_args a) {
    const tfb_attn_desc &d = a.d;
    size_t r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= (size_t)d.batch * d.heads * d.seq) return;
    int i = (int)(r % d.seq), h = (int)(r / d.seq % d.heads), b = (int)(r / d.seq / d.heads);
    const T *o = fa_token_row<T>(d.ctx, (size_t)d.ldc, d, b, h, i);
    const T *g = fa_token_row<T>(a.g.dctx, (size_t)d.ldc, d, b, h, i);
    float s = fa_wide(o[lane]) * fa_wide(g[lane]) + fa_wide(o[lane + 32]) * fa_wide(g[lane + 32]);
    s = tfb_warp_sum(s);
    if (lane == 0) a.g.rowdot[r] = s;
}

/* dS and P_d at query i, key j from the score x, dP_d y, the row's lse and rowdot: P_d = f P, dS = P (f y - rowdot). */
__device__ __forceinline__ void fa_grad(float x, float y, float f, float lse, float rowdot, float scale, int valid,
                                        float &pd, float &ds) {
    float p = valid ? expf(scale * x - lse) : 0.0f;
    pd = f > 0.0f ? p * f : 0.0f;
    ds = p * (f * y - rowdot);
}

/* (64 x 64) FP32 block rows of this warp (16) from fragments acc[4], times scale, into rows of a token-major
 * tensor (the block's row r is row r0 + r of (b, h)); stage: the block's 64 x 64 FP32 staging area. */
template <typename T> __device__ void fa_store_rows(float *stage, fa_acc acc[4], float scale, void *dst, int ld,
                                                   const tfb_attn_desc &d, int b, int h, int r0) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1, row = warp * 16 + (lane >> 1);
    __syncwarp();
    for (int n = 0; n < 4; n++)
        wmma::store_matrix_sync(stage + warp * 16 * FA_D + n * 16, acc[n], FA_D, wmma::mem_row_major);
    __syncwarp();
    T *out = fa_token_row<T>(dst, (size_t)ld, d, b, h, r0 + row);
    for (int c = half * 32; c < half * 32 + 32; c++) out[c] = fa_cast<T>(scale * stage[row * FA_D + c]);
}

/* dK and dV of one 64-key tile: a warp owns 16 keys' rows of both; over 32-query tiles. */
template <typename T> __global__ void __launch_bounds__(FA_THREADS) k_fa_dkdv(fa_bwd_args a) {
    if constexpr (FA_HAS(T)) {
        const tfb_attn_desc &d = a.d;
        __shared__ __align__(32) T ks[FA_T * FA_D], vs[FA_T * FA_D], qs[FA_U * FA_D], dos[FA_U * FA_D];
        __shared__ __align__(32) T ps[FA_U * FA_T];
        __shared__ __align__(32) float f32[2 * FA_U * FA_T]; /* scores, then dS; dP_d; 64 x 64 staging at the end */
        __shared__ float lse[FA_U], rowdot[FA_U];
        float *ss = f32, *dps = f32 + FA_U * FA_T;
        int warp = threadIdx.x >> 5, k0 = blockIdx.x * FA_T, h = blockIdx.y, b = blockIdx.z;
        int keys = fa_keys(d, b);
        fa_acc dk[4], dv[4];
        for (int n = 0; n < 4; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
        fa_load(ks, fa_block<T>(d, 1, b, h) + (size_t)k0 * FA_D, FA_D, FA_T);
        fa_load(vs, fa_block<T>(d, 2, b, h) + (size_t)k0 * FA_D, FA_D, FA_T);
        for (int q0 = 0; q0 < d.seq && k0 < keys; q0 += FA_U) {
            __syncthreads(); /* the previous tile's readers are done */
            fa_load(qs, fa_block<T>(d, 0, b, h) + (size_t)q0 * FA_D, FA_D, FA_U);
            fa_load(dos, fa_token_row<T>(a.g.dctx, (size_t)d.ldc, d, b, h, q0), (size_t)d.ldc, FA_U);
            if (threadIdx.x < FA_U) {
                size_t r = ((size_t)b * d.heads + h) * d.seq + q0 + threadIdx.x;
                lse[threadIdx.x] = d.lse[r];
                rowdot[threadIdx.x] = a.g.rowdot[r];
            }
            __syncthreads();
            for (int t = 0; t < 2; t++) { /* warp w: key columns 16 w .. 16 w + 15 of both 16-query rows */
                fa_abt(ss + t * 16 * FA_T + warp * 16, FA_T, qs + t * 16 * FA_D, ks + warp * 16 * FA_D);
                fa_abt(dps + t * 16 * FA_T + warp * 16, FA_T, dos + t * 16 * FA_D, vs + warp * 16 * FA_D);
            }
            __syncthreads();
            int r = threadIdx.x >> 2, c0 = (threadIdx.x & 3) * 16; /* this thread: 16 keys of query row r */
            for (int c = c0; c < c0 + 16; c += 4) {
                float f[4];
                fa_factors(d, b, h, q0 + r, k0 + c, f);
                for (int q = 0; q < 4; q++) {
                    int e = r * FA_T + c + q;
                    float pd, ds;
                    fa_grad(ss[e], dps[e], f[q], lse[r], rowdot[r], d.scale, k0 + c + q < keys, pd, ds);
                    ps[e] = fa_cast<T>(pd);
                    ss[e] = ds;
                }
            }
            __syncthreads();
            for (int n = 0; n < 4; n++) /* dV += P_d^T dO: P_d^T's rows are ps's columns */
                fa_mma<T, wmma::col_major, wmma::row_major>(dv[n], ps + warp * 16, FA_T, dos + n * 16, FA_D, FA_U);
            __syncthreads(); /* ps is read; it takes dS next */
            for (int e = threadIdx.x; e < FA_U * FA_T; e += blockDim.x) ps[e] = fa_cast<T>(ss[e]);
            __syncthreads();
            for (int n = 0; n < 4; n++) /* dK += dS^T Q */
                fa_mma<T, wmma::col_major, wmma::row_major>(dk[n], ps + warp * 16, FA_T, qs + n * 16, FA_D, FA_U);
        }
        __syncthreads(); /* f32 becomes the staging area */
        fa_store_rows<T>(f32, dv, 1.0f, a.g.dv, a.g.ldd, d, b, h, k0);
        fa_store_rows<T>(f32, dk, d.scale, a.g.dk, a.g.ldd, d, b, h, k0);
    }
}

/* dQ of one 64-query tile: a warp owns 16 query rows; over 32-key tiles. */
template <typename T> __global__ void __launch_bounds__(FA_THREADS) k_fa_dq(fa_bwd_args a) {
    if constexpr (FA_HAS(T)) {
        const tfb_attn_desc &d = a.d;
        __shared__ __align__(32) T qs[FA_T * FA_D], dos[FA_T * FA_D], ks[FA_U * FA_D], vs[FA_U * FA_D];
        __shared__ __align__(32) T ds16[FA_T * FA_U];
        __shared__ __align__(32) float f32[2 * FA_T * FA_U]; /* scores; dP_d; 64 x 64 staging at the end */
        float *ss = f32, *dps = f32 + FA_T * FA_U;
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, half = lane & 1, row = warp * 16 + (lane >> 1);
        int q0 = blockIdx.x * FA_T, h = blockIdx.y, b = blockIdx.z, keys = fa_keys(d, b);
        fa_load(qs, fa_block<T>(d, 0, b, h) + (size_t)q0 * FA_D, FA_D, FA_T);
        fa_load(dos, fa_token_row<T>(a.g.dctx, (size_t)d.ldc, d, b, h, q0), (size_t)d.ldc, FA_T);
        size_t r = ((size_t)b * d.heads + h) * d.seq + q0 + row;
        float lse = d.lse[r], rowdot = a.g.rowdot[r];
        fa_acc dq[4];
        for (int n = 0; n < 4; n++) wmma::fill_fragment(dq[n], 0.0f);
        for (int k0 = 0; k0 < fa_key_end(keys, FA_U); k0 += FA_U) {
            __syncthreads();
            fa_load(ks, fa_block<T>(d, 1, b, h) + (size_t)k0 * FA_D, FA_D, FA_U);
            fa_load(vs, fa_block<T>(d, 2, b, h) + (size_t)k0 * FA_D, FA_D, FA_U);
            __syncthreads();
            for (int t = 0; t < 2; t++) { /* this warp's 16 query rows, keys 16 t .. 16 t + 15 */
                fa_abt(ss + warp * 16 * FA_U + t * 16, FA_U, qs + warp * 16 * FA_D, ks + t * 16 * FA_D);
                fa_abt(dps + warp * 16 * FA_U + t * 16, FA_U, dos + warp * 16 * FA_D, vs + t * 16 * FA_D);
            }
            __syncwarp();
            for (int c = half * 16; c < half * 16 + 16; c += 4) {
                float f[4];
                fa_factors(d, b, h, q0 + row, k0 + c, f);
                for (int q = 0; q < 4; q++) {
                    int e = row * FA_U + c + q;
                    float pd, ds;
                    fa_grad(ss[e], dps[e], f[q], lse, rowdot, d.scale, k0 + c + q < keys, pd, ds);
                    ds16[e] = fa_cast<T>(ds);
                }
            }
            __syncwarp();
            for (int n = 0; n < 4; n++) /* dQ += dS K */
                fa_mma<T, wmma::row_major, wmma::row_major>(dq[n], ds16 + warp * 16 * FA_U, FA_U, ks + n * 16, FA_D,
                                                            FA_U);
        }
        __syncthreads(); /* f32 becomes the staging area */
        fa_store_rows<T>(f32, dq, d.scale, a.g.dq, a.g.ldd, d, b, h, q0);
    }
}

/* ---- host ---- */

static int cuda_attn_supports(void *ctx, const tfb_attn_desc *d) {
    const cuda_ctx *c = (const cuda_ctx *)ctx;
    int typed = d->type == TFB_F16 || (d->type == TFB_BF16 && c->cc >= 80);
    return typed && d->head_dim == FA_D && d->seq >= FA_T && d->seq % FA_T == 0;
}

/* A well-formed d this backend supports, within a launch grid's y and z limits. */
static int fa_valid(void *ctx, const tfb_attn_desc *d) {
    return tfb_attn_desc_valid(d) && cuda_attn_supports(ctx, d) && d->batch <= 65535 && d->heads <= 65535;
}

static tfb_status cuda_attn_fwd(void *ctx, const tfb_attn_desc *d) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!fa_valid(ctx, d)) return TFB_ERR_ARG;
    dim3 grid(d->seq / FA_T, d->heads, d->batch);
    if (d->type == TFB_F16) k_fa_fwd<__half><<<grid, FA_THREADS, 0, c->stream>>>(*d);
    else k_fa_fwd<__nv_bfloat16><<<grid, FA_THREADS, 0, c->stream>>>(*d);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

template <typename T> static tfb_status fa_bwd_launch(cuda_ctx *c, const fa_bwd_args &a) {
    const tfb_attn_desc &d = a.d;
    size_t rows = (size_t)d.batch * d.heads * d.seq;
    k_fa_rowdot<T><<<(unsigned)((rows * 32 + 255) / 256), 256, 0, c->stream>>>(a);
    TFB_CHECK_LAUNCH();
    dim3 grid(d.seq / FA_T, d.heads, d.batch);
    k_fa_dkdv<T><<<grid, FA_THREADS, 0, c->stream>>>(a);
    TFB_CHECK_LAUNCH();
    k_fa_dq<T><<<grid, FA_THREADS, 0, c->stream>>>(a);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_attn_bwd(void *ctx, const tfb_attn_desc *d, const tfb_attn_grads *g) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!fa_valid(ctx, d) || !tfb_attn_grads_valid(d, g)) return TFB_ERR_ARG;
    fa_bwd_args a = {*d, *g};
    return d->type == TFB_F16 ? fa_bwd_launch<__half>(c, a) : fa_bwd_launch<__nv_bfloat16>(c, a);
}

void tfb_cuda_attn_install(tfb_backend *be) {
    be->attn_fused_supports = cuda_attn_supports;
    be->attn_fused_fwd = cuda_attn_fwd;
    be->attn_fused_bwd = cuda_attn_bwd;
}
