/* backend.h — the compute backend interface: a struct of function pointers plus a context pointer.
 *
 * Every tensor pointer passed to an op is backend ("device") memory obtained from alloc(); host memory only crosses
 * through copy_h2d/copy_d2h. Conventions every backend keeps:
 *   - Row-major tensors; shapes are given in the comment of each op as (rows, cols).
 *   - Gradients of parameters ACCUMULATE (+=), so micro-batches and tied weights add up; gradients of activations
 *     OVERWRITE.
 *   - Element-wise ops may run in place (out == in) unless the comment says otherwise.
 *   - FP16/BF16 appear as GEMM and convolution inputs, cast targets, and the activations of a 16-bit CNN (the ops
 *     that take a tfb_dtype for a tensor); statistics, parameters and everything else are FP32 (formulas.md,
 *     mixed precision).
 *   - Dropout masks come from kernels/philox.h keyed by (seed, site) with the element's global index as counter.
 * This header deliberately holds no implementation and no #if for any backend: kernels/registry.c picks one.
 */
#ifndef TFB_BACKEND_H
#define TFB_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "check.h"
#include "philox.h"

typedef enum { TFB_F32 = 0, TFB_F16 = 1, TFB_BF16 = 2 } tfb_dtype;
typedef enum { TFB_ACT_GELU = 0, TFB_ACT_TANH = 1, TFB_ACT_RELU = 2 } tfb_act;
typedef enum { TFB_NCHW = 0, TFB_NHWC = 1 } tfb_layout;

static inline size_t tfb_dtype_size(tfb_dtype t) { return t == TFB_F32 ? 4 : 2; }
const char *tfb_dtype_name(tfb_dtype t);

/* The embedding backward's fixed sequence (embedding_bwd) sums the id-sorted order in chunks of this many tokens. */
#define TFB_EMBED_CHUNK 32
/* order (n) = 0 .. n-1 sorted stably by ids[i], each in [0, nvals) (a counting sort, run on the host with the
 * batch); count: nvals + 1 ints of work space. */
void tfb_embed_order(const int *ids, int n, int nvals, int *order, int *count);

/* C = alpha * op(A) @ op(B) + beta * C for `batch` matrices, row-major. op(A) is (m, k), op(B) is (k, n), C is
 * (m, n). A and B are of type `in_type`; accumulation is FP32, and so is C unless c_type names in_type's 16-bit
 * type (the result rounded once as it is written, so the op reading it takes half the bytes). Matrix i starts at
 * base + i * stride, or, with groups (batch_inner > 0), at base + (i / batch_inner) * outer + (i % batch_inner) *
 * stride: attention's (sample, head) pairs read from or written into token-major (N, heads * d) tensors, whose
 * heads are d apart within a sample and samples s * ld apart. */
typedef struct {
    int trans_a, trans_b;   /* 0: as stored, 1: transposed */
    int m, n, k;
    float alpha, beta;
    const void *a; int lda; long long stride_a;
    const void *b; int ldb; long long stride_b;
    void *c; int ldc; long long stride_c;
    int batch;              /* >= 1 */
    tfb_dtype in_type;
    int tf32;               /* FP32 inputs only: 1 rounds them to TF32 (10-bit mantissa) as tensor cores do */
    tfb_dtype c_type;       /* TFB_F32 (the zero default), or in_type when that is FP16 or BF16 */
    int batch_inner;        /* 0: one level; else matrices per group, dividing batch */
    long long outer_a, outer_b, outer_c; /* with groups: elements from one group's first matrix to the next's */
} tfb_gemm_desc;

/* Whether a backend can run d: sizes of at least 1, C of FP32 or the input type, groups dividing the batch. */
static inline int tfb_gemm_desc_valid(const tfb_gemm_desc *d) {
    if (d->batch < 1 || d->m < 1 || d->n < 1 || d->k < 1) return 0;
    if (d->c_type != TFB_F32 && d->c_type != d->in_type) return 0;
    return d->batch_inner == 0 || (d->batch_inner > 0 && d->batch % d->batch_inner == 0);
}

/* Element offset of matrix i of a GEMM operand (stride, outer) as tfb_gemm_desc says. */
TFB_HD long long tfb_gemm_offset(const tfb_gemm_desc *d, long long stride, long long outer, int i) {
    if (d->batch_inner < 1) return i * stride;
    return (long long)(i / d->batch_inner) * outer + (long long)(i % d->batch_inner) * stride;
}

/* A 2-D convolution without bias: x (n, c, h, w), filters (k, c, r, s), y (n, k, p, q) in NCHW; in NHWC
 * (channels last) x (n, h, w, c), filters (k, r, s, c), y (n, p, q, k). */
typedef struct {
    int n, c, h, w;
    int k, r, s;
    int stride, pad;
    int p, q;               /* output size: (h + 2 pad - r) / stride + 1, likewise q */
    tfb_layout layout;      /* NHWC lets 16-bit convolutions run on tensor cores without transposes */
    tfb_dtype in_type;      /* type of x, filters and dy; dw is FP32 */
    tfb_dtype y_type;       /* conv_fwd's y: TFB_F32 (the zero default), or in_type to keep a 16-bit result as the
                             * convolution produces it (no widening pass) */
    tfb_dtype dx_type;      /* conv_bwd_data's dx: TFB_F32 (the zero default), or in_type, likewise */
    int tf32;               /* as in tfb_gemm_desc */
} tfb_conv_desc;

/* A max pool: x (n, c, h, w) into y (n, c, p, q) (NHWC: (n, h, w, c) into (n, p, q, c)), window r x r, stride, pad
 * (padding never wins: each window holds at least one element of x). */
typedef struct {
    int n, c, h, w;
    int r, stride, pad;
    int p, q;               /* (h + 2 pad - r) / stride + 1, likewise q */
    tfb_layout layout;
} tfb_pool_desc;

typedef struct {
    float lr, momentum, weight_decay;
    float grad_scale;       /* as for AdamW */
} tfb_sgd_hparams;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;               /* 1-based, for bias correction */
    float grad_scale;       /* gradients are multiplied by this first (1 / (loss scale * ranks averaged)) */
} tfb_adamw_hparams;

/* A dropout draw: which stream (seed, site) and which step; element e of the call uses counter offset + e. */
typedef struct {
    uint64_t seed;
    uint32_t site;          /* layer * 8 + place */
    uint32_t step;
    uint64_t offset;        /* global index of the call's element 0 */
} tfb_dropout_key;

/* The tail of a post-LN transformer sublayer, one row pass: h = residual + Dropout(x + bias), y = LayerNorm(h).
 * An FP32 x may alias h or y (each row is read whole before it is written). */
typedef struct {
    float *h;               /* (rows, cols) out: LayerNorm's input, saved for the backward */
    float *y;               /* (rows, cols) out */
    void *y_lp;             /* (rows, cols) out: y again in lp_type, or NULL */
    tfb_dtype lp_type;
    float *mean, *rstd;     /* (rows) out */
    const void *x;          /* (rows, cols) the sublayer's output, before its bias, of x_type */
    tfb_dtype x_type;       /* FP32 (the zero default), or 16-bit as the projection's GEMM wrote it (x + bias is
                             * formed in FP32; a 16-bit x aliases neither h nor y) */
    const float *bias;      /* (cols), or NULL */
    const float *residual;  /* (rows, cols) */
    const float *gamma, *beta; /* (cols) */
    int rows, cols;
    float eps;
    float p;                /* dropout probability; element e of the block uses counter key.offset + e */
    tfb_dropout_key key;
} tfb_residual_ln_desc;

/* Attention's probabilities and their dropout, one row pass: att = softmax(scale * in) per row, columns >=
 * key_len[r / rows_per_key] masked out (probability 0) when key_len is set, and att_d = Dropout(att), att as
 * stored (rounded to prob_type). The row's arithmetic is FP32 whatever prob_type is. */
typedef struct {
    void *att;              /* (rows, cols) out in prob_type, saved for the backward; may alias in */
    void *att_d;            /* (rows, cols) out in att_type: the context GEMM's operand */
    tfb_dtype att_type;
    const void *in;         /* (rows, cols) scores in prob_type (the scores GEMM writes them so) */
    tfb_dtype prob_type;    /* of in and att: TFB_F32 (the zero default), FP16 or BF16 */
    const int *key_len;     /* (rows / rows_per_key), or NULL */
    int rows, cols, rows_per_key;
    float scale;
    float p;                /* dropout probability; element e of the block uses counter key.offset + e */
    tfb_dropout_key key;
} tfb_attn_softmax_desc;

/* Attention in one pass over each (sample, head), with no (s, s) scores or probabilities in memory (the "flash
 * attention" scheme): forward ctx = Dropout(softmax(scale Q K^T, key mask)) V per sample and head, saving each
 * query row's log-sum-exp; the backward recomputes the probabilities from it. The row's arithmetic is FP32: the
 * scores are never rounded, and only the dropped-out probabilities are rounded to `type` where they meet V (the
 * unfused path rounds the scores and the probabilities too). Probability (b, h, i, j) uses dropout counter
 * key.offset + ((b heads_total + h) s + i) s + j, key.offset being that of (local sample 0, local head 0), so a
 * rank holding some of the heads draws the masks of the whole layer. */
typedef struct {
    const void *qkv;        /* (3, batch, heads, seq, head_dim) head-major Q, K, V in type, their biases added */
    void *ctx;              /* (batch seq, ldc) token-major, in type: head h of sample b in columns h head_dim ..
                             * (h + 1) head_dim - 1 of rows b seq .. (b + 1) seq - 1; the forward writes it */
    int ldc;
    float *lse;             /* (batch, heads, seq): each query row's log-sum-exp of its scaled, masked scores */
    const int *key_len;     /* (batch) keys each sample's queries see (1 .. seq), or NULL: all of them */
    int batch, heads, heads_total, seq, head_dim;
    tfb_dtype type;         /* FP32, FP16 or BF16 */
    float scale;
    float p;                /* dropout probability */
    tfb_dropout_key key;
} tfb_attn_desc;

/* The gradients of tfb_attn_desc's attention, all token-major like its ctx, in its type. */
typedef struct {
    const void *dctx;       /* (batch seq, ldc) the context's gradient */
    void *dq, *dk, *dv;     /* (batch seq, ldd) each: written in the columns of their heads (the QKV projection's
                             * gradient holds them W columns apart); the other columns are left alone */
    int ldd;
    float *rowdot;          /* (batch, heads, seq) scratch: each row's sum of dctx * ctx, as stored */
} tfb_attn_grads;

/* Whether d is well formed for any backend: its buffers given, sizes of at least 1, the rank's heads within the
 * layer's and within ldc, a dropout probability in [0, 1). A backend adds its own shape limits. */
static inline int tfb_attn_desc_valid(const tfb_attn_desc *d) {
    return d->qkv && d->ctx && d->lse && d->batch >= 1 && d->heads >= 1 && d->heads_total >= d->heads &&
           d->seq >= 1 && d->head_dim >= 1 && d->ldc >= d->heads * d->head_dim && d->p >= 0.0f && d->p < 1.0f;
}

/* Whether g holds every gradient and scratch buffer a backward of d needs, ldd wide enough for d's heads. */
static inline int tfb_attn_grads_valid(const tfb_attn_desc *d, const tfb_attn_grads *g) {
    return g->dctx && g->dq && g->dk && g->dv && g->rowdot && g->ldd >= d->heads * d->head_dim;
}

/* An activation's backward with its bias gradient, one pass: din = dout * act'(pre + bias) and dbias += the column
 * sums of din as computed in FP32 (before din is rounded to din_type). */
typedef struct {
    tfb_act act;
    void *din;              /* (n, h) out in din_type (a 16-bit din is the GEMM operand of the layer below, written
                             * rounded); NULL: the bias gradient alone. May alias dout when of dout's type */
    tfb_dtype din_type;
    float *dbias;           /* (h) += */
    const void *dout;       /* (n, h) in dout_type: FP32, or 16-bit as a GEMM wrote it */
    tfb_dtype dout_type;
    const void *pre;        /* (n, h) in pre_type, as bias_act_fwd read it; NULL stands for the identity (act and
                             * bias ignored): dout's cast and its bias gradient in one pass */
    tfb_dtype pre_type;
    const float *bias;      /* (h) added to pre, or NULL */
    int n, h;
} tfb_act_bias_bwd_desc;

struct tfb_comm; /* bench/comm.h */

typedef struct tfb_backend tfb_backend;
struct tfb_backend {
    const char *name;       /* "cpu", "cuda" */
    void *ctx;              /* backend-private state */
    int threads;            /* CPU threads used by this rank (informational) */
    /* the accelerator, for MFU and the results (NULL / 0 on the CPU) */
    const char *device_name;
    int device_index, device_cc, device_sms; /* cc: compute capability x 10 */
    double device_clock_mhz;                 /* maximum SM clock */
    const char *device_pci_bus_id;           /* "dddd:bb:dd.f" */
    size_t device_memory_bytes;              /* what alloc() can hand out at most (0: no fixed limit) */
    size_t device_reserved_bytes;            /* of which the context, library workspaces and NCCL take about */

    /* memory */
    void *(*alloc)(void *ctx, size_t bytes);            /* zero-filled; NULL on failure */
    void (*free)(void *ctx, void *p);
    /* bytes held through alloc() now and the most held at once since the last reset (a reset sets it to now) */
    void (*mem_stats)(void *ctx, size_t *in_use, size_t *peak, int reset_peak);
    /* host to device: ordered after the work queued so far, src reusable on return (the copy may not have run) */
    tfb_status (*copy_h2d)(void *ctx, void *dst, const void *src, size_t bytes);
    /* device to host: waits for the work queued so far and the copy itself */
    tfb_status (*copy_d2h)(void *ctx, void *dst, const void *src, size_t bytes);
    tfb_status (*copy_d2d)(void *ctx, void *dst, const void *src, size_t bytes);
    tfb_status (*fill)(void *ctx, float *x, float value, size_t n);
    /* x (rows, per) = standard normal values, element pair (i, i + 1) of row r from tfb_normal_pair(key, row0 + r,
     * i) in kernels/philox.h: synthetic input images drawn where they are used */
    tfb_status (*normal_fill)(void *ctx, float *x, size_t rows, size_t per, uint64_t row0, tfb_philox_key key);
    tfb_status (*sync)(void *ctx);                      /* all queued work finished */
    /* Timing marks in stream order, so phases are timed without stopping the device at their edges: mark(i)
     * records mark i (0 <= i < n of the last marks_reserve) when the work queued before it has run; mark_seconds
     * gives the seconds from mark a to mark b once sync() has returned. CUDA events on a GPU; the host clock on the
     * CPU backend, whose ops have finished when they return. */
    tfb_status (*marks_reserve)(void *ctx, int n);
    tfb_status (*mark)(void *ctx, int i);
    tfb_status (*mark_seconds)(void *ctx, int a, int b, double *seconds);
    /* A communicator over the ranks of `host` that also moves this backend's memory (host buffers still go
     * through `host`, which stays the caller's); NULL when host's transport reads backend memory directly. */
    tfb_status (*comm_wrap)(void *ctx, struct tfb_comm *host, struct tfb_comm **out);
    /* The kernel profile (a GPU backend with TFB_KERNEL_PROFILE=N set; NULL or a no-op otherwise): on = 1 starts
     * recording the device's work, on = 0 stops and prints the N largest entries on stderr. */
    tfb_status (*trace)(void *ctx, int on);
    /* One line about the i-th convolution shape seen so far and the algorithms chosen for it: 1, or 0 past the
     * last. NULL when the backend chooses no algorithms (the CPU's im2col). */
    int (*conv_plan_text)(void *ctx, int i, char *buf, size_t len);
    /* For a hang report, from the watchdog's thread while the host is stuck: the oldest work the device was given
     * and has not finished (a collective, else the compute stream), as one phrase in buf, and 1; 0 when nothing is
     * unfinished. NULL where each op has finished when it returns (the CPU backend: the host's place says it all). */
    int (*pending_text)(void *ctx, char *buf, size_t len);

    /* dense algebra */
    tfb_status (*gemm)(void *ctx, const tfb_gemm_desc *d);

    /* out (n, h) [+]= table[ids[i]] (rows, h); also the gather of rows by index. accumulate: 0 writes, 1 adds. */
    tfb_status (*embedding_fwd)(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                int accumulate);
    /* dtable (rows, h) += scatter of dout (n, h) by ids, each row's sum in one fixed sequence whatever the backend:
     * order (n) lists the token indices sorted stably by id (tfb_embed_order), each id's run of it is cut where the
     * order's chunks of TFB_EMBED_CHUNK positions end, each piece is summed from zero in order, and the pieces' sums
     * are added in order before the row is. order NULL: no id repeats (a gather's backward), so no sequence. */
    tfb_status (*embedding_bwd)(void *ctx, float *dtable, const float *dout, const int *ids, const int *order, int n,
                                int h);

    /* out (n, h) = (in - mean) * rstd * gamma + beta; mean, rstd (n) saved for backward */
    tfb_status (*layernorm_fwd)(void *ctx, float *out, float *mean, float *rstd, const float *in,
                                const float *gamma, const float *beta, int n, int h, float eps);
    /* din (n, h) = d/din; dgamma, dbeta (h) += */
    tfb_status (*layernorm_bwd)(void *ctx, float *din, float *dgamma, float *dbeta, const float *dout,
                                const float *in, const float *mean, const float *rstd, const float *gamma, int n,
                                int h);
    /* Forward as tfb_residual_ln_desc says; the same values as bias_add, dropout_fwd, residual_add and
     * layernorm_fwd (and a cast for y_lp) in turn. */
    tfb_status (*residual_ln_fwd)(void *ctx, const tfb_residual_ln_desc *d);
    /* Its backward from dy (rows, cols), through d's h, mean, rstd, gamma and dropout: dh = LayerNorm's input
     * gradient (the residual's), dx of dx_type = Dropout's backward of dh (x's and the bias's; a 16-bit dx is the
     * projection's GEMM operand, rounded once); dgamma, dbeta (cols) +=. The bias gradient is the caller's (the
     * column sums of dx). */
    tfb_status (*residual_ln_bwd)(void *ctx, const tfb_residual_ln_desc *d, float *dh, void *dx, tfb_dtype dx_type,
                                  float *dgamma, float *dbeta, const float *dy);

    /* out (rows, cols) = softmax(scale * in) per row; when key_len != NULL, columns >= key_len[r / rows_per_key]
     * are masked out (probability 0). */
    tfb_status (*softmax_fwd)(void *ctx, float *out, const float *in, int rows, int cols, float scale,
                              const int *key_len, int rows_per_key);
    /* din of din_type = scale * out * (dout - sum_j dout_j out_j); an FP32 din may alias dout */
    tfb_status (*softmax_bwd)(void *ctx, void *din, tfb_dtype din_type, const float *dout, const float *out, int rows,
                              int cols, float scale);
    /* As tfb_attn_softmax_desc says; in FP32 the same values as softmax_fwd then dropout_fwd, in 16 bits those of
     * the widened scores with att rounded before the dropout reads it. */
    tfb_status (*attn_softmax_fwd)(void *ctx, const tfb_attn_softmax_desc *d);
    /* Its backward: din (rows, cols) of din_type = softmax_bwd of dropout_bwd of datt_d (att_d's gradient, of
     * datt_type: FP32, or 16-bit as its GEMM wrote it; it may be overwritten), through d's att (widened), in FP32;
     * din may alias datt_d when of datt_type. */
    tfb_status (*attn_softmax_bwd)(void *ctx, const tfb_attn_softmax_desc *d, void *din, tfb_dtype din_type,
                                   void *datt_d, tfb_dtype datt_type);
    /* Fused attention (tfb_attn_desc): whether this backend has it for d's type and shapes (1) or not (0: the run
     * driver refuses --attention fused as bad input). The CPU backend has it for every type and shape, as the
     * reference. */
    int (*attn_fused_supports)(void *ctx, const tfb_attn_desc *d);
    /* Forward: d->ctx and d->lse from d->qkv. */
    tfb_status (*attn_fused_fwd)(void *ctx, const tfb_attn_desc *d);
    /* Backward from g->dctx through d's qkv, ctx and lse (as the forward left them): dS = P (f dP_d - rowdot) with
     * dP_d = dctx V^T in FP32 and f the dropout factor, rounded to the type as an operand; dQ = scale dS K,
     * dK = scale dS^T Q, dV = (f P)^T dctx, each rounded once. */
    tfb_status (*attn_fused_bwd)(void *ctx, const tfb_attn_desc *d, const tfb_attn_grads *g);

    /* out (n) = act(in) */
    tfb_status (*act_fwd)(void *ctx, tfb_act act, float *out, const float *in, size_t n);
    /* din (n) = dout * act'(in); din may alias dout */
    tfb_status (*act_bwd)(void *ctx, tfb_act act, float *din, const float *dout, const float *in, size_t n);

    /* out (n, h) of out_type = act(pre + bias), pre (n, h) of pre_type (a GEMM's result, left as it is and kept
     * for the backward) and bias (h) FP32: the sum formed in FP32, one pass */
    tfb_status (*bias_act_fwd)(void *ctx, tfb_act act, void *out, tfb_dtype out_type, const void *pre,
                               tfb_dtype pre_type, const float *bias, int n, int h);
    /* As tfb_act_bias_bwd_desc says */
    tfb_status (*act_bias_bwd)(void *ctx, const tfb_act_bias_bwd_desc *d);
    /* x (n, h) += bias (h) broadcast over rows */
    tfb_status (*bias_add)(void *ctx, float *x, const float *bias, int n, int h);
    /* dbias (h) += column sums of dout (n, h) */
    tfb_status (*bias_grad)(void *ctx, float *dbias, const float *dout, int n, int h);
    /* out (n) = a + b */
    tfb_status (*residual_add)(void *ctx, float *out, const float *a, const float *b, size_t n);

    /* out (n) of out_type = in * keep / (1 - p), keep drawn from the key; p == 0 copies (converts) */
    tfb_status (*dropout_fwd)(void *ctx, void *out, tfb_dtype out_type, const float *in, size_t n, float p,
                              tfb_dropout_key key);
    /* din (n) = dout * keep / (1 - p) with the same mask */
    tfb_status (*dropout_bwd)(void *ctx, float *din, const float *dout, size_t n, float p, tfb_dropout_key key);

    /* *loss_sum (one float, device) = sum over rows of -log softmax(logits)[label]; logits (n, v) */
    tfb_status (*xent_fwd)(void *ctx, float *loss_sum, const float *logits, const int *labels, int n, int v);
    /* dlogits (n, v) = (softmax(logits) - onehot(label)) * dscale; dlogits may alias logits */
    tfb_status (*xent_bwd)(void *ctx, float *dlogits, const float *logits, const int *labels, int n, int v,
                           float dscale);

    /* AdamW (decoupled weight decay) on FP32 master weights w, moments m, v, all (n) */
    tfb_status (*adamw)(void *ctx, float *w, const float *g, float *m, float *v, size_t n,
                        const tfb_adamw_hparams *hp);

    /* SGD with momentum (PyTorch's form: buf = momentum * buf + g + wd * w; w -= lr * buf), all (n) */
    tfb_status (*sgd)(void *ctx, float *w, const float *g, float *buf, size_t n, const tfb_sgd_hparams *hp);
    /* The same updates over a whole parameter pool of n elements in one call: hp's weight decay applies inside the
     * n_runs ascending, disjoint ranges [runs[2k], runs[2k + 1]) of element offsets (runs in backend memory; NULL
     * when n_runs is 0), none outside them. Element by element what adamw and sgd compute (kernels/update.h).
     * w_lp (n) of lp_type, when not NULL, receives the updated w rounded (the GEMMs' 16-bit weight copy, written in
     * the same pass instead of a cast that reads w again). */
    tfb_status (*adamw_pool)(void *ctx, float *w, const float *g, float *m, float *v, size_t n, const uint64_t *runs,
                             int n_runs, const tfb_adamw_hparams *hp, void *w_lp, tfb_dtype lp_type);
    tfb_status (*sgd_pool)(void *ctx, float *w, const float *g, float *buf, size_t n, const uint64_t *runs,
                           int n_runs, const tfb_sgd_hparams *hp, void *w_lp, tfb_dtype lp_type);

    /* ---- convolutional networks: activations (n, c, h, w) in NCHW, (n, h, w, c) in NHWC. The batch-norm ops
     * describe NCHW; an NHWC tensor is (n*h*w, c, 1) to them (a backend may pick other kernels for hw == 1).
     * Their x and dy may be FP32 or 16-bit (x_type, dy_type), so a 16-bit network keeps its convolution outputs
     * and their gradients 16-bit; every statistic and parameter stays FP32. ---- */
    /* y (n, k, p, q) of d->y_type = the convolution of x (in_type) with w (in_type) */
    tfb_status (*conv_fwd)(void *ctx, const tfb_conv_desc *d, void *y, const void *x, const void *w);
    /* dx (n, c, h, w) of d->dx_type = gradient of the input (overwrites) */
    tfb_status (*conv_bwd_data)(void *ctx, const tfb_conv_desc *d, void *dx, const void *dy, const void *w);
    /* dw (k, c, r, s) += gradient of the filters */
    tfb_status (*conv_bwd_filter)(void *ctx, const tfb_conv_desc *d, float *dw, const void *x, const void *dy);
    /* mean, var (c): batch mean and biased variance of x (n, c, hw) per channel (two-pass; a backend may take a
     * 16-bit x in one pass of shifted sums, whose rounding stays far below the 16-bit values' own) */
    tfb_status (*bn_moments)(void *ctx, float *mean, float *var, const void *x, tfb_dtype x_type, int n, int c,
                             int hw);
    /* y (n, c, hw) = x * scale + shift, scale = gamma / sqrt(var + eps), shift = beta - mean * scale
     * (tfb_bn_affine), then ReLU when relu (one pass), written in y_type */
    tfb_status (*bn_apply)(void *ctx, void *y, tfb_dtype y_type, const void *x, tfb_dtype x_type, const float *mean,
                           const float *var, const float *gamma, const float *beta, int n, int c, int hw, float eps,
                           int relu);
    /* The backward of bn_apply with its relu, given x (n, c, hw) and the output's gradient dy: g = dy, and with
     * relu g = dy where the forward's output before the ReLU, x * scale + shift, is > 0 (recomputed from x with
     * bn_apply's formula, so no ReLU backward pass and no read of y). Per channel: sum_dy = sum g, sum_dy_xhat =
     * sum g * xhat (this rank's); dgamma += sum_dy_xhat, dbeta += sum_dy */
    tfb_status (*bn_bwd_reduce)(void *ctx, float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                const void *dy, tfb_dtype dy_type, const void *x, tfb_dtype x_type, const float *mean,
                                const float *var, const float *gamma, const float *beta, int n, int c, int hw,
                                float eps, int relu);
    /* dx (n, c, hw) of dx_type = gamma * rstd * (g - sum_dy / count - xhat * sum_dy_xhat / count), g as above;
     * count: elements per channel the sums cover (all ranks' under synchronised batch norm). A 16-bit dx_type
     * rounds dx as it is written, for a convolution's backward to read directly. */
    tfb_status (*bn_bwd_apply)(void *ctx, void *dx, tfb_dtype dx_type, const void *dy, tfb_dtype dy_type,
                               const void *x, tfb_dtype x_type, const float *mean, const float *var,
                               const float *gamma, const float *beta, const float *sum_dy, const float *sum_dy_xhat,
                               double count, int n, int c, int hw, float eps, int relu);
    /* Synchronised batch norm, between two sums over `ranks` equal-sized batches: mean (c) arrives as the sum of
     * their means and leaves as the mean; var (c) arrives as this rank's variance about its own mean mine (c) and
     * leaves as its share of the pooled variance, (var + (mine - mean)^2) / ranks, so summing the shares gives the
     * variance of the whole batch */
    tfb_status (*bn_moments_merge)(void *ctx, float *mean, float *var, const float *mine, int c, int ranks);
    /* running = (1 - momentum) running + momentum batch, the variance unbiased with count (c) */
    tfb_status (*bn_running_update)(void *ctx, float *run_mean, float *run_var, const float *mean, const float *var,
                                    int c, float momentum, double count);
    /* out (n) of out_type = a (n, of a_type) + b (n, of b_type), then ReLU when relu, in one pass (a residual
     * block's output); the sum is formed in FP32 and rounded once. out may alias a or b when of the same type. */
    tfb_status (*add_relu)(void *ctx, void *out, tfb_dtype out_type, const void *a, tfb_dtype a_type, const void *b,
                           tfb_dtype b_type, size_t n, int relu);
    /* din (n) of din_type = a + b where y > 0, else 0: the gradient reaching a ReLU's output y (n, of y_type) from
     * the two branches that read it (a residual block's), passed back through the ReLU. b NULL: a alone; y NULL:
     * no ReLU. Summed in FP32, rounded once; din may alias a or b when of the same type. */
    tfb_status (*add_relu_bwd)(void *ctx, void *din, tfb_dtype din_type, const void *a, tfb_dtype a_type,
                               const void *b, tfb_dtype b_type, const void *y, tfb_dtype y_type, size_t n);
    /* y = max pool of x (both of type t); argmax (like y) saved: the index within the image plane, ih * w + iw, of
     * the window's first largest value */
    tfb_status (*maxpool_fwd)(void *ctx, void *y, int *argmax, const void *x, tfb_dtype t, const tfb_pool_desc *d);
    /* dx (of dx_type, overwritten) = for each element of x, the sum of the dy (of dy_type) whose window's argmax
     * it is, added in FP32 in output order (row, then column) and rounded once: deterministic */
    tfb_status (*maxpool_bwd)(void *ctx, void *dx, tfb_dtype dx_type, const void *dy, tfb_dtype dy_type,
                              const int *argmax, const tfb_pool_desc *d);
    /* y (n, c) = mean of x (n, c, hw) (NHWC: (n, hw, c)) over hw */
    tfb_status (*avgpool_fwd)(void *ctx, float *y, const float *x, int n, int c, int hw, tfb_layout layout);
    /* dx (n, c, hw) (NHWC: (n, hw, c)) = dy (n, c) / hw */
    tfb_status (*avgpool_bwd)(void *ctx, float *dx, const float *dy, int n, int c, int hw, tfb_layout layout);

    /* ---- tensor-parallel shards (the caller combines ranks with all-reduces between the passes) ---- */
    /* as embedding_fwd for a table holding rows [row0, row0 + rows) of the full one; other ids give zero rows */
    tfb_status (*embedding_fwd_shard)(void *ctx, float *out, const float *table, const int *ids, int n, int h,
                                      int row0, int rows, int accumulate);
    /* as embedding_bwd for the ids in [row0, row0 + rows), into a table holding those rows */
    tfb_status (*embedding_bwd_shard)(void *ctx, float *dtable, const float *dout, const int *ids, const int *order,
                                      int n, int h, int row0, int rows);
    /* cross-entropy over classes split across ranks; this rank holds classes [col0, col0 + valid) as the first
     * `valid` columns of logits (n, v) (columns >= valid are padding and take no part).
     * pass 1: rowmax (n) = max over the shard (all-reduce MAX next) */
    tfb_status (*xent_shard_max)(void *ctx, float *rowmax, const float *logits, int n, int v, int valid);
    /* pass 2: sums (n, 2) = [sum exp(logit - rowmax), logit of the label when this shard holds it, else 0]
     * (all-reduce SUM next; the row's loss is log(sums[0]) + rowmax - sums[1]) */
    tfb_status (*xent_shard_sum)(void *ctx, float *sums, const float *logits, const int *labels, const float *rowmax,
                                 int n, int v, int valid, int col0);
    /* dlogits (n, v) = (softmax - onehot) * dscale on the shard, 0 in padding; may alias logits */
    tfb_status (*xent_shard_bwd)(void *ctx, float *dlogits, const float *logits, const int *labels,
                                 const float *rowmax, const float *sums, int n, int v, int valid, int col0,
                                 float dscale);
    /* dst (rows, cols) with leading dimension dst_ld = src (rows, cols) with leading dimension src_ld */
    tfb_status (*copy_2d)(void *ctx, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                          size_t cols);
    /* out (n0, n2, n1, n3) = in (n0, n1, n2, n3), the middle two dimensions swapped (attention's tokens x heads <->
     * heads x tokens). in's rows (i0, i1) of n2 * n3 elements lie in_ld apart, out's rows (i0, i2) of n1 * n3
     * elements out_ld apart: in[(i0 n1 + i1) in_ld + i2 n3 + i3] goes to out[(i0 n2 + i2) out_ld + i1 n3 + i3].
     * in is of in_type and out of out_type (a 16-bit out rounds: attention's GEMM operands are written in their
     * type directly, from GEMM results that may be 16-bit too). When bias (n2 n3) is set, bias[i2 n3 + i3] is added
     * to every input row first, in FP32 (the QKV projection's bias). */
    tfb_status (*permute_0213)(void *ctx, void *out, tfb_dtype out_type, size_t out_ld, const void *in,
                               tfb_dtype in_type, size_t in_ld, const float *bias, int n0, int n1, int n2, int n3);

    /* dst (n) = src (n) converted between FP32, FP16 and BF16 */
    tfb_status (*cast)(void *ctx, void *dst, tfb_dtype dst_type, const void *src, tfb_dtype src_type, size_t n);

    /* *all_finite (host) = 1 when every x (n) is finite, else 0 */
    tfb_status (*check_finite)(void *ctx, const float *x, size_t n, int *all_finite);

    void (*destroy)(tfb_backend *be);
};

/* What to open: a backend by name and where this rank sits on its node (a GPU backend takes GPU local_rank). */
typedef struct {
    const char *name;       /* "auto", "cpu", "cuda" */
    int threads;            /* CPU threads of this rank */
    int local_rank, local_size;
    int allow_shared_gpu;   /* more ranks on a node than GPUs: share them instead of refusing */
} tfb_backend_spec;

/* kernels/registry.c: the backend `s` names. On failure `why` gets the reason; on success it may hold a note for
 * the user (what "auto" chose and why), else it is empty. */
tfb_status tfb_backend_open(const tfb_backend_spec *s, tfb_backend **out, char *why, size_t why_len);
/* The CPU backend alone (tests, scripts, the CPU-side reference of the GPU checks). */
tfb_status tfb_backend_open_cpu(int threads, tfb_backend **out);
/* The backends this build contains, comma-separated. */
const char *tfb_backend_list(void);

#endif
