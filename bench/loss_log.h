/* loss_log.h — the loss of each micro-batch kept in backend memory through a step and read back once, after the
 * step's work is queued: no forward pass waits for the device to learn its loss. The last pipeline stage plans one
 * entry per micro-batch; its loss kernels write into the entry of the micro-batch they run (on a class- or
 * vocabulary-parallel shard, the all-reduced row statistics the backward pass reads as well).
 * Not here: the loss kernels (the backend's xent ops) or the mean over ranks (the driver's).
 */
#ifndef TFB_LOSS_LOG_H
#define TFB_LOSS_LOG_H
#include "mempool.h"

#define TFB_LOSS_LOG_SUMS 2

typedef struct {
    float *dev;          /* (microbatches, entry) backend memory; NULL: this stage computes no loss */
    float *host;         /* (microbatches, entry) the copy read back */
    int rows;            /* rows of a sharded softmax whose statistics the entry holds; 0: not sharded */
    int sums;            /* loss sums per micro-batch (at most TFB_LOSS_LOG_SUMS) */
    int microbatches;
    double weight[TFB_LOSS_LOG_SUMS]; /* a micro-batch's loss = sum over k of weight[k] * sum k (1 / rows summed) */
} tfb_loss_log;

/* Floats in one entry: row maxima (rows), row sums and target logits (rows, 2), then the loss sums (sums), each
 * part starting on a 64-byte boundary. */
size_t tfb_loss_log_entry(const tfb_loss_log *l);
/* Plans the entries in pool p (the host copy is made by tfb_loss_log_host_alloc once the pool is committed). */
void tfb_loss_log_plan(tfb_loss_log *l, tfb_mempool *p, int rows, int sums, int microbatches);
tfb_status tfb_loss_log_host_alloc(tfb_loss_log *l);
void tfb_loss_log_free(tfb_loss_log *l);
/* Micro-batch mb's row maxima (rows), row sums and target logits (rows, 2), and loss sums (sums); NULL for an mb
 * outside the step (a bug in the caller). */
float *tfb_loss_log_rowmax(const tfb_loss_log *l, int mb);
float *tfb_loss_log_rowsums(const tfb_loss_log *l, int mb);
float *tfb_loss_log_sums(const tfb_loss_log *l, int mb);
/* Sum over micro-batches 0 .. n - 1 of each one's loss, read back in one copy (which waits for the device). Sum 0
 * comes from the row statistics when they are sharded: sum over rows of log(row sum) + row max - target logit.
 * *total = 0 on a stage that computes no loss. */
tfb_status tfb_loss_log_read(const tfb_loss_log *l, tfb_backend *be, int n, double *total);

#endif
