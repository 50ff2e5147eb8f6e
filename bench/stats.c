/* stats.c — see stats.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "stats.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile_sorted(const double *s, size_t n, double q) {
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return s[lo] + (s[hi] - s[lo]) * (pos - (double)lo);
}

double tfb_percentile(const double *x, size_t n, double q) {
    double *s = malloc(n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double r = percentile_sorted(s, n, q);
    free(s);
    return r;
}

tfb_summary tfb_summarize(const double *x, size_t n) {
    tfb_summary r = {NAN, NAN, NAN, NAN, NAN, NAN};
    double *s = malloc(n * sizeof *s), sum = 0.0;
    if (!s || n == 0) { free(s); return r; }
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    for (size_t i = 0; i < n; i++) sum += s[i];
    r = (tfb_summary){.median = percentile_sorted(s, n, 50), .p5 = percentile_sorted(s, n, 5),
                      .p95 = percentile_sorted(s, n, 95), .min = s[0], .max = s[n - 1], .mean = sum / (double)n};
    free(s);
    return r;
}

/* Two-sided 97.5% quantile of Student's t for df degrees of freedom. */
static double t975(size_t df) {
    static const double t[] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                               2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                               2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    return df <= 30 ? t[df] : 1.96 + 2.4 / (double)df;
}

double tfb_ci95_halfwidth(const double *x, size_t n) {
    if (n < 2) return NAN;
    double mean = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return t975(n - 1) * sqrt(ss / (double)(n - 1)) / sqrt((double)n);
}

typedef struct { double v; int from_x; } ranked;

static int cmp_ranked(const void *a, const void *b) {
    double x = ((const ranked *)a)->v, y = ((const ranked *)b)->v;
    return (x > y) - (x < y);
}

double tfb_mann_whitney_p(const double *x, size_t n, const double *y, size_t m) {
    size_t N = n + m;
    if (n == 0 || m == 0) return NAN;
    ranked *all = malloc(N * sizeof *all);
    if (!all) return NAN;
    for (size_t i = 0; i < n; i++) all[i] = (ranked){x[i], 1};
    for (size_t j = 0; j < m; j++) all[n + j] = (ranked){y[j], 0};
    qsort(all, N, sizeof *all, cmp_ranked);
    double rank_x = 0, ties = 0;
    for (size_t i = 0; i < N;) {
        size_t j = i;
        while (j < N && all[j].v == all[i].v) j++;
        double t = (double)(j - i), avg = ((double)i + 1 + (double)j) / 2; /* ranks i+1 .. j share their mean */
        for (size_t k = i; k < j; k++) rank_x += all[k].from_x ? avg : 0;
        ties += t * t * t - t;
        i = j;
    }
    free(all);
    double u = rank_x - (double)n * (n + 1) / 2, mean = (double)n * m / 2;
    double var = (double)n * m / 12 * ((double)N + 1 - ties / ((double)N * (N - 1)));
    if (var <= 0) return 1.0;
    return erfc(fabs(u - mean) / sqrt(var) / sqrt(2.0));
}
