/* resnet.c — the ResNet workload: configurations, geometry and parameter layout, synthetic images, and the
 * forward and backward kernel sequence on the backend interface.
 *
 * A unit is convolution (no bias) + batch norm (+ ReLU). Bottleneck blocks (ResNet-50 v1.5: the stride sits on
 * the 3x3) are 1x1-3x3-1x1 units, basic blocks 3x3-3x3; block 0 of a stage has a projection shortcut (1x1 conv +
 * BN) when the shape changes. Parameters are pooled in forward order (torchvision's order), so backward completes
 * them from the end. Batch-norm statistics are this rank's unless sync_bn, which sums them over the data-parallel
 * group through the driver's callback (small per-channel vectors, combined on the host). This file does not time,
 * communicate directly or update parameters.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resnet.h"
#include "mempool.h"
#include "npy.h"
#include "../kernels/philox.h"

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f
enum { STREAM_INIT = 5, STREAM_DATA = 6 };

typedef struct {
    tfb_conv_desc cd;          /* shapes for the local batch */
    size_t w_off, g_off, b_off;/* parameter pool offsets of the filters, gamma and beta */
    float *w;                  /* (K, C, R, S) */
    float *gamma, *beta;       /* (K) */
    float *dw, *dgamma, *dbeta;
    float *run_mean, *run_var; /* (K) running statistics (not trained) */
    const float *x;            /* (n, C, H, W) the input seen by the last forward */
    float *z;                  /* (n, K, P, Q) convolution output */
    float *mean, *var;         /* (K) batch statistics used */
    float *y;                  /* (n, K, P, Q) batch-norm output, ReLU applied in place when relu */
    int relu;
} rn_unit;

typedef struct {
    rn_unit u[3];
    int n_units;
    rn_unit proj;
    int has_proj;
    float *out;                /* (n, Cout, P, Q) ReLU(main + shortcut) */
} rn_block;

typedef struct {
    tfb_param_info *table;     /* NULL while only counting */
    int count;
    size_t offset;
} rn_layout;

typedef struct {
    resnet_config cfg;
    tfb_workload_config wc;
    tfb_workload wl;
    tfb_backend *be;
    int n, image, v1;
    rn_unit stem;
    int pool_p, pool_q;        /* stem max-pool output size */
    float *pooled_stem;        /* (n, stem_width, pool_p, pool_q) */
    int *argmax;               /* (n, stem_width, pool_p, pool_q) */
    rn_block *blocks;
    int n_blocks, feat;        /* feat: channels into the head */
    size_t fc_w_off, fc_b_off;
    float *fc_w, *fc_b, *dfc_w, *dfc_b; /* (classes, feat), (classes) */
    float *pooled, *logits, *loss;      /* (n, feat), (n, classes), (1) */
    float *images;             /* (n, 3, image, image) */
    int *labels;               /* (n) */
    float *g[4];               /* gradient buffers of the largest activation */
    float *dz;                 /* (largest activation) batch-norm input gradient */
    float *sum_dy, *sum_dy_xhat; /* (largest K) */
    float *host_stats;         /* host (4 * largest K) for synchronised batch norm */
    void *lp[2];               /* 16-bit casts of activation operands */
    size_t max_act, max_k;
    tfb_mempool pools[4];      /* parameters+gradients (+16-bit copy), activations, running stats, inputs */
} resnet_model;

/* ---- geometry and layout ---- */

static void layout_take(rn_layout *lo, size_t *off, const char *name, int rows, int cols, int decay) {
    if (lo->table) {
        tfb_param_info *p = &lo->table[lo->count];
        *p = (tfb_param_info){.offset = lo->offset, .numel = (size_t)rows * cols, .rows = rows, .cols = cols,
                              .decay = decay};
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    *off = lo->offset;
    lo->offset += (size_t)rows * cols;
    lo->count++;
}

static void unit_init(rn_unit *u, rn_layout *lo, const char *name, int n, int c, int h, int k, int r, int stride,
                      int relu) {
    char buf[64];
    int pad = r / 2, p = (h + 2 * pad - r) / stride + 1;
    u->cd = (tfb_conv_desc){.n = n, .c = c, .h = h, .w = h, .k = k, .r = r, .s = r, .stride = stride, .pad = pad,
                            .p = p, .q = p, .layout = TFB_NCHW, .in_type = TFB_F32};
    u->relu = relu;
    snprintf(buf, sizeof buf, "%s.conv.weight", name);
    layout_take(lo, &u->w_off, buf, k, c * r * r, 1);
    snprintf(buf, sizeof buf, "%s.bn.gamma", name);
    layout_take(lo, &u->g_off, buf, k, 1, 0);
    snprintf(buf, sizeof buf, "%s.bn.beta", name);
    layout_take(lo, &u->b_off, buf, k, 1, 0);
}

/* Block `name` from c_in channels at h x h; returns its output channels, *h updated. */
static int block_init(rn_block *b, rn_layout *lo, const resnet_config *c, const char *name, int n, int c_in,
                      int *h, int width, int stride, int v1) {
    char buf[64];
    int out = c->bottleneck ? 4 * width : width;
    if (c->bottleneck) {
        snprintf(buf, sizeof buf, "%s.u0", name);
        unit_init(&b->u[0], lo, buf, n, c_in, *h, width, 1, v1 ? stride : 1, 1);
        snprintf(buf, sizeof buf, "%s.u1", name);
        unit_init(&b->u[1], lo, buf, n, width, b->u[0].cd.p, width, 3, v1 ? 1 : stride, 1);
        snprintf(buf, sizeof buf, "%s.u2", name);
        unit_init(&b->u[2], lo, buf, n, width, b->u[1].cd.p, out, 1, 1, 0);
        b->n_units = 3;
    } else {
        snprintf(buf, sizeof buf, "%s.u0", name);
        unit_init(&b->u[0], lo, buf, n, c_in, *h, width, 3, stride, 1);
        snprintf(buf, sizeof buf, "%s.u1", name);
        unit_init(&b->u[1], lo, buf, n, width, b->u[0].cd.p, width, 3, 1, 0);
        b->n_units = 2;
    }
    b->has_proj = stride != 1 || c_in != out;
    if (b->has_proj) {
        snprintf(buf, sizeof buf, "%s.proj", name);
        unit_init(&b->proj, lo, buf, n, c_in, *h, out, 1, stride, 0);
    }
    *h = b->u[b->n_units - 1].cd.p;
    return out;
}

static int count_blocks(const resnet_config *c) {
    int nb = 0;
    for (int s = 0; s < c->stages; s++) nb += c->blocks[s];
    return nb;
}

/* Builds every unit's shapes and parameter offsets; the FC layer last. */
static void build(resnet_model *m, rn_layout *lo) {
    const resnet_config *c = &m->cfg;
    unit_init(&m->stem, lo, "stem", m->n, 3, m->image, c->stem_width, c->stem_kernel, c->stem_stride, 1);
    int h = m->stem.cd.p, ch = c->stem_width, b = 0;
    if (c->stem_pool) h = (h + 2 - 3) / 2 + 1;
    m->pool_p = m->pool_q = h;
    for (int s = 0; s < c->stages; s++)
        for (int i = 0; i < c->blocks[s]; i++) {
            char name[32];
            snprintf(name, sizeof name, "stage%d.block%d", s + 1, i);
            ch = block_init(&m->blocks[b++], lo, c, name, m->n, ch, &h, c->widths[s], i == 0 && s > 0 ? 2 : 1,
                            m->v1);
        }
    m->feat = ch;
    layout_take(lo, &m->fc_w_off, "fc.weight", c->classes, ch, 1);
    layout_take(lo, &m->fc_b_off, "fc.bias", c->classes, 1, 0);
}

static double unit_macs(const rn_unit *u) {
    const tfb_conv_desc *d = &u->cd;
    return (double)d->k * d->c * d->r * d->s * d->p * d->q;
}

/* Geometry for one image, without memory: for counting parameters and FLOPs. */
static resnet_model *geometry(const resnet_config *c, int image, int v1, rn_layout *lo) {
    resnet_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cfg = *c;
    m->n = 1;
    m->image = image;
    m->v1 = v1;
    m->n_blocks = count_blocks(c);
    m->blocks = m->n_blocks > 0 ? calloc((size_t)m->n_blocks, sizeof *m->blocks) : NULL;
    if (!m->blocks) { free(m); return NULL; }
    build(m, lo);
    return m;
}

size_t resnet_param_count(const resnet_config *c) {
    rn_layout lo = {0};
    resnet_model *m = geometry(c, c->default_image, 0, &lo);
    if (m) { free(m->blocks); free(m); }
    return lo.offset;
}

/* Forward multiply-adds per image; *stem gets the first convolution's share. */
static double geometry_macs(const resnet_config *c, int image, int v1, double *stem) {
    rn_layout lo = {0};
    resnet_model *m = geometry(c, image, v1, &lo);
    *stem = NAN;
    if (!m) return NAN;
    double macs = unit_macs(&m->stem) + (double)m->feat * c->classes;
    for (int b = 0; b < m->n_blocks; b++) {
        for (int i = 0; i < m->blocks[b].n_units; i++) macs += unit_macs(&m->blocks[b].u[i]);
        if (m->blocks[b].has_proj) macs += unit_macs(&m->blocks[b].proj);
    }
    *stem = unit_macs(&m->stem);
    free(m->blocks);
    free(m);
    return macs;
}

double resnet_forward_macs(const resnet_config *c, int image, int v1) {
    double stem;
    return geometry_macs(c, image, v1, &stem);
}

double resnet_train_flops(const resnet_config *c, int image) {
    double stem, macs = geometry_macs(c, image, 0, &stem);
    return 2.0 * (3.0 * macs - stem);
}

/* ---- memory ---- */

static size_t unit_out(const rn_unit *u) { return (size_t)u->cd.n * u->cd.k * u->cd.p * u->cd.q; }
static size_t unit_in(const rn_unit *u) { return (size_t)u->cd.n * u->cd.c * u->cd.h * u->cd.w; }

static void plan_unit(resnet_model *m, rn_unit *u) {
    size_t out = unit_out(u), k = (size_t)u->cd.k;
    tfb_mempool_add(&m->pools[1], (void **)&u->z, out * 4);
    tfb_mempool_add(&m->pools[1], (void **)&u->y, out * 4);
    tfb_mempool_add(&m->pools[1], (void **)&u->mean, k * 4);
    tfb_mempool_add(&m->pools[1], (void **)&u->var, k * 4);
    tfb_mempool_add(&m->pools[2], (void **)&u->run_mean, k * 4);
    tfb_mempool_add(&m->pools[2], (void **)&u->run_var, k * 4);
    if (out > m->max_act) m->max_act = out;
    if (unit_in(u) > m->max_act) m->max_act = unit_in(u);
    if (k > m->max_k) m->max_k = k;
}

static void plan_acts(resnet_model *m) {
    tfb_mempool *a = &m->pools[1];
    plan_unit(m, &m->stem);
    size_t pooled = (size_t)m->n * m->cfg.stem_width * m->pool_p * m->pool_q;
    tfb_mempool_add(a, (void **)&m->pooled_stem, pooled * 4);
    tfb_mempool_add(a, (void **)&m->argmax, pooled * sizeof(int));
    for (int b = 0; b < m->n_blocks; b++) {
        rn_block *bl = &m->blocks[b];
        for (int i = 0; i < bl->n_units; i++) plan_unit(m, &bl->u[i]);
        if (bl->has_proj) plan_unit(m, &bl->proj);
        tfb_mempool_add(a, (void **)&bl->out, unit_out(&bl->u[bl->n_units - 1]) * 4);
    }
    tfb_mempool_add(a, (void **)&m->pooled, (size_t)m->n * m->feat * 4);
    tfb_mempool_add(a, (void **)&m->logits, (size_t)m->n * m->cfg.classes * 4);
    tfb_mempool_add(a, (void **)&m->loss, 4);
    for (int i = 0; i < 4; i++) tfb_mempool_add(a, (void **)&m->g[i], m->max_act * 4);
    tfb_mempool_add(a, (void **)&m->dz, m->max_act * 4);
    tfb_mempool_add(a, (void **)&m->sum_dy, m->max_k * 4);
    tfb_mempool_add(a, (void **)&m->sum_dy_xhat, m->max_k * 4);
    if (m->wc.gemm_type != TFB_F32)
        for (int i = 0; i < 2; i++) tfb_mempool_add(a, &m->lp[i], m->max_act * 2);
}

/* Calls fn on every unit in forward order: the stem, then each block's units and its projection. */
static void each_unit(resnet_model *m, void (*fn)(resnet_model *m, rn_unit *u, void *ctx), void *ctx) {
    fn(m, &m->stem, ctx);
    for (int b = 0; b < m->n_blocks; b++) {
        for (int i = 0; i < m->blocks[b].n_units; i++) fn(m, &m->blocks[b].u[i], ctx);
        if (m->blocks[b].has_proj) fn(m, &m->blocks[b].proj, ctx);
    }
}

static void bind_unit(resnet_model *m, rn_unit *u, void *ctx) {
    (void)ctx;
    u->w = m->wl.param_pool + u->w_off;
    u->gamma = m->wl.param_pool + u->g_off;
    u->beta = m->wl.param_pool + u->b_off;
    u->dw = m->wl.grad_pool + u->w_off;
    u->dgamma = m->wl.grad_pool + u->g_off;
    u->dbeta = m->wl.grad_pool + u->b_off;
    u->cd.in_type = m->wc.gemm_type;
}

static void bind_all(resnet_model *m) {
    each_unit(m, bind_unit, NULL);
    m->fc_w = m->wl.param_pool + m->fc_w_off;
    m->fc_b = m->wl.param_pool + m->fc_b_off;
    m->dfc_w = m->wl.grad_pool + m->fc_w_off;
    m->dfc_b = m->wl.grad_pool + m->fc_b_off;
}

/* ---- initialisation: He normal (fan in) for convolutions, BN gamma 1 beta 0, FC uniform(+-1/sqrt(fan in)) ---- */

static void init_tensor(float *x, const tfb_param_info *p, int index, const void *ctx) {
    const resnet_model *m = ctx;
    uint64_t seed = m->wc.seed;
    int fc_feat = m->feat;
    tfb_philox_key k = tfb_philox_key_make(seed, STREAM_INIT + 16u * (uint32_t)index);
    int is_gamma = strstr(p->name, "gamma") != NULL, is_fc = strncmp(p->name, "fc.", 3) == 0;
    float std = sqrtf(2.0f / (float)p->cols); /* cols = c * r * s: the fan in */
    for (size_t i = 0; i < p->numel; i++) {
        tfb_philox_ctr r = tfb_philox_block(k, i << 2, 0);
        if (is_fc) x[i] = (2.0f * tfb_u32_to_unit(r.v[0]) - 1.0f) / sqrtf((float)fc_feat);
        else if (!p->decay) x[i] = is_gamma ? 1.0f : 0.0f;
        else {
            float u1 = tfb_u32_to_unit(r.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(r.v[1]);
            x[i] = sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2) * std;
        }
    }
}


static void unit_running_var_one(resnet_model *m, rn_unit *u, void *host) {
    float *var = (float *)host + (u->run_var - (float *)m->pools[2].base);
    for (int k = 0; k < u->cd.k; k++) var[k] = 1.0f;
}

/* Running statistics start at mean 0, variance 1 (PyTorch's convention). */
static tfb_status init_running(resnet_model *m) {
    float *host = calloc(1, m->pools[2].bytes);
    TFB_CHECK_ALLOC(host);
    each_unit(m, unit_running_var_one, host);
    tfb_status st = m->be->copy_h2d(m->be->ctx, m->pools[2].base, host, m->pools[2].bytes);
    free(host);
    return st;
}

/* ---- synthetic data: N(0, 1) pixels and uniform labels, a pure function of (seed, global image index) ---- */

static tfb_status resnet_load_batch(void *self, int step) {
    resnet_model *m = self;
    size_t per = (size_t)3 * m->image * m->image;
    uint64_t first = (uint64_t)(m->wc.fixed_batch ? 0 : step) * m->wc.global_batch + m->wc.sample0;
    tfb_philox_key k = tfb_philox_key_make(m->wc.seed, STREAM_DATA);
    float *img = tfb_mempool_mirror(&m->pools[3], m->images);
    int *lab = tfb_mempool_mirror(&m->pools[3], m->labels);
    for (int b = 0; b < m->n; b++) {
        uint64_t g = first + (uint64_t)b;
        for (size_t i = 0; i < per; i += 2) {
            tfb_philox_ctr r = tfb_philox_block(k, (g << 24) + (i << 1), 1);
            float u1 = tfb_u32_to_unit(r.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(r.v[1]), rad = sqrtf(-2.0f * logf(u1));
            img[b * per + i] = rad * cosf(6.28318530718f * u2);
            if (i + 1 < per) img[b * per + i + 1] = rad * sinf(6.28318530718f * u2);
        }
        lab[b] = (int)(tfb_philox_block(k, g << 2, 2).v[0] % (uint32_t)m->cfg.classes);
    }
    return m->be->copy_h2d(m->be->ctx, m->pools[3].base, m->pools[3].host_mirror, m->pools[3].bytes);
}

/* ---- low precision operands ---- */

static tfb_status lp_act(resnet_model *m, int slot, const float *x, size_t n, const void **out) {
    if (m->wc.gemm_type == TFB_F32) { *out = x; return TFB_OK; }
    TFB_CHECK(m->be->cast(m->be->ctx, m->lp[slot], m->wc.gemm_type, x, TFB_F32, n));
    *out = m->lp[slot];
    return TFB_OK;
}

static const void *lp_weight(resnet_model *m, const float *w) {
    return m->wc.gemm_type == TFB_F32 ? (const void *)w : (const void *)(m->wl.lowp_pool + (w - m->wl.param_pool));
}

/* ---- synchronised batch norm: combine per-rank (mean, var) of equal counts exactly ---- */

static tfb_status sync_moments(resnet_model *m, rn_unit *u) {
    int k = u->cd.k, R = m->wc.dp_size;
    float *mean = m->host_stats, *var = mean + k, *mine = var + k;
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, mine, u->mean, (size_t)k * 4));
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, var, u->var, (size_t)k * 4));
    memcpy(mean, mine, (size_t)k * 4);
    TFB_CHECK(m->wc.group_sum(m->wc.group_sum_ctx, mean, k));
    for (int i = 0; i < k; i++) {
        mean[i] /= (float)R;
        var[i] += (mine[i] - mean[i]) * (mine[i] - mean[i]);
    }
    TFB_CHECK(m->wc.group_sum(m->wc.group_sum_ctx, var, k));
    for (int i = 0; i < k; i++) var[i] /= (float)R;
    TFB_CHECK(m->be->copy_h2d(m->be->ctx, u->mean, mean, (size_t)k * 4));
    return m->be->copy_h2d(m->be->ctx, u->var, var, (size_t)k * 4);
}

static tfb_status sync_grad_sums(resnet_model *m, int k) {
    float *h = m->host_stats;
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, h, m->sum_dy, (size_t)k * 4));
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, h + k, m->sum_dy_xhat, (size_t)k * 4));
    TFB_CHECK(m->wc.group_sum(m->wc.group_sum_ctx, h, 2 * k));
    TFB_CHECK(m->be->copy_h2d(m->be->ctx, m->sum_dy, h, (size_t)k * 4));
    return m->be->copy_h2d(m->be->ctx, m->sum_dy_xhat, h + k, (size_t)k * 4);
}

/* ---- forward ---- */

static tfb_status unit_fwd(resnet_model *m, rn_unit *u, const float *x) {
    tfb_backend *be = m->be;
    const tfb_conv_desc *d = &u->cd;
    int pq = d->p * d->q;
    const void *xin;
    u->x = x;
    TFB_CHECK(lp_act(m, 0, x, unit_in(u), &xin));
    TFB_CHECK(be->conv_fwd(be->ctx, d, u->z, xin, lp_weight(m, u->w)));
    TFB_CHECK(be->bn_moments(be->ctx, u->mean, u->var, u->z, d->n, d->k, pq));
    if (m->wc.sync_bn && m->wc.dp_size > 1) TFB_CHECK(sync_moments(m, u));
    TFB_CHECK(be->bn_apply(be->ctx, u->y, u->z, u->mean, u->var, u->gamma, u->beta, d->n, d->k, pq, BN_EPS));
    double count = (double)d->n * pq * (m->wc.sync_bn ? m->wc.dp_size : 1);
    TFB_CHECK(be->bn_running_update(be->ctx, u->run_mean, u->run_var, u->mean, u->var, d->k, BN_MOMENTUM, count));
    if (u->relu) TFB_CHECK(be->act_fwd(be->ctx, TFB_ACT_RELU, u->y, u->y, unit_out(u)));
    return TFB_OK;
}

static tfb_status block_fwd(resnet_model *m, rn_block *b, const float *x) {
    const float *in = x;
    for (int i = 0; i < b->n_units; i++) {
        TFB_CHECK(unit_fwd(m, &b->u[i], in));
        in = b->u[i].y;
    }
    const float *shortcut = x;
    if (b->has_proj) {
        TFB_CHECK(unit_fwd(m, &b->proj, x));
        shortcut = b->proj.y;
    }
    size_t n = unit_out(&b->u[b->n_units - 1]);
    TFB_CHECK(m->be->residual_add(m->be->ctx, b->out, b->u[b->n_units - 1].y, shortcut, n));
    return m->be->act_fwd(m->be->ctx, TFB_ACT_RELU, b->out, b->out, n);
}

static tfb_status gemm(resnet_model *m, int ta, int tb, int M, int N, int K, const void *a, int lda, const void *b,
                       int ldb, float beta, float *c, int ldc) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .alpha = 1.0f, .beta = beta, .a = a,
                       .lda = lda, .b = b, .ldb = ldb, .c = c, .ldc = ldc, .batch = 1, .in_type = m->wc.gemm_type};
    return m->be->gemm(m->be->ctx, &d);
}

static tfb_status head_fwd(resnet_model *m, const float *x, int hw) {
    tfb_backend *be = m->be;
    int n = m->n, C = m->feat, K = m->cfg.classes;
    const void *pooled;
    TFB_CHECK(be->avgpool_fwd(be->ctx, m->pooled, x, n, C, hw));
    TFB_CHECK(lp_act(m, 0, m->pooled, (size_t)n * C, &pooled));
    TFB_CHECK(gemm(m, 0, 1, n, K, C, pooled, C, lp_weight(m, m->fc_w), C, 0.0f, m->logits, K));
    TFB_CHECK(be->bias_add(be->ctx, m->logits, m->fc_b, n, K));
    return be->xent_fwd(be->ctx, m->loss, m->logits, m->labels, n, K);
}

static const float *stem_fwd(resnet_model *m, tfb_status *st) {
    *st = unit_fwd(m, &m->stem, m->images);
    if (*st != TFB_OK || !m->cfg.stem_pool) return m->stem.y;
    const tfb_conv_desc *d = &m->stem.cd;
    *st = m->be->maxpool_fwd(m->be->ctx, m->pooled_stem, m->argmax, m->stem.y, d->n, d->k, d->p, d->q, 3, 2, 1,
                             m->pool_p, m->pool_q);
    return m->pooled_stem;
}

static tfb_status resnet_forward(void *self, int step, double *loss) {
    resnet_model *m = self;
    tfb_status st;
    float sum;
    (void)step;
    const float *x = stem_fwd(m, &st);
    TFB_CHECK(st);
    for (int b = 0; b < m->n_blocks; b++) {
        TFB_CHECK(block_fwd(m, &m->blocks[b], x));
        x = m->blocks[b].out;
    }
    const rn_unit *last = &m->blocks[m->n_blocks - 1].u[m->blocks[m->n_blocks - 1].n_units - 1];
    TFB_CHECK(head_fwd(m, x, last->cd.p * last->cd.q));
    TFB_CHECK(m->be->copy_d2h(m->be->ctx, &sum, m->loss, sizeof sum));
    *loss = (double)sum / m->n;
    return TFB_OK;
}

/* ---- backward ---- */

/* dy (n, K, P, Q) is the gradient of the unit's output (ReLU applied in place); dx, when not NULL, receives the
 * gradient of its input. */
static tfb_status unit_bwd(resnet_model *m, rn_unit *u, float *dy, float *dx) {
    tfb_backend *be = m->be;
    const tfb_conv_desc *d = &u->cd;
    int pq = d->p * d->q;
    const void *x, *dz;
    if (u->relu) TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_RELU, dy, dy, u->y, unit_out(u)));
    TFB_CHECK(be->bn_bwd_reduce(be->ctx, m->sum_dy, m->sum_dy_xhat, u->dgamma, u->dbeta, dy, u->z, u->mean, u->var,
                                d->n, d->k, pq, BN_EPS));
    int sync = m->wc.sync_bn && m->wc.dp_size > 1;
    if (sync) TFB_CHECK(sync_grad_sums(m, d->k));
    double count = (double)d->n * pq * (sync ? m->wc.dp_size : 1);
    TFB_CHECK(be->bn_bwd_apply(be->ctx, m->dz, dy, u->z, u->mean, u->var, u->gamma, m->sum_dy, m->sum_dy_xhat,
                               count, d->n, d->k, pq, BN_EPS));
    TFB_CHECK(lp_act(m, 0, u->x, unit_in(u), &x));
    TFB_CHECK(lp_act(m, 1, m->dz, unit_out(u), &dz));
    TFB_CHECK(be->conv_bwd_filter(be->ctx, d, u->dw, x, dz));
    if (dx) TFB_CHECK(be->conv_bwd_data(be->ctx, d, dx, dz, lp_weight(m, u->w)));
    return TFB_OK;
}

/* g_out (block output gradient, consumed) to g_in (block input gradient); t1, t2 are work buffers. */
static tfb_status block_bwd(resnet_model *m, rn_block *b, float *g_out, float *g_in, float *t1, float *t2) {
    tfb_backend *be = m->be;
    size_t n_out = unit_out(&b->u[b->n_units - 1]), n_in = unit_in(&b->u[0]);
    TFB_CHECK(be->act_bwd(be->ctx, TFB_ACT_RELU, g_out, g_out, b->out, n_out));
    float *d = g_out, *next = t1;
    for (int i = b->n_units - 1; i >= 0; i--) {
        TFB_CHECK(unit_bwd(m, &b->u[i], d, next));
        d = next;
        next = d == t1 ? t2 : t1;
    }
    if (b->has_proj) {
        TFB_CHECK(unit_bwd(m, &b->proj, g_out, g_in));
        return be->residual_add(be->ctx, g_in, g_in, d, n_in);
    }
    return be->residual_add(be->ctx, g_in, g_out, d, n_in);
}

static tfb_status head_bwd(resnet_model *m, float loss_scale, float *g, int hw) {
    tfb_backend *be = m->be;
    int n = m->n, C = m->feat, K = m->cfg.classes;
    const void *dl, *pooled;
    TFB_CHECK(be->xent_bwd(be->ctx, m->logits, m->logits, m->labels, n, K, loss_scale / n));
    TFB_CHECK(lp_act(m, 0, m->logits, (size_t)n * K, &dl));
    TFB_CHECK(lp_act(m, 1, m->pooled, (size_t)n * C, &pooled));
    TFB_CHECK(gemm(m, 1, 0, K, C, n, dl, K, pooled, C, 1.0f, m->dfc_w, C));
    TFB_CHECK(be->bias_grad(be->ctx, m->dfc_b, m->logits, n, K));
    TFB_CHECK(gemm(m, 0, 0, n, C, K, dl, K, lp_weight(m, m->fc_w), C, 0.0f, m->pooled, C));
    return be->avgpool_bwd(be->ctx, g, m->pooled, n, C, hw);
}

static tfb_status stem_bwd(resnet_model *m, float *g, float *work) {
    const tfb_conv_desc *d = &m->stem.cd;
    if (m->cfg.stem_pool) {
        TFB_CHECK(m->be->maxpool_bwd(m->be->ctx, work, g, m->argmax, d->n, d->k, d->p * d->q,
                                     m->pool_p * m->pool_q));
        g = work;
    }
    return unit_bwd(m, &m->stem, g, NULL); /* the first layer needs no input gradient */
}

static tfb_status resnet_backward(void *self, int step, float loss_scale, tfb_grad_ready_fn ready, void *rctx) {
    resnet_model *m = self;
    (void)step;
    TFB_CHECK(m->be->fill(m->be->ctx, m->wl.grad_pool, 0.0f, m->wl.numel));
    const rn_unit *last = &m->blocks[m->n_blocks - 1].u[m->blocks[m->n_blocks - 1].n_units - 1];
    float *g_out = m->g[0], *g_in = m->g[1];
    TFB_CHECK(head_bwd(m, loss_scale, g_out, last->cd.p * last->cd.q));
    TFB_CHECK(ready(rctx, m->fc_w_off));
    for (int b = m->n_blocks - 1; b >= 0; b--) {
        TFB_CHECK(block_bwd(m, &m->blocks[b], g_out, g_in, m->g[2], m->g[3]));
        TFB_CHECK(ready(rctx, m->blocks[b].u[0].w_off));
        float *t = g_out;
        g_out = g_in;
        g_in = t;
    }
    TFB_CHECK(stem_bwd(m, g_out, g_in));
    return ready(rctx, 0);
}

static tfb_status resnet_dump_batch(void *self, const char *dir) {
    resnet_model *m = self;
    char path[4096];
    snprintf(path, sizeof path, "%s/batch.images.npy", dir);
    TFB_CHECK(tfb_npy_write_f32(path, tfb_mempool_mirror(&m->pools[3], m->images), m->n,
                                3 * m->image * m->image));
    snprintf(path, sizeof path, "%s/batch.labels.npy", dir);
    return tfb_npy_write_i32(path, tfb_mempool_mirror(&m->pools[3], m->labels), m->n, 1);
}

static void resnet_destroy(void *self) {
    resnet_model *m = self;
    for (int i = 0; i < 4; i++) tfb_mempool_release(&m->pools[i], m->be);
    free((void *)m->wl.params);
    free(m->blocks);
    free(m->host_stats);
    free(m);
}

static void fill_workload(resnet_model *m) {
    m->wl.self = m;
    m->wl.flops_per_sample = resnet_train_flops(&m->cfg, m->image);
    m->wl.flops_convention = "training = 3 x forward minus the first convolution's backward-data; 1 multiply-add "
                             "= 2 FLOPs; convolutions and the FC layer";
    snprintf(m->wl.shape, sizeof m->wl.shape, "image %dx%d, %d classes, %s batch norm", m->image, m->image,
             m->cfg.classes, m->wc.sync_bn ? "synchronised" : "per-rank");
    m->wl.optimizer = TFB_OPT_SGD;
    m->wl.default_lr = 0.1f;
    m->wl.load_batch = resnet_load_batch;
    m->wl.forward = resnet_forward;
    m->wl.backward = resnet_backward;
    m->wl.dump_batch = resnet_dump_batch;
    m->wl.destroy = resnet_destroy;
}

static tfb_status plan_all(resnet_model *m) {
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.param_pool, m->wl.numel * 4);
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.grad_pool, m->wl.numel * 4);
    if (m->wc.gemm_type != TFB_F32) tfb_mempool_add(&m->pools[0], (void **)&m->wl.lowp_pool, m->wl.numel * 2);
    plan_acts(m);
    tfb_mempool_add(&m->pools[3], (void **)&m->images, (size_t)m->n * 3 * m->image * m->image * 4);
    tfb_mempool_add(&m->pools[3], (void **)&m->labels, (size_t)m->n * 4);
    for (int i = 0; i < 4; i++) TFB_CHECK(tfb_mempool_commit(&m->pools[i], m->be, i == 3));
    m->wl.bytes_planned = m->pools[0].bytes + m->pools[1].bytes + m->pools[2].bytes + m->pools[3].bytes;
    m->host_stats = malloc(4 * m->max_k * sizeof(float));
    TFB_CHECK_ALLOC(m->host_stats);
    return TFB_OK;
}

tfb_status resnet_create(const resnet_config *c, const tfb_workload_config *wc, tfb_backend *be,
                         tfb_workload **out) {
    resnet_model *m = calloc(1, sizeof *m);
    TFB_CHECK_ALLOC(m);
    *m = (resnet_model){.cfg = *c, .wc = *wc, .be = be, .n = wc->local_batch, .image = wc->image_size};
    m->wl.gemm_type = wc->gemm_type;
    m->n_blocks = count_blocks(c);
    m->blocks = m->n_blocks > 0 ? calloc((size_t)m->n_blocks, sizeof *m->blocks) : NULL;
    rn_layout lo = {.table = calloc(2 + 3 * (size_t)(1 + 4 * m->n_blocks), sizeof(tfb_param_info))};
    tfb_status st = m->blocks && lo.table ? TFB_OK : TFB_ERR_NOMEM;
    m->wl.params = lo.table;
    if (st == TFB_OK) {
        build(m, &lo);
        m->wl.n_params = lo.count;
        m->wl.numel = lo.offset;
        st = plan_all(m);
    }
    fill_workload(m);
    if (st == TFB_OK) {
        bind_all(m);
        st = tfb_workload_init_params(&m->wl, be, init_tensor, m);
    }
    if (st == TFB_OK) st = init_running(m);
    if (st == TFB_OK) st = tfb_workload_refresh_lowp(&m->wl, be);
    if (st != TFB_OK) { resnet_destroy(m); return st; }
    *out = &m->wl;
    return TFB_OK;
}
