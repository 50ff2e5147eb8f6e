/* test_model.c — model figures against the published ones (models.md): BERT parameter counts with pre-training
 * heads and training GFLOP per sequence computed from the layer shapes; and the order statistics the reports use.
 */
#include <math.h>
#include "check.h"
#include "../bench/bert.h"
#include "../bench/stats.h"

static void test_bert_counts(void) {
    size_t base = bert_param_count(bert_config_find("bert-base"));
    size_t large = bert_param_count(bert_config_find("bert-large"));
    EXPECT("bert_base_parameters_110106428", base == 110106428u, "got %zu", base);
    EXPECT("bert_large_parameters_336226108", large == 336226108u, "got %zu", large);
}

static void flops_case(const char *model, int s, int masked, double want) {
    char name[64];
    double got = bert_train_flops(bert_config_find(model), s, masked) / 1e9;
    snprintf(name, sizeof name, "%s_s%d_train_gflop_%.1f", model, s, want);
    EXPECT(name, fabs(got - want) < 0.05, "got %.2f", got);
}

static void test_stats(void) {
    double x[5] = {5, 1, 4, 2, 3};
    tfb_summary s = tfb_summarize(x, 5);
    EXPECT("stats_median_and_percentiles", s.median == 3 && fabs(s.p5 - 1.2) < 1e-12 && fabs(s.p95 - 4.8) < 1e-12,
           "median %g p5 %g p95 %g", s.median, s.p5, s.p95);
    double t[3] = {10, 12, 14};
    double hw = tfb_ci95_halfwidth(t, 3); /* t(2) = 4.303, sd 2, n 3 */
    EXPECT("stats_ci95_student_t", fabs(hw - 4.303 * 2 / sqrt(3)) < 1e-9, "got %g", hw);
}

int main(void) {
    test_bert_counts();
    flops_case("bert-base", 128, 20, 69.9);
    flops_case("bert-base", 512, 80, 301.4);
    flops_case("bert-large", 128, 20, 240.6);
    flops_case("bert-large", 512, 80, 1020.5);
    test_stats();
    return test_failures ? 1 : 0;
}
