/* update.h — the AdamW and SGD updates of one element, written once as inline C that both backends use (TFB_HD from
 * philox.h: host and device), and the weight-decay runs that let one call update a whole parameter pool.
 *
 * AdamW (decoupled decay): m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *                          w -= lr (m c1 / (sqrt(v c2) + eps) + decay w),  c1, c2 the bias corrections.
 * SGD with momentum:       buf = momentum buf + g + decay w;  w -= lr buf.
 * g is the stored gradient times grad_scale (the loss-scale unscale folded in). It deliberately holds no loop.
 */
#ifndef TFB_UPDATE_H
#define TFB_UPDATE_H
#include <math.h>
#include <stdint.h>
#include "backend.h"

/* AdamW's bias corrections for hp->step: c1 = 1 / (1 - b1^step), c2 = 1 / (1 - b2^step). */
TFB_HD void tfb_adamw_corrections(const tfb_adamw_hparams *hp, float *c1, float *c2) {
    *c1 = 1.0f / (1.0f - powf(hp->beta1, (float)hp->step));
    *c2 = 1.0f / (1.0f - powf(hp->beta2, (float)hp->step));
}

TFB_HD void tfb_adamw_elem(float *w, float g, float *m, float *v, const tfb_adamw_hparams *hp, float decay, float c1,
                           float c2) {
    float gi = g * hp->grad_scale;
    float mi = hp->beta1 * *m + (1.0f - hp->beta1) * gi;
    float vi = hp->beta2 * *v + (1.0f - hp->beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float update = (mi * c1) / (sqrtf(vi * c2) + hp->eps);
    *w -= hp->lr * (update + decay * *w);
}

TFB_HD void tfb_sgd_elem(float *w, float g, float *buf, const tfb_sgd_hparams *hp, float decay) {
    float b = hp->momentum * *buf + g * hp->grad_scale + decay * *w;
    *buf = b;
    *w -= hp->lr * b;
}

/* Whether element i lies in one of the n ascending, disjoint runs [runs[2k], runs[2k + 1]). */
TFB_HD int tfb_runs_contain(const uint64_t *runs, int n, uint64_t i) {
    int lo = 0, hi = n; /* the first run that ends after i is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (runs[2 * mid + 1] <= i) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && runs[2 * lo] <= i;
}

#endif
