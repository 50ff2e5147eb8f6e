/* report_data.c — see report_data.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "report_data.h"
#include "../bench/csv.h"

#define PUBLISHED_HEADER "source,hardware,model,precision,seq_len,image_size,batch,gpus,samples_per_s"

/* Copies a non-empty field that fits; else an error naming the column. */
static tfb_status field_copy(char *dst, size_t cap, const char *field, const char *column, int line, char *err,
                             size_t len) {
    if (!field[0] || strlen(field) >= cap) {
        snprintf(err, len, "line %d: %s must be 1 to %zu characters", line, column, cap - 1);
        return TFB_ERR_ARG;
    }
    memcpy(dst, field, strlen(field) + 1);
    return TFB_OK;
}

static tfb_status number_field(const char *field, double lo, double hi, const char *column, int line, double *out,
                               char *err, size_t len) {
    if (field[0] && tfb_csv_number(field, 0, lo, hi, out) == TFB_OK) return TFB_OK;
    snprintf(err, len, "line %d: %s: expected a number in [%g, %g], got '%s'", line, column, lo, hi, field);
    return TFB_ERR_ARG;
}

static tfb_status price_row(void *ctx, char **f, int n, int line, char *err, size_t len) {
    tfb_prices *p = ctx;
    tfb_price r = {0};
    if (n < 2 || n > 3) {
        snprintf(err, len, "line %d: expected machine,price[,power_w], got %d fields", line, n);
        return TFB_ERR_ARG;
    }
    TFB_TRY(field_copy(r.label, sizeof r.label, f[0], "machine", line, err, len));
    TFB_TRY(number_field(f[1], 1e-6, 1e15, "price", line, &r.price, err, len));
    if (n == 3 && f[2][0]) TFB_TRY(number_field(f[2], 1e-3, 1e8, "power_w", line, &r.power_w, err, len));
    if (tfb_prices_find(p, r.label)) {
        snprintf(err, len, "line %d: machine '%s' is listed twice", line, r.label);
        return TFB_ERR_ARG;
    }
    return TFB_CSV_APPEND(p->rows, p->n, r);
}

tfb_status tfb_prices_load(tfb_prices *p, const char *path, char *err, size_t len) {
    memset(p, 0, sizeof *p);
    tfb_status st = tfb_csv_read_named(path, TFB_PRICES_HEADER, price_row, p, err, len);
    if (st == TFB_OK && p->n == 0) { snprintf(err, len, "%s: no machines listed", path); st = TFB_ERR_ARG; }
    if (st != TFB_OK) tfb_prices_free(p);
    return st;
}

void tfb_prices_free(tfb_prices *p) {
    free(p->rows);
    memset(p, 0, sizeof *p);
}

const tfb_price *tfb_prices_find(const tfb_prices *p, const char *label) {
    for (int i = 0; p && i < p->n; i++)
        if (strcmp(p->rows[i].label, label) == 0) return &p->rows[i];
    return NULL;
}

static tfb_status published_row(void *ctx, char **f, int n, int line, char *err, size_t len) {
    tfb_published_set *s = ctx;
    tfb_published r = {0};
    double seq, image, batch, gpus;
    if (n != 9) {
        snprintf(err, len, "line %d: expected the 9 columns of the header, got %d fields", line, n);
        return TFB_ERR_ARG;
    }
    TFB_TRY(field_copy(r.source, sizeof r.source, f[0], "source", line, err, len));
    TFB_TRY(field_copy(r.hardware, sizeof r.hardware, f[1], "hardware", line, err, len));
    TFB_TRY(field_copy(r.model, sizeof r.model, f[2], "model", line, err, len));
    TFB_TRY(field_copy(r.precision, sizeof r.precision, f[3], "precision", line, err, len));
    TFB_TRY(number_field(f[4], 0, 1 << 20, "seq_len", line, &seq, err, len));
    TFB_TRY(number_field(f[5], 0, 1 << 20, "image_size", line, &image, err, len));
    TFB_TRY(number_field(f[6], 0, 1 << 24, "batch", line, &batch, err, len));
    TFB_TRY(number_field(f[7], 1, 1 << 20, "gpus", line, &gpus, err, len));
    TFB_TRY(number_field(f[8], 1e-9, 1e12, "samples_per_s", line, &r.samples_per_s, err, len));
    r.seq_len = (int)seq, r.image_size = (int)image, r.batch = (int)batch, r.gpus = (int)gpus;
    return TFB_CSV_APPEND(s->rows, s->n, r);
}

tfb_status tfb_published_load(tfb_published_set *s, const char *dir, char *err, size_t len) {
    memset(s, 0, sizeof *s);
    tfb_status st = tfb_csv_read_data(dir, "published.csv", PUBLISHED_HEADER, published_row, s, err, len);
    if (st != TFB_OK) tfb_published_free(s);
    return st;
}

void tfb_published_free(tfb_published_set *s) {
    free(s->rows);
    memset(s, 0, sizeof *s);
}
