/* test_cnn_ops.c — the CPU backend's convolutional-network ops against central finite differences of
 * L = sum(out * R) (FP32, h = 1e-2, relative L2 error < 5e-3, as test_ops.c): convolution input and filter
 * gradients over several kernel sizes, strides, paddings and odd image sizes, and its forward against a direct
 * loop (also with FP16 inputs); training-mode batch norm (input, gamma, beta); max pool 3x3/2; global average pool;
 * ReLU; SGD with momentum against its closed form; running statistics against their definition. The NHWC
 * (channels-last) convolutions and pools against the NCHW ones on the same numbers reordered, and batch norm over
 * an NHWC tensor viewed as (n*h*w, c, 1) against the NCHW call. The 16-bit forms of batch norm, the convolution's
 * output, a residual block's sum + ReLU and the ReLU's backward against the FP32 ops on the widened values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fd.h"
#include "rel_error.h"
#include "../kernels/backend.h"
#include "../kernels/cpu/cpu.h"

static tfb_backend *be;

/* ---- convolution ---- */
typedef struct { tfb_conv_desc d; float *x, *w, *y, *r; } conv_case;
static double conv_loss(void *p) {
    conv_case *c = p;
    be->conv_fwd(be->ctx, &c->d, c->y, c->x, c->w);
    return dot(c->y, c->r, (size_t)c->d.n * c->d.k * c->d.p * c->d.q);
}
static double conv_direct_error(conv_case *c) {
    tfb_conv_desc *d = &c->d;
    double err = 0;
    for (int i = 0; i < d->n; i++)
        for (int k = 0; k < d->k; k++)
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++) {
                    double s = 0;
                    for (int ch = 0; ch < d->c; ch++)
                        for (int r = 0; r < d->r; r++)
                            for (int t = 0; t < d->s; t++) {
                                int ih = p * d->stride - d->pad + r, iw = q * d->stride - d->pad + t;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                                s += (double)c->x[((i * d->c + ch) * d->h + ih) * d->w + iw] *
                                     c->w[((k * d->c + ch) * d->r + r) * d->s + t];
                            }
                    err = fmax(err, fabs(s - c->y[((i * d->k + k) * d->p + p) * d->q + q]));
                }
    return err;
}
static void conv_test(int n, int ch, int h, int w, int k, int r, int stride, int pad) {
    conv_case c = {.d = {.n = n, .c = ch, .h = h, .w = w, .k = k, .r = r, .s = r, .stride = stride, .pad = pad,
                         .layout = TFB_NCHW, .in_type = TFB_F32}};
    c.d.p = (h + 2 * pad - r) / stride + 1;
    c.d.q = (w + 2 * pad - r) / stride + 1;
    size_t nx = (size_t)n * ch * h * w, nw = (size_t)k * ch * r * r, ny = (size_t)n * k * c.d.p * c.d.q;
    c.x = rand_vec(nx); c.w = rand_vec(nw); c.r = rand_vec(ny); c.y = malloc(ny * 4);
    float *dx = malloc(nx * 4), *dw = calloc(nw, 4);
    char name[96];
    conv_loss(&c);
    double ef = conv_direct_error(&c);
    be->conv_bwd_data(be->ctx, &c.d, dx, c.r, c.w);
    be->conv_bwd_filter(be->ctx, &c.d, dw, c.x, c.r);
    double ex = fd_error(c.x, nx, dx, conv_loss, &c), ew = fd_error(c.w, nw, dw, conv_loss, &c);
    snprintf(name, sizeof name, "conv_k%d_s%d_p%d_%dx%d_fwd_dx_dw", r, stride, pad, h, w);
    EXPECT(name, ef < 1e-4 && ex < FD_TOL && ew < FD_TOL, "fwd %g dx %g dw %g", ef, ex, ew);
    free(c.x); free(c.w); free(c.r); free(c.y); free(dx); free(dw);
}

static void conv_fp16_test(void) {
    conv_case c = {.d = {.n = 2, .c = 3, .h = 7, .w = 6, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1,
                         .p = 4, .q = 3, .layout = TFB_NCHW, .in_type = TFB_F16}};
    size_t nx = 2 * 3 * 7 * 6, nw = 4 * 3 * 9, ny = 2 * 4 * 4 * 3;
    c.x = rand_vec(nx); c.w = rand_vec(nw); c.y = malloc(ny * 4);
    uint16_t *x16 = malloc(nx * 2), *w16 = malloc(nw * 2);
    be->cast(be->ctx, x16, TFB_F16, c.x, TFB_F32, nx);
    be->cast(be->ctx, w16, TFB_F16, c.w, TFB_F32, nw);
    be->cast(be->ctx, c.x, TFB_F32, x16, TFB_F16, nx); /* the reference sees the rounded inputs */
    be->cast(be->ctx, c.w, TFB_F32, w16, TFB_F16, nw);
    be->conv_fwd(be->ctx, &c.d, c.y, x16, w16);
    double e = conv_direct_error(&c);
    EXPECT("conv_fp16_inputs_fp32_accumulate", e < 1e-5, "max err %g", e);
}

/* ---- batch norm in training mode: statistics of this batch ---- */
typedef struct { int n, c, hw, relu; float *x, *g, *b, *y, *mean, *var, *r; } bn_case;
static double bn_loss(void *p) {
    bn_case *c = p;
    be->bn_moments(be->ctx, c->mean, c->var, c->x, TFB_F32, c->n, c->c, c->hw);
    be->bn_apply(be->ctx, c->y, TFB_F32, c->x, TFB_F32, c->mean, c->var, c->g, c->b, c->n, c->c, c->hw, 1e-5f, c->relu);
    return dot(c->y, c->r, (size_t)c->n * c->c * c->hw);
}
static void test_batchnorm(void) {
    bn_case c = {.n = 3, .c = 4, .hw = 5};
    size_t nx = 60;
    c.x = rand_vec(nx); c.r = rand_vec(nx); c.g = rand_vec(4); c.b = rand_vec(4);
    c.y = malloc(nx * 4); c.mean = malloc(16); c.var = malloc(16);
    float *dx = malloc(nx * 4), *dg = calloc(4, 4), *db = calloc(4, 4), sdy[4], sdx[4];
    bn_loss(&c);
    be->bn_bwd_reduce(be->ctx, sdy, sdx, dg, db, c.r, TFB_F32, c.x, TFB_F32, c.mean, c.var, c.g, c.b, c.n, c.c, c.hw,
                      1e-5f, 0);
    be->bn_bwd_apply(be->ctx, dx, TFB_F32, c.r, TFB_F32, c.x, TFB_F32, c.mean, c.var, c.g, c.b, sdy, sdx, 15.0, c.n,
                     c.c, c.hw, 1e-5f, 0);
    double ex = fd_error(c.x, nx, dx, bn_loss, &c), eg = fd_error(c.g, 4, dg, bn_loss, &c);
    double eb = fd_error(c.b, 4, db, bn_loss, &c);
    EXPECT("batchnorm_train_dx_vs_fd", ex < FD_TOL, "rel err %g", ex);
    EXPECT("batchnorm_dgamma_dbeta_vs_fd", eg < FD_TOL && eb < FD_TOL, "gamma %g beta %g", eg, eb);
    float *yr = malloc(nx * 4);
    int relu_ok = 1, negatives = 0;
    bn_loss(&c); /* y again from the unperturbed inputs (fd_error leaves the last perturbed one) */
    be->bn_apply(be->ctx, yr, TFB_F32, c.x, TFB_F32, c.mean, c.var, c.g, c.b, c.n, c.c, c.hw, 1e-5f, 1);
    for (size_t i = 0; i < nx; i++) {
        negatives += c.y[i] < 0;
        relu_ok &= yr[i] == (c.y[i] > 0 ? c.y[i] : 0.0f);
    }
    EXPECT("batchnorm_apply_fused_relu", relu_ok && negatives > 0, "fused relu differs (%d negatives)", negatives);
    free(yr);
    float rm[4] = {0}, rv[4] = {1, 1, 1, 1};
    be->bn_running_update(be->ctx, rm, rv, c.mean, c.var, 4, 0.1f, 15.0);
    EXPECT("batchnorm_running_stats", fabsf(rm[1] - 0.1f * c.mean[1]) < 1e-7f &&
                                          fabsf(rv[1] - (0.9f + 0.1f * c.var[1] * 15 / 14)) < 1e-6f, "rm %g rv %g", rm[1], rv[1]);
}

/* Batch norm's backward with its fused ReLU (the mask recomputed from x) against the plain backward of dy masked
 * where the forward's output is not positive; and its 16-bit dx against the FP32 dx rounded. In the
 * NCHW shape (n, c, hw) and, with hw == 1, the (rows, c) shape of NHWC tensors. */
static void bn_relu_bwd_test(int n, int c, int hw, const char *name) {
    size_t e = (size_t)n * c * hw;
    float *x = rand_vec(e), *dy = rand_vec(e), *g = rand_vec(c), *b = rand_vec(c), *y = malloc(e * 4);
    float *dym = malloc(e * 4), *dx[2] = {malloc(e * 4), malloc(e * 4)}, *st[2] = {calloc(4 * c, 4), calloc(4 * c, 4)};
    float *mean = malloc(c * 4), *var = malloc(c * 4), *dx32 = malloc(e * 4);
    uint16_t *h[2] = {malloc(e * 2), malloc(e * 2)};
    be->bn_moments(be->ctx, mean, var, x, TFB_F32, n, c, hw);
    be->bn_apply(be->ctx, y, TFB_F32, x, TFB_F32, mean, var, g, b, n, c, hw, 1e-5f, 0);
    int masked = 0, same = 1, rounded = 1;
    for (size_t i = 0; i < e; i++) {
        dym[i] = y[i] > 0 ? dy[i] : 0.0f;
        masked += y[i] <= 0 && dy[i] != 0;
    }
    for (int relu = 0; relu < 2; relu++) {
        float *s = st[relu];
        be->bn_bwd_reduce(be->ctx, s, s + c, s + 2 * c, s + 3 * c, relu ? dy : dym, TFB_F32, x, TFB_F32, mean, var, g,
                          b, n, c, hw, 1e-5f, relu);
        be->bn_bwd_apply(be->ctx, dx[relu], TFB_F32, relu ? dy : dym, TFB_F32, x, TFB_F32, mean, var, g, b, s, s + c,
                         (double)n * hw, n, c, hw, 1e-5f, relu);
    }
    /* the same sums; a compiler may vectorise the two paths' reductions differently, so not bit for bit */
    same = tfb_rel_error(st[0], st[1], 4 * (size_t)c) < 1e-6 && tfb_rel_error(dx[0], dx[1], e) < 1e-6;
    for (int k = 0; k < 2; k++) {
        tfb_dtype t = k ? TFB_BF16 : TFB_F16;
        be->bn_bwd_apply(be->ctx, h[0], t, dy, TFB_F32, x, TFB_F32, mean, var, g, b, st[1], st[1] + c, (double)n * hw,
                         n, c, hw, 1e-5f, 1);
        be->cast(be->ctx, h[1], t, dx[1], TFB_F32, e);
        be->cast(be->ctx, dx32, TFB_F32, h[0], t, e);
        size_t nonzero = 0; /* a channel whose every output the ReLU cut has dx 0; most are not */
        for (size_t i = 0; i < e; i++) nonzero += dx32[i] != 0.0f;
        rounded &= !memcmp(h[0], h[1], e * 2) && nonzero > e / 2;
    }
    EXPECT(name, same && rounded && masked > 0, "fused relu backward %s, 16-bit dx %s (%d masked)",
           same ? "equal" : "DIFFERS", rounded ? "equal" : "DIFFERS", masked);
    free(x); free(dy); free(g); free(b); free(y); free(dym); free(dx[0]); free(dx[1]); free(st[0]); free(st[1]);
    free(mean); free(var); free(dx32); free(h[0]); free(h[1]);
}

/* Synchronised batch norm: R ranks each holding n images of the batch reach the whole batch's moments by summing
 * means, merging, and summing variance shares (what the MPI sums do between the calls). */
static void test_bn_moments_merge(int R) {
    enum { N = 2, C = 3, HW = 10 };
    size_t per = (size_t)N * C * HW;
    float *x = rand_vec(per * R), whole_mean[C], whole_var[C], mine[4][C], var[4][C], mean_sum[C] = {0};
    float merged[C], var_sum[C] = {0};
    for (int r = 0; r < R; r++) /* ranks' means apart: merging matters */
        for (size_t i = 0; i < per; i++) x[r * per + i] += 2.0f * (float)r;
    be->bn_moments(be->ctx, whole_mean, whole_var, x, TFB_F32, N * R, C, HW);
    for (int r = 0; r < R; r++) {
        be->bn_moments(be->ctx, mine[r], var[r], x + r * per, TFB_F32, N, C, HW);
        for (int ch = 0; ch < C; ch++) mean_sum[ch] += mine[r][ch];
    }
    for (int r = 0; r < R; r++) {
        float mean[C];
        memcpy(mean, mean_sum, sizeof mean);
        be->bn_moments_merge(be->ctx, mean, var[r], mine[r], C, R);
        for (int ch = 0; ch < C; ch++) var_sum[ch] += var[r][ch];
        memcpy(merged, mean, sizeof mean); /* every rank's merged mean is the same */
    }
    double em = 0, ev = 0;
    for (int ch = 0; ch < C; ch++) {
        double sd = sqrt((double)whole_var[ch]);
        em = fmax(em, fabs((double)merged[ch] - whole_mean[ch]) / sd);
        ev = fmax(ev, fabs((double)var_sum[ch] - whole_var[ch]) / whole_var[ch]);
    }
    char name[64];
    snprintf(name, sizeof name, "batchnorm_moments_merge_%d_ranks_equals_whole_batch", R);
    EXPECT(name, em < 1e-5 && ev < 1e-5, "mean %g var %g", em, ev);
    free(x);
}

/* ---- pooling ---- */
typedef struct { int n, c, h, w, p, q; float *x, *y, *r; int *arg; } pool_case;

/* The stem's 3 x 3, stride 2, pad 1 max pool of (n, c, h, w) into (p, q). */
static tfb_pool_desc pool3(int n, int c, int h, int w, int p, int q, tfb_layout layout) {
    tfb_pool_desc d = {.n = n, .c = c, .h = h, .w = w, .r = 3, .stride = 2, .pad = 1, .p = p, .q = q,
                       .layout = layout};
    return d;
}

static double maxpool_loss(void *p) {
    pool_case *c = p;
    tfb_pool_desc d = pool3(c->n, c->c, c->h, c->w, c->p, c->q, TFB_NCHW);
    be->maxpool_fwd(be->ctx, c->y, c->arg, c->x, TFB_F32, &d);
    return dot(c->y, c->r, (size_t)c->n * c->c * c->p * c->q);
}
static double avgpool_loss(void *p) {
    pool_case *c = p;
    be->avgpool_fwd(be->ctx, c->y, c->x, c->n, c->c, c->h * c->w, TFB_NCHW);
    return dot(c->y, c->r, (size_t)c->n * c->c);
}
static void test_pools(void) {
    pool_case c = {.n = 2, .c = 3, .h = 9, .w = 8, .p = 5, .q = 4};
    size_t nx = 2 * 3 * 72, ny = 2 * 3 * 20;
    c.x = rand_vec(nx); c.r = rand_vec(ny); c.y = malloc(ny * 4); c.arg = malloc(ny * sizeof(int));
    float *dx = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++) c.x[i] = 0.05f * (float)i; /* distinct values, 5h apart, shuffled: */
    for (size_t i = nx - 1; i > 0; i--) {                        /* a step of h never changes a window's max */
        size_t j = (size_t)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        float t = c.x[i]; c.x[i] = c.x[j]; c.x[j] = t;
    }
    maxpool_loss(&c);
    tfb_pool_desc d = pool3(c.n, c.c, c.h, c.w, c.p, c.q, TFB_NCHW);
    be->maxpool_bwd(be->ctx, dx, TFB_F32, c.r, TFB_F32, c.arg, &d);
    double e = fd_error(c.x, nx, dx, maxpool_loss, &c);
    EXPECT("maxpool_3x3_s2_p1_odd_vs_fd", e < FD_TOL, "rel err %g", e);
    be->avgpool_bwd(be->ctx, dx, c.r, c.n, c.c, 72, TFB_NCHW);
    e = fd_error(c.x, nx, dx, avgpool_loss, &c);
    EXPECT("global_avgpool_vs_fd", e < FD_TOL, "rel err %g", e);
}

/* ---- NHWC against NCHW on the same numbers ---- */

/* (n, c, hw) -> (n, hw, c) when to_nhwc, else back; a new array. Filters (k, c, rs) reorder the same way. */
static float *reorder(const float *x, int n, int c, int hw, int to_nhwc) {
    float *y = malloc((size_t)n * c * hw * sizeof *y);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int j = 0; j < hw; j++) {
                size_t a = ((size_t)i * c + ch) * hw + j, b = ((size_t)i * hw + j) * c + ch;
                if (to_nhwc) y[b] = x[a];
                else y[a] = x[b];
            }
    return y;
}

/* The three NHWC convolution passes (FP32, or 16-bit inputs) against NCHW on reordered copies of one draw. */
static void conv_nhwc_test(int n, int ch, int h, int k, int r, int stride, int pad, tfb_dtype t) {
    int p = (h + 2 * pad - r) / stride + 1, hw = h * h, pq = p * p, rs = r * r;
    tfb_conv_desc d = {.n = n, .c = ch, .h = h, .w = h, .k = k, .r = r, .s = r, .stride = stride, .pad = pad, .p = p,
                       .q = p, .layout = TFB_NCHW, .in_type = TFB_F32};
    size_t nx = (size_t)n * ch * hw, nw = (size_t)k * ch * rs, ny = (size_t)n * k * pq;
    float *x = rand_vec(nx), *w = rand_vec(nw), *dy = rand_vec(ny), *in[3] = {x, w, dy};
    size_t sizes[3] = {nx, nw, ny};
    for (int i = 0; i < 3 && t != TFB_F32; i++) { /* both layouts see the same rounded inputs */
        uint16_t *b = malloc(sizes[i] * 2);
        be->cast(be->ctx, b, t, in[i], TFB_F32, sizes[i]);
        be->cast(be->ctx, in[i], TFB_F32, b, t, sizes[i]);
        free(b);
    }
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = calloc(nw, 4);
    be->conv_fwd(be->ctx, &d, y, x, w);
    be->conv_bwd_data(be->ctx, &d, dx, dy, w);
    be->conv_bwd_filter(be->ctx, &d, dw, x, dy);
    float *xl = reorder(x, n, ch, hw, 1), *wl = reorder(w, k, ch, rs, 1), *dyl = reorder(dy, n, k, pq, 1);
    float *yl = malloc(ny * 4), *dxl = malloc(nx * 4), *dwl = calloc(nw, 4);
    d.layout = TFB_NHWC;
    be->conv_fwd(be->ctx, &d, yl, xl, wl);
    be->conv_bwd_data(be->ctx, &d, dxl, dyl, wl);
    be->conv_bwd_filter(be->ctx, &d, dwl, xl, dyl);
    float *yb = reorder(yl, n, k, pq, 0), *dxb = reorder(dxl, n, ch, hw, 0), *dwb = reorder(dwl, k, ch, rs, 0);
    double ey = tfb_rel_error(y, yb, ny), ex = tfb_rel_error(dx, dxb, nx), ew = tfb_rel_error(dw, dwb, nw);
    char name[96];
    snprintf(name, sizeof name, "conv_nhwc_k%d_s%d_p%d_%dx%d_%s_equals_nchw", r, stride, pad, h, h,
             t == TFB_F32 ? "fp32" : "fp16");
    EXPECT(name, ey < 1e-5 && ex < 1e-5 && ew < 1e-5, "fwd %g dx %g dw %g", ey, ex, ew);
    float *all[] = {x, w, dy, y, dx, dw, xl, wl, dyl, yl, dxl, dwl, yb, dxb, dwb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void pools_nhwc_test(void) {
    enum { N = 2, C = 5, H = 9, W = 8, P = 5, Q = 4, HW = H * W, PQ = P * Q };
    float *x = rand_vec(N * C * HW), *dy = rand_vec(N * C * PQ), y[N * C * PQ], dx[N * C * HW], ay[N * C];
    float ydx[N * C * HW], yl[N * C * PQ], dxl[N * C * HW], ayl[N * C], adxl[N * C * HW];
    int arg[N * C * PQ], argl[N * C * PQ];
    tfb_pool_desc d = pool3(N, C, H, W, P, Q, TFB_NCHW), dl = pool3(N, C, H, W, P, Q, TFB_NHWC);
    be->maxpool_fwd(be->ctx, y, arg, x, TFB_F32, &d);
    be->maxpool_bwd(be->ctx, dx, TFB_F32, dy, TFB_F32, arg, &d);
    be->avgpool_fwd(be->ctx, ay, x, N, C, HW, TFB_NCHW);
    be->avgpool_bwd(be->ctx, ydx, ay, N, C, HW, TFB_NCHW);
    float *xl = reorder(x, N, C, HW, 1), *dyl = reorder(dy, N, C, PQ, 1);
    be->maxpool_fwd(be->ctx, yl, argl, xl, TFB_F32, &dl);
    be->maxpool_bwd(be->ctx, dxl, TFB_F32, dyl, TFB_F32, argl, &dl);
    be->avgpool_fwd(be->ctx, ayl, xl, N, C, HW, TFB_NHWC);
    be->avgpool_bwd(be->ctx, adxl, ayl, N, C, HW, TFB_NHWC);
    float *yb = reorder(yl, N, C, PQ, 0), *dxb = reorder(dxl, N, C, HW, 0), *adxb = reorder(adxl, N, C, HW, 0);
    int same_arg = 1;
    for (int i = 0; i < N; i++)
        for (int ch = 0; ch < C; ch++)
            for (int o = 0; o < PQ; o++) same_arg &= arg[(i * C + ch) * PQ + o] == argl[(i * PQ + o) * C + ch];
    double e1 = tfb_rel_error(y, yb, N * C * PQ), e2 = tfb_rel_error(dx, dxb, N * C * HW);
    EXPECT("maxpool_nhwc_equals_nchw", same_arg && e1 == 0 && e2 < 1e-6, "argmax same %d fwd %g bwd %g", same_arg, e1, e2);
    double e3 = tfb_rel_error(ay, ayl, N * C), e4 = tfb_rel_error(ydx, adxb, N * C * HW);
    EXPECT("avgpool_nhwc_equals_nchw", e3 < 1e-6 && e4 < 1e-6, "fwd %g bwd %g", e3, e4);
    free(x); free(dy); free(xl); free(dyl); free(yb); free(dxb); free(adxb);
}

/* Max pooling of a 16-bit stem output in either layout: y (and argmax) equal to the FP32 op's on the widened x,
 * the backward from a 16-bit dy equal to the FP32 backward from the widened dy, and its 16-bit dx that backward
 * rounded. */
static void pools_16bit_test(tfb_dtype t, tfb_layout layout, const char *name) {
    enum { N = 2, C = 5, H = 9, W = 8, P = 5, Q = 4, HW = H * W, PQ = P * Q };
    float *x = rand_vec(N * C * HW), *dy = rand_vec(N * C * PQ), y[N * C * PQ], dx[2][N * C * HW];
    uint16_t x16[N * C * HW], y16[N * C * PQ], yr[N * C * PQ], dy16[N * C * PQ], dx16[N * C * HW], dxr[N * C * HW];
    int arg[2][N * C * PQ];
    tfb_pool_desc d = pool3(N, C, H, W, P, Q, layout);
    be->cast(be->ctx, x16, t, x, TFB_F32, N * C * HW);
    be->cast(be->ctx, x, TFB_F32, x16, t, N * C * HW);
    be->cast(be->ctx, dy16, t, dy, TFB_F32, N * C * PQ);
    be->cast(be->ctx, dy, TFB_F32, dy16, t, N * C * PQ);
    be->maxpool_fwd(be->ctx, y, arg[0], x, TFB_F32, &d);
    be->maxpool_fwd(be->ctx, y16, arg[1], x16, t, &d);
    be->maxpool_bwd(be->ctx, dx[0], TFB_F32, dy, TFB_F32, arg[0], &d);
    be->maxpool_bwd(be->ctx, dx[1], TFB_F32, dy16, t, arg[0], &d);
    memset(dx16, 0xff, sizeof dx16); /* NaN: an unwritten element fails */
    be->maxpool_bwd(be->ctx, dx16, t, dy16, t, arg[0], &d);
    be->cast(be->ctx, yr, t, y, TFB_F32, N * C * PQ);
    be->cast(be->ctx, dxr, t, dx[0], TFB_F32, N * C * HW);
    int same = !memcmp(y16, yr, sizeof yr) && !memcmp(arg[0], arg[1], sizeof arg[0]) &&
               tfb_rel_error(dx[0], dx[1], N * C * HW) == 0 && !memcmp(dx16, dxr, sizeof dxr);
    EXPECT(name, same, "16-bit max pool differs from FP32 on the widened values");
    free(x); free(dy);
}

/* Batch norm on an NHWC tensor as (n*hw, c, 1), against the NCHW call on the same numbers. */
static void bn_nhwc_test(void) {
    enum { N = 3, C = 20, HW = 10, E = N * C * HW };
    float *x = rand_vec(E), *dy = rand_vec(E), *g = rand_vec(C), *b = rand_vec(C);
    float m[2][C], v[2][C], y[E], dx[E], sdy[2][C], sdx[2][C], dg[2][C] = {{0}}, db[2][C] = {{0}}, yl[E], dxl[E];
    be->bn_moments(be->ctx, m[0], v[0], x, TFB_F32, N, C, HW);
    be->bn_apply(be->ctx, y, TFB_F32, x, TFB_F32, m[0], v[0], g, b, N, C, HW, 1e-5f, 0);
    be->bn_bwd_reduce(be->ctx, sdy[0], sdx[0], dg[0], db[0], dy, TFB_F32, x, TFB_F32, m[0], v[0], g, b, N, C, HW,
                      1e-5f, 0);
    be->bn_bwd_apply(be->ctx, dx, TFB_F32, dy, TFB_F32, x, TFB_F32, m[0], v[0], g, b, sdy[0], sdx[0], N * HW, N, C,
                     HW, 1e-5f, 0);
    float *xl = reorder(x, N, C, HW, 1), *dyl = reorder(dy, N, C, HW, 1);
    be->bn_moments(be->ctx, m[1], v[1], xl, TFB_F32, N * HW, C, 1);
    be->bn_apply(be->ctx, yl, TFB_F32, xl, TFB_F32, m[1], v[1], g, b, N * HW, C, 1, 1e-5f, 0);
    be->bn_bwd_reduce(be->ctx, sdy[1], sdx[1], dg[1], db[1], dyl, TFB_F32, xl, TFB_F32, m[1], v[1], g, b, N * HW, C,
                      1, 1e-5f, 0);
    be->bn_bwd_apply(be->ctx, dxl, TFB_F32, dyl, TFB_F32, xl, TFB_F32, m[1], v[1], g, b, sdy[1], sdx[1], N * HW,
                     N * HW, C, 1, 1e-5f, 0);
    float *yb = reorder(yl, N, C, HW, 0), *dxb = reorder(dxl, N, C, HW, 0);
    double e = fmax(tfb_rel_error(m[0], m[1], C), tfb_rel_error(v[0], v[1], C));
    e = fmax(e, fmax(tfb_rel_error(y, yb, E), tfb_rel_error(dx, dxb, E)));
    e = fmax(e, fmax(tfb_rel_error(dg[0], dg[1], C), tfb_rel_error(db[0], db[1], C)));
    EXPECT("batchnorm_nhwc_as_rows_equals_nchw", e < 1e-5, "max rel diff %g", e);
    free(x); free(dy); free(g); free(b); free(xl); free(dyl); free(yb); free(dxb);
}

/* A 16-bit network's batch norm: x (the convolution's 16-bit output), dy and y in 16 bits against the FP32 ops on
 * the same values widened, y rounded. */
static void bn_16bit_test(int n, int c, int hw, tfb_dtype t, const char *name) {
    size_t e = (size_t)n * c * hw;
    float *x = rand_vec(e), *dy = rand_vec(e), *g = rand_vec(c), *b = rand_vec(c), *y = malloc(e * 4);
    float *st[2] = {calloc(4 * c, 4), calloc(4 * c, 4)}, *dx[2] = {malloc(e * 4), malloc(e * 4)};
    uint16_t *x16 = malloc(e * 2), *y16 = malloc(e * 2), *yr = malloc(e * 2), *dy16 = malloc(e * 2);
    float mv[2][2][64];
    be->cast(be->ctx, x16, t, x, TFB_F32, e);
    be->cast(be->ctx, x, TFB_F32, x16, t, e); /* the FP32 ops see the rounded values */
    be->cast(be->ctx, dy16, t, dy, TFB_F32, e);
    be->cast(be->ctx, dy, TFB_F32, dy16, t, e);
    for (int k = 0; k < 2; k++) {
        const void *xk = k ? (const void *)x16 : x, *dyk = k ? (const void *)dy16 : dy;
        tfb_dtype xt = k ? t : TFB_F32;
        float *s = st[k];
        be->bn_moments(be->ctx, mv[k][0], mv[k][1], xk, xt, n, c, hw);
        be->bn_bwd_reduce(be->ctx, s, s + c, s + 2 * c, s + 3 * c, dyk, xt, xk, xt, mv[k][0], mv[k][1], g, b, n, c,
                          hw, 1e-5f, 1);
        be->bn_bwd_apply(be->ctx, dx[k], TFB_F32, dyk, xt, xk, xt, mv[k][0], mv[k][1], g, b, s, s + c,
                         (double)n * hw, n, c, hw, 1e-5f, 1);
    }
    be->bn_apply(be->ctx, y, TFB_F32, x, TFB_F32, mv[0][0], mv[0][1], g, b, n, c, hw, 1e-5f, 1);
    be->bn_apply(be->ctx, y16, t, x16, t, mv[1][0], mv[1][1], g, b, n, c, hw, 1e-5f, 1);
    be->cast(be->ctx, yr, t, y, TFB_F32, e);
    int same = !memcmp(mv[0][0], mv[1][0], c * 4) && !memcmp(mv[0][1], mv[1][1], c * 4) &&
               !memcmp(st[0], st[1], 4 * c * 4) &&
               !memcmp(dx[0], dx[1], e * 4) && !memcmp(y16, yr, e * 2);
    EXPECT(name, same, "16-bit batch norm differs from FP32 on the widened values");
    free(x); free(dy); free(g); free(b); free(y); free(st[0]); free(st[1]); free(dx[0]); free(dx[1]);
    free(x16); free(y16); free(yr); free(dy16);
}

/* The convolution writing a 16-bit y, and a 16-bit dx, against its FP32 y and dx rounded. */
static void conv_16bit_y_test(void) {
    tfb_conv_desc d = {.n = 2, .c = 3, .h = 7, .w = 6, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1, .p = 4, .q = 3,
                       .layout = TFB_NCHW, .in_type = TFB_F16};
    size_t nx = 2 * 3 * 7 * 6, nw = 4 * 3 * 9, ny = 2 * 4 * 4 * 3;
    float *x = rand_vec(nx), *w = rand_vec(nw), *y = malloc(ny * 4);
    uint16_t *x16 = malloc(nx * 2), *w16 = malloc(nw * 2), *y16 = malloc(ny * 2), *yr = malloc(ny * 2);
    uint16_t *dx16 = malloc(nx * 2), *dxr = malloc(nx * 2), *dy16 = malloc(ny * 2);
    float *dx = malloc(nx * 4), *dy = rand_vec(ny);
    be->cast(be->ctx, x16, TFB_F16, x, TFB_F32, nx);
    be->cast(be->ctx, w16, TFB_F16, w, TFB_F32, nw);
    be->cast(be->ctx, dy16, TFB_F16, dy, TFB_F32, ny);
    be->conv_fwd(be->ctx, &d, y, x16, w16);
    be->conv_bwd_data(be->ctx, &d, dx, dy16, w16);
    d.y_type = d.dx_type = TFB_F16;
    be->conv_fwd(be->ctx, &d, y16, x16, w16);
    be->conv_bwd_data(be->ctx, &d, dx16, dy16, w16);
    be->cast(be->ctx, yr, TFB_F16, y, TFB_F32, ny);
    be->cast(be->ctx, dxr, TFB_F16, dx, TFB_F32, nx);
    d.y_type = d.dx_type = TFB_BF16; /* neither FP32 nor the input type */
    tfb_status bad = be->conv_fwd(be->ctx, &d, y16, x16, w16), bad_dx = be->conv_bwd_data(be->ctx, &d, dx16, dy16, w16);
    EXPECT("conv_16bit_y_and_dx_are_fp32_ones_rounded",
           !memcmp(y16, yr, ny * 2) && !memcmp(dx16, dxr, nx * 2) && bad == TFB_ERR_ARG && bad_dx == TFB_ERR_ARG,
           "16-bit y or dx differs, or a mixed type was accepted (%d %d)", (int)bad, (int)bad_dx);
    free(x); free(w); free(y); free(x16); free(w16); free(y16); free(yr); free(dx16); free(dxr); free(dx);
    free(dy16); free(dy);
}

/* A residual block's sum + ReLU with 16-bit operands and output against the FP32 op on the widened operands, the
 * result rounded (also in place over a); and its backward (the sum masked by the output) likewise, and masking
 * alone against its definition. */
static void add_relu_test(tfb_dtype t, const char *name) {
    size_t n = 1001;
    float *a = rand_vec(n), *b = rand_vec(n), *y = malloc(n * 4), *aw = malloc(n * 4), *dy = rand_vec(n);
    float *d[2] = {malloc(n * 4), malloc(n * 4)}, *yw = malloc(n * 4);
    uint16_t *a16 = malloc(n * 2), *y16 = malloc(n * 2), *yr = malloc(n * 2);
    be->cast(be->ctx, a16, t, a, TFB_F32, n);
    be->cast(be->ctx, aw, TFB_F32, a16, t, n);
    int same = 1, cut = 0, kept = 0;
    for (int relu = 0; relu < 2; relu++) {
        be->add_relu(be->ctx, y, TFB_F32, aw, TFB_F32, b, TFB_F32, n, relu);
        be->add_relu(be->ctx, y16, t, a16, t, b, TFB_F32, n, relu);
        be->cast(be->ctx, yr, t, y, TFB_F32, n);
        same &= !memcmp(y16, yr, n * 2);
    }
    for (size_t i = 0; i < n; i++) {
        float v = aw[i] + b[i];
        same &= y[i] == (v > 0 ? v : 0.0f); /* the FP32 op itself */
        cut += y[i] == 0.0f;
        kept += y[i] > 0.0f;
    }
    be->add_relu(be->ctx, a16, t, a16, t, b, TFB_F32, n, 1); /* in place */
    same &= !memcmp(a16, yr, n * 2);
    be->cast(be->ctx, yw, TFB_F32, y16, t, n);
    be->add_relu_bwd(be->ctx, d[0], TFB_F32, dy, TFB_F32, NULL, TFB_F32, y16, t, n);
    for (size_t i = 0; i < n; i++) same &= d[0][i] == (yw[i] > 0 ? dy[i] : 0.0f);
    be->cast(be->ctx, a16, t, a, TFB_F32, n);
    be->add_relu_bwd(be->ctx, d[1], TFB_F32, aw, TFB_F32, b, TFB_F32, yw, TFB_F32, n);
    be->add_relu_bwd(be->ctx, a16, t, a16, t, b, TFB_F32, y16, t, n); /* in place, 16-bit */
    be->cast(be->ctx, yr, t, d[1], TFB_F32, n);
    for (size_t i = 0; i < n; i++) same &= d[1][i] == (yw[i] > 0 ? aw[i] + b[i] : 0.0f);
    same &= !memcmp(a16, yr, n * 2);
    EXPECT(name, same && cut > 0 && kept > 0, "differs from the FP32 op rounded (%d cut, %d kept)", cut, kept);
    free(a); free(b); free(y); free(aw); free(dy); free(d[0]); free(d[1]); free(yw); free(a16); free(y16); free(yr);
}

static void test_relu_sgd(void) {
    float x[4] = {-1.0f, 0.5f, 2.0f, -0.25f}, y[4], d[4] = {1, 1, 1, 1};
    be->act_fwd(be->ctx, TFB_ACT_RELU, y, x, 4);
    be->act_bwd(be->ctx, TFB_ACT_RELU, d, d, y, 4);
    EXPECT("relu_fwd_bwd", y[0] == 0 && y[2] == 2 && d[0] == 0 && d[1] == 1 && d[3] == 0, "values wrong");
    float w[1] = {2.0f}, g[1] = {0.5f}, buf[1] = {1.0f};
    tfb_sgd_hparams hp = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .grad_scale = 2.0f};
    be->sgd(be->ctx, w, g, buf, 1, &hp);
    /* buf = 0.9 * 1 + 0.5 * 2 + 0.01 * 2 = 1.92; w = 2 - 0.192 */
    EXPECT("sgd_momentum_closed_form", fabsf(buf[0] - 1.92f) < 1e-6f && fabsf(w[0] - 1.808f) < 1e-6f, "buf %g w %g",
           buf[0], w[0]);
}

/* ---- the test hook TFB_TEST_DECISION_MARGIN (kernels/cpu/cpu_margin.c) on hand-made inputs ---- */

static double rms(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i] * v[i];
    return sqrt(s / n);
}

static int near(double got, double want) { return fabs(got - want) <= 1e-5 * want; }

/* The ReLU after batch norm: the smallest |x * scale + shift| over the rms of all of them, channel by channel in
 * NCHW (n, c, hw) and in rows (n * hw, c). */
static void margin_bn_test(void) {
    float x[12] = {0.3f, -1.2f, 2.0f, 0.7f, 1.1f, -0.4f, 1.5f, 0.6f, 0.45f, -2.0f, 0.2f, 1.0f}, y[12];
    float mean[2] = {0.4f, 0.5f}, var[2] = {0.8f, 1.3f}, gamma[2] = {1.2f, 0.9f}, beta[2] = {0.1f, -0.2f};
    for (int rows = 0; rows < 2; rows++) {
        int n = rows ? 6 : 2, hw = rows ? 1 : 3;
        double v[12], dist = INFINITY;
        for (int i = 0; i < 12; i++) {
            int ch = rows ? i % 2 : i / 3 % 2;
            v[i] = (x[i] - mean[ch]) * gamma[ch] / sqrt(var[ch] + 1e-5) + beta[ch];
            dist = fmin(dist, fabs(v[i]));
        }
        be->bn_apply(be->ctx, y, TFB_F32, x, TFB_F32, mean, var, gamma, beta, n, 2, hw, 1e-5f, 0);
        double off = tfb_cpu_margin_take();
        be->bn_apply(be->ctx, y, TFB_F32, x, TFB_F32, mean, var, gamma, beta, n, 2, hw, 1e-5f, 1);
        double got = tfb_cpu_margin_take(), want = dist / rms(v, 12);
        EXPECT(rows ? "decision_margin_bn_relu_rows" : "decision_margin_bn_relu_nchw", off == HUGE_VAL && near(got, want),
               "%g, want %g (without relu %g)", got, want, off);
    }
}

/* A residual block's ReLU: |a + b|; and a max pool's gap between the two largest of a window, where zeros that
 * tie are no decision but nonzero values that tie are (margin 0). */
static void margin_add_pool_test(void) {
    float a[4] = {1.0f, -0.5f, 3.0f, 2.0f}, b[4] = {0.0f, 0.49f, 0.0f, -2.5f}, out[4];
    double v[4];
    for (int i = 0; i < 4; i++) v[i] = a[i] + b[i]; /* the sums as FP32 makes them: -0.5f + 0.49f is not -0.01 */
    be->add_relu(be->ctx, out, TFB_F32, a, TFB_F32, b, TFB_F32, 4, 1);
    double got = tfb_cpu_margin_take(), want = fabs(v[1]) / rms(v, 4);
    EXPECT("decision_margin_add_relu", near(got, want), "%g, want %g", got, want);
    /* a 4x4 plane, 2x2 windows, stride 2: gaps 0.1, none (zeros), 1.2, 1.0; channel 1 (NHWC) gaps 2 and more */
    float plane[16] = {0.9f, 0.8f, 0, 0, 0.1f, 0.2f, 0, 0, 1.5f, 0.3f, 2.0f, 1.0f, 0.2f, 0.1f, 0, 0};
    float nhwc[32], y[8];
    int arg[8];
    double p[16];
    for (int i = 0; i < 16; i++) {
        p[i] = plane[i];
        nhwc[2 * i] = plane[i];
        nhwc[2 * i + 1] = (float)(3 * i);
    }
    tfb_pool_desc d = {.n = 1, .c = 1, .h = 4, .w = 4, .r = 2, .stride = 2, .pad = 0, .p = 2, .q = 2,
                       .layout = TFB_NCHW};
    be->maxpool_fwd(be->ctx, y, arg, plane, TFB_F32, &d);
    got = tfb_cpu_margin_take();
    want = (0.9f - 0.8f) / rms(p, 16);
    EXPECT("decision_margin_maxpool_nchw", near(got, want), "%g, want %g", got, want);
    double both[32];
    for (int i = 0; i < 32; i++) both[i] = nhwc[i];
    d.c = 2;
    d.layout = TFB_NHWC;
    be->maxpool_fwd(be->ctx, y, arg, nhwc, TFB_F32, &d);
    got = tfb_cpu_margin_take();
    want = (0.9f - 0.8f) / rms(both, 32);
    EXPECT("decision_margin_maxpool_nhwc", near(got, want), "%g, want %g", got, want);
    plane[4] = 0.9f; /* a tie of nonzero values */
    d = (tfb_pool_desc){.n = 1, .c = 1, .h = 4, .w = 4, .r = 2, .stride = 2, .pad = 0, .p = 2, .q = 2};
    be->maxpool_fwd(be->ctx, y, arg, plane, TFB_F32, &d);
    got = tfb_cpu_margin_take();
    EXPECT("decision_margin_maxpool_tie_is_zero", got == 0.0, "%g", got);
}

static void test_decision_margin(void) {
    setenv("TFB_TEST_DECISION_MARGIN", "1", 1);
    tfb_cpu_margin_enable();
    tfb_cpu_margin_take();
    margin_bn_test();
    margin_add_pool_test();
}

int main(void) {
    char why[128];
    if (tfb_backend_open(&(tfb_backend_spec){.name = "cpu", .threads = 2}, &be, why, sizeof why) != TFB_OK) { printf("FAIL backend_open: %s\n", why); return 1; }
    conv_test(2, 3, 7, 6, 4, 3, 1, 1);
    conv_test(2, 3, 9, 7, 5, 3, 2, 1);
    conv_test(1, 2, 11, 11, 3, 7, 2, 3);
    conv_test(2, 4, 5, 5, 6, 1, 1, 0);
    conv_test(2, 4, 7, 7, 3, 1, 2, 0);
    conv_test(1, 3, 6, 8, 2, 2, 2, 0);
    conv_fp16_test();
    conv_nhwc_test(2, 3, 7, 4, 3, 1, 1, TFB_F32);
    conv_nhwc_test(2, 5, 9, 6, 3, 2, 1, TFB_F32);
    conv_nhwc_test(1, 3, 11, 4, 7, 2, 3, TFB_F32);
    conv_nhwc_test(3, 4, 5, 6, 1, 1, 0, TFB_F32);
    conv_nhwc_test(2, 4, 7, 3, 1, 2, 0, TFB_F32);
    conv_nhwc_test(2, 3, 6, 5, 2, 2, 0, TFB_F32);
    conv_nhwc_test(40, 3, 9, 4, 3, 1, 1, TFB_F32); /* several GEMM groups of images */
    conv_nhwc_test(2, 3, 7, 4, 3, 2, 1, TFB_F16);
    pools_nhwc_test();
    pools_16bit_test(TFB_F16, TFB_NCHW, "maxpool_fp16_x_y_dy_dx_nchw");
    pools_16bit_test(TFB_BF16, TFB_NHWC, "maxpool_bf16_x_y_dy_dx_nhwc");
    bn_nhwc_test();
    test_batchnorm();
    bn_relu_bwd_test(3, 4, 5, "batchnorm_bwd_fused_relu_and_16bit_dx_nchw");
    bn_relu_bwd_test(37, 20, 1, "batchnorm_bwd_fused_relu_and_16bit_dx_rows");
    bn_16bit_test(3, 5, 7, TFB_F16, "batchnorm_fp16_x_and_y_nchw");
    bn_16bit_test(41, 19, 1, TFB_BF16, "batchnorm_bf16_x_and_y_rows");
    conv_16bit_y_test();
    add_relu_test(TFB_F16, "add_relu_fp16_and_its_backward");
    add_relu_test(TFB_BF16, "add_relu_bf16_and_its_backward");
    test_bn_moments_merge(2);
    test_bn_moments_merge(3);
    test_pools();
    test_relu_sgd();
    test_decision_margin();
    be->destroy(be);
    return test_failures ? 1 : 0;
}
