/* test_model.c — model figures against the published ones (models.md): BERT parameter counts with pre-training
 * heads and training GFLOP per sequence computed from the layer shapes; and the order statistics the reports use.
 */
#include <math.h>
#include "check.h"
#include "../bench/bert.h"
#include "../bench/resnet.h"
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

static void test_resnet_figures(void) {
    size_t r50 = resnet_param_count(resnet_config_find("resnet50"));
    size_t r18 = resnet_param_count(resnet_config_find("resnet18"));
    EXPECT("resnet50_parameters_25557032", r50 == 25557032u, "got %zu", r50);
    EXPECT("resnet18_parameters_11689512", r18 == 11689512u, "got %zu", r18);
    double v15 = resnet_forward_macs(resnet_config_find("resnet50"), 224, 0) / 1e9;
    double v1 = resnet_forward_macs(resnet_config_find("resnet50"), 224, 1) / 1e9;
    double r18m = resnet_forward_macs(resnet_config_find("resnet18"), 224, 0) / 1e9;
    EXPECT("resnet50_v1_5_forward_4_089_gmac", fabs(v15 - 4.089) < 0.0015, "got %.4f", v15);
    EXPECT("resnet50_v1_stride_forward_3_858_gmac", fabs(v1 - 3.858) < 0.0015, "got %.4f", v1);
    EXPECT("resnet18_forward_1_82_gmac", fabs(r18m - 1.82) < 0.01, /* published 1.82 (torchvision: 1.81) */ "got %.4f", r18m);
    double train = resnet_train_flops(resnet_config_find("resnet50"), 224) / 1e9;
    EXPECT("resnet50_train_gflop_3x_minus_stem_dgrad", fabs(train - (3 * 8.178 - 0.236)) < 0.01, "got %.3f", train);
}

static void test_stats(void) {
    double x[5] = {5, 1, 4, 2, 3};
    tfb_summary s = tfb_summarize(x, 5);
    EXPECT("stats_median_and_percentiles", s.median == 3 && fabs(s.p5 - 1.2) < 1e-12 && fabs(s.p95 - 4.8) < 1e-12,
           "median %g p5 %g p95 %g", s.median, s.p5, s.p95);
    double t[3] = {10, 12, 14};
    double hw = tfb_ci95_halfwidth(t, 3); /* t(2) = 4.303, sd 2, n 3 */
    EXPECT("stats_ci95_student_t", fabs(hw - 4.303 * 2 / sqrt(3)) < 1e-9, "got %g", hw);
    double a[5] = {1, 2, 3, 4, 5}, b[5] = {6, 7, 8, 9, 10}, c[5] = {1, 3, 5, 7, 9}, d[5] = {2, 4, 6, 8, 10};
    double p_sep = tfb_mann_whitney_p(a, 5, b, 5), p_mix = tfb_mann_whitney_p(c, 5, d, 5);
    /* separated: U = 0, z = -12.5 / sqrt(25 * 11 / 12) = -2.6112, p = 0.009023; interleaved: U = 10, p = 0.6015 */
    EXPECT("mann_whitney_p_values", fabs(p_sep - 0.009023) < 2e-6 && fabs(p_mix - 0.6015) < 2e-4, "p %g %g", p_sep, p_mix);
}

int main(void) {
    test_bert_counts();
    flops_case("bert-base", 128, 20, 69.9);
    flops_case("bert-base", 512, 80, 301.4);
    flops_case("bert-large", 128, 20, 240.6);
    flops_case("bert-large", 512, 80, 1020.5);
    test_resnet_figures();
    test_stats();
    return test_failures ? 1 : 0;
}
