/* bert_layer.h — one post-LN transformer encoder layer, forward and backward, on the backend interface; and the
 * linear-layer helpers the BERT heads reuse.
 *
 *   qkv = x Wqkv^T + b;  ctx = Dropout(softmax(Q K^T / sqrt(d) + mask)) V  (per head);
 *   h1 = x + Dropout(ctx Wo^T + bo);  x1 = LN1(h1);
 *   h2 = x1 + Dropout(GELU(x1 W1^T + b1) W2^T + b2);  y = LN2(h2).
 * Mixed precision: every GEMM operand is cast to ctx->gemm_type (weights from the 16-bit copy kept in step with the
 * FP32 masters, activations into scratch slots); everything else is FP32. This file allocates nothing.
 */
#ifndef TFB_BERT_LAYER_H
#define TFB_BERT_LAYER_H
#include <stdint.h>
#include "../kernels/backend.h"

typedef struct {
    tfb_backend *be;
    tfb_dtype gemm_type;
    int batch, seq, hidden, heads, ffn;  /* batch: samples on this rank */
    float dropout;
    uint64_t seed;
    int step;
    uint64_t sample0;        /* global index of local sample 0: dropout counters are global */
    const int *key_len;      /* (batch) valid keys per sample, or NULL for none masked */
    void *lp[3];             /* (lp_elems) 16-bit scratch for activation operands; unused in FP32 */
    size_t lp_elems;
    const float *master_base;/* FP32 parameter pool; weight w's 16-bit copy is lp_weights + (w - master_base) */
    const uint16_t *lp_weights;
} bert_ctx;

typedef struct {
    float *qkv_w;   /* (3H, H) rows: Q heads, then K heads, then V heads */
    float *qkv_b;   /* (3H) */
    float *ao_w;    /* (H, H) attention output projection */
    float *ao_b;    /* (H) */
    float *ln1_g;   /* (H) */
    float *ln1_b;   /* (H) */
    float *ff1_w;   /* (F, H) */
    float *ff1_b;   /* (F) */
    float *ff2_w;   /* (H, F) */
    float *ff2_b;   /* (H) */
    float *ln2_g;   /* (H) */
    float *ln2_b;   /* (H) */
} bert_layer_w;

/* What forward saves for backward. N = batch * seq tokens, A = heads, s = seq. */
typedef struct {
    float *qkv;      /* (N, 3H) */
    float *att;      /* (batch, A, s, s) softmax output */
    float *att_d;    /* (batch, A, s, s) after attention dropout */
    float *ctx;      /* (N, H) attention context, heads concatenated */
    float *h1;       /* (N, H) LN1 input */
    float *ln1_mean; /* (N) */
    float *ln1_rstd; /* (N) */
    float *x1;       /* (N, H) LN1 output */
    float *u;        /* (N, F) FFN up-projection before GELU */
    float *g;        /* (N, F) GELU output */
    float *h2;       /* (N, H) LN2 input */
    float *ln2_mean; /* (N) */
    float *ln2_rstd; /* (N) */
    float *y;        /* (N, H) layer output */
} bert_layer_acts;

/* Backward work buffers shared by all layers. */
typedef struct {
    float *t1, *t2;  /* (N, H) each */
    float *dqkv;     /* (N, 3H) */
    float *datt;     /* (batch, A, s, s) */
    float *dff;      /* (N, F) */
} bert_layer_scratch;

/* Elements of each scratch slot lp[i] the layer needs (the largest activation operand). */
size_t bert_layer_lp_elems(int batch, int seq, int hidden, int heads, int ffn);

/* out (n, out_f) = in (n, in_f) W^T + b; W (out_f, in_f); b may be NULL. */
tfb_status bert_linear_fwd(const bert_ctx *c, float *out, const float *in, const float *w, const float *b, int n,
                           int in_f, int out_f);
/* din (n, in_f) = dout W (skipped when din is NULL); dW += dout^T in; db += colsum(dout) (skipped when NULL). */
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
