/* run.c — see run.h. The timed loop synchronises the backend at every phase edge and reads only the monotonic
 * clock; everything else (reductions of the per-step arrays, checksums, output) happens after the windows.
 */

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "run.h"
#include "bert.h"
#include "resnet.h"
#include "clock.h"
#include "comm.h"
#include "ddp.h"
#include "npy.h"
#include "optim.h"
#include "options.h"
#include "peak.h"
#include "report.h"
#include "stats.h"
#include "watchdog.h"
#include "../results/event_log.h"
#include "../results/results_json.h"

typedef struct {
    tfb_options o;
    tfb_comm *world;
    tfb_backend *be;
    tfb_workload *wl;
    tfb_ddp ddp;
    tfb_optim opt;
    tfb_loss_scaler scaler;
    tfb_run_record rec;
    char output[4096];
    double *local_step, *local_phase[TFB_N_PHASES], *local_loss;
    double *step_dt, *step_end_unix;  /* every step's (warm-up included) time on this rank and wall-clock end */
    tfb_event_log *log;               /* --log, rank 0 only */
    int exit_step;                    /* TFB_TEST_EXIT_STEP test hook, read once (-1: none) */
    int progress;
} run_ctx;

/* Cores this rank may use: its affinity set, shared out when every local rank sees the same cores. */
static int threads_for_rank(int local_size) {
    cpu_set_t set;
    int n = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if ((long)n * local_size > online) n = n / local_size;
    return n < 1 ? 1 : n;
}

/* Rank 0 decides whether the output and dump paths work; every rank learns the verdict. */
static tfb_status check_paths(run_ctx *r, char *err, size_t len) {
    int bad = 0;
    if (r->world->rank == 0) {
        tfb_status st = TFB_OK;
        if (r->o.output[0]) snprintf(r->output, sizeof r->output, "%s", r->o.output);
        else if (tfb_results_default_path(r->o.model, r->o.precision, r->world->size, r->output, sizeof r->output)) {
            snprintf(err, len, "--output: cannot create results/runs/ in the working directory; name a file");
            st = TFB_ERR_ARG;
        }
        if (st == TFB_OK) st = tfb_results_check_path("--output", r->output, err, len);
        if (st == TFB_OK && r->o.log[0]) st = tfb_results_check_path("--log", r->o.log, err, len);
        if (st == TFB_OK && r->o.dump[0] && mkdir(r->o.dump, 0777) != 0 && access(r->o.dump, W_OK) != 0) {
            snprintf(err, len, "--dump: cannot create or write directory %.300s", r->o.dump);
            st = TFB_ERR_ARG;
        }
        bad = st != TFB_OK;
    }
    TFB_CHECK(r->world->bcast(r->world, &bad, 1, TFB_COMM_I32, 0));
    return bad ? TFB_ERR_ARG : TFB_OK;
}

static tfb_status check_job(run_ctx *r, char *err, size_t len) {
    int ranks = r->world->size;
    if (r->o.strong && r->o.batch % ranks != 0) {
        snprintf(err, len, "--batch: global batch %d does not divide over %d ranks (--scaling strong)", r->o.batch,
                 ranks);
        return TFB_ERR_ARG;
    }
    return check_paths(r, err, len);
}

static tfb_status group_sum(void *ctx, float *host, int n) {
    tfb_comm *c = ctx;
    return c->allreduce(c, host, (size_t)n, TFB_COMM_F32, TFB_SUM);
}

static tfb_status setup_workload(run_ctx *r) {
    int ranks = r->world->size;
    int local = r->o.strong ? r->o.batch / ranks : r->o.batch;
    tfb_workload_config wc = {.local_batch = local, .global_batch = local * ranks, .sample0 = local * r->world->rank,
                              .seq_len = r->o.seq_len, .masked = r->o.masked, .gemm_type = r->o.gemm_type,
                              .dropout = (float)r->o.dropout, .seed = (uint64_t)r->o.seed,
                              .fixed_batch = r->o.fixed_batch, .image_size = r->o.image_size,
                              .sync_bn = r->o.sync_bn, .dp_size = ranks, .group_sum = group_sum,
                              .group_sum_ctx = r->world};
    if (r->o.resnet) TFB_CHECK(resnet_create(resnet_config_find(r->o.model), &wc, r->be, &r->wl));
    else TFB_CHECK(bert_create(bert_config_find(r->o.model), &wc, r->be, &r->wl));
    if (r->o.lr == 0) r->o.lr = r->wl->default_lr;
    TFB_CHECK(r->world->bcast(r->world, r->wl->param_pool, r->wl->numel, TFB_COMM_F32, 0));
    TFB_CHECK(tfb_workload_refresh_lowp(r->wl, r->be));
    TFB_CHECK(tfb_ddp_init(&r->ddp, r->world, r->wl, r->o.bucket_mb));
    TFB_CHECK(tfb_optim_init(&r->opt, r->be, r->wl, (float)r->o.lr, (float)r->o.weight_decay));
    tfb_loss_scaler_init(&r->scaler, r->o.gemm_type == TFB_F16, r->o.loss_scale, r->o.loss_scale_window);
    r->rec.local_batch = local;
    r->rec.global_batch = local * ranks;
    r->rec.n_buckets = r->ddp.n_buckets;
    return TFB_OK;
}

static tfb_status measure_peak(run_ctx *r) {
    double mine = r->o.peak_tflops;
    if (mine <= 0) {
        TFB_CHECK(r->world->barrier(r->world));
        TFB_CHECK(tfb_peak_measure(r->be, 2048, 5, &mine));
        r->rec.peak_source = "measured: best FP32 2048^3 GEMM, all ranks";
    } else {
        r->rec.peak_source = "given with --peak-tflops per rank, summed";
    }
    TFB_CHECK(r->world->allreduce(r->world, &mine, 1, TFB_COMM_F64, TFB_SUM));
    r->rec.peak_tflops = mine;
    return TFB_OK;
}

/* Gradients are finite on every rank (after the test hooks, which poison one rank only). */
static tfb_status gradients_finite(run_ctx *r, int step, int *finite) {
    if (step == r->o.inject_overflow && r->world->rank == 0)
        TFB_CHECK(r->be->fill(r->be->ctx, r->wl->grad_pool, INFINITY, 1));
    if (step == r->o.inject_nan && r->world->rank == r->world->size - 1)
        TFB_CHECK(r->be->fill(r->be->ctx, r->wl->grad_pool + r->wl->numel / 2, NAN, 1));
    TFB_CHECK(r->be->check_finite(r->be->ctx, r->wl->grad_pool, r->wl->numel, finite));
    return r->world->allreduce(r->world, finite, 1, TFB_COMM_I32, TFB_MIN);
}

static tfb_status optimizer_phase(run_ctx *r, int step) {
    int finite = 0;
    TFB_CHECK(gradients_finite(r, step, &finite));
    if (!tfb_loss_scaler_update(&r->scaler, finite)) {
        if (r->scaler.enabled) return TFB_OK; /* step skipped, scale halved */
        if (r->world->rank == 0)
            fprintf(stderr, "tfbench: non-finite gradient at step %d (%s has no loss scaling); stopping\n", step,
                    r->o.precision);
        return TFB_ERR_NUMERIC;
    }
    return tfb_optim_step(&r->opt, (float)(1.0 / (r->scaler.scale * r->world->size)));
}

/* Test hooks that make the last rank fail, stall or exit at a step (--inject-failure, --inject-hang and the
 * TFB_TEST_EXIT_STEP environment variable). */
static tfb_status inject_faults(run_ctx *r, int step) {
    if (r->world->rank != r->world->size - 1) return TFB_OK;
    if (step == r->exit_step) {
        fprintf(stderr, "tfbench[rank %d]: exiting at step %d (TFB_TEST_EXIT_STEP)\n", r->world->rank, step);
        fflush(stderr);
        _exit(3);
    }
    if (step == r->o.inject_failure) {
        fprintf(stderr, "tfbench[rank %d]: injected failure at step %d (--inject-failure)\n", r->world->rank, step);
        return TFB_ERR_IO;
    }
    if (step == r->o.inject_hang) {
        tfb_watchdog_mark("a stall injected by --inject-hang", step);
        for (;;) pause();
    }
    return TFB_OK;
}

/* One training step; ph receives the phase times, *loss this rank's loss. */
static tfb_status train_step(run_ctx *r, int step, double ph[TFB_N_PHASES], double *loss) {
    tfb_backend *be = r->be;
    TFB_CHECK(inject_faults(r, step));
    double t0 = tfb_clock_s();
    tfb_watchdog_mark("forward", step);
    TFB_CHECK(r->wl->load_batch(r->wl->self, step));
    TFB_CHECK(r->wl->forward(r->wl->self, step, loss));
    TFB_CHECK(be->sync(be->ctx));
    double t1 = tfb_clock_s();
    tfb_watchdog_mark("backward", step);
    TFB_CHECK(r->wl->backward(r->wl->self, step, (float)r->scaler.scale, tfb_ddp_ready, &r->ddp));
    TFB_CHECK(be->sync(be->ctx));
    double t2 = tfb_clock_s();
    tfb_watchdog_mark("the gradient all-reduce", step);
    TFB_CHECK(tfb_ddp_finish(&r->ddp));
    double t3 = tfb_clock_s();
    tfb_watchdog_mark("the optimizer (finiteness all-reduce, update)", step);
    TFB_CHECK(optimizer_phase(r, step));
    TFB_CHECK(be->sync(be->ctx));
    double t4 = tfb_clock_s();
    ph[TFB_PHASE_FWD] = t1 - t0;
    ph[TFB_PHASE_BWD] = t2 - t1;
    ph[TFB_PHASE_COMM] = t3 - t2;
    ph[TFB_PHASE_OPT] = t4 - t3;
    return TFB_OK;
}

static void show_progress(run_ctx *r, int done, int total, double loss, double step_s) {
    if (!r->progress) return;
    double left = step_s * (total - done);
    fprintf(stderr, "\r  step %d/%d%s  loss %.4f  %.1f samples/s (this step, rank 0)  ~%.0f s left   ", done, total,
            done <= r->o.warmup ? " (warm-up)" : "", loss, r->rec.global_batch / step_s, left);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

static tfb_status dump_first_step(run_ctx *r);

/* Step events for steps [from, to) and, when trial >= 0, the trial's end: written after its window closed. */
static void log_steps(run_ctx *r, int from, int to, int trial) {
    if (!r->log) return;
    for (int step = from; step < to; step++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "step", step);
        cJSON_AddBoolToObject(f, "timed", step >= r->o.warmup);
        cJSON_AddNumberToObject(f, "rank0_step_time_s", r->step_dt[step]);
        cJSON_AddNumberToObject(f, "rank0_loss", r->local_loss[step]);
        tfb_event_log_emit(r->log, r->step_end_unix[step], "step", f);
    }
    if (trial < 0) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "trial", trial);
    cJSON_AddNumberToObject(f, "rank0_window_s", r->rec.window_s[trial]);
    tfb_event_log_emit(r->log, tfb_event_log_now(), "trial_end", f);
}

static tfb_status run_steps(run_ctx *r) {
    int W = r->o.warmup, S = r->o.steps, total = W + S * r->o.trials;
    double ph[TFB_N_PHASES];
    for (int step = 0; step < total; step++) {
        int timed = step - W, trial = timed >= 0 ? timed / S : -1;
        if (timed >= 0 && timed % S == 0) {
            tfb_watchdog_mark("the barrier before a timed window", step);
            TFB_CHECK(r->world->barrier(r->world));
            r->rec.window_s[trial] = tfb_clock_s();
        }
        double t0 = tfb_clock_s();
        TFB_CHECK(train_step(r, step, ph, &r->local_loss[step]));
        double dt = tfb_clock_s() - t0;
        r->step_dt[step] = dt;
        r->step_end_unix[step] = tfb_event_log_now();
        if (step == 0 && r->o.dump[0]) { /* untimed: a timed window that began at step 0 skips the dump */
            double d0 = tfb_clock_s();
            TFB_CHECK(dump_first_step(r));
            if (timed == 0) r->rec.window_s[0] += tfb_clock_s() - d0;
        }
        if (timed >= 0) {
            r->local_step[timed] = dt;
            for (int p = 0; p < TFB_N_PHASES; p++) r->local_phase[p][timed] = ph[p];
            if (timed % S == S - 1) {
                TFB_CHECK(r->be->sync(r->be->ctx));
                r->rec.window_s[trial] = tfb_clock_s() - r->rec.window_s[trial];
                log_steps(r, W + trial * S, step + 1, trial);
            }
        } else if (step == W - 1) {
            log_steps(r, 0, W, -1);
        }
        show_progress(r, step + 1, total, r->local_loss[step], dt);
    }
    return TFB_OK;
}

/* Every parameter (prefix "param") or gradient (prefix "grad", scaled to the average the optimizer applied) as .npy. */
static tfb_status dump_tensors(run_ctx *r, const float *pool, const char *prefix, double scale) {
    size_t n = r->wl->numel;
    float *host = malloc(n * sizeof *host);
    TFB_CHECK_ALLOC(host);
    tfb_status st = r->be->copy_d2h(r->be->ctx, host, pool, n * sizeof *host);
    for (size_t i = 0; i < n && scale != 1.0; i++) host[i] = (float)(host[i] * scale);
    for (int i = 0; i < r->wl->n_params && st == TFB_OK; i++) {
        const tfb_param_info *p = &r->wl->params[i];
        char path[8192];
        snprintf(path, sizeof path, "%s/%s.%s.npy", r->o.dump, prefix, p->name);
        st = tfb_npy_write_f32(path, host + p->offset, p->rows, p->cols);
    }
    free(host);
    return st;
}

static tfb_status dump_first_step(run_ctx *r) {
    if (r->world->rank != 0) return TFB_OK;
    TFB_CHECK(r->wl->dump_batch(r->wl->self, r->o.dump));
    return dump_tensors(r, r->wl->grad_pool, "grad", 1.0 / (r->scaler.scale * r->world->size));
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Each rank's checksum of its master weights, gathered; identical when all agree. */
static tfb_status checksum_params(run_ctx *r) {
    size_t n = r->wl->numel * sizeof(float);
    unsigned char *host = malloc(n);
    TFB_CHECK_ALLOC(host);
    tfb_status st = r->be->copy_d2h(r->be->ctx, host, r->wl->param_pool, n);
    uint64_t mine = fnv1a(host, n);
    free(host);
    TFB_CHECK(st);
    TFB_CHECK(r->world->allgather(r->world, &mine, r->rec.param_checksum, 1, TFB_COMM_U64));
    r->rec.params_identical = 1;
    for (int i = 1; i < r->world->size; i++)
        r->rec.params_identical &= r->rec.param_checksum[i] == r->rec.param_checksum[0];
    return TFB_OK;
}

/* Global figures: per-step and window times are the max over ranks, the loss the mean. */
static tfb_status reduce_measurements(run_ctx *r) {
    tfb_comm *w = r->world;
    size_t n = (size_t)r->o.trials * r->o.steps, nl = (size_t)r->o.warmup + n;
    double my_median = tfb_percentile(r->local_step, n, 50);
    memcpy(r->rec.step_s, r->local_step, n * sizeof(double));
    TFB_CHECK(w->allreduce(w, r->rec.step_s, n, TFB_COMM_F64, TFB_MAX));
    for (int p = 0; p < TFB_N_PHASES; p++) {
        memcpy(r->rec.phase_s[p], r->local_phase[p], n * sizeof(double));
        TFB_CHECK(w->allreduce(w, r->rec.phase_s[p], n, TFB_COMM_F64, TFB_MAX));
    }
    TFB_CHECK(w->allreduce(w, r->rec.window_s, (size_t)r->o.trials, TFB_COMM_F64, TFB_MAX));
    memcpy(r->rec.loss, r->local_loss, nl * sizeof(double));
    TFB_CHECK(w->allreduce(w, r->rec.loss, nl, TFB_COMM_F64, TFB_SUM));
    for (size_t i = 0; i < nl; i++) r->rec.loss[i] /= w->size;
    TFB_CHECK(w->allgather(w, &my_median, r->rec.rank_step_median_s, 1, TFB_COMM_F64));
    TFB_CHECK(w->allgather(w, r->local_step, r->rec.rank_step_s, n, TFB_COMM_F64));
    struct rusage ru;
    r->rec.max_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss * 1024.0 : 0.0;
    TFB_CHECK(w->allreduce(w, &r->rec.max_rss_bytes, 1, TFB_COMM_F64, TFB_MAX));
    return checksum_params(r);
}

static tfb_status alloc_arrays(run_ctx *r) {
    size_t n = (size_t)r->o.trials * r->o.steps, nl = (size_t)r->o.warmup + n, R = (size_t)r->world->size;
    double **arrays[] = {&r->local_step, &r->rec.step_s, &r->local_loss, &r->rec.loss, &r->rec.window_s,
                         &r->rec.rank_step_median_s};
    size_t sizes[] = {n, n, nl, nl, (size_t)r->o.trials, R};
    for (int i = 0; i < 6; i++) TFB_CHECK_ALLOC(*arrays[i] = calloc(sizes[i], sizeof(double)));
    for (int p = 0; p < TFB_N_PHASES; p++) {
        TFB_CHECK_ALLOC(r->local_phase[p] = calloc(n, sizeof(double)));
        TFB_CHECK_ALLOC(r->rec.phase_s[p] = calloc(n, sizeof(double)));
    }
    TFB_CHECK_ALLOC(r->rec.param_checksum = calloc(R, sizeof(uint64_t)));
    TFB_CHECK_ALLOC(r->rec.rank_step_s = calloc(R * n, sizeof(double)));
    TFB_CHECK_ALLOC(r->step_dt = calloc(nl, sizeof(double)));
    TFB_CHECK_ALLOC(r->step_end_unix = calloc(nl, sizeof(double)));
    return TFB_OK;
}

static void fill_record(run_ctx *r, int argc, char **argv) {
    tfb_run_record *c = &r->rec;
    const tfb_options *o = &r->o;
    time_t now = time(NULL);
    strftime(c->started_at, sizeof c->started_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    c->argc = argc;
    c->argv = argv;
    c->model = o->model;
    c->precision = o->precision;
    c->parallel = o->parallel;
    c->scaling = o->scaling;
    c->backend = r->be->name;
    c->ranks = r->world->size;
    c->threads_per_rank = r->be->threads;
    c->seq_len = o->seq_len;
    c->masked = o->masked;
    c->warmup = o->warmup;
    c->steps = o->steps;
    c->trials = o->trials;
    c->dropout = o->dropout;
    c->bucket_mb = o->bucket_mb;
    c->seed = (uint64_t)o->seed;
}

static void fill_results(run_ctx *r) {
    tfb_run_record *c = &r->rec;
    c->lr = r->o.lr;
    c->weight_decay = r->o.weight_decay;
    c->optimizer = r->wl->optimizer == TFB_OPT_SGD ? "SGD, momentum 0.9" : "AdamW, betas 0.9/0.999, eps 1e-6";
    c->shape = r->wl->shape;
    c->image_size = r->o.resnet ? r->o.image_size : 0;
    c->sync_bn = r->o.sync_bn;
    c->params = r->wl->numel;
    c->flops_per_sample = r->wl->flops_per_sample;
    c->flops_convention = r->wl->flops_convention;
    c->memory_bytes = r->wl->bytes_planned + r->opt.pool.bytes;
    c->loss_scaled = r->scaler.enabled;
    c->loss_scale_final = r->scaler.scale;
    c->skipped_steps = r->scaler.skipped;
    c->backoffs = r->scaler.backoffs;
}

/* Any timed window of zero length means the clock or the loop is broken: never report a rate from it. */
static tfb_status check_windows(run_ctx *r) {
    for (int t = 0; t < r->o.trials; t++) {
        if (r->rec.window_s[t] > 0) continue;
        if (r->world->rank == 0) fprintf(stderr, "tfbench: trial %d measured a window of %g s; no throughput\n", t,
                                         r->rec.window_s[t]);
        return TFB_ERR_NUMERIC;
    }
    return TFB_OK;
}

static tfb_status write_outputs(run_ctx *r) {
    if (r->world->rank != 0) return TFB_OK;
    tfb_report_print(stdout, &r->rec);
    if (tfb_results_write(r->output, &r->rec, tfb_comm_mpi_library()) == TFB_OK) {
        printf("results: %s\n", r->output);
        return TFB_OK;
    }
    /* Never lose a finished run: the working directory is the fallback (exit status 1 all the same). */
    char fallback[64];
    snprintf(fallback, sizeof fallback, "tfbench-results-%ld.json", (long)getpid());
    int saved = tfb_results_write(fallback, &r->rec, tfb_comm_mpi_library()) == TFB_OK;
    fprintf(stderr, "tfbench: could not write results to %s (%s); %s%s\n", r->output,
            access(r->output, F_OK) == 0 ? "write failed" : "its directory is gone or not writable",
            saved ? "saved them to ./" : "and the fallback in the working directory failed too", saved ? fallback : "");
    return TFB_ERR_IO;
}

static tfb_status open_log(run_ctx *r, int argc, char **argv) {
    if (!r->o.log[0] || r->world->rank != 0) return TFB_OK;
    if (tfb_event_log_open(r->o.log, &r->log) != TFB_OK) {
        fprintf(stderr, "tfbench: --log: cannot write %s\n", r->o.log);
        return TFB_ERR_IO;
    }
    cJSON *f = cJSON_CreateObject(), *args = cJSON_CreateArray();
    for (int i = 0; i < argc; i++) cJSON_AddItemToArray(args, cJSON_CreateString(argv[i]));
    cJSON_AddItemToObject(f, "command_line", args);
    cJSON_AddNumberToObject(f, "ranks", r->world->size);
    tfb_event_log_emit(r->log, tfb_event_log_now(), "run_start", f);
    return TFB_OK;
}

static void log_configuration(run_ctx *r) {
    if (!r->log) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "model", r->o.model);
    cJSON_AddStringToObject(f, "precision", r->o.precision);
    cJSON_AddStringToObject(f, "input", r->wl->shape);
    cJSON_AddNumberToObject(f, "global_batch", r->rec.global_batch);
    cJSON_AddNumberToObject(f, "parameters", (double)r->wl->numel);
    cJSON_AddNumberToObject(f, "warmup_steps", r->o.warmup);
    cJSON_AddNumberToObject(f, "timed_steps_per_trial", r->o.steps);
    cJSON_AddNumberToObject(f, "trials", r->o.trials);
    tfb_event_log_emit(r->log, tfb_event_log_now(), "configuration", f);
}

static void log_run_end(run_ctx *r, tfb_status st) {
    if (!r->log) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "status", st == TFB_OK ? "ok" : "failed");
    if (st == TFB_OK) {
        tfb_run_summary s = tfb_record_summarize(&r->rec);
        cJSON_AddNumberToObject(f, "throughput_samples_per_s", s.throughput);
        cJSON_AddStringToObject(f, "results", r->output);
    }
    tfb_event_log_emit(r->log, tfb_event_log_now(), "run_end", f);
    tfb_event_log_close(r->log);
    r->log = NULL;
}

static tfb_status run_job(run_ctx *r, int argc, char **argv) {
    int local_rank = 0, local_size = 1;
    char why[256];
    tfb_comm_mpi_local(&local_rank, &local_size);
    int threads = r->o.threads ? r->o.threads : threads_for_rank(local_size);
    if (tfb_backend_open(r->o.device, threads, &r->be, why, sizeof why) != TFB_OK) {
        if (r->world->rank == 0) fprintf(stderr, "tfbench: --device: %s\n", why);
        return TFB_ERR_ARG;
    }
    tfb_log_device = r->be->name;
    if (tfb_watchdog_start(r->world->rank, r->o.timeout) != 0) return TFB_ERR_NOMEM;
    fill_record(r, argc, argv);
    const char *exit_step = getenv("TFB_TEST_EXIT_STEP");
    r->exit_step = exit_step ? atoi(exit_step) : -1;
    TFB_CHECK(open_log(r, argc, argv));
    TFB_CHECK(measure_peak(r));
    TFB_CHECK(setup_workload(r));
    log_configuration(r);
    if (r->o.dump[0] && r->world->rank == 0) TFB_CHECK(dump_tensors(r, r->wl->param_pool, "param", 1.0));
    TFB_CHECK(alloc_arrays(r));
    r->progress = r->world->rank == 0 && (strcmp(r->o.progress, "on") == 0 ||
                                          (strcmp(r->o.progress, "auto") == 0 && isatty(2)));
    TFB_CHECK(run_steps(r));
    tfb_watchdog_mark("reducing the measurements across ranks", -1);
    TFB_CHECK(reduce_measurements(r));
    TFB_CHECK(check_windows(r));
    fill_results(r);
    return write_outputs(r);
}

static int exit_code(tfb_status st) { return st == TFB_OK ? 0 : st == TFB_ERR_ARG ? 2 : 1; }

/* Bad input and non-finite gradients are decided by every rank together; any other failure may be this rank's
 * alone while its peers wait in a collective, so it ends the whole job. */
static void end_if_rank_local(run_ctx *r, tfb_status st) {
    if (st == TFB_OK || st == TFB_ERR_ARG || st == TFB_ERR_NUMERIC || r->world->size == 1) return;
    fprintf(stderr, "tfbench: rank %d failed (status %d, see above); ending the job\n", r->world->rank, (int)st);
    fflush(stderr);
    r->world->abort(r->world, exit_code(st));
}

int tfb_run_main(int argc, char **argv) {
    static run_ctx r;
    char err[512] = "";
    if (tfb_comm_mpi_world(&argc, &argv, &r.world) != TFB_OK) return 1;
    tfb_log_rank = r.world->rank;
    tfb_status st = tfb_options_parse(argc, argv, &r.o, err, sizeof err);
    if (st == TFB_OK && (r.o.help || r.o.version)) {
        if (r.world->rank == 0) r.o.help ? tfb_options_help(stdout) : (void)printf("tfbench %s\n", TFB_VERSION);
    } else {
        if (st == TFB_OK) st = check_job(&r, err, sizeof err);
        if (st != TFB_OK && r.world->rank == 0 && err[0]) fprintf(stderr, "tfbench: %s\n", err);
        if (st == TFB_OK) st = run_job(&r, argc, argv);
        log_run_end(&r, st);
        end_if_rank_local(&r, st);
    }
    tfb_watchdog_stop();
    int code = exit_code(st), worst = code;
    if (r.world->allreduce(r.world, &worst, 1, TFB_COMM_I32, TFB_MAX) != TFB_OK) worst = code ? code : 1;
    tfb_comm_mpi_finalize();
    return worst;
}
