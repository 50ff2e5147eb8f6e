/* cpu_margin.c — a test hook (TFB_TEST_DECISION_MARGIN): how close the forward pass's discrete decisions came to
 * going the other way. A ReLU keeps or drops its input by the input's sign; a max pool sends its gradient to the
 * window's largest value. Two runs whose arithmetic differs only in rounding (another layout, another reduction
 * order) take the same decisions where each lies further from its boundary than that rounding, and their
 * gradients then agree to rounding; a decision within rounding of its boundary can go the other way and move a
 * gradient by far more. The hook records the smallest distance seen, in units of the root mean square of the
 * tensor it was taken in, over the whole process, and prints it when the process exits, so that tests can choose
 * inputs on which comparing layouts is well posed (the reference fixtures' script does the same in float64).
 *
 * It changes nothing the ops compute and returns at once when the hook is off. It does not see the GPU backends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu.h"
#include "../act.h"

static int margin_on;                /* the process's smallest margin, printed when it exits */
static double margin_min = HUGE_VAL;

static void margin_report(void) {
    fprintf(stderr, "tfbench[rank %d]: decision margin %.6e (TFB_TEST_DECISION_MARGIN: the smallest ReLU input or "
            "max-pool gap, in units of its tensor's rms)\n", tfb_log_rank, margin_min);
}

void tfb_cpu_margin_enable(void) {
    if (margin_on || !getenv("TFB_TEST_DECISION_MARGIN")) return;
    margin_on = 1;
    atexit(margin_report);
}

double tfb_cpu_margin_take(void) {
    double m = margin_min;
    margin_min = HUGE_VAL;
    return m;
}

/* The smallest |v| / rms(v) so far, from a tensor's smallest distance and its sum of squares over n values. */
static void margin_note(double dist, double sumsq, size_t n) {
    double rms = n ? sqrt(sumsq / (double)n) : 0.0;
    if (rms > 0 && dist / rms < margin_min) margin_min = dist / rms;
}

/* The ReLU after batch norm: its inputs x * scale + shift, as bn_apply forms them; x (n, c, hw), or (n, c) rows
 * with hw 1. */
void tfb_cpu_margin_bn(const float *x, const float *mean, const float *var, const float *gamma,
                       const float *beta, int n, int c, int hw, float eps) {
    double dist = INFINITY, ss = 0;
    if (!margin_on) return;
    size_t total = (size_t)n * c * hw;
#pragma omp parallel for schedule(static) reduction(min : dist) reduction(+ : ss)
    for (size_t i = 0; i < total; i++) {
        int ch = (int)(i / (size_t)hw % (size_t)c);
        float scale, shift;
        tfb_bn_affine(mean[ch], var[ch], gamma[ch], beta[ch], eps, &scale, &shift);
        float v = tfb_bn_value(x[i], scale, shift);
        dist = fabsf(v) < dist ? fabsf(v) : dist;
        ss += (double)v * v;
    }
    margin_note(dist, ss, total);
}

/* The ReLU closing a residual block: its inputs a + b, formed in FP32 as add_relu forms them. */
void tfb_cpu_margin_add(const void *a, tfb_dtype a_type, const void *b, tfb_dtype b_type, size_t n) {
    double dist = INFINITY, ss = 0;
    if (!margin_on) return;
#pragma omp parallel for schedule(static) reduction(min : dist) reduction(+ : ss)
    for (size_t i = 0; i < n; i++) {
        float v = tfb_cpu_load(a, a_type, i) + tfb_cpu_load(b, b_type, i);
        dist = fabsf(v) < dist ? fabsf(v) : dist;
        ss += (double)v * v;
    }
    margin_note(dist, ss, n);
}

/* Element (b, ch, ih, iw) of x in the pool's layout. */
static float pool_input(const float *x, const tfb_pool_desc *d, int b, int ch, int ih, int iw) {
    if (d->layout == TFB_NHWC) return x[(((size_t)b * d->h + ih) * d->w + iw) * d->c + ch];
    return x[(((size_t)b * d->c + ch) * d->h + ih) * d->w + iw];
}

/* The gap between a window's two largest inputs (0 when they tie). */
static double pool_gap(const float *x, const tfb_pool_desc *d, int b, int ch, int i, int j) {
    float best = -INFINITY, second = -INFINITY;
    for (int a = 0; a < d->r; a++)
        for (int e = 0; e < d->r; e++) {
            int ih = i * d->stride - d->pad + a, iw = j * d->stride - d->pad + e;
            if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
            float v = pool_input(x, d, b, ch, ih, iw);
            if (v > best) { second = best; best = v; }
            else if (v > second) second = v;
        }
    /* zeros a ReLU clamped tie in every run alike, and the gradient they route stops at that ReLU */
    if (best == 0.0f && second == 0.0f) return INFINITY;
    return (double)best - (double)second;
}

/* A max pool over x (its descriptor's shape and layout): every window's gap, against the rms of x. */
void tfb_cpu_margin_pool(const float *x, const tfb_pool_desc *d) {
    double dist = INFINITY, ss = 0;
    if (!margin_on) return;
    size_t total = (size_t)d->n * d->c * d->h * d->w;
#pragma omp parallel for schedule(static) reduction(+ : ss)
    for (size_t i = 0; i < total; i++) ss += (double)x[i] * x[i];
#pragma omp parallel for collapse(2) schedule(static) reduction(min : dist)
    for (int b = 0; b < d->n; b++)
        for (int ch = 0; ch < d->c; ch++)
            for (int i = 0; i < d->p; i++)
                for (int j = 0; j < d->q; j++) {
                    double g = pool_gap(x, d, b, ch, i, j);
                    dist = g < dist ? g : dist;
                }
    margin_note(dist, ss, total);
}
