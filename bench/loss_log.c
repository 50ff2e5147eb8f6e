/* loss_log.c — see loss_log.h. */
#include <math.h>
#include <stdlib.h>
#include "loss_log.h"

/* Each part of an entry starts 64 bytes apart, as the pool's tensors do. */
static size_t part(size_t floats) { return (floats + 15) & ~(size_t)15; }

/* Where an entry's parts start, in floats from the entry: row maxima at 0 (rows), then the row sums and target
 * logits (2 rows), then the loss sums. */
static size_t rowsums_at(const tfb_loss_log *l) { return part((size_t)l->rows); }
static size_t sums_at(const tfb_loss_log *l) { return rowsums_at(l) + part((size_t)l->rows * 2); }

size_t tfb_loss_log_entry(const tfb_loss_log *l) { return sums_at(l) + part((size_t)l->sums); }

void tfb_loss_log_plan(tfb_loss_log *l, tfb_mempool *p, int rows, int sums, int microbatches) {
    l->rows = rows;
    l->sums = sums < TFB_LOSS_LOG_SUMS ? sums : TFB_LOSS_LOG_SUMS;
    l->microbatches = microbatches < 1 ? 1 : microbatches;
    tfb_mempool_add(p, (void **)&l->dev, tfb_loss_log_entry(l) * (size_t)l->microbatches * sizeof(float));
}

tfb_status tfb_loss_log_host_alloc(tfb_loss_log *l) {
    if (!l->dev) return TFB_OK;
    l->host = malloc(tfb_loss_log_entry(l) * (size_t)l->microbatches * sizeof(float));
    return l->host ? TFB_OK : TFB_ERR_NOMEM;
}

void tfb_loss_log_free(tfb_loss_log *l) {
    free(l->host);
    l->host = NULL;
}

static float *entry(const tfb_loss_log *l, int mb) {
    if (!l->dev || mb < 0 || mb >= l->microbatches) return NULL;
    return l->dev + tfb_loss_log_entry(l) * (size_t)mb;
}

float *tfb_loss_log_rowmax(const tfb_loss_log *l, int mb) { return entry(l, mb); }

float *tfb_loss_log_rowsums(const tfb_loss_log *l, int mb) {
    float *e = entry(l, mb);
    return e ? e + rowsums_at(l) : NULL;
}

float *tfb_loss_log_sums(const tfb_loss_log *l, int mb) {
    float *e = entry(l, mb);
    return e ? e + sums_at(l) : NULL;
}

/* One micro-batch's loss from its entry e (host copy). */
static double entry_loss(const tfb_loss_log *l, const float *e) {
    const float *mx = e, *sums = e + rowsums_at(l), *s = e + sums_at(l);
    double loss = 0;
    for (int k = 0; k < l->sums; k++) {
        double v = s[k];
        if (k == 0 && l->rows > 0) {
            v = 0;
            for (int i = 0; i < l->rows; i++) v += log((double)sums[2 * i]) + mx[i] - sums[2 * i + 1];
        }
        loss += l->weight[k] * v;
    }
    return loss;
}

tfb_status tfb_loss_log_read(const tfb_loss_log *l, tfb_backend *be, int n, double *total) {
    *total = 0;
    if (!l->dev) return TFB_OK;
    if (n < 0 || n > l->microbatches || !l->host) return TFB_ERR_STATE;
    size_t per = tfb_loss_log_entry(l);
    if (n > 0) TFB_CHECK(be->copy_d2h(be->ctx, l->host, l->dev, per * (size_t)n * sizeof(float)));
    for (int mb = 0; mb < n; mb++) *total += entry_loss(l, l->host + per * (size_t)mb);
    return TFB_OK;
}
