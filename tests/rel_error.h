/* rel_error.h — the comparison every numerical test program uses: the largest |got - ref| over the largest |ref|
 * (normwise relative), infinite when either side holds a NaN (fmax alone would skip it, so a NaN could pass).
 * Header-only, one function; no test harness (check.h) and no random inputs (fd.h). */
#ifndef TFB_TEST_REL_ERROR_H
#define TFB_TEST_REL_ERROR_H
#include <math.h>
#include <stddef.h>

static inline double tfb_rel_error(const float *ref, const float *got, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isnan(got[i])) return INFINITY;
        worst = fmax(worst, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

#endif
