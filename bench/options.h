/* options.h — tfbench's command line: one table of options (name, kind, default, help), parsed strictly.
 *
 * Every rejection is one line naming the flag and the problem; the driver prints it and exits with status 2.
 * Checks that need the job's size (a global batch that does not divide) are in run.c. This file does no I/O
 * except --help.
 */
#ifndef TFB_OPTIONS_H
#define TFB_OPTIONS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "../kernels/backend.h"

typedef struct {
    char model[32];
    char precision[8];
    tfb_dtype gemm_type;
    int tf32;                       /* --precision tf32: FP32 GEMM/convolution inputs rounded to TF32 */
    int batch, seq_len, masked, steps, warmup, trials;
    int resnet;              /* the model is a ResNet */
    int image_size, sync_bn;
    char conv_layout[8];     /* auto, nchw, nhwc */
    tfb_layout act_layout;   /* ResNet activations: --conv-layout, auto resolved once the backend is known */
    int checkpointing;       /* recompute each layer (block) in backward from its saved input */
    char attention[8];       /* BERT: unfused, fused */
    int fused_attention;     /* --attention fused */
    char parallel[16];       /* compare (every strategy at every scale), data, tensor, pipeline */
    int dp, tp, pp;          /* an explicit hybrid layout (0: not given) */
    int microbatches;        /* 0: 4 on pipelines (fewer when the batch does not divide), else 1 */
    char schedule[8];        /* gpipe, 1f1b */
    char balance[8];         /* flops, time */
    int compare;             /* --parallel compare */
    char scaling[8];
    int strong;              /* --scaling strong */
    double bucket_mb;
    double dropout, lr, weight_decay; /* lr 0: the workload's default */
    long long seed;
    char output[4096];       /* empty: a name under results/runs/ */
    char dump[4096];         /* empty: no dump */
    char log[4096];          /* empty: no event log */
    char device[16];
    int allow_shared_gpu;
    char bind[8];            /* auto, gpu, core, numa, none */
    int threads;             /* 0: cores available to the rank */
    double peak_tflops;      /* 0: measure */
    int fixed_batch;
    int inject_overflow;     /* test hook: step whose gradients get an inf on rank 0 (-1: never) */
    int inject_failure;      /* test hook: step at which the last rank fails on its own (-1: never) */
    int inject_nan;          /* test hook: step whose gradients get a NaN on the last rank */
    int inject_hang;         /* test hook: step at which the last rank stalls */
    double timeout;          /* seconds without progress before the watchdog ends the job */
    char progress[8];        /* auto, on, off */
    char format[8];          /* table, csv: what rank 0 prints */
    double loss_scale;
    int loss_scale_window;
    int help, version;
} tfb_options;

/* Fills defaults, then parses argv[1..]. On a bad option returns TFB_ERR_ARG with a one-line message in err. */
tfb_status tfb_options_parse(int argc, char **argv, tfb_options *o, char *err, size_t err_len);
void tfb_options_help(FILE *f);
/* --conv-layout auto decided for the backend the rank opened ("cpu", "cuda"): NHWC for 16-bit ResNets on a GPU. */
void tfb_options_resolve_backend(tfb_options *o, const char *backend);

#endif
