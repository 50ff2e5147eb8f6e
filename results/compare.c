/* compare.c — see compare.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "compare.h"
#include "results_read.h"
#include "../bench/stats.h"

/* The fields that make two configurations the same experiment (a field one file lacks is not compared, so
 * schema 1 files, which predate the layout fields, still match). */
static const char *const KEY_FIELDS[] = {"model", "precision", "strategy", "scaling", "ranks", "data_parallel_size",
                                         "tensor_parallel_size", "pipeline_parallel_size", "microbatches",
                                         "pipeline_schedule", "global_batch", "batch_per_rank", "seq_len",
                                         "masked_per_sequence", "attention", "image_size", "sync_bn", "conv_layout",
                                         NULL};
/* The fields that name a configuration within a file. */
static const char *const LAYOUT_FIELDS[] = {"strategy", "ranks", "data_parallel_size", "tensor_parallel_size",
                                            "pipeline_parallel_size", NULL};

int tfb_compare_check_text(const char *text, char *err, size_t len) {
    static tfb_run_file r;
    int ok = tfb_run_file_parse(&r, text, "input", err, len);
    tfb_run_file_free(&r);
    return ok;
}

/* Prints "  section.key: A -> B" for every scalar field of the two objects that differs; returns how many. */
static int print_differences(FILE *f, const char *section, const cJSON *a, const cJSON *b, const char *const *only) {
    int n = 0;
    const cJSON *item;
    for (int pass = 0; pass < 2; pass++) /* keys of a, then keys only in b */
        cJSON_ArrayForEach(item, (pass ? b : a)) {
            if (!item->string || cJSON_IsObject(item) || cJSON_IsArray(item)) continue;
            if (pass && cJSON_GetObjectItemCaseSensitive(a, item->string)) continue;
            if (only && (!cJSON_GetObjectItemCaseSensitive(a, item->string) ||
                         !cJSON_GetObjectItemCaseSensitive(b, item->string)))
                continue;
            int listed = !only;
            for (int i = 0; only && only[i]; i++) listed |= strcmp(only[i], item->string) == 0;
            if (!listed) continue;
            char va[256], vb[256];
            tfb_json_value_text(cJSON_GetObjectItemCaseSensitive(a, item->string), va, sizeof va);
            tfb_json_value_text(cJSON_GetObjectItemCaseSensitive(b, item->string), vb, sizeof vb);
            if (strcmp(va, vb) == 0) continue;
            if (f) fprintf(f, "  %s.%s: %s -> %s\n", section, item->string, va, vb);
            n++;
        }
    return n;
}

typedef struct {
    double threshold_pct;
    const char *format;
    int force;
    const char *base, *new_;
} compare_opts;

static int parse_args(int argc, char **argv, compare_opts *o) {
    *o = (compare_opts){.threshold_pct = 3.0, .format = "text"};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: tfbench compare [--threshold PCT] [--format text|markdown|csv|json] [--force] BASE.json "
                   "NEW.json\n  exit 0: nothing regressed; 1: a regression beyond --threshold and noise; 2: bad "
                   "input\n");
            return -1;
        }
        if (strcmp(argv[i], "--force") == 0) o->force = 1;
        else if (strcmp(argv[i], "--threshold") == 0 && i + 1 < argc) {
            char *end;
            o->threshold_pct = strtod(argv[++i], &end);
            if (*end || !(o->threshold_pct >= 0) || o->threshold_pct > 1000) {
                fprintf(stderr, "tfbench compare: --threshold: expected a percentage, got '%s'\n", argv[i]);
                return 0;
            }
        } else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            o->format = argv[++i];
            if (strcmp(o->format, "text") != 0 && strcmp(o->format, "markdown") != 0 &&
                strcmp(o->format, "csv") != 0 && strcmp(o->format, "json") != 0) {
                fprintf(stderr, "tfbench compare: --format: unknown format '%s' (text, markdown, csv, json)\n", o->format);
                return 0;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "tfbench compare: %s: unknown option (usage: tfbench compare [--threshold PCT] "
                            "[--format text|markdown|csv|json] [--force] BASE.json NEW.json)\n", argv[i]);
            return 0;
        } else if (!o->base) o->base = argv[i];
        else if (!o->new_) o->new_ = argv[i];
        else { fprintf(stderr, "tfbench compare: %s: only two results files are compared\n", argv[i]); return 0; }
    }
    if (!o->new_) fprintf(stderr, "tfbench compare: needs BASE.json and NEW.json\n");
    return o->new_ != NULL;
}

typedef struct {
    double change_pct, p;
    const char *verdict;
} comparison;

static comparison compare_runs(const tfb_run_config *a, const tfb_run_config *b, double threshold) {
    comparison c = {.change_pct = (b->throughput / a->throughput - 1.0) * 100.0};
    c.p = tfb_mann_whitney_p(a->steps, (size_t)a->n_steps, b->steps, (size_t)b->n_steps);
    int beyond_noise = c.p < 0.01, matters = fabs(c.change_pct) >= threshold;
    c.verdict = beyond_noise && matters ? (c.change_pct < 0 ? "regression" : "improvement")
              : beyond_noise ? "unchanged (below threshold)" : "unchanged (within noise)";
    return c;
}

static void config_name(const tfb_run_config *a, char *name, size_t len) {
    char model[64] = "", prec[16] = "", ranks[16] = "", strat[32] = "", d[16] = "", t[16] = "", p[16] = "";
    const char *keys[] = {"model", "precision", "ranks", "strategy", "data_parallel_size", "tensor_parallel_size",
                          "pipeline_parallel_size"};
    char *vals[] = {model, prec, ranks, strat, d, t, p};
    size_t sizes[] = {sizeof model, sizeof prec, sizeof ranks, sizeof strat, sizeof d, sizeof t, sizeof p};
    for (int i = 0; i < 7; i++) tfb_json_value_text(cJSON_GetObjectItemCaseSensitive(a->config, keys[i]), vals[i], sizes[i]);
    if (strcmp(strat, "-") == 0) snprintf(name, len, "%s %s %s ranks", model, prec, ranks);
    else snprintf(name, len, "%s %s %s %sx%sx%s", model, prec, strat, d, t, p);
}

static void print_header(FILE *f, const compare_opts *o) {
    if (strcmp(o->format, "csv") == 0) {
        fprintf(f, "configuration,base_samples_per_s,new_samples_per_s,change_pct,p_value,verdict\n");
    } else if (strcmp(o->format, "text") == 0 || strcmp(o->format, "markdown") == 0) {
        const char *sep = strcmp(o->format, "markdown") == 0 ? "|" : " ";
        fprintf(f, "%s %-36s %s %14s %s %14s %s %8s %s %8s %s %-28s %s\n", sep, "configuration", sep, "base samples/s",
                sep, "new samples/s", sep, "change", sep, "p", sep, "verdict", sep);
        if (strcmp(o->format, "markdown") == 0) fprintf(f, "|---|---:|---:|---:|---:|---|\n");
    }
}

static void print_result(FILE *f, const compare_opts *o, const tfb_run_config *a, const tfb_run_config *b,
                         const comparison *c) {
    char name[200];
    config_name(a, name, sizeof name);
    if (strcmp(o->format, "csv") == 0) {
        fprintf(f, "%s,%.6g,%.6g,%.3f,%.3g,%s\n", name, a->throughput, b->throughput, c->change_pct, c->p, c->verdict);
    } else if (strcmp(o->format, "json") == 0) {
        fprintf(f, "{\"configuration\": \"%s\", \"base_samples_per_s\": %.6g, \"new_samples_per_s\": %.6g, "
                   "\"change_pct\": %.3f, \"p_value\": %.3g, \"threshold_pct\": %g, \"verdict\": \"%s\"}\n",
                name, a->throughput, b->throughput, c->change_pct, c->p, o->threshold_pct, c->verdict);
    } else {
        const char *sep = strcmp(o->format, "markdown") == 0 ? "|" : " ";
        fprintf(f, "%s %-36s %s %14.2f %s %14.2f %s %+7.2f%% %s %8.2g %s %-28s %s\n", sep, name, sep, a->throughput,
                sep, b->throughput, sep, c->change_pct, sep, c->p, sep, c->verdict, sep);
    }
}

/* The configuration of b with the same layout as a, or NULL. */
static const tfb_run_config *match(const tfb_run_config *a, const tfb_run_file *b) {
    for (int i = 0; i < b->n_cfg; i++)
        if (!print_differences(NULL, "config", a->config, b->cfg[i].config, LAYOUT_FIELDS)) return &b->cfg[i];
    return NULL;
}

/* Compares every configuration of a with its match in b; returns 1 when something regressed, 2 when the files
 * hold different experiments (and not forced). */
static int compare_files(const compare_opts *o, const tfb_run_file *a, const tfb_run_file *b) {
    int regressed = 0, rows = 0;
    for (int i = 0; i < a->n_cfg; i++) {
        const tfb_run_config *x = &a->cfg[i], *y = a->n_cfg == 1 && b->n_cfg == 1 ? &b->cfg[0] : match(x, b);
        if (!y) continue;
        if (print_differences(NULL, "config", x->config, y->config, KEY_FIELDS) && !o->force) {
            fprintf(stderr, "tfbench compare: the runs are different experiments (use --force to compare anyway):\n");
            print_differences(stderr, "config", x->config, y->config, KEY_FIELDS);
            return 2;
        }
        if (rows++ == 0) {
            printf("environment differences:\n");
            int n = print_differences(stdout, "environment", a->env, b->env, NULL);
            n += print_differences(stdout, "environment.variables", cJSON_GetObjectItemCaseSensitive(a->env, "variables"),
                                   cJSON_GetObjectItemCaseSensitive(b->env, "variables"), NULL);
            if (!n) printf("  none\n");
            print_differences(stdout, "config", x->config, y->config, NULL);
            print_header(stdout, o);
        }
        comparison c = compare_runs(x, y, o->threshold_pct);
        print_result(stdout, o, x, y, &c);
        regressed |= strcmp(c.verdict, "regression") == 0;
    }
    if (rows == 0) {
        fprintf(stderr, "tfbench compare: no configuration of %s appears in %s\n", a->path, b->path);
        return 2;
    }
    if (strcmp(o->format, "text") == 0 || strcmp(o->format, "markdown") == 0)
        printf("p: two-sided Mann-Whitney U on the per-step times; beyond noise when p < 0.01 and |change| >= %g%%\n",
               o->threshold_pct);
    return regressed;
}

int tfb_compare_main(int argc, char **argv) {
    compare_opts o;
    static tfb_run_file a, b;
    char err[512];
    int code = 2;
    int parsed = parse_args(argc, argv, &o);
    if (parsed <= 0) return parsed < 0 ? 0 : 2;
    if (!tfb_run_file_load(&a, o.base, err, sizeof err) || !tfb_run_file_load(&b, o.new_, err, sizeof err))
        fprintf(stderr, "tfbench compare: %s\n", err);
    else
        code = compare_files(&o, &a, &b);
    tfb_run_file_free(&a);
    tfb_run_file_free(&b);
    return code;
}
