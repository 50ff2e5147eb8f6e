/* bert_layer.h — one post-LN transformer encoder layer, forward and backward, on the backend interface; and the
 * linear-layer helpers the BERT heads reuse.
 *
 *   qkv = x Wqkv^T + b;  ctx = Dropout(softmax(Q K^T / sqrt(d) + mask)) V  (per head; unfused, or one fused op);
 *   h1 = x + Dropout(ctx Wo^T + bo);  x1 = LN1(h1);
 *   h2 = x1 + Dropout(GELU(x1 W1^T + b1) W2^T + b2);  y = LN2(h2).
 * Mixed precision: every GEMM operand is in ctx->gemm_type (weights from the 16-bit copy kept in step with the FP32
 * masters). Activations that only GEMMs read (head-major Q, K, V, the dropped-out attention probabilities, the
 * context, the GELU output) are saved in that type only, written so by the ops that make them; the layer input and
 * x1, which LayerNorm's residuals also read, are saved in FP32 and in 16 bits (the input by a cast, x1 by LN1
 * itself). The GEMM results that only an element-wise op reads (the QKV projection, read by the permute to heads;
 * the attention scores, read by the softmax, which saves its probabilities in the same type; the FFN
 * up-projection, read by GELU and its backward) are written by their GEMM in the GEMM type as well, as PyTorch's
 * autocast does; a bias is added in FP32 by the op reading them. The context is written token-major by its GEMM,
 * in the GEMM type: the output projection's operand. Gradients are cast into scratch slots unless the op making
 * them writes the GEMM type (GELU's backward writes dU so); the gradients only element-wise ops read (the FFN's
 * hidden gradient, read by GELU's backward; the attention probabilities', read by the softmax backward) are written
 * by their GEMMs in the GEMM type, and so are the context's gradient (read token-major by attention's GEMMs) and
 * dQ, dK and dV (written token-major into the QKV GEMM's operand); the output projections' gradients come from the
 * sublayer tails' backward, in that type; so do the output projections' results on one rank (a tensor group sums
 * them in FP32). Everything else is FP32: the residual stream and its gradient, LayerNorm's
 * statistics, the parameter gradients. This file allocates nothing.
 *
 * Tensor parallelism (Megatron-LM): a rank holds whole heads of Wqkv and rows of W1 (column-parallel) and the
 * matching columns of Wo and W2 (row-parallel); the outputs of Wo and W2 are summed over the tensor group before
 * their bias (the "g" operator, two all-reduces forward), and the input gradients of Wqkv and W1 likewise (the
 * "f" operator, two backward, each started before the weight-gradient GEMM and completed after it). Everything
 * between the all-reduces (LayerNorm, residuals, their dropout) is computed identically on every rank. Attention
 * dropout counters use the global head index, so the masks are those of the single-device run.
 */
#ifndef TFB_BERT_LAYER_H
#define TFB_BERT_LAYER_H
#include <stdint.h>
#include "../kernels/backend.h"
#include "comm.h"

struct tfb_workload;
typedef struct {
    tfb_backend *be;
    tfb_dtype gemm_type;
    int tf32;                   /* FP32 GEMM inputs rounded to TF32 */
    int batch, seq, hidden;  /* batch: samples in this micro-batch; hidden: the model width H */
    int heads, ffn;          /* heads and FFN width held by this rank (all of them without tensor parallelism) */
    int head_dim;            /* 0: hidden / heads */
    int heads_total;         /* heads of the whole layer (0: heads) */
    int tp_rank;             /* this rank's place in the tensor group: its first head is tp_rank * heads */
    tfb_comm *tp;            /* the tensor group, or NULL */
    struct tfb_workload *wl; /* its timing marks and tensor-group bytes; may be NULL without a group */
    float dropout;
    uint64_t seed;
    int step;
    uint64_t sample0;        /* global index of local sample 0: dropout counters are global */
    const int *key_len;      /* (batch) valid keys per sample, or NULL for none masked */
    int fused_attention;     /* attention through the backend's fused op (attn_fused_fwd/bwd): no (s, s) tensors */
    void *qkv;               /* (N, 3 heads head_dim) the QKV projection in the GEMM type, before its bias: read
                              * only by the permute to heads, so one buffer serves every layer */
    void *lp[3];             /* (lp_elems) 16-bit scratch for gradient operands; unused in FP32 */
    size_t lp_elems;
    const float *master_base;/* FP32 parameter pool; weight w's 16-bit copy is lp_weights + (w - master_base) */
    const uint16_t *lp_weights;
} bert_ctx;

/* Shapes on one rank of a tensor group of T: Hl = H / T (its heads' width), Fl = F / T. */
typedef struct {
    float *qkv_w;   /* (3Hl, H) rows: this rank's Q heads, then its K heads, then its V heads */
    float *qkv_b;   /* (3Hl) */
    float *ao_w;    /* (H, Hl) attention output projection, this rank's columns */
    float *ao_b;    /* (H) */
    float *ln1_g;   /* (H) */
    float *ln1_b;   /* (H) */
    float *ff1_w;   /* (Fl, H) */
    float *ff1_b;   /* (Fl) */
    float *ff2_w;   /* (H, Fl) */
    float *ff2_b;   /* (H) */
    float *ln2_g;   /* (H) */
    float *ln2_b;   /* (H) */
} bert_layer_w;

/* What forward saves for backward. N = batch * seq tokens, A = heads, s = seq. "GEMM type": ctx->gemm_type. */
typedef struct {
    void *x_lp;      /* (N, H) the layer input in the GEMM type; NULL in FP32 runs (the input itself) */
    void *qkv_hm;    /* (3, batch, A, s, d) head-major Q, K, V in the GEMM type, A: this rank's heads */
    void *att;       /* (batch, A, s, s) the scores, then the softmax output, in the GEMM type; unfused only */
    void *att_d;     /* (batch, A, s, s) after attention dropout, in the GEMM type; unfused only */
    float *lse;      /* (batch, A, s) each query row's log-sum-exp of its scores; fused attention only */
    void *ctx;       /* (N, Hl) attention context, heads concatenated, in the GEMM type */
    float *h1;       /* (N, H) LN1 input */
    float *ln1_mean; /* (N) */
    float *ln1_rstd; /* (N) */
    float *x1;       /* (N, H) LN1 output */
    void *x1_lp;     /* (N, H) x1 in the GEMM type; NULL in FP32 runs */
    void *u;         /* (N, Fl) x1 W1^T in the GEMM type (GELU adds the bias b1 as it reads it) */
    void *g;         /* (N, Fl) GELU output, in the GEMM type */
    float *h2;       /* (N, H) LN2 input */
    float *ln2_mean; /* (N) */
    float *ln2_rstd; /* (N) */
    float *y;        /* (N, H) layer output */
    void *y_lp;      /* (N, H) y in the GEMM type, written by LN2 in its pass when set: the next layer's x_lp */
    int x_lp_ready;  /* x_lp already holds the input's 16-bit copy (the previous layer's LN2 wrote it): no cast */
} bert_layer_acts;

/* Backward work buffers shared by all layers. */
typedef struct {
    float *t1, *t2;  /* (N, H) each */
    float *dqkv;     /* (N, 3Hl); FP32 runs only (16-bit runs write it in the GEMM type into ctx->lp[0]) */
    float *datt;     /* (batch, A, s, s); unfused FP32 runs only (16-bit runs: ctx->lp[1]) */
    float *dff;      /* (N, Fl); FP32 runs only (16-bit runs: ctx->lp[1]) */
    float *rowdot;   /* (batch, A, s); fused attention only: its backward's row sums of dctx * ctx */
} bert_layer_scratch;

/* Elements of each scratch slot lp[i] the layer needs (the largest activation operand); heads and ffn local. Fused
 * attention makes no (batch, heads, seq, seq) gradient. */
size_t bert_layer_lp_elems(int batch, int seq, int hidden, int heads, int ffn, int fused_attention);
/* Width of this rank's heads (Hl). */
int bert_ctx_local_width(const bert_ctx *c);
/* Backward of a column-parallel linear layer: din (n, in_f) summed over the group (started before the weight
 * gradient, completed after it); dW and db accumulate this rank's rows. */
tfb_status bert_col_parallel_bwd(const bert_ctx *c, float *din, float *dw, float *db, const float *dout,
                                 const float *in, const float *w, int n, int in_f, int out_f);

/* out (n, out_f) = in (n, in_f) W^T + b; W (out_f, in_f); b may be NULL. */
tfb_status bert_linear_fwd(const bert_ctx *c, float *out, const float *in, const float *w, const float *b, int n,
                           int in_f, int out_f);
/* din (n, in_f) = dout W (skipped when din is NULL); dW += dout^T in and db += colsum(dout) (skipped when dw is
 * NULL; db also when db is NULL). */
tfb_status bert_linear_bwd(const bert_ctx *c, float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int in_f, int out_f);

/* Dropout key for site `site` of this step at element offset `elem0`. */
tfb_dropout_key bert_dropout_key(const bert_ctx *c, uint32_t site, uint64_t elem0);

/* layer: 0-based index (keys its dropout sites). x (N, H) is the input; a->y the output. */
tfb_status bert_layer_fwd(const bert_ctx *c, int layer, const bert_layer_w *w, const float *x, bert_layer_acts *a);
/* grad (N, H): dy in, dx out. dw accumulates. */
tfb_status bert_layer_bwd(const bert_ctx *c, int layer, const bert_layer_w *w, const bert_layer_w *dw,
                          const float *x, const bert_layer_acts *a, const bert_layer_scratch *s, float *grad);

#endif
