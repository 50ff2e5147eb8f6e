/* workload.h — what the run driver needs from a model: its parameter table and pools, one micro-batch's data,
 * forward and backward of the model's units this pipeline stage holds (reporting which gradients are complete,
 * for bucketed all-reduce), the activations exchanged with the neighbouring stages, and its FLOP count.
 *
 * BERT (bert.c) and ResNet (resnet.c) implement it. The driver owns timing, the schedule of micro-batches, the
 * optimizer and the data-parallel and pipeline communication; a workload owns its tensors and the order of its
 * kernels. Under tensor parallelism a workload holds its shard of every split tensor and calls the tensor group's
 * collectives itself (they sit between its kernels); it never talks to other stages or replicas.
 */
#ifndef TFB_WORKLOAD_H
#define TFB_WORKLOAD_H
#include <stddef.h>
#include <stdint.h>
#include "comm.h"
#include "loss_log.h"
#include "../kernels/backend.h"

/* How a parameter is split over the tensor-parallel group. */
typedef enum { TFB_SHARD_NONE = 0, TFB_SHARD_ROWS = 1, TFB_SHARD_COLS = 2 } tfb_shard_kind;

typedef struct {
    char name[64];      /* e.g. "layer.3.attn.qkv.weight" */
    size_t offset;      /* in elements, into the parameter (and gradient) pool */
    size_t numel;       /* this rank's elements: rows * cols */
    int rows, cols;     /* this rank's shape; cols == 1 for vectors */
    int decay;          /* weight decay applies (matrices and embeddings, not biases or norms) */
    int index;          /* position in the whole model's parameter list: keys its initialisation */
    int full_rows, full_cols; /* the whole tensor */
    tfb_shard_kind shard;
    int blocks;         /* ROWS: the full rows are `blocks` equal blocks, each split over the group (QKV: 3);
                           rows beyond full_rows (vocabulary padding) are zero */
    int tied_copy;      /* a stage-local copy of a parameter another stage owns (BERT's decoder weight) */
    int taps;           /* > 1: each row, (cols / taps, taps) in the canonical order dumps and initialisation use,
                           is stored (taps, cols / taps): NHWC convolution filters, (k, r, s, c) for (k, c, r, s) */
} tfb_param_info;

/* Called during backward: every gradient at pool offset >= `watermark` is complete. */
typedef tfb_status (*tfb_grad_ready_fn)(void *ctx, size_t watermark);
/* Sums n floats of backend memory in place over the data-parallel group (synchronised batch norm). */
typedef tfb_status (*tfb_group_sum_fn)(void *ctx, float *buf, int n);

typedef enum { TFB_OPT_ADAMW = 0, TFB_OPT_SGD = 1 } tfb_optimizer_kind;

/* What the interval a workload's timing mark closes was: its own kernels, the wait for a tensor-group collective
 * (exposed communication), or the start / end of a checkpointed layer's recomputation (intervals between the two
 * are recomputation, collectives inside them included). */
typedef enum { TFB_MARK_WORK = 0, TFB_MARK_TP = 1, TFB_MARK_RECOMPUTE_BEGIN = 2, TFB_MARK_RECOMPUTE_END = 3 } tfb_mark_kind;
typedef tfb_status (*tfb_mark_fn)(void *ctx, tfb_mark_kind kind);

/* A workload's planned memory by purpose, in bytes as allocated (64-byte aligned). The driver adds the optimizer
 * state and its own buffers (estimate.c adds them the same way). */
typedef struct {
    size_t params;       /* FP32 master weights */
    size_t grads;        /* FP32 gradients */
    size_t lowp;         /* 16-bit copies of the weights (FP16/BF16) */
    size_t activations;  /* tensors saved for backward, every activation set (slot) of the stage */
    size_t workspace;    /* backward temporaries, 16-bit cast buffers, running statistics */
    size_t inputs;       /* the batches of every slot */
} tfb_mem_plan;

typedef struct {
    int local_batch;         /* samples in one micro-batch on this rank */
    int global_batch;        /* samples across the data-parallel group per step */
    int sample0;             /* global index of this replica's first sample within a step */
    int seq_len, masked;     /* BERT: sequence length and masked predictions per sequence */
    tfb_dtype gemm_type;     /* GEMM input type: FP32, FP16 or BF16 */
    int tf32;                /* FP32 GEMM/convolution inputs rounded to TF32 (--precision tf32) */
    float dropout;
    uint64_t seed;
    int fixed_batch;         /* every step reuses step 0's batch */
    int image_size;          /* ResNet: input height and width */
    int sync_bn;             /* ResNet: batch-norm statistics over the whole data-parallel group */
    tfb_layout layout;       /* ResNet: activations NCHW or NHWC (channels last) */
    int dp_size;             /* replicas in the data-parallel group */
    tfb_group_sum_fn group_sum;
    void *group_sum_ctx;
    tfb_comm *tp;            /* the tensor-parallel group (size 1 or NULL: none) */
    int pp_size, pp_rank;    /* pipeline stages and this rank's stage */
    int slots;               /* activation sets to plan: micro-batches this stage holds at once */
    int microbatches;        /* micro-batches per step (the loss log's entries; 0 counts as 1) */
    const double *unit_costs;/* [units] cost of each unit for the pipeline partition; NULL: forward FLOPs */
    int time_units;          /* measure each unit's forward + backward time into tfb_workload.unit_s */
    int plan_only;           /* plan the pools and fill tfb_workload.mem; allocate and initialise nothing */
    int checkpointing;       /* keep only each layer's (block's) input; recompute the layer in backward */
    int fused_attention;     /* BERT: attention through the backend's fused op, no (s, s) tensors */
} tfb_workload_config;

typedef struct tfb_workload tfb_workload;
/* Fills host x with the whole (unsharded) initial value of parameter p (p->full_rows x p->full_cols). */
typedef void (*tfb_param_init_fn)(float *x, const tfb_param_info *p, const void *ctx);
struct tfb_workload {
    void *self;
    const tfb_param_info *params;  /* [n_params], in pool order (forward order) */
    int n_params;
    size_t numel;                  /* parameter elements on this rank */
    size_t model_params;           /* parameters of the whole model (unpadded, no tied copy counted twice) */
    float *param_pool;             /* (numel) FP32 master weights, backend memory */
    float *grad_pool;              /* (numel) FP32 gradients, backend memory; accumulate over micro-batches */
    tfb_dtype gemm_type;           /* GEMM input type */
    uint16_t *lowp_pool;           /* (numel) 16-bit copies of the masters for FP16/BF16 GEMMs; NULL in FP32 */
    size_t bytes_planned;          /* every pool this workload allocated (or, plan_only, would allocate) */
    tfb_mem_plan mem;              /* the same bytes by purpose */
    int layers_held;               /* transformer layers or residual blocks this stage holds */
    size_t slot_bytes;             /* activation memory of one micro-batch in flight */
    double flops_per_sample;       /* training FLOPs per sample of the whole model, convention below */
    double recompute_flops_per_sample; /* forward FLOPs run again in backward under checkpointing (whole model) */
    const char *flops_convention;
    char shape[96];                /* the input shape in words, for the table ("seq 128, 20 masked") */
    char stage_desc[96];           /* the units this stage holds, in words */
    tfb_optimizer_kind optimizer;
    float default_lr;              /* when the user gives none */
    int tp_rank, tp_size;
    int first_stage, last_stage;   /* this stage reads the data / computes the loss */
    size_t in_elems, out_elems;    /* floats per micro-batch received from the previous / sent to the next stage */
    size_t tied_offset, tied_numel;/* gradient to sum with the other end of the pipeline (0 elements: none) */
    int slots_in_use, slots_peak;  /* activation sets holding a micro-batch now, and the most at once */
    tfb_loss_log loss_log;         /* each micro-batch's loss, on the last stage (dev NULL elsewhere) */
    /* The driver's timing marks while a step runs (NULL otherwise): the workload marks around what it does not time
     * as its own work, with no synchronisation; the driver reads the marks after the step and fills these two. */
    tfb_mark_fn mark;
    void *mark_ctx;
    double tp_comm_s;              /* seconds the step waited on tensor-parallel collectives (exposed; the driver's) */
    double tp_bus_bytes;           /* their bus bytes (nccl-tests convention; the driver resets it) */
    double recompute_s;            /* seconds recomputing under checkpointing (the driver's) */
    double *unit_s;                /* [n_units] synchronised seconds in each unit this stage holds (time_units) */
    int n_units;                   /* units of the whole model */

    tfb_status (*load_batch)(void *self, int step, int mb, int slot);  /* make and upload a micro-batch's inputs */
    /* Optional: make a micro-batch's inputs on the host ahead of its load_batch, which then only uploads them (the
     * driver calls it for the next step's first micro-batch while the device finishes this step). */
    tfb_status (*prepare_batch)(void *self, int step, int mb);
    /* Forward of micro-batch mb into activation set `slot`; on the last stage its loss goes into loss_log's entry
     * mb, read back after the step (tfb_loss_log_read), so nothing here waits for the device. */
    tfb_status (*forward)(void *self, int step, int mb, int slot);
    /* Backward of the micro-batch in `slot` (frees it); gradients accumulate. loss_scale includes 1/microbatches. */
    tfb_status (*backward)(void *self, int step, int mb, int slot, float loss_scale, tfb_grad_ready_fn ready,
                           void *ready_ctx);
    float *(*stage_input)(void *self, int slot);   /* (in_elems) received before forward; NULL on the first stage */
    const float *(*stage_output)(void *self, int slot); /* (out_elems) sent after forward; NULL on the last */
    float *(*grad_output)(void *self);             /* (out_elems) received before backward; NULL on the last */
    const float *(*grad_input)(void *self);        /* (in_elems) sent after backward; NULL on the first */
    tfb_status (*dump_batch)(void *self, const char *dir);           /* inputs of the current batch as .npy */
    void (*destroy)(void *self);
};

/* workload.c: every parameter's whole tensor initialised on the host by `init` (in the canonical order), put in
 * its stored order, this rank's shard kept, then uploaded to the parameter pool in one copy. */
tfb_status tfb_workload_init_params(tfb_workload *wl, tfb_backend *be, tfb_param_init_fn init, const void *ctx);
/* The 16-bit weight copies (lowp_pool) refreshed from the FP32 masters; nothing in FP32. */
tfb_status tfb_workload_refresh_lowp(const tfb_workload *wl, tfb_backend *be);
/* The whole tensor full (full_rows x full_cols) from the canonical order to the stored one (to_stored = 1) or
 * back, in place (p->taps); nothing for other parameters. */
tfb_status tfb_param_reorder(const tfb_param_info *p, float *full, int to_stored);
/* local (p->numel) = shard tp_rank of full (full_rows x full_cols); padding rows zero. */
void tfb_shard_extract(const tfb_param_info *p, int tp_rank, const float *full, float *local);
/* The inverse: shard tp_rank's elements written into full (padding dropped). */
void tfb_shard_insert(const tfb_param_info *p, int tp_rank, const float *local, float *full);
/* Contiguous split of n units with costs[] into `parts` non-empty ranges minimising the largest sum:
 * part i is [first[i], first[i + 1]). Returns TFB_ERR_ARG when parts > n. */
tfb_status tfb_partition(const double *costs, int n, int parts, int *first);
/* Activation-set bookkeeping for forward (take) and backward (give); records the peak. */
tfb_status tfb_workload_slot_take(tfb_workload *wl, int slot, int slots, unsigned char *busy);
void tfb_workload_slot_give(tfb_workload *wl, int slot, unsigned char *busy);
/* Unit timing for --balance time: start returns the clock after a device synchronisation (0 when timing is off);
 * stop adds the time since t0 to unit_s[unit]. */
double tfb_workload_unit_start(const tfb_workload *wl, tfb_backend *be);
tfb_status tfb_workload_unit_stop(tfb_workload *wl, tfb_backend *be, int unit, double t0);
/* A timing mark of the driver's (nothing outside a step). */
tfb_status tfb_workload_mark(const tfb_workload *wl, tfb_mark_kind kind);
/* Sum (or max) over the tensor group between marks (its wait timed as TP) and counted into tp_bus_bytes; nothing
 * when there is no group. */
tfb_status tfb_workload_tp_allreduce(tfb_workload *wl, tfb_comm *tp, float *buf, size_t n, tfb_comm_op op);

#endif
