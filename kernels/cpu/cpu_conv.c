/* cpu_conv.c — the CPU backend's convolutional-network ops: convolution as im2col + OpenBLAS SGEMM per image
 * (1x1 stride-1 convolutions skip im2col), batch norm in training mode, max and global average pooling, in NCHW,
 * and a residual block's sum + ReLU; 16-bit inputs are widened to FP32 first (TF32 inputs rounded). Statistics
 * accumulate in double. The NHWC convolutions and pools are in cpu_nhwc.c (these entry points hand them over);
 * other ops are in cpu_ops.c.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "cpu.h"
#include "../act.h"

/* The output columns q in [*q0, *q1) whose input column q * stride - pad + s lies inside the image. */
static void valid_cols(const tfb_conv_desc *d, int s, int *q0, int *q1) {
    int lo = d->pad - s, hi = d->w - 1 + d->pad - s; /* need lo <= q * stride <= hi */
    *q0 = lo > 0 ? (lo + d->stride - 1) / d->stride : 0;
    *q1 = hi < 0 ? 0 : hi / d->stride + 1;
    if (*q1 > d->q) *q1 = d->q;
    if (*q0 > *q1) *q0 = *q1;
}

/* col (c*r*s, p*q), rows ld apart, of one image x (c, h, w): each row is one (channel, kernel offset) shifted copy
 * of the image. */
static void im2col(float *col, size_t ld, const float *x, const tfb_conv_desc *d) {
#pragma omp parallel for schedule(static)
    for (int row = 0; row < d->c * d->r * d->s; row++) {
        int c = row / (d->r * d->s), r = row / d->s % d->r, s = row % d->s, q0, q1;
        const float *plane = x + (size_t)c * d->h * d->w;
        float *out = col + (size_t)row * ld;
        valid_cols(d, s, &q0, &q1);
        for (int p = 0; p < d->p; p++) {
            int ih = p * d->stride - d->pad + r;
            float *o = out + (size_t)p * d->q;
            if (ih < 0 || ih >= d->h) { memset(o, 0, (size_t)d->q * sizeof(float)); continue; }
            const float *in = plane + (size_t)ih * d->w; /* column of output q: q * stride + s - pad */
            int shift = s - d->pad;
            for (int q = 0; q < q0; q++) o[q] = 0.0f;
            if (d->stride == 1 && q1 > q0) memcpy(o + q0, in + q0 + shift, (size_t)(q1 - q0) * sizeof(float));
            else for (int q = q0; q < q1; q++) o[q] = in[q * d->stride + shift];
            for (int q = q1; q < d->q; q++) o[q] = 0.0f;
        }
    }
}

/* dx (c, h, w) of one image = scatter-add of dcol (c*r*s, p*q), rows ld apart; each thread owns whole channels. */
static void col2im(float *dx, const float *col, size_t ld, const tfb_conv_desc *d) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < d->c; c++) {
        float *plane = dx + (size_t)c * d->h * d->w;
        memset(plane, 0, (size_t)d->h * d->w * sizeof(float));
        for (int r = 0; r < d->r; r++)
            for (int s = 0; s < d->s; s++) {
                const float *in = col + (size_t)((c * d->r + r) * d->s + s) * ld;
                int q0, q1;
                valid_cols(d, s, &q0, &q1);
                for (int p = 0; p < d->p; p++) {
                    int ih = p * d->stride - d->pad + r;
                    if (ih < 0 || ih >= d->h) continue;
                    float *o = plane + (size_t)ih * d->w;
                    const float *g = in + (size_t)p * d->q;
                    int shift = s - d->pad;
                    for (int q = q0; q < q1; q++) o[q * d->stride + shift] += g[q];
                }
            }
    }
}

static int conv_is_pointwise(const tfb_conv_desc *d) {
    return d->r == 1 && d->s == 1 && d->stride == 1 && d->pad == 0;
}

static size_t x_elems(const tfb_conv_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t y_elems(const tfb_conv_desc *d) { return (size_t)d->n * d->k * d->p * d->q; }
static size_t w_elems(const tfb_conv_desc *d) { return (size_t)d->k * d->c * d->r * d->s; }

#define GROUP_COLUMNS 2048
/* Images per GEMM: enough for about 2048 output columns, so late layers with small images still get wide GEMMs. */
static int conv_group(const tfb_conv_desc *d) {
    int pq = d->p * d->q, g = (GROUP_COLUMNS + pq - 1) / pq;
    return g < d->n ? g : d->n;
}

/* dst (rows, g*pq) from g consecutive images src (rows, pq) each; back again when to_images. */
static void group_copy(float *grouped, float *images, int rows, int pq, int g, int to_images) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int j = 0; j < g; j++)
        for (int r = 0; r < rows; r++) {
            float *a = grouped + (size_t)r * g * pq + (size_t)j * pq, *b = images + ((size_t)j * rows + r) * pq;
            memcpy(to_images ? b : a, to_images ? a : b, (size_t)pq * sizeof(float));
        }
}

/* The (c*r*s, g*pq) GEMM operand of images i0 .. i0+g-1: x itself for one image of a pointwise convolution. */
static const float *conv_columns(void *ctx, const tfb_conv_desc *d, const float *x, int i0, int g) {
    int crs = d->c * d->r * d->s, pq = d->p * d->q;
    const float *xi = x + (size_t)i0 * d->c * d->h * d->w;
    if (g == 1 && conv_is_pointwise(d)) return xi;
    float *col = tfb_cpu_scratch(ctx, TFB_CPU_SLOT_COL, (size_t)crs * g * pq);
    if (!col) return NULL;
    if (conv_is_pointwise(d)) group_copy(col, (float *)xi, d->c, pq, g, 0);
    else
        for (int j = 0; j < g; j++) im2col(col + (size_t)j * pq, (size_t)g * pq, xi + (size_t)j * d->c * d->h * d->w, d);
    return col;
}

static tfb_status conv_fwd_f32(void *ctx, const tfb_conv_desc *d, float *y, const void *x16, const void *w16) {
    const float *x = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_X, x16, d->in_type, d->tf32, x_elems(d));
    const float *w = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_W, w16, d->in_type, d->tf32, w_elems(d));
    int crs = d->c * d->r * d->s, pq = d->p * d->q, G = conv_group(d);
    if (!x || !w) return TFB_ERR_NOMEM;
    if (d->layout == TFB_NHWC) return tfb_cpu_conv_fwd_nhwc(ctx, d, y, x, w);
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        const float *col = conv_columns(ctx, d, x, i0, g);
        float *yi = y + (size_t)i0 * d->k * pq;
        float *out = g == 1 ? yi : tfb_cpu_scratch(ctx, TFB_CPU_SLOT_GROUP, (size_t)d->k * g * pq);
        if (!col || !out) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->k, g * pq, crs, 1.0f, w, crs, col, g * pq, 0.0f,
                    out, g * pq);
        if (g > 1) group_copy(out, yi, d->k, pq, g, 1);
    }
    return TFB_OK;
}

/* A convolution pass computing an FP32 result from two operands. */
typedef tfb_status (*conv_pass_f32)(void *ctx, const tfb_conv_desc *d, float *out, const void *a, const void *b);

/* out (n elements) of type t from pass f: written directly in FP32, else computed in scratch `slot` and rounded
 * once, as a GPU's FP32-accumulating convolution writes a 16-bit result; a type other than FP32 or in_type is
 * refused. */
static tfb_status conv_typed(void *ctx, const tfb_conv_desc *d, conv_pass_f32 f, tfb_dtype t, int slot, size_t n,
                             void *out, const void *a, const void *b) {
    if (t == TFB_F32) return f(ctx, d, out, a, b);
    if (t != d->in_type) return TFB_ERR_ARG;
    float *o32 = tfb_cpu_scratch(ctx, slot, n);
    TFB_CHECK_ALLOC(o32);
    TFB_CHECK(f(ctx, d, o32, a, b));
    tfb_cpu_narrow(out, t, o32, n);
    return TFB_OK;
}

static tfb_status cpu_conv_fwd(void *ctx, const tfb_conv_desc *d, void *y, const void *x16, const void *w16) {
    return conv_typed(ctx, d, conv_fwd_f32, d->y_type, TFB_CPU_SLOT_CONV_Y, y_elems(d), y, x16, w16);
}

/* dy of images i0 .. i0+g-1 as one (k, g*pq) operand. */
static const float *conv_dy_group(void *ctx, const tfb_conv_desc *d, const float *dy, int i0, int g) {
    int pq = d->p * d->q;
    float *dyi = (float *)dy + (size_t)i0 * d->k * pq;
    if (g == 1) return dyi;
    float *buf = tfb_cpu_scratch(ctx, TFB_CPU_SLOT_GROUP, (size_t)d->k * g * pq);
    if (buf) group_copy(buf, dyi, d->k, pq, g, 0);
    return buf;
}

static tfb_status conv_bwd_data_f32(void *ctx, const tfb_conv_desc *d, float *dx, const void *dy16,
                                   const void *w16) {
    const float *dy = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_DY, dy16, d->in_type, d->tf32, y_elems(d));
    const float *w = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_W, w16, d->in_type, d->tf32, w_elems(d));
    int crs = d->c * d->r * d->s, pq = d->p * d->q, G = conv_group(d), pointwise = conv_is_pointwise(d);
    size_t img = (size_t)d->c * d->h * d->w;
    if (!dy || !w) return TFB_ERR_NOMEM;
    if (d->layout == TFB_NHWC) return tfb_cpu_conv_bwd_data_nhwc(ctx, d, dx, dy, w);
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        const float *dyg = conv_dy_group(ctx, d, dy, i0, g);
        float *dxi = dx + (size_t)i0 * img;
        float *dcol = g == 1 && pointwise ? dxi : tfb_cpu_scratch(ctx, TFB_CPU_SLOT_COL, (size_t)crs * g * pq);
        if (!dyg || !dcol) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, g * pq, d->k, 1.0f, w, crs, dyg, g * pq, 0.0f,
                    dcol, g * pq);
        if (pointwise && g > 1) group_copy(dcol, dxi, d->c, pq, g, 1);
        if (!pointwise)
            for (int j = 0; j < g; j++) col2im(dxi + (size_t)j * img, dcol + (size_t)j * pq, (size_t)g * pq, d);
    }
    return TFB_OK;
}

static tfb_status cpu_conv_bwd_data(void *ctx, const tfb_conv_desc *d, void *dx, const void *dy16, const void *w16) {
    return conv_typed(ctx, d, conv_bwd_data_f32, d->dx_type, TFB_CPU_SLOT_CONV_DX, x_elems(d), dx, dy16, w16);
}

static tfb_status cpu_conv_bwd_filter(void *ctx, const tfb_conv_desc *d, float *dw, const void *x16,
                                      const void *dy16) {
    const float *x = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_X, x16, d->in_type, d->tf32, x_elems(d));
    const float *dy = tfb_cpu_as_f32(ctx, TFB_CPU_SLOT_CONV_DY, dy16, d->in_type, d->tf32, y_elems(d));
    int crs = d->c * d->r * d->s, pq = d->p * d->q, G = conv_group(d);
    if (!x || !dy) return TFB_ERR_NOMEM;
    if (d->layout == TFB_NHWC) return tfb_cpu_conv_bwd_filter_nhwc(ctx, d, dw, x, dy);
    for (int i0 = 0; i0 < d->n; i0 += G) {
        int g = d->n - i0 < G ? d->n - i0 : G;
        const float *col = conv_columns(ctx, d, x, i0, g);
        const float *dyg = conv_dy_group(ctx, d, dy, i0, g);
        if (!col || !dyg) return TFB_ERR_NOMEM;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->k, crs, g * pq, 1.0f, dyg, g * pq, col, g * pq,
                    1.0f, dw, crs);
    }
    return TFB_OK;
}

/* The typed tensors of batch norm and pooling, which compute in FP32: an (n, c, hw) input x of type t as FP32
 * (itself, or widened into scratch slot `slot`: BN_X, or BN_DY for a gradient) */
static const float *typed_input(void *ctx, int slot, const void *x, tfb_dtype t, int n, int c, int hw) {
    return tfb_cpu_as_f32(ctx, slot, x, t, 0, (size_t)n * c * hw);
}

/* Where an op's FP32 result goes: out itself, or the scratch slot typed_output_store narrows into a 16-bit out. */
static float *typed_output(void *ctx, void *out, tfb_dtype t, int n, int c, int hw) {
    return t == TFB_F32 ? out : tfb_cpu_scratch(ctx, TFB_CPU_SLOT_BN_Y, (size_t)n * c * hw);
}
static tfb_status typed_output_store(void *out, tfb_dtype t, const float *v, int n, int c, int hw) {
    if (t != TFB_F32) tfb_cpu_narrow(out, t, v, (size_t)n * c * hw);
    return TFB_OK;
}

/* Each image plane is summed in FP32 vector lanes, the planes in double. */
static tfb_status cpu_bn_moments(void *ctx, float *mean, float *var, const void *xt, tfb_dtype x_type, int n, int c,
                                 int hw) {
    const float *x = typed_input(ctx, TFB_CPU_SLOT_BN_X, xt, x_type, n, c, hw);
    TFB_CHECK_ALLOC(x);
    if (hw == 1) return tfb_cpu_bn_rows_moments(mean, var, x, n, c);
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < c; ch++) {
        double s = 0, ss = 0;
        for (int i = 0; i < n; i++) {
            const float *p = x + ((size_t)i * c + ch) * hw;
            float ps = 0.0f;
#pragma omp simd reduction(+ : ps)
            for (int j = 0; j < hw; j++) ps += p[j];
            s += ps;
        }
        float m = (float)(s / ((double)n * hw));
        for (int i = 0; i < n; i++) {
            const float *p = x + ((size_t)i * c + ch) * hw;
            float pss = 0.0f;
#pragma omp simd reduction(+ : pss)
            for (int j = 0; j < hw; j++) pss += (p[j] - m) * (p[j] - m);
            ss += pss;
        }
        mean[ch] = m;
        var[ch] = (float)(ss / ((double)n * hw));
    }
    return TFB_OK;
}

static tfb_status cpu_bn_apply(void *ctx, void *yt, tfb_dtype y_type, const void *xt, tfb_dtype x_type,
                               const float *mean, const float *var, const float *gamma, const float *beta, int n,
                               int c, int hw, float eps, int relu) {
    const float *x = typed_input(ctx, TFB_CPU_SLOT_BN_X, xt, x_type, n, c, hw);
    float *y = typed_output(ctx, yt, y_type, n, c, hw);
    if (!x || !y) return TFB_ERR_NOMEM;
    if (relu) tfb_cpu_margin_bn(x, mean, var, gamma, beta, n, c, hw, eps);
    if (hw == 1) {
        TFB_CHECK(tfb_cpu_bn_rows_apply(y, x, mean, var, gamma, beta, n, c, eps, relu));
        return typed_output_store(yt, y_type, y, n, c, hw);
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            float scale, shift;
            tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &scale, &shift);
            size_t off = ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++) {
                float v = tfb_bn_value(x[off + j], scale, shift);
                y[off + j] = relu ? tfb_act_value(TFB_ACT_RELU, v) : v;
            }
        }
    return typed_output_store(yt, y_type, y, n, c, hw);
}

/* dy where the ReLU after batch norm passed its input (always, without relu). Without branches, so the loops
 * vectorise: a branch on the sign of x is a coin flip the predictor loses half the time (50x slower). */
static inline float relu_gated(float dy, float x, float scale, float shift, int relu) {
    int keep = (relu == 0) | (tfb_bn_value(x, scale, shift) > 0.0f);
    return keep ? dy : 0.0f;
}

static tfb_status cpu_bn_bwd_reduce(void *ctx, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                    const void *dyt, tfb_dtype dy_type, const void *xt, tfb_dtype x_type,
                                    const float *mean, const float *var, const float *gamma, const float *beta, int n,
                                    int c, int hw, float eps, int relu) {
    const float *x = typed_input(ctx, TFB_CPU_SLOT_BN_X, xt, x_type, n, c, hw);
    const float *dy = typed_input(ctx, TFB_CPU_SLOT_BN_DY, dyt, dy_type, n, c, hw);
    if (!x || !dy) return TFB_ERR_NOMEM;
    if (hw == 1)
        return tfb_cpu_bn_rows_bwd_reduce(sum_dy, sum_dy_xhat, dgamma, dbeta, dy, x, mean, var, gamma, beta, n, c,
                                          eps, relu);
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < c; ch++) {
        double s = 0, sx = 0;
        float rstd = 1.0f / sqrtf(var[ch] + eps), m = mean[ch], scale, shift;
        tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &scale, &shift);
        for (int i = 0; i < n; i++) {
            const float *g = dy + ((size_t)i * c + ch) * hw, *v = x + ((size_t)i * c + ch) * hw;
            float ps = 0.0f, psx = 0.0f;
#pragma omp simd reduction(+ : ps, psx)
            for (int j = 0; j < hw; j++) {
                float gj = relu_gated(g[j], v[j], scale, shift, relu);
                ps += gj;
                psx += gj * (v[j] - m);
            }
            s += ps;
            sx += (double)psx * rstd;
        }
        sum_dy[ch] = (float)s;
        sum_dy_xhat[ch] = (float)sx;
        dgamma[ch] += (float)sx;
        dbeta[ch] += (float)s;
    }
    return TFB_OK;
}

static tfb_status cpu_bn_bwd_apply(void *ctx, void *dxt, tfb_dtype dx_type, const void *dyt, tfb_dtype dy_type,
                                   const void *xt, tfb_dtype x_type, const float *mean, const float *var,
                                   const float *gamma, const float *beta, const float *sum_dy,
                                   const float *sum_dy_xhat, double count, int n, int c, int hw, float eps,
                                   int relu) {
    const float *x = typed_input(ctx, TFB_CPU_SLOT_BN_X, xt, x_type, n, c, hw);
    const float *dy = typed_input(ctx, TFB_CPU_SLOT_BN_DY, dyt, dy_type, n, c, hw);
    float *dx = typed_output(ctx, dxt, dx_type, n, c, hw);
    if (!x || !dy || !dx) return TFB_ERR_NOMEM;
    if (hw == 1) {
        TFB_CHECK(tfb_cpu_bn_rows_bwd_apply(dx, dy, x, mean, var, gamma, beta, sum_dy, sum_dy_xhat, count, n, c, eps,
                                            relu));
        return typed_output_store(dxt, dx_type, dx, n, c, hw);
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            float rstd = 1.0f / sqrtf(var[ch] + eps), g = gamma[ch] * rstd, scale, shift;
            float mdy = (float)(sum_dy[ch] / count), mdx = (float)(sum_dy_xhat[ch] / count);
            tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &scale, &shift);
            size_t off = ((size_t)i * c + ch) * hw;
            float m = mean[ch], *o = dx + off;
            const float *xo = x + off, *dyo = dy + off;
#pragma omp simd
            for (int j = 0; j < hw; j++) {
                float xhat = (xo[j] - m) * rstd, gj = relu_gated(dyo[j], xo[j], scale, shift, relu);
                o[j] = g * (gj - mdy - xhat * mdx);
            }
        }
    return typed_output_store(dxt, dx_type, dx, n, c, hw);
}

static tfb_status cpu_bn_moments_merge(void *ctx, float *mean, float *var, const float *mine, int c, int ranks) {
    (void)ctx;
    for (int ch = 0; ch < c; ch++) {
        float m = mean[ch] / (float)ranks, d = mine[ch] - m;
        mean[ch] = m;
        var[ch] = (var[ch] + d * d) / (float)ranks;
    }
    return TFB_OK;
}

static tfb_status cpu_bn_running_update(void *ctx, float *run_mean, float *run_var, const float *mean,
                                        const float *var, int c, float momentum, double count) {
    (void)ctx;
    double unbias = count > 1 ? count / (count - 1) : 1.0;
    for (int ch = 0; ch < c; ch++) {
        run_mean[ch] = (1 - momentum) * run_mean[ch] + momentum * mean[ch];
        run_var[ch] = (1 - momentum) * run_var[ch] + momentum * (float)(var[ch] * unbias);
    }
    return TFB_OK;
}

static tfb_status maxpool_fwd_f32(float *y, int *argmax, const float *x, const tfb_pool_desc *d) {
    int h = d->h, w = d->w, p = d->p, q = d->q;
    if (d->layout == TFB_NHWC) return tfb_cpu_maxpool_fwd_nhwc(y, argmax, x, d);
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < d->n * d->c; plane++) {
        const float *in = x + (size_t)plane * h * w;
        for (int i = 0; i < p; i++)
            for (int j = 0; j < q; j++) {
                float best = -INFINITY;
                int arg = -1;
                for (int a = 0; a < d->r; a++)
                    for (int b = 0; b < d->r; b++) {
                        int ih = i * d->stride - d->pad + a, iw = j * d->stride - d->pad + b;
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                        if (in[ih * w + iw] > best || arg < 0) { best = in[ih * w + iw]; arg = ih * w + iw; }
                    }
                size_t o = (size_t)plane * p * q + (size_t)i * q + j;
                y[o] = best;
                argmax[o] = arg;
            }
    }
    return TFB_OK;
}

/* 16-bit x is widened and the FP32 maximum rounded back: exactly the 16-bit maximum (rounding is monotone). */
static tfb_status cpu_maxpool_fwd(void *ctx, void *y, int *argmax, const void *x, tfb_dtype t,
                                  const tfb_pool_desc *d) {
    const float *x32 = typed_input(ctx, TFB_CPU_SLOT_BN_X, x, t, d->n, d->c, d->h * d->w);
    float *y32 = typed_output(ctx, y, t, d->n, d->c, d->p * d->q);
    if (!x32 || !y32) return TFB_ERR_NOMEM;
    tfb_cpu_margin_pool(x32, d);
    TFB_CHECK(maxpool_fwd_f32(y32, argmax, x32, d));
    return typed_output_store(y, t, y32, d->n, d->c, d->p * d->q);
}

/* A scatter in output order into FP32, so each dx element adds its dy in the order the CUDA gather does. */
static tfb_status maxpool_bwd_f32(float *dx, const float *dy, const int *argmax, const tfb_pool_desc *d) {
    int hw = d->h * d->w, pq = d->p * d->q;
    if (d->layout == TFB_NHWC) return tfb_cpu_maxpool_bwd_nhwc(dx, dy, argmax, d);
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < d->n * d->c; plane++) {
        float *out = dx + (size_t)plane * hw;
        memset(out, 0, (size_t)hw * sizeof(float));
        for (int o = 0; o < pq; o++) out[argmax[(size_t)plane * pq + o]] += dy[(size_t)plane * pq + o];
    }
    return TFB_OK;
}

static tfb_status cpu_maxpool_bwd(void *ctx, void *dx, tfb_dtype dx_type, const void *dyt, tfb_dtype dy_type,
                                  const int *argmax, const tfb_pool_desc *d) {
    const float *dy = typed_input(ctx, TFB_CPU_SLOT_BN_DY, dyt, dy_type, d->n, d->c, d->p * d->q);
    float *dx32 = typed_output(ctx, dx, dx_type, d->n, d->c, d->h * d->w);
    if (!dy || !dx32) return TFB_ERR_NOMEM;
    TFB_CHECK(maxpool_bwd_f32(dx32, dy, argmax, d));
    return typed_output_store(dx, dx_type, dx32, d->n, d->c, d->h * d->w);
}

static tfb_status cpu_avgpool_fwd(void *ctx, float *y, const float *x, int n, int c, int hw, tfb_layout layout) {
    (void)ctx;
    if (layout == TFB_NHWC) return tfb_cpu_avgpool_fwd_nhwc(y, x, n, c, hw);
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < n * c; plane++) {
        double s = 0;
        for (int j = 0; j < hw; j++) s += x[(size_t)plane * hw + j];
        y[plane] = (float)(s / hw);
    }
    return TFB_OK;
}

static tfb_status cpu_avgpool_bwd(void *ctx, float *dx, const float *dy, int n, int c, int hw, tfb_layout layout) {
    (void)ctx;
    if (layout == TFB_NHWC) return tfb_cpu_avgpool_bwd_nhwc(dx, dy, n, c, hw);
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < n * c; plane++)
        for (int j = 0; j < hw; j++) dx[(size_t)plane * hw + j] = dy[plane] / (float)hw;
    return TFB_OK;
}

/* A residual block's output: the FP32 sum of the two branches, ReLU, one rounding into out_type; and its
 * backward, masked by the ReLU's output. */
static tfb_status cpu_add_relu(void *ctx, void *out, tfb_dtype out_type, const void *a, tfb_dtype a_type,
                               const void *b, tfb_dtype b_type, size_t n, int relu) {
    (void)ctx;
    if (relu) tfb_cpu_margin_add(a, a_type, b, b_type, n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = tfb_cpu_load(a, a_type, i) + tfb_cpu_load(b, b_type, i);
        tfb_cpu_store(out, out_type, i, relu && !(v > 0.0f) ? 0.0f : v);
    }
    return TFB_OK;
}

static tfb_status cpu_add_relu_bwd(void *ctx, void *din, tfb_dtype din_type, const void *a, tfb_dtype a_type,
                                   const void *b, tfb_dtype b_type, const void *y, tfb_dtype y_type, size_t n) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = tfb_cpu_load(a, a_type, i) + (b ? tfb_cpu_load(b, b_type, i) : 0.0f);
        tfb_cpu_store(din, din_type, i, !y || tfb_cpu_load(y, y_type, i) > 0.0f ? v : 0.0f);
    }
    return TFB_OK;
}

void tfb_cpu_conv_install(tfb_backend *be) {
    be->conv_fwd = cpu_conv_fwd;
    be->conv_bwd_data = cpu_conv_bwd_data;
    be->conv_bwd_filter = cpu_conv_bwd_filter;
    be->bn_moments = cpu_bn_moments;
    be->bn_apply = cpu_bn_apply;
    be->bn_bwd_reduce = cpu_bn_bwd_reduce;
    be->bn_bwd_apply = cpu_bn_bwd_apply;
    be->bn_moments_merge = cpu_bn_moments_merge;
    be->bn_running_update = cpu_bn_running_update;
    be->maxpool_fwd = cpu_maxpool_fwd;
    be->maxpool_bwd = cpu_maxpool_bwd;
    be->avgpool_fwd = cpu_avgpool_fwd;
    be->avgpool_bwd = cpu_avgpool_bwd;
    be->add_relu = cpu_add_relu;
    be->add_relu_bwd = cpu_add_relu_bwd;
}
