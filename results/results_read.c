/* results_read.c — see results_read.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "results_read.h"
#include "results_json.h"

#define MAX_FILE_BYTES (256L << 20)

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

static int load_steps(tfb_run_config *r, const cJSON *arr) {
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
static int config_parse(tfb_run_config *c, const cJSON *obj) {
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(obj, "summary");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(sum, "throughput_samples_per_s");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "per_step"),
                                                          "step_time_s");
    c->item = obj;
    c->config = cJSON_GetObjectItemCaseSensitive(obj, "config");
    if (!cJSON_IsObject(c->config) || !cJSON_IsNumber(tp) || !(tp->valuedouble > 0) || !cJSON_IsArray(steps) ||
        !load_steps(c, steps))
        return 0;
    c->throughput = tp->valuedouble;
    return 1;
}

/* Schema 2: every configuration that ran (skipped ones carry no measurements). */
static int configs_parse(tfb_run_file *r, const cJSON *list) {
    const cJSON *item;
    if (!cJSON_IsArray(list)) return 0;
    cJSON_ArrayForEach(item, list) {
        if (cJSON_GetObjectItemCaseSensitive(item, "skipped")) continue;
        if (r->n_cfg == TFB_RUN_MAX_CONFIGS || !config_parse(&r->cfg[r->n_cfg], item)) return 0;
        r->n_cfg++;
    }
    return r->n_cfg > 0;
}

int tfb_run_file_parse(tfb_run_file *r, const char *text, const char *name, char *err, size_t len) {
    memset(r, 0, sizeof *r);
    r->path = name;
    r->root = cJSON_Parse(text);
    if (!cJSON_IsObject(r->root)) { snprintf(err, len, "%s: not a JSON object (truncated or not a results file)", name); return 0; }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(r->root, "schema_version");
    int v1 = cJSON_IsNumber(ver) && ver->valuedouble == 1;
    if (!cJSON_IsNumber(ver) || (!v1 && ver->valuedouble != TFB_SCHEMA_VERSION)) {
        char v[64];
        tfb_json_value_text(ver, v, sizeof v);
        snprintf(err, len, "%s: schema_version %s is not supported (this tfbench reads 1 and %d)", name, v,
                 TFB_SCHEMA_VERSION);
        return 0;
    }
    r->env = cJSON_GetObjectItemCaseSensitive(r->root, "environment");
    int ok = v1 ? config_parse(&r->cfg[0], r->root)
                : configs_parse(r, cJSON_GetObjectItemCaseSensitive(r->root, "configurations"));
    if (v1 && ok) r->n_cfg = 1;
    if (!ok) snprintf(err, len, "%s: missing or invalid config, throughput or per-step times", name);
    return ok;
}

int tfb_run_file_load(tfb_run_file *r, const char *path, char *err, size_t len) {
    memset(r, 0, sizeof *r);
    r->path = path;
    char *text = slurp(path, err, len);
    int ok = text && tfb_run_file_parse(r, text, path, err, len);
    free(text);
    return ok;
}

void tfb_run_file_free(tfb_run_file *r) {
    cJSON_Delete(r->root);
    r->root = NULL;
    for (int i = 0; i < TFB_RUN_MAX_CONFIGS; i++) {
        free(r->cfg[i].steps);
        r->cfg[i].steps = NULL;
    }
}

void tfb_json_value_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) snprintf(buf, len, "%s", v->valuestring);
    else if (cJSON_IsNumber(v)) snprintf(buf, len, "%.15g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else snprintf(buf, len, "-");
}

double tfb_json_number(const cJSON *obj, const char *key, double missing) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : missing;
}
