/* ddp.c — see ddp.h. */
#include <stdlib.h>
#include "ddp.h"

tfb_status tfb_ddp_init(tfb_ddp *d, tfb_comm *comm, const tfb_workload *wl, double bucket_mb) {
    size_t cap = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    *d = (tfb_ddp){.comm = comm, .grads = wl->grad_pool};
    d->buckets = calloc((size_t)wl->n_params, sizeof *d->buckets);
    TFB_CHECK_ALLOC(d->buckets);
    size_t end = wl->numel;
    for (int i = wl->n_params - 1; i >= 0; i--) {
        size_t begin = wl->params[i].offset;
        int last = i == 0;
        size_t next_size = last ? 0 : end - wl->params[i - 1].offset;
        if (last || next_size > cap) { /* close the bucket [begin, end) before it would exceed the cap */
            d->buckets[d->n_buckets++] = (tfb_ddp_bucket){.begin = begin, .end = end};
            end = begin;
        }
    }
    return TFB_OK;
}

static tfb_status bucket_start(tfb_ddp *d, tfb_ddp_bucket *b) {
    return d->comm->iallreduce(d->comm, d->grads + b->begin, b->end - b->begin, TFB_COMM_F32, TFB_SUM, &b->req);
}

tfb_status tfb_ddp_ready(void *ddp, size_t watermark) {
    tfb_ddp *d = ddp;
    if (d->comm->size == 1) return TFB_OK;
    while (d->next < d->n_buckets && d->buckets[d->next].begin >= watermark)
        TFB_CHECK(bucket_start(d, &d->buckets[d->next++]));
    for (int i = 0; i < d->next; i++) {
        int done = 0;
        if (!d->buckets[i].req) continue;
        TFB_CHECK(d->comm->test(d->comm, d->buckets[i].req, &done));
        if (done) d->buckets[i].req = NULL;
    }
    return TFB_OK;
}

tfb_status tfb_ddp_finish(tfb_ddp *d) {
    if (d->comm->size == 1) return TFB_OK;
    while (d->next < d->n_buckets) TFB_CHECK(bucket_start(d, &d->buckets[d->next++]));
    for (int i = 0; i < d->n_buckets; i++) {
        if (d->buckets[i].req) TFB_CHECK(d->comm->wait(d->comm, d->buckets[i].req));
        d->buckets[i].req = NULL;
    }
    d->next = 0;
    return TFB_OK;
}

void tfb_ddp_free(tfb_ddp *d) { free(d->buckets); }
