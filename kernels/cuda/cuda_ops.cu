/* cuda_ops.cu — the CUDA backend's fills, transformer and optimizer ops, written to compute what cpu_ops.c computes
 * (the reference they are checked against by `make gpu-check`): same formulas, same exact-erf GELU, same Philox
 * normal values and dropout mask, same AdamW and SGD forms.
 *
 * Row ops (LayerNorm, softmax, cross-entropy) run one block per row, except attention's softmax with its dropout
 * (rows of at most 1024 columns: one warp per row, held in registers); column reductions (bias and LayerNorm
 * parameter gradients) give each thread a column and a slice of rows, reduce the slice in shared memory, and the
 * last block of each column tile adds the blocks' partials in a fixed order (col_sums_add: the same bits every
 * run, which atomicAdd did not give); the cross-entropy's loss sum ends the same way, and the embedding backward
 * adds each id's tokens in the fixed sequence backend.h defines (pieces of the id-sorted order, then the pieces in
 * order), so it gives the CPU backend's bits. Element-wise ops use grid-stride loops. Fused: bias + activation
 * (forward) and activation gradient + bias gradient (backward), one pass each; the AdamW and SGD kernels apply the
 * loss-scale unscale (grad_scale) in the update pass, and their pool forms update every parameter tensor in one
 * launch (weight decay by a binary search of the decay runs).
 */
#include <limits.h>
#include <math.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "cuda_internal.h"
#include "../dropout.h"
#include "../update.h"
#include "../act.h"

#define ROW_THREADS 256
#define COL_TX 32
#define COL_TY 8

static cudaStream_t S(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

static unsigned col_row_blocks(int n) {
    int b = (n + COL_TY * 64 - 1) / (COL_TY * 64);
    return (unsigned)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

/* ---- column reductions ---- */

/* Scratch of a column reduction of `outs` sums over h columns in `ry` row blocks: partials (outs, ry, h), and the
 * arrival counters of the column tiles, zero from their allocation and reset by each launch's last blocks. (A
 * row sum, as the loss's, is one column.) */
static tfb_status col_scratch(void *ctx, int outs, unsigned ry, int h, float **part, unsigned **ticket) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    size_t tiles = ((size_t)h + COL_TX - 1) / COL_TX;
    TFB_CHECK(tfb_cuda_grow(c, &c->partials, &c->partials_bytes, (size_t)outs * ry * h * sizeof(float)));
    TFB_CHECK(tfb_cuda_grow(c, &c->tickets, &c->tickets_bytes, tiles * sizeof(unsigned)));
    *part = (float *)c->partials;
    *ticket = (unsigned *)c->tickets;
    return TFB_OK;
}

/* o0[j] (and o1[j] when K == 2) += the block grid's column sums, the same bits every run. a0 (a1): this thread's
 * sum of column j = blockIdx.x * COL_TX + threadIdx.x over its rows. They are added over threadIdx.y into the
 * block's partial (k, blockIdx.y, j); the block that arrives last at its column tile adds the tile's partials to
 * the output in row-block order. Every thread of the (COL_TX, COL_TY) block calls it. */
template <int K>
__device__ void col_sums_add(float *o0, float *o1, float a0, float a1, float *part, unsigned *ticket, int h) {
    __shared__ float s[K][COL_TY][COL_TX + 1];
    __shared__ int last;
    int j = blockIdx.x * COL_TX + threadIdx.x;
    size_t plane = (size_t)gridDim.y * h;
    s[0][threadIdx.y][threadIdx.x] = a0;
    if (K == 2) s[K - 1][threadIdx.y][threadIdx.x] = a1;
    __syncthreads();
    if (threadIdx.y == 0 && j < h)
        for (int k = 0; k < K; k++) {
            float t = s[k][0][threadIdx.x];
            for (int y = 1; y < COL_TY; y++) t += s[k][y][threadIdx.x];
            part[k * plane + (size_t)blockIdx.y * h + j] = t;
        }
    __threadfence(); /* this block's partials visible to every block before it counts itself */
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(&ticket[blockIdx.x], 1u) == gridDim.y - 1;
        if (last) ticket[blockIdx.x] = 0; /* the whole tile has arrived: ready for the next launch */
    }
    __syncthreads();
    if (!last || threadIdx.y != 0 || j >= h) return;
    for (int k = 0; k < K; k++) {
        float *o = k == 0 ? o0 : o1, t = o[j];
        for (unsigned r = 0; r < gridDim.y; r++) t += __ldcg(&part[k * plane + (size_t)r * h + j]);
        o[j] = t;
    }
}

/* ---- fills ---- */

__global__ void k_fill(float *x, float value, size_t n) {
    TFB_GRID_LOOP(i, n) x[i] = value;
}

static tfb_status cuda_fill(void *ctx, float *x, float value, size_t n) {
    if (n == 0) return TFB_OK;
    k_fill<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(x, value, n);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* Row blockIdx.y (of this launch's rows from row0), its value pairs strided over blockIdx.x: no per-element
 * division. */
__global__ void k_normal_fill(float *x, size_t pairs, size_t per, uint64_t row0, tfb_philox_key key) {
    float *row = x + blockIdx.y * per;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < pairs; t += (size_t)gridDim.x * blockDim.x) {
        size_t i = 2 * t;
        float a, b;
        tfb_normal_pair(key, row0 + blockIdx.y, i, &a, &b);
        row[i] = a;
        if (i + 1 < per) row[i + 1] = b;
    }
}

static tfb_status cuda_normal_fill(void *ctx, float *x, size_t rows, size_t per, uint64_t row0, tfb_philox_key key) {
    size_t pairs = (per + 1) / 2, across = (pairs + TFB_CUDA_THREADS - 1) / TFB_CUDA_THREADS;
    if (rows == 0 || pairs == 0) return TFB_OK;
    if (across > 64) across = 64; /* with the rows, enough blocks to fill a GPU; threads stride over the rest */
    for (size_t r = 0; r < rows; r += 65535) { /* gridDim.y's limit */
        unsigned n = (unsigned)(rows - r < 65535 ? rows - r : 65535);
        k_normal_fill<<<dim3((unsigned)across, n), TFB_CUDA_THREADS, 0, S(ctx)>>>(x + r * per, pairs, per, row0 + r,
                                                                                  key);
        TFB_CHECK_LAUNCH();
    }
    return TFB_OK;
}

/* ---- embedding ---- */

/* row i of out (n, h) = (or +=) row ids[i] of table: one block per row */
__global__ void k_embedding_fwd(float *out, const float *table, const int *ids, int h, int accumulate) {
    float *o = out + (size_t)blockIdx.x * h;
    const float *t = table + (size_t)ids[blockIdx.x] * h;
    TFB_ROW_LOOP(j, h) o[j] = accumulate ? o[j] + t[j] : t[j];
}

static tfb_status cuda_embedding_fwd(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                     int accumulate) {
    if (n < 1) return TFB_OK;
    k_embedding_fwd<<<n, tfb_row_threads(h), 0, S(ctx)>>>(out, table, ids, h, accumulate);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- embedding backward: a scatter-add in the order's fixed sequence (backend.h) ---- */

#define EMB_CHUNK TFB_EMBED_CHUNK
#define EMB_COLS 128

__device__ __forceinline__ int emb_in_shard(int id, int row0, int rows) { return id >= row0 && id - row0 < rows; }

/* dtable (rows, h) holding rows [row0, row0 + rows) of the table; part (chunks, 2, h): the pieces of the runs that
 * cross a chunk's edge. order (n): token indices sorted by id; a run is one id's stretch of it. */
struct emb_bwd_args {
    float *dtable;
    const float *dout;
    const int *ids, *order;
    float *part;
    int n, h, row0, rows;
};

/* Without an order (no id repeats): row i of dout added to row ids[i], one block per row. */
__global__ void k_embedding_bwd(emb_bwd_args a) {
    int id = a.ids[blockIdx.x];
    if (!emb_in_shard(id, a.row0, a.rows)) return;
    float *d = a.dtable + (size_t)(id - a.row0) * a.h;
    const float *g = a.dout + (size_t)blockIdx.x * a.h;
    TFB_ROW_LOOP(j, a.h) atomicAdd(&d[j], g[j]);
}

/* The id at position p of the order, or -1 (no id) outside it. */
__device__ __forceinline__ int emb_id_at(const emb_bwd_args &a, int p) {
    return p >= 0 && p < a.n ? a.ids[a.order[p]] : -1;
}

/* Pass 1, block (chunk k of the order, column tile): each run's piece in the chunk summed from zero in order. A
 * run the chunk holds whole is added to its row (the only writer of it); a piece of a run that crosses the chunk's
 * edge goes to part (k, 0) when it is the chunk's first run, else (k, 1), for pass 2. */
__global__ void k_embed_pieces(emb_bwd_args a) {
    __shared__ int tok[EMB_CHUNK], id[EMB_CHUNK + 2]; /* id[1 + i]: position p0 + i's; id[0], id[len + 1]: its
                                                       * neighbours' (-1 past the order's ends) */
    int p0 = blockIdx.x * EMB_CHUNK, len = a.n - p0 < EMB_CHUNK ? a.n - p0 : EMB_CHUNK;
    for (int i = threadIdx.x; i < len + 2; i += blockDim.x) {
        if (i >= 1 && i <= len) tok[i - 1] = a.order[p0 + i - 1];
        id[i] = emb_id_at(a, p0 + i - 1);
    }
    __syncthreads();
    int col = blockIdx.y * EMB_COLS + threadIdx.x;
    if (col >= a.h) return;
    float v[EMB_CHUNK]; /* all the chunk's loads in flight before the first add */
#pragma unroll
    for (int i = 0; i < EMB_CHUNK; i++) v[i] = i < len ? a.dout[(size_t)tok[i] * a.h + col] : 0.0f;
    float acc = 0.0f;
    int start = 0;
#pragma unroll
    for (int i = 0; i < EMB_CHUNK; i++) {
        if (i >= len) break;
        acc += v[i];
        int run = id[i + 1];
        if (i + 1 < len && id[i + 2] == run) continue; /* the run goes on in the chunk */
        int cross = (start == 0 && id[0] == run) || id[i + 2] == run;
        if (cross) a.part[((size_t)blockIdx.x * 2 + (start > 0)) * a.h + col] = acc;
        else if (emb_in_shard(run, a.row0, a.rows)) atomicAdd(&a.dtable[(size_t)(run - a.row0) * a.h + col], acc);
        acc = 0.0f;
        start = i + 1;
    }
}

/* The end of the run holding position p: the first position past it with another id, or n (a binary search, the
 * order being sorted by id). */
__device__ int emb_run_end(const emb_bwd_args &a, int p, int run) {
    int lo = p, hi = a.n; /* id(lo) is run; id(hi) is not, or hi is n */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (emb_id_at(a, mid) == run) lo = mid;
        else hi = mid;
    }
    return hi;
}

/* Pass 2, block (chunk k, column tile): when the chunk's last run begins in it and goes on into the next chunk,
 * its pieces are added in order (this chunk's, then each next chunk's first run) and the sum to its row. */
__global__ void k_embed_join(emb_bwd_args a) {
    int k = blockIdx.x, p0 = k * EMB_CHUNK, p1 = p0 + EMB_CHUNK < a.n ? p0 + EMB_CHUNK : a.n;
    int col = blockIdx.y * EMB_COLS + threadIdx.x, run = emb_id_at(a, p1 - 1);
    if (col >= a.h || emb_id_at(a, p1) != run || !emb_in_shard(run, a.row0, a.rows)) return;
    int whole = emb_id_at(a, p0) == run; /* the run fills the chunk: it is the chunk's first run (piece 0) */
    if (whole && emb_id_at(a, p0 - 1) == run) return; /* it began in an earlier chunk, whose block adds it */
    int last = (emb_run_end(a, p1, run) - 1) / EMB_CHUNK;
    float sum = a.part[((size_t)k * 2 + !whole) * a.h + col];
    for (int j = k + 1; j <= last; j++) sum += a.part[(size_t)j * 2 * a.h + col]; /* chunk j's first run */
    atomicAdd(&a.dtable[(size_t)(run - a.row0) * a.h + col], sum);
}

/* dtable += dout scattered by ids for the ids in [row0, row0 + rows): in the order's sequence when there is one
 * (two passes), else one row at a time. */
static tfb_status embed_scatter(void *ctx, float *dtable, const float *dout, const int *ids, const int *order,
                                int n, int h, int row0, int rows) {
    if (n < 1) return TFB_OK;
    emb_bwd_args a = {dtable, dout, ids, order, NULL, n, h, row0, rows};
    if (!order) {
        k_embedding_bwd<<<n, tfb_row_threads(h), 0, S(ctx)>>>(a);
        TFB_CHECK_LAUNCH();
        return TFB_OK;
    }
    cuda_ctx *c = (cuda_ctx *)ctx;
    dim3 grid((unsigned)((n + EMB_CHUNK - 1) / EMB_CHUNK), (unsigned)((h + EMB_COLS - 1) / EMB_COLS));
    TFB_CHECK(tfb_cuda_grow(c, &c->partials, &c->partials_bytes, (size_t)grid.x * 2 * h * sizeof(float)));
    a.part = (float *)c->partials;
    unsigned threads = h < EMB_COLS ? (unsigned)((h + 31) / 32 * 32) : EMB_COLS;
    k_embed_pieces<<<grid, threads, 0, c->stream>>>(a);
    TFB_CHECK_LAUNCH();
    k_embed_join<<<grid, threads, 0, c->stream>>>(a);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_embedding_bwd(void *ctx, float *dtable, const float *dout, const int *ids, const int *order,
                                     int n, int h) {
    return embed_scatter(ctx, dtable, dout, ids, order, n, h, 0, INT_MAX);
}

static tfb_status cuda_embedding_bwd_shard(void *ctx, float *dtable, const float *dout, const int *ids,
                                           const int *order, int n, int h, int row0, int rows) {
    return embed_scatter(ctx, dtable, dout, ids, order, n, h, row0, rows);
}

/* ---- LayerNorm ---- */

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *in, const float *gamma,
                                const float *beta, int h, float eps) {
    const float *x = in + (size_t)blockIdx.x * h;
    float *y = out + (size_t)blockIdx.x * h;
    float s = 0.0f, ss = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) s += x[j];
    float mu = tfb_block_sum(s) / h;
    for (int j = threadIdx.x; j < h; j += blockDim.x) ss += (x[j] - mu) * (x[j] - mu);
    float r = rsqrtf(tfb_block_sum(ss) / h + eps);
    for (int j = threadIdx.x; j < h; j += blockDim.x) y[j] = (x[j] - mu) * r * gamma[j] + beta[j];
    if (threadIdx.x == 0) { mean[blockIdx.x] = mu; rstd[blockIdx.x] = r; }
}

static tfb_status cuda_layernorm_fwd(void *ctx, float *out, float *mean, float *rstd, const float *in,
                                     const float *gamma, const float *beta, int n, int h, float eps) {
    if (n < 1) return TFB_OK;
    k_layernorm_fwd<<<n, ROW_THREADS, 0, S(ctx)>>>(out, mean, rstd, in, gamma, beta, h, eps);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* dgamma (h) += sum_i dy * xhat, dbeta (h) += sum_i dy: block (32, 8) per 32 columns and a slice of rows */
__global__ void k_layernorm_param_grads(float *dgamma, float *dbeta, const float *dout, const float *in,
                                        const float *mean, const float *rstd, int n, int h, float *part,
                                        unsigned *ticket) {
    int j = blockIdx.x * COL_TX + threadIdx.x;
    float g = 0.0f, b = 0.0f;
    if (j < h)
        for (int i = blockIdx.y * COL_TY + threadIdx.y; i < n; i += gridDim.y * COL_TY) {
            float dy = dout[(size_t)i * h + j];
            g += dy * (in[(size_t)i * h + j] - mean[i]) * rstd[i];
            b += dy;
        }
    col_sums_add<2>(dgamma, dbeta, g, b, part, ticket, h);
}

static tfb_status layernorm_param_grads(void *ctx, float *dgamma, float *dbeta, const float *dout, const float *in,
                                        const float *mean, const float *rstd, int n, int h) {
    dim3 grid((h + COL_TX - 1) / COL_TX, col_row_blocks(n)), block(COL_TX, COL_TY);
    float *part;
    unsigned *ticket;
    TFB_CHECK(col_scratch(ctx, 2, grid.y, h, &part, &ticket));
    k_layernorm_param_grads<<<grid, block, 0, S(ctx)>>>(dgamma, dbeta, dout, in, mean, rstd, n, h, part, ticket);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_layernorm_bwd(float *din, const float *dout, const float *in, const float *mean,
                                const float *rstd, const float *gamma, int h) {
    size_t row = (size_t)blockIdx.x * h;
    float mu = mean[blockIdx.x], r = rstd[blockIdx.x], sg = 0.0f, sgx = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float g = dout[row + j] * gamma[j];
        sg += g;
        sgx += g * (in[row + j] - mu) * r;
    }
    sg = tfb_block_sum(sg) / h;
    sgx = tfb_block_sum(sgx) / h;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float xhat = (in[row + j] - mu) * r;
        din[row + j] = r * (dout[row + j] * gamma[j] - sg - xhat * sgx);
    }
}

static tfb_status cuda_layernorm_bwd(void *ctx, float *din, float *dgamma, float *dbeta, const float *dout,
                                     const float *in, const float *mean, const float *rstd, const float *gamma,
                                     int n, int h) {
    if (n < 1) return TFB_OK;
    TFB_CHECK(layernorm_param_grads(ctx, dgamma, dbeta, dout, in, mean, rstd, n, h));
    k_layernorm_bwd<<<n, ROW_THREADS, 0, S(ctx)>>>(din, dout, in, mean, rstd, gamma, h);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- residual + dropout + LayerNorm: the tail of a transformer sublayer, one block per row ---- */

/* Element j of the row: x + bias, as the CPU's bias pass forms it. */
__device__ __forceinline__ float rln_in(const tfb_residual_ln_desc &d, size_t row, int j) {
    float x = tfb_load_elem(d.x, (int)d.x_type, row + j);
    return d.bias ? x + d.bias[j] : x;
}

/* fn(j, f) for this thread's elements j of the row, f being element j's dropout factor (0: dropped; 1 without
 * dropout). With dropout each thread takes whole groups of four counters, so one Philox block serves four
 * elements as in k_dropout. */
template <typename Fn>
__device__ __forceinline__ void rln_row_each(const tfb_residual_ln_desc &d, size_t row, Fn fn) {
    if (d.p <= 0.0f) {
        TFB_ROW_LOOP(j, d.cols) fn(j, 1.0f);
        return;
    }
    tfb_dropout_key k = d.key;
    k.offset += row;
    uint64_t g0, g1;
    tfb_dropout_groups(k, (size_t)d.cols, &g0, &g1);
    for (uint64_t g = g0 + threadIdx.x; g < g1; g += blockDim.x) {
        float f[4];
        tfb_dropout_factors(k, d.p, g, f);
        for (int q = 0; q < 4; q++) {
            long long j = tfb_dropout_elem(k, (size_t)d.cols, g, q);
            if (j >= 0) fn((int)j, f[q]);
        }
    }
}

/* h = residual + Dropout(x + bias) over the row; returns this thread's partial sum of h. */
__device__ float rln_row_h(const tfb_residual_ln_desc &d, size_t row) {
    float s = 0.0f;
    rln_row_each(d, row, [&](int j, float f) {
        float h = d.residual[row + j] + (f > 0.0f ? rln_in(d, row, j) * f : 0.0f);
        d.h[row + j] = h;
        s += h;
    });
    return s;
}

/* Each row's x is read whole (and h written) before the first block-wide sum, so x may alias h or y. */
__global__ void k_residual_ln_fwd(tfb_residual_ln_desc d) {
    size_t row = (size_t)blockIdx.x * d.cols;
    float mu = tfb_block_sum(rln_row_h(d, row)) / d.cols, ss = 0.0f;
    TFB_ROW_LOOP(j, d.cols) ss += (d.h[row + j] - mu) * (d.h[row + j] - mu);
    float r = rsqrtf(tfb_block_sum(ss) / d.cols + d.eps);
    TFB_ROW_LOOP(j, d.cols) {
        float y = (d.h[row + j] - mu) * r * d.gamma[j] + d.beta[j];
        d.y[row + j] = y;
        if (d.y_lp) tfb_store_elem(d.y_lp, (int)d.lp_type, row + j, y);
    }
    if (threadIdx.x == 0) { d.mean[blockIdx.x] = mu; d.rstd[blockIdx.x] = r; }
}

static tfb_status cuda_residual_ln_fwd(void *ctx, const tfb_residual_ln_desc *d) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    if (d->rows == 0) return TFB_OK;
    k_residual_ln_fwd<<<d->rows, ROW_THREADS, 0, S(ctx)>>>(*d);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* LayerNorm's input gradient of row element j, given the row's mean terms sg and sgx. */
__device__ __forceinline__ float rln_dh(const tfb_residual_ln_desc &d, const float *dy, size_t row, int j, float mu,
                                        float r, float sg, float sgx) {
    float xhat = (d.h[row + j] - mu) * r;
    return r * (dy[row + j] * d.gamma[j] - sg - xhat * sgx);
}

/* dh as k_layernorm_bwd computes din, and dx (of type dt) = Dropout's backward of dh in the same pass. */
__global__ void k_residual_ln_bwd(tfb_residual_ln_desc d, float *dh, void *dx, int dt, const float *dy) {
    size_t row = (size_t)blockIdx.x * d.cols;
    float mu = d.mean[blockIdx.x], r = d.rstd[blockIdx.x], sg = 0.0f, sgx = 0.0f;
    TFB_ROW_LOOP(j, d.cols) {
        float g = dy[row + j] * d.gamma[j];
        sg += g;
        sgx += g * (d.h[row + j] - mu) * r;
    }
    sg = tfb_block_sum(sg) / d.cols;
    sgx = tfb_block_sum(sgx) / d.cols;
    rln_row_each(d, row, [&](int j, float f) {
        float v = rln_dh(d, dy, row, j, mu, r, sg, sgx);
        dh[row + j] = v;
        tfb_store_elem(dx, dt, row + j, f > 0.0f ? v * f : 0.0f);
    });
}

static tfb_status cuda_residual_ln_bwd(void *ctx, const tfb_residual_ln_desc *d, float *dh, void *dx,
                                       tfb_dtype dx_type, float *dgamma, float *dbeta, const float *dy) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    if (d->rows == 0) return TFB_OK;
    int n = d->rows, h = d->cols;
    TFB_CHECK(layernorm_param_grads(ctx, dgamma, dbeta, dy, d->h, d->mean, d->rstd, n, h));
    k_residual_ln_bwd<<<n, ROW_THREADS, 0, S(ctx)>>>(*d, dh, dx, (int)dx_type, dy);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- softmax ---- */

/* in and out of type t (FP32, or 16-bit for attention's wide rows), arithmetic in FP32 */
__global__ void k_softmax_fwd(void *out, const void *in, int t, int cols, float scale, const int *key_len,
                              int rows_per_key) {
    size_t row = (size_t)blockIdx.x * cols;
    int valid = key_len ? min(key_len[blockIdx.x / rows_per_key], cols) : cols;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, scale * tfb_load_elem(in, t, row + j));
    mx = tfb_block_max(mx);
    for (int j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(scale * tfb_load_elem(in, t, row + j) - mx);
    float inv = 1.0f / tfb_block_sum(sum);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float y = j < valid ? expf(scale * tfb_load_elem(in, t, row + j) - mx) * inv : 0.0f;
        tfb_store_elem(out, t, row + j, y);
    }
}

static tfb_status softmax_fwd_typed(void *ctx, void *out, const void *in, tfb_dtype t, int rows, int cols,
                                    float scale, const int *key_len, int rows_per_key) {
    if (rows < 1) return TFB_OK;
    k_softmax_fwd<<<rows, ROW_THREADS, 0, S(ctx)>>>(out, in, (int)t, cols, scale, key_len, rows_per_key);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_softmax_fwd(void *ctx, float *out, const float *in, int rows, int cols, float scale,
                                   const int *key_len, int rows_per_key) {
    return softmax_fwd_typed(ctx, out, in, TFB_F32, rows, cols, scale, key_len, rows_per_key);
}

__global__ void k_softmax_bwd(void *din, int din_type, const float *dout, const float *out, int cols, float scale) {
    size_t row = (size_t)blockIdx.x * cols;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += dout[row + j] * out[row + j];
    dot = tfb_block_sum(dot);
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        tfb_store_elem(din, din_type, row + j, scale * out[row + j] * (dout[row + j] - dot));
}

static tfb_status cuda_softmax_bwd(void *ctx, void *din, tfb_dtype din_type, const float *dout, const float *out,
                                   int rows, int cols, float scale) {
    if (rows < 1) return TFB_OK;
    k_softmax_bwd<<<rows, ROW_THREADS, 0, S(ctx)>>>(din, (int)din_type, dout, out, cols, scale);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- activations, bias, residual ---- */

__global__ void k_act_fwd(int act, float *out, const float *in, size_t n) {
    TFB_GRID_LOOP(i, n) out[i] = tfb_act_value(act, in[i]);
}

__global__ void k_act_bwd(int act, float *din, const float *dout, const float *in, size_t n) {
    TFB_GRID_LOOP(i, n) din[i] = dout[i] * tfb_act_slope(act, in[i]);
}

static tfb_status cuda_act_fwd(void *ctx, tfb_act act, float *out, const float *in, size_t n) {
    k_act_fwd<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>((int)act, out, in, n);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_act_bwd(void *ctx, tfb_act act, float *din, const float *dout, const float *in, size_t n) {
    k_act_bwd<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>((int)act, din, dout, in, n);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bias_add(float *x, const float *bias, int h) {
    float *row = x + (size_t)blockIdx.x * h;
    TFB_ROW_LOOP(j, h) row[j] += bias[j];
}

static tfb_status cuda_bias_add(void *ctx, float *x, const float *bias, int n, int h) {
    if (n < 1) return TFB_OK;
    k_bias_add<<<n, tfb_row_threads(h), 0, S(ctx)>>>(x, bias, h);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bias_grad(float *dbias, const float *dout, int n, int h, float *part, unsigned *ticket) {
    int j = blockIdx.x * COL_TX + threadIdx.x;
    float acc = 0.0f;
    if (j < h)
        for (int i = blockIdx.y * COL_TY + threadIdx.y; i < n; i += gridDim.y * COL_TY) acc += dout[(size_t)i * h + j];
    col_sums_add<1>(dbias, NULL, acc, 0.0f, part, ticket, h);
}

static tfb_status cuda_bias_grad(void *ctx, float *dbias, const float *dout, int n, int h) {
    if (n < 1) return TFB_OK;
    dim3 grid((h + COL_TX - 1) / COL_TX, col_row_blocks(n)), block(COL_TX, COL_TY);
    float *part;
    unsigned *ticket;
    TFB_CHECK(col_scratch(ctx, 1, grid.y, h, &part, &ticket));
    k_bias_grad<<<grid, block, 0, S(ctx)>>>(dbias, dout, n, h, part, ticket);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_bias_act_fwd(int act, void *out, int out_type, const void *pre, int pre_type, const float *bias,
                               int h) {
    size_t r = (size_t)blockIdx.x * h;
    TFB_ROW_LOOP(j, h) {
        float v = tfb_load_elem(pre, pre_type, r + j) + bias[j];
        tfb_store_elem(out, out_type, r + j, tfb_act_value(act, v));
    }
}

static tfb_status cuda_bias_act_fwd(void *ctx, tfb_act act, void *out, tfb_dtype out_type, const void *pre,
                                    tfb_dtype pre_type, const float *bias, int n, int h) {
    if (n < 1) return TFB_OK;
    k_bias_act_fwd<<<n, tfb_row_threads(h), 0, S(ctx)>>>((int)act, out, (int)out_type, pre, (int)pre_type, bias, h);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* din = dout * act'(pre + bias) written (in din_type, unless din is NULL) while its FP32 column sums are reduced
 * as in k_bias_grad; each element is read before it is written, by the same thread, so din may alias dout */
__global__ void k_act_bias_bwd(tfb_act_bias_bwd_desc d, float *part, unsigned *ticket) {
    int j = blockIdx.x * COL_TX + threadIdx.x, h = d.h;
    float acc = 0.0f, b = j < h && d.bias ? d.bias[j] : 0.0f;
    if (j < h)
        for (int i = blockIdx.y * COL_TY + threadIdx.y; i < d.n; i += gridDim.y * COL_TY) {
            size_t e = (size_t)i * h + j;
            float g = tfb_load_elem(d.dout, (int)d.dout_type, e);
            if (d.pre) g *= tfb_act_slope((int)d.act, tfb_load_elem(d.pre, (int)d.pre_type, e) + b);
            if (d.din) tfb_store_elem(d.din, (int)d.din_type, e, g);
            acc += g;
        }
    col_sums_add<1>(d.dbias, NULL, acc, 0.0f, part, ticket, h);
}

static tfb_status cuda_act_bias_bwd(void *ctx, const tfb_act_bias_bwd_desc *d) {
    if (d->n < 1) return TFB_OK;
    dim3 grid((d->h + COL_TX - 1) / COL_TX, col_row_blocks(d->n)), block(COL_TX, COL_TY);
    float *part;
    unsigned *ticket;
    TFB_CHECK(col_scratch(ctx, 1, grid.y, d->h, &part, &ticket));
    k_act_bias_bwd<<<grid, block, 0, S(ctx)>>>(*d, part, ticket);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_residual_add(float *out, const float *a, const float *b, size_t n) {
    TFB_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

static tfb_status cuda_residual_add(void *ctx, float *out, const float *a, const float *b, size_t n) {
    k_residual_add<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(out, a, b, n);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- dropout: one Philox block per group of four global indices, as on the CPU ---- */

/* in of in_type: FP32, or attention's 16-bit probabilities on its wide-row path */
__global__ void k_dropout(void *out, int out_type, const void *in, int in_type, size_t n, float p,
                          tfb_dropout_key key) {
    uint64_t g0, g1;
    tfb_dropout_groups(key, n, &g0, &g1);
    TFB_GRID_LOOP(t, g1 - g0) {
        float f[4];
        tfb_dropout_factors(key, p, g0 + t, f);
        for (int q = 0; q < 4; q++) {
            long long e = tfb_dropout_elem(key, n, g0 + t, q);
            if (e >= 0)
                tfb_store_elem(out, out_type, (size_t)e, f[q] > 0.0f ? tfb_load_elem(in, in_type, e) * f[q] : 0.0f);
        }
    }
}

static tfb_status cuda_cast(void *ctx, void *dst, tfb_dtype dst_type, const void *src, tfb_dtype src_type, size_t n);

static tfb_status dropout_fwd_typed(void *ctx, void *out, tfb_dtype out_type, const void *in, tfb_dtype in_type,
                                    size_t n, float p, tfb_dropout_key key) {
    if (p <= 0.0f && out_type != in_type) return cuda_cast(ctx, out, out_type, in, in_type, n);
    if (p <= 0.0f) {
        size_t bytes = n * tfb_dtype_size(in_type);
        if (out != in) TFB_CHECK_CUDA(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, S(ctx)));
        return TFB_OK;
    }
    k_dropout<<<tfb_cuda_blocks(n / 4 + 2), TFB_CUDA_THREADS, 0, S(ctx)>>>(out, (int)out_type, in, (int)in_type, n, p,
                                                                           key);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_dropout_fwd(void *ctx, void *out, tfb_dtype out_type, const float *in, size_t n, float p,
                                   tfb_dropout_key key) {
    return dropout_fwd_typed(ctx, out, out_type, in, TFB_F32, n, p, key);
}

static tfb_status cuda_dropout_bwd(void *ctx, float *din, const float *dout, size_t n, float p, tfb_dropout_key key) {
    return cuda_dropout_fwd(ctx, din, TFB_F32, dout, n, p, key);
}

/* ---- attention's softmax with its dropout: one warp per row ---- */

/* A warp holds its row in registers: lane l takes the runs of four columns starting at 4 (l + 32 c), c < C, so one
 * Philox block serves a run when the row's counters start a group. Rows of up to 128 C columns. */
template <int C>
__global__ void k_attn_softmax_fwd(tfb_attn_softmax_desc d) {
    int r = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= d.rows) return;
    size_t row = (size_t)r * d.cols;
    int valid = d.key_len ? min(d.key_len[r / d.rows_per_key], d.cols) : d.cols;
    float v[C][4], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int j = 4 * (lane + 32 * c) + q;
            v[c][q] = j < valid ? d.scale * tfb_load_elem(d.in, (int)d.prob_type, row + j) : -INFINITY;
            mx = fmaxf(mx, v[c][q]);
        }
    mx = tfb_warp_max(mx);
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            v[c][q] = 4 * (lane + 32 * c) + q < valid ? expf(v[c][q] - mx) : 0.0f;
            sum += v[c][q];
        }
    float inv = 1.0f / tfb_warp_sum(sum);
#pragma unroll
    for (int c = 0; c < C; c++) {
        int j0 = 4 * (lane + 32 * c);
        if (j0 >= d.cols) continue;
        float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (d.p > 0.0f) tfb_dropout_run(d.key, d.p, d.key.offset + row + j0, f);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (j0 + q >= d.cols) continue;
            float a = tfb_round_elem((int)d.prob_type, j0 + q < valid ? v[c][q] * inv : 0.0f);
            tfb_store_elem(d.att, (int)d.prob_type, row + j0 + q, a);
            tfb_store_elem(d.att_d, (int)d.att_type, row + j0 + q, f[q] > 0.0f ? a * f[q] : 0.0f);
        }
    }
}

/* din = scale * att * (g - sum_j g_j att_j), g = Dropout's backward of datt_d (dd, of type dt); each lane reads its
 * elements before it writes them, so din may alias dd when of its type. */
template <int C>
__global__ void k_attn_softmax_bwd(tfb_attn_softmax_desc d, void *din, int din_type, const void *dd, int dt) {
    int r = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= d.rows) return;
    size_t row = (size_t)r * d.cols;
    float g[C][4], a[C][4], dot = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c++) {
        int j0 = 4 * (lane + 32 * c);
        float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (d.p > 0.0f && j0 < d.cols) tfb_dropout_run(d.key, d.p, d.key.offset + row + j0, f);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int j = j0 + q;
            a[c][q] = j < d.cols ? tfb_load_elem(d.att, (int)d.prob_type, row + j) : 0.0f;
            g[c][q] = j < d.cols && f[q] > 0.0f ? tfb_load_elem(dd, dt, row + j) * f[q] : 0.0f;
            dot += g[c][q] * a[c][q];
        }
    }
    dot = tfb_warp_sum(dot);
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int j = 4 * (lane + 32 * c) + q;
            if (j < d.cols) tfb_store_elem(din, din_type, row + j, d.scale * a[c][q] * (g[c][q] - dot));
        }
}

/* The same for rows of any width, one block per row: the row is read twice (its dot product, then din), each
 * thread taking runs of four columns so the dropout factors come as in the warp kernel; every read of the first
 * pass precedes the block's sum, and the second pass reads each element before writing it, so din may alias dd. */
__global__ void k_attn_softmax_bwd_wide(tfb_attn_softmax_desc d, void *din, int din_type, const void *dd, int dt) {
    size_t row = (size_t)blockIdx.x * d.cols;
    float dot = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int j0 = 4 * threadIdx.x; j0 < d.cols; j0 += 4 * blockDim.x) {
            float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
            if (d.p > 0.0f) tfb_dropout_run(d.key, d.p, d.key.offset + row + j0, f);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                if (j0 + q >= d.cols) break;
                size_t e = row + j0 + q;
                float a = tfb_load_elem(d.att, (int)d.prob_type, e);
                float g = f[q] > 0.0f ? tfb_load_elem(dd, dt, e) * f[q] : 0.0f;
                if (pass == 0) dot += g * a;
                else tfb_store_elem(din, din_type, e, d.scale * a * (g - dot));
            }
        }
        if (pass == 0) dot = tfb_block_sum(dot);
    }
}

/* Columns per lane group: rows up to 1024 columns run one warp per row, wider ones the two ops in turn forward and
 * k_attn_softmax_bwd_wide backward. */
static int attn_chunks(int cols) {
    int c = (cols + 127) / 128;
    return c == 1 || c == 2 ? c : c <= 4 ? 4 : c <= 8 ? 8 : 0;
}

#define ATTN_WARPS (ROW_THREADS / 32)
#define ATTN_LAUNCH(C, kernel, ...) \
    kernel<C><<<(unsigned)((d->rows + ATTN_WARPS - 1) / ATTN_WARPS), ROW_THREADS, 0, S(ctx)>>>(__VA_ARGS__)

static tfb_status cuda_attn_softmax_fwd(void *ctx, const tfb_attn_softmax_desc *d) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    if (d->rows == 0) return TFB_OK;
    switch (attn_chunks(d->cols)) {
    case 1: ATTN_LAUNCH(1, k_attn_softmax_fwd, *d); break;
    case 2: ATTN_LAUNCH(2, k_attn_softmax_fwd, *d); break;
    case 4: ATTN_LAUNCH(4, k_attn_softmax_fwd, *d); break;
    case 8: ATTN_LAUNCH(8, k_attn_softmax_fwd, *d); break;
    default:
        TFB_CHECK(softmax_fwd_typed(ctx, d->att, d->in, d->prob_type, d->rows, d->cols, d->scale, d->key_len,
                                    d->rows_per_key));
        return dropout_fwd_typed(ctx, d->att_d, d->att_type, d->att, d->prob_type, (size_t)d->rows * d->cols, d->p,
                                 d->key);
    }
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_attn_softmax_bwd(void *ctx, const tfb_attn_softmax_desc *d, void *din, tfb_dtype din_type,
                                        void *datt_d, tfb_dtype datt_type) {
    if (d->rows < 0 || d->cols < 1) return TFB_ERR_ARG;
    if (d->rows == 0) return TFB_OK;
    int dt = (int)datt_type;
    switch (attn_chunks(d->cols)) {
    case 1: ATTN_LAUNCH(1, k_attn_softmax_bwd, *d, din, (int)din_type, datt_d, dt); break;
    case 2: ATTN_LAUNCH(2, k_attn_softmax_bwd, *d, din, (int)din_type, datt_d, dt); break;
    case 4: ATTN_LAUNCH(4, k_attn_softmax_bwd, *d, din, (int)din_type, datt_d, dt); break;
    case 8: ATTN_LAUNCH(8, k_attn_softmax_bwd, *d, din, (int)din_type, datt_d, dt); break;
    default: k_attn_softmax_bwd_wide<<<d->rows, ROW_THREADS, 0, S(ctx)>>>(*d, din, (int)din_type, datt_d, dt);
    }
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}
#undef ATTN_LAUNCH
#undef ATTN_WARPS

/* ---- cross-entropy ---- */

/* The row's largest logit *mx and sum *s of exp(x - mx) over its v logits, by the block's threads together; label
 * is the block's, so all take the same branch. An ignored row (label < 0): -inf and 0. */
__device__ __forceinline__ void xent_row_stats(const float *x, int v, int label, float *mx, float *s) {
    float m = -INFINITY, t = 0.0f;
    if (label >= 0) {
        for (int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, x[j]);
        m = tfb_block_max(m);
        for (int j = threadIdx.x; j < v; j += blockDim.x) t += expf(x[j] - m);
        t = tfb_block_sum(t);
    }
    *mx = m;
    *s = t;
}

/* *loss_sum = the sum of the rows' losses (0 for an ignored row): each block writes its row's to part[row]; the
 * block that arrives last (counted in *ticket, which it resets) adds them in a fixed order, so the loss has the
 * same bits every run. */
__global__ void k_xent_fwd(float *loss_sum, const float *logits, const int *labels, int v, float *part,
                           unsigned *ticket) {
    __shared__ int last;
    int label = labels[blockIdx.x];
    const float *x = logits + (size_t)blockIdx.x * v;
    float mx, s;
    xent_row_stats(x, v, label, &mx, &s);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = label >= 0 ? logf(s) + mx - x[label] : 0.0f;
        __threadfence(); /* the row's loss visible to every block before this block counts itself */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
        if (last) *ticket = 0;
    }
    __syncthreads();
    if (!last) return;
    float t = 0.0f;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) t += __ldcg(&part[i]);
    t = tfb_block_sum(t);
    if (threadIdx.x == 0) *loss_sum = t;
}

static tfb_status cuda_xent_fwd(void *ctx, float *loss_sum, const float *logits, const int *labels, int n, int v) {
    TFB_CHECK_CUDA(cudaMemsetAsync(loss_sum, 0, sizeof(float), S(ctx)));
    if (n < 1) return TFB_OK;
    float *part;
    unsigned *ticket;
    TFB_CHECK(col_scratch(ctx, 1, (unsigned)n, 1, &part, &ticket));
    k_xent_fwd<<<n, ROW_THREADS, 0, S(ctx)>>>(loss_sum, logits, labels, v, part, ticket);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* dlogits may alias logits: every element is read and then written by the same thread, after the row's sums. */
__global__ void k_xent_bwd(float *dlogits, const float *logits, const int *labels, int v, float dscale) {
    int label = labels[blockIdx.x];
    const float *x = logits + (size_t)blockIdx.x * v;
    float *dx = dlogits + (size_t)blockIdx.x * v;
    float mx, s;
    xent_row_stats(x, v, label, &mx, &s);
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < v; j += blockDim.x)
        dx[j] = label < 0 ? 0.0f : expf(x[j] - mx) * inv * dscale - (j == label ? dscale : 0.0f);
}

static tfb_status cuda_xent_bwd(void *ctx, float *dlogits, const float *logits, const int *labels, int n, int v,
                                float dscale) {
    if (n < 1) return TFB_OK;
    k_xent_bwd<<<n, ROW_THREADS, 0, S(ctx)>>>(dlogits, logits, labels, v, dscale);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- optimizers ---- */

/* The pool updates also write the 16-bit weight copy (w_lp of lp_type, when not NULL) as they store w. */
__global__ void k_adamw(float *w, const float *g, float *m, float *v, size_t n, tfb_adamw_hparams hp, float c1,
                        float c2, const uint64_t *runs, int n_runs, int pool, void *w_lp, int lp_type) {
    TFB_GRID_LOOP(i, n) {
        float decay = !pool || tfb_runs_contain(runs, n_runs, i) ? hp.weight_decay : 0.0f;
        tfb_adamw_elem(&w[i], g[i], &m[i], &v[i], &hp, decay, c1, c2);
        if (w_lp) tfb_store_elem(w_lp, lp_type, i, w[i]);
    }
}

static tfb_status adamw_launch(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                               const uint64_t *runs, int n_runs, int pool, const tfb_adamw_hparams *hp, void *w_lp,
                               tfb_dtype lp_type) {
    float c1, c2;
    tfb_adamw_corrections(hp, &c1, &c2);
    if (n == 0) return TFB_OK;
    k_adamw<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(w, g, m, v, n, *hp, c1, c2, runs, n_runs, pool,
                                                                 w_lp, (int)lp_type);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                             const tfb_adamw_hparams *hp) {
    return adamw_launch(ctx, w, g, m, v, n, NULL, 0, 0, hp, NULL, TFB_F32);
}

static tfb_status cuda_adamw_pool(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                                  const uint64_t *runs, int n_runs, const tfb_adamw_hparams *hp, void *w_lp,
                                  tfb_dtype lp_type) {
    return adamw_launch(ctx, w, g, m, v, n, runs, n_runs, 1, hp, w_lp, lp_type);
}

__global__ void k_sgd(float *w, const float *g, float *buf, size_t n, tfb_sgd_hparams hp, const uint64_t *runs,
                      int n_runs, int pool, void *w_lp, int lp_type) {
    TFB_GRID_LOOP(i, n) {
        float decay = !pool || tfb_runs_contain(runs, n_runs, i) ? hp.weight_decay : 0.0f;
        tfb_sgd_elem(&w[i], g[i], &buf[i], &hp, decay);
        if (w_lp) tfb_store_elem(w_lp, lp_type, i, w[i]);
    }
}

static tfb_status cuda_sgd(void *ctx, float *w, const float *g, float *buf, size_t n, const tfb_sgd_hparams *hp) {
    if (n == 0) return TFB_OK;
    k_sgd<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(w, g, buf, n, *hp, NULL, 0, 0, NULL, 0);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static tfb_status cuda_sgd_pool(void *ctx, float *w, const float *g, float *buf, size_t n, const uint64_t *runs,
                                int n_runs, const tfb_sgd_hparams *hp, void *w_lp, tfb_dtype lp_type) {
    if (n == 0) return TFB_OK;
    k_sgd<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(w, g, buf, n, *hp, runs, n_runs, 1, w_lp,
                                                               (int)lp_type);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

/* ---- casts and the finite check ---- */

__global__ void k_cast(void *dst, int dst_type, const void *src, int src_type, size_t n) {
    TFB_GRID_LOOP(i, n) tfb_store_elem(dst, dst_type, i, tfb_load_elem(src, src_type, i));
}

static tfb_status cuda_cast(void *ctx, void *dst, tfb_dtype dst_type, const void *src, tfb_dtype src_type, size_t n) {
    k_cast<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, S(ctx)>>>(dst, (int)dst_type, src, (int)src_type, n);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

__global__ void k_check_finite(int *bad, const float *x, size_t n) {
    TFB_GRID_LOOP(i, n) if (!isfinite(x[i])) *bad = 1;
}

static tfb_status cuda_check_finite(void *ctx, const float *x, size_t n, int *all_finite) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    int bad = 0;
    TFB_CHECK_CUDA(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream));
    if (n) k_check_finite<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, c->stream>>>(c->flag, x, n);
    TFB_CHECK_LAUNCH();
    TFB_CHECK_CUDA(cudaMemcpyAsync(&bad, c->flag, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
    TFB_TRY(tfb_cuda_stream_wait(c));
    *all_finite = !bad;
    return TFB_OK;
}

void tfb_cuda_ops_install(tfb_backend *be) {
    be->fill = cuda_fill;
    be->normal_fill = cuda_normal_fill;
    be->embedding_fwd = cuda_embedding_fwd;
    be->embedding_bwd = cuda_embedding_bwd;
    be->embedding_bwd_shard = cuda_embedding_bwd_shard;
    be->layernorm_fwd = cuda_layernorm_fwd;
    be->layernorm_bwd = cuda_layernorm_bwd;
    be->residual_ln_fwd = cuda_residual_ln_fwd;
    be->residual_ln_bwd = cuda_residual_ln_bwd;
    be->softmax_fwd = cuda_softmax_fwd;
    be->softmax_bwd = cuda_softmax_bwd;
    be->attn_softmax_fwd = cuda_attn_softmax_fwd;
    be->attn_softmax_bwd = cuda_attn_softmax_bwd;
    be->act_fwd = cuda_act_fwd;
    be->act_bwd = cuda_act_bwd;
    be->bias_add = cuda_bias_add;
    be->bias_grad = cuda_bias_grad;
    be->residual_add = cuda_residual_add;
    be->bias_act_fwd = cuda_bias_act_fwd;
    be->act_bias_bwd = cuda_act_bias_bwd;
    be->dropout_fwd = cuda_dropout_fwd;
    be->dropout_bwd = cuda_dropout_bwd;
    be->xent_fwd = cuda_xent_fwd;
    be->xent_bwd = cuda_xent_bwd;
    be->adamw = cuda_adamw;
    be->sgd = cuda_sgd;
    be->adamw_pool = cuda_adamw_pool;
    be->sgd_pool = cuda_sgd_pool;
    be->cast = cuda_cast;
    be->check_finite = cuda_check_finite;
}
