/* stats.h — order statistics and trial statistics for timings. Percentiles interpolate linearly between order
 * statistics (NumPy's default), so p5/p50/p95 of a handful of steps are well defined. No I/O.
 */
#ifndef TFB_STATS_H
#define TFB_STATS_H
#include <stddef.h>

typedef struct {
    double median, p5, p95, min, max, mean;
} tfb_summary;

/* Summary of x (n >= 1); x is not modified. */
tfb_summary tfb_summarize(const double *x, size_t n);
/* Percentile q in [0, 100] of x (n >= 1). */
double tfb_percentile(const double *x, size_t n, double q);
/* Half-width of the two-sided 95% confidence interval of the mean of n >= 2 independent values (Student t). */
double tfb_ci95_halfwidth(const double *x, size_t n);

/* Two-sided p-value of the Mann-Whitney U test that x (n) and y (m) come from the same distribution: normal
 * approximation with tie correction, no continuity correction. NaN when n or m is 0. */
double tfb_mann_whitney_p(const double *x, size_t n, const double *y, size_t m);

#endif
