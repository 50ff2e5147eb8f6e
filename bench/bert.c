/* bert.c — the BERT pre-training workload: configurations, parameter layout, initialisation, synthetic data,
 * embeddings, the MLM and NSP heads, and the workload functions the run driver calls.
 *
 * Parameters live in one FP32 pool in forward order (embeddings, layers, pooler, heads), so backward completes
 * gradients from the end of the pool towards its start: the watermark reported to the driver only falls. The
 * word-embedding gradient (tied to the MLM decoder) completes last, with the embedding lookup. Encoder layers are
 * in bert_layer.c; this file does not time, communicate or update parameters.
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

typedef struct {
    float *word_emb;   /* (V, H), also the MLM decoder weight (tied) */
    float *pos_emb;    /* (max_pos, H) */
    float *type_emb;   /* (type_vocab, H) */
    float *emb_ln_g;   /* (H) */
    float *emb_ln_b;   /* (H) */
    bert_layer_w *layer; /* [L] */
    float *pool_w;     /* (H, H) */
    float *pool_b;     /* (H) */
    float *mlm_w;      /* (H, H) MLM transform */
    float *mlm_b;      /* (H) */
    float *mlm_ln_g;   /* (H) */
    float *mlm_ln_b;   /* (H) */
    float *mlm_dec_b;  /* (V) decoder bias */
    float *nsp_w;      /* (2, H) */
    float *nsp_b;      /* (2) */
} bert_weights;

/* Walks the tensors in pool order: binds each pointer at `base` and, when `table` is non-NULL, records it. */
typedef struct {
    float *base;
    size_t offset;
    tfb_param_info *table;
    int count;
} layout_cursor;

static void take(layout_cursor *lc, float **field, const char *name, int rows, int cols, int decay) {
    if (lc->base) *field = lc->base + lc->offset;
    if (lc->table) {
        tfb_param_info *p = &lc->table[lc->count];
        *p = (tfb_param_info){.offset = lc->offset, .numel = (size_t)rows * cols, .rows = rows, .cols = cols,
                              .decay = decay};
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    lc->count++;
    lc->offset += (size_t)rows * cols;
}

static void layout_layer(layout_cursor *lc, const bert_config *c, int l, bert_layer_w *w) {
    int H = c->hidden, F = c->ffn;
    char n[64];
#define T(field, suffix, r, cc, decay) \
    (snprintf(n, sizeof n, "layer.%d.%s", l, suffix), take(lc, &w->field, n, r, cc, decay))
    T(qkv_w, "attn.qkv.weight", 3 * H, H, 1);
    T(qkv_b, "attn.qkv.bias", 3 * H, 1, 0);
    T(ao_w, "attn.out.weight", H, H, 1);
    T(ao_b, "attn.out.bias", H, 1, 0);
    T(ln1_g, "attn.ln.gamma", H, 1, 0);
    T(ln1_b, "attn.ln.beta", H, 1, 0);
    T(ff1_w, "ffn.up.weight", F, H, 1);
    T(ff1_b, "ffn.up.bias", F, 1, 0);
    T(ff2_w, "ffn.down.weight", H, F, 1);
    T(ff2_b, "ffn.down.bias", H, 1, 0);
    T(ln2_g, "ffn.ln.gamma", H, 1, 0);
    T(ln2_b, "ffn.ln.beta", H, 1, 0);
#undef T
}

static void layout(layout_cursor *lc, const bert_config *c, bert_weights *w) {
    int H = c->hidden;
    take(lc, &w->word_emb, "emb.word", c->vocab, H, 1);
    take(lc, &w->pos_emb, "emb.position", c->max_pos, H, 1);
    take(lc, &w->type_emb, "emb.token_type", c->type_vocab, H, 1);
    take(lc, &w->emb_ln_g, "emb.ln.gamma", H, 1, 0);
    take(lc, &w->emb_ln_b, "emb.ln.beta", H, 1, 0);
    for (int l = 0; l < c->layers; l++) layout_layer(lc, c, l, &w->layer[l]);
    take(lc, &w->pool_w, "pooler.weight", H, H, 1);
    take(lc, &w->pool_b, "pooler.bias", H, 1, 0);
    take(lc, &w->mlm_w, "mlm.transform.weight", H, H, 1);
    take(lc, &w->mlm_b, "mlm.transform.bias", H, 1, 0);
    take(lc, &w->mlm_ln_g, "mlm.ln.gamma", H, 1, 0);
    take(lc, &w->mlm_ln_b, "mlm.ln.beta", H, 1, 0);
    take(lc, &w->mlm_dec_b, "mlm.decoder.bias", c->vocab, 1, 0);
    take(lc, &w->nsp_w, "nsp.weight", 2, H, 1);
    take(lc, &w->nsp_b, "nsp.bias", 2, 1, 0);
}

static int layout_count(const bert_config *c) { return 5 + 12 * c->layers + 10; }

size_t bert_param_count(const bert_config *c) {
    bert_layer_w *lw = calloc((size_t)c->layers, sizeof *lw);
    bert_weights w = {.layer = lw};
    layout_cursor lc = {0};
    layout(&lc, c, &w);
    free(lw);
    return lc.offset;
}

double bert_train_flops(const bert_config *c, int s, int masked) {
    double H = c->hidden, F = c->ffn, S = s;
    double layer = 2 * S * H * 3 * H + 2 * 2 * S * S * H + 2 * S * H * H + 2 * 2 * S * H * F;
    double mlm = 2.0 * masked * H * H + 2.0 * masked * H * c->vocab;
    double nsp = 2 * H * H + 2 * H * 2;
    return 3.0 * (c->layers * layer + mlm + nsp);
}

/* ---- model state ---- */

typedef struct {
    float *emb_sum, *emb_ln, *x0; /* (N, H) */
    float *emb_mean, *emb_rstd;   /* (N) */
    bert_layer_acts *layer;       /* [L] */
    float *mlm_in, *mlm_pre, *mlm_act, *mlm_ln; /* (M, H) */
    float *mlm_mean, *mlm_rstd;   /* (M) */
    float *logits;                /* (M, V), then dlogits */
    float *cls, *pool_pre, *pooled; /* (B, H) */
    float *nsp_logits;            /* (B, 2), then their gradient */
    float *loss;                  /* (2) MLM and NSP loss sums */
    float *dy;                    /* (N, H) gradient flowing down the encoder */
    float *dm1, *dm2;             /* (M, H) MLM head gradients */
    float *db1, *db2;             /* (B, H) NSP head gradients */
} bert_acts;

typedef struct {
    int *ids, *types, *pos;       /* (N) */
    int *mlm_rows, *mlm_labels;   /* (M) row index into (N, H); original token */
    int *cls_rows, *nsp_labels;   /* (B) */
} bert_batch;

typedef struct {
    bert_config cfg;
    tfb_workload_config wc;
    tfb_workload wl;
    tfb_backend *be;
    bert_ctx ctx;
    bert_weights w, g;
    bert_acts a;
    bert_layer_scratch s;
    bert_batch dev, host;         /* the batch in backend memory, and its host copy */
    tfb_mempool pools[3];         /* parameters+gradients, activations, batch */
    int *perm;                    /* (seq_len) host work space for choosing masked positions */
    int N, M, B;
} bert_model;

static void plan_acts(tfb_mempool *p, bert_model *m) {
    size_t N = (size_t)m->N, M = (size_t)m->M, B = (size_t)m->B, H = (size_t)m->cfg.hidden;
    size_t F = (size_t)m->cfg.ffn, V = (size_t)m->cfg.vocab, A = (size_t)m->cfg.heads, s = (size_t)m->wc.seq_len;
    bert_acts *a = &m->a;
    float **nh[] = {&a->emb_sum, &a->emb_ln, &a->x0, &a->dy, &m->s.t1, &m->s.t2};
    for (size_t i = 0; i < sizeof nh / sizeof nh[0]; i++) tfb_mempool_add(p, (void **)nh[i], N * H * 4);
    tfb_mempool_add(p, (void **)&a->emb_mean, N * 4);
    tfb_mempool_add(p, (void **)&a->emb_rstd, N * 4);
    for (int l = 0; l < m->cfg.layers; l++) {
        bert_layer_acts *la = &a->layer[l];
        float **lh[] = {&la->ctx, &la->h1, &la->x1, &la->h2, &la->y};
        for (size_t i = 0; i < sizeof lh / sizeof lh[0]; i++) tfb_mempool_add(p, (void **)lh[i], N * H * 4);
        float **ln[] = {&la->ln1_mean, &la->ln1_rstd, &la->ln2_mean, &la->ln2_rstd};
        for (size_t i = 0; i < 4; i++) tfb_mempool_add(p, (void **)ln[i], N * 4);
        tfb_mempool_add(p, (void **)&la->qkv, N * 3 * H * 4);
        tfb_mempool_add(p, (void **)&la->att, B * A * s * s * 4);
        tfb_mempool_add(p, (void **)&la->att_d, B * A * s * s * 4);
        tfb_mempool_add(p, (void **)&la->u, N * F * 4);
        tfb_mempool_add(p, (void **)&la->g, N * F * 4);
    }
    float **mh[] = {&a->mlm_in, &a->mlm_pre, &a->mlm_act, &a->mlm_ln, &a->dm1, &a->dm2};
    for (size_t i = 0; i < sizeof mh / sizeof mh[0]; i++) tfb_mempool_add(p, (void **)mh[i], M * H * 4);
    tfb_mempool_add(p, (void **)&a->mlm_mean, M * 4);
    tfb_mempool_add(p, (void **)&a->mlm_rstd, M * 4);
    tfb_mempool_add(p, (void **)&a->logits, M * V * 4);
    float **bh[] = {&a->cls, &a->pool_pre, &a->pooled, &a->db1, &a->db2};
    for (size_t i = 0; i < sizeof bh / sizeof bh[0]; i++) tfb_mempool_add(p, (void **)bh[i], B * H * 4);
    tfb_mempool_add(p, (void **)&a->nsp_logits, B * 2 * 4);
    tfb_mempool_add(p, (void **)&a->loss, 2 * 4);
    tfb_mempool_add(p, (void **)&m->s.dqkv, N * 3 * H * 4);
    tfb_mempool_add(p, (void **)&m->s.datt, B * A * s * s * 4);
    tfb_mempool_add(p, (void **)&m->s.dff, N * F * 4);
}

/* Low-precision copies: the 16-bit weight pool and three activation slots, only for FP16/BF16 runs. */
static void plan_lowp(tfb_mempool *p, bert_model *m) {
    if (m->wc.gemm_type == TFB_F32) return;
    size_t slot = bert_layer_lp_elems(m->B, m->wc.seq_len, m->cfg.hidden, m->cfg.heads, m->cfg.ffn);
    size_t logits = (size_t)m->M * m->cfg.vocab;
    m->ctx.lp_elems = slot > logits ? slot : logits;
    tfb_mempool_add(p, (void **)&m->wl.lowp_pool, m->wl.numel * 2);
    for (int i = 0; i < 3; i++) tfb_mempool_add(p, &m->ctx.lp[i], m->ctx.lp_elems * 2);
}

static void plan_batch(tfb_mempool *p, bert_batch *b, int N, int M, int B) {
    int **n[] = {&b->ids, &b->types, &b->pos};
    for (int i = 0; i < 3; i++) tfb_mempool_add(p, (void **)n[i], (size_t)N * 4);
    tfb_mempool_add(p, (void **)&b->mlm_rows, (size_t)M * 4);
    tfb_mempool_add(p, (void **)&b->mlm_labels, (size_t)M * 4);
    tfb_mempool_add(p, (void **)&b->cls_rows, (size_t)B * 4);
    tfb_mempool_add(p, (void **)&b->nsp_labels, (size_t)B * 4);
}

/* ---- initialisation: N(0, 0.02) for matrices and embeddings, zero biases, LayerNorm gamma 1 (BERT) ---- */

static void init_tensor(float *x, const tfb_param_info *p, int index, const void *ctx) {
    uint64_t seed = *(const uint64_t *)ctx;
    int is_gamma = strstr(p->name, "gamma") != NULL;
    tfb_philox_key k = tfb_philox_key_make(seed, STREAM_INIT + 16u * (uint32_t)index);
    for (size_t i = 0; i < p->numel; i += 2) {
        if (!p->decay) { x[i] = is_gamma ? 1.0f : 0.0f; if (i + 1 < p->numel) x[i + 1] = x[i]; continue; }
        tfb_philox_ctr r = tfb_philox_block(k, i << 1, 0);
        float u1 = tfb_u32_to_unit(r.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(r.v[1]);
        float rad = sqrtf(-2.0f * logf(u1)) * 0.02f;
        x[i] = rad * cosf(6.28318530718f * u2);
        if (i + 1 < p->numel) x[i + 1] = rad * sinf(6.28318530718f * u2);
    }
}


/* ---- synthetic data: a pure function of (seed, global sample index) ---- */

static uint32_t draw(tfb_philox_key k, uint64_t sample, uint32_t j) {
    return tfb_philox_block(k, (sample << 12) | (j & ~3u), 0).v[j & 3u];
}

/* Sequence `sample` at row b of the host batch: [CLS] A [SEP] B [SEP], masked positions 80/10/10. */
static void make_sample(bert_model *m, int b, uint64_t sample) {
    int s = m->wc.seq_len, V = m->cfg.vocab, P = m->wc.masked < s - 1 ? m->wc.masked : s - 1;
    tfb_philox_key k = tfb_philox_key_make(m->wc.seed, STREAM_DATA);
    int *ids = m->host.ids + b * s, *types = m->host.types + b * s;
    int split = s > 4 ? 1 + 1 + (int)(draw(k, sample, 0) % (uint32_t)(s - 3)) : s / 2;
    for (int t = 0; t < s; t++) {
        ids[t] = TOK_FIRST_WORD + (int)(draw(k, sample, 4u + (uint32_t)t) % (uint32_t)(V - TOK_FIRST_WORD));
        types[t] = t >= split;
        m->host.pos[b * s + t] = t;
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
        m->host.mlm_rows[b * P + j] = b * s + pos;
        m->host.mlm_labels[b * P + j] = ids[pos];
        if (r < 8) ids[pos] = TOK_MASK;
        else if (r < 9) ids[pos] = TOK_FIRST_WORD + (int)(draw(k, sample, 1024u + (uint32_t)j) % (uint32_t)(V - TOK_FIRST_WORD));
    }
    m->host.cls_rows[b] = b * s;
    m->host.nsp_labels[b] = (int)(draw(k, sample, 1u) & 1u);
}

static tfb_status bert_load_batch(void *self, int step) {
    bert_model *m = self;
    uint64_t first = (uint64_t)(m->wc.fixed_batch ? 0 : step) * m->wc.global_batch + m->wc.sample0;
    for (int b = 0; b < m->B; b++) make_sample(m, b, first + (uint64_t)b);
    return m->be->copy_h2d(m->be->ctx, m->pools[2].base, m->pools[2].host_mirror, m->pools[2].bytes);
}

/* ---- forward ---- */

static tfb_status embeddings_fwd(bert_model *m) {
    tfb_backend *be = m->be;
    int N = m->N, H = m->cfg.hidden;
    TFB_CHECK(be->embedding_fwd(be->ctx, m->a.emb_sum, m->w.word_emb, m->dev.ids, N, H, 0));
    TFB_CHECK(be->embedding_fwd(be->ctx, m->a.emb_sum, m->w.pos_emb, m->dev.pos, N, H, 1));
    TFB_CHECK(be->embedding_fwd(be->ctx, m->a.emb_sum, m->w.type_emb, m->dev.types, N, H, 1));
    TFB_CHECK(be->layernorm_fwd(be->ctx, m->a.emb_ln, m->a.emb_mean, m->a.emb_rstd, m->a.emb_sum, m->w.emb_ln_g,
                                m->w.emb_ln_b, N, H, 1e-12f));
    return be->dropout_fwd(be->ctx, m->a.x0, m->a.emb_ln, (size_t)N * H, m->wc.dropout,
                           bert_dropout_key(&m->ctx, 0, m->ctx.sample0 * (size_t)m->wc.seq_len * H));
}

static tfb_status heads_fwd(bert_model *m, const float *y) {
    tfb_backend *be = m->be;
    bert_ctx *c = &m->ctx;
    bert_acts *a = &m->a;
    int M = m->M, B = m->B, H = m->cfg.hidden, V = m->cfg.vocab;
    TFB_CHECK(be->embedding_fwd(be->ctx, a->mlm_in, y, m->dev.mlm_rows, M, H, 0));
    TFB_CHECK(bert_linear_fwd(c, a->mlm_pre, a->mlm_in, m->w.mlm_w, m->w.mlm_b, M, H, H));
    TFB_CHECK(be->act_fwd(be->ctx, TFB_ACT_GELU, a->mlm_act, a->mlm_pre, (size_t)M * H));
    TFB_CHECK(be->layernorm_fwd(be->ctx, a->mlm_ln, a->mlm_mean, a->mlm_rstd, a->mlm_act, m->w.mlm_ln_g,
                                m->w.mlm_ln_b, M, H, 1e-12f));
    TFB_CHECK(bert_linear_fwd(c, a->logits, a->mlm_ln, m->w.word_emb, m->w.mlm_dec_b, M, H, V));
    TFB_CHECK(be->xent_fwd(be->ctx, &a->loss[0], a->logits, m->dev.mlm_labels, M, V));
    TFB_CHECK(be->embedding_fwd(be->ctx, a->cls, y, m->dev.cls_rows, B, H, 0));
    TFB_CHECK(bert_linear_fwd(c, a->pool_pre, a->cls, m->w.pool_w, m->w.pool_b, B, H, H));
    TFB_CHECK(be->act_fwd(be->ctx, TFB_ACT_TANH, a->pooled, a->pool_pre, (size_t)B * H));
    TFB_CHECK(bert_linear_fwd(c, a->nsp_logits, a->pooled, m->w.nsp_w, m->w.nsp_b, B, H, 2));
    return be->xent_fwd(be->ctx, &a->loss[1], a->nsp_logits, m->dev.nsp_labels, B, 2);
}

static tfb_status bert_forward(void *self, int step, double *loss) {
    bert_model *m = self;
    float sums[2];
    m->ctx.step = step;
    TFB_CHECK(embeddings_fwd(m));
    const float *x = m->a.x0;
    for (int l = 0; l < m->cfg.layers; l++) {
        TFB_CHECK(bert_layer_fwd(&m->ctx, l, &m->w.layer[l], x, &m->a.layer[l]));
        x = m->a.layer[l].y;
    }
    TFB_CHECK(heads_fwd(m, x));
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, sums, m->a.loss, sizeof sums));
    *loss = (double)sums[0] / m->M + (double)sums[1] / m->B;
    return TFB_OK;
}

/* ---- backward ---- */

/* MLM and NSP heads: leaves dL/dy of the last layer in a->dy. */
static tfb_status heads_bwd(bert_model *m, float loss_scale) {
    tfb_backend *be = m->be;
    bert_ctx *c = &m->ctx;
    bert_acts *a = &m->a;
    int M = m->M, B = m->B, H = m->cfg.hidden, V = m->cfg.vocab;
    TFB_CHECK(be->xent_bwd(be->ctx, a->logits, a->logits, m->dev.mlm_labels, M, V, loss_scale / M));
    TFB_CHECK(bert_linear_bwd(c, a->dm1, m->g.word_emb, m->g.mlm_dec_b, a->logits, a->mlm_ln, m->w.word_emb, M, H, V));
    TFB_CHECK(be->layernorm_bwd(be->ctx, a->dm2, m->g.mlm_ln_g, m->g.mlm_ln_b, a->dm1, a->mlm_act, a->mlm_mean,
                                a->mlm_rstd, m->w.mlm_ln_g, M, H));
    TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_GELU, a->dm2, a->dm2, a->mlm_pre, (size_t)M * H));
    TFB_CHECK(bert_linear_bwd(c, a->dm1, m->g.mlm_w, m->g.mlm_b, a->dm2, a->mlm_in, m->w.mlm_w, M, H, H));
    TFB_CHECK(be->fill(be->ctx, a->dy, 0.0f, (size_t)m->N * H));
    TFB_CHECK(be->embedding_bwd(be->ctx, a->dy, a->dm1, m->dev.mlm_rows, M, H));
    TFB_CHECK(be->xent_bwd(be->ctx, a->nsp_logits, a->nsp_logits, m->dev.nsp_labels, B, 2, loss_scale / B));
    TFB_CHECK(bert_linear_bwd(c, a->db1, m->g.nsp_w, m->g.nsp_b, a->nsp_logits, a->pooled, m->w.nsp_w, B, H, 2));
    TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_TANH, a->db1, a->db1, a->pool_pre, (size_t)B * H));
    TFB_CHECK(bert_linear_bwd(c, a->db2, m->g.pool_w, m->g.pool_b, a->db1, a->cls, m->w.pool_w, B, H, H));
    return be->embedding_bwd(be->ctx, a->dy, a->db2, m->dev.cls_rows, B, H);
}

static tfb_status embeddings_bwd(bert_model *m) {
    tfb_backend *be = m->be;
    int N = m->N, H = m->cfg.hidden;
    float *d = m->a.dy, *t = m->s.t1;
    TFB_CHECK(be->dropout_bwd(be->ctx, d, d, (size_t)N * H, m->wc.dropout,
                              bert_dropout_key(&m->ctx, 0, m->ctx.sample0 * (size_t)m->wc.seq_len * H)));
    TFB_CHECK(be->layernorm_bwd(be->ctx, t, m->g.emb_ln_g, m->g.emb_ln_b, d, m->a.emb_sum, m->a.emb_mean,
                                m->a.emb_rstd, m->w.emb_ln_g, N, H));
    TFB_CHECK(be->embedding_bwd(be->ctx, m->g.word_emb, t, m->dev.ids, N, H));
    TFB_CHECK(be->embedding_bwd(be->ctx, m->g.pos_emb, t, m->dev.pos, N, H));
    return be->embedding_bwd(be->ctx, m->g.type_emb, t, m->dev.types, N, H);
}

static size_t offset_of(bert_model *m, const float *grad) { return (size_t)(grad - m->wl.grad_pool); }

static tfb_status bert_backward(void *self, int step, float loss_scale, tfb_grad_ready_fn ready, void *rctx) {
    bert_model *m = self;
    int L = m->cfg.layers;
    m->ctx.step = step;
    TFB_CHECK(m->be->fill(m->be->ctx, m->wl.grad_pool, 0.0f, m->wl.numel));
    TFB_CHECK(heads_bwd(m, loss_scale));
    TFB_CHECK(ready(rctx, offset_of(m, m->g.pool_w)));
    for (int l = L - 1; l >= 0; l--) {
        const float *x = l ? m->a.layer[l - 1].y : m->a.x0;
        TFB_CHECK(bert_layer_bwd(&m->ctx, l, &m->w.layer[l], &m->g.layer[l], x, &m->a.layer[l], &m->s, m->a.dy));
        TFB_CHECK(ready(rctx, offset_of(m, m->g.layer[l].qkv_w)));
    }
    TFB_CHECK(embeddings_bwd(m));
    return ready(rctx, 0);
}


static tfb_status bert_dump_batch(void *self, const char *dir) {
    bert_model *m = self;
    int s = m->wc.seq_len, P = m->wc.masked;
    struct { const char *name; const int *data; int rows, cols; } t[] = {
        {"input_ids", m->host.ids, m->B, s},          {"token_type_ids", m->host.types, m->B, s},
        {"mlm_rows", m->host.mlm_rows, m->B, P},      {"mlm_labels", m->host.mlm_labels, m->B, P},
        {"nsp_labels", m->host.nsp_labels, m->B, 1},
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
    free(m->a.layer);
    free(m->perm);
    free(m);
}

static tfb_status bind_params(bert_model *m) {
    int np = layout_count(&m->cfg);
    tfb_param_info *table = calloc((size_t)np, sizeof *table);
    TFB_CHECK_ALLOC(table);
    layout_cursor lw = {.base = m->wl.param_pool, .table = table}, lg = {.base = m->wl.grad_pool};
    layout(&lw, &m->cfg, &m->w);
    layout(&lg, &m->cfg, &m->g);
    m->wl.params = table;
    m->wl.n_params = lw.count;
    return TFB_OK;
}

static void fill_workload(bert_model *m) {
    m->wl.self = m;
    m->wl.flops_per_sample = bert_train_flops(&m->cfg, m->wc.seq_len, m->wc.masked);
    m->wl.flops_convention = "training = 3 x forward; 1 multiply-add = 2 FLOPs; MLM logits on masked positions "
                             "only; bidirectional attention (s^2 term not halved)";
    snprintf(m->wl.shape, sizeof m->wl.shape, "seq %d, %d masked", m->wc.seq_len, m->wc.masked);
    m->wl.optimizer = TFB_OPT_ADAMW;
    m->wl.default_lr = 1e-4f;
    m->wl.load_batch = bert_load_batch;
    m->wl.forward = bert_forward;
    m->wl.backward = bert_backward;
    m->wl.dump_batch = bert_dump_batch;
    m->wl.destroy = bert_destroy;
}

static tfb_status plan_all(bert_model *m) {
    size_t numel = m->wl.numel;
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.param_pool, numel * 4);
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.grad_pool, numel * 4);
    plan_lowp(&m->pools[0], m);
    plan_acts(&m->pools[1], m);
    plan_batch(&m->pools[2], &m->dev, m->N, m->M, m->B);
    for (int i = 0; i < 3; i++) TFB_CHECK(tfb_mempool_commit(&m->pools[i], m->be, i == 2));
    int **dev[] = {&m->dev.ids, &m->dev.types, &m->dev.pos, &m->dev.mlm_rows, &m->dev.mlm_labels,
                   &m->dev.cls_rows, &m->dev.nsp_labels};
    int **host[] = {&m->host.ids, &m->host.types, &m->host.pos, &m->host.mlm_rows, &m->host.mlm_labels,
                    &m->host.cls_rows, &m->host.nsp_labels};
    for (int i = 0; i < 7; i++) *host[i] = tfb_mempool_mirror(&m->pools[2], *dev[i]);
    m->wl.bytes_planned = m->pools[0].bytes + m->pools[1].bytes + m->pools[2].bytes;
    return TFB_OK;
}

tfb_status bert_create(const bert_config *c, const tfb_workload_config *wc, tfb_backend *be, tfb_workload **out) {
    bert_model *m = calloc(1, sizeof *m);
    TFB_CHECK_ALLOC(m);
    m->cfg = *c;
    m->wc = *wc;
    m->be = be;
    m->B = wc->local_batch;
    m->N = wc->local_batch * wc->seq_len;
    m->M = wc->local_batch * wc->masked;
    m->wl.numel = bert_param_count(c);
    m->wl.gemm_type = wc->gemm_type;
    m->ctx = (bert_ctx){.be = be, .gemm_type = wc->gemm_type, .batch = m->B, .seq = wc->seq_len,
                        .hidden = c->hidden, .heads = c->heads, .ffn = c->ffn, .dropout = wc->dropout,
                        .seed = wc->seed, .sample0 = (uint64_t)wc->sample0};
    m->w.layer = calloc((size_t)c->layers, sizeof(bert_layer_w));
    m->g.layer = calloc((size_t)c->layers, sizeof(bert_layer_w));
    m->a.layer = calloc((size_t)c->layers, sizeof(bert_layer_acts));
    m->perm = malloc((size_t)wc->seq_len * sizeof(int));
    tfb_status st = m->w.layer && m->g.layer && m->a.layer && m->perm ? plan_all(m) : TFB_ERR_NOMEM;
    if (st == TFB_OK) st = bind_params(m);
    m->ctx.master_base = m->wl.param_pool;
    if (st == TFB_OK) st = tfb_workload_init_params(&m->wl, be, init_tensor, &m->wc.seed);
    m->ctx.lp_weights = m->wl.lowp_pool;
    if (st == TFB_OK) st = tfb_workload_refresh_lowp(&m->wl, be);
    fill_workload(m);
    if (st != TFB_OK) { bert_destroy(m); return st; }
    *out = &m->wl;
    return TFB_OK;
}
