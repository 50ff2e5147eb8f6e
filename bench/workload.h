/* workload.h — what the run driver needs from a model: its parameter table and pools, one step's data, forward,
 * backward (reporting which gradients are complete, for bucketed all-reduce), and its FLOP count.
 *
 * BERT (bert.c) implements it; ResNet will. The driver owns timing, the optimizer and communication; a workload
 * owns its tensors and the order of its kernels, and never calls the communication interface itself.
 */
#ifndef TFB_WORKLOAD_H
#define TFB_WORKLOAD_H
#include <stddef.h>
#include <stdint.h>
#include "../kernels/backend.h"

typedef struct {
    char name[64];      /* e.g. "layer.3.attn.qkv.weight" */
    size_t offset;      /* in elements, into the parameter (and gradient) pool */
    size_t numel;
    int rows, cols;     /* shape; cols == 1 for vectors */
    int decay;          /* weight decay applies (matrices and embeddings, not biases or LayerNorm) */
} tfb_param_info;

/* Called during backward: every gradient at pool offset >= `watermark` is complete. */
typedef tfb_status (*tfb_grad_ready_fn)(void *ctx, size_t watermark);
/* Sums n host floats in place over the data-parallel group (synchronised batch norm). */
typedef tfb_status (*tfb_group_sum_fn)(void *ctx, float *host, int n);

typedef enum { TFB_OPT_ADAMW = 0, TFB_OPT_SGD = 1 } tfb_optimizer_kind;

typedef struct {
    int local_batch;         /* samples on this rank per step */
    int global_batch;        /* samples across the data-parallel group per step */
    int sample0;             /* global index of this rank's first sample within a step */
    int seq_len, masked;     /* BERT: sequence length and masked predictions per sequence */
    tfb_dtype gemm_type;     /* GEMM input type: FP32, FP16 or BF16 */
    float dropout;
    uint64_t seed;
    int fixed_batch;         /* every step reuses step 0's batch */
    int image_size;          /* ResNet: input height and width */
    int sync_bn;             /* ResNet: batch-norm statistics over the whole data-parallel group */
    int dp_size;             /* ranks in the data-parallel group */
    tfb_group_sum_fn group_sum;
    void *group_sum_ctx;
} tfb_workload_config;

typedef struct tfb_workload tfb_workload;
/* Fills host x (p->numel) with the initial values of parameter number `index`. */
typedef void (*tfb_param_init_fn)(float *x, const tfb_param_info *p, int index, const void *ctx);
struct tfb_workload {
    void *self;
    const tfb_param_info *params;  /* [n_params], in pool order (forward order) */
    int n_params;
    size_t numel;                  /* total parameter count */
    float *param_pool;             /* (numel) FP32 master weights, backend memory */
    float *grad_pool;              /* (numel) FP32 gradients, backend memory */
    tfb_dtype gemm_type;           /* GEMM input type */
    uint16_t *lowp_pool;           /* (numel) 16-bit copies of the masters for FP16/BF16 GEMMs; NULL in FP32 */
    size_t bytes_planned;          /* every pool this workload allocated */
    double flops_per_sample;       /* training FLOPs per sample, convention in flops_convention */
    const char *flops_convention;
    char shape[96];                /* the input shape in words, for the table ("seq 128, 20 masked") */
    tfb_optimizer_kind optimizer;
    float default_lr;              /* when the user gives none */

    tfb_status (*load_batch)(void *self, int step);                  /* make and upload this step's inputs */
    tfb_status (*forward)(void *self, int step, double *loss);       /* *loss: this rank's mean loss */
    tfb_status (*backward)(void *self, int step, float loss_scale, tfb_grad_ready_fn ready, void *ready_ctx);
    tfb_status (*dump_batch)(void *self, const char *dir);           /* inputs of the current batch as .npy */
    void (*destroy)(void *self);
};

/* workload.c: every parameter initialised on the host by `init`, then uploaded to the parameter pool in one copy. */
tfb_status tfb_workload_init_params(tfb_workload *wl, tfb_backend *be, tfb_param_init_fn init, const void *ctx);
/* The 16-bit weight copies (lowp_pool) refreshed from the FP32 masters; nothing in FP32. */
tfb_status tfb_workload_refresh_lowp(const tfb_workload *wl, tfb_backend *be);

#endif
