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

/* One configuration of a results file that ran. */
typedef struct {
    const cJSON *config;
    double throughput;
    double *steps;           /* per-step times (global) */
    int n_steps;
} run_config;

enum { MAX_CONFIGS = 256 };

typedef struct {
    const char *path;
    cJSON *root, *env;
    run_config cfg[MAX_CONFIGS];
    int n_cfg;
} run_file;

/* The fields that make two configurations the same experiment (a field one file lacks is not compared, so
 * schema 1 files, which predate the layout fields, still match). */
static const char *const KEY_FIELDS[] = {"model", "precision", "strategy", "scaling", "ranks", "data_parallel_size",
                                         "tensor_parallel_size", "pipeline_parallel_size", "microbatches",
                                         "pipeline_schedule", "global_batch", "batch_per_rank", "seq_len",
                                         "masked_per_sequence", "image_size", "sync_bn", NULL};
/* The fields that name a configuration within a file. */
static const char *const LAYOUT_FIELDS[] = {"strategy", "ranks", "data_parallel_size", "tensor_parallel_size",
                                            "pipeline_parallel_size", NULL};

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

static int load_steps(run_config *r, const cJSON *arr) {
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

/* One configuration object (schema 2) or the whole file (schema 1): config, throughput, per-step times. */
static int config_parse(run_config *c, const cJSON *obj) {
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(obj, "summary");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(sum, "throughput_samples_per_s");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "per_step"),
                                                          "step_time_s");
    c->config = cJSON_GetObjectItemCaseSensitive(obj, "config");
    if (!cJSON_IsObject(c->config) || !cJSON_IsNumber(tp) || !(tp->valuedouble > 0) || !cJSON_IsArray(steps) ||
        !load_steps(c, steps))
        return 0;
    c->throughput = tp->valuedouble;
    return 1;
}

/* Schema 2: every configuration that ran (skipped ones carry no measurements). */
static int configs_parse(run_file *r, const cJSON *list) {
    const cJSON *item;
    if (!cJSON_IsArray(list)) return 0;
    cJSON_ArrayForEach(item, list) {
        if (cJSON_GetObjectItemCaseSensitive(item, "skipped")) continue;
        if (r->n_cfg == MAX_CONFIGS || !config_parse(&r->cfg[r->n_cfg], item)) return 0;
        r->n_cfg++;
    }
    return r->n_cfg > 0;
}

/* Parses and validates the text of a results file into r (r->root owned by r even on failure). */
static int run_parse(run_file *r, const char *text, const char *path, char *err, size_t len) {
    r->path = path;
    r->root = cJSON_Parse(text);
    if (!cJSON_IsObject(r->root)) { snprintf(err, len, "%s: not a JSON object (truncated or not a results file)", path); return 0; }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(r->root, "schema_version");
    int v1 = cJSON_IsNumber(ver) && ver->valuedouble == 1;
    if (!cJSON_IsNumber(ver) || (!v1 && ver->valuedouble != TFB_SCHEMA_VERSION)) {
        char v[64];
        value_text(ver, v, sizeof v);
        snprintf(err, len, "%s: schema_version %s is not supported (this tfbench reads 1 and %d)", path, v,
                 TFB_SCHEMA_VERSION);
        return 0;
    }
    r->env = cJSON_GetObjectItemCaseSensitive(r->root, "environment");
    int ok = v1 ? config_parse(&r->cfg[0], r->root) : configs_parse(r, cJSON_GetObjectItemCaseSensitive(r->root,
                                                                                                      "configurations"));
    if (v1 && ok) r->n_cfg = 1;
    if (!ok) snprintf(err, len, "%s: missing or invalid config, throughput or per-step times", path);
    return ok;
}

static void run_free(run_file *r) {
    cJSON_Delete(r->root);
    for (int i = 0; i < MAX_CONFIGS; i++) free(r->cfg[i].steps);
}

static int run_load(run_file *r, const char *path, char *err, size_t len) {
    char *text = slurp(path, err, len);
    int ok = text && run_parse(r, text, path, err, len);
    free(text);
    return ok;
}

int tfb_compare_check_text(const char *text, char *err, size_t len) {
    static run_file r;
    memset(&r, 0, sizeof r);
    int ok = run_parse(&r, text, "input", err, len);
    run_free(&r);
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
            if (only && (!cJSON_GetObjectItemCaseSensitive(a, item->string) ||
                         !cJSON_GetObjectItemCaseSensitive(b, item->string)))
                continue;
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

static comparison compare_runs(const run_config *a, const run_config *b, double threshold) {
    comparison c = {.change_pct = (b->throughput / a->throughput - 1.0) * 100.0};
    c.p = tfb_mann_whitney_p(a->steps, (size_t)a->n_steps, b->steps, (size_t)b->n_steps);
    int beyond_noise = c.p < 0.01, matters = fabs(c.change_pct) >= threshold;
    c.verdict = beyond_noise && matters ? (c.change_pct < 0 ? "regression" : "improvement")
              : beyond_noise ? "unchanged (below threshold)" : "unchanged (within noise)";
    return c;
}

static void config_name(const run_config *a, char *name, size_t len) {
    char model[64] = "", prec[16] = "", ranks[16] = "", strat[32] = "", d[16] = "", t[16] = "", p[16] = "";
    const char *keys[] = {"model", "precision", "ranks", "strategy", "data_parallel_size", "tensor_parallel_size",
                          "pipeline_parallel_size"};
    char *vals[] = {model, prec, ranks, strat, d, t, p};
    size_t sizes[] = {sizeof model, sizeof prec, sizeof ranks, sizeof strat, sizeof d, sizeof t, sizeof p};
    for (int i = 0; i < 7; i++) value_text(cJSON_GetObjectItemCaseSensitive(a->config, keys[i]), vals[i], sizes[i]);
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

static void print_result(FILE *f, const compare_opts *o, const run_config *a, const run_config *b,
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
static const run_config *match(const run_config *a, const run_file *b) {
    for (int i = 0; i < b->n_cfg; i++)
        if (!print_differences(NULL, "config", a->config, b->cfg[i].config, LAYOUT_FIELDS)) return &b->cfg[i];
    return NULL;
}

/* Compares every configuration of a with its match in b; returns 1 when something regressed, 2 when the files
 * hold different experiments (and not forced). */
static int compare_files(const compare_opts *o, const run_file *a, const run_file *b) {
    int regressed = 0, rows = 0;
    for (int i = 0; i < a->n_cfg; i++) {
        const run_config *x = &a->cfg[i], *y = a->n_cfg == 1 && b->n_cfg == 1 ? &b->cfg[0] : match(x, b);
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
    static run_file a, b;
    char err[512];
    int code = 2;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (!parse_args(argc, argv, &o)) return 2;
    if (!run_load(&a, o.base, err, sizeof err) || !run_load(&b, o.new_, err, sizeof err))
        fprintf(stderr, "tfbench compare: %s\n", err);
    else
        code = compare_files(&o, &a, &b);
    run_free(&a);
    run_free(&b);
    return code;
}
