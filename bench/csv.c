/* csv.c — see csv.h. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "csv.h"

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

int tfb_csv_split(char *line, char **fields, int max) {
    int n = 0;
    for (char *p = line;; n++) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (n < max) fields[n] = trim(p);
        if (!comma) return n + 1 > max ? max + 1 : n + 1;
        p = comma + 1;
    }
}

tfb_status tfb_csv_append(void *array_ptr, int *n, size_t size, const void *row) {
    char *rows, *grown;
    memcpy(&rows, array_ptr, sizeof rows); /* a T * read as bytes: no aliasing of T * through char * */
    grown = realloc(rows, (size_t)(*n + 1) * size);
    TFB_CHECK_ALLOC(grown);
    memcpy(grown + (size_t)*n * size, row, size);
    memcpy(array_ptr, &grown, sizeof grown);
    (*n)++;
    return TFB_OK;
}

tfb_status tfb_csv_number(const char *field, double empty, double lo, double hi, double *out) {
    if (!field[0]) { *out = empty; return TFB_OK; }
    char *end;
    errno = 0;
    double v = strtod(field, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return TFB_ERR_ARG;
    *out = v;
    return TFB_OK;
}

static tfb_status read_line(FILE *f, char *buf, int *line, int *eof) {
    *eof = !fgets(buf, TFB_CSV_MAX_LINE, f);
    if (*eof) return ferror(f) ? TFB_ERR_IO : TFB_OK;
    ++*line;
    size_t n = strlen(buf);
    if (n == TFB_CSV_MAX_LINE - 1 && buf[n - 1] != '\n' && !feof(f)) return TFB_ERR_ARG;
    return TFB_OK;
}

static tfb_status read_rows(FILE *f, const char *path, const char *header, tfb_csv_row_fn row, void *ctx,
                            char *err, size_t n) {
    char buf[TFB_CSV_MAX_LINE], *fields[TFB_CSV_MAX_FIELDS];
    int line = 0, eof = 0, seen_header = 0;
    for (;;) {
        tfb_status st = read_line(f, buf, &line, &eof);
        if (st != TFB_OK) {
            snprintf(err, n, "%s:%d: %s", path, line + 1, st == TFB_ERR_IO ? "cannot be read" : "line too long");
            return st;
        }
        if (eof) break;
        char *s = trim(buf);
        if (!s[0] || s[0] == '#') continue;
        if (!seen_header) {
            if (strcmp(s, header) != 0) {
                snprintf(err, n, "%s:%d: expected the header '%s'", path, line, header);
                return TFB_ERR_ARG;
            }
            seen_header = 1;
            continue;
        }
        int k = tfb_csv_split(s, fields, TFB_CSV_MAX_FIELDS);
        TFB_TRY(row(ctx, fields, k, line, err, n));
    }
    if (!seen_header) { snprintf(err, n, "%s: empty (no header '%s')", path, header); return TFB_ERR_ARG; }
    return TFB_OK;
}

tfb_status tfb_csv_read(const char *path, const char *header, tfb_csv_row_fn row, void *ctx, char *err,
                        size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(err, n, "%s: cannot open: %s", path, strerror(errno)); return TFB_ERR_IO; }
    tfb_status st = read_rows(f, path, header, row, ctx, err, n);
    fclose(f);
    return st;
}

void tfb_csv_data_dir(char *dir, size_t n) {
    const char *env = getenv("TFB_DATA_DIR");
    if (env && env[0]) { snprintf(dir, n, "%s", env); return; }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) { snprintf(dir, n, "data"); return; }
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    if (snprintf(dir, n, "%s/../data", exe) >= (int)n) snprintf(dir, n, "data");
}

tfb_status tfb_csv_read_named(const char *path, const char *header, tfb_csv_row_fn row, void *ctx, char *err,
                              size_t n) {
    char msg[512];
    tfb_status st = tfb_csv_read(path, header, row, ctx, msg, sizeof msg);
    if (st != TFB_OK) {
        int about_line = strncmp(msg, "line", 4) == 0;
        snprintf(err, n, "%s%s%s", about_line ? path : "", about_line ? ": " : "", msg);
    }
    return st;
}

tfb_status tfb_csv_read_data(const char *dir, const char *name, const char *header, tfb_csv_row_fn row, void *ctx,
                             char *err, size_t n) {
    char base[PATH_MAX], path[PATH_MAX + 64];
    if (dir) snprintf(base, sizeof base, "%s", dir);
    else tfb_csv_data_dir(base, sizeof base);
    snprintf(path, sizeof path, "%s/%.60s", base, name);
    return tfb_csv_read_named(path, header, row, ctx, err, n);
}
