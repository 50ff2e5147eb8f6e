/* resnet.c — the ResNet workload: configurations, geometry and parameter layout, synthetic images, and the
 * forward and backward kernel sequence on the backend interface.
 *
 * A unit is convolution (no bias) + batch norm (+ ReLU). Bottleneck blocks (ResNet-50 v1.5: the stride sits on
 * the 3x3) are 1x1-3x3-1x1 units, basic blocks 3x3-3x3; block 0 of a stage has a projection shortcut (1x1 conv +
 * BN) when the shape changes. Parameters are pooled in forward order (torchvision's order), so backward completes
 * them from the end. Batch-norm statistics are this rank's unless sync_bn, which sums them over the data-parallel
 * group through the driver's callback (small per-channel vectors, summed where they are: on the GPU with NCCL).
 *
 * Pipeline stages hold contiguous units of the row stem, blocks, head (balanced by multiply-adds), with one
 * activation set (rn_net) per micro-batch in flight. Tensor parallelism splits every convolution's output
 * channels (and the FC layer's classes) over the group: a rank keeps its channels of every activation, gathers
 * the whole tensor before each convolution (all-gather) and sums the input gradients of its convolutions over the
 * group (all-reduce) before keeping its channels again. Batch norm is per channel, so it stays exact.
 *
 * Activations are NCHW or NHWC (the configuration's layout; NHWC lets 16-bit convolutions on a GPU run on tensor
 * cores without transposes). Shapes below are written in NCHW order; in NHWC the same tensors are channels-last,
 * filters are (K, R, S, C), a channel shard is a column range of (n*H*W, C) rows, and images are drawn in NCHW
 * order and reordered, so both layouts train on the same numbers. In FP16/BF16 every convolution output z is
 * stored in 16 bits; with one rank per tensor group so is every block unit's output y (its readers, the next
 * convolution and the block's sum, take 16 bits), every block output but the stage's last (read by the next
 * block's convolutions and its sum; the last one feeds the head or the next stage in FP32), and the stem's output
 * and max pool when block 0 follows on the stage, so no cast runs before a convolution. An activation's gradient has the activation's type, so the backward stays 16-bit inside
 * a stage too, with a block's ReLU backward folded into the sum that forms the next block's input gradient.
 * Batch-norm statistics and parameter gradients are FP32. This file does not time, schedule micro-batches or
 * update parameters.
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

/* Channel counts below are this rank's (K = full output channels / T); inputs are whole (C channels). */
typedef struct {
    tfb_conv_desc cd;          /* shapes for the micro-batch: c whole, k this rank's */
    size_t w_off, g_off, b_off;/* parameter pool offsets of the filters, gamma and beta */
    float *w;                  /* (K, C, R, S); NHWC: (K, R, S, C) */
    float *gamma, *beta;       /* (K) */
    float *dw, *dgamma, *dbeta;
    float *run_mean, *run_var; /* (K) running statistics (not trained), shared by every activation set */
    const void *x;             /* (n, C, H, W) the whole input seen by the last forward, of x_type */
    tfb_dtype x_type;
    float *xg;                 /* (n, C, H, W) gathered input, under tensor parallelism (not for block inputs) */
    void *z;                   /* (n, K, P, Q) convolution output in the GEMM type (16-bit as cuDNN writes it) */
    float *mean, *var;         /* (K) batch statistics used */
    void *y;                   /* (n, K, P, Q) batch-norm output, ReLU applied (same pass) when relu, of y_type */
    tfb_dtype y_type;          /* the GEMM type when the next unit's convolution is y's only reader, else FP32 */
    int relu;
} rn_unit;

typedef struct {
    rn_unit u[3];
    int n_units;
    rn_unit proj;
    int has_proj;
    float *in_full;            /* (n, Cin, H, W) the gathered block input, under tensor parallelism */
    void *out;                 /* (n, Cout / T, P, Q) ReLU(main + shortcut), of out_type */
    tfb_dtype out_type;        /* the GEMM type when the next block on this stage reads it (one rank per tensor
                                * group), else FP32 */
} rn_block;

/* One micro-batch's activations. */
typedef struct {
    rn_unit stem;
    void *pooled_stem;         /* (n, stem_width / T, pool_p, pool_q), of the stem's output type */
    int *argmax;               /* (n, stem_width / T, pool_p, pool_q) */
    rn_block *blocks;          /* [n_blocks], this stage's bound */
    float *x_in;               /* (in_elems) received from the previous stage */
    float *pooled, *pooled_full; /* (n, feat / T), (n, feat) */
    float *logits;             /* (n, classes_l) */
    float *images;             /* (n, 3, image, image) */
    int *labels;               /* (n) */
} rn_net;

typedef struct {
    tfb_param_info *table;     /* NULL while only counting */
    int count, index;          /* entries kept, and parameters walked (the whole model's index) */
    size_t offset;
    int keep;                  /* the unit being laid out belongs to this stage */
    int T;                     /* tensor group size: filters and classes split T ways */
    int nhwc;                  /* activations channels-last: filters stored (K, R, S, C) */
    int taps;                  /* the tensor being taken is such a filter with this many taps (else 0) */
} rn_layout;

typedef struct {
    resnet_config cfg;
    tfb_workload_config wc;
    tfb_workload wl;
    tfb_backend *be;
    int n, image, v1;
    int T, t;                  /* tensor group size and rank */
    tfb_layout layout;         /* of every activation */
    int u0, u1, n_units;       /* this stage: units [u0, u1) of stem (0), blocks (1..), head (last) */
    rn_net *net;               /* [slots] */
    unsigned char *busy;       /* [slots] */
    int pool_p, pool_q;        /* stem max-pool output size */
    int n_blocks, feat;        /* feat: channels into the head */
    int classes_l, classes_valid; /* classes per rank (padded) and how many of this rank's are real */
    size_t fc_w_off, fc_b_off;
    float *fc_w, *fc_b, *dfc_w, *dfc_b; /* (classes_l, feat), (classes_l) */
    float *g[4];               /* gradient buffers of the largest activation */
    float *gfull[2];           /* (largest whole activation) summed input gradients, tensor parallelism */
    float *gather;             /* (largest whole activation) all-gather landing buffer */
    const float *grad_in;      /* where the last backward left the stage's input gradient */
    float *dz;                 /* (largest activation) batch-norm input gradient */
    float *bn_sums;            /* (2 * largest K): a unit's sum dy (K) then sum dy * xhat (K), one all-reduce apart */
    float *bn_mine;            /* (largest K) this rank's batch mean, under synchronised batch norm */
    void *lp[2];               /* 16-bit casts of activation operands; lp[1] also takes the 16-bit dz of unit_bwd */
    size_t max_act, max_full, max_k;
    struct { void *z, *y; float *mean, *var, *xg; size_t out, in, k; } rc[4]; /* checkpointing: one block's unit
                                  buffers (units 0..2, 3: projection), each sized for the largest on the stage */
    float *rc_in_full;         /* checkpointing: the gathered block input (tensor parallelism) */
    size_t rc_in_full_elems;
    int recomputing;           /* inside backward's recomputation: running statistics are left alone */
    int last_slot;
    tfb_mempool pools[4];      /* parameters+gradients (+16-bit copy), activations, running stats, inputs */
} resnet_model;

/* ---- geometry and layout ---- */

static void layout_take(rn_layout *lo, size_t *off, const char *name, int full_rows, int cols, int split, int decay) {
    int T = split ? lo->T : 1, rows = (full_rows + T - 1) / T;
    if (lo->table && lo->keep) {
        tfb_param_info *p = &lo->table[lo->count];
        *p = (tfb_param_info){.offset = lo->offset, .numel = (size_t)rows * cols, .rows = rows, .cols = cols,
                              .decay = decay, .index = lo->index, .full_rows = full_rows, .full_cols = cols,
                              .shard = T > 1 ? TFB_SHARD_ROWS : TFB_SHARD_NONE, .blocks = 1, .taps = lo->taps};
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    lo->index++;
    if (!lo->keep) return;
    *off = lo->offset;
    lo->offset += (size_t)rows * cols;
    lo->count++;
}

static void unit_init(rn_unit *u, rn_layout *lo, const char *name, int n, int c, int h, int k, int r, int stride,
                      int relu) {
    char buf[64];
    int pad = r / 2, p = (h + 2 * pad - r) / stride + 1;
    u->cd = (tfb_conv_desc){.n = n, .c = c, .h = h, .w = h, .k = k / lo->T, .r = r, .s = r, .stride = stride,
                            .pad = pad, .p = p, .q = p, .layout = lo->nhwc ? TFB_NHWC : TFB_NCHW,
                            .in_type = TFB_F32};
    u->relu = relu;
    snprintf(buf, sizeof buf, "%s.conv.weight", name);
    lo->taps = lo->nhwc && r > 1 ? r * r : 0;
    layout_take(lo, &u->w_off, buf, k, c * r * r, 1, 1);
    lo->taps = 0;
    snprintf(buf, sizeof buf, "%s.bn.gamma", name);
    layout_take(lo, &u->g_off, buf, k, 1, 1, 0);
    snprintf(buf, sizeof buf, "%s.bn.beta", name);
    layout_take(lo, &u->b_off, buf, k, 1, 1, 0);
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

/* Builds every unit's shapes into `net` and this stage's parameter offsets (units [u0, u1)); the FC layer last. */
static void build(resnet_model *m, rn_net *net, rn_layout *lo) {
    const resnet_config *c = &m->cfg;
    lo->keep = m->u0 == 0;
    unit_init(&net->stem, lo, "stem", m->n, 3, m->image, c->stem_width, c->stem_kernel, c->stem_stride, 1);
    int h = net->stem.cd.p, ch = c->stem_width, b = 0;
    if (c->stem_pool) h = (h + 2 - 3) / 2 + 1;
    m->pool_p = m->pool_q = h;
    for (int s = 0; s < c->stages; s++)
        for (int i = 0; i < c->blocks[s]; i++, b++) {
            char name[40]; /* "stage%d.block%d" of any two ints */
            snprintf(name, sizeof name, "stage%d.block%d", s + 1, i);
            lo->keep = 1 + b >= m->u0 && 1 + b < m->u1;
            ch = block_init(&net->blocks[b], lo, c, name, m->n, ch, &h, c->widths[s], i == 0 && s > 0 ? 2 : 1,
                            m->v1);
        }
    m->feat = ch;
    lo->keep = m->u1 == m->n_units;
    layout_take(lo, &m->fc_w_off, "fc.weight", c->classes, ch, 1, 1);
    layout_take(lo, &m->fc_b_off, "fc.bias", c->classes, 1, 1, 0);
}

static double unit_macs(const rn_unit *u) {
    const tfb_conv_desc *d = &u->cd;
    return (double)d->k * d->c * d->r * d->s * d->p * d->q;
}

static double block_macs(const rn_block *b) {
    double macs = b->has_proj ? unit_macs(&b->proj) : 0;
    for (int i = 0; i < b->n_units; i++) macs += unit_macs(&b->u[i]);
    return macs;
}

/* Geometry of the whole model for one image, without memory: for counting parameters, FLOPs and unit costs. */
static resnet_model *geometry(const resnet_config *c, int image, int v1, rn_layout *lo) {
    resnet_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cfg = *c;
    m->n = 1;
    m->image = image;
    m->v1 = v1;
    m->n_blocks = count_blocks(c);
    m->n_units = m->u1 = m->n_blocks + 2;
    m->net = calloc(1, sizeof *m->net);
    if (m->net) m->net->blocks = m->n_blocks > 0 ? calloc((size_t)m->n_blocks, sizeof(rn_block)) : NULL;
    if (!m->net || !m->net->blocks) { free(m->net); free(m); return NULL; }
    if (lo->T < 1) lo->T = 1;
    build(m, m->net, lo);
    return m;
}

static void geometry_free(resnet_model *m) {
    if (!m) return;
    free(m->net->blocks);
    free(m->net);
    free(m);
}

size_t resnet_param_count(const resnet_config *c) {
    rn_layout lo = {0};
    resnet_model *m = geometry(c, c->default_image, 0, &lo);
    geometry_free(m);
    return lo.offset;
}

int resnet_units(const resnet_config *c) { return count_blocks(c) + 2; }

/* Forward multiply-adds per unit (stem, blocks, head) of one image. */
static tfb_status unit_costs(const resnet_config *c, int image, double *costs) {
    rn_layout lo = {0};
    resnet_model *m = geometry(c, image, 0, &lo);
    TFB_CHECK_ALLOC(m);
    costs[0] = unit_macs(&m->net->stem);
    for (int b = 0; b < m->n_blocks; b++) costs[1 + b] = block_macs(&m->net->blocks[b]);
    costs[m->n_blocks + 1] = (double)m->feat * c->classes;
    geometry_free(m);
    return TFB_OK;
}

/* Forward multiply-adds per image; *stem gets the first convolution's share. */
static double geometry_macs(const resnet_config *c, int image, int v1, double *stem) {
    rn_layout lo = {0};
    resnet_model *m = geometry(c, image, v1, &lo);
    *stem = NAN;
    if (!m) return NAN;
    double macs = unit_macs(&m->net->stem) + (double)m->feat * c->classes;
    for (int b = 0; b < m->n_blocks; b++) macs += block_macs(&m->net->blocks[b]);
    *stem = unit_macs(&m->net->stem);
    geometry_free(m);
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
static int unit_hw_in(const rn_unit *u) { return u->cd.h * u->cd.w; }
static int unit_hw_out(const rn_unit *u) { return u->cd.p * u->cd.q; }
static int has_stem(const resnet_model *m) { return m->u0 == 0; }
static int has_head(const resnet_model *m) { return m->u1 == m->n_units; }
static int has_block(const resnet_model *m, int b) { return 1 + b >= m->u0 && 1 + b < m->u1; }
/* The last block this stage holds (below its first when it holds none). */
static int stage_last_block(const resnet_model *m) { return m->u1 - 2 < m->n_blocks ? m->u1 - 2 : m->n_blocks - 1; }

static void note_sizes(resnet_model *m, const rn_unit *u) {
    size_t out = unit_out(u), in = unit_in(u);
    if (out > m->max_act) m->max_act = out;
    if (in > m->max_act) m->max_act = in;
    if (in > m->max_full) m->max_full = in;
    if (out * (size_t)m->T > m->max_full) m->max_full = out * (size_t)m->T;
    if ((size_t)u->cd.k > m->max_k) m->max_k = (size_t)u->cd.k;
}

/* Checkpointing: unit u at position pos of a block only grows the shared recompute buffers. */
static void note_recompute(resnet_model *m, const rn_unit *u, int pos) {
    size_t out = unit_out(u), in = unit_in(u), k = (size_t)u->cd.k;
    if (out > m->rc[pos].out) m->rc[pos].out = out;
    if (in > m->rc[pos].in) m->rc[pos].in = in;
    if (k > m->rc[pos].k) m->rc[pos].k = k;
}

/* Bytes of an element of type t. */
static size_t type_bytes(tfb_dtype t) { return t == TFB_F32 ? 4 : 2; }

/* The type of the stem's output and of its pool: the GEMM type when block 0, on this stage, reads them whole (one
 * rank per tensor group), else FP32 (gathered, or sent to the next stage). */
static tfb_dtype stem_out_type(const resnet_model *m) {
    return m->T == 1 && has_block(m, 0) ? m->wc.gemm_type : TFB_F32;
}

/* gathered: the unit reads a gathered copy of its input (tensor parallelism, not a block's first units);
 * pos: its place in a block (0..2, 3: projection), -1 for the stem. A block unit's output is read by the next
 * unit's convolution or the block's sum, which take it whole in the GEMM type with one rank per tensor group. */
static void plan_unit(resnet_model *m, rn_unit *u, rn_unit *shared, int gathered, int pos) {
    tfb_mempool *a = &m->pools[1];
    size_t out = unit_out(u), k = (size_t)u->cd.k;
    u->y_type = pos < 0 ? stem_out_type(m) : m->T == 1 ? m->wc.gemm_type : TFB_F32;
    if (m->wc.checkpointing && pos >= 0) {
        note_recompute(m, u, pos);
    } else {
        tfb_mempool_add(a, &u->z, out * type_bytes(m->wc.gemm_type));
        tfb_mempool_add(a, &u->y, out * type_bytes(u->y_type));
        tfb_mempool_add(a, (void **)&u->mean, k * 4);
        tfb_mempool_add(a, (void **)&u->var, k * 4);
        if (gathered && m->T > 1) tfb_mempool_add(a, (void **)&u->xg, unit_in(u) * 4);
    }
    if (u == shared) {
        tfb_mempool_add(&m->pools[2], (void **)&u->run_mean, k * 4);
        tfb_mempool_add(&m->pools[2], (void **)&u->run_var, k * 4);
    }
    note_sizes(m, u);
}

/* last: the stage's last block, whose output goes to the head or the next stage in FP32. */
static void plan_block(resnet_model *m, rn_block *bl, rn_block *shared, int last) {
    tfb_mempool *a = &m->pools[1];
    for (int i = 0; i < bl->n_units; i++) plan_unit(m, &bl->u[i], &shared->u[i], i > 0, i);
    if (bl->has_proj) plan_unit(m, &bl->proj, &shared->proj, 0, 3);
    bl->out_type = !last && m->T == 1 ? m->wc.gemm_type : TFB_F32;
    size_t in_full = unit_in(&bl->u[0]);
    if (m->T > 1 && m->wc.checkpointing && in_full > m->rc_in_full_elems) m->rc_in_full_elems = in_full;
    if (m->T > 1 && !m->wc.checkpointing) tfb_mempool_add(a, (void **)&bl->in_full, in_full * 4);
    size_t out = unit_out(&bl->u[bl->n_units - 1]);
    tfb_mempool_add(a, &bl->out, out * type_bytes(bl->out_type)); /* the next block's input */
}

/* Checkpointing: the buffers one block's recomputation fills, shared by every block and activation set. */
static void plan_recompute(resnet_model *m) {
    tfb_mempool *a = &m->pools[1];
    if (!m->wc.checkpointing) return;
    for (int i = 0; i < 4; i++) {
        if (!m->rc[i].out) continue;
        tfb_mempool_add(a, &m->rc[i].z, m->rc[i].out * type_bytes(m->wc.gemm_type));
        tfb_mempool_add(a, &m->rc[i].y, m->rc[i].out * 4); /* room for either type */
        tfb_mempool_add(a, (void **)&m->rc[i].mean, m->rc[i].k * 4);
        tfb_mempool_add(a, (void **)&m->rc[i].var, m->rc[i].k * 4);
        if (m->T > 1 && i > 0 && i < 3) tfb_mempool_add(a, (void **)&m->rc[i].xg, m->rc[i].in * 4);
    }
    if (m->rc_in_full_elems) tfb_mempool_add(a, (void **)&m->rc_in_full, m->rc_in_full_elems * 4);
}

/* Elements of the stage's input (this rank's channels of the previous unit's output). */
static size_t stage_in_elems(const resnet_model *m) {
    if (has_stem(m)) return 0;
    int b = m->u0 - 1;
    if (b < m->n_blocks) return unit_in(&m->net[0].blocks[b].u[0]) / (size_t)m->T;
    const rn_unit *last = &m->net[0].blocks[m->n_blocks - 1].u[m->net[0].blocks[m->n_blocks - 1].n_units - 1];
    return unit_out(last);
}

static void plan_net(resnet_model *m, rn_net *net) {
    tfb_mempool *a = &m->pools[1];
    size_t n = (size_t)m->n;
    if (!has_stem(m)) tfb_mempool_add(a, (void **)&net->x_in, stage_in_elems(m) * 4);
    if (has_stem(m)) {
        plan_unit(m, &net->stem, &m->net[0].stem, 0, -1);
        size_t pooled = n * net->stem.cd.k * m->pool_p * m->pool_q;
        tfb_mempool_add(a, &net->pooled_stem, pooled * type_bytes(stem_out_type(m)));
        tfb_mempool_add(a, (void **)&net->argmax, pooled * sizeof(int));
        tfb_mempool_add(&m->pools[3], (void **)&net->images, n * 3 * m->image * m->image * 4);
    }
    for (int b = 0; b < m->n_blocks; b++)
        if (has_block(m, b)) plan_block(m, &net->blocks[b], &m->net[0].blocks[b], b == stage_last_block(m));
    if (!has_head(m)) return;
    tfb_mempool_add(a, (void **)&net->pooled, n * (size_t)(m->feat / m->T) * 4);
    tfb_mempool_add(a, (void **)&net->pooled_full, n * (size_t)m->feat * 4);
    tfb_mempool_add(a, (void **)&net->logits, n * (size_t)m->classes_l * 4);
    tfb_mempool_add(&m->pools[3], (void **)&net->labels, n * 4);
    if (n * (size_t)m->feat > m->max_full) m->max_full = n * (size_t)m->feat;
    if (n * (size_t)m->feat > m->max_act) m->max_act = n * (size_t)m->feat;
}

static void plan_shared(resnet_model *m) {
    tfb_mempool *a = &m->pools[1];
    if (stage_in_elems(m) > m->max_act) m->max_act = stage_in_elems(m);
    for (int i = 0; i < 4; i++) tfb_mempool_add(a, (void **)&m->g[i], m->max_act * 4);
    tfb_mempool_add(a, (void **)&m->dz, m->max_act * 4);
    tfb_mempool_add(a, (void **)&m->bn_sums, 2 * m->max_k * 4);
    if (m->wc.sync_bn && m->wc.dp_size > 1) tfb_mempool_add(a, (void **)&m->bn_mine, m->max_k * 4);
    if (m->T > 1) {
        for (int i = 0; i < 2; i++) tfb_mempool_add(a, (void **)&m->gfull[i], m->max_full * 4);
        tfb_mempool_add(a, (void **)&m->gather, m->max_full * 4);
    }
    if (m->wc.gemm_type != TFB_F32)
        for (int i = 0; i < 2; i++) tfb_mempool_add(a, &m->lp[i], (m->max_act > m->max_full ? m->max_act : m->max_full) * 2);
    plan_recompute(m);
}

/* Calls fn on every unit of this stage in activation set `net`, in forward order. */
static void each_unit(resnet_model *m, rn_net *net, void (*fn)(resnet_model *m, rn_unit *u, void *ctx), void *ctx) {
    if (has_stem(m)) fn(m, &net->stem, ctx);
    for (int b = 0; b < m->n_blocks; b++) {
        if (!has_block(m, b)) continue;
        for (int i = 0; i < net->blocks[b].n_units; i++) fn(m, &net->blocks[b].u[i], ctx);
        if (net->blocks[b].has_proj) fn(m, &net->blocks[b].proj, ctx);
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
    u->cd.y_type = m->wc.gemm_type; /* z: 16-bit in a 16-bit network, as the convolution writes it */
    u->cd.tf32 = m->wc.tf32;
}

static void share_unit(rn_unit *u, const rn_unit *base) {
    u->run_mean = base->run_mean;
    u->run_var = base->run_var;
}

/* Every activation set shares the running statistics of set 0. */
static void share_running(resnet_model *m, rn_net *net) {
    share_unit(&net->stem, &m->net[0].stem);
    for (int b = 0; b < m->n_blocks; b++) {
        for (int i = 0; i < net->blocks[b].n_units; i++) share_unit(&net->blocks[b].u[i], &m->net[0].blocks[b].u[i]);
        share_unit(&net->blocks[b].proj, &m->net[0].blocks[b].proj);
    }
}

static void bind_all(resnet_model *m) {
    for (int s = 0; s < m->wc.slots; s++) {
        each_unit(m, &m->net[s], bind_unit, NULL);
        share_running(m, &m->net[s]);
    }
    m->fc_w = m->wl.param_pool + m->fc_w_off;
    m->fc_b = m->wl.param_pool + m->fc_b_off;
    m->dfc_w = m->wl.grad_pool + m->fc_w_off;
    m->dfc_b = m->wl.grad_pool + m->fc_b_off;
}

/* ---- initialisation: He normal (fan in) for convolutions, BN gamma 1 beta 0, FC uniform(+-1/sqrt(fan in)) ---- */

static void init_tensor(float *x, const tfb_param_info *p, const void *ctx) {
    const resnet_model *m = ctx;
    size_t n = (size_t)p->full_rows * p->full_cols;
    tfb_philox_key k = tfb_philox_key_make(m->wc.seed, STREAM_INIT + 16u * (uint32_t)p->index);
    int is_gamma = strstr(p->name, "gamma") != NULL, is_fc = strncmp(p->name, "fc.", 3) == 0;
    float std = sqrtf(2.0f / (float)p->full_cols); /* cols = c * r * s: the fan in */
    for (size_t i = 0; i < n; i++) {
        tfb_philox_ctr r = tfb_philox_block(k, i << 2, 0);
        if (is_fc) x[i] = (2.0f * tfb_u32_to_unit(r.v[0]) - 1.0f) / sqrtf((float)m->feat);
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
    float *host = calloc(1, m->pools[2].bytes + 64);
    TFB_CHECK_ALLOC(host);
    each_unit(m, &m->net[0], unit_running_var_one, host);
    tfb_status st = m->be->copy_h2d(m->be->ctx, m->pools[2].base, host, m->pools[2].bytes);
    free(host);
    return st;
}

/* ---- synthetic data: N(0, 1) pixels and uniform labels, a pure function of (seed, global image index) ---- */

/* images (n, 3, image, image) in the model's layout, drawn on the device (no host loop or copy in the step; row =
 * global sample index) in NCHW order: NHWC draws into dz (free between backward passes) and reorders. */
static tfb_status draw_images(resnet_model *m, float *images, uint64_t first, tfb_philox_key k) {
    int hw = m->image * m->image;
    float *dst = m->layout == TFB_NHWC ? m->dz : images;
    TFB_CHECK(m->be->normal_fill(m->be->ctx, dst, (size_t)m->n, (size_t)3 * hw, first, k));
    if (m->layout == TFB_NCHW) return TFB_OK;
    return m->be->permute_0213(m->be->ctx, images, TFB_F32, 3, m->dz, TFB_F32, (size_t)hw, NULL, m->n, 3, hw, 1);
}

static tfb_status resnet_load_batch(void *self, int step, int mb, int slot) {
    resnet_model *m = self;
    rn_net *net = &m->net[slot];
    uint64_t first = (uint64_t)(m->wc.fixed_batch ? 0 : step) * m->wc.global_batch + m->wc.sample0 +
                     (uint64_t)mb * m->n;
    tfb_philox_key k = tfb_philox_key_make(m->wc.seed, STREAM_DATA);
    m->last_slot = slot;
    if (has_stem(m)) TFB_CHECK(draw_images(m, net->images, first, k));
    if (!has_head(m)) return TFB_OK;
    int *lab = tfb_mempool_mirror(&m->pools[3], net->labels);
    for (int b = 0; b < m->n; b++)
        lab[b] = (int)(tfb_philox_block(k, (first + (uint64_t)b) << 2, 2).v[0] % (uint32_t)m->cfg.classes);
    return m->be->copy_h2d(m->be->ctx, net->labels, lab, (size_t)m->n * sizeof(int));
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

/* ---- tensor parallelism: channel shards <-> whole tensors ---- */

/* A channel shard (n, cl, hw) as rows of contiguous chunks: n rows of cl * hw in NCHW, n * hw rows of cl in
 * NHWC; the whole tensor's rows hold every rank's chunk in rank order. */
static size_t shard_rows(const resnet_model *m, int n, int hw) { return m->layout == TFB_NHWC ? (size_t)n * hw : (size_t)n; }
static size_t shard_chunk(const resnet_model *m, int cl, int hw) { return m->layout == TFB_NHWC ? (size_t)cl : (size_t)cl * hw; }

/* full (n, T * cl, hw) = every rank's local (n, cl, hw), gathered over the tensor group. */
static tfb_status gather_channels(resnet_model *m, float *full, const float *local, int n, int cl, int hw) {
    size_t chunk = shard_chunk(m, cl, hw), rows = shard_rows(m, n, hw), per_rank = rows * chunk;
    TFB_CHECK(tfb_workload_mark(&m->wl, TFB_MARK_WORK));
    TFB_CHECK(m->wc.tp->allgather(m->wc.tp, local, m->gather, per_rank, TFB_COMM_F32));
    TFB_CHECK(tfb_workload_mark(&m->wl, TFB_MARK_TP));
    m->wl.tp_bus_bytes += (double)(m->T - 1) * per_rank * sizeof(float);
    for (int r = 0; r < m->T; r++)
        TFB_CHECK(m->be->copy_2d(m->be->ctx, full + r * chunk, chunk * m->T, m->gather + r * per_rank, chunk, rows,
                                 chunk));
    return TFB_OK;
}

/* local (n, cl, hw) = this rank's channels of full (n, T * cl, hw) summed over the tensor group. */
static tfb_status reduce_channels(resnet_model *m, float *local, float *full, int n, int cl, int hw) {
    size_t chunk = shard_chunk(m, cl, hw), rows = shard_rows(m, n, hw);
    TFB_CHECK(tfb_workload_tp_allreduce(&m->wl, m->wc.tp, full, rows * chunk * m->T, TFB_SUM));
    return m->be->copy_2d(m->be->ctx, local, chunk, full + (size_t)m->t * chunk, chunk * m->T, rows, chunk);
}

/* ---- synchronised batch norm: per-rank (mean, var) of equal counts combined exactly, on the backend ---- */

static tfb_status sync_moments(resnet_model *m, rn_unit *u) {
    int k = u->cd.k;
    TFB_CHECK(m->be->copy_d2d(m->be->ctx, m->bn_mine, u->mean, (size_t)k * 4));
    TFB_CHECK(m->wc.group_sum(m->wc.group_sum_ctx, u->mean, k));
    TFB_CHECK(m->be->bn_moments_merge(m->be->ctx, u->mean, u->var, m->bn_mine, k, m->wc.dp_size));
    return m->wc.group_sum(m->wc.group_sum_ctx, u->var, k);
}

/* ---- forward ---- */

/* A unit's output as the batch-norm ops see it: (n, K, P*Q) in NCHW, (n*P*Q, K, 1) in NHWC. */
static void bn_view(const resnet_model *m, const rn_unit *u, int *rows, int *hw) {
    int pq = u->cd.p * u->cd.q;
    *rows = m->layout == TFB_NHWC ? u->cd.n * pq : u->cd.n;
    *hw = m->layout == TFB_NHWC ? 1 : pq;
}

/* The unit's input as its convolution reads it: x itself when already in the GEMM type, else cast into lp[0]. */
static tfb_status unit_operand(resnet_model *m, const rn_unit *u, const void **out) {
    if (u->x_type == m->wc.gemm_type) { *out = u->x; return TFB_OK; }
    return lp_act(m, 0, (const float *)u->x, unit_in(u), out);
}

/* x (of x_type): the unit's whole input (gathered under tensor parallelism). */
static tfb_status unit_fwd(resnet_model *m, rn_unit *u, const void *x, tfb_dtype x_type) {
    tfb_backend *be = m->be;
    const tfb_conv_desc *d = &u->cd;
    tfb_dtype zt = d->y_type;
    int rows, hw;
    const void *xin;
    bn_view(m, u, &rows, &hw);
    u->x = x;
    u->x_type = x_type;
    u->cd.dx_type = x_type; /* the input's gradient in the input's type */
    TFB_CHECK(unit_operand(m, u, &xin));
    TFB_CHECK(be->conv_fwd(be->ctx, d, u->z, xin, lp_weight(m, u->w)));
    TFB_CHECK(be->bn_moments(be->ctx, u->mean, u->var, u->z, zt, rows, d->k, hw));
    if (m->wc.sync_bn && m->wc.dp_size > 1) TFB_CHECK(sync_moments(m, u));
    TFB_CHECK(be->bn_apply(be->ctx, u->y, u->y_type, u->z, zt, u->mean, u->var, u->gamma, u->beta, rows, d->k, hw,
                           BN_EPS, u->relu));
    double count = (double)rows * hw * (m->wc.sync_bn ? m->wc.dp_size : 1);
    if (m->recomputing) return TFB_OK;
    return be->bn_running_update(be->ctx, u->run_mean, u->run_var, u->mean, u->var, d->k, BN_MOMENTUM, count);
}

/* y of a unit whose output is FP32 (the stem, every unit under tensor parallelism or in an FP32 network). */
static float *unit_y32(const rn_unit *u) { return u->y_type == TFB_F32 ? (float *)u->y : NULL; }

/* The whole tensor a unit reads, given this rank's channels of it. */
static tfb_status whole_input(resnet_model *m, rn_unit *u, float *gathered, const float *local, const float **x) {
    if (m->T == 1) { *x = local; return TFB_OK; }
    TFB_CHECK(gather_channels(m, gathered, local, u->cd.n, u->cd.c / m->T, unit_hw_in(u)));
    *x = gathered;
    return TFB_OK;
}

/* x (of x_type): this rank's channels of the block input. Under tensor parallelism every unit output is FP32 (it
 * is gathered); with one rank per tensor group each unit hands the next one, and the block's sum, y in the GEMM
 * type. */
static tfb_status block_fwd(resnet_model *m, rn_block *b, const void *x, tfb_dtype x_type) {
    const float *in;
    const void *whole = x; /* FP32 under tensor parallelism */
    if (m->T > 1) {
        TFB_CHECK(whole_input(m, &b->u[0], b->in_full, x, &in));
        whole = in;
    }
    TFB_CHECK(unit_fwd(m, &b->u[0], whole, x_type));
    for (int i = 1; i < b->n_units; i++) {
        const rn_unit *prev = &b->u[i - 1];
        if (m->T == 1) {
            TFB_CHECK(unit_fwd(m, &b->u[i], prev->y, prev->y_type));
            continue;
        }
        TFB_CHECK(whole_input(m, &b->u[i], b->u[i].xg, unit_y32(prev), &in));
        TFB_CHECK(unit_fwd(m, &b->u[i], in, TFB_F32));
    }
    const void *shortcut = x;
    tfb_dtype s_type = x_type;
    if (b->has_proj) {
        TFB_CHECK(unit_fwd(m, &b->proj, whole, x_type));
        shortcut = b->proj.y;
        s_type = b->proj.y_type;
    }
    const rn_unit *last = &b->u[b->n_units - 1];
    return m->be->add_relu(m->be->ctx, b->out, b->out_type, last->y, last->y_type, shortcut, s_type, unit_out(last),
                           1);
}

static tfb_status gemm(resnet_model *m, int ta, int tb, int M, int N, int K, const void *a, int lda, const void *b,
                       int ldb, float beta, float *c, int ldc) {
    tfb_gemm_desc d = {.trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .alpha = 1.0f, .beta = beta, .a = a,
                       .lda = lda, .b = b, .ldb = ldb, .c = c, .ldc = ldc, .batch = 1, .in_type = m->wc.gemm_type,
                       .tf32 = m->wc.tf32};
    return m->be->gemm(m->be->ctx, &d);
}

/* Loss of micro-batch mb into its loss log entry: one pass on all classes (sum 0), three with all-reduces on a
 * class shard (the row statistics, which the backward pass reads too). Nothing is read back here. */
static tfb_status head_loss(resnet_model *m, rn_net *net, int mb) {
    tfb_backend *be = m->be;
    const tfb_loss_log *log = &m->wl.loss_log;
    int n = m->n, K = m->classes_l;
    float *xmax = tfb_loss_log_rowmax(log, mb), *xsums = tfb_loss_log_rowsums(log, mb);
    if (!xmax) return TFB_ERR_STATE;
    if (m->T == 1) return be->xent_fwd(be->ctx, tfb_loss_log_sums(log, mb), net->logits, net->labels, n, K);
    TFB_CHECK(be->xent_shard_max(be->ctx, xmax, net->logits, n, K, m->classes_valid));
    TFB_CHECK(tfb_workload_tp_allreduce(&m->wl, m->wc.tp, xmax, (size_t)n, TFB_MAX));
    TFB_CHECK(be->xent_shard_sum(be->ctx, xsums, net->logits, net->labels, xmax, n, K, m->classes_valid, m->t * K));
    return tfb_workload_tp_allreduce(&m->wl, m->wc.tp, xsums, (size_t)2 * n, TFB_SUM);
}

static tfb_status head_fwd(resnet_model *m, rn_net *net, const float *x, int hw, int mb) {
    tfb_backend *be = m->be;
    int n = m->n, C = m->feat, K = m->classes_l;
    const void *pooled;
    TFB_CHECK(be->avgpool_fwd(be->ctx, net->pooled, x, n, C / m->T, hw, m->layout));
    const float *whole = net->pooled;
    if (m->T > 1) {
        TFB_CHECK(gather_channels(m, net->pooled_full, net->pooled, n, C / m->T, 1));
        whole = net->pooled_full;
    }
    TFB_CHECK(lp_act(m, 0, whole, (size_t)n * C, &pooled));
    TFB_CHECK(gemm(m, 0, 1, n, K, C, pooled, C, lp_weight(m, m->fc_w), C, 0.0f, net->logits, K));
    TFB_CHECK(be->bias_add(be->ctx, net->logits, m->fc_b, n, K));
    return head_loss(m, net, mb);
}

/* The stem's 3 x 3, stride 2 max pool of the stem convolution's output. */
static tfb_pool_desc stem_pool(const resnet_model *m, const rn_net *net) {
    const tfb_conv_desc *d = &net->stem.cd;
    tfb_pool_desc p = {.n = d->n, .c = d->k, .h = d->p, .w = d->q, .r = 3, .stride = 2, .pad = 1, .p = m->pool_p,
                       .q = m->pool_q, .layout = m->layout};
    return p;
}

/* The stem's output (pooled when the model pools it), of type net->stem.y_type. */
static const void *stem_fwd(resnet_model *m, rn_net *net, tfb_status *st) {
    *st = unit_fwd(m, &net->stem, net->images, TFB_F32);
    if (*st != TFB_OK || !m->cfg.stem_pool) return net->stem.y;
    tfb_pool_desc d = stem_pool(m, net);
    *st = m->be->maxpool_fwd(m->be->ctx, net->pooled_stem, net->argmax, net->stem.y, net->stem.y_type, &d);
    return net->pooled_stem;
}

static const rn_unit *last_unit(const rn_net *net, int b) {
    return &net->blocks[b].u[net->blocks[b].n_units - 1];
}

/* Output spatial size (p * q) of unit u_last-of-block b, or of the stem's pool when b < 0. */
static int block_hw(const resnet_model *m, const rn_net *net, int b) {
    if (b >= 0) return unit_hw_out(last_unit(net, b));
    return m->cfg.stem_pool ? m->pool_p * m->pool_q : unit_hw_out(&net->stem);
}

/* Checkpointing: the block's units write into (and backward reads from) the shared recompute buffers. */
static void use_recompute_buffers(resnet_model *m, rn_block *b) {
    for (int i = 0; i < 4; i++) {
        rn_unit *u = i < 3 ? &b->u[i] : &b->proj;
        if ((i < 3 && i >= b->n_units) || (i == 3 && !b->has_proj)) continue;
        u->z = m->rc[i].z;
        u->y = m->rc[i].y;
        u->mean = m->rc[i].mean;
        u->var = m->rc[i].var;
        u->xg = m->rc[i].xg;
    }
    b->in_full = m->rc_in_full;
}

static tfb_status resnet_forward(void *self, int step, int mb, int slot) {
    resnet_model *m = self;
    rn_net *net = &m->net[slot];
    tfb_status st = TFB_OK;
    (void)step;
    TFB_CHECK(tfb_workload_slot_take(&m->wl, slot, m->wc.slots, m->busy));
    double t0 = tfb_workload_unit_start(&m->wl, m->be);
    const void *x = has_stem(m) ? stem_fwd(m, net, &st) : net->x_in;
    tfb_dtype x_type = has_stem(m) ? net->stem.y_type : TFB_F32;
    TFB_CHECK(st);
    if (has_stem(m)) TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 0, t0));
    int b_last = m->u0 - 2; /* the block whose output x is (-1: the stem) */
    for (int b = 0; b < m->n_blocks; b++) {
        if (!has_block(m, b)) continue;
        t0 = tfb_workload_unit_start(&m->wl, m->be);
        if (m->wc.checkpointing) use_recompute_buffers(m, &net->blocks[b]);
        TFB_CHECK(block_fwd(m, &net->blocks[b], x, x_type));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 1 + b, t0));
        x = net->blocks[b].out;
        x_type = net->blocks[b].out_type;
        b_last = b;
    }
    if (!has_head(m)) return TFB_OK;
    t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (x_type != TFB_F32) return TFB_ERR_STATE; /* the stage's last block writes FP32 */
    TFB_CHECK(head_fwd(m, net, x, block_hw(m, net, b_last), mb));
    return tfb_workload_unit_stop(&m->wl, m->be, m->n_units - 1, t0);
}

/* ---- backward ---- */

/* dy (n, K, P, Q) of dy_type is the gradient of the unit's output (of its ReLU's output when relu: batch norm's
 * backward masks it); dx, when not NULL, receives the gradient of its whole input (this rank's share of the sum
 * under tensor parallelism), of the input's type (cd.dx_type). The convolution's output gradient dz is written in
 * the GEMM type by batch norm's backward (m->lp[1] for 16-bit, else m->dz), so no cast pass runs between them. */
static tfb_status unit_bwd(resnet_model *m, rn_unit *u, const void *dy, tfb_dtype dy_type, void *dx) {
    tfb_backend *be = m->be;
    const tfb_conv_desc *d = &u->cd;
    int rows, hw;
    const void *x;
    bn_view(m, u, &rows, &hw);
    float *sum_dy = m->bn_sums, *sum_dy_xhat = m->bn_sums + d->k;
    TFB_CHECK(be->bn_bwd_reduce(be->ctx, sum_dy, sum_dy_xhat, u->dgamma, u->dbeta, dy, dy_type, u->z, d->y_type,
                                u->mean, u->var, u->gamma, u->beta, rows, d->k, hw, BN_EPS, u->relu));
    int sync = m->wc.sync_bn && m->wc.dp_size > 1;
    if (sync) TFB_CHECK(m->wc.group_sum(m->wc.group_sum_ctx, m->bn_sums, 2 * d->k));
    double count = (double)rows * hw * (sync ? m->wc.dp_size : 1);
    tfb_dtype gt = m->wc.gemm_type;
    void *dz = gt == TFB_F32 ? (void *)m->dz : m->lp[1];
    TFB_CHECK(be->bn_bwd_apply(be->ctx, dz, gt, dy, dy_type, u->z, d->y_type, u->mean, u->var, u->gamma, u->beta,
                               sum_dy, sum_dy_xhat, count, rows, d->k, hw, BN_EPS, u->relu));
    TFB_CHECK(unit_operand(m, u, &x));
    TFB_CHECK(be->conv_bwd_filter(be->ctx, d, u->dw, x, dz));
    if (dx) TFB_CHECK(be->conv_bwd_data(be->ctx, d, dx, dz, lp_weight(m, u->w)));
    return TFB_OK;
}

/* Input gradient of unit u for this rank's channels, into local (of the input's type). */
static tfb_status unit_bwd_local(resnet_model *m, rn_unit *u, const void *dy, tfb_dtype dy_type, void *local) {
    if (m->T == 1) return unit_bwd(m, u, dy, dy_type, local);
    TFB_CHECK(unit_bwd(m, u, dy, dy_type, m->gfull[0]));
    return reduce_channels(m, local, m->gfull[0], u->cd.n, u->cd.c / m->T, unit_hw_in(u));
}

/* The block input's gradient g_in (of the input's type it) = a + b (b: the shortcut's gradient, NULL when already
 * in a), passed back through the ReLU that made the input when in_relu (the previous block's output) is given. */
static tfb_status block_input_grad(resnet_model *m, void *g_in, const void *a, const void *b, tfb_dtype b_type,
                                   const void *in_relu, tfb_dtype it, size_t n) {
    if (!b && !in_relu && a == g_in) return TFB_OK;
    return m->be->add_relu_bwd(m->be->ctx, g_in, it, a, it, b, b_type, in_relu, it, n);
}

/* g_out: the gradient of the block's output (of out_type; consumed), already passed back through the block's
 * ReLU when masked. g_in receives the gradient of the block's input, of the input's type; t1, t2 are work buffers.
 * Gradients keep the type of the tensor they belong to, so a 16-bit network's stay 16-bit inside the stage. */
static tfb_status block_bwd(resnet_model *m, rn_block *b, void *g_out, int masked, void *g_in, const void *in_relu,
                            void *t1, void *t2) {
    tfb_backend *be = m->be;
    rn_unit *u0 = &b->u[0];
    size_t n_out = unit_out(&b->u[b->n_units - 1]), n_in = unit_in(u0) / (size_t)m->T;
    tfb_dtype ot = b->out_type, dt = ot, it = u0->x_type;
    if (!masked) TFB_CHECK(be->add_relu_bwd(be->ctx, g_out, ot, g_out, ot, NULL, ot, b->out, ot, n_out));
    void *d = g_out, *next = t1;
    for (int i = b->n_units - 1; i >= 1; i--) {
        TFB_CHECK(unit_bwd_local(m, &b->u[i], d, dt, next));
        dt = b->u[i].x_type;
        d = next;
        next = d == t1 ? t2 : t1;
    }
    if (m->T == 1) {
        TFB_CHECK(unit_bwd(m, u0, d, dt, next));
        if (!b->has_proj) return block_input_grad(m, g_in, next, g_out, ot, in_relu, it, n_in);
        TFB_CHECK(unit_bwd(m, &b->proj, g_out, ot, g_in));
        return block_input_grad(m, g_in, g_in, next, it, in_relu, it, n_in);
    }
    TFB_CHECK(unit_bwd(m, u0, d, dt, m->gfull[0]));
    if (b->has_proj) {
        TFB_CHECK(unit_bwd(m, &b->proj, g_out, ot, m->gfull[1]));
        TFB_CHECK(be->residual_add(be->ctx, m->gfull[0], m->gfull[0], m->gfull[1], unit_in(u0)));
    }
    TFB_CHECK(reduce_channels(m, g_in, m->gfull[0], u0->cd.n, u0->cd.c / m->T, unit_hw_in(u0)));
    return block_input_grad(m, g_in, g_in, b->has_proj ? NULL : g_out, ot, in_relu, it, n_in);
}

static tfb_status head_bwd(resnet_model *m, rn_net *net, int mb, float loss_scale, float *g, int hw) {
    tfb_backend *be = m->be;
    const tfb_loss_log *log = &m->wl.loss_log;
    int n = m->n, C = m->feat, K = m->classes_l;
    const void *dl, *pooled;
    const float *whole = m->T > 1 ? net->pooled_full : net->pooled;
    if (m->T == 1) TFB_CHECK(be->xent_bwd(be->ctx, net->logits, net->logits, net->labels, n, K, loss_scale / n));
    else TFB_CHECK(be->xent_shard_bwd(be->ctx, net->logits, net->logits, net->labels, tfb_loss_log_rowmax(log, mb),
                                      tfb_loss_log_rowsums(log, mb), n, K, m->classes_valid, m->t * K,
                                      loss_scale / n));
    TFB_CHECK(lp_act(m, 0, net->logits, (size_t)n * K, &dl));
    TFB_CHECK(lp_act(m, 1, whole, (size_t)n * C, &pooled));
    TFB_CHECK(gemm(m, 1, 0, K, C, n, dl, K, pooled, C, 1.0f, m->dfc_w, C));
    TFB_CHECK(be->bias_grad(be->ctx, m->dfc_b, net->logits, n, K));
    if (m->T == 1) {
        TFB_CHECK(gemm(m, 0, 0, n, C, K, dl, K, lp_weight(m, m->fc_w), C, 0.0f, net->pooled, C));
    } else {
        TFB_CHECK(gemm(m, 0, 0, n, C, K, dl, K, lp_weight(m, m->fc_w), C, 0.0f, m->gfull[0], C));
        TFB_CHECK(reduce_channels(m, net->pooled, m->gfull[0], n, C / m->T, 1));
    }
    return be->avgpool_bwd(be->ctx, g, net->pooled, n, C / m->T, hw, m->layout);
}

/* g: the gradient of the stem's (pooled) output, of the stem's output type; work: room for the unpooled one,
 * which keeps that type */
static tfb_status stem_bwd(resnet_model *m, rn_net *net, const void *g, float *work) {
    tfb_dtype gt = net->stem.y_type;
    if (m->cfg.stem_pool) {
        tfb_pool_desc d = stem_pool(m, net);
        TFB_CHECK(m->be->maxpool_bwd(m->be->ctx, work, gt, g, gt, net->argmax, &d));
        g = work;
    }
    return unit_bwd(m, &net->stem, g, gt, NULL); /* the first layer needs no input gradient */
}

/* The input of block b (*type: its type): the previous block's output, the stem's, or what the previous stage
 * sent. */
static const void *block_input(resnet_model *m, rn_net *net, int b, tfb_dtype *type) {
    *type = TFB_F32;
    if (b > 0 && 1 + b > m->u0) {
        *type = net->blocks[b - 1].out_type;
        return net->blocks[b - 1].out;
    }
    if (!has_stem(m)) return net->x_in;
    *type = net->stem.y_type;
    return m->cfg.stem_pool ? net->pooled_stem : net->stem.y;
}

/* Checkpointing: block b's forward again from its kept input (same batch statistics, synchronised the same way;
 * running statistics untouched), so backward reads exactly the activations the forward made. */
static tfb_status recompute_block(resnet_model *m, rn_net *net, int b) {
    TFB_CHECK(tfb_workload_mark(&m->wl, TFB_MARK_RECOMPUTE_BEGIN));
    use_recompute_buffers(m, &net->blocks[b]);
    m->recomputing = 1;
    tfb_dtype x_type;
    const void *x = block_input(m, net, b, &x_type);
    tfb_status st = block_fwd(m, &net->blocks[b], x, x_type);
    m->recomputing = 0;
    TFB_CHECK(st);
    return tfb_workload_mark(&m->wl, TFB_MARK_RECOMPUTE_END);
}

static tfb_status resnet_backward(void *self, int step, int mb, int slot, float loss_scale, tfb_grad_ready_fn ready,
                                  void *rctx) {
    resnet_model *m = self;
    rn_net *net = &m->net[slot];
    (void)step;
    float *g_out = m->g[0], *g_in = m->g[1];
    int b_hi = stage_last_block(m);
    double t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (has_head(m)) {
        TFB_CHECK(head_bwd(m, net, mb, loss_scale, g_out, block_hw(m, net, b_hi)));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, m->n_units - 1, t0));
        TFB_CHECK(ready(rctx, m->fc_w_off));
    }
    for (int b = b_hi; b >= 0 && has_block(m, b); b--) {
        t0 = tfb_workload_unit_start(&m->wl, m->be);
        if (m->wc.checkpointing) TFB_CHECK(recompute_block(m, net, b));
        /* the previous block on this stage made b's input through a ReLU: b's input gradient passes back through
         * it, so that block's gradient arrives masked */
        const void *in_relu = b > 0 && has_block(m, b - 1) ? net->blocks[b - 1].out : NULL;
        TFB_CHECK(block_bwd(m, &net->blocks[b], g_out, b < b_hi, g_in, in_relu, m->g[2], m->g[3]));
        TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 1 + b, t0));
        TFB_CHECK(ready(rctx, net->blocks[b].u[0].w_off));
        float *t = g_out;
        g_out = g_in;
        g_in = t;
    }
    m->grad_in = g_out;
    t0 = tfb_workload_unit_start(&m->wl, m->be);
    if (has_stem(m)) TFB_CHECK(stem_bwd(m, net, g_out, g_in));
    if (has_stem(m)) TFB_CHECK(tfb_workload_unit_stop(&m->wl, m->be, 0, t0));
    tfb_workload_slot_give(&m->wl, slot, m->busy);
    return ready(rctx, 0);
}

static float *resnet_stage_input(void *self, int slot) {
    resnet_model *m = self;
    return has_stem(m) ? NULL : m->net[slot].x_in;
}

static const float *resnet_stage_output(void *self, int slot) {
    resnet_model *m = self;
    if (has_head(m)) return NULL;
    int b = m->u1 - 2;
    /* FP32: the stage's last block, or a stem no block follows on this stage */
    if (b < 0) return m->cfg.stem_pool ? m->net[slot].pooled_stem : m->net[slot].stem.y;
    return m->net[slot].blocks[b].out;
}

static float *resnet_grad_output(void *self) {
    resnet_model *m = self;
    return has_head(m) ? NULL : m->g[0];
}

static const float *resnet_grad_input(void *self) {
    resnet_model *m = self;
    return has_stem(m) ? NULL : m->grad_in;
}

static tfb_status resnet_dump_batch(void *self, const char *dir) {
    resnet_model *m = self;
    rn_net *net = &m->net[m->last_slot];
    char path[4096];
    if (has_stem(m)) {
        int hw = m->image * m->image;
        size_t per = (size_t)3 * hw;
        float *host = tfb_mempool_mirror(&m->pools[3], net->images);
        const float *nchw = net->images;
        if (m->layout == TFB_NHWC) { /* dumps are NCHW whatever the layout */
            TFB_CHECK(m->be->permute_0213(m->be->ctx, m->dz, TFB_F32, (size_t)hw, net->images, TFB_F32, 3, NULL, m->n,
                                          hw, 3, 1));
            nchw = m->dz;
        }
        TFB_CHECK(m->be->copy_d2h(m->be->ctx, host, nchw, (size_t)m->n * per * sizeof(float)));
        snprintf(path, sizeof path, "%s/batch.images.npy", dir);
        TFB_CHECK(tfb_npy_write_f32(path, host, m->n, (int)per));
    }
    if (!has_head(m)) return TFB_OK;
    snprintf(path, sizeof path, "%s/batch.labels.npy", dir);
    return tfb_npy_write_i32(path, tfb_mempool_mirror(&m->pools[3], net->labels), m->n, 1);
}

static void resnet_destroy(void *self) {
    resnet_model *m = self;
    for (int i = 0; i < 4; i++) tfb_mempool_release(&m->pools[i], m->be);
    free((void *)m->wl.params);
    for (int s = 0; m->net && s < m->wc.slots; s++) free(m->net[s].blocks);
    free(m->net);
    free(m->busy);
    free(m->wl.unit_s);
    tfb_loss_log_free(&m->wl.loss_log);
    free(m);
}

/* Elements of the stage's output (this rank's channels): the last block's output or the stem's. */
static size_t stage_out_elems(const resnet_model *m) {
    const rn_net *net = &m->net[0];
    int b = m->u1 - 2;
    if (b >= 0) return unit_out(last_unit(net, b));
    if (!m->cfg.stem_pool) return unit_out(&net->stem);
    return (size_t)m->n * net->stem.cd.k * m->pool_p * m->pool_q;
}

static void describe_stage(resnet_model *m) {
    char *d = m->wl.stage_desc;
    size_t len = sizeof m->wl.stage_desc;
    int n = snprintf(d, len, "%s", has_stem(m) ? "stem" : "");
    int b0 = m->u0 > 1 ? m->u0 - 1 : 0, b1 = m->u1 - 1 < m->n_blocks ? m->u1 - 1 : m->n_blocks;
    if (b1 > b0) n += snprintf(d + n, len - (size_t)n, "%sblocks %d-%d", n ? " + " : "", b0, b1 - 1);
    if (has_head(m)) snprintf(d + n, len - (size_t)n, "%shead", n ? " + " : "");
}

/* Forward multiply-adds per image of every residual block of the whole model. */
static double blocks_macs(const resnet_model *m) {
    double stem, macs = geometry_macs(&m->cfg, m->image, 0, &stem);
    return macs - stem - (double)m->feat * m->cfg.classes;
}

static void fill_workload(resnet_model *m) {
    m->wl.self = m;
    m->wl.flops_per_sample = resnet_train_flops(&m->cfg, m->image);
    m->wl.recompute_flops_per_sample = m->wc.checkpointing ? 2.0 * blocks_macs(m) : 0;
    m->wl.flops_convention = "training = 3 x forward minus the first convolution's backward-data; 1 multiply-add "
                             "= 2 FLOPs; convolutions and the FC layer";
    snprintf(m->wl.shape, sizeof m->wl.shape, "image %dx%d, %d classes, %s batch norm, %s", m->image, m->image,
             m->cfg.classes, m->wc.sync_bn ? "synchronised" : "per-rank", m->layout == TFB_NHWC ? "NHWC" : "NCHW");
    describe_stage(m);
    m->wl.layers_held = 0;
    for (int b = 0; b < m->n_blocks; b++) m->wl.layers_held += has_block(m, b);
    m->wl.model_params = resnet_param_count(&m->cfg);
    m->wl.optimizer = TFB_OPT_SGD;
    m->wl.default_lr = 0.1f;
    m->wl.tp_rank = m->t;
    m->wl.tp_size = m->T;
    m->wl.first_stage = has_stem(m);
    m->wl.last_stage = has_head(m);
    m->wl.in_elems = stage_in_elems(m);
    m->wl.out_elems = has_head(m) ? 0 : stage_out_elems(m);
    m->wl.load_batch = resnet_load_batch;
    m->wl.forward = resnet_forward;
    m->wl.backward = resnet_backward;
    m->wl.stage_input = resnet_stage_input;
    m->wl.stage_output = resnet_stage_output;
    m->wl.grad_output = resnet_grad_output;
    m->wl.grad_input = resnet_grad_input;
    m->wl.dump_batch = resnet_dump_batch;
    m->wl.destroy = resnet_destroy;
}

static void plan_pools(resnet_model *m) {
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.param_pool, m->wl.numel * 4);
    m->wl.mem.params = m->pools[0].bytes;
    tfb_mempool_add(&m->pools[0], (void **)&m->wl.grad_pool, m->wl.numel * 4);
    m->wl.mem.grads = m->pools[0].bytes - m->wl.mem.params;
    if (m->wc.gemm_type != TFB_F32) tfb_mempool_add(&m->pools[0], (void **)&m->wl.lowp_pool, m->wl.numel * 2);
    m->wl.mem.lowp = m->pools[0].bytes - m->wl.mem.params - m->wl.mem.grads;
    size_t before = m->pools[1].bytes;
    for (int s = 0; s < m->wc.slots; s++) plan_net(m, &m->net[s]);
    m->wl.slot_bytes = (m->pools[1].bytes - before) / (size_t)m->wc.slots;
    m->wl.mem.activations = m->pools[1].bytes - before;
    plan_shared(m);
    if (has_head(m)) { /* the loss log: per micro-batch the loss sum (or its row statistics on a class shard) */
        tfb_loss_log_plan(&m->wl.loss_log, &m->pools[1], m->T > 1 ? m->n : 0, 1, m->wc.microbatches);
        m->wl.loss_log.weight[0] = 1.0 / m->n;
    }
    m->wl.mem.workspace = m->pools[1].bytes - m->wl.mem.activations + m->pools[2].bytes;
    m->wl.mem.inputs = m->pools[3].bytes;
    m->wl.bytes_planned = m->pools[0].bytes + m->pools[1].bytes + m->pools[2].bytes + m->pools[3].bytes;
}

static tfb_status plan_all(resnet_model *m) {
    plan_pools(m);
    if (m->wc.plan_only) return TFB_OK;
    for (int i = 0; i < 4; i++) TFB_CHECK(tfb_mempool_commit(&m->pools[i], m->be, i == 3));
    TFB_CHECK(tfb_loss_log_host_alloc(&m->wl.loss_log));
    return TFB_OK;
}

static tfb_status alloc_nets(resnet_model *m) {
    m->net = calloc((size_t)m->wc.slots, sizeof *m->net);
    m->busy = calloc((size_t)m->wc.slots, 1);
    TFB_CHECK_ALLOC(m->net);
    TFB_CHECK_ALLOC(m->busy);
    for (int s = 0; s < m->wc.slots; s++) TFB_CHECK_ALLOC(m->net[s].blocks = calloc((size_t)m->n_blocks + 1, sizeof(rn_block)));
    return TFB_OK;
}

/* Stage placement and shard sizes; TFB_ERR_ARG when the layout does not fit the model. */
static tfb_status place(resnet_model *m) {
    const resnet_config *c = &m->cfg;
    int units = resnet_units(c), first[65], T = m->T;
    double costs[64];
    if (m->wc.pp_size > units || units > 64 || m->wc.pp_size > 64 || c->stem_width % T) return TFB_ERR_ARG;
    for (int s = 0; s < c->stages; s++)
        if (c->widths[s] % T) return TFB_ERR_ARG;
    if (m->wc.unit_costs) memcpy(costs, m->wc.unit_costs, sizeof(double) * (size_t)units);
    else TFB_CHECK(unit_costs(c, m->image, costs));
    TFB_CHECK(tfb_partition(costs, units, m->wc.pp_size, first));
    m->wl.n_units = units;
    if (m->wc.time_units) TFB_CHECK_ALLOC(m->wl.unit_s = calloc((size_t)units, sizeof(double)));
    m->u0 = first[m->wc.pp_rank];
    m->u1 = first[m->wc.pp_rank + 1];
    m->classes_l = (c->classes + T - 1) / T;
    m->classes_valid = c->classes - m->t * m->classes_l;
    if (m->classes_valid > m->classes_l) m->classes_valid = m->classes_l;
    if (m->classes_valid < 0) m->classes_valid = 0;
    return TFB_OK;
}

static tfb_status build_layout(resnet_model *m) {
    int nhwc = m->layout == TFB_NHWC;
    rn_layout lo = {.T = m->T, .nhwc = nhwc};
    for (int s = 0; s < m->wc.slots; s++) {
        lo = (rn_layout){.T = m->T, .nhwc = nhwc};
        build(m, &m->net[s], &lo);
    }
    tfb_param_info *table = calloc((size_t)lo.count + 1, sizeof *table);
    TFB_CHECK_ALLOC(table);
    lo = (rn_layout){.T = m->T, .nhwc = nhwc, .table = table};
    build(m, &m->net[0], &lo);
    m->wl.params = table;
    m->wl.n_params = lo.count;
    m->wl.numel = lo.offset;
    return TFB_OK;
}

tfb_status resnet_create(const resnet_config *c, const tfb_workload_config *wc, tfb_backend *be,
                         tfb_workload **out) {
    resnet_model *m = calloc(1, sizeof *m);
    TFB_CHECK_ALLOC(m);
    *m = (resnet_model){.cfg = *c, .wc = *wc, .be = be, .n = wc->local_batch, .image = wc->image_size};
    if (m->wc.slots < 1) m->wc.slots = 1;
    if (m->wc.pp_size < 1) m->wc.pp_size = 1;
    m->T = wc->tp ? wc->tp->size : 1;
    m->t = wc->tp ? wc->tp->rank : 0;
    m->layout = wc->layout;
    m->wl.gemm_type = wc->gemm_type;
    m->n_blocks = count_blocks(c);
    m->n_units = m->n_blocks + 2;
    tfb_status st = place(m);
    if (st == TFB_OK) st = alloc_nets(m);
    if (st == TFB_OK) st = build_layout(m);
    if (st == TFB_OK) st = plan_all(m);
    fill_workload(m);
    if (st == TFB_OK && m->wc.plan_only) {
        *out = &m->wl;
        return TFB_OK;
    }
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
