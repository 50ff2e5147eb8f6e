/* bert.c — the BERT pre-training workload: configurations, parameter layout, initialisation, synthetic data,
 * embeddings, the MLM and NSP heads, and the workload functions the run driver calls.
 *
 * The model is a row of units: the embeddings, each encoder layer, the heads (MLM and NSP). A pipeline stage
 * holds a contiguous range of units (balanced by FLOPs) and one activation set per micro-batch in flight; the
 * last stage keeps its own copy of the word embedding for the tied decoder, whose gradient the driver sums with
 * the first stage's. Under tensor parallelism the word embedding and the decoder are split over the vocabulary
 * (padded to a multiple of 128 x T, the padding masked out of the softmax) and the layers as in bert_layer.h.
 *
 * Parameters live in one FP32 pool in forward order, so backward completes gradients from the end of the pool
 * towards its start: the watermark reported to the driver only falls. Encoder layers are in bert_layer.c; this
 * file does not time, schedule micro-batches or update parameters.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bert.h"
#include "bert_layer.h"
#include "mempool.h"
#include "npy.h"
#include "../kernels/philox.h"

enum { TOK_CLS = 101, TOK_SEP = 102, TOK_MASK = 103, TOK_FIRST_WORD = 999 };
enum { STREAM_INIT = 1, STREAM_DATA = 2 };
enum { EMB_PARAMS = 5, LAYER_PARAMS = 12 };

/* Shapes on one rank: Vl = padded vocabulary / T; layer shards in bert_layer.h. NULL when the stage lacks it. */
typedef struct {
    float *word_emb;   /* (Vl, H), also the MLM decoder weight (tied; the last stage holds a copy) */
    float *pos_emb;    /* (max_pos, H) */
    float *type_emb;   /* (type_vocab, H) */
    float *emb_ln_g;   /* (H) */
    float *emb_ln_b;   /* (H) */
    bert_layer_w *layer; /* [L], only this stage's layers bound */
    float *pool_w;     /* (H, H) */
    float *pool_b;     /* (H) */
    float *mlm_w;      /* (H, H) MLM transform */
    float *mlm_b;      /* (H) */
    float *mlm_ln_g;   /* (H) */
    float *mlm_ln_b;   /* (H) */
    float *mlm_dec_b;  /* (Vl) decoder bias */
    float *nsp_w;      /* (2, H) */
    float *nsp_b;      /* (2) */
} bert_weights;

/* What this rank holds: units [unit0, unit1) of embeddings (0), layers (1..L) and heads (L + 1). */
typedef struct {
    int first, last;   /* holds the embeddings / the heads */
    int l0, l1;        /* layers [l0, l1) */
    int T, t;          /* tensor group size and rank */
    int Vl, v0, valid; /* vocabulary rows per rank, this rank's first, how many of them are real */
} bert_stage;

/* Walks the tensors in pool order: binds each pointer at `base` and, when `table` is non-NULL, records it. */
typedef struct {
    float *base;
    size_t offset;
    tfb_param_info *table;
    int count;
} layout_cursor;

typedef struct {
    const char *name;
    int index, rows, cols, full_rows, full_cols;
    tfb_shard_kind shard;
    int blocks, decay, tied;
} tensor_spec;

static void take(layout_cursor *lc, float **field, tensor_spec t) {
    if (lc->base) *field = lc->base + lc->offset;
    if (lc->table) {
        tfb_param_info *p = &lc->table[lc->count];
        *p = (tfb_param_info){.offset = lc->offset, .numel = (size_t)t.rows * t.cols, .rows = t.rows,
                              .cols = t.cols, .decay = t.decay, .index = t.index, .full_rows = t.full_rows,
                              .full_cols = t.full_cols, .shard = t.shard, .blocks = t.blocks ? t.blocks : 1,
                              .tied_copy = t.tied};
        snprintf(p->name, sizeof p->name, "%s", t.name);
    }
    lc->count++;
    lc->offset += (size_t)t.rows * t.cols;
}

/* A tensor that is not split: local shape = whole shape. */
static tensor_spec whole(const char *name, int index, int rows, int cols, int decay) {
    return (tensor_spec){.name = name, .index = index, .rows = rows, .cols = cols, .full_rows = rows,
                         .full_cols = cols, .decay = decay};
}

static tensor_spec split_rows(const char *name, int index, int full_rows, int cols, int local_rows, int blocks,
                              int decay) {
    return (tensor_spec){.name = name, .index = index, .rows = local_rows, .cols = cols, .full_rows = full_rows,
                         .full_cols = cols, .shard = TFB_SHARD_ROWS, .blocks = blocks, .decay = decay};
}

static void layout_layer(layout_cursor *lc, const bert_config *c, const bert_stage *st, int l, bert_layer_w *w) {
    int H = c->hidden, F = c->ffn, T = st->T, i = EMB_PARAMS + LAYER_PARAMS * l;
    char n[LAYER_PARAMS][64];
    static const char *const sfx[LAYER_PARAMS] = {"attn.qkv.weight", "attn.qkv.bias", "attn.out.weight",
        "attn.out.bias", "attn.ln.gamma", "attn.ln.beta", "ffn.up.weight", "ffn.up.bias", "ffn.down.weight",
        "ffn.down.bias", "ffn.ln.gamma", "ffn.ln.beta"};
    for (int k = 0; k < LAYER_PARAMS; k++) snprintf(n[k], sizeof n[k], "layer.%d.%s", l, sfx[k]);
    tensor_spec ao = {.name = n[2], .index = i + 2, .rows = H, .cols = H / T, .full_rows = H, .full_cols = H,
                      .shard = TFB_SHARD_COLS, .decay = 1};
    tensor_spec f2 = {.name = n[8], .index = i + 8, .rows = H, .cols = F / T, .full_rows = H, .full_cols = F,
                      .shard = TFB_SHARD_COLS, .decay = 1};
    take(lc, &w->qkv_w, split_rows(n[0], i, 3 * H, H, 3 * H / T, 3, 1));
    take(lc, &w->qkv_b, split_rows(n[1], i + 1, 3 * H, 1, 3 * H / T, 3, 0));
    take(lc, &w->ao_w, ao);
    take(lc, &w->ao_b, whole(n[3], i + 3, H, 1, 0));
    take(lc, &w->ln1_g, whole(n[4], i + 4, H, 1, 0));
    take(lc, &w->ln1_b, whole(n[5], i + 5, H, 1, 0));
    take(lc, &w->ff1_w, split_rows(n[6], i + 6, F, H, F / T, 1, 1));
    take(lc, &w->ff1_b, split_rows(n[7], i + 7, F, 1, F / T, 1, 0));
    take(lc, &w->ff2_w, f2);
    take(lc, &w->ff2_b, whole(n[9], i + 9, H, 1, 0));
    take(lc, &w->ln2_g, whole(n[10], i + 10, H, 1, 0));
    take(lc, &w->ln2_b, whole(n[11], i + 11, H, 1, 0));
}

static void layout_heads(layout_cursor *lc, const bert_config *c, const bert_stage *st, bert_weights *w) {
    int H = c->hidden, i = EMB_PARAMS + LAYER_PARAMS * c->layers;
    if (!st->first) { /* the tied decoder weight: a copy of the first stage's word embedding */
        tensor_spec t = split_rows("emb.word", 0, c->vocab, H, st->Vl, 1, 1);
        t.tied = 1;
        take(lc, &w->word_emb, t);
    }
    take(lc, &w->pool_w, whole("pooler.weight", i, H, H, 1));
    take(lc, &w->pool_b, whole("pooler.bias", i + 1, H, 1, 0));
    take(lc, &w->mlm_w, whole("mlm.transform.weight", i + 2, H, H, 1));
    take(lc, &w->mlm_b, whole("mlm.transform.bias", i + 3, H, 1, 0));
    take(lc, &w->mlm_ln_g, whole("mlm.ln.gamma", i + 4, H, 1, 0));
    take(lc, &w->mlm_ln_b, whole("mlm.ln.beta", i + 5, H, 1, 0));
    take(lc, &w->mlm_dec_b, split_rows("mlm.decoder.bias", i + 6, c->vocab, 1, st->Vl, 1, 0));
    take(lc, &w->nsp_w, whole("nsp.weight", i + 7, 2, H, 1));
    take(lc, &w->nsp_b, whole("nsp.bias", i + 8, 2, 1, 0));
}

static void layout(layout_cursor *lc, const bert_config *c, const bert_stage *st, bert_weights *w) {
    int H = c->hidden;
    if (st->first) {
        take(lc, &w->word_emb, split_rows("emb.word", 0, c->vocab, H, st->Vl, 1, 1));
        take(lc, &w->pos_emb, whole("emb.position", 1, c->max_pos, H, 1));
        take(lc, &w->type_emb, whole("emb.token_type", 2, c->type_vocab, H, 1));
        take(lc, &w->emb_ln_g, whole("emb.ln.gamma", 3, H, 1, 0));
        take(lc, &w->emb_ln_b, whole("emb.ln.beta", 4, H, 1, 0));
    }
    for (int l = st->l0; l < st->l1; l++) layout_layer(lc, c, st, l, &w->layer[l]);
    if (st->last) layout_heads(lc, c, st, w);
}

static bert_stage whole_model(const bert_config *c) {
    return (bert_stage){.first = 1, .last = 1, .l0 = 0, .l1 = c->layers, .T = 1, .Vl = c->vocab, .valid = c->vocab};
}

size_t bert_param_count(const bert_config *c) {
    bert_layer_w *lw = calloc((size_t)c->layers, sizeof *lw);
    bert_weights w = {.layer = lw};
    layout_cursor lc = {0};
    bert_stage st = whole_model(c);
    if (lw) layout(&lc, c, &st, &w);
    free(lw);
    return lc.offset;
}

static double layer_flops(const bert_config *c, double S) {
    double H = c->hidden, F = c->ffn;
    return 2 * S * H * 3 * H + 2 * 2 * S * S * H + 2 * S * H * H + 2 * 2 * S * H * F;
}

static double heads_flops(const bert_config *c, int masked) {
    double H = c->hidden;
    return 2.0 * masked * H * H + 2.0 * masked * H * c->vocab + 2 * H * H + 2 * H * 2;
}

double bert_train_flops(const bert_config *c, int s, int masked) {
    return 3.0 * (c->layers * layer_flops(c, s) + heads_flops(c, masked));
}

/* Forward FLOPs per unit for the pipeline partition; the embeddings count their element-wise work. */
static void unit_costs(const bert_config *c, int s, int masked, double *costs) {
    costs[0] = 10.0 * s * c->hidden;
    for (int l = 0; l < c->layers; l++) costs[1 + l] = layer_flops(c, s);
    costs[c->layers + 1] = heads_flops(c, masked);
}

int bert_units(const bert_config *c) { return c->layers + 2; }

/* ---- model state ---- */

/* One micro-batch's saved activations on this stage. N tokens, M masked, B sequences, Vl vocabulary shard. */
typedef struct {
    float *x_in;                  /* (N, H) received from the previous stage */
    float *emb_sum, *emb_ln, *x0; /* (N, H) first stage */
    float *emb_mean, *emb_rstd;   /* (N) */
    bert_layer_acts *layer;       /* [L], this stage's layers */
    float *mlm_in, *mlm_pre, *mlm_act, *mlm_ln; /* (M, H) last stage */
    float *mlm_mean, *mlm_rstd;   /* (M) */
    float *logits;                /* (M, Vl), then dlogits */
    float *cls, *pool_pre, *pooled; /* (B, H) */
    float *nsp_logits;            /* (B, 2), then their gradient */
} bert_slot;

typedef struct {
    int *ids, *types, *pos;       /* (N) */
    int *mlm_rows, *mlm_labels;   /* (M) row index into (N, H); original token */
    int *cls_rows, *nsp_labels;   /* (B) */
    int *ids_order, *types_order, *pos_order; /* (N) the token indices sorted by ids, types, pos (tfb_embed_order):
                                               * the embedding backward's sequence */
} bert_batch;

enum { BATCH_ARRAYS = 10 };

typedef struct {
    bert_config cfg;
    tfb_workload_config wc;
    tfb_workload wl;
    tfb_backend *be;
    bert_stage st;
    bert_ctx ctx;
    bert_weights w, g;
    bert_slot *slot;              /* [wc.slots] */
    unsigned char *busy;          /* [wc.slots] */
    float *dy;                    /* (N, H) gradient flowing down the encoder, shared by micro-batches */
    float *dm1, *dm2;             /* (M, H) MLM head gradients */
    float *db1, *db2;             /* (B, H) NSP head gradients */
    bert_layer_scratch s;
    bert_layer_acts rc;           /* checkpointing: one layer's activations, rebuilt in forward and in backward */
    bert_batch *dev, *host;       /* [wc.slots] the batch in backend memory, and its host copy */
    bert_batch ahead;             /* a batch made on the host before it is loaded (prepare_batch), laid out as a
                                   * slot's span; ahead_step, ahead_mb name it (ahead_step -1: none) */
    char *ahead_mem;
    int ahead_step, ahead_mb;
    tfb_mempool pools[3];         /* parameters+gradients, activations, batches */
    int *perm;                    /* (seq_len) host work space for choosing masked positions */
    int *order_count;             /* (max(vocab, max_pos, type_vocab) + 1) host work space of tfb_embed_order */
    int last_slot;                /* the slot of the last batch loaded (for --dump) */
    int mb;                       /* the micro-batch running (its loss log entry) */
    int N, M, B;
} bert_model;

static void plan_n(tfb_mempool *p, float **const *f, int n, size_t elems) {
    for (int i = 0; i < n; i++) tfb_mempool_add(p, (void **)f[i], elems * 4);
}

/* A layer's saved activations; those only GEMMs or their element-wise readers read in the GEMM type (es bytes an
 * element), the 16-bit casts of the layer input and x1 only in 16-bit runs. */
static void plan_layer_acts(tfb_mempool *p, const bert_model *m, bert_layer_acts *la) {
    size_t N = (size_t)m->N, H = (size_t)m->cfg.hidden, s = (size_t)m->wc.seq_len;
    size_t W = (size_t)bert_ctx_local_width(&m->ctx), F = (size_t)m->ctx.ffn, A = (size_t)m->ctx.heads;
    size_t es = tfb_dtype_size(m->wc.gemm_type);
    float **nh[] = {&la->h1, &la->x1, &la->h2, &la->y};
    plan_n(p, nh, 4, N * H);
    float **ln[] = {&la->ln1_mean, &la->ln1_rstd, &la->ln2_mean, &la->ln2_rstd};
    plan_n(p, ln, 4, N);
    tfb_mempool_add(p, &la->ctx, N * W * es);
    tfb_mempool_add(p, &la->qkv_hm, N * 3 * W * es);
    if (m->wc.fused_attention) { /* no (s, s) tensors: each query row's log-sum-exp instead */
        tfb_mempool_add(p, (void **)&la->lse, m->B * A * s * 4);
    } else {
        tfb_mempool_add(p, &la->att, m->B * A * s * s * es);
        tfb_mempool_add(p, &la->att_d, m->B * A * s * s * es);
    }
    tfb_mempool_add(p, &la->u, N * F * es);
    tfb_mempool_add(p, &la->g, N * F * es);
    if (m->wc.gemm_type == TFB_F32) return;
    tfb_mempool_add(p, &la->x_lp, N * H * 2);
    tfb_mempool_add(p, &la->x1_lp, N * H * 2);
}

static void plan_slot(tfb_mempool *p, bert_model *m, bert_slot *a) {
    size_t N = (size_t)m->N, M = (size_t)m->M, B = (size_t)m->B, H = (size_t)m->cfg.hidden;
    if (!m->st.first) tfb_mempool_add(p, (void **)&a->x_in, N * H * 4);
    if (m->st.first) {
        float **nh[] = {&a->emb_sum, &a->emb_ln, &a->x0};
        plan_n(p, nh, 3, N * H);
        float **n1[] = {&a->emb_mean, &a->emb_rstd};
        plan_n(p, n1, 2, N);
    }
    for (int l = m->st.l0; l < m->st.l1; l++) {
        if (m->wc.checkpointing) tfb_mempool_add(p, (void **)&a->layer[l].y, N * H * 4); /* next layer's input */
        else plan_layer_acts(p, m, &a->layer[l]);
    }
    if (!m->st.last) return;
    float **mh[] = {&a->mlm_in, &a->mlm_pre, &a->mlm_act, &a->mlm_ln};
    plan_n(p, mh, 4, M * H);
    float **m1[] = {&a->mlm_mean, &a->mlm_rstd};
    plan_n(p, m1, 2, M);
    tfb_mempool_add(p, (void **)&a->logits, M * (size_t)m->st.Vl * 4);
    float **bh[] = {&a->cls, &a->pool_pre, &a->pooled};
    plan_n(p, bh, 3, B * H);
    tfb_mempool_add(p, (void **)&a->nsp_logits, B * 2 * 4);
}

/* The last stage's loss log: per micro-batch the MLM sum (or, on a vocabulary shard, its row statistics) and the NSP
 * sum; a micro-batch's loss is MLM sum / M + NSP sum / B. */
static void plan_loss_log(tfb_mempool *p, bert_model *m) {
    tfb_loss_log *log = &m->wl.loss_log;
    tfb_loss_log_plan(log, p, m->st.T > 1 ? m->M : 0, 2, m->wc.microbatches);
    log->weight[0] = 1.0 / m->M;
    log->weight[1] = 1.0 / m->B;
}

/* Backward buffers shared by every micro-batch. */
static void plan_shared(tfb_mempool *p, bert_model *m) {
    size_t N = (size_t)m->N, M = (size_t)m->M, B = (size_t)m->B, H = (size_t)m->cfg.hidden;
    size_t W = (size_t)bert_ctx_local_width(&m->ctx), A = (size_t)m->ctx.heads, s = (size_t)m->wc.seq_len;
    float **nh[] = {&m->dy, &m->s.t1, &m->s.t2};
    plan_n(p, nh, 3, N * H);
    if (m->st.last) {
        float **mh[] = {&m->dm1, &m->dm2};
        plan_n(p, mh, 2, M * H);
        float **bh[] = {&m->db1, &m->db2};
        plan_n(p, bh, 2, B * H);
    }
    if (m->wc.gemm_type == TFB_F32) { /* 16-bit runs keep these gradients in the 16-bit slots (plan_lowp) */
        tfb_mempool_add(p, (void **)&m->s.dqkv, N * 3 * W * 4);
        tfb_mempool_add(p, (void **)&m->s.dff, N * (size_t)m->ctx.ffn * 4);
        if (!m->wc.fused_attention) tfb_mempool_add(p, (void **)&m->s.datt, B * A * s * s * 4);
    }
    if (m->wc.fused_attention) tfb_mempool_add(p, (void **)&m->s.rowdot, B * A * s * 4);
    size_t es = tfb_dtype_size(m->wc.gemm_type);
    if (m->st.l1 > m->st.l0) tfb_mempool_add(p, &m->ctx.qkv, N * 3 * W * es); /* every layer's QKV projection */
    if (m->wc.checkpointing && m->st.l1 > m->st.l0) plan_layer_acts(p, m, &m->rc);
}

/* Low-precision copies: the 16-bit weight pool and three activation slots, only for FP16/BF16 runs. */
static void plan_lowp(tfb_mempool *p, bert_model *m) {
    if (m->wc.gemm_type == TFB_F32) return;
    size_t slot = bert_layer_lp_elems(m->B, m->wc.seq_len, m->cfg.hidden, m->cfg.heads, m->cfg.ffn,
                                      m->wc.fused_attention);
    size_t logits = (size_t)m->M * m->st.Vl;
    m->ctx.lp_elems = slot > logits ? slot : logits;
    tfb_mempool_add(p, (void **)&m->wl.lowp_pool, m->wl.numel * 2);
    for (int i = 0; i < 3; i++) tfb_mempool_add(p, &m->ctx.lp[i], m->ctx.lp_elems * 2);
}

static void plan_batch(tfb_mempool *p, bert_batch *b, int N, int M, int B) {
    int **n[] = {&b->ids, &b->types, &b->pos, &b->ids_order, &b->types_order, &b->pos_order};
    for (int i = 0; i < 6; i++) tfb_mempool_add(p, (void **)n[i], (size_t)N * 4);
    tfb_mempool_add(p, (void **)&b->mlm_rows, (size_t)M * 4);
    tfb_mempool_add(p, (void **)&b->mlm_labels, (size_t)M * 4);
    tfb_mempool_add(p, (void **)&b->cls_rows, (size_t)B * 4);
    tfb_mempool_add(p, (void **)&b->nsp_labels, (size_t)B * 4);
}

/* ---- initialisation: N(0, 0.02) for matrices and embeddings, zero biases, LayerNorm gamma 1 (BERT) ---- */

static void init_tensor(float *x, const tfb_param_info *p, const void *ctx) {
    uint64_t seed = *(const uint64_t *)ctx;
    size_t n = (size_t)p->full_rows * p->full_cols;
    int is_gamma = strstr(p->name, "gamma") != NULL;
    tfb_philox_key k = tfb_philox_key_make(seed, STREAM_INIT + 16u * (uint32_t)p->index);
    for (size_t i = 0; i < n; i += 2) {
        if (!p->decay) { x[i] = is_gamma ? 1.0f : 0.0f; if (i + 1 < n) x[i + 1] = x[i]; continue; }
        tfb_philox_ctr r = tfb_philox_block(k, i << 1, 0);
        float u1 = tfb_u32_to_unit(r.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(r.v[1]);
        float rad = sqrtf(-2.0f * logf(u1)) * 0.02f;
        x[i] = rad * cosf(6.28318530718f * u2);
        if (i + 1 < n) x[i + 1] = rad * sinf(6.28318530718f * u2);
    }
}

/* ---- synthetic data: a pure function of (seed, global sample index) ---- */

static uint32_t draw(tfb_philox_key k, uint64_t sample, uint32_t j) {
    return tfb_philox_block(k, (sample << 12) | (j & ~3u), 0).v[j & 3u];
}

/* Sequence `sample` at row b of the host batch h: [CLS] A [SEP] B [SEP], masked positions 80/10/10. */
static void make_sample(bert_model *m, const bert_batch *h, int b, uint64_t sample) {
    int s = m->wc.seq_len, V = m->cfg.vocab, P = m->wc.masked < s - 1 ? m->wc.masked : s - 1;
    tfb_philox_key k = tfb_philox_key_make(m->wc.seed, STREAM_DATA);
    int *ids = h->ids + b * s, *types = h->types + b * s;
    int split = s > 4 ? 1 + 1 + (int)(draw(k, sample, 0) % (uint32_t)(s - 3)) : s / 2;
    for (int t = 0; t < s; t++) {
        ids[t] = TOK_FIRST_WORD + (int)(draw(k, sample, 4u + (uint32_t)t) % (uint32_t)(V - TOK_FIRST_WORD));
        types[t] = t >= split;
        h->pos[b * s + t] = t;
    }
    ids[0] = TOK_CLS;
    ids[split - 1] = TOK_SEP;
    ids[s - 1] = TOK_SEP;
    int *perm = m->perm;
    for (int t = 0; t < s; t++) perm[t] = t;
    for (int j = 0; j < P && s - 1 - j > 0; j++) { /* partial Fisher-Yates over positions 1 .. s-1 */
        int pick = 1 + j + (int)(draw(k, sample, 2048u + (uint32_t)j) % (uint32_t)(s - 1 - j));
        int pos = perm[pick];
        perm[pick] = perm[1 + j];
        perm[1 + j] = pos;
        uint32_t r = draw(k, sample, 3072u + (uint32_t)j) % 10u;
        h->mlm_rows[b * P + j] = b * s + pos;
        h->mlm_labels[b * P + j] = ids[pos];
        if (r < 8) ids[pos] = TOK_MASK;
        else if (r < 9) ids[pos] = TOK_FIRST_WORD + (int)(draw(k, sample, 1024u + (uint32_t)j) % (uint32_t)(V - TOK_FIRST_WORD));
    }
    h->cls_rows[b] = b * s;
    h->nsp_labels[b] = (int)(draw(k, sample, 1u) & 1u);
}

/* The arrays of batch b (a slot's device or host copy, or the batch made ahead) in one order, with their lengths. */
static void batch_arrays(const bert_model *m, bert_batch *b, int **a[BATCH_ARRAYS], size_t n[BATCH_ARRAYS]) {
    int **p[BATCH_ARRAYS] = {&b->ids, &b->types, &b->pos, &b->mlm_rows, &b->mlm_labels, &b->cls_rows,
                             &b->nsp_labels, &b->ids_order, &b->types_order, &b->pos_order};
    size_t N = (size_t)m->N, M = (size_t)m->M, B = (size_t)m->B;
    size_t len[BATCH_ARRAYS] = {N, N, N, M, M, B, B, N, N, N};
    for (int i = 0; i < BATCH_ARRAYS; i++) a[i] = p[i], n[i] = len[i];
}

/* The slot's arrays as one span of the input pool, [*lo, *lo + bytes): they lie together there, as in the host
 * mirror, so a batch is uploaded in one copy (each copy waits for the stream: ten would drain the device ten times
 * a step). Every slot's span has the same layout. */
static size_t batch_span(bert_model *m, int slot, char **lo) {
    int **a[BATCH_ARRAYS];
    size_t n[BATCH_ARRAYS];
    batch_arrays(m, &m->dev[slot], a, n);
    char *first = (char *)*a[0], *end = first;
    for (int i = 0; i < BATCH_ARRAYS; i++) {
        char *p = (char *)*a[i], *e = p + n[i] * sizeof(int);
        first = p < first ? p : first;
        end = e > end ? e : end;
    }
    *lo = first;
    return (size_t)(end - first);
}

/* The embeddings' backward sequences: each table's token order. */
static void order_batch(bert_model *m, const bert_batch *h) {
    const bert_config *c = &m->cfg;
    tfb_embed_order(h->ids, m->N, c->vocab, h->ids_order, m->order_count);
    tfb_embed_order(h->types, m->N, c->type_vocab, h->types_order, m->order_count);
    tfb_embed_order(h->pos, m->N, c->max_pos, h->pos_order, m->order_count);
}

/* Micro-batch mb of `step` made into the host batch h: its samples and the embeddings' orders. */
static void make_batch(bert_model *m, const bert_batch *h, int step, int mb) {
    uint64_t first = (uint64_t)(m->wc.fixed_batch ? 0 : step) * m->wc.global_batch + m->wc.sample0 +
                     (uint64_t)mb * m->B;
    for (int b = 0; b < m->B; b++) make_sample(m, h, b, first + (uint64_t)b);
    order_batch(m, h);
}

/* Only the stages that read tokens or labels need a batch. */
static int needs_batch(const bert_model *m) { return m->st.first || m->st.last; }

/* Made ahead while the device finishes the step before (the driver calls it before that step's closing sync). */
static tfb_status bert_prepare_batch(void *self, int step, int mb) {
    bert_model *m = self;
    if (!needs_batch(m)) return TFB_OK;
    make_batch(m, &m->ahead, step, mb);
    m->ahead_step = step;
    m->ahead_mb = mb;
    return TFB_OK;
}

/* The batch made ahead when it is this one, else made now; then uploaded in one copy. */
static tfb_status bert_load_batch(void *self, int step, int mb, int slot) {
    bert_model *m = self;
    if (!needs_batch(m)) return TFB_OK;
    char *lo;
    size_t bytes = batch_span(m, slot, &lo);
    char *host = tfb_mempool_mirror(&m->pools[2], lo);
    if (m->ahead_step == step && m->ahead_mb == mb) memcpy(host, m->ahead_mem, bytes);
    else make_batch(m, &m->host[slot], step, mb);
    m->ahead_step = -1;
    m->last_slot = slot;
    return m->be->copy_h2d(m->be->ctx, lo, host, bytes);
}

/* ---- forward ---- */

static void set_micro_batch(bert_model *m, int step, int mb) {
    m->ctx.step = step;
    m->ctx.sample0 = (uint64_t)m->wc.sample0 + (uint64_t)mb * m->B;
    m->mb = mb;
}

static tfb_status embeddings_fwd(bert_model *m, bert_slot *a, const bert_batch *d) {
    tfb_backend *be = m->be;
    int N = m->N, H = m->cfg.hidden;
    if (m->st.T > 1) {
        TFB_CHECK(be->embedding_fwd_shard(be->ctx, a->emb_sum, m->w.word_emb, d->ids, N, H, m->st.v0, m->st.Vl, 0));
        TFB_CHECK(tfb_workload_tp_allreduce(&m->wl, m->wc.tp, a->emb_sum, (size_t)N * H, TFB_SUM));
    } else {
        TFB_CHECK(be->embedding_fwd(be->ctx, a->emb_sum, m->w.word_emb, d->ids, N, H, 0));
    }
    TFB_CHECK(be->embedding_fwd(be->ctx, a->emb_sum, m->w.pos_emb, d->pos, N, H, 1));
    TFB_CHECK(be->embedding_fwd(be->ctx, a->emb_sum, m->w.type_emb, d->types, N, H, 1));
    TFB_CHECK(be->layernorm_fwd(be->ctx, a->emb_ln, a->emb_mean, a->emb_rstd, a->emb_sum, m->w.emb_ln_g,
                                m->w.emb_ln_b, N, H, 1e-12f));
    return be->dropout_fwd(be->ctx, a->x0, TFB_F32, a->emb_ln, (size_t)N * H, m->wc.dropout,
                           bert_dropout_key(&m->ctx, 0, m->ctx.sample0 * (size_t)m->wc.seq_len * H));
}

/* MLM loss of the micro-batch into its loss log entry: one pass on a whole vocabulary (sum 0), three with
 * all-reduces on a shard (the row statistics, which the backward pass reads too). Nothing is read back here. */
static tfb_status mlm_loss_launch(bert_model *m, bert_slot *a, const bert_batch *d) {
    tfb_backend *be = m->be;
    const tfb_loss_log *log = &m->wl.loss_log;
    int M = m->M, Vl = m->st.Vl;
    float *xmax = tfb_loss_log_rowmax(log, m->mb), *xsums = tfb_loss_log_rowsums(log, m->mb);
    if (!xmax) return TFB_ERR_STATE;
    if (m->st.T == 1) return be->xent_fwd(be->ctx, tfb_loss_log_sums(log, m->mb), a->logits, d->mlm_labels, M, Vl);
    TFB_CHECK(be->xent_shard_max(be->ctx, xmax, a->logits, M, Vl, m->st.valid));
    TFB_CHECK(tfb_workload_tp_allreduce(&m->wl, m->wc.tp, xmax, (size_t)M, TFB_MAX));
    TFB_CHECK(be->xent_shard_sum(be->ctx, xsums, a->logits, d->mlm_labels, xmax, M, Vl, m->st.valid, m->st.v0));
    return tfb_workload_tp_allreduce(&m->wl, m->wc.tp, xsums, (size_t)2 * M, TFB_SUM);
}

static tfb_status heads_fwd(bert_model *m, bert_slot *a, const bert_batch *d, const float *y) {
    tfb_backend *be = m->be;
    bert_ctx *c = &m->ctx;
    int M = m->M, B = m->B, H = m->cfg.hidden;
    TFB_CHECK(be->embedding_fwd(be->ctx, a->mlm_in, y, d->mlm_rows, M, H, 0));
    TFB_CHECK(bert_linear_fwd(c, a->mlm_pre, a->mlm_in, m->w.mlm_w, NULL, M, H, H));
    TFB_CHECK(be->bias_act_fwd(be->ctx, TFB_ACT_GELU, a->mlm_act, TFB_F32, a->mlm_pre, TFB_F32, m->w.mlm_b, M, H));
    TFB_CHECK(be->layernorm_fwd(be->ctx, a->mlm_ln, a->mlm_mean, a->mlm_rstd, a->mlm_act, m->w.mlm_ln_g,
                                m->w.mlm_ln_b, M, H, 1e-12f));
    TFB_CHECK(bert_linear_fwd(c, a->logits, a->mlm_ln, m->w.word_emb, m->w.mlm_dec_b, M, H, m->st.Vl));
    TFB_CHECK(mlm_loss_launch(m, a, d));
    TFB_CHECK(be->embedding_fwd(be->ctx, a->cls, y, d->cls_rows, B, H, 0));
    TFB_CHECK(bert_linear_fwd(c, a->pool_pre, a->cls, m->w.pool_w, m->w.pool_b, B, H, H));
    TFB_CHECK(be->act_fwd(be->ctx, TFB_ACT_TANH, a->pooled, a->pool_pre, (size_t)B * H));
    TFB_CHECK(bert_linear_fwd(c, a->nsp_logits, a->pooled, m->w.nsp_w, m->w.nsp_b, B, H, 2));
    return be->xent_fwd(be->ctx, tfb_loss_log_sums(&m->wl.loss_log, m->mb) + 1, a->nsp_logits, d->nsp_labels, B, 2);
}

/* The stage's output: the last layer's, or the embeddings' when it holds no layer. */
static float *stage_out(bert_model *m, bert_slot *a) {
    return m->st.l1 > m->st.l0 ? a->layer[m->st.l1 - 1].y : a->x0;
}

/* One layer's forward into its saved set; under checkpointing into the shared set, all but the output. */
static tfb_status layer_fwd(bert_model *m, int l, const float *x, bert_layer_acts *saved) {
    if (!m->wc.checkpointing) return bert_layer_fwd(&m->ctx, l, &m->w.layer[l], x, saved);
    bert_layer_acts into = m->rc;
    into.y = saved->y;
    return bert_layer_fwd(&m->ctx, l, &m->w.layer[l], x, &into);
}

static tfb_status bert_forward(void *self, int step, int mb, int slot) {
    bert_model *m = self;
    bert_slot *a = &m->slot[slot];
    TFB_CHECK(tfb_workload_slot_take(&m->wl, slot, m->wc.slots, m->busy));
    set_micro_batch(m, step, mb);
    double t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (m->st.first) TFB_CHECK(embeddings_fwd(m, a, &m->dev[slot]));
    if (m->st.first) TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 0, t0));
    const float *x = m->st.first ? a->x0 : a->x_in;
    for (int l = m->st.l0; l < m->st.l1; l++) {
        t0 = tfb_workload_unit_start(&m->wl, m->be);
        TFB_CHECK(layer_fwd(m, l, x, &a->layer[l]));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 1 + l, t0));
        x = a->layer[l].y;
    }
    if (!m->st.last) return TFB_OK;
    t0 = tfb_workload_unit_start(&m->wl, m->be);
    TFB_CHECK(heads_fwd(m, a, &m->dev[slot], x));
    return tfb_workload_unit_stop(&m->wl, m->be, m->cfg.layers + 1, t0);
}

/* ---- backward ---- */

/* dlogits and the input gradient of the tied decoder; on a vocabulary shard the input gradient is summed. */
static tfb_status decoder_bwd(bert_model *m, bert_slot *a, const bert_batch *d, float scale) {
    tfb_backend *be = m->be;
    const tfb_loss_log *log = &m->wl.loss_log;
    int M = m->M, H = m->cfg.hidden, Vl = m->st.Vl;
    if (m->st.T == 1) TFB_CHECK(be->xent_bwd(be->ctx, a->logits, a->logits, d->mlm_labels, M, Vl, scale));
    else TFB_CHECK(be->xent_shard_bwd(be->ctx, a->logits, a->logits, d->mlm_labels, tfb_loss_log_rowmax(log, m->mb),
                                      tfb_loss_log_rowsums(log, m->mb), M, Vl, m->st.valid, m->st.v0, scale));
    return bert_col_parallel_bwd(&m->ctx, m->dm1, m->g.word_emb, m->g.mlm_dec_b, a->logits, a->mlm_ln, m->w.word_emb,
                                 M, H, Vl);
}

/* MLM and NSP heads: leaves dL/dy of the last layer in m->dy. */
static tfb_status heads_bwd(bert_model *m, bert_slot *a, const bert_batch *d, float loss_scale) {
    tfb_backend *be = m->be;
    bert_ctx *c = &m->ctx;
    int M = m->M, B = m->B, H = m->cfg.hidden;
    TFB_CHECK(decoder_bwd(m, a, d, loss_scale / M));
    TFB_CHECK(be->layernorm_bwd(be->ctx, m->dm2, m->g.mlm_ln_g, m->g.mlm_ln_b, m->dm1, a->mlm_act, a->mlm_mean,
                                a->mlm_rstd, m->w.mlm_ln_g, M, H));
    tfb_act_bias_bwd_desc gelu = {.act = TFB_ACT_GELU, .din = m->dm2, .din_type = TFB_F32, .dbias = m->g.mlm_b,
                                  .dout = m->dm2, .dout_type = TFB_F32, .pre = a->mlm_pre, .pre_type = TFB_F32,
                                  .bias = m->w.mlm_b, .n = M, .h = H};
    TFB_CHECK(be->act_bias_bwd(be->ctx, &gelu));
    TFB_CHECK(bert_linear_bwd(c, m->dm1, m->g.mlm_w, NULL, m->dm2, a->mlm_in, m->w.mlm_w, M, H, H));
    TFB_CHECK(be->fill(be->ctx, m->dy, 0.0f, (size_t)m->N * H));
    TFB_CHECK(be->embedding_bwd(be->ctx, m->dy, m->dm1, d->mlm_rows, NULL, M, H));
    TFB_CHECK(be->xent_bwd(be->ctx, a->nsp_logits, a->nsp_logits, d->nsp_labels, B, 2, loss_scale / B));
    TFB_CHECK(bert_linear_bwd(c, m->db1, m->g.nsp_w, m->g.nsp_b, a->nsp_logits, a->pooled, m->w.nsp_w, B, H, 2));
    TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_TANH, m->db1, m->db1, a->pool_pre, (size_t)B * H));
    TFB_CHECK(bert_linear_bwd(c, m->db2, m->g.pool_w, m->g.pool_b, m->db1, a->cls, m->w.pool_w, B, H, H));
    return be->embedding_bwd(be->ctx, m->dy, m->db2, d->cls_rows, NULL, B, H);
}

static tfb_status embeddings_bwd(bert_model *m, bert_slot *a, const bert_batch *d) {
    tfb_backend *be = m->be;
    int N = m->N, H = m->cfg.hidden;
    float *g = m->dy, *t = m->s.t1;
    TFB_CHECK(be->dropout_bwd(be->ctx, g, g, (size_t)N * H, m->wc.dropout,
                              bert_dropout_key(&m->ctx, 0, m->ctx.sample0 * (size_t)m->wc.seq_len * H)));
    TFB_CHECK(be->layernorm_bwd(be->ctx, t, m->g.emb_ln_g, m->g.emb_ln_b, g, a->emb_sum, a->emb_mean, a->emb_rstd,
                                m->w.emb_ln_g, N, H));
    if (m->st.T > 1)
        TFB_CHECK(be->embedding_bwd_shard(be->ctx, m->g.word_emb, t, d->ids, d->ids_order, N, H, m->st.v0,
                                          m->st.Vl));
    else TFB_CHECK(be->embedding_bwd(be->ctx, m->g.word_emb, t, d->ids, d->ids_order, N, H));
    TFB_CHECK(be->embedding_bwd(be->ctx, m->g.pos_emb, t, d->pos, d->pos_order, N, H));
    return be->embedding_bwd(be->ctx, m->g.type_emb, t, d->types, d->types_order, N, H);
}

static size_t offset_of(bert_model *m, const float *grad) { return (size_t)(grad - m->wl.grad_pool); }

static tfb_status bert_backward(void *self, int step, int mb, int slot, float loss_scale, tfb_grad_ready_fn ready,
                                void *rctx) {
    bert_model *m = self;
    bert_slot *a = &m->slot[slot];
    set_micro_batch(m, step, mb);
    double t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (m->st.last) {
        TFB_CHECK(heads_bwd(m, a, &m->dev[slot], loss_scale));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, m->cfg.layers + 1, t0));
        TFB_CHECK(ready(rctx, offset_of(m, m->st.first ? m->g.pool_w : m->g.word_emb)));
    }
    for (int l = m->st.l1 - 1; l >= m->st.l0; l--) {
        const float *x = l > m->st.l0 ? a->layer[l - 1].y : m->st.first ? a->x0 : a->x_in;
        t0 = tfb_workload_unit_start(&m->wl, m->be);
        const bert_layer_acts *saved = &a->layer[l];
        if (m->wc.checkpointing) { /* same weights, inputs and dropout keys: the forward's exact activations */
            TFB_CHECK(tfb_workload_mark(&m->wl, TFB_MARK_RECOMPUTE_BEGIN));
            TFB_CHECK(bert_layer_fwd(&m->ctx, l, &m->w.layer[l], x, &m->rc));
            TFB_CHECK(tfb_workload_mark(&m->wl, TFB_MARK_RECOMPUTE_END));
            saved = &m->rc;
        }
        TFB_CHECK(bert_layer_bwd(&m->ctx, l, &m->w.layer[l], &m->g.layer[l], x, saved, &m->s, m->dy));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 1 + l, t0));
        TFB_CHECK(ready(rctx, offset_of(m, m->g.layer[l].qkv_w)));
    }
    t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (m->st.first) TFB_CHECK(embeddings_bwd(m, a, &m->dev[slot]));
    if (m->st.first) TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 0, t0));
    tfb_workload_slot_give(&m->wl, slot, m->busy);
    return ready(rctx, 0);
}

static float *bert_stage_input(void *self, int slot) {
    bert_model *m = self;
    return m->st.first ? NULL : m->slot[slot].x_in;
}

static const float *bert_stage_output(void *self, int slot) {
    bert_model *m = self;
    return m->st.last ? NULL : stage_out(m, &m->slot[slot]);
}

static float *bert_grad_output(void *self) {
    bert_model *m = self;
    return m->st.last ? NULL : m->dy;
}

static const float *bert_grad_input(void *self) {
    bert_model *m = self;
    return m->st.first ? NULL : m->dy;
}

/* The first stage makes whole samples (tokens and labels), so it alone writes them. */
static tfb_status bert_dump_batch(void *self, const char *dir) {
    bert_model *m = self;
    int s = m->wc.seq_len, P = m->wc.masked;
    if (!m->st.first) return TFB_OK;
    const bert_batch *h = &m->host[m->last_slot];
    struct { const char *name; const int *data; int rows, cols; } t[] = {
        {"input_ids", h->ids, m->B, s},          {"token_type_ids", h->types, m->B, s},
        {"mlm_rows", h->mlm_rows, m->B, P},      {"mlm_labels", h->mlm_labels, m->B, P},
        {"nsp_labels", h->nsp_labels, m->B, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/batch.%s.npy", dir, t[i].name);
        TFB_CHECK(tfb_npy_write_i32(path, t[i].data, t[i].rows, t[i].cols));
    }
    return TFB_OK;
}

static void bert_destroy(void *self) {
    bert_model *m = self;
    for (int i = 0; i < 3; i++) tfb_mempool_release(&m->pools[i], m->be);
    free((void *)m->wl.params);
    free(m->w.layer);
    free(m->g.layer);
    for (int i = 0; m->slot && i < m->wc.slots; i++) free(m->slot[i].layer);
    free(m->slot);
    free(m->busy);
    free(m->dev);
    free(m->host);
    free(m->ahead_mem);
    free(m->perm);
    free(m->order_count);
    tfb_loss_log_free(&m->wl.loss_log);
    free(m->wl.unit_s);
    free(m);
}

static tfb_status bind_params(bert_model *m) {
    layout_cursor count = {0};
    layout(&count, &m->cfg, &m->st, &m->w);
    tfb_param_info *table = calloc((size_t)count.count + 1, sizeof *table);
    TFB_CHECK_ALLOC(table);
    layout_cursor lw = {.base = m->wl.param_pool, .table = table}, lg = {.base = m->wl.grad_pool};
    layout(&lw, &m->cfg, &m->st, &m->w);
    layout(&lg, &m->cfg, &m->st, &m->g);
    m->wl.params = table;
    m->wl.n_params = lw.count;
    if (m->st.last && !m->st.first && m->wl.param_pool)
        m->wl.tied_offset = (size_t)(m->w.word_emb - m->wl.param_pool);
    return TFB_OK;
}

static void describe_stage(bert_model *m) {
    const bert_stage *st = &m->st;
    int n = snprintf(m->wl.stage_desc, sizeof m->wl.stage_desc, "%s", st->first ? "embeddings" : "");
    if (st->l1 > st->l0)
        n += snprintf(m->wl.stage_desc + n, sizeof m->wl.stage_desc - (size_t)n, "%slayers %d-%d", n ? " + " : "",
                      st->l0, st->l1 - 1);
    if (st->last)
        snprintf(m->wl.stage_desc + n, sizeof m->wl.stage_desc - (size_t)n, "%sheads", n ? " + " : "");
}

static void fill_workload(bert_model *m) {
    m->wl.self = m;
    m->wl.flops_per_sample = bert_train_flops(&m->cfg, m->wc.seq_len, m->wc.masked);
    m->wl.recompute_flops_per_sample = m->wc.checkpointing ? m->cfg.layers * layer_flops(&m->cfg, m->wc.seq_len) : 0;
    m->wl.flops_convention = "training = 3 x forward; 1 multiply-add = 2 FLOPs; MLM logits on masked positions "
                             "only; bidirectional attention (s^2 term not halved)";
    snprintf(m->wl.shape, sizeof m->wl.shape, "seq %d, %d masked", m->wc.seq_len, m->wc.masked);
    describe_stage(m);
    m->wl.layers_held = m->st.l1 - m->st.l0;
    m->wl.model_params = bert_param_count(&m->cfg);
    m->wl.optimizer = TFB_OPT_ADAMW;
    m->wl.default_lr = 1e-4f;
    m->wl.first_stage = m->st.first;
    m->wl.last_stage = m->st.last;
    m->wl.in_elems = m->st.first ? 0 : (size_t)m->N * m->cfg.hidden;
    m->wl.out_elems = m->st.last ? 0 : (size_t)m->N * m->cfg.hidden;
    m->wl.load_batch = bert_load_batch;
    m->wl.prepare_batch = bert_prepare_batch;
    m->wl.forward = bert_forward;
    m->wl.backward = bert_backward;
    m->wl.stage_input = bert_stage_input;
    m->wl.stage_output = bert_stage_output;
    m->wl.grad_output = bert_grad_output;
    m->wl.grad_input = bert_grad_input;
    m->wl.dump_batch = bert_dump_batch;
    m->wl.destroy = bert_destroy;
}

static void plan_pools(bert_model *m) {
    layout_cursor count = {0};
    layout(&count, &m->cfg, &m->st, &m->w);
    m->wl.numel = count.offset;
    /* the word embedding on the first stage and its decoder copy on the last exchange gradients */
    if (m->st.first != m->st.last) m->wl.tied_numel = (size_t)m->st.Vl * m->cfg.hidden;
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.param_pool, m->wl.numel * 4);
    m->wl.mem.params = m->pools[0].bytes;
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.grad_pool, m->wl.numel * 4);
    m->wl.mem.grads = m->pools[0].bytes - m->wl.mem.params;
    plan_lowp(&m->pools[1], m);
    plan_shared(&m->pools[1], m);
    if (m->st.last) plan_loss_log(&m->pools[1], m);
    size_t before = m->pools[1].bytes;
    for (int i = 0; i < m->wc.slots; i++) plan_slot(&m->pools[1], m, &m->slot[i]);
    m->wl.slot_bytes = (m->pools[1].bytes - before) / (size_t)m->wc.slots;
    m->wl.mem.activations = m->pools[1].bytes - before;
    m->wl.mem.lowp = m->wc.gemm_type == TFB_F32 ? 0 : (m->wl.numel * 2 + 63) & ~(size_t)63;
    m->wl.mem.workspace = before - m->wl.mem.lowp;
    for (int i = 0; i < m->wc.slots; i++) plan_batch(&m->pools[2], &m->dev[i], m->N, m->M, m->B);
    m->wl.mem.inputs = m->pools[2].bytes;
    m->wl.bytes_planned = m->pools[0].bytes + m->pools[1].bytes + m->pools[2].bytes;
}

/* In 16-bit runs each layer's LN2 writes its output's 16-bit copy straight into the next layer's x_lp, so the next
 * layer casts nothing; not under checkpointing, where the layers share one activation set. */
static void chain_layer_casts(bert_model *m) {
    if (m->wc.gemm_type == TFB_F32 || m->wc.checkpointing) return;
    for (int i = 0; i < m->wc.slots; i++)
        for (int l = m->st.l0 + 1; l < m->st.l1; l++) {
            m->slot[i].layer[l - 1].y_lp = m->slot[i].layer[l].x_lp;
            m->slot[i].layer[l].x_lp_ready = 1;
        }
}

static tfb_status plan_all(bert_model *m) {
    plan_pools(m);
    if (m->wc.plan_only) return TFB_OK;
    for (int i = 0; i < 3; i++) TFB_CHECK(tfb_mempool_commit(&m->pools[i], m->be, i == 2));
    TFB_CHECK(tfb_loss_log_host_alloc(&m->wl.loss_log));
    chain_layer_casts(m);
    int **dev[BATCH_ARRAYS], **host[BATCH_ARRAYS];
    size_t n[BATCH_ARRAYS];
    for (int i = 0; i < m->wc.slots; i++) {
        batch_arrays(m, &m->dev[i], dev, n);
        batch_arrays(m, &m->host[i], host, n);
        for (int k = 0; k < BATCH_ARRAYS; k++) *host[k] = tfb_mempool_mirror(&m->pools[2], *dev[k]);
    }
    char *lo; /* the batch made ahead: slot 0's span layout in its own host buffer */
    m->ahead_mem = malloc(batch_span(m, 0, &lo));
    TFB_CHECK_ALLOC(m->ahead_mem);
    batch_arrays(m, &m->dev[0], dev, n);
    batch_arrays(m, &m->ahead, host, n);
    for (int k = 0; k < BATCH_ARRAYS; k++) *host[k] = (int *)(m->ahead_mem + ((char *)*dev[k] - lo));
    return TFB_OK;
}

/* This rank's units and shards; TFB_ERR_ARG when the layout does not fit the model. */
static tfb_status place_stage(bert_model *m) {
    const bert_config *c = &m->cfg;
    int T = m->wc.tp ? m->wc.tp->size : 1, t = m->wc.tp ? m->wc.tp->rank : 0, P = m->wc.pp_size;
    int units = bert_units(c), first[65];
    double costs[130];
    if (c->heads % T || c->ffn % T || P > units || P > 64 || c->layers + 2 > 130) return TFB_ERR_ARG;
    if (m->wc.unit_costs) memcpy(costs, m->wc.unit_costs, sizeof(double) * (size_t)units);
    else unit_costs(c, m->wc.seq_len, m->wc.masked, costs);
    TFB_CHECK(tfb_partition(costs, units, P, first));
    int u0 = first[m->wc.pp_rank], u1 = first[m->wc.pp_rank + 1];
    int pad = T > 1 ? 128 * T : 1, Vp = (c->vocab + pad - 1) / pad * pad;
    m->st = (bert_stage){.first = u0 == 0, .last = u1 == units, .l0 = u0 > 1 ? u0 - 1 : 0,
                         .l1 = u1 - 1 < c->layers ? u1 - 1 : c->layers, .T = T, .t = t, .Vl = Vp / T};
    if (m->st.l0 > m->st.l1) m->st.l0 = m->st.l1;
    m->st.v0 = t * m->st.Vl;
    m->st.valid = c->vocab - m->st.v0 < m->st.Vl ? c->vocab - m->st.v0 : m->st.Vl;
    if (m->st.valid < 0) m->st.valid = 0;
    m->wl.tp_rank = t;
    m->wl.tp_size = T;
    m->wl.n_units = units;
    if (m->wc.time_units) TFB_CHECK_ALLOC(m->wl.unit_s = calloc((size_t)units, sizeof(double)));
    return TFB_OK;
}

static tfb_status alloc_host_state(bert_model *m) {
    int L = m->cfg.layers, S = m->wc.slots;
    m->w.layer = calloc((size_t)L, sizeof(bert_layer_w));
    m->g.layer = calloc((size_t)L, sizeof(bert_layer_w));
    m->slot = calloc((size_t)S, sizeof *m->slot);
    m->busy = calloc((size_t)S, 1);
    m->dev = calloc((size_t)S, sizeof *m->dev);
    m->host = calloc((size_t)S, sizeof *m->host);
    m->perm = malloc((size_t)m->wc.seq_len * sizeof(int));
    int vals = m->cfg.vocab > m->cfg.max_pos ? m->cfg.vocab : m->cfg.max_pos;
    vals = vals > m->cfg.type_vocab ? vals : m->cfg.type_vocab;
    m->order_count = malloc(((size_t)vals + 1) * sizeof(int));
    if (!m->w.layer || !m->g.layer || !m->slot || !m->busy || !m->dev || !m->host || !m->perm ||
        !m->order_count)
        return TFB_ERR_NOMEM;
    for (int i = 0; i < S; i++)
        if (!(m->slot[i].layer = calloc((size_t)L, sizeof(bert_layer_acts)))) return TFB_ERR_NOMEM;
    return TFB_OK;
}

static void init_ctx(bert_model *m) {
    const bert_config *c = &m->cfg;
    int T = m->st.T;
    m->ctx = (bert_ctx){.be = m->be, .gemm_type = m->wc.gemm_type, .tf32 = m->wc.tf32, .batch = m->B, .seq = m->wc.seq_len,
                        .hidden = c->hidden, .heads = c->heads / T, .ffn = c->ffn / T,
                        .head_dim = c->hidden / c->heads, .heads_total = c->heads, .tp_rank = m->st.t,
                        .tp = m->wc.tp, .wl = &m->wl, .dropout = m->wc.dropout, .seed = m->wc.seed,
                        .sample0 = (uint64_t)m->wc.sample0, .fused_attention = m->wc.fused_attention};
}

tfb_status bert_create(const bert_config *c, const tfb_workload_config *wc, tfb_backend *be, tfb_workload **out) {
    bert_model *m = calloc(1, sizeof *m);
    TFB_CHECK_ALLOC(m);
    m->cfg = *c;
    m->wc = *wc;
    if (m->wc.slots < 1) m->wc.slots = 1;
    if (m->wc.pp_size < 1) m->wc.pp_size = 1;
    m->be = be;
    m->B = wc->local_batch;
    m->N = wc->local_batch * wc->seq_len;
    m->M = wc->local_batch * wc->masked;
    m->ahead_step = -1;
    m->wl.gemm_type = wc->gemm_type;
    tfb_status st = place_stage(m);
    if (st == TFB_OK) st = alloc_host_state(m);
    init_ctx(m);
    if (st == TFB_OK) st = plan_all(m);
    if (st == TFB_OK) st = bind_params(m); /* in a plan too: the optimizer plans its decay runs from the table */
    if (m->wc.plan_only) {
        fill_workload(m);
        if (st != TFB_OK) { bert_destroy(m); return st; }
        *out = &m->wl;
        return TFB_OK;
    }
    m->ctx.master_base = m->wl.param_pool;
    if (st == TFB_OK) st = tfb_workload_init_params(&m->wl, be, init_tensor, &m->wc.seed);
    m->ctx.lp_weights = m->wl.lowp_pool;
    if (st == TFB_OK) st = tfb_workload_refresh_lowp(&m->wl, be);
    fill_workload(m);
    if (st != TFB_OK) { bert_destroy(m); return st; }
    *out = &m->wl;
    return TFB_OK;
}
