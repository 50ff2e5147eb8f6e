/* report_machines.c — see report_machines.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "report_machines.h"
#include "report_data.h"
#include "results_read.h"

enum { MAX_MACHINES = 32, MAX_WORKLOADS = 64, MAX_POINTS = 4096, MAX_COUNTS = 16, MAX_SERIES = 48 };

typedef struct {
    const char *reference, *prices, *format;
    double lifetime_years, kwh_price;
    int published;
} report_opts;

typedef struct {
    char label[64];
    char link[64];           /* interconnect in words */
    tfb_run_file run;
} machine;

/* What makes throughputs comparable across machines. */
typedef struct {
    char model[32], precision[16], scaling[8];
    int seq_len, image_size; /* the one that does not apply is 0 */
    int batch;               /* per device (weak scaling) or global (strong) */
} workload;

/* The best throughput of one machine for one workload at one device count. */
typedef struct {
    int workload, machine, devices;
    double tp, mfu;          /* mfu < 0: not recorded */
    double watts;            /* mean power the run measured over its timed windows; < 0: not measured */
    char strategy[24];
} point;

/* One row of a workload's table: a measured machine or a published source. */
typedef struct {
    char label[160];
    const char *link;
    int machine;             /* index, or -1 for published figures */
    int source;              /* published figures: the source's number under this table (1, 2, ...) */
    const char *source_name;
    int n, dev[MAX_COUNTS];  /* device counts, ascending */
    double tp[MAX_COUNTS], mfu[MAX_COUNTS];
    double watts[MAX_COUNTS];       /* measured mean power with that tp; < 0: not measured */
    const char *layout[MAX_COUNTS]; /* the strategy that gave tp */
} series;

typedef struct {
    report_opts o;
    machine m[MAX_MACHINES];
    int n_m, ref;
    workload w[MAX_WORKLOADS];
    int n_w;
    point p[MAX_POINTS];
    int n_p;
    tfb_prices prices;
    tfb_published_set pub;
} report;

#define USAGE "tfbench report [--reference LABEL] [--prices FILE] [--lifetime-years Y] [--kwh-price X] " \
              "[--format text|markdown|csv] [--no-published] [LABEL=]RESULTS.json ..."

static int bad(const char *fmt, const char *what) {
    fprintf(stderr, "tfbench report: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    return 0;
}

static int number_arg(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    *out = strtod(s, &end);
    if (*end || end == s || !(*out >= lo && *out <= hi)) {
        fprintf(stderr, "tfbench report: %s: expected a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return 0;
    }
    return 1;
}

static int takes_value(const char *a) {
    return strcmp(a, "--reference") == 0 || strcmp(a, "--prices") == 0 || strcmp(a, "--format") == 0 ||
           strcmp(a, "--lifetime-years") == 0 || strcmp(a, "--kwh-price") == 0;
}

/* The value v (maybe NULL) of option a, one for which takes_value holds. */
static int option_value(report_opts *o, const char *a, const char *v) {
    if (!v) return bad("%s: needs a value", a);
    if (strcmp(a, "--reference") == 0) o->reference = v;
    else if (strcmp(a, "--prices") == 0) o->prices = v;
    else if (strcmp(a, "--format") == 0) o->format = v;
    else if (strcmp(a, "--lifetime-years") == 0) return number_arg(a, v, 0.01, 100, &o->lifetime_years);
    else return number_arg(a, v, 0, 1e6, &o->kwh_price);
    return 1;
}

/* Options into r->o; files are left for machines_load (counted in *files, -1 after --help). */
static int parse_options(int argc, char **argv, report *r, int *files) {
    report_opts *o = &r->o;
    *o = (report_opts){.format = "text", .lifetime_years = 3.0, .published = 1};
    *files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (takes_value(a)) {
            if (!option_value(o, a, i + 1 < argc ? argv[i + 1] : NULL)) return 0;
            i++;
        } else if (strcmp(a, "--no-published") == 0) {
            o->published = 0;
        } else if (strcmp(a, "--help") == 0) {
            printf("usage: %s\n", USAGE);
            *files = -1;
            return 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tfbench report: %s: unknown option (usage: %s)\n", a, USAGE);
            return 0;
        } else {
            ++*files;
        }
    }
    if (strcmp(o->format, "text") != 0 && strcmp(o->format, "markdown") != 0 && strcmp(o->format, "csv") != 0)
        return bad("--format: unknown format '%s' (text, markdown, csv)", o->format);
    if (*files == 0) return bad("%s", "needs at least one results file ([LABEL=]RESULTS.json)");
    if (*files > MAX_MACHINES) return bad("%s", "at most 32 results files");
    return 1;
}

/* LABEL=PATH, or PATH labelled by its file name without folder and ".json". */
static int machine_label(const char *arg, char *label, size_t cap, const char **path) {
    const char *eq = strchr(arg, '='), *slash = strrchr(arg, '/');
    size_t n;
    if (eq && (!slash || eq < slash)) { n = (size_t)(eq - arg); *path = eq + 1; }
    else {
        const char *base = slash ? slash + 1 : arg, *dot = strrchr(base, '.');
        *path = arg;
        n = dot && strcmp(dot, ".json") == 0 ? (size_t)(dot - base) : strlen(base);
        arg = base;
    }
    if (n == 0 || n >= cap || !**path) return 0;
    memcpy(label, arg, n);
    label[n] = '\0';
    return 1;
}

/* The slowest GPU-to-GPU class in the topology matrix ("NVLink (NV12)", "PCIe (PHB)"), or "" with < 2 GPUs. */
static void gpu_link_words(const cJSON *matrix, char *out, size_t cap) {
    static const char *const ORDER[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
    int worst = -1, worst_nv = 1 << 30, n = cJSON_GetArraySize(matrix);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const cJSON *c = cJSON_GetArrayItem(cJSON_GetArrayItem(matrix, i), j);
            if (!cJSON_IsString(c)) continue;
            if (strncmp(c->valuestring, "NV", 2) == 0) {
                long links = strtol(c->valuestring + 2, NULL, 10);
                if (worst < 0 && links >= 0 && links < worst_nv) worst_nv = (int)links;
            }
            for (int k = 0; k < 5; k++)
                if (strcmp(c->valuestring, ORDER[k]) == 0 && k > worst) worst = k;
        }
    if (worst >= 0) snprintf(out, cap, "PCIe (%s)", ORDER[worst]);
    else if (worst_nv < (1 << 30)) snprintf(out, cap, "NVLink (NV%d)", worst_nv);
    else out[0] = '\0';
}

/* What the runs of a file communicated over. */
static void machine_link(machine *m) {
    int gpu = 0, nodes = 1;
    for (int i = 0; i < m->run.n_cfg; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(m->run.cfg[i].config, "backend");
        gpu |= cJSON_IsString(b) && strcmp(b->valuestring, "cpu") != 0;
        double nj = tfb_json_number(m->run.cfg[i].config, "nodes_in_job", 1);
        if (nj > nodes) nodes = nj < 1 << 24 ? (int)nj : 1 << 24;
    }
    const cJSON *topo = cJSON_GetObjectItemCaseSensitive(m->run.root, "topology");
    char words[40] = "";
    if (gpu) gpu_link_words(cJSON_GetObjectItemCaseSensitive(topo, "gpu_matrix"), words, sizeof words);
    snprintf(m->link, sizeof m->link, "%s%s", gpu ? (words[0] ? words : "GPU") : "CPU, MPI shared memory",
             nodes > 1 ? " + network" : "");
}

static void text_field(const cJSON *config, const char *key, char *out, size_t cap, const char *missing) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
    snprintf(out, cap, "%s", cJSON_IsString(v) ? v->valuestring : missing);
}

/* A whole-number field of a config within [lo, hi] into *out (`missing` when absent); 0 with a one-line reason in
 * why otherwise, so that a file with a count no run can have is refused rather than cast out of range. */
static int count_field(const cJSON *c, const char *key, double missing, double lo, double hi, int *out, char *why,
                       size_t cap) {
    double v = tfb_json_number(c, key, missing);
    if (!(v >= lo && v <= hi) || v != floor(v)) {
        snprintf(why, cap, "config field '%s' is not a whole number from %.0f to %.0f", key, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static int workload_of(const cJSON *c, workload *w, char *why, size_t cap) {
    memset(w, 0, sizeof *w);
    text_field(c, "model", w->model, sizeof w->model, "?");
    text_field(c, "precision", w->precision, sizeof w->precision, "?");
    text_field(c, "scaling", w->scaling, sizeof w->scaling, "weak");
    int ranks, per_rank, global;
    if (strncmp(w->model, "bert", 4) == 0 && !count_field(c, "seq_len", 0, 0, 1 << 24, &w->seq_len, why, cap)) return 0;
    if (strncmp(w->model, "resnet", 6) == 0 &&
        !count_field(c, "image_size", 0, 0, 1 << 24, &w->image_size, why, cap))
        return 0;
    if (!count_field(c, "ranks", 1, 1, 1 << 24, &ranks, why, cap) ||
        !count_field(c, "batch_per_rank", 0, 0, 1 << 24, &per_rank, why, cap) ||
        !count_field(c, "global_batch", (double)per_rank * ranks, 0, 1e9, &global, why, cap))
        return 0;
    w->batch = strcmp(w->scaling, "strong") == 0 ? global : global / ranks;
    return 1;
}

static int workload_index(report *r, const workload *w) {
    for (int i = 0; i < r->n_w; i++)
        if (memcmp(&r->w[i], w, sizeof *w) == 0) return i;
    if (r->n_w == MAX_WORKLOADS) return -1;
    r->w[r->n_w] = *w;
    return r->n_w++;
}

/* Keeps the best throughput per (workload, machine, devices). */
static int point_add(report *r, int m, const tfb_run_config *c, const char *path) {
    workload w;
    char why[160], msg[700];
    if (!workload_of(c->config, &w, why, sizeof why)) {
        snprintf(msg, sizeof msg, "%s: %s", path, why);
        return bad("%s", msg);
    }
    int wi = workload_index(r, &w), devices = (int)tfb_json_number(c->config, "ranks", 1);
    if (wi < 0) return bad("%s", "more than 64 distinct workloads");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(c->item, "summary");
    const cJSON *energy = cJSON_GetObjectItemCaseSensitive(sum, "energy");
    point q = {wi, m, devices, c->throughput, tfb_json_number(sum, "mfu", -1), tfb_json_number(energy, "mean_w", -1), ""};
    if (!(q.watts > 0 && q.watts < 1e9)) q.watts = -1;
    text_field(c->config, "strategy", q.strategy, sizeof q.strategy, "-");
    for (int i = 0; i < r->n_p; i++)
        if (r->p[i].workload == wi && r->p[i].machine == m && r->p[i].devices == devices) {
            if (q.tp > r->p[i].tp) r->p[i] = q;
            return 1;
        }
    if (r->n_p == MAX_POINTS) return bad("%s", "more than 4096 measurements");
    r->p[r->n_p++] = q;
    return 1;
}

static int machines_load(report *r, int argc, char **argv) {
    char err[600];
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') { i += takes_value(argv[i]); continue; }
        machine *m = &r->m[r->n_m];
        const char *path;
        if (!machine_label(argv[i], m->label, sizeof m->label, &path))
            return bad("%s: expected [LABEL=]FILE with a label of 1 to 63 characters", argv[i]);
        for (int k = 0; k < r->n_m; k++)
            if (strcmp(r->m[k].label, m->label) == 0)
                return bad("machine label '%s' is used twice (name them: LABEL=FILE)", m->label);
        int ok = tfb_run_file_load(&m->run, path, err, sizeof err);
        r->n_m++;
        if (!ok) return bad("%s", err);
        machine_link(m);
        for (int c = 0; c < m->run.n_cfg; c++)
            if (!point_add(r, r->n_m - 1, &m->run.cfg[c], path)) return 0;
    }
    return 1;
}

static int reference_find(report *r) {
    r->ref = 0;
    if (!r->o.reference) return 1;
    for (int i = 0; i < r->n_m; i++)
        if (strcmp(r->m[i].label, r->o.reference) == 0) { r->ref = i; return 1; }
    return bad("--reference: no results file is labelled '%s'", r->o.reference);
}

static int prices_load(report *r) {
    char err[700];
    if (!r->o.prices) return 1;
    if (tfb_prices_load(&r->prices, r->o.prices, err, sizeof err) != TFB_OK) return bad("--prices: %s", err);
    for (int i = 0; i < r->prices.n; i++) {
        int found = 0;
        for (int k = 0; k < r->n_m; k++) found |= strcmp(r->m[k].label, r->prices.rows[i].label) == 0;
        if (!found) fprintf(stderr, "tfbench report: note: %s lists '%s', which no results file is labelled\n",
                            r->o.prices, r->prices.rows[i].label);
    }
    return 1;
}

/* Inserts (dev, tp, mfu) keeping dev ascending; a repeated count keeps the larger throughput. */
static void series_put(series *s, int dev, double tp, double mfu, double watts, const char *layout) {
    int i = 0;
    while (i < s->n && s->dev[i] < dev) i++;
    if (i < s->n && s->dev[i] == dev) {
        if (tp > s->tp[i]) s->tp[i] = tp, s->mfu[i] = mfu, s->watts[i] = watts, s->layout[i] = layout;
        return;
    }
    if (s->n == MAX_COUNTS) return;
    int move = s->n - i;
    memmove(&s->dev[i + 1], &s->dev[i], (size_t)move * sizeof s->dev[0]);
    memmove(&s->tp[i + 1], &s->tp[i], (size_t)move * sizeof s->tp[0]);
    memmove(&s->mfu[i + 1], &s->mfu[i], (size_t)move * sizeof s->mfu[0]);
    memmove(&s->watts[i + 1], &s->watts[i], (size_t)move * sizeof s->watts[0]);
    memmove(&s->layout[i + 1], &s->layout[i], (size_t)move * sizeof s->layout[0]);
    s->dev[i] = dev, s->tp[i] = tp, s->mfu[i] = mfu, s->watts[i] = watts, s->layout[i] = layout;
    s->n++;
}

static double series_at(const series *s, int dev) {
    for (int i = 0; i < s->n; i++)
        if (s->dev[i] == dev) return s->tp[i];
    return 0;
}

static int published_matches(const tfb_published *p, const workload *w) {
    return strcmp(p->model, w->model) == 0 && strcmp(p->precision, w->precision) == 0 &&
           p->seq_len == w->seq_len && (w->image_size == 0 || p->image_size == w->image_size);
}

/* The rows of workload wi: each machine that measured it, then the published sources that match. */
static int series_build(const report *r, int wi, series *out) {
    int n = 0;
    for (int m = 0; m < r->n_m; m++) {
        series s = {.machine = m, .link = r->m[m].link};
        snprintf(s.label, sizeof s.label, "%s", r->m[m].label);
        for (int i = 0; i < r->n_p; i++)
            if (r->p[i].workload == wi && r->p[i].machine == m) series_put(&s, r->p[i].devices, r->p[i].tp, r->p[i].mfu, r->p[i].watts, r->p[i].strategy);
        if (s.n) out[n++] = s;
    }
    for (int i = 0; r->o.published && i < r->pub.n && n < MAX_SERIES; i++) {
        const tfb_published *p = &r->pub.rows[i];
        if (!published_matches(p, &r->w[wi])) continue;
        char label[160];
        snprintf(label, sizeof label, "%s", p->hardware);
        if (p->batch) snprintf(label + strlen(label), sizeof label - strlen(label), ", batch %d", p->batch);
        int k = 0, src = 1;
        while (k < n && !(out[k].machine < 0 && strcmp(out[k].label, label) == 0 &&
                          strcmp(out[k].source_name, p->source) == 0))
            k++;
        for (int j = 0; j < n; j++) /* the source's number if it has one, else the next */
            if (out[j].source >= src) src = out[j].source + 1;
        for (int j = 0; j < n; j++)
            if (out[j].source && strcmp(out[j].source_name, p->source) == 0) src = out[j].source;
        if (k == n) {
            out[n++] = (series){.machine = -1, .link = "-", .source = src, .source_name = p->source};
            snprintf(out[k].label, sizeof out[k].label, "%s", label);
        }
        series_put(&out[k], p->gpus, p->samples_per_s, -1, -1, "-");
    }
    return n;
}

/* ---- figures of a row ---- */

static double series_efficiency(const series *s) {
    double one = series_at(s, 1);
    int top = s->dev[s->n - 1];
    return one > 0 && top > 1 ? s->tp[s->n - 1] / (top * one) : -1;
}

/* Throughput relative to the reference's at the largest device count both measured; *at gets that count. */
static double series_vs(const series *s, const series *ref, int *at) {
    for (int i = s->n - 1; ref && i >= 0; i--) {
        double b = series_at(ref, s->dev[i]);
        if (b > 0) { *at = s->dev[i]; return s->tp[i] / b; }
    }
    return -1;
}

/* Power at the row's i-th device count: measured by the run, else (at the largest count) as stated in the prices
 * file; -1 when neither. *stated says which. */
static double series_power(const series *s, const tfb_price *p, int i, int *stated) {
    *stated = 0;
    if (s->watts[i] > 0) return s->watts[i];
    if (i == s->n - 1 && p && p->power_w > 0) { *stated = 1; return p->power_w; }
    return -1;
}

/* Cost of a million samples at throughput tp: the price spread over the lifetime plus the energy at `watts`. */
static double cost_per_million(const report *r, const tfb_price *p, double tp, double watts) {
    double per_s = p->price / (r->o.lifetime_years * 365.25 * 86400.0) +
                   (watts > 0 ? watts : 0) / 1000.0 * r->o.kwh_price / 3600.0;
    return 1e6 / tp * per_s;
}

/* ---- tables ---- */

enum { MAX_COLS = MAX_COUNTS + 11, CELL = 160 };

typedef struct {
    char cell[MAX_SERIES + 1][MAX_COLS][CELL];
    int rows, cols, left_cols;
} table;

static void cellf(table *t, int row, int col, const char *fmt, double v) {
    if (v < 0 || !isfinite(v)) snprintf(t->cell[row][col], CELL, "-");
    else snprintf(t->cell[row][col], CELL, fmt, v);
    if (col >= t->cols) t->cols = col + 1;
}

static void table_print(const table *t, int markdown) {
    int w[MAX_COLS] = {0};
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++)
            if ((int)strlen(t->cell[r][c]) > w[c]) w[c] = (int)strlen(t->cell[r][c]);
    for (int r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->cols; c++) {
            int width = c < t->left_cols ? -w[c] : w[c];
            if (markdown) printf("| %*s ", width, t->cell[r][c]);
            else printf("%s%*s", c ? "  " : "", width, t->cell[r][c]);
        }
        printf(markdown ? "|\n" : "\n");
        if (r == 0 && markdown) {
            for (int c = 0; c < t->cols; c++) printf("|%s", c < t->left_cols ? "---" : "---:");
            printf("|\n");
        }
    }
}

static const char *tp_format(double v) { return v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.3g"; }

static void workload_title(const workload *w, char *out, size_t cap) {
    char shape[32] = "";
    if (w->seq_len) snprintf(shape, sizeof shape, ", seq %d", w->seq_len);
    if (w->image_size) snprintf(shape, sizeof shape, ", image %d", w->image_size);
    int strong = strcmp(w->scaling, "strong") == 0;
    snprintf(out, cap, "%s %s%s, %s scaling, %sbatch %d%s", w->model, w->precision, shape, w->scaling,
             strong ? "global " : "", w->batch, strong ? "" : " per device");
}

/* The union of the rows' device counts, ascending. */
static int counts_union(const series *s, int n, int *dev) {
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < s[i].n; j++) {
            int at = 0;
            while (at < k && dev[at] < s[i].dev[j]) at++;
            if ((at < k && dev[at] == s[i].dev[j]) || k == MAX_COUNTS) continue;
            memmove(&dev[at + 1], &dev[at], (size_t)(k - at) * sizeof *dev);
            dev[at] = s[i].dev[j];
            k++;
        }
    return k;
}

static void table_header(table *t, const int *dev, int n_dev, int powered, int priced) {
    static const char *const TAIL[] = {"layout @max", "per dev @max", "eff @max", "MFU @max", "vs ref"};
    static const char *const POWER[] = {"W @max", "samples/kWh"}, *const PRICE[] = {"samples/s per 1k", "cost per M samples"};
    int c = 0;
    snprintf(t->cell[0][c++], CELL, "machine");
    snprintf(t->cell[0][c++], CELL, "interconnect");
    for (int i = 0; i < n_dev; i++) snprintf(t->cell[0][c++], CELL, "%d dev", dev[i]);
    for (int i = 0; i < 5; i++) snprintf(t->cell[0][c++], CELL, "%s", TAIL[i]);
    for (int i = 0; powered && i < 2; i++) snprintf(t->cell[0][c++], CELL, "%s", POWER[i]);
    for (int i = 0; priced && i < 2; i++) snprintf(t->cell[0][c++], CELL, "%s", PRICE[i]);
    t->cols = c, t->rows = 1, t->left_cols = 2;
}

static void table_row(table *t, const report *r, const series *s, const series *ref, const int *dev, int n_dev,
                      int powered, int priced) {
    int row = t->rows++, c = 0, top = s->dev[s->n - 1], at = 0;
    double tp_top = s->tp[s->n - 1];
    if (s->machine >= 0) snprintf(t->cell[row][c++], CELL, "%.159s", s->label);
    else snprintf(t->cell[row][c++], CELL, "published [%d]: %.130s", s->source, s->label);
    snprintf(t->cell[row][c++], CELL, "%s", s->link);
    for (int i = 0; i < n_dev; i++, c++) {
        double v = series_at(s, dev[i]);
        cellf(t, row, c, tp_format(v), v > 0 ? v : -1);
    }
    snprintf(t->cell[row][c++], CELL, "%.23s", s->layout[s->n - 1]);
    cellf(t, row, c, tp_format(tp_top / top), tp_top / top), c++;
    cellf(t, row, c, "%.1f%%", series_efficiency(s) < 0 ? -1 : 100 * series_efficiency(s)), c++;
    cellf(t, row, c, "%.1f%%", s->mfu[s->n - 1] < 0 ? -1 : 100 * s->mfu[s->n - 1]), c++;
    double vs = s->machine >= 0 && s != ref ? series_vs(s, ref, &at) : -1;
    if (s == ref) snprintf(t->cell[row][c], CELL, "ref");
    else if (vs > 0) snprintf(t->cell[row][c], CELL, "%.2fx @%d", vs, at);
    else snprintf(t->cell[row][c], CELL, "-");
    c++;
    const tfb_price *p = s->machine >= 0 ? tfb_prices_find(&r->prices, s->label) : NULL;
    int stated;
    double watts = series_power(s, p, s->n - 1, &stated), kwh = watts > 0 ? tp_top * 3.6e6 / watts : -1;
    if (powered) {
        cellf(t, row, c++, stated ? "%.0f*" : "%.0f", watts);
        cellf(t, row, c++, stated ? "%.0f*" : "%.0f", kwh);
    }
    if (!priced) return;
    double per_k = p ? tp_top * 1000.0 / p->price : -1, cost = p ? cost_per_million(r, p, tp_top, watts) : -1;
    cellf(t, row, c++, tp_format(per_k), per_k);
    cellf(t, row, c++, tp_format(cost), cost);
}

static const series *reference_series(const series *s, int n, int ref) {
    for (int i = 0; i < n; i++)
        if (s[i].machine == ref) return &s[i];
    return NULL;
}

static void workload_print_table(const report *r, int wi, int markdown) {
    static series s[MAX_SERIES];
    static table t;
    int dev[MAX_COUNTS], n = series_build(r, wi, s), n_dev = counts_union(s, n, dev), priced = r->prices.n > 0;
    int powered = priced;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < s[i].n; k++) powered |= s[i].watts[k] > 0;
    const series *ref = reference_series(s, n, r->ref);
    char title[200];
    workload_title(&r->w[wi], title, sizeof title);
    printf(markdown ? "\n**%s** (samples/s)\n\n" : "\n%s (samples/s)\n", title);
    table_header(&t, dev, n_dev, powered, priced);
    for (int i = 0; i < n; i++) table_row(&t, r, &s[i], ref, dev, n_dev, powered, priced);
    table_print(&t, markdown);
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= s[j].source == s[i].source;
        if (s[i].source && !seen) printf("%s[%d] %s: published, not measured by tfbench\n", markdown ? "\n" : "",
                                         s[i].source, s[i].source_name);
    }
}

/* ---- CSV: one line per workload, row and device count ---- */

static void csv_text(const char *s) {
    if (!strpbrk(s, ",\"\n")) { fputs(s, stdout); return; }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void csv_number(double v, int present) {
    if (present && isfinite(v)) printf(",%.6g", v);
    else printf(",");
}

static void csv_header(void) {
    printf("model,precision,seq_len,image_size,scaling,batch,machine,kind,interconnect,devices,samples_per_s,"
           "per_device,efficiency,mfu,layout,vs_reference,price,power_w,power_source,samples_per_s_per_1000,samples_per_kwh,"
           "cost_per_million_samples\n");
}

static void csv_point(const report *r, const workload *w, const series *s, const series *ref, int i) {
    const tfb_price *p = s->machine >= 0 ? tfb_prices_find(&r->prices, s->label) : NULL;
    double tp = s->tp[i], one = series_at(s, 1), base = ref && s->machine >= 0 ? series_at(ref, s->dev[i]) : 0;
    int top = i == s->n - 1;
    printf("%s,%s,%d,%d,%s,%d,", w->model, w->precision, w->seq_len, w->image_size, w->scaling, w->batch);
    if (s->machine >= 0) csv_text(s->label);
    else {
        char label[300];
        snprintf(label, sizeof label, "%s (%s)", s->label, s->source_name);
        csv_text(label);
    }
    printf(",%s,", s->machine >= 0 ? "measured" : "published");
    csv_text(s->link);
    printf(",%d", s->dev[i]);
    csv_number(tp, 1);
    csv_number(tp / s->dev[i], 1);
    csv_number(tp / (s->dev[i] * one), one > 0);
    csv_number(s->mfu[i], s->mfu[i] >= 0);
    printf(",%s", s->layout[i]);
    csv_number(tp / base, base > 0);
    int stated;
    double watts = series_power(s, p, i, &stated);
    csv_number(p ? p->price : 0, p && top);
    csv_number(watts, watts > 0);
    printf(",%s", watts > 0 ? (stated ? "stated" : "measured") : "");
    csv_number(p ? tp * 1000.0 / p->price : 0, p && top);
    csv_number(watts > 0 ? tp * 3.6e6 / watts : 0, watts > 0);
    csv_number(p ? cost_per_million(r, p, tp, watts) : 0, p && top);
    printf("\n");
}

static void workload_print_csv(const report *r, int wi) {
    static series s[MAX_SERIES];
    int n = series_build(r, wi, s);
    const series *ref = reference_series(s, n, r->ref);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) csv_point(r, &r->w[wi], &s[k], ref, i);
}

/* ---- relative throughput over all workloads ---- */

/* Geometric mean of machine m's throughput over the reference's, over every workload and device count both
 * measured; *pairs gets how many. */
static double geomean_vs_reference(const report *r, int m, int *pairs) {
    double logs = 0;
    *pairs = 0;
    for (int i = 0; i < r->n_p; i++) {
        const point *a = &r->p[i];
        if (a->machine != m) continue;
        for (int j = 0; j < r->n_p; j++) {
            const point *b = &r->p[j];
            if (b->machine != r->ref || b->workload != a->workload || b->devices != a->devices) continue;
            logs += log(a->tp / b->tp);
            ++*pairs;
        }
    }
    return *pairs ? exp(logs / *pairs) : -1;
}

static void summary_print(const report *r, int markdown) {
    static table t;
    const tfb_price *pref = tfb_prices_find(&r->prices, r->m[r->ref].label);
    int priced = r->prices.n > 0;
    printf(markdown ? "\n**relative to %s** (geometric mean)\n\n" : "\nrelative to %s (geometric mean)\n",
           r->m[r->ref].label);
    static const char *const HEAD[] = {"machine", "interconnect", "pairs", "samples/s vs ref", "per price vs ref"};
    for (int c = 0; c < 4 + priced; c++) snprintf(t.cell[0][c], CELL, "%s", HEAD[c]);
    t.rows = 1, t.cols = 4 + priced, t.left_cols = 2;
    for (int m = 0; m < r->n_m && t.rows <= MAX_SERIES; m++) {
        int pairs, row = t.rows++;
        double g = geomean_vs_reference(r, m, &pairs);
        const tfb_price *p = tfb_prices_find(&r->prices, r->m[m].label);
        snprintf(t.cell[row][0], CELL, "%s", r->m[m].label);
        snprintf(t.cell[row][1], CELL, "%s", r->m[m].link);
        snprintf(t.cell[row][2], CELL, "%d", pairs);
        cellf(&t, row, 3, "%.3fx", g);
        if (priced) cellf(&t, row, 4, "%.3fx", g > 0 && p && pref ? g * pref->price / p->price : -1);
    }
    table_print(&t, markdown);
}

static int published_shown(const report *r) {
    for (int w = 0; r->o.published && w < r->n_w; w++)
        for (int i = 0; i < r->pub.n; i++)
            if (published_matches(&r->pub.rows[i], &r->w[w])) return 1;
    return 0;
}

static void method_print(const report *r) {
    printf("\nsamples/s: the best layout (data, tensor, pipeline or hybrid) at each device count; devices = ranks, one\n"
           "  GPU each (on the CPU backend, one share of the cores each). @max: at the row's largest device count.\n"
           "eff: samples/s(N) / (N x samples/s(1 device)). MFU: as the run recorded it (model FLOPs / peak of the\n"
           "  devices used; its convention is in the results file).\n");
    printf("vs ref: samples/s / the reference machine's (%s) at the largest device count both measured.\n"
           "geometric mean: over every workload and device count that both machines measured (pairs); per price:\n"
           "  that mean x reference price / machine price.\n", r->m[r->ref].label);
    if (published_shown(r))
        printf("published [n]: figures from their sources (data/published.csv), not measured by tfbench; they enter "
               "no mean.\n");
    int any = r->prices.n > 0;
    for (int i = 0; i < r->n_p; i++) any |= r->p[i].watts > 0;
    if (any)
        printf("W: mean power over the timed windows as the run measured it (its energy counters; see the results "
           "file),\n  or, marked *, as stated in the prices file; samples/kWh = samples/s x 3.6e6 / W.\n");
    if (r->prices.n)
        printf("prices (%s), at the largest device count: samples/s per 1,000 currency units; cost per M samples =\n"
               "  1e6 / samples/s x (price / %g years + W x %g per kWh).\n", r->o.prices, r->o.lifetime_years,
               r->o.kwh_price);
}

static void report_free(report *r) {
    for (int i = 0; i < MAX_MACHINES; i++) tfb_run_file_free(&r->m[i].run);
    tfb_prices_free(&r->prices);
    tfb_published_free(&r->pub);
}

static int report_load(report *r, int argc, char **argv) {
    int files;
    char err[700];
    if (!parse_options(argc, argv, r, &files)) return 0;
    if (files < 0) return -1; /* --help */
    if (!machines_load(r, argc, argv) || !reference_find(r) || !prices_load(r)) return 0;
    if (r->o.published && tfb_published_load(&r->pub, NULL, err, sizeof err) != TFB_OK)
        return bad("published figures: %s (--no-published leaves them out)", err);
    return 1;
}

int tfb_report_main(int argc, char **argv) {
    static report r;
    memset(&r, 0, sizeof r);
    int ok = report_load(&r, argc, argv);
    if (ok < 0) return 0;
    if (ok && strcmp(r.o.format, "csv") == 0) {
        csv_header();
        for (int w = 0; w < r.n_w; w++) workload_print_csv(&r, w);
    } else if (ok) {
        int md = strcmp(r.o.format, "markdown") == 0;
        printf("tfbench report: %d machine%s, reference %s\n", r.n_m, r.n_m > 1 ? "s" : "", r.m[r.ref].label);
        for (int w = 0; w < r.n_w; w++) workload_print_table(&r, w, md);
        summary_print(&r, md);
        method_print(&r);
    }
    report_free(&r);
    return ok ? 0 : 2;
}
