/* fd.h — the tests' random inputs and central finite differences (FP32, h = 1e-2 on O(1) inputs; the error is the
 * relative L2 norm of numeric minus analytic gradient over the whole tensor, FD_TOL at most). Header-only: each
 * test program includes it once. */
#ifndef TFB_TEST_FD_H
#define TFB_TEST_FD_H
#include <math.h>
#include <stdlib.h>

static unsigned rng_state = 12345u;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}
static float *rand_vec(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    return x;
}
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Central differences of f over x, compared with the analytic gradient g: relative L2 error. */
typedef double (*scalar_fn)(void *ctx);
static double fd_error(float *x, size_t n, const float *g, scalar_fn f, void *ctx) {
    const float h = 1e-2f;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + h;
        double fp = f(ctx);
        x[i] = save - h;
        double fm = f(ctx);
        x[i] = save;
        double d = (fp - fm) / (2 * h);
        num += (d - g[i]) * (d - g[i]);
        den += (double)g[i] * g[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}


#define FD_TOL 5e-3

#endif
