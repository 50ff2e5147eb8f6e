/* record.h — everything one tfbench run measured and how, as plain data: filled by the run driver on rank 0,
 * printed by bench/report.c and written by results/results_json.c. Times are seconds; per-step arrays are the
 * global step (max over ranks) in trial-major order.
 */
#ifndef TFB_RECORD_H
#define TFB_RECORD_H
#include <stddef.h>
#include <stdint.h>

/* Phases of a step on one rank: forward and backward compute (tensor-parallel collectives included), time blocked
 * in pipeline transfers, the data-parallel gradient wait (and the tied-embedding sum), the optimizer, and the rest
 * of the step outside those marks (host work the device does not hide, the closing sync). On every rank the phases
 * add up to the step. */
enum { TFB_PHASE_FWD, TFB_PHASE_BWD, TFB_PHASE_PIPE, TFB_PHASE_COMM, TFB_PHASE_OPT, TFB_PHASE_OTHER, TFB_N_PHASES };
enum { TFB_MAX_STAGES = 64 };

typedef struct {
    /* configuration */
    char started_at[32];         /* UTC, ISO 8601 */
    int argc;
    char **argv;
    const char *model, *precision, *parallel, *scaling, *backend;
    const char *device;         /* the GPU rank 0 ran on, as CUDA names it; NULL on the CPU backend */
    char *conv_algorithms;      /* rank 0's convolution shapes and the algorithms chosen, one per line (or NULL) */
    const char *strategy;        /* "single", "data", "tensor", "pipeline", "hybrid" */
    const char *skip;            /* comparison runs: why this layout did not run (NULL: it ran) */
    int dp, tp, pp;              /* layout: ranks = dp * tp * pp */
    int microbatches;            /* per step and replica */
    const char *schedule;        /* "gpipe", "1f1b" */
    const char *balance;         /* how pipeline stages were cut, in words */
    const char *binding;         /* the binding mode in force */
    const char *rank_binding;    /* [ranks * 64] each rank's CPU binding read back, as a list */
    const void *topology;        /* rank 0's tfb_topo (topology/topo.h), or NULL */
    const int *rank_node;        /* [ranks] each rank's node */
    int nodes;                   /* nodes of the whole job */
    int ranks, threads_per_rank, local_batch, global_batch, seq_len, masked, warmup, steps, trials;
    double dropout, lr, weight_decay, bucket_mb;
    const char *optimizer;       /* name and fixed hyper-parameters */
    char shape[96];              /* the workload's input shape in words */
    int image_size, sync_bn;     /* ResNet (image_size 0 for BERT) */
    const char *conv_layout;     /* ResNet: "nchw" or "nhwc" (static text) */
    const char *attention;       /* BERT: "unfused" or "fused" (static text) */
    uint64_t seed;
    size_t params;
    double flops_per_sample;
    double recompute_flops_per_sample; /* executed again under checkpointing (HFU counts it, MFU does not) */
    int checkpointing;
    const char *flops_convention;
    double peak_tflops;          /* sum over ranks */
    const char *peak_source;     /* "measured: ..." or "given with --peak-tflops" */
    size_t memory_bytes;         /* planned pools, the largest of any rank */
    size_t memory_peak_bytes;    /* the backend allocator's high-water mark during the configuration, largest rank */
    size_t memory_without_checkpointing_bytes; /* --checkpointing: the same plan without it, largest rank */
    double recompute_s_median;   /* --checkpointing: median seconds per step recomputing, max over ranks */
    int n_buckets;
    /* pipeline stages (index = stage) */
    char stage_desc[TFB_MAX_STAGES][96];
    double stage_bubble[TFB_MAX_STAGES];    /* median share of the step a stage spent blocked in transfers */
    int stage_peak_slots[TFB_MAX_STAGES];   /* most micro-batches of activations held at once (allocator record) */
    double stage_act_bytes[TFB_MAX_STAGES]; /* their bytes: peak slots x one micro-batch's activations */
    double bubble_predicted;     /* (P - 1) / (M + P - 1) */
    /* where the step went, mean over ranks of each rank's median share */
    double share_compute, share_comm, share_bubble;
    double bus_bytes_per_step;   /* collective bus bytes per step and rank (nccl-tests convention) */
    double coll_time_s;          /* median time per step waiting on collectives (TP + DP, exposed), max over ranks */
    /* measurements */
    double *step_s;              /* [trials * steps] */
    double *phase_s[TFB_N_PHASES]; /* [trials * steps] */
    double *window_s;            /* [trials] max over ranks */
    double *loss;                /* [warmup + trials * steps] mean over ranks */
    double *rank_step_median_s;  /* [ranks] each rank's own median step time */
    double *rank_step_s;         /* [ranks * trials * steps] every rank's own step times, rank-major */
    double max_rss_bytes;        /* largest resident set of any rank (getrusage) */
    int loss_scaled;             /* FP16 dynamic loss scaling in use */
    double loss_scale_final;
    int skipped_steps, backoffs;
    /* energy of the timed windows (bench/power.h), all nodes */
    double energy_j;             /* < 0: not measured (energy_why says why) */
    double energy_peak_w;        /* sum over nodes of each node's highest power over a 1 s sampling interval */
    int energy_samples;          /* 1 s sampling intervals inside the windows (fewest of any node) */
    double energy_clock_mhz;     /* GPU meters: mean SM clock over those intervals, averaged over GPUs (0: none) */
    long throttle_events;        /* CPU package throttle events during the windows; -1: not readable */
    char energy_source[96], energy_why[200];
    uint64_t *param_checksum;    /* [ranks] FNV-1a of the FP32 master weights after the run */
    int params_identical;
} tfb_run_record;

/* What the tables and the JSON report, derived from a record in one place. */
typedef struct {
    double samples;              /* timed samples, all trials, all ranks */
    double window_s;             /* sum of trial windows */
    double throughput;           /* samples / window_s */
    double trial_tput_mean, trial_tput_ci95; /* across trials; ci95 is NaN with one trial */
    double step_median, step_p5, step_p95, step_min, step_max;
    double phase_median[TFB_N_PHASES];
    double achieved_tflops, mfu;
    double hfu;                  /* (model + recomputed FLOPs) / peak */
} tfb_run_summary;

tfb_run_summary tfb_record_summarize(const tfb_run_record *r);
extern const char *const tfb_phase_names[TFB_N_PHASES];

#endif
