/* options.c — see options.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "bert.h"
#include "resnet.h"

typedef enum { OPT_INT, OPT_INT0, OPT_NUM, OPT_STR, OPT_FLAG } opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t field;          /* offsetof into tfb_options */
    size_t size;           /* for strings */
    const char *def;
    double lo, hi;         /* accepted range for numbers (inclusive) */
    const char *help;
} opt_spec;

#define F(x) offsetof(tfb_options, x), sizeof(((tfb_options *)0)->x)
static const opt_spec OPTS[] = {
    {"--model", OPT_STR, F(model), "bert-base", 0, 0, "bert-tiny|bert-mini|bert-small|bert-medium|bert-base|bert-large|resnet50|resnet18|resnet-tiny"},
    {"--precision", OPT_STR, F(precision), "fp32", 0, 0, "fp32|tf32|fp16|bf16 (GEMM and convolution inputs; FP32 master weights and accumulation; tf32: FP32 storage, inputs rounded to TF32 as tensor cores do)"},
    {"--batch", OPT_INT, F(batch), "8", 1, 1 << 20, "samples per rank (weak scaling) or global batch (strong)"},
    {"--seq-len", OPT_INT, F(seq_len), "128", 8, 512, "sequence length, 8..512"},
    {"--image-size", OPT_INT0, F(image_size), "0", 0, 4096, "ResNet input height and width, >= 32 (0: 224, 32 for resnet-tiny)"},
    {"--sync-bn", OPT_FLAG, F(sync_bn), "0", 0, 0, "ResNet: batch-norm statistics over all data-parallel ranks"},
    {"--conv-layout", OPT_STR, F(conv_layout), "auto", 0, 0, "ResNet activations: auto|nchw|nhwc (auto: nhwc for fp16 and bf16 on a GPU, where cuDNN's tensor-core convolutions want channels last; nchw otherwise)"},
    {"--attention", OPT_STR, F(attention), "unfused", 0, 0, "BERT attention: unfused (GEMMs and a softmax pass, the (s, s) probabilities in memory) or fused (one op per sample and head, recomputing them in backward; on a GPU FP16/BF16, head width 64, --seq-len a multiple of 64)"},
    {"--checkpointing", OPT_FLAG, F(checkpointing), "0", 0, 0, "activation checkpointing: keep each transformer layer's (ResNet block's) input, recompute it in backward"},
    {"--masked", OPT_INT0, F(masked), "0", 0, 512, "masked predictions per sequence (0: 20 per 128 tokens)"},
    {"--steps", OPT_INT, F(steps), "50", 1, 1 << 30, "timed steps per trial"},
    {"--warmup", OPT_INT0, F(warmup), "10", 0, 1 << 30, "untimed warm-up steps"},
    {"--trials", OPT_INT, F(trials), "1", 1, 1000, "timed windows (a confidence interval needs >= 2)"},
    {"--parallel", OPT_STR, F(parallel), "compare", 0, 0, "compare (each strategy at 1, 2, 4 .. ranks, one table)|data|tensor|pipeline"},
    {"--dp", OPT_INT0, F(dp), "0", 0, 1 << 20, "hybrid layout: data-parallel replicas (dp x tp x pp = ranks)"},
    {"--tp", OPT_INT0, F(tp), "0", 0, 1 << 20, "hybrid layout: tensor-parallel group size"},
    {"--pp", OPT_INT0, F(pp), "0", 0, 1 << 20, "hybrid layout: pipeline stages"},
    {"--microbatches", OPT_INT0, F(microbatches), "0", 0, 1 << 20, "micro-batches per step and replica, >= 1 (0: 4 on pipelines when the batch divides, else 1)"},
    {"--schedule", OPT_STR, F(schedule), "1f1b", 0, 0, "pipeline schedule: gpipe|1f1b"},
    {"--balance", OPT_STR, F(balance), "flops", 0, 0, "pipeline stages cut by flops (units' forward FLOPs) or time (measured over 3 untimed steps first)"},
    {"--scaling", OPT_STR, F(scaling), "weak", 0, 0, "weak: --batch per rank; strong: --batch is the global batch"},
    {"--bucket-mb", OPT_NUM, F(bucket_mb), "25", 0.001, 65536, "gradient all-reduce bucket size in MiB"},
    {"--dropout", OPT_NUM, F(dropout), "0.1", 0, 0.95, "dropout probability"},
    {"--lr", OPT_NUM, F(lr), "0", 0, 10, "learning rate, constant (0: 1e-4 AdamW for BERT, 0.1 SGD for ResNet)"},
    {"--weight-decay", OPT_NUM, F(weight_decay), "-1", -1, 1, "weight decay, not on biases or norms (-1: 0.01 BERT, 1e-4 ResNet)"},
    {"--seed", OPT_INT0, F(seed), "1234", 0, 9.2e18, "seed of initialisation, data and dropout"},
    {"--output", OPT_STR, F(output), "", 0, 0, "results JSON path (default results/runs/tfbench-MODEL-PRECISION-NrR-TIME.json)"},
    {"--log", OPT_STR, F(log), "", 0, 0, "JSON-lines event log: run start, configuration, steps, trials, run end"},
    {"--dump", OPT_STR, F(dump), "", 0, 0, "directory for .npy dumps of initial parameters, first batch, first gradients"},
    {"--device", OPT_STR, F(device), "auto", 0, 0, "auto|cpu|cuda (auto: a GPU when this build has CUDA and one is usable, else the CPU)"},
    {"--allow-shared-gpu", OPT_FLAG, F(allow_shared_gpu), "0", 0, 0, "let more ranks than GPUs share a node's GPUs"},
    {"--bind", OPT_STR, F(bind), "auto", 0, 0, "auto|gpu|core|numa|none: where each rank runs (auto: gpu with GPUs, else core)"},
    {"--threads", OPT_INT0, F(threads), "0", 0, 4096, "CPU threads per rank (0: cores available to the rank)"},
    {"--peak-tflops", OPT_NUM, F(peak_tflops), "0", 0, 1e6, "peak TFLOP/s per rank for MFU (0: measure with SGEMM)"},
    {"--fixed-batch", OPT_FLAG, F(fixed_batch), "0", 0, 0, "reuse the first batch every step"},
    {"--inject-overflow", OPT_INT0, F(inject_overflow), "-1", -1, 1 << 30, "test hook: put an inf into rank 0's gradients at this step"},
    {"--timeout", OPT_NUM, F(timeout), "300", 0, 1e7, "seconds without progress (a layer or block done, a phase begun) before the job is ended (0: never)"},
    {"--inject-nan", OPT_INT0, F(inject_nan), "-1", -1, 1 << 30, "test hook: put a NaN into the last rank's gradients at this step"},
    {"--inject-hang", OPT_INT0, F(inject_hang), "-1", -1, 1 << 30, "test hook: the last rank stalls at this step"},
    {"--inject-failure", OPT_INT0, F(inject_failure), "-1", -1, 1 << 30, "test hook: the last rank fails alone at this step"},
    {"--format", OPT_STR, F(format), "table", 0, 0, "table|csv: what is printed at the end (the JSON file holds everything)"},
    {"--progress", OPT_STR, F(progress), "auto", 0, 0, "auto|on|off: one updating line on stderr (auto: when a terminal)"},
    {"--loss-scale", OPT_NUM, F(loss_scale), "65536", 1, 1e30, "initial FP16 loss scale"},
    {"--loss-scale-window", OPT_INT, F(loss_scale_window), "2000", 1, 1 << 30, "clean FP16 steps before the scale doubles"},
    {"--help", OPT_FLAG, F(help), "0", 0, 0, "print this list"},
    {"--version", OPT_FLAG, F(version), "0", 0, 0, "print the version"},
};
#undef F
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static tfb_status set_number(const opt_spec *s, tfb_options *o, const char *v, char *err, size_t n) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    int integral = s->kind != OPT_NUM;
    if (*v == '\0' || *end != '\0' || errno || !isfinite(x) || (integral && x != floor(x))) {
        snprintf(err, n, "%s: expected %s, got '%s'", s->name, integral ? "an integer" : "a number", v);
        return TFB_ERR_ARG;
    }
    double lo = s->lo;
    if (x < lo || x > s->hi) {
        snprintf(err, n, "%s: %s is out of range (%.15g to %.15g)", s->name, v, lo, s->hi);
        return TFB_ERR_ARG;
    }
    char *dst = (char *)o + s->field;
    if (s->kind == OPT_NUM) {
        memcpy(dst, &x, sizeof x);
    } else if (s->size == sizeof(long long)) {
        long long ll = (long long)x; /* converted only for fields of this width: x is in range for them */
        memcpy(dst, &ll, sizeof ll);
    } else {
        int i = (int)x;
        memcpy(dst, &i, sizeof i);
    }
    return TFB_OK;
}

static tfb_status set_value(const opt_spec *s, tfb_options *o, const char *v, char *err, size_t n) {
    if (s->kind == OPT_FLAG) { *(int *)((char *)o + s->field) = v[0] == '1'; return TFB_OK; }
    if (s->kind != OPT_STR) return set_number(s, o, v, err, n);
    if (strlen(v) >= s->size) {
        snprintf(err, n, "%s: value is too long (at most %zu characters)", s->name, s->size - 1);
        return TFB_ERR_ARG;
    }
    memcpy((char *)o + s->field, v, strlen(v) + 1);
    return TFB_OK;
}

static tfb_status check_choice(const char *flag, const char *v, const char *const *ok, char *err, size_t n) {
    for (int i = 0; ok[i]; i++)
        if (strcmp(v, ok[i]) == 0) return TFB_OK;
    snprintf(err, n, "%s: unknown value '%s'", flag, v);
    return TFB_ERR_ARG;
}

/* --dp/--tp/--pp name an explicit layout; --parallel names a pure one; both at once is ambiguous. */
static tfb_status check_layout(tfb_options *o, char *err, size_t n) {
    int hybrid = o->dp || o->tp || o->pp;
    o->compare = !hybrid && strcmp(o->parallel, "compare") == 0;
    if (hybrid && strcmp(o->parallel, "compare") != 0) {
        snprintf(err, n, "--parallel: give either --parallel %s or --dp/--tp/--pp, not both", o->parallel);
        return TFB_ERR_ARG;
    }
    if (hybrid) snprintf(o->parallel, sizeof o->parallel, "hybrid");
    return TFB_OK;
}

static tfb_status check_options(tfb_options *o, char *err, size_t n) {
    static const char *const prec[] = {"fp32", "tf32", "fp16", "bf16", NULL}, *const par[] = {"compare", "data", "tensor", "pipeline", NULL},
                             *const sched[] = {"gpipe", "1f1b", NULL}, *const bal[] = {"flops", "time", NULL},
                             *const scal[] = {"weak", "strong", NULL}, *const dev[] = {"auto", "cpu", "cuda", NULL},
                             *const prog[] = {"auto", "on", "off", NULL},
                             *const fmt[] = {"table", "csv", NULL},
                             *const bind[] = {"auto", "gpu", "core", "numa", "none", NULL},
                             *const conv_layout[] = {"auto", "nchw", "nhwc", NULL},
                             *const attention[] = {"unfused", "fused", NULL};
    o->resnet = resnet_config_find(o->model) != NULL;
    if (!bert_config_find(o->model) && !o->resnet) {
        snprintf(err, n, "--model: unknown model '%s' (known: %s, %s)", o->model, bert_config_names(),
                 resnet_config_names());
        return TFB_ERR_ARG;
    }
    if (o->resnet && o->image_size == 0) o->image_size = resnet_config_find(o->model)->default_image;
    if (o->resnet && o->image_size < 32) {
        snprintf(err, n, "--image-size: %d is too small (at least 32)", o->image_size);
        return TFB_ERR_ARG;
    }
    if (o->weight_decay < 0) o->weight_decay = o->resnet ? 1e-4 : 0.01;
    TFB_TRY(check_choice("--precision", o->precision, prec, err, n));
    TFB_TRY(check_choice("--parallel", o->parallel, par, err, n));
    TFB_TRY(check_choice("--scaling", o->scaling, scal, err, n));
    TFB_TRY(check_choice("--schedule", o->schedule, sched, err, n));
    TFB_TRY(check_choice("--balance", o->balance, bal, err, n));
    TFB_TRY(check_layout(o, err, n));
    TFB_TRY(check_choice("--device", o->device, dev, err, n));
    TFB_TRY(check_choice("--progress", o->progress, prog, err, n));
    TFB_TRY(check_choice("--format", o->format, fmt, err, n));
    TFB_TRY(check_choice("--bind", o->bind, bind, err, n));
    TFB_TRY(check_choice("--conv-layout", o->conv_layout, conv_layout, err, n));
    if (!o->resnet && strcmp(o->conv_layout, "auto") != 0) {
        snprintf(err, n, "--conv-layout: applies to ResNet models, not %s", o->model);
        return TFB_ERR_ARG;
    }
    o->act_layout = strcmp(o->conv_layout, "nhwc") == 0 ? TFB_NHWC : TFB_NCHW;
    TFB_TRY(check_choice("--attention", o->attention, attention, err, n));
    o->fused_attention = strcmp(o->attention, "fused") == 0;
    if (o->resnet && o->fused_attention) {
        snprintf(err, n, "--attention: applies to BERT models, not %s", o->model);
        return TFB_ERR_ARG;
    }
    o->gemm_type = strcmp(o->precision, "fp16") == 0 ? TFB_F16 : strcmp(o->precision, "bf16") == 0 ? TFB_BF16 : TFB_F32;
    o->tf32 = strcmp(o->precision, "tf32") == 0;
    o->strong = strcmp(o->scaling, "strong") == 0;
    if (o->masked == 0) o->masked = (o->seq_len * 20 + 64) / 128;
    if (o->masked > o->seq_len - 1) {
        snprintf(err, n, "--masked: %d predictions do not fit a sequence of %d (at most %d)", o->masked, o->seq_len,
                 o->seq_len - 1);
        return TFB_ERR_ARG;
    }
    return TFB_OK;
}

static const opt_spec *find_opt(const char *name, size_t len) {
    for (int i = 0; i < N_OPTS; i++)
        if (strlen(OPTS[i].name) == len && strncmp(OPTS[i].name, name, len) == 0) return &OPTS[i];
    return NULL;
}

static void set_defaults(tfb_options *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < N_OPTS; i++) set_value(&OPTS[i], o, OPTS[i].def, NULL, 0);
}

tfb_status tfb_options_parse(int argc, char **argv, tfb_options *o, char *err, size_t n) {
    set_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const opt_spec *s = strncmp(arg, "--", 2) == 0 ? find_opt(arg, len) : NULL;
        if (!s) { snprintf(err, n, "%s: unknown option (see --help)", arg); return TFB_ERR_ARG; }
        const char *v = eq ? eq + 1 : NULL;
        if (s->kind == OPT_FLAG) {
            if (v) { snprintf(err, n, "%s: takes no value", s->name); return TFB_ERR_ARG; }
            v = "1";
        } else if (!v) {
            if (i + 1 >= argc) { snprintf(err, n, "%s: missing value", s->name); return TFB_ERR_ARG; }
            v = argv[++i];
        }
        TFB_TRY(set_value(s, o, v, err, n));
    }
    if (o->help || o->version) return TFB_OK;
    return check_options(o, err, n);
}

void tfb_options_resolve_backend(tfb_options *o, const char *backend) {
    if (strcmp(o->conv_layout, "auto") != 0) return;
    int gpu = strcmp(backend, "cpu") != 0;
    o->act_layout = o->resnet && gpu && o->gemm_type != TFB_F32 ? TFB_NHWC : TFB_NCHW;
}

void tfb_options_help(FILE *f) {
    fprintf(f, "usage: [mpirun -np N] tfbench [options]\n\noptions (default in brackets):\n");
    for (int i = 0; i < N_OPTS; i++) {
        const opt_spec *s = &OPTS[i];
        const char *meta = s->kind == OPT_FLAG ? "" : s->kind == OPT_STR ? " S" : s->kind == OPT_NUM ? " X" : " N";
        char left[48];
        snprintf(left, sizeof left, "%s%s", s->name, meta);
        fprintf(f, "  %-22s %s", left, s->help);
        if (s->kind != OPT_FLAG) fprintf(f, " [%s]", s->def[0] ? s->def : "none");
        fputc('\n', f);
    }
    fprintf(f, "\nsubcommands (each takes --help):\n"
               "  tfbench compare BASE.json NEW.json   regression check between two results files\n"
               "  tfbench report A.json B.json ...     one table across machines (prices, published figures)\n"
               "  tfbench estimate                     memory per device, largest batch per GPU\n"
               "  tfbench topo                         GPU matrix, links, CPU side, where ranks run\n"
               "  tfbench links                        point-to-point and collective bandwidth between ranks\n"
               "  tfbench doctor                       is this machine ready: launcher, MPI, binding, driver, GPUs\n");
}
