/* ddp.h — data-parallel gradient averaging in buckets, overlapped with backward.
 *
 * Buckets are contiguous ranges of the gradient pool formed in reverse pool order (the order backward completes
 * them), at most --bucket-mb each but never splitting a tensor. A bucket's all-reduce starts (non-blocking) as soon
 * as the workload reports that every gradient in it is complete; between layers the pending ones are tested so a
 * transport without a progress thread still moves them. Buckets start in index order on every rank. The sum is
 * left in place: the optimizer divides by the number of ranks. Does nothing on one rank.
 */
#ifndef TFB_DDP_H
#define TFB_DDP_H
#include "comm.h"
#include "workload.h"

typedef struct {
    size_t begin, end;            /* element range in the gradient pool */
    tfb_comm_request *req;        /* pending all-reduce, or NULL */
} tfb_ddp_bucket;

typedef struct {
    tfb_comm *comm;
    float *grads;
    tfb_ddp_bucket *buckets;
    int n_buckets, next;          /* next bucket to start */
} tfb_ddp;

tfb_status tfb_ddp_init(tfb_ddp *d, tfb_comm *comm, const tfb_workload *wl, double bucket_mb);
/* The tfb_grad_ready_fn for workloads: starts buckets at or above the watermark, tests the pending ones. */
tfb_status tfb_ddp_ready(void *ddp, size_t watermark);
/* Starts what is left and waits for every bucket; resets for the next step. */
tfb_status tfb_ddp_finish(tfb_ddp *d);
void tfb_ddp_free(tfb_ddp *d);

#endif
