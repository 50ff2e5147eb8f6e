/* compare.c — see compare.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "compare.h"
#include "results_json.h"
#include "../bench/stats.h"

#define MAX_FILE_BYTES (256L << 20)

static void value_text(const cJSON *v, char *buf, size_t len);

typedef struct {
    const char *path;
    cJSON *root, *config, *env;
    double throughput;
    double *steps;           /* per-step times (global) */
    int n_steps;
} run_file;

/* The fields that make two runs the same experiment. */
static const char *const KEY_FIELDS[] = {"model", "precision", "parallel", "scaling", "ranks", "global_batch",
                                         "batch_per_rank", "seq_len", "masked_per_sequence", "image_size",
                                         "sync_bn", NULL};

static char *slurp(const char *path, char *err, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, len, "%s: cannot open (%s)", path, strerror(errno)); return NULL; }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = NULL;
    if (size < 0 || size > MAX_FILE_BYTES) snprintf(err, len, "%s: unreadable or larger than 256 MiB", path);
    else if (size == 0) snprintf(err, len, "%s: empty file", path);
    else if ((buf = malloc((size_t)size + 1)) && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)size, f) == (size_t)size)
        buf[size] = '\0';
    else { free(buf); buf = NULL; snprintf(err, len, "%s: read failed", path); }
    fclose(f);
    return buf;
}

static int load_steps(run_file *r, const cJSON *arr) {
    int n = cJSON_GetArraySize(arr);
    r->steps = n > 0 ? malloc((size_t)n * sizeof(double)) : NULL;
    if (!r->steps) return 0;
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(arr, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) return 0;
        r->steps[i] = v->valuedouble;
    }
    r->n_steps = n;
    return 1;
}

/* Parses and validates the text of a results file into r (r->root owned by r even on failure). */
static int run_parse(run_file *r, const char *text, const char *path, char *err, size_t len) {
    r->path = path;
    r->root = cJSON_Parse(text);
    if (!cJSON_IsObject(r->root)) { snprintf(err, len, "%s: not a JSON object (truncated or not a results file)", path); return 0; }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(r->root, "schema_version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != TFB_SCHEMA_VERSION) {
        char v[64];
        value_text(ver, v, sizeof v);
        snprintf(err, len, "%s: schema_version %s is not supported (this tfbench reads %d)", path, v,
                 TFB_SCHEMA_VERSION);
        return 0;
    }
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(r->root, "summary");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(sum, "throughput_samples_per_s");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->root, "per_step"),
                                                          "step_time_s");
    r->config = cJSON_GetObjectItemCaseSensitive(r->root, "config");
    r->env = cJSON_GetObjectItemCaseSensitive(r->root, "environment");
    if (!cJSON_IsObject(r->config) || !cJSON_IsNumber(tp) || !(tp->valuedouble > 0) || !cJSON_IsArray(steps) ||
        !load_steps(r, steps)) {
        snprintf(err, len, "%s: missing or invalid config, throughput or per-step times", path);
        return 0;
    }
    r->throughput = tp->valuedouble;
    return 1;
}

static int run_load(run_file *r, const char *path, char *err, size_t len) {
    char *text = slurp(path, err, len);
    int ok = text && run_parse(r, text, path, err, len);
    free(text);
    return ok;
}

int tfb_compare_check_text(const char *text, char *err, size_t len) {
    run_file r = {0};
    int ok = run_parse(&r, text, "input", err, len);
    cJSON_Delete(r.root);
    free(r.steps);
    return ok;
}

/* A scalar JSON value as text ("-" when absent). */
static void value_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) snprintf(buf, len, "%s", v->valuestring);
    else if (cJSON_IsNumber(v)) snprintf(buf, len, "%.15g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else snprintf(buf, len, "-");
}

/* Prints "  section.key: A -> B" for every scalar field of the two objects that differs; returns how many. */
static int print_differences(FILE *f, const char *section, const cJSON *a, const cJSON *b, const char *const *only) {
    int n = 0;
    const cJSON *item;
    for (int pass = 0; pass < 2; pass++) /* keys of a, then keys only in b */
        cJSON_ArrayForEach(item, (pass ? b : a)) {
            if (!item->string || cJSON_IsObject(item) || cJSON_IsArray(item)) continue;
            if (pass && cJSON_GetObjectItemCaseSensitive(a, item->string)) continue;
            int listed = !only;
            for (int i = 0; only && only[i]; i++) listed |= strcmp(only[i], item->string) == 0;
            if (!listed) continue;
            char va[256], vb[256];
            value_text(cJSON_GetObjectItemCaseSensitive(a, item->string), va, sizeof va);
            value_text(cJSON_GetObjectItemCaseSensitive(b, item->string), vb, sizeof vb);
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

static comparison compare_runs(const run_file *a, const run_file *b, double threshold) {
    comparison c = {.change_pct = (b->throughput / a->throughput - 1.0) * 100.0};
    c.p = tfb_mann_whitney_p(a->steps, (size_t)a->n_steps, b->steps, (size_t)b->n_steps);
    int beyond_noise = c.p < 0.01, matters = fabs(c.change_pct) >= threshold;
    c.verdict = beyond_noise && matters ? (c.change_pct < 0 ? "regression" : "improvement")
              : beyond_noise ? "unchanged (below threshold)" : "unchanged (within noise)";
    return c;
}

static void print_result(FILE *f, const compare_opts *o, const run_file *a, const run_file *b, const comparison *c) {
    char name[160], model[64], prec[16], ranks[16];
    value_text(cJSON_GetObjectItemCaseSensitive(a->config, "model"), model, sizeof model);
    value_text(cJSON_GetObjectItemCaseSensitive(a->config, "precision"), prec, sizeof prec);
    value_text(cJSON_GetObjectItemCaseSensitive(a->config, "ranks"), ranks, sizeof ranks);
    snprintf(name, sizeof name, "%s %s %s ranks", model, prec, ranks);
    if (strcmp(o->format, "csv") == 0) {
        fprintf(f, "configuration,base_samples_per_s,new_samples_per_s,change_pct,p_value,verdict\n");
        fprintf(f, "%s,%.6g,%.6g,%.3f,%.3g,%s\n", name, a->throughput, b->throughput, c->change_pct, c->p, c->verdict);
    } else if (strcmp(o->format, "json") == 0) {
        fprintf(f, "{\"configuration\": \"%s\", \"base_samples_per_s\": %.6g, \"new_samples_per_s\": %.6g, "
                   "\"change_pct\": %.3f, \"p_value\": %.3g, \"threshold_pct\": %g, \"verdict\": \"%s\"}\n",
                name, a->throughput, b->throughput, c->change_pct, c->p, o->threshold_pct, c->verdict);
    } else {
        const char *sep = strcmp(o->format, "markdown") == 0 ? "|" : " ";
        fprintf(f, "%s %-28s %s %14s %s %14s %s %8s %s %8s %s %-28s %s\n", sep, "configuration", sep, "base samples/s",
                sep, "new samples/s", sep, "change", sep, "p", sep, "verdict", sep);
        if (strcmp(o->format, "markdown") == 0) fprintf(f, "|---|---:|---:|---:|---:|---|\n");
        fprintf(f, "%s %-28s %s %14.2f %s %14.2f %s %+7.2f%% %s %8.2g %s %-28s %s\n", sep, name, sep, a->throughput,
                sep, b->throughput, sep, c->change_pct, sep, c->p, sep, c->verdict, sep);
        fprintf(f, "p: two-sided Mann-Whitney U on the per-step times (%d vs %d steps); beyond noise when p < 0.01 "
                   "and |change| >= %g%%\n", a->n_steps, b->n_steps, o->threshold_pct);
    }
}

int tfb_compare_main(int argc, char **argv) {
    compare_opts o;
    run_file a = {0}, b = {0};
    char err[512];
    int code = 2;
    if (!parse_args(argc, argv, &o)) return 2;
    if (!run_load(&a, o.base, err, sizeof err) || !run_load(&b, o.new_, err, sizeof err)) {
        fprintf(stderr, "tfbench compare: %s\n", err);
    } else if (print_differences(NULL, "config", a.config, b.config, KEY_FIELDS) && !o.force) {
        fprintf(stderr, "tfbench compare: the runs are different experiments (use --force to compare anyway):\n");
        print_differences(stderr, "config", a.config, b.config, KEY_FIELDS);
    } else {
        printf("environment differences:\n");
        if (!print_differences(stdout, "environment", a.env, b.env, NULL)) printf("  none\n");
        print_differences(stdout, "config", a.config, b.config, NULL);
        comparison c = compare_runs(&a, &b, o.threshold_pct);
        print_result(stdout, &o, &a, &b, &c);
        code = strcmp(c.verdict, "regression") == 0 ? 1 : 0;
    }
    cJSON_Delete(a.root);
    cJSON_Delete(b.root);
    free(a.steps);
    free(b.steps);
    return code;
}
