/* test_catalog.c — the GPU catalog and architecture table (data/gpus.csv, data/gpu-archs.csv) and their reader: device names as NVML and
 * CUDA print them find the right row; each architecture's per-SM rate reproduces the datasheet peaks of its
 * catalog GPUs from their published SM counts and boost clocks (an independent check of both tables); GPUs the
 * catalog lacks get a positive peak that says how it was made; damaged files are refused naming file and line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "../bench/catalog.h"

static tfb_catalog cat;

static void test_find(void) {
    static const char *const cases[][2] = {
        {"Tesla V100-SXM2-16GB", "V100 SXM2 16GB"}, {"Tesla V100-PCIE-32GB", "V100 PCIe 32GB"},
        {"NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"}, {"NVIDIA H100 80GB HBM3", "H100 SXM5"},
        {"NVIDIA H100 PCIe", "H100 PCIe"},           {"NVIDIA H200", "H200 SXM"},
        {"Tesla T4", "Tesla T4"},                    {"NVIDIA GeForce RTX 4090", "RTX 4090"},
        {"NVIDIA L40S", "L40S"},                     {"Quadro RTX 4000", NULL},
        {"NVIDIA L4", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tfb_gpu_spec *g = tfb_catalog_find(&cat, cases[i][0]);
        char name[96];
        snprintf(name, sizeof name, "catalog_find_%s", cases[i][0]);
        for (char *p = name; *p; p++) if (*p == ' ') *p = '_';
        const char *want = cases[i][1];
        EXPECT(name, want ? g && strcmp(g->name, want) == 0 : g == NULL, "got %s", g ? g->name : "none");
    }
}

static void test_arch(void) {
    const tfb_gpu_arch *v = tfb_catalog_arch(&cat, 70), *a = tfb_catalog_arch(&cat, 86), *h = tfb_catalog_arch(&cat, 90);
    EXPECT("arch_volta_fp16_tc_no_bf16_tc", v && strcmp(v->arch, "Volta") == 0 && v->tc[TFB_PREC_FP16] &&
           !v->tc[TFB_PREC_BF16] && !v->tc[TFB_PREC_TF32], "%s", v ? v->arch : "none");
    EXPECT("arch_ampere_86_bf16_tf32_no_fp8", a && strcmp(a->arch, "Ampere") == 0 && a->tc[TFB_PREC_BF16] &&
           a->tc[TFB_PREC_TF32] && !a->tc[TFB_PREC_FP8], "%s", a ? a->arch : "none");
    EXPECT("arch_hopper_fp8", h && strcmp(h->arch, "Hopper") == 0 && h->tc[TFB_PREC_FP8], "%s", h ? h->arch : "none");
    EXPECT("arch_pascal_no_tensor_cores", tfb_catalog_arch(&cat, 60) && !tfb_catalog_arch(&cat, 60)->tc_gen, "%s", "");
    EXPECT("arch_unknown_cc_none", tfb_catalog_arch(&cat, 45) == NULL, "%s", "");
}

/* SMs x rate x boost clock against the datasheet rows: V100 SXM2 (80 SMs, 1530 MHz), A100 (108, 1410),
 * H100 SXM5 (132, 1830 for tensor cores; 1980 for FP32), T4 (40, 1590). */
static void test_peaks_from_sms(void) {
    static const struct { const char *dev; double mhz; int sms; tfb_prec p; } cases[] = {
        {"Tesla V100-SXM2-16GB", 1530, 80, TFB_PREC_FP16}, {"Tesla V100-SXM2-16GB", 1530, 80, TFB_PREC_FP32},
        {"NVIDIA A100-SXM4-40GB", 1410, 108, TFB_PREC_FP16}, {"NVIDIA A100-SXM4-40GB", 1410, 108, TFB_PREC_TF32},
        {"NVIDIA A100-SXM4-40GB", 1410, 108, TFB_PREC_FP32}, {"NVIDIA H100 80GB HBM3", 1830, 132, TFB_PREC_FP16},
        {"NVIDIA H100 80GB HBM3", 1830, 132, TFB_PREC_FP8}, {"NVIDIA H100 80GB HBM3", 1980, 132, TFB_PREC_FP32},
        {"Tesla T4", 1590, 40, TFB_PREC_FP16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tfb_gpu_spec *g = tfb_catalog_find(&cat, cases[i].dev);
        char how[160], name[96];
        double got = g ? tfb_catalog_peak_from_sms(&cat, g->cc, cases[i].sms, cases[i].mhz, cases[i].p, how, sizeof how) : 0;
        double want = g ? g->peak[cases[i].p] : -1;
        snprintf(name, sizeof name, "peak_from_sms_%s_%s_within_2pct", g ? g->name : "?", tfb_prec_name(cases[i].p));
        for (char *p = name; *p; p++) if (*p == ' ') *p = '_';
        EXPECT(name, g && fabs(got - want) <= 0.02 * want, "got %.1f want %.1f (%s)", got, want, g ? how : "");
    }
    char how[160];
    double bw = tfb_catalog_peak_from_sms(&cat, 100, 148, 1965, TFB_PREC_FP16, how, sizeof how);
    EXPECT("peak_unknown_blackwell_borrows_hopper_rate_and_says_so", bw > 0 && strstr(how, "Hopper") &&
           strstr(how, "newest rate known"), "%.1f %s", bw, how);
    double bf = tfb_catalog_peak_from_sms(&cat, 70, 80, 1530, TFB_PREC_BF16, how, sizeof how);
    EXPECT("peak_bf16_on_volta_is_fp32_cores", fabs(bf - 15.67) < 0.1 && strstr(how, "FP32 cores"), "%.2f %s", bf, how);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

static void test_bad_files(void) {
    char dir[] = "/tmp/tfb-catalog-XXXXXX", path[128], err[512];
    if (!mkdtemp(dir)) { EXPECT("catalog_tmpdir", 0, "mkdtemp failed"); return; }
    static const char *const bad[][2] = {
        {"", "empty"},
        {"name,match\n", "expected the header"},
        {"name,match,cc,memory_gb,fp32,tf32,fp16,bf16,fp8,bandwidth_gbs,gpu_link,link_gbs,host_link\nX,x,9.0,80\n", "line 2"},
        {"name,match,cc,memory_gb,fp32,tf32,fp16,bf16,fp8,bandwidth_gbs,gpu_link,link_gbs,host_link\nX,x,nine,80,1,,,,,1,none,0,\n", "compute capability"},
        {"name,match,cc,memory_gb,fp32,tf32,fp16,bf16,fp8,bandwidth_gbs,gpu_link,link_gbs,host_link\nX,x,9.0,-3,1,,,,,1,none,0,\n", "memory_gb"},
        {"name,match,cc,memory_gb,fp32,tf32,fp16,bf16,fp8,bandwidth_gbs,gpu_link,link_gbs,host_link\nX,x,9.0,80,nan,,,,,1,none,0,\n", "peak"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/gpus.csv", dir);
        write_file(path, bad[i][0]);
        tfb_catalog c;
        err[0] = '\0';
        tfb_status st = tfb_catalog_load(&c, dir, err, sizeof err);
        char name[64];
        snprintf(name, sizeof name, "catalog_refuses_bad_file_%zu", i);
        EXPECT(name, st != TFB_OK && strstr(err, "gpus.csv") && strstr(err, bad[i][1]), "status %d: %s", st, err);
    }
    snprintf(path, sizeof path, "%s/gpus.csv", dir);
    remove(path);
    tfb_catalog c;
    EXPECT("catalog_missing_file_named", tfb_catalog_load(&c, dir, err, sizeof err) == TFB_ERR_IO && strstr(err, "gpus.csv"),
           "%s", err);
    rmdir(dir);
}

int main(void) {
    char err[512];
    tfb_status st = tfb_catalog_load(&cat, "data", err, sizeof err);
    EXPECT("catalog_loads", st == TFB_OK && cat.n_gpus >= 15 && cat.n_archs >= 12, "%s", err);
    if (st != TFB_OK) return 1;
    test_find();
    test_arch();
    test_peaks_from_sms();
    test_bad_files();
    tfb_catalog_free(&cat);
    return test_failures ? 1 : 0;
}
