/* peak.c — see peak.h. */
#include "peak.h"
#include "clock.h"

tfb_status tfb_peak_measure(tfb_backend *be, int n, int reps, double *tflops) {
    size_t elems = (size_t)n * n;
    float *buf = be->alloc(be->ctx, 3 * elems * sizeof(float));
    TFB_CHECK_ALLOC(buf);
    tfb_status st = be->fill(be->ctx, buf, 0.5f, 2 * elems);
    tfb_gemm_desc d = {.m = n, .n = n, .k = n, .alpha = 1.0f, .a = buf, .lda = n, .b = buf + elems, .ldb = n,
                       .c = buf + 2 * elems, .ldc = n, .batch = 1, .in_type = TFB_F32};
    double best = 0.0;
    for (int r = 0; r <= reps && st == TFB_OK; r++) { /* r == 0 warms up */
        double t0 = tfb_clock_s();
        st = be->gemm(be->ctx, &d);
        if (st == TFB_OK) st = be->sync(be->ctx);
        double rate = 2.0 * n * (double)n * n / (tfb_clock_s() - t0) / 1e12;
        if (r > 0 && rate > best) best = rate;
    }
    be->free(be->ctx, buf);
    *tflops = best;
    return st;
}
