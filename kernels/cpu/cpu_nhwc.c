/* cpu_nhwc.c — the CPU backend's channels-last (NHWC) convolution and pooling: the reference for a GPU backend's
 * NHWC path, where 16-bit convolutions run on tensor cores without layout transposes.
 *
 * Activations are (n, h, w, c) and filters (k, r, s, c). A convolution is an im2col into rows of one output pixel
 * each, (pixels, r*s*c) — every tap a contiguous run of c channels — times the filters as (k, r*s*c): the output
 * (pixels, k) is already NHWC, so no copy back is needed. 1x1 stride-1 convolutions use x itself as the operand.
 * Max pooling saves the argmax as the index within the image plane (ih * w + iw), as cpu_conv.c does for NCHW.
 * Batch norm sees an (n, h, w, c) tensor as (n*h*w, c, 1); cpu_conv.c hands that shape (hw == 1) to the row
 * versions here, whose threads split the rows and sum every channel of a row at once (contiguous, vectorised),
 * instead of striding down one channel at a time. This file does not widen 16-bit inputs itself (cpu_conv.c hands it FP32 operands) and has
 * no NCHW code.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cpu.h"
#include "../act.h"

/* Input row (or column) of output position o and tap t, or -1 outside the image. */
static int tap_pos(int o, int t, int stride, int pad, int size) {
    int i = o * stride - pad + t;
    return i >= 0 && i < size ? i : -1;
}

/* col (g*p*q, r*s*c) of images x (g, h, w, c): row (image, oy, ox) holds every tap's c channels, zeros outside. */
static void im2col_nhwc(float *col, const float *x, int g, const tfb_conv_desc *d) {
    size_t rsc = (size_t)d->r * d->s * d->c, cbytes = (size_t)d->c * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < g; b++)
        for (int oy = 0; oy < d->p; oy++)
            for (int ox = 0; ox < d->q; ox++) {
                float *row = col + (((size_t)b * d->p + oy) * d->q + ox) * rsc;
                for (int i = 0; i < d->r; i++) {
                    int iy = tap_pos(oy, i, d->stride, d->pad, d->h);
                    for (int j = 0; j < d->s; j++) {
                        int ix = tap_pos(ox, j, d->stride, d->pad, d->w);
                        float *dst = row + ((size_t)i * d->s + j) * d->c;
                        if (iy < 0 || ix < 0) memset(dst, 0, cbytes);
                        else memcpy(dst, x + (((size_t)b * d->h + iy) * d->w + ix) * d->c, cbytes);
                    }
                }
            }
}

/* dx (g, h, w, c) = scatter-add of dcol (g*p*q, r*s*c); each thread owns whole images. */
static void col2im_nhwc(float *dx, const float *dcol, int g, const tfb_conv_desc *d) {
    size_t rsc = (size_t)d->r * d->s * d->c, img = (size_t)d->h * d->w * d->c;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < g; b++) {
        float *out = dx + (size_t)b * img;
        memset(out, 0, img * sizeof(float));
        for (int oy = 0; oy < d->p; oy++)
            for (int ox = 0; ox < d->q; ox++) {
                const float *row = dcol + (((size_t)b * d->p + oy) * d->q + ox) * rsc;
                for (int i = 0; i < d->r; i++) {
                    int iy = tap_pos(oy, i, d->stride, d->pad, d->h);
                    for (int j = 0; j < d->s && iy >= 0; j++) {
                        int ix = tap_pos(ox, j, d->stride, d->pad, d->w);
                        if (ix < 0) continue;
                        float *dst = out + ((size_t)iy * d->w + ix) * d->c;
                        const float *src = row + ((size_t)i * d->s + j) * d->c;
                        for (int ch = 0; ch < d->c; ch++) dst[ch] += src[ch];
                    }
                }
            }
    }
}

static int pointwise(const tfb_conv_desc *d) { return d->r == 1 && d->s == 1 && d->stride == 1 && d->pad == 0; }

/* Images per GEMM: about 2048 output rows, so late layers with small images still get tall GEMMs. */
static int group_of(const tfb_conv_desc *d) {
    int pq = d->p * d->q, g = (2048 + pq - 1) / pq;
    return pointwise(d) || g > d->n ? d->n : g;
}

/* The (g*p*q, r*s*c) operand of images x (g, h, w, c): x itself when pointwise. */
static const float *columns(void *ctx, const tfb_conv_desc *d, const float *x, int g) {
    if (pointwise(d)) return x;
    float *col = tfb_cpu_scratch(ctx, TFB_CPU_SLOT_COL, (size_t)g * d->p * d->q * d->r * d->s * d->c);
    if (col) im2col_nhwc(col, x, g, d);
    return col;
}

tfb_status tfb_cpu_conv_fwd_nhwc(void *ctx, const tfb_conv_desc *d, float *y, const float *x, const float *w) {
    int rsc = d->r * d->s * d->c, pq = d->p * d->q, G = group_of(d);
    size_t img_in = (size_t)d->h * d->w * d->c, img_out = (size_t)pq * d->k;
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        const float *col = columns(ctx, d, x + (size_t)i0 * img_in, g);
        if (!col) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g * pq, d->k, rsc, 1.0f, col, rsc, w, rsc, 0.0f,
                    y + (size_t)i0 * img_out, d->k);
    }
    return TFB_OK;
}

tfb_status tfb_cpu_conv_bwd_data_nhwc(void *ctx, const tfb_conv_desc *d, float *dx, const float *dy,
                                      const float *w) {
    int rsc = d->r * d->s * d->c, pq = d->p * d->q, G = group_of(d);
    size_t img_in = (size_t)d->h * d->w * d->c, img_out = (size_t)pq * d->k;
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        float *dxi = dx + (size_t)i0 * img_in;
        float *dcol = pointwise(d) ? dxi : tfb_cpu_scratch(ctx, TFB_CPU_SLOT_COL, (size_t)g * pq * rsc);
        if (!dcol) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g * pq, rsc, d->k, 1.0f, dy + (size_t)i0 * img_out,
                    d->k, w, rsc, 0.0f, dcol, rsc);
        if (!pointwise(d)) col2im_nhwc(dxi, dcol, g, d);
    }
    return TFB_OK;
}

tfb_status tfb_cpu_conv_bwd_filter_nhwc(void *ctx, const tfb_conv_desc *d, float *dw, const float *x,
                                        const float *dy) {
    int rsc = d->r * d->s * d->c, pq = d->p * d->q, G = group_of(d);
    size_t img_in = (size_t)d->h * d->w * d->c, img_out = (size_t)pq * d->k;
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        const float *col = columns(ctx, d, x + (size_t)i0 * img_in, g);
        if (!col) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->k, rsc, g * pq, 1.0f, dy + (size_t)i0 * img_out,
                    d->k, col, rsc, 1.0f, dw, rsc);
    }
    return TFB_OK;
}

/* ---- pooling ---- */

tfb_status tfb_cpu_maxpool_fwd_nhwc(float *y, int *argmax, const float *x, const tfb_pool_desc *d) {
    int c = d->c;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < d->n; b++)
        for (int i = 0; i < d->p; i++)
            for (int j = 0; j < d->q; j++)
                for (int ch = 0; ch < c; ch++) {
                    float best = -INFINITY;
                    int arg = -1;
                    for (int a = 0; a < d->r; a++)
                        for (int e = 0; e < d->r; e++) {
                            int ih = tap_pos(i, a, d->stride, d->pad, d->h);
                            int iw = tap_pos(j, e, d->stride, d->pad, d->w);
                            if (ih < 0 || iw < 0) continue;
                            float v = x[(((size_t)b * d->h + ih) * d->w + iw) * c + ch];
                            if (v > best || arg < 0) { best = v; arg = ih * d->w + iw; }
                        }
                    size_t o = (((size_t)b * d->p + i) * d->q + j) * c + ch;
                    y[o] = best;
                    argmax[o] = arg;
                }
    return TFB_OK;
}

/* A scatter in output order, so each dx element adds its dy in the order the CUDA gather does. */
tfb_status tfb_cpu_maxpool_bwd_nhwc(float *dx, const float *dy, const int *argmax, const tfb_pool_desc *d) {
    size_t c = (size_t)d->c, hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < d->n; b++) {
        float *out = dx + (size_t)b * hw * c;
        size_t o0 = (size_t)b * pq * c;
        memset(out, 0, hw * c * sizeof(float));
        for (size_t o = 0; o < pq * c; o++) out[(size_t)argmax[o0 + o] * c + o % c] += dy[o0 + o];
    }
    return TFB_OK;
}

tfb_status tfb_cpu_avgpool_fwd_nhwc(float *y, const float *x, int n, int c, int hw) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++) {
            double s = 0;
            for (int j = 0; j < hw; j++) s += x[((size_t)b * hw + j) * c + ch];
            y[(size_t)b * c + ch] = (float)(s / hw);
        }
    return TFB_OK;
}

tfb_status tfb_cpu_avgpool_bwd_nhwc(float *dx, const float *dy, int n, int c, int hw) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int j = 0; j < hw; j++)
            for (int ch = 0; ch < c; ch++) dx[((size_t)b * hw + j) * c + ch] = dy[(size_t)b * c + ch] / (float)hw;
    return TFB_OK;
}

/* ---- batch norm on (rows, c): the threads split the rows (whole rows: contiguous reads), each block of ROW_BLOCK
 * rows is summed per channel in FP32 vector lanes, the blocks into the thread's double partials, and the threads'
 * partials are added in thread order (deterministic for a thread count) ---- */

#define ROW_BLOCK 64

enum { SUM_X, SUM_SQDEV, SUM_BWD }; /* sum x; sum (x - m)^2; sum g and sum g (x - m), g = dy gated by the ReLU */

/* The FP32 lanes of one row for `mode` (branch-free ReLU gate, so the loops vectorise). */
static void rows_row(float *p, int mode, const float *xr, const float *gr, const float *m, const float *scale,
                     const float *shift, int c, int relu) {
    if (mode == SUM_X) {
#pragma omp simd
        for (int ch = 0; ch < c; ch++) p[ch] += xr[ch];
    } else if (mode == SUM_SQDEV) {
#pragma omp simd
        for (int ch = 0; ch < c; ch++) p[ch] += (xr[ch] - m[ch]) * (xr[ch] - m[ch]);
    } else if (gr) { /* SUM_BWD */
#pragma omp simd
        for (int ch = 0; ch < c; ch++) {
            int keep = (relu == 0) | (tfb_bn_value(xr[ch], scale[ch], shift[ch]) > 0.0f);
            float g = keep ? gr[ch] : 0.0f;
            p[ch] += g;
            p[c + ch] += g * (xr[ch] - m[ch]);
        }
    }
}

/* out (c, or 2c for SUM_BWD) = the per-channel sums of `mode` over the rows of x (rows, c) (and dy). */
static tfb_status rows_sums(double *out, int mode, const float *x, const float *dy, const float *m,
                            const float *scale, const float *shift, int rows, int c, int relu) {
    size_t k = (size_t)(mode == SUM_BWD ? 2 : 1) * c;
    int threads = omp_get_max_threads(), blocks = (rows + ROW_BLOCK - 1) / ROW_BLOCK;
    double *acc = calloc((size_t)threads * k, sizeof *acc);
    float *lanes = malloc((size_t)threads * k * sizeof *lanes);
    if (!acc || !lanes) { free(acc); free(lanes); return TFB_ERR_NOMEM; }
#pragma omp parallel num_threads(threads)
    {
        double *a = acc + (size_t)omp_get_thread_num() * k;
        float *p = lanes + (size_t)omp_get_thread_num() * k;
#pragma omp for schedule(static)
        for (int bl = 0; bl < blocks; bl++) {
            int r1 = rows - bl * ROW_BLOCK < ROW_BLOCK ? rows : (bl + 1) * ROW_BLOCK;
            memset(p, 0, k * sizeof *p);
            for (int r = bl * ROW_BLOCK; r < r1; r++)
                rows_row(p, mode, x + (size_t)r * c, dy ? dy + (size_t)r * c : NULL, m, scale, shift, c, relu);
            for (size_t i = 0; i < k; i++) a[i] += p[i];
        }
    }
    for (size_t i = 0; i < k; i++) out[i] = 0;
    for (int t = 0; t < threads; t++)
        for (size_t i = 0; i < k; i++) out[i] += acc[(size_t)t * k + i];
    free(acc);
    free(lanes);
    return TFB_OK;
}

tfb_status tfb_cpu_bn_rows_moments(float *mean, float *var, const float *x, int rows, int c) {
    double *s = malloc((size_t)c * sizeof *s);
    tfb_status st = s ? rows_sums(s, SUM_X, x, NULL, NULL, NULL, NULL, rows, c, 0) : TFB_ERR_NOMEM;
    if (st == TFB_OK) {
        for (int ch = 0; ch < c; ch++) mean[ch] = (float)(s[ch] / rows);
        st = rows_sums(s, SUM_SQDEV, x, NULL, mean, NULL, NULL, rows, c, 0);
    }
    if (st == TFB_OK)
        for (int ch = 0; ch < c; ch++) var[ch] = (float)(s[ch] / rows);
    free(s);
    return st;
}

tfb_status tfb_cpu_bn_rows_apply(float *y, const float *x, const float *mean, const float *var, const float *gamma,
                                 const float *beta, int rows, int c, float eps, int relu) {
    float *scale = malloc(2 * (size_t)c * sizeof *scale);
    if (!scale) return TFB_ERR_NOMEM;
    float *shift = scale + c;
    for (int ch = 0; ch < c; ch++) tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &scale[ch], &shift[ch]);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            size_t i = (size_t)r * c + ch;
            float v = tfb_bn_value(x[i], scale[ch], shift[ch]);
            y[i] = relu ? tfb_act_value(TFB_ACT_RELU, v) : v;
        }
    free(scale);
    return TFB_OK;
}

tfb_status tfb_cpu_bn_rows_bwd_reduce(float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                      const float *dy, const float *x, const float *mean, const float *var,
                                      const float *gamma, const float *beta, int rows, int c, float eps, int relu) {
    float *sc = calloc(2 * (size_t)c, sizeof *sc); /* scale, shift of bn_apply's map, for the ReLU gate */
    double *s = malloc(2 * (size_t)c * sizeof *s);  /* sum g, sum g (x - mean) */
    tfb_status st = sc && s ? TFB_OK : TFB_ERR_NOMEM;
    if (st == TFB_OK) {
        for (int ch = 0; ch < c; ch++) tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &sc[ch], &sc[c + ch]);
        st = rows_sums(s, SUM_BWD, x, dy, mean, sc, sc + c, rows, c, relu);
    }
    for (int ch = 0; st == TFB_OK && ch < c; ch++) {
        float t = (float)(s[c + ch] / sqrtf(var[ch] + eps));
        sum_dy[ch] = (float)s[ch];
        sum_dy_xhat[ch] = t;
        dgamma[ch] += t;
        dbeta[ch] += (float)s[ch];
    }
    free(sc);
    free(s);
    return st;
}

tfb_status tfb_cpu_bn_rows_bwd_apply(float *dx, const float *dy, const float *x, const float *mean, const float *var,
                                     const float *gamma, const float *beta, const float *sum_dy,
                                     const float *sum_dy_xhat, double count, int rows, int c, float eps, int relu) {
    float *k = malloc(6 * (size_t)c * sizeof *k); /* rstd, gamma rstd, mean dy, mean dy xhat, scale, shift */
    if (!k) return TFB_ERR_NOMEM;
    for (int ch = 0; ch < c; ch++) {
        k[ch] = 1.0f / sqrtf(var[ch] + eps);
        k[c + ch] = gamma[ch] * k[ch];
        k[2 * c + ch] = (float)(sum_dy[ch] / count);
        k[3 * c + ch] = (float)(sum_dy_xhat[ch] / count);
        tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &k[4 * c + ch], &k[5 * c + ch]);
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            size_t i = (size_t)r * c + ch;
            float xhat = (x[i] - mean[ch]) * k[ch];
            int keep = (relu == 0) | (tfb_bn_value(x[i], k[4 * c + ch], k[5 * c + ch]) > 0.0f);
            float g = keep ? dy[i] : 0.0f;
            dx[i] = k[c + ch] * (g - k[2 * c + ch] - xhat * k[3 * c + ch]);
        }
    free(k);
    return TFB_OK;
}
