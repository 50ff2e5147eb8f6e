/* train.c — see train.h. The timed loop synchronises the backend at the end of every step and at the window edges,
 * and reads the monotonic clock there; phases inside a step are timed with the backend's marks (CUDA events on a
 * GPU, so the device is not stopped at each phase edge). Everything else (reductions of the per-step arrays,
 * checksums, dumps) happens outside the windows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "train.h"
#include "estimate.h"
#include "bert.h"
#include "clock.h"
#include "ddp.h"
#include "energy.h"
#include "grid.h"
#include "npy.h"
#include "optim.h"
#include "resnet.h"
#include "stats.h"
#include "watchdog.h"

enum { PIPE_TAG = 7 };

/* What the time between two marks was: a phase, and within it exposed tensor-group communication or
 * recomputation (reported apart as well). */
typedef struct {
    unsigned char phase, tp, recompute;
} step_interval;

typedef struct {
    const tfb_train_env *env;
    const tfb_strategy *s;
    tfb_grid lay;
    tfb_comm *job;
    tfb_workload *wl;
    tfb_ddp ddp;
    tfb_optim opt;
    tfb_loss_scaler scaler;
    tfb_run_record *rec;              /* world rank 0: the caller's; others: a private one for the arrays */
    tfb_power_meter *meter;           /* this node's energy counters while the steps run (NULL: not this rank) */
    tfb_op *ops;
    int n_ops, slots;
    step_interval *iv;                /* [cap_marks] what the interval that mark k ends was (k >= 1) */
    int n_marks, cap_marks;           /* marks recorded in this step, and reserved */
    int phase;                        /* the phase of the op running (the workload's marks take it) */
    int recomputing;                  /* between the workload's RECOMPUTE_BEGIN and _END marks */
    int *slot_of;                     /* [microbatches] activation set of each micro-batch, -1 when none */
    unsigned char *taken;             /* [slots] */
    float *tied_buf;                  /* (tied_numel) the other end's tied-embedding gradient */
    double *local_step, *local_phase[TFB_N_PHASES], *local_loss, *local_tp, *local_recompute;
    double *step_dt, *step_end_unix;
    double tp_bytes;                  /* last step's tensor-group bus bytes */
    int calibrating;                  /* --balance time: untimed steps measuring each unit, no test hooks */
    size_t mem_base;                  /* backend bytes held before the workload was built */
    size_t ckpt_saved;                /* --checkpointing: planned bytes it saves on this rank */
} train_ctx;

enum { CALIBRATION_STEPS = 3, MAX_UNITS = 256 };

static tfb_status group_sum(void *ctx, float *buf, int n) {
    tfb_comm *c = ctx;
    return c->allreduce(c, buf, (size_t)n, TFB_COMM_F32, TFB_SUM);
}

/* ---- set-up ---- */

/* Room for n marks: the workload's add to the schedule's (a few per layer under tensor parallelism or
 * checkpointing), so the first step grows the reserve and later ones find it. */
static tfb_status marks_grow(train_ctx *t, int n) {
    if (n <= t->cap_marks) return TFB_OK;
    step_interval *iv = realloc(t->iv, (size_t)n * sizeof *iv);
    TFB_CHECK_ALLOC(iv);
    t->iv = iv;
    t->cap_marks = n;
    return t->env->be->marks_reserve(t->env->be->ctx, n);
}

static tfb_status build_schedule(train_ctx *t) {
    const tfb_strategy *s = t->s;
    int M = s->microbatches;
    t->ops = calloc((size_t)8 * M + 8, sizeof *t->ops);
    t->slot_of = malloc((size_t)M * sizeof *t->slot_of);
    TFB_CHECK_ALLOC(t->ops);
    TFB_CHECK_ALLOC(t->slot_of);
    t->n_ops = tfb_schedule_build(s->schedule, s->pp, t->lay.pp_rank, M, t->ops);
    t->slots = tfb_schedule_in_flight(t->ops, t->n_ops);
    t->taken = calloc((size_t)t->slots, 1);
    TFB_CHECK_ALLOC(t->taken);
    for (int m = 0; m < M; m++) t->slot_of[m] = -1;
    return marks_grow(t, t->n_ops + 4);
}

/* plan_only: a workload sized as the run's but without checkpointing, allocating nothing (the saving's baseline). */
static tfb_status create_workload(train_ctx *t, const double *unit_costs, int plan_only, tfb_workload **out) {
    const tfb_options *o = t->env->o;
    tfb_workload_config wc = tfb_strategy_workload_config(o, t->s, t->lay.dp_rank, t->lay.pp_rank, t->slots);
    wc.group_sum = group_sum;
    wc.group_sum_ctx = t->lay.dp_comm;
    wc.tp = t->lay.tp_comm;
    wc.unit_costs = unit_costs;
    wc.time_units = t->calibrating && !plan_only;
    wc.plan_only = plan_only;
    if (plan_only) wc.checkpointing = 0;
    if (o->resnet) return resnet_create(resnet_config_find(o->model), &wc, t->env->be, out);
    return bert_create(bert_config_find(o->model), &wc, t->env->be, out);
}

static tfb_status plan_checkpointing_saving(train_ctx *t, const double *unit_costs) {
    tfb_workload *full = NULL;
    t->ckpt_saved = 0;
    if (!t->env->o->checkpointing) return TFB_OK;
    TFB_CHECK(create_workload(t, unit_costs, 1, &full));
    if (full->bytes_planned > t->wl->bytes_planned) t->ckpt_saved = full->bytes_planned - t->wl->bytes_planned;
    full->destroy(full->self);
    return TFB_OK;
}

static tfb_status setup_workload_pools(train_ctx *t, const double *unit_costs) {
    tfb_options *o = t->env->o;
    tfb_backend *be = t->env->be;
    be->mem_stats(be->ctx, &t->mem_base, NULL, 1);
    TFB_CHECK(create_workload(t, unit_costs, 0, &t->wl));
    TFB_CHECK(plan_checkpointing_saving(t, unit_costs));
    if (o->lr == 0) o->lr = t->wl->default_lr;
    TFB_CHECK(t->lay.dp_comm->bcast(t->lay.dp_comm, t->wl->param_pool, t->wl->numel, TFB_COMM_F32, 0));
    TFB_CHECK(tfb_workload_refresh_lowp(t->wl, be));
    TFB_CHECK(tfb_ddp_init(&t->ddp, t->lay.dp_comm, t->wl, o->bucket_mb));
    TFB_CHECK(tfb_optim_init(&t->opt, be, t->wl, (float)o->lr, (float)o->weight_decay));
    tfb_loss_scaler_init(&t->scaler, o->gemm_type == TFB_F16, o->loss_scale, o->loss_scale_window);
    if (t->s->pp > 1 && t->wl->tied_numel)
        TFB_CHECK_ALLOC(t->tied_buf = be->alloc(be->ctx, t->wl->tied_numel * sizeof(float)));
    return TFB_OK;
}

/* Out of device memory: the backend said what was asked and what is free; this adds the batch that would fit. */
static tfb_status setup_workload(train_ctx *t, const double *unit_costs) {
    tfb_status st = setup_workload_pools(t, unit_costs);
    const tfb_backend *be = t->env->be;
    if (st != TFB_ERR_NOMEM || !be->device_memory_bytes) return st;
    double limit = (double)be->device_memory_bytes - (double)be->device_reserved_bytes;
    int fits = tfb_estimate_largest_batch(t->env->o, t->s, limit);
    if (fits > 0)
        fprintf(stderr, "tfbench[rank %d]: %s: --batch %d fits in this device's %.2f GiB (%.2f GiB left for the "
                "context and libraries), by the plan `tfbench estimate` prints\n", t->env->world->rank, t->s->name,
                fits, be->device_memory_bytes / 1073741824.0, be->device_reserved_bytes / 1073741824.0);
    else
        fprintf(stderr, "tfbench[rank %d]: %s: not even the smallest batch fits in this device's %.2f GiB: use more "
                "devices (tensor or pipeline parallel) or --checkpointing\n", t->env->world->rank, t->s->name,
                be->device_memory_bytes / 1073741824.0);
    return st;
}

static void release_workload(train_ctx *t) {
    tfb_backend *be = t->env->be;
    if (t->wl) {
        tfb_ddp_free(&t->ddp);
        tfb_optim_free(&t->opt);
        t->wl->destroy(t->wl->self);
    }
    if (t->tied_buf) be->free(be->ctx, t->tied_buf);
    t->wl = NULL;
    t->tied_buf = NULL;
}

static tfb_status train_step(train_ctx *t, int step, double ph[TFB_N_PHASES], double *loss);

/* --balance time: a few untimed steps on the FLOP-balanced stages measure every unit's forward + backward time
 * (each stage its own units, the maximum over ranks); the stages are then cut again by those times and the
 * workload rebuilt from its initial state. */
static tfb_status calibrate(train_ctx *t, double *costs) {
    double ph[TFB_N_PHASES], loss;
    t->calibrating = 1;
    TFB_CHECK(setup_workload(t, NULL));
    for (int i = 0; i < CALIBRATION_STEPS; i++) TFB_CHECK(train_step(t, i, ph, &loss));
    int n = t->wl->n_units;
    if (n > MAX_UNITS) return TFB_ERR_STATE;
    for (int u = 0; u < n; u++) costs[u] = t->wl->unit_s[u];
    TFB_CHECK(t->job->allreduce(t->job, costs, (size_t)n, TFB_COMM_F64, TFB_MAX));
    release_workload(t);
    t->calibrating = 0;
    return TFB_OK;
}

static tfb_status setup(train_ctx *t) {
    double costs[MAX_UNITS];
    TFB_CHECK(build_schedule(t));
    if (t->s->pp == 1 || strcmp(t->env->o->balance, "time") != 0) return setup_workload(t, NULL);
    TFB_CHECK(calibrate(t, costs));
    return setup_workload(t, costs);
}

/* ---- one step ---- */

static tfb_status no_ready(void *ctx, size_t watermark) {
    (void)ctx;
    (void)watermark;
    return TFB_OK;
}

static int slot_for(train_ctx *t, int mb) {
    if (t->slot_of[mb] >= 0) return t->slot_of[mb];
    for (int i = 0; i < t->slots; i++)
        if (!t->taken[i]) { t->taken[i] = 1; return t->slot_of[mb] = i; }
    return -1;
}

static void slot_release(train_ctx *t, int mb) {
    if (t->slot_of[mb] >= 0) t->taken[t->slot_of[mb]] = 0;
    t->slot_of[mb] = -1;
}

/* A transfer between stages (sizes: in_elems towards the previous stage, out_elems towards the next). */
static tfb_status transfer(train_ctx *t, const tfb_op *op) {
    tfb_comm *pp = t->lay.pp_comm;
    tfb_workload *wl = t->wl;
    int prev = pp->rank - 1, next = pp->rank + 1, sl;
    switch (op->kind) {
    case TFB_OP_RECV_ACT:
        if ((sl = slot_for(t, op->mb)) < 0) return TFB_ERR_STATE;
        return pp->recv(pp, wl->stage_input(wl->self, sl), wl->in_elems, TFB_COMM_F32, prev, PIPE_TAG);
    case TFB_OP_SEND_ACT:
        return pp->send(pp, wl->stage_output(wl->self, t->slot_of[op->mb]), wl->out_elems, TFB_COMM_F32, next,
                        PIPE_TAG);
    case TFB_OP_RECV_GRAD:
        return pp->recv(pp, wl->grad_output(wl->self), wl->out_elems, TFB_COMM_F32, next, PIPE_TAG);
    case TFB_OP_SEND_GRAD:
        return pp->send(pp, wl->grad_input(wl->self), wl->in_elems, TFB_COMM_F32, prev, PIPE_TAG);
    case TFB_OP_SEND_ACT_RECV_GRAD:
        return pp->sendrecv(pp, wl->stage_output(wl->self, t->slot_of[op->mb]), wl->out_elems, next,
                            wl->grad_output(wl->self), wl->out_elems, next, TFB_COMM_F32, PIPE_TAG);
    case TFB_OP_SEND_GRAD_RECV_ACT:
        if ((sl = slot_for(t, op->mb2)) < 0) return TFB_ERR_STATE;
        return pp->sendrecv(pp, wl->grad_input(wl->self), wl->in_elems, prev, wl->stage_input(wl->self, sl),
                            wl->in_elems, prev, TFB_COMM_F32, PIPE_TAG);
    default:
        return TFB_ERR_STATE;
    }
}

static tfb_status compute(train_ctx *t, const tfb_op *op, int step) {
    tfb_workload *wl = t->wl;
    int M = t->s->microbatches, sl;
    if (op->kind == TFB_OP_FWD) {
        if ((sl = slot_for(t, op->mb)) < 0) return TFB_ERR_STATE;
        TFB_CHECK(wl->load_batch(wl->self, step, op->mb, sl));
        return wl->forward(wl->self, step, op->mb, sl);
    }
    int last = op->mb == M - 1; /* gradients are complete (for the data-parallel buckets) in the last backward */
    TFB_CHECK(wl->backward(wl->self, step, op->mb, t->slot_of[op->mb], (float)(t->scaler.scale / M),
                           last ? tfb_ddp_ready : no_ready, &t->ddp));
    slot_release(t, op->mb);
    return TFB_OK;
}

/* Phases are timed with the backend's marks (CUDA events on a GPU), not by stopping the device at every edge:
 * step_mark closes the interval since the previous mark as `iv`; step_phases adds the intervals up once the
 * step's closing sync has returned. The workload marks inside forward and backward too (workload_mark): around
 * the waits for tensor-group collectives and around recomputation, which are timed the same way. */
static tfb_status step_mark(train_ctx *t, step_interval iv) {
    tfb_backend *be = t->env->be;
    if (t->n_marks == t->cap_marks) TFB_CHECK(marks_grow(t, 2 * t->cap_marks));
    t->iv[t->n_marks] = iv;
    return be->mark(be->ctx, t->n_marks++);
}

static tfb_status phase_mark(train_ctx *t, int phase) { return step_mark(t, (step_interval){.phase = phase}); }

static tfb_status workload_mark(void *ctx, tfb_mark_kind kind) {
    train_ctx *t = ctx;
    step_interval iv = {.phase = t->phase, .tp = kind == TFB_MARK_TP, .recompute = t->recomputing};
    if (kind == TFB_MARK_RECOMPUTE_BEGIN) t->recomputing = 1;
    if (kind == TFB_MARK_RECOMPUTE_END) t->recomputing = 0;
    return step_mark(t, iv);
}

static tfb_status step_phases(train_ctx *t, double ph[TFB_N_PHASES]) {
    tfb_backend *be = t->env->be;
    memset(ph, 0, TFB_N_PHASES * sizeof *ph);
    t->wl->tp_comm_s = t->wl->recompute_s = 0;
    for (int k = 1; k < t->n_marks; k++) {
        double s = 0;
        TFB_CHECK(be->mark_seconds(be->ctx, k - 1, k, &s));
        ph[t->iv[k].phase] += s;
        if (t->iv[k].tp) t->wl->tp_comm_s += s;
        if (t->iv[k].recompute) t->wl->recompute_s += s;
    }
    return TFB_OK;
}

/* Walks the schedule, marking the end of each forward, backward and pipeline transfer. */
static tfb_status run_schedule(train_ctx *t, int step) {
    for (int i = 0; i < t->n_ops; i++) {
        const tfb_op *op = &t->ops[i];
        int is_compute = op->kind == TFB_OP_FWD || op->kind == TFB_OP_BWD;
        tfb_watchdog_mark(op->kind == TFB_OP_FWD ? "forward" : op->kind == TFB_OP_BWD ? "backward"
                                                                                        : "a pipeline transfer", step);
        t->phase = op->kind == TFB_OP_FWD ? TFB_PHASE_FWD : op->kind == TFB_OP_BWD ? TFB_PHASE_BWD : TFB_PHASE_PIPE;
        TFB_CHECK(is_compute ? compute(t, op, step) : transfer(t, op));
        TFB_CHECK(phase_mark(t, t->phase));
    }
    return TFB_OK;
}

/* The tied word embedding: the first and last stage each hold its gradient; both need the sum. */
static tfb_status tied_exchange(train_ctx *t) {
    if (!t->tied_buf) return TFB_OK;
    tfb_comm *pp = t->lay.pp_comm;
    tfb_backend *be = t->env->be;
    float *g = t->wl->grad_pool + t->wl->tied_offset;
    int peer = pp->rank == 0 ? pp->size - 1 : 0;
    size_t n = t->wl->tied_numel;
    TFB_CHECK(pp->sendrecv(pp, g, n, peer, t->tied_buf, n, peer, TFB_COMM_F32, PIPE_TAG + 1));
    return be->residual_add(be->ctx, g, g, t->tied_buf, n);
}

/* Gradients are finite on every rank (after the test hooks, which poison one rank only). */
static tfb_status gradients_finite(train_ctx *t, int step, int *finite) {
    tfb_backend *be = t->env->be;
    const tfb_options *o = t->env->o;
    if (step == o->inject_overflow && t->job->rank == 0 && !t->calibrating)
        TFB_CHECK(be->fill(be->ctx, t->wl->grad_pool, INFINITY, 1));
    if (step == o->inject_nan && t->job->rank == t->job->size - 1 && !t->calibrating)
        TFB_CHECK(be->fill(be->ctx, t->wl->grad_pool + t->wl->numel / 2, NAN, 1));
    TFB_CHECK(be->check_finite(be->ctx, t->wl->grad_pool, t->wl->numel, finite));
    return t->job->allreduce(t->job, finite, 1, TFB_COMM_I32, TFB_MIN);
}

static tfb_status optimizer_phase(train_ctx *t, int step) {
    int finite = 0;
    TFB_CHECK(gradients_finite(t, step, &finite));
    if (!tfb_loss_scaler_update(&t->scaler, finite)) {
        if (t->scaler.enabled) return TFB_OK; /* step skipped, scale halved */
        if (t->job->rank == 0)
            fprintf(stderr, "tfbench: non-finite gradient at step %d (%s has no loss scaling); stopping\n", step,
                    t->env->o->precision);
        return TFB_ERR_NUMERIC;
    }
    return tfb_optim_step(&t->opt, (float)(1.0 / (t->scaler.scale * t->s->dp)));
}

/* Test hooks that make the layout's last rank fail, stall or exit at a step (--inject-failure, --inject-hang and
 * the TFB_TEST_EXIT_STEP environment variable). */
static tfb_status inject_faults(train_ctx *t, int step) {
    const tfb_options *o = t->env->o;
    int me = t->env->world->rank;
    if (t->calibrating || me != t->env->world->size - 1) return TFB_OK; /* the job's last rank, when taking part */
    if (step == t->env->exit_step) {
        fprintf(stderr, "tfbench[rank %d]: exiting at step %d (TFB_TEST_EXIT_STEP)\n", me, step);
        fflush(stderr);
        _exit(3);
    }
    if (step == o->inject_failure) {
        fprintf(stderr, "tfbench[rank %d]: injected failure at step %d (--inject-failure)\n", me, step);
        return TFB_ERR_IO;
    }
    if (step == o->inject_hang) {
        tfb_watchdog_mark("a stall injected by --inject-hang", step);
        for (;;) pause();
    }
    return TFB_OK;
}

/* One training step; ph receives the phase times, *loss this rank's share of the step's mean loss. */
static tfb_status train_step(train_ctx *t, int step, double ph[TFB_N_PHASES], double *loss) {
    tfb_backend *be = t->env->be;
    double loss_sum = 0;
    TFB_CHECK(inject_faults(t, step));
    t->wl->tp_bus_bytes = 0;
    t->n_marks = t->recomputing = 0;
    TFB_CHECK(phase_mark(t, TFB_PHASE_FWD)); /* the step's start (mark 0 ends no interval) */
    TFB_CHECK(be->fill(be->ctx, t->wl->grad_pool, 0.0f, t->wl->numel));
    TFB_CHECK(phase_mark(t, TFB_PHASE_FWD)); /* zeroing the gradients counts with the forward phase */
    t->wl->mark = workload_mark;
    t->wl->mark_ctx = t;
    tfb_status st = run_schedule(t, step);
    t->wl->mark = NULL;
    TFB_CHECK(st);
    tfb_watchdog_mark("the gradient all-reduce", step);
    TFB_CHECK(tfb_ddp_finish(&t->ddp));
    TFB_CHECK(tied_exchange(t));
    TFB_CHECK(phase_mark(t, TFB_PHASE_COMM));
    /* the host's first wait in a step on a GPU: a collective or kernel queued earlier that never ends shows here */
    tfb_watchdog_mark("the optimizer (finiteness check and all-reduce, update; on a GPU the check waits for all the "
                      "device work and collectives the step queued)", step);
    TFB_CHECK(optimizer_phase(t, step));
    TFB_CHECK(phase_mark(t, TFB_PHASE_OPT));
    /* The next step's first micro-batch is made on the host while the device finishes this step. */
    if (t->wl->prepare_batch) TFB_CHECK(t->wl->prepare_batch(t->wl->self, step + 1, 0));
    TFB_CHECK(be->sync(be->ctx));
    TFB_CHECK(step_phases(t, ph));
    /* the micro-batches' losses, read in one copy once the device is idle (no forward pass waited for its own) */
    TFB_CHECK(tfb_loss_log_read(&t->wl->loss_log, be, t->s->microbatches, &loss_sum));
    t->tp_bytes = t->wl->tp_bus_bytes;
    int reports = t->wl->last_stage && t->lay.tp_rank == 0;
    *loss = reports ? loss_sum / t->s->microbatches : 0.0;
    return TFB_OK;
}

/* ---- the timed loop ---- */

static void show_progress(train_ctx *t, int done, int total, double loss, double step_s) {
    if (!t->env->progress) return;
    double left = step_s * (total - done);
    fprintf(stderr, "\r  %s %dx%dx%d  step %d/%d%s  loss %.4f  %.1f samples/s (this step, rank 0)  ~%.0f s left   ",
            t->s->name, t->s->dp, t->s->tp, t->s->pp, done, total, done <= t->env->o->warmup ? " (warm-up)" : "",
            loss, t->s->global_batch / step_s, left);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* Step events for steps [from, to) and, when trial >= 0, the trial's end: written after its window closed. */
static void log_steps(train_ctx *t, int from, int to, int trial) {
    tfb_event_log *log = t->env->log;
    if (!log) return;
    for (int step = from; step < to; step++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "step", step);
        cJSON_AddBoolToObject(f, "timed", step >= t->env->o->warmup);
        cJSON_AddNumberToObject(f, "rank0_step_time_s", t->step_dt[step]);
        tfb_event_log_emit(log, t->step_end_unix[step], "step", f);
    }
    if (trial < 0) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "trial", trial);
    cJSON_AddNumberToObject(f, "rank0_window_s", t->rec->window_s[trial]);
    tfb_event_log_emit(log, tfb_event_log_now(), "trial_end", f);
}

static tfb_status dump_step(train_ctx *t);

/* The step's time outside the marks (before the first, making the next batch where the device does not hide it,
 * the closing sync) becomes the phase "other", so that on every rank the phases add up to the step. */
static void keep_step(train_ctx *t, int timed, double *ph, double step_s) {
    if (timed < 0) return;
    double marked = 0;
    for (int p = 0; p < TFB_PHASE_OTHER; p++) marked += ph[p];
    ph[TFB_PHASE_OTHER] = step_s > marked ? step_s - marked : 0.0;
    for (int p = 0; p < TFB_N_PHASES; p++) t->local_phase[p][timed] = ph[p];
    t->local_tp[timed] = t->wl->tp_comm_s;
    t->local_recompute[timed] = t->wl->recompute_s;
}

/* The backend's kernel profile over the timed windows (a no-op unless a GPU backend was asked for one). */
static tfb_status trace(train_ctx *t, int on) {
    tfb_backend *be = t->env->be;
    return be->trace && !t->calibrating ? be->trace(be->ctx, on) : TFB_OK;
}

static tfb_status run_steps(train_ctx *t) {
    const tfb_options *o = t->env->o;
    int W = o->warmup, S = o->steps, total = W + S * o->trials;
    double ph[TFB_N_PHASES];
    for (int step = 0; step < total; step++) {
        int timed = step - W, trial = timed >= 0 ? timed / S : -1;
        if (timed >= 0 && timed % S == 0) {
            tfb_watchdog_mark("the barrier before a timed window", step);
            TFB_CHECK(t->job->barrier(t->job));
            if (trial == 0) TFB_CHECK(trace(t, 1));
            tfb_power_window_begin(t->meter);
            t->rec->window_s[trial] = tfb_clock_s();
        }
        double t0 = tfb_clock_s();
        TFB_CHECK(train_step(t, step, ph, &t->local_loss[step]));
        double dt = tfb_clock_s() - t0;
        t->step_dt[step] = dt;
        t->step_end_unix[step] = tfb_event_log_now();
        if (step == 0 && t->env->dump) { /* untimed: a timed window that began at step 0 skips the dump */
            double d0 = tfb_clock_s();
            TFB_CHECK(dump_step(t));
            if (timed == 0) t->rec->window_s[0] += tfb_clock_s() - d0;
        }
        keep_step(t, timed, ph, dt);
        if (timed >= 0) t->local_step[timed] = dt;
        if (timed >= 0 && timed % S == S - 1) {
            TFB_CHECK(t->env->be->sync(t->env->be->ctx));
            t->rec->window_s[trial] = tfb_clock_s() - t->rec->window_s[trial];
            tfb_power_window_end(t->meter);
            if (trial == o->trials - 1) TFB_CHECK(trace(t, 0));
            log_steps(t, W + trial * S, step + 1, trial);
        } else if (timed < 0 && step == W - 1) {
            log_steps(t, 0, W, -1);
        }
        show_progress(t, step + 1, total, t->local_loss[step], dt);
    }
    return TFB_OK;
}

/* ---- dumps: whole tensors, gathered over the tensor group, written by the replica-0 rank of tensor rank 0 ---- */

static tfb_status dump_one(train_ctx *t, const tfb_param_info *p, const float *local, float *gathered, float *full,
                           const char *prefix) {
    tfb_comm *tp = t->lay.tp_comm;
    TFB_CHECK(tp->allgather(tp, local, gathered, p->numel, TFB_COMM_F32));
    for (int r = 0; r < tp->size; r++) tfb_shard_insert(p, r, gathered + (size_t)r * p->numel, full);
    if (t->lay.dp_rank != 0 || tp->rank != 0 || p->tied_copy) return TFB_OK;
    TFB_CHECK(tfb_param_reorder(p, full, 0)); /* dumps hold the canonical order whatever the layout */
    char path[8192];
    snprintf(path, sizeof path, "%s/%s.%s.npy", t->env->o->dump, prefix, p->name);
    return tfb_npy_write_f32(path, full, p->full_rows, p->full_cols);
}

/* Every parameter (prefix "param") or gradient ("grad", scaled to the average the optimizer applies). */
static tfb_status dump_tensors(train_ctx *t, const float *pool, const char *prefix, double scale) {
    const tfb_workload *wl = t->wl;
    size_t n = wl->numel, biggest = 1;
    for (int i = 0; i < wl->n_params; i++)
        if ((size_t)wl->params[i].full_rows * wl->params[i].full_cols > biggest)
            biggest = (size_t)wl->params[i].full_rows * wl->params[i].full_cols;
    size_t per = 1;
    for (int i = 0; i < wl->n_params; i++) per = wl->params[i].numel > per ? wl->params[i].numel : per;
    float *host = malloc(n * sizeof *host + 4), *full = malloc(biggest * sizeof *full);
    float *gathered = malloc(per * (size_t)t->lay.tp_comm->size * sizeof *gathered);
    tfb_status st = host && full && gathered ? TFB_OK : TFB_ERR_NOMEM;
    if (st == TFB_OK) st = t->env->be->copy_d2h(t->env->be->ctx, host, pool, n * sizeof *host);
    for (size_t i = 0; i < n && scale != 1.0 && st == TFB_OK; i++) host[i] = (float)(host[i] * scale);
    for (int i = 0; i < wl->n_params && st == TFB_OK; i++)
        st = dump_one(t, &wl->params[i], host + wl->params[i].offset, gathered, full, prefix);
    free(host);
    free(full);
    free(gathered);
    return st;
}

static tfb_status dump_step(train_ctx *t) {
    if (t->lay.dp_rank == 0 && t->lay.tp_rank == 0) TFB_CHECK(t->wl->dump_batch(t->wl->self, t->env->o->dump));
    return dump_tensors(t, t->wl->grad_pool, "grad", 1.0 / (t->scaler.scale * t->s->dp));
}

/* ---- reductions over the layout's ranks ---- */

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Each rank's checksum of its master weights, gathered; replicas of the same shard must agree. */
static tfb_status checksum_params(train_ctx *t) {
    size_t n = t->wl->numel * sizeof(float);
    unsigned char *host = malloc(n + 1);
    TFB_CHECK_ALLOC(host);
    tfb_status st = t->env->be->copy_d2h(t->env->be->ctx, host, t->wl->param_pool, n);
    uint64_t mine = fnv1a(host, n);
    free(host);
    TFB_CHECK(st);
    TFB_CHECK(t->job->allgather(t->job, &mine, t->rec->param_checksum, 1, TFB_COMM_U64));
    int T = t->s->tp, D = t->s->dp;
    t->rec->params_identical = 1;
    for (int r = 0; r < t->job->size; r++) { /* rank r and the replica-0 rank of the same stage and tensor rank */
        int base = (r / (T * D)) * T * D + r % T;
        t->rec->params_identical &= t->rec->param_checksum[r] == t->rec->param_checksum[base];
    }
    return TFB_OK;
}

/* This rank's median share of the step spent computing, in exposed collectives and waiting on the pipeline. */
static void my_shares(train_ctx *t, size_t n, double share[3]) {
    double *x[3];
    for (int k = 0; k < 3; k++) x[k] = malloc(n * sizeof(double));
    for (size_t i = 0; i < n && x[0] && x[1] && x[2]; i++) {
        double step = t->local_step[i], tp = t->local_tp[i];
        double comm = tp + t->local_phase[TFB_PHASE_COMM][i], pipe = t->local_phase[TFB_PHASE_PIPE][i];
        x[0][i] = (step - comm - pipe) / step;
        x[1][i] = comm / step;
        x[2][i] = pipe / step;
    }
    for (int k = 0; k < 3; k++) {
        share[k] = x[0] && x[1] && x[2] ? tfb_percentile(x[k], n, 50) : NAN;
        free(x[k]);
    }
}

/* Per-stage figures, gathered over the layout's ranks and read from the replica-0, tensor-rank-0 rank of each. */
static tfb_status gather_stages(train_ctx *t, double bubble) {
    int R = t->job->size, D = t->s->dp, T = t->s->tp;
    double mine[3] = {bubble, (double)t->wl->slots_peak, (double)t->wl->slots_peak * (double)t->wl->slot_bytes};
    uint64_t desc[12] = {0};
    double *all = malloc((size_t)R * 3 * sizeof *all);
    uint64_t *descs = malloc((size_t)R * sizeof desc);
    memcpy(desc, t->wl->stage_desc, sizeof desc - 1);
    tfb_status st = all && descs ? t->job->allgather(t->job, mine, all, 3, TFB_COMM_F64) : TFB_ERR_NOMEM;
    if (st == TFB_OK) st = t->job->allgather(t->job, desc, descs, 12, TFB_COMM_U64);
    for (int p = 0; p < t->s->pp && p < TFB_MAX_STAGES && st == TFB_OK; p++) {
        int r = p * D * T;
        t->rec->stage_bubble[p] = all[3 * r];
        t->rec->stage_peak_slots[p] = (int)all[3 * r + 1];
        t->rec->stage_act_bytes[p] = all[3 * r + 2];
        memcpy(t->rec->stage_desc[p], descs + 12 * (size_t)r, sizeof t->rec->stage_desc[p] - 1);
    }
    free(all);
    free(descs);
    return st;
}

static tfb_status reduce_figures(train_ctx *t, size_t n) {
    tfb_comm *w = t->job;
    tfb_run_record *rec = t->rec;
    double share[3], coll, mem = (double)(t->wl->bytes_planned + t->opt.pool.bytes) +
                                 (t->tied_buf ? (double)t->wl->tied_numel * 4 : 0);
    my_shares(t, n, share);
    TFB_CHECK(gather_stages(t, share[2]));
    TFB_CHECK(w->allreduce(w, share, 3, TFB_COMM_F64, TFB_SUM));
    rec->share_compute = share[0] / w->size;
    rec->share_comm = share[1] / w->size;
    rec->share_bubble = share[2] / w->size;
    double *c = malloc(n * sizeof *c);
    TFB_CHECK_ALLOC(c);
    for (size_t i = 0; i < n; i++) c[i] = t->local_tp[i] + t->local_phase[TFB_PHASE_COMM][i];
    coll = tfb_percentile(c, n, 50);
    free(c);
    double D = t->s->dp, bytes = t->tp_bytes + (D > 1 ? 2.0 * (D - 1) / D * (double)t->wl->numel * 4 : 0);
    size_t peak;
    t->env->be->mem_stats(t->env->be->ctx, NULL, &peak, 0);
    double mx[6] = {coll, bytes, mem, (double)(peak - t->mem_base), mem + (double)t->ckpt_saved,
                    tfb_percentile(t->local_recompute, n, 50)};
    TFB_CHECK(w->allreduce(w, mx, 6, TFB_COMM_F64, TFB_MAX));
    rec->memory_without_checkpointing_bytes = (size_t)mx[4];
    rec->recompute_s_median = mx[5];
    rec->coll_time_s = mx[0];
    rec->bus_bytes_per_step = mx[1];
    rec->memory_bytes = (size_t)mx[2];
    rec->memory_peak_bytes = (size_t)mx[3];
    rec->bubble_predicted = tfb_schedule_bubble(t->s->pp, t->s->microbatches);
    return TFB_OK;
}

/* Global figures: per-step and window times are the max over ranks, the loss the replicas' mean. */
static tfb_status reduce_measurements(train_ctx *t) {
    tfb_comm *w = t->job;
    tfb_run_record *rec = t->rec;
    const tfb_options *o = t->env->o;
    size_t n = (size_t)o->trials * o->steps, nl = (size_t)o->warmup + n;
    double my_median = tfb_percentile(t->local_step, n, 50);
    memcpy(rec->step_s, t->local_step, n * sizeof(double));
    TFB_CHECK(w->allreduce(w, rec->step_s, n, TFB_COMM_F64, TFB_MAX));
    for (int p = 0; p < TFB_N_PHASES; p++) {
        memcpy(rec->phase_s[p], t->local_phase[p], n * sizeof(double));
        TFB_CHECK(w->allreduce(w, rec->phase_s[p], n, TFB_COMM_F64, TFB_MAX));
    }
    TFB_CHECK(w->allreduce(w, rec->window_s, (size_t)o->trials, TFB_COMM_F64, TFB_MAX));
    memcpy(rec->loss, t->local_loss, nl * sizeof(double));
    TFB_CHECK(w->allreduce(w, rec->loss, nl, TFB_COMM_F64, TFB_SUM));
    for (size_t i = 0; i < nl; i++) rec->loss[i] /= t->s->dp;
    TFB_CHECK(w->allgather(w, &my_median, rec->rank_step_median_s, 1, TFB_COMM_F64));
    TFB_CHECK(w->allgather(w, t->local_step, rec->rank_step_s, n, TFB_COMM_F64));
    struct rusage ru;
    rec->max_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss * 1024.0 : 0.0;
    TFB_CHECK(w->allreduce(w, &rec->max_rss_bytes, 1, TFB_COMM_F64, TFB_MAX));
    double peak = t->env->peak_tflops_rank;
    TFB_CHECK(w->allreduce(w, &peak, 1, TFB_COMM_F64, TFB_SUM));
    rec->peak_tflops = peak;
    TFB_CHECK(reduce_figures(t, n));
    return checksum_params(t);
}

/* ---- the record ---- */

static tfb_status alloc_arrays(train_ctx *t) {
    const tfb_options *o = t->env->o;
    tfb_run_record *rec = t->rec;
    size_t n = (size_t)o->trials * o->steps, nl = (size_t)o->warmup + n, R = (size_t)t->job->size;
    double **arrays[] = {&t->local_step, &rec->step_s, &t->local_loss, &rec->loss, &rec->window_s,
                         &rec->rank_step_median_s, &t->local_tp, &t->step_dt, &t->step_end_unix,
                         &t->local_recompute};
    size_t sizes[] = {n, n, nl, nl, (size_t)o->trials, R, n, nl, nl, n};
    for (int i = 0; i < 10; i++) TFB_CHECK_ALLOC(*arrays[i] = calloc(sizes[i], sizeof(double)));
    for (int p = 0; p < TFB_N_PHASES; p++) {
        TFB_CHECK_ALLOC(t->local_phase[p] = calloc(n, sizeof(double)));
        TFB_CHECK_ALLOC(rec->phase_s[p] = calloc(n, sizeof(double)));
    }
    TFB_CHECK_ALLOC(rec->param_checksum = calloc(R, sizeof(uint64_t)));
    TFB_CHECK_ALLOC(rec->rank_step_s = calloc(R * n, sizeof(double)));
    return TFB_OK;
}

void tfb_record_free(tfb_run_record *rec) {
    double **arrays[] = {&rec->step_s, &rec->loss, &rec->window_s, &rec->rank_step_median_s, &rec->rank_step_s};
    for (int i = 0; i < 5; i++) { free(*arrays[i]); *arrays[i] = NULL; }
    for (int p = 0; p < TFB_N_PHASES; p++) { free(rec->phase_s[p]); rec->phase_s[p] = NULL; }
    free(rec->param_checksum);
    rec->param_checksum = NULL;
    free(rec->conv_algorithms);
    rec->conv_algorithms = NULL;
}

/* Rank 0's backend's convolution algorithm choices, one line per shape (NULL when it makes none). */
static char *conv_algorithms_text(tfb_backend *be) {
    char line[512], *all = NULL;
    size_t used = 0;
    for (int i = 0; be->conv_plan_text && be->conv_plan_text(be->ctx, i, line, sizeof line); i++) {
        size_t n = strlen(line);
        char *grown = realloc(all, used + n + 2);
        if (!grown) break;
        all = grown;
        memcpy(all + used, line, n);
        used += n;
        all[used++] = '\n';
        all[used] = '\0';
    }
    return all;
}

static void fill_record(train_ctx *t) {
    tfb_run_record *c = t->rec;
    const tfb_options *o = t->env->o;
    const tfb_strategy *s = t->s;
    c->model = o->model;
    c->precision = o->precision;
    c->parallel = o->parallel;
    c->scaling = o->scaling;
    c->backend = t->env->be->name;
    c->device = t->env->be->device_name;
    c->strategy = s->name;
    c->dp = s->dp;
    c->tp = s->tp;
    c->pp = s->pp;
    c->microbatches = s->microbatches;
    c->schedule = tfb_schedule_name(s->schedule);
    c->balance = s->pp == 1 ? "none (one stage)" : strcmp(o->balance, "time") == 0
                 ? "time: each unit's forward + backward measured over 3 untimed steps" : "flops: each unit's forward FLOPs";
    c->ranks = t->job->size;
    c->threads_per_rank = t->env->be->threads;
    c->local_batch = s->global_batch / s->dp / s->microbatches;
    c->global_batch = s->global_batch;
    c->seq_len = o->seq_len;
    c->masked = o->masked;
    c->warmup = o->warmup;
    c->steps = o->steps;
    c->trials = o->trials;
    c->dropout = o->dropout;
    c->bucket_mb = o->bucket_mb;
    c->seed = (uint64_t)o->seed;
    c->lr = o->lr;
    c->weight_decay = o->weight_decay;
    c->peak_source = t->env->peak_source;
    c->n_buckets = t->ddp.n_buckets;
}

static void fill_results(train_ctx *t) {
    tfb_run_record *c = t->rec;
    c->optimizer = t->wl->optimizer == TFB_OPT_SGD ? "SGD, momentum 0.9" : "AdamW, betas 0.9/0.999, eps 1e-6";
    snprintf(c->shape, sizeof c->shape, "%s", t->wl->shape);
    c->image_size = t->env->o->resnet ? t->env->o->image_size : 0;
    c->sync_bn = t->env->o->sync_bn;
    c->conv_layout = t->env->o->act_layout == TFB_NHWC ? "nhwc" : "nchw";
    c->attention = t->env->o->fused_attention ? "fused" : "unfused";
    free(c->conv_algorithms);
    c->conv_algorithms = conv_algorithms_text(t->env->be);
    c->params = t->wl->model_params;
    c->flops_per_sample = t->wl->flops_per_sample;
    c->recompute_flops_per_sample = t->wl->recompute_flops_per_sample;
    c->checkpointing = t->env->o->checkpointing;
    c->flops_convention = t->wl->flops_convention;
    c->loss_scaled = t->scaler.enabled;
    c->loss_scale_final = t->scaler.scale;
    c->skipped_steps = t->scaler.skipped;
    c->backoffs = t->scaler.backoffs;
}

static void log_configuration(train_ctx *t) {
    if (!t->env->log) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "model", t->env->o->model);
    cJSON_AddStringToObject(f, "precision", t->env->o->precision);
    cJSON_AddStringToObject(f, "strategy", t->s->name);
    cJSON_AddNumberToObject(f, "data_parallel", t->s->dp);
    cJSON_AddNumberToObject(f, "tensor_parallel", t->s->tp);
    cJSON_AddNumberToObject(f, "pipeline_parallel", t->s->pp);
    cJSON_AddNumberToObject(f, "microbatches", t->s->microbatches);
    cJSON_AddStringToObject(f, "input", t->wl->shape);
    cJSON_AddNumberToObject(f, "global_batch", t->s->global_batch);
    cJSON_AddNumberToObject(f, "parameters", (double)t->wl->model_params);
    cJSON_AddNumberToObject(f, "warmup_steps", t->env->o->warmup);
    cJSON_AddNumberToObject(f, "timed_steps_per_trial", t->env->o->steps);
    cJSON_AddNumberToObject(f, "trials", t->env->o->trials);
    tfb_event_log_emit(t->env->log, tfb_event_log_now(), "configuration", f);
}

static void teardown(train_ctx *t) {
    if (t->meter) { /* the steps failed: stop the sampling thread */
        double j, w;
        int n;
        long thr;
        tfb_power_stop(t->meter, &j, &w, &n, &thr);
        tfb_power_close(t->meter);
    }
    release_workload(t);
    double **arrays[] = {&t->local_step, &t->local_loss, &t->local_tp, &t->step_dt, &t->step_end_unix,
                         &t->local_recompute};
    for (int i = 0; i < 6; i++) free(*arrays[i]);
    for (int p = 0; p < TFB_N_PHASES; p++) free(t->local_phase[p]);
    free(t->ops);
    free(t->slot_of);
    free(t->taken);
    free(t->iv);
    tfb_grid_destroy(&t->lay);
}

static tfb_status train_active(train_ctx *t) {
    TFB_CHECK(setup(t));
    fill_record(t);
    log_configuration(t);
    if (t->env->dump) TFB_CHECK(dump_tensors(t, t->wl->param_pool, "param", 1.0));
    TFB_CHECK(alloc_arrays(t));
    t->meter = tfb_energy_open(t->job, t->env->node, t->env->be, t->rec);
    TFB_CHECK(run_steps(t));
    tfb_energy_finish(t->job, t->meter, t->rec);
    t->meter = NULL;
    tfb_watchdog_mark("reducing the measurements across ranks", -1);
    TFB_CHECK(reduce_measurements(t));
    if (t->env->dump) TFB_CHECK(dump_tensors(t, t->wl->param_pool, "param_final", 1.0));
    fill_results(t);
    return TFB_OK;
}

tfb_status tfb_train_run(const tfb_train_env *env, const tfb_strategy *s, tfb_run_record *rec) {
    static tfb_run_record scratch;
    train_ctx t = {.env = env, .s = s, .rec = env->world->rank == 0 ? rec : &scratch};
    tfb_status st = tfb_grid_create(env->world, s->dp, s->tp, s->pp, &t.lay);
    if (st != TFB_OK) return st;
    t.job = t.lay.job;
    if (t.lay.active) st = train_active(&t);
    if (t.rec == &scratch) tfb_record_free(&scratch);
    teardown(&t);
    return st;
}
