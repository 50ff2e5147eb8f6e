/* estimate.c — see estimate.h. Every figure comes from building the workload of each stage and tensor rank in
 * plan-only mode: the pools are sized exactly as a real run sizes them, then nothing is allocated. The optimizer
 * state and the pipeline's tied-gradient buffer are added here the way train.c allocates them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "estimate.h"
#include "bert.h"
#include "catalog.h"
#include "optim.h"
#include "csv.h"
#include "resnet.h"

static size_t aligned(size_t bytes) { return (bytes + 63) & ~(size_t)63; }
static double mib(size_t b) { return (double)b / 1048576.0; }

static tfb_status plan_rank(const tfb_options *o, const tfb_strategy *s, int pp_rank, int tp_rank,
                            tfb_estimate_device *d) {
    tfb_comm tp = {.rank = tp_rank, .size = s->tp};
    int slots = tfb_strategy_slots(s, pp_rank);
    if (slots < 1) return TFB_ERR_NOMEM;
    tfb_workload_config wc = tfb_strategy_workload_config(o, s, 0, pp_rank, slots);
    wc.tp = &tp;
    wc.plan_only = 1;
    tfb_workload *wl = NULL;
    tfb_status st = o->resnet ? resnet_create(resnet_config_find(o->model), &wc, NULL, &wl)
                              : bert_create(bert_config_find(o->model), &wc, NULL, &wl);
    if (st != TFB_OK) return st;
    const tfb_mem_plan *m = &wl->mem;
    *d = (tfb_estimate_device){.params = m->params, .grads = m->grads, .lowp = m->lowp,
                               .activations = m->activations, .workspace = m->workspace, .inputs = m->inputs,
                               .numel = wl->numel, .layers = wl->layers_held, .slots = slots, .pp_rank = pp_rank};
    d->optimizer = tfb_optim_plan_bytes(wl);
    d->comm = s->pp > 1 && wl->tied_numel ? aligned(wl->tied_numel * 4) : 0;
    d->total = wl->bytes_planned + d->optimizer + d->comm;
    wl->destroy(wl->self);
    return TFB_OK;
}

tfb_status tfb_estimate_layout(const tfb_options *o, const tfb_strategy *s, tfb_estimate_device *worst) {
    memset(worst, 0, sizeof *worst);
    for (int p = 0; p < s->pp; p++)
        for (int t = 0; t < s->tp; t++) {
            tfb_estimate_device d;
            TFB_TRY(plan_rank(o, s, p, t, &d));
            if (d.total > worst->total) *worst = d;
        }
    return TFB_OK;
}

/* ---- the command ---- */

typedef struct {
    tfb_options o;
    int ranks;
    char gpu[64];
    double reserve_gib;
    tfb_catalog cat;
} est_args;

/* Takes the estimate-only flags out of argv (in place); the rest goes to the run options parser. */
static tfb_status take_own_flags(int *argc, char **argv, est_args *a, char *err, size_t n) {
    int k = 1;
    a->ranks = 0;
    a->reserve_gib = 1.0;
    for (int i = 1; i < *argc; i++) {
        const char *f = argv[i];
        int is_ranks = strcmp(f, "--ranks") == 0, is_gpu = strcmp(f, "--gpu") == 0,
            is_res = strcmp(f, "--reserve") == 0;
        if (!is_ranks && !is_gpu && !is_res) { argv[k++] = argv[i]; continue; }
        if (i + 1 >= *argc) { snprintf(err, n, "%s: missing value", f); return TFB_ERR_ARG; }
        const char *v = argv[++i];
        char *end;
        if (is_gpu) snprintf(a->gpu, sizeof a->gpu, "%s", v);
        if (is_ranks && ((a->ranks = (int)strtol(v, &end, 10)) < 1 || *end || a->ranks > 65536)) {
            snprintf(err, n, "--ranks: '%s' is not a rank count from 1 to 65536", v);
            return TFB_ERR_ARG;
        }
        if (is_res && (tfb_csv_number(v, -1, 0, 1e6, &a->reserve_gib) != TFB_OK || a->reserve_gib < 0)) {
            snprintf(err, n, "--reserve: '%s' is not a size in GiB from 0 to 1e6", v);
            return TFB_ERR_ARG;
        }
    }
    *argc = k;
    return TFB_OK;
}

static const char *prec_label(const tfb_options *o) {
    return o->gemm_type == TFB_F16 ? "FP16" : o->gemm_type == TFB_BF16 ? "BF16" : o->tf32 ? "TF32" : "FP32";
}

static void print_header(const est_args *a) {
    const tfb_options *o = &a->o;
    printf("tfbench estimate: %s, %s GEMM inputs, %s; --batch %d (%s)", o->model, prec_label(o),
           o->resnet ? "SGD with momentum" : "AdamW", o->batch,
           o->strong ? "global batch, strong scaling" : "per rank, weak scaling");
    if (o->resnet) printf(", image %dx%d\n", o->image_size, o->image_size);
    else printf(", sequence %d, %d masked\n", o->seq_len, o->masked);
    printf("Figures are the pools tfbench allocates (built with the run's own plan, nothing allocated); a run "
           "records\nthe allocator's measured peak as memory_peak_bytes_per_rank. MiB = 2^20 bytes.\n");
}

static void print_row(const char *item, size_t bytes, const char *note) {
    printf("| %-32s | %10.1f | %-52s |\n", item, mib(bytes), note);
}

static void print_device(const tfb_options *o, const tfb_strategy *s, const tfb_estimate_device *d) {
    char note[128];
    int replica = s->global_batch / s->dp;
    printf("\nlayout %s: dp %d x tp %d x pp %d = %d rank%s; %d micro-batch%s of %d per replica; worst device: "
           "stage %d\n", s->name, s->dp, s->tp, s->pp, s->dp * s->tp * s->pp, s->dp * s->tp * s->pp > 1 ? "s" : "",
           s->microbatches, s->microbatches > 1 ? "es" : "", replica / s->microbatches, d->pp_rank);
    printf("| %-32s | %10s | %-52s |\n|%s|%s|%s|\n", "per device", "MiB", "what",
           "----------------------------------", "------------", "------------------------------------------------------");
    snprintf(note, sizeof note, "%.2f M parameters held, FP32", d->numel / 1e6);
    print_row("parameters (master weights)", d->params, note);
    print_row("gradients", d->grads, "FP32, accumulated over micro-batches");
    if (d->lowp) print_row("16-bit weight copies", d->lowp, "GEMM operands, refreshed after each update");
    print_row("optimizer state", d->optimizer, o->resnet ? "SGD momentum, FP32" : "AdamW m and v, FP32");
    snprintf(note, sizeof note, "%d activation set%s, %d %s held%s; %s", d->slots, d->slots > 1 ? "s" : "",
             d->layers, o->resnet ? "blocks" : "layers", o->checkpointing ? " (their inputs only)" : "",
             o->gemm_type == TFB_F32 ? "FP32" : "16-bit and FP32");
    print_row("activations saved for backward", d->activations, note);
    print_row("workspace", d->workspace, o->checkpointing ? "backward temporaries, casts, statistics, recompute"
                                                          : "backward temporaries, 16-bit casts, statistics");
    print_row("inputs", d->inputs, "one batch per activation set");
    if (d->comm) print_row("communication buffers", d->comm, "tied-embedding gradient from the other end");
    print_row("total", d->total, "");
}

static void print_csv_header(void) {
    printf("layout,ranks,dp,tp,pp,microbatches,worst_stage,params_bytes,grads_bytes,lowp_bytes,optimizer_bytes,"
           "activations_bytes,workspace_bytes,inputs_bytes,comm_bytes,total_bytes\n");
}

static void print_csv(const tfb_strategy *s, const tfb_estimate_device *d) {
    printf("%s,%d,%d,%d,%d,%d,%d,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu\n", s->name, s->dp * s->tp * s->pp, s->dp,
           s->tp, s->pp, s->microbatches, d->pp_rank, d->params, d->grads, d->lowp, d->optimizer, d->activations,
           d->workspace, d->inputs, d->comm, d->total);
}

static void print_rules(const tfb_options *o, const tfb_strategy *s, const tfb_estimate_device *d) {
    const bert_config *c = bert_config_find(o->model);
    size_t state = d->params + d->grads + d->lowp + d->optimizer;
    double sq = o->seq_len, b = (double)s->global_batch / s->dp / s->microbatches, h = c->hidden, a = c->heads,
           t = s->tp, per = d->layers * (double)d->slots;
    double kor = t > 1 ? sq * b * h * (10 + 24 / t + 5 * a * sq / (h * t)) : sq * b * h * (34 + 5 * a * sq / h);
    printf("rules of thumb beside it (formulas.md):\n");
    printf("  weights + gradients + optimizer: tfbench %.1f bytes/parameter = %.1f MiB\n    (FP32 masters, "
           "gradients and moments%s); ZeRO (arXiv 1910.02054) 16 bytes/parameter = %.1f MiB\n",
           (double)state / (double)d->numel, mib(state), d->lowp ? ", 16-bit copies: Megatron's 18" : "",
           16.0 * (double)d->numel / 1048576.0);
    int lowp = strcmp(o->precision, "fp16") == 0 || strcmp(o->precision, "bf16") == 0;
    printf("  activations of %d layer%s x %d set%s: tfbench %.1f MiB (%s, embeddings and heads of the stage "
           "included,\n    dropout masks not stored: redrawn from the counter-based RNG); Korthikanti et al. "
           "(arXiv 2205.05198,\n    16-bit with masks) %.1f MiB; with full recomputation %.1f MiB\n",
           d->layers, d->layers == 1 ? "" : "s", d->slots, d->slots == 1 ? "" : "s", mib(d->activations),
           lowp ? "16-bit where only GEMMs and their element-wise readers read them, else FP32" : "FP32",
           kor * per / 1048576.0, 2 * sq * b * h * per / 1048576.0);
}

/* Does --batch `batch` fit in `limit` bytes on every device of layout `base` (micro-batches kept)? */
static int batch_fits(const est_args *a, const tfb_strategy *base, int batch, double limit, size_t *total) {
    tfb_options o = a->o;
    tfb_strategy s = *base;
    o.batch = batch;
    s.global_batch = o.strong ? batch : batch * s.dp * s.tp * s.pp;
    if (!tfb_strategy_fits(&o, &s)) return -1;
    tfb_estimate_device d;
    if (tfb_estimate_layout(&o, &s, &d) != TFB_OK) return -1;
    *total = d.total;
    return (double)d.total <= limit;
}

/* The largest --batch (a multiple of the layout's granule) that fits; 0 when none does. */
static int largest_batch(const est_args *a, const tfb_strategy *s, double limit) {
    int step = a->o.strong ? s->dp * s->microbatches : s->microbatches, lo = 0, hi = 1;
    size_t total;
    while (hi * (long long)step <= (1 << 20) && batch_fits(a, s, hi * step, limit, &total) == 1) {
        lo = hi;
        hi *= 2;
    }
    if (hi * (long long)step > (1 << 20)) hi = (1 << 20) / step + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (batch_fits(a, s, mid * step, limit, &total) == 1) lo = mid;
        else hi = mid;
    }
    return lo * step;
}

int tfb_estimate_largest_batch(const tfb_options *o, const tfb_strategy *s, double limit_bytes) {
    est_args a;
    memset(&a, 0, sizeof a);
    a.o = *o;
    return largest_batch(&a, s, limit_bytes);
}

static int gpu_precision(const tfb_options *o) { return tfb_prec_of(o->gemm_type, o->tf32); }

static void print_catalog(const est_args *a, const tfb_strategy *list, int n, const tfb_gpu_spec *only) {
    double reserve = a->reserve_gib * 1073741824.0;
    printf("\nlargest --batch that fits (micro-batches as above; %.2f GiB per GPU reserved for the CUDA context, "
           "library\nworkspaces and NCCL buffers, which tfbench does not plan; 0: not even the smallest batch)\n",
           a->reserve_gib);
    printf("| %-22s | %6s | %-3s |", "GPU", "GB", "TC");
    for (int j = 0; j < n; j++)
        if (!list[j].skip[0]) printf(" %-9s %2d |", list[j].name, list[j].dp * list[j].tp * list[j].pp);
    printf("\n|------------------------|--------|-----|");
    for (int j = 0; j < n; j++)
        if (!list[j].skip[0]) printf("--------------|");
    printf("\n");
    for (int i = 0; i < a->cat.n_gpus; i++) {
        const tfb_gpu_spec *g = &a->cat.gpus[i];
        if (only && g != only) continue;
        const tfb_gpu_arch *arch = tfb_catalog_arch(&a->cat, g->cc);
        int p = gpu_precision(&a->o), tc = p != TFB_PREC_FP32 && arch && arch->tc[p];
        printf("| %-22s | %6.0f | %-3s |", g->name, g->memory_gb, p == TFB_PREC_FP32 ? "n/a" : tc ? "yes" : "NO");
        for (int j = 0; j < n; j++)
            if (!list[j].skip[0]) printf(" %12d |", largest_batch(a, &list[j], g->memory_gb * 1e9 - reserve));
        printf("\n");
    }
    printf("TC: the GPU has tensor cores for %s (FP32 runs on CUDA cores everywhere).\n", prec_label(&a->o));
}

static void print_gpu(const est_args *a, const tfb_gpu_spec *g) {
    const tfb_gpu_arch *arch = tfb_catalog_arch(&a->cat, g->cc);
    int p = gpu_precision(&a->o);
    char peak[48] = "none listed";
    if (g->peak[p] > 0) snprintf(peak, sizeof peak, "%.1f TFLOP/s", g->peak[p]);
    printf("\nGPU %s: %s, compute capability %d.%d, %.0f GB, dense %s peak %s; this binary holds %s\n", g->name,
           arch ? arch->arch : "unknown architecture", g->cc / 10, g->cc % 10, g->memory_gb, prec_label(&a->o),
           peak, tfb_catalog_binary_support(g->cc));
    if (p != TFB_PREC_FP32 && !(arch && arch->tc[p]))
        printf("warning: %s (%s) has no %s tensor cores: %s GEMMs would run far below the tensor-core rate, "
               "if at all\n", g->name, arch ? arch->arch : "?", prec_label(&a->o), prec_label(&a->o));
}

static void usage(void) {
    printf("usage: tfbench estimate [--model M --batch B --precision P --seq-len S ...] [--parallel data|tensor|"
           "pipeline --ranks N | --dp D --tp T --pp P] [--microbatches M --schedule gpipe|1f1b] [--gpu NAME] "
           "[--reserve GIB]\n  Memory per device for the layout (every layout of a comparison run on --ranks N "
           "when none is named),\n  the rules of thumb beside it, and the largest batch that fits each GPU of the "
           "catalog (data/gpus.csv).\n  The run options are those of tfbench --help.\n");
}

static int fail(const char *msg) {
    fprintf(stderr, "tfbench estimate: %s\n", msg);
    return 2;
}

static tfb_status check_args(est_args *a, const tfb_gpu_spec **gpu, char *err, size_t n) {
    const tfb_options *o = &a->o;
    int hybrid = strcmp(o->parallel, "hybrid") == 0, layout = (o->dp ? o->dp : 1) * (o->tp ? o->tp : 1) *
                                                                (o->pp ? o->pp : 1);
    if (hybrid && a->ranks && a->ranks != layout) {
        snprintf(err, n, "--ranks: %d, but --dp x --tp x --pp = %d", a->ranks, layout);
        return TFB_ERR_ARG;
    }
    if (!a->ranks) a->ranks = hybrid ? layout : 1;
    TFB_TRY(tfb_catalog_load(&a->cat, NULL, err, n));
    *gpu = NULL;
    if (a->gpu[0] && !(*gpu = tfb_catalog_find(&a->cat, a->gpu))) {
        snprintf(err, n, "--gpu: '%s' matches no GPU of the catalog (names as in its first column, e.g. 'H100 "
                 "SXM5')", a->gpu);
        return TFB_ERR_ARG;
    }
    return TFB_OK;
}

int tfb_estimate_main(int argc, char **argv) {
    static est_args a;
    static tfb_strategy list[TFB_MAX_STRATEGIES];
    char err[1024];
    const tfb_gpu_spec *gpu;
    if (take_own_flags(&argc, argv, &a, err, sizeof err) != TFB_OK) return fail(err);
    if (tfb_options_parse(argc, argv, &a.o, err, sizeof err) != TFB_OK) return fail(err);
    if (a.o.help) { usage(); return 0; }
    tfb_status st = check_args(&a, &gpu, err, sizeof err);
    if (st != TFB_OK) { tfb_catalog_free(&a.cat); return fail(err); }
    int n = tfb_strategy_list(&a.o, a.ranks, list, TFB_MAX_STRATEGIES), runnable = 0,
        csv = strcmp(a.o.format, "csv") == 0;
    if (csv) print_csv_header();
    else print_header(&a);
    for (int i = 0; i < n && st == TFB_OK; i++) {
        tfb_estimate_device d;
        if (list[i].skip[0]) {
            fprintf(csv ? stderr : stdout, "%slayout %s on %d ranks: cannot run: %s\n", csv ? "" : "\n",
                    list[i].name, list[i].dp * list[i].tp * list[i].pp, list[i].skip);
            continue;
        }
        if ((st = tfb_estimate_layout(&a.o, &list[i], &d)) != TFB_OK) break;
        if (csv) print_csv(&list[i], &d);
        else print_device(&a.o, &list[i], &d);
        if (!csv && !a.o.resnet) print_rules(&a.o, &list[i], &d);
        runnable++;
    }
    if (st == TFB_OK && runnable && !csv) print_catalog(&a, list, n, gpu);
    if (st == TFB_OK && gpu && !csv) print_gpu(&a, gpu);
    tfb_catalog_free(&a.cat);
    if (st != TFB_OK) { fprintf(stderr, "tfbench estimate: planning failed (status %d)\n", (int)st); return 1; }
    if (!runnable) return fail("no layout of this model fits the ranks given (see above)");
    return 0;
}
