/* results_read.h — reading results files back (schema 1 and 2) for `tfbench compare` and `tfbench report`: size
 * limit, JSON parse, schema check, and per configuration that ran its config object, throughput and per-step
 * times. Skipped configurations are left out. It does not interpret the figures; the commands do.
 */
#ifndef TFB_RESULTS_READ_H
#define TFB_RESULTS_READ_H
#include <stddef.h>
#include <cjson/cJSON.h>

/* One configuration of a results file that ran. */
typedef struct {
    const cJSON *item;       /* the configuration object (schema 1: the whole file) */
    const cJSON *config;     /* its "config" */
    double throughput;       /* summary.throughput_samples_per_s, > 0 */
    double *steps;           /* (n_steps) per-step times, global, > 0 */
    int n_steps;
} tfb_run_config;

enum { TFB_RUN_MAX_CONFIGS = 256 };

typedef struct {
    const char *path;
    cJSON *root, *env;       /* the parsed file and its "environment" (may be NULL) */
    tfb_run_config cfg[TFB_RUN_MAX_CONFIGS];
    int n_cfg;
} tfb_run_file;

/* Loads and validates path into r (zeroed first); 0 with a one-line reason naming the file in err. Call
 * tfb_run_file_free either way. */
int tfb_run_file_load(tfb_run_file *r, const char *path, char *err, size_t len);
/* The same from text already in memory; `name` stands for the file in messages. */
int tfb_run_file_parse(tfb_run_file *r, const char *text, const char *name, char *err, size_t len);
void tfb_run_file_free(tfb_run_file *r);
/* A scalar JSON value as text: strings verbatim, numbers %.15g, booleans; "-" when absent or not a scalar. */
void tfb_json_value_text(const cJSON *v, char *buf, size_t len);
/* A number field of obj, or `missing` when absent or not a number. */
double tfb_json_number(const cJSON *obj, const char *key, double missing);

#endif
