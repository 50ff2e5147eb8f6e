/* catalog.c — see catalog.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catalog.h"
#include "csv.h"
#include "config.h"

#define GPU_HEADER "name,match,cc,memory_gb,fp32,tf32,fp16,bf16,fp8,bandwidth_gbs,gpu_link,link_gbs,host_link"
#define ARCH_HEADER "arch,cc_from,cc_to,examples,tensor_core_gen,fp16_tc,bf16_tc,tf32_tc,fp8_tc," \
                    "fp32_flop_clk_sm,fp16_tc_flop_clk_sm,note"

static const char *const PREC_NAMES[TFB_N_PREC] = {"fp32", "tf32", "fp16", "bf16", "fp8"};

int tfb_prec_parse(const char *s) {
    for (int i = 0; i < TFB_N_PREC; i++)
        if (strcmp(s, PREC_NAMES[i]) == 0) return i;
    return -1;
}

const char *tfb_prec_name(tfb_prec p) { return p >= 0 && p < TFB_N_PREC ? PREC_NAMES[p] : "?"; }

tfb_prec tfb_prec_of(tfb_dtype gemm_type, int tf32) {
    if (tf32) return TFB_PREC_TF32;
    return gemm_type == TFB_F16 ? TFB_PREC_FP16 : gemm_type == TFB_BF16 ? TFB_PREC_BF16 : TFB_PREC_FP32;
}

static void copy_field(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src); }

/* "9.0" -> 90; -1 when not a compute capability. */
static int parse_cc(const char *s) {
    int major, minor, used = 0;
    if (sscanf(s, "%d.%d%n", &major, &minor, &used) != 2 || s[used] || major < 1 || major > 99 || minor < 0 ||
        minor > 9)
        return -1;
    return major * 10 + minor;
}

static tfb_status bad(char *err, size_t n, int line, const char *what) {
    snprintf(err, n, "line %d: %s", line, what);
    return TFB_ERR_ARG;
}

static tfb_status add_gpu(void *ctx, char **f, int n, int line, char *err, size_t en) {
    tfb_catalog *c = ctx;
    if (n != 13) return bad(err, en, line, "expected 13 fields");
    tfb_gpu_spec g = {0};
    copy_field(g.name, sizeof g.name, f[0]);
    copy_field(g.match, sizeof g.match, f[1]);
    for (char *p = g.match; *p; p++) *p = (char)tolower((unsigned char)*p);
    if (!g.name[0] || !g.match[0]) return bad(err, en, line, "empty name or match");
    if ((g.cc = parse_cc(f[2])) < 0) return bad(err, en, line, "cc is not a compute capability like 9.0");
    if (tfb_csv_number(f[3], 0, 0.001, 1e6, &g.memory_gb)) return bad(err, en, line, "memory_gb is not a size");
    for (int p = 0; p < TFB_N_PREC; p++)
        if (tfb_csv_number(f[4 + p], 0, 0, 1e7, &g.peak[p])) return bad(err, en, line, "a peak is not a number");
    if (tfb_csv_number(f[9], 0, 0, 1e7, &g.bandwidth_gbs)) return bad(err, en, line, "bad bandwidth_gbs");
    copy_field(g.gpu_link, sizeof g.gpu_link, f[10]);
    if (tfb_csv_number(f[11], 0, 0, 1e7, &g.link_gbs)) return bad(err, en, line, "bad link_gbs");
    copy_field(g.host_link, sizeof g.host_link, f[12]);
    return TFB_CSV_APPEND(c->gpus, c->n_gpus, g);
}

static int yes_no(const char *s) { return strcmp(s, "yes") == 0 ? 1 : strcmp(s, "no") == 0 ? 0 : -1; }

static tfb_status add_arch(void *ctx, char **f, int n, int line, char *err, size_t en) {
    tfb_catalog *c = ctx;
    if (n != 12) return bad(err, en, line, "expected 12 fields");
    tfb_gpu_arch a = {0};
    double gen;
    copy_field(a.arch, sizeof a.arch, f[0]);
    a.cc_from = parse_cc(f[1]);
    a.cc_to = parse_cc(f[2]);
    if (!a.arch[0] || a.cc_from < 0 || a.cc_to < a.cc_from) return bad(err, en, line, "bad architecture or cc range");
    copy_field(a.examples, sizeof a.examples, f[3]);
    if (tfb_csv_number(f[4], -1, 0, 99, &gen) || gen < 0) return bad(err, en, line, "bad tensor_core_gen");
    a.tc_gen = (int)gen;
    const tfb_prec order[4] = {TFB_PREC_FP16, TFB_PREC_BF16, TFB_PREC_TF32, TFB_PREC_FP8};
    for (int i = 0; i < 4; i++)
        if ((a.tc[order[i]] = yes_no(f[5 + i])) < 0) return bad(err, en, line, "tensor-core columns take yes or no");
    if (tfb_csv_number(f[9], 0, 0, 1e6, &a.fp32_rate) || tfb_csv_number(f[10], 0, 0, 1e6, &a.fp16_rate))
        return bad(err, en, line, "bad per-SM rate");
    copy_field(a.note, sizeof a.note, f[11]);
    return TFB_CSV_APPEND(c->archs, c->n_archs, a);
}

tfb_status tfb_catalog_load(tfb_catalog *c, const char *dir, char *err, size_t n) {
    char msg[600];
    memset(c, 0, sizeof *c);
    tfb_status st = tfb_csv_read_data(dir, "gpus.csv", GPU_HEADER, add_gpu, c, msg, sizeof msg);
    if (st == TFB_OK) st = tfb_csv_read_data(dir, "gpu-archs.csv", ARCH_HEADER, add_arch, c, msg, sizeof msg);
    if (st != TFB_OK) {
        snprintf(err, n, "GPU catalog: %s", msg);
        tfb_catalog_free(c);
    }
    return st;
}

void tfb_catalog_free(tfb_catalog *c) {
    free(c->gpus);
    free(c->archs);
    memset(c, 0, sizeof *c);
}

/* Does `word` appear in `name` as a whole token (tokens split at anything not a letter or digit)? */
static int has_token(const char *name, const char *word, size_t wlen) {
    for (const char *p = name; *p;) {
        while (*p && !isalnum((unsigned char)*p)) p++;
        const char *s = p;
        while (*p && isalnum((unsigned char)*p)) p++;
        if ((size_t)(p - s) == wlen && strncasecmp(s, word, wlen) == 0) return 1;
    }
    return 0;
}

/* Every '+'-joined word of one alternative [s, e) is a token of name. */
static int alternative_matches(const char *name, const char *s, const char *e) {
    while (s < e) {
        const char *plus = memchr(s, '+', (size_t)(e - s));
        const char *w_end = plus ? plus : e;
        if (!has_token(name, s, (size_t)(w_end - s))) return 0;
        s = w_end + (plus != NULL);
    }
    return 1;
}

const tfb_gpu_spec *tfb_catalog_find(const tfb_catalog *c, const char *device_name) {
    for (int i = 0; i < c->n_gpus; i++) {
        const char *m = c->gpus[i].match;
        while (*m) {
            const char *bar = strchr(m, '|'), *e = bar ? bar : m + strlen(m);
            if (e > m && alternative_matches(device_name, m, e)) return &c->gpus[i];
            m = bar ? bar + 1 : e;
        }
    }
    return NULL;
}

const tfb_gpu_arch *tfb_catalog_arch(const tfb_catalog *c, int cc) {
    for (int i = 0; i < c->n_archs; i++)
        if (cc >= c->archs[i].cc_from && cc <= c->archs[i].cc_to) return &c->archs[i];
    return NULL;
}

/* The newest architecture at or below cc with a known rate for tensor cores (tc) or FP32 cores. */
static const tfb_gpu_arch *rated_arch(const tfb_catalog *c, int cc, int tc) {
    const tfb_gpu_arch *best = NULL;
    for (int i = 0; i < c->n_archs; i++) {
        const tfb_gpu_arch *a = &c->archs[i];
        double rate = tc ? a->fp16_rate : a->fp32_rate;
        if (rate > 0 && a->cc_from <= cc && (!best || a->cc_from > best->cc_from)) best = a;
    }
    return best;
}

double tfb_catalog_peak_from_sms(const tfb_catalog *c, int cc, int sms, double clock_mhz, tfb_prec p, char *how,
                                 size_t n) {
    const tfb_gpu_arch *own = tfb_catalog_arch(c, cc);
    int tc = p != TFB_PREC_FP32 && own && own->tc[p];
    const tfb_gpu_arch *a = rated_arch(c, cc, tc);
    if (!a) { snprintf(how, n, "no architecture rate at or below CC %d.%d", cc / 10, cc % 10); return 0; }
    double rate = tc ? a->fp16_rate * (p == TFB_PREC_TF32 ? 0.5 : p == TFB_PREC_FP8 ? 2.0 : 1.0) : a->fp32_rate;
    snprintf(how, n, "%d SMs x %.0f FLOP/clock/SM (%s %s%s) x %.0f MHz", sms, rate, a->arch,
             tc ? "tensor cores" : "FP32 cores", a != own ? ", the newest rate known at or below this CC" : "",
             clock_mhz);
    return sms * rate * clock_mhz * 1e6 / 1e12;
}

const char *tfb_catalog_binary_support(int cc) {
#ifdef TFB_CUDA_SASS
    char list[] = " " TFB_CUDA_SASS " ", want[8];
    snprintf(want, sizeof want, " %d ", cc);
    if (strstr(list, want)) return "machine code";
    if (cc >= TFB_CUDA_PTX) return "PTX (JIT-compiled by the driver)";
    return "nothing for this compute capability";
#else
    (void)cc;
    return "nothing (CPU-only build)";
#endif
}
