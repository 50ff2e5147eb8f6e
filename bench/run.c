/* run.c — see run.h. The driver: options, checks every rank agrees on, the backend, the watchdog, the peak
 * measurement, then each configuration (train.c) in turn with the ranks outside it waiting at a barrier, and
 * finally the tables and the results file from world rank 0. Only this file ends the process.
 */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "run.h"
#include "bert.h"
#include "catalog.h"
#include "job_backend.h"
#include "comm.h"
#include "options.h"
#include "peak.h"
#include "report.h"
#include "strategy.h"
#include "train.h"
#include "watchdog.h"
#include "../results/event_log.h"
#include "../topology/bind.h"
#include "../topology/topo.h"
#include "../results/results_json.h"

typedef struct {
    tfb_options o;
    tfb_comm *world;
    tfb_backend *be;
    tfb_strategy strategies[TFB_MAX_STRATEGIES];
    int n_strategies;
    tfb_run_record recs[TFB_MAX_STRATEGIES]; /* world rank 0: one per strategy */
    int done;                         /* configurations finished (or skipped) */
    char output[4096];
    tfb_event_log *log;               /* --log, rank 0 only */
    tfb_train_env env;
    int argc;
    char **argv;
    char started_at[32];
    tfb_topo topo;                    /* this machine */
    tfb_bind_plan bind;               /* this rank's */
    char *rank_binding;               /* [world * 64] every rank's binding read back */
    int *rank_node;                   /* [world] every rank's node */
    int nodes;
    int local_rank, local_size;     /* this rank's place on its node: a GPU backend takes GPU local_rank */
    char peak_text[320];            /* where the peak for MFU came from, when built here */
} run_ctx;

enum { BIND_TEXT = 64 };

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

/* A named layout must use every rank and fit the model; every rank reaches the same verdict from the same data. */
static tfb_status check_layout(run_ctx *r, char *err, size_t len) {
    int ranks = r->world->size;
    r->n_strategies = tfb_strategy_list(&r->o, ranks, r->strategies, TFB_MAX_STRATEGIES);
    if (r->o.compare) {
        if (r->o.dump[0] && r->n_strategies > 1) {
            snprintf(err, len, "--dump: name one strategy (--parallel data|tensor|pipeline or --dp/--tp/--pp) to "
                               "dump tensors");
            return TFB_ERR_ARG;
        }
        return TFB_OK;
    }
    const tfb_strategy *s = &r->strategies[0];
    if (s->dp * s->tp * s->pp != ranks) {
        snprintf(err, len, "--dp/--tp/--pp: %d x %d x %d = %d ranks, but the job has %d", s->dp, s->tp, s->pp,
                 s->dp * s->tp * s->pp, ranks);
        return TFB_ERR_ARG;
    }
    if (s->skip[0]) { /* the flag that chose the dimension that does not fit (the batch message names its own) */
        int hybrid = strcmp(s->name, "hybrid") == 0, tensor = strcmp(s->skip_dim, "tensor") == 0;
        const char *flag = hybrid ? (tensor ? "--tp" : "--pp") : tensor ? "--parallel tensor" : "--parallel pipeline";
        if (strcmp(s->skip_dim, "batch") == 0) snprintf(err, len, "%s", s->skip);
        else snprintf(err, len, "%s: %s", flag, s->skip);
        return TFB_ERR_ARG;
    }
    return TFB_OK;
}

static tfb_status check_job(run_ctx *r, char *err, size_t len) {
    TFB_TRY(check_layout(r, err, len));
    return check_paths(r, err, len);
}

/* A GPU's dense peak for the run's precision: the catalog's figure for its model, else SMs x clock x the
 * architecture's rate (said so in the source line). */
static tfb_status gpu_peak(run_ctx *r, double *tflops) {
    tfb_catalog cat;
    char err[400], how[200];
    tfb_prec p = tfb_prec_of(r->o.gemm_type, r->o.tf32);
    if (tfb_catalog_load(&cat, NULL, err, sizeof err) != TFB_OK) {
        fprintf(stderr, "tfbench: %s (or give --peak-tflops)\n", err);
        return TFB_ERR_IO;
    }
    const tfb_gpu_spec *g = tfb_catalog_find(&cat, r->be->device_name);
    if (g && g->peak[p] > 0) {
        *tflops = g->peak[p];
        snprintf(r->peak_text, sizeof r->peak_text, "catalog: %s dense %s %.1f TFLOP/s per GPU, summed over the "
                 "ranks used", g->name, tfb_prec_name(p), g->peak[p]);
    } else {
        *tflops = tfb_catalog_peak_from_sms(&cat, r->be->device_cc, r->be->device_sms, r->be->device_clock_mhz, p,
                                            how, sizeof how);
        snprintf(r->peak_text, sizeof r->peak_text, "estimated (%s not in the catalog): %s", r->be->device_name, how);
    }
    tfb_catalog_free(&cat);
    r->env.peak_source = r->peak_text;
    return *tflops > 0 ? TFB_OK : TFB_ERR_STATE;
}

static tfb_status measure_peak(run_ctx *r) {
    double mine = r->o.peak_tflops;
    if (mine <= 0 && r->be->device_name) {
        TFB_CHECK(gpu_peak(r, &mine));
    } else if (mine <= 0) {
        TFB_CHECK(r->world->barrier(r->world));
        TFB_CHECK(tfb_peak_measure(r->be, 2048, 5, &mine));
        r->env.peak_source = "measured: best FP32 2048^3 GEMM, summed over the ranks used";
    } else {
        r->env.peak_source = "given with --peak-tflops per rank, summed over the ranks used";
    }
    r->env.peak_tflops_rank = mine;
    return TFB_OK;
}

static tfb_status write_results(run_ctx *r, int complete) {
    if (r->world->rank != 0) return TFB_OK;
    if (tfb_results_write(r->output, r->recs, r->done, complete, tfb_comm_mpi_library()) == TFB_OK) return TFB_OK;
    /* Never lose a finished run: the working directory is the fallback (exit status 1 all the same). */
    char fallback[64];
    snprintf(fallback, sizeof fallback, "tfbench-results-%ld.json", (long)getpid());
    int saved = tfb_results_write(fallback, r->recs, r->done, complete, tfb_comm_mpi_library()) == TFB_OK;
    fprintf(stderr, "tfbench: could not write results to %s (%s); %s%s\n", r->output,
            access(r->output, F_OK) == 0 ? "write failed" : "its directory is gone or not writable",
            saved ? "saved them to ./" : "and the fallback in the working directory failed too", saved ? fallback : "");
    return TFB_ERR_IO;
}

static tfb_status write_outputs(run_ctx *r) {
    if (r->world->rank != 0) return TFB_OK;
    if (strcmp(r->o.format, "csv") == 0) tfb_report_csv(stdout, r->recs, r->done);
    else if (r->o.compare) tfb_report_compare(stdout, r->recs, r->done);
    else tfb_report_print(stdout, &r->recs[0]);
    TFB_CHECK(write_results(r, 1));
    fprintf(strcmp(r->o.format, "csv") == 0 ? stderr : stdout, "results: %s\n", r->output);
    return TFB_OK;
}

static tfb_status open_log(run_ctx *r) {
    if (!r->o.log[0] || r->world->rank != 0) return TFB_OK;
    if (tfb_event_log_open(r->o.log, &r->log) != TFB_OK) {
        fprintf(stderr, "tfbench: --log: cannot write %s\n", r->o.log);
        return TFB_ERR_IO;
    }
    cJSON *f = cJSON_CreateObject(), *args = cJSON_CreateArray();
    for (int i = 0; i < r->argc; i++) cJSON_AddItemToArray(args, cJSON_CreateString(r->argv[i]));
    cJSON_AddItemToObject(f, "command_line", args);
    cJSON_AddNumberToObject(f, "ranks", r->world->size);
    tfb_event_log_emit(r->log, tfb_event_log_now(), "run_start", f);
    return TFB_OK;
}

static void log_run_end(run_ctx *r, tfb_status st) {
    if (!r->log) return;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "status", st == TFB_OK ? "ok" : "failed");
    if (st == TFB_OK && r->done > 0 && !r->recs[0].skip) {
        tfb_run_summary s = tfb_record_summarize(&r->recs[0]);
        cJSON_AddNumberToObject(f, "throughput_samples_per_s", s.throughput);
        cJSON_AddStringToObject(f, "results", r->output);
    }
    tfb_event_log_emit(r->log, tfb_event_log_now(), "run_end", f);
    tfb_event_log_close(r->log);
    r->log = NULL;
}

static void record_start(run_ctx *r, tfb_run_record *rec, const tfb_strategy *s) {
    memset(rec, 0, sizeof *rec);
    snprintf(rec->started_at, sizeof rec->started_at, "%s", r->started_at);
    rec->argc = r->argc;
    rec->argv = r->argv;
    rec->model = r->o.model;
    rec->precision = r->o.precision;
    rec->strategy = s->name;
    rec->dp = s->dp;
    rec->tp = s->tp;
    rec->pp = s->pp;
    rec->global_batch = s->global_batch;
    rec->skip = s->skip[0] ? s->skip : NULL;
    rec->binding = tfb_bind_mode_name(r->bind.mode);
    rec->rank_binding = r->rank_binding;
    rec->rank_node = r->rank_node;
    rec->nodes = r->nodes;
    rec->topology = &r->topo;
}

/* A tensor group should share a node (its collectives sit inside every layer); say so when one does not. */
static void warn_tensor_across_nodes(const run_ctx *r, const tfb_strategy *s) {
    for (int g = 0; r->world->rank == 0 && s->tp > 1 && g < s->dp * s->pp; g++)
        for (int k = 1; k < s->tp; k++)
            if (r->rank_node[g * s->tp + k] != r->rank_node[g * s->tp]) {
                fprintf(stderr, "tfbench: warning: the tensor group of ranks %d-%d spans nodes; place whole groups on "
                                "a node (e.g. mpirun --map-by ppr:%d:node)\n", g * s->tp, g * s->tp + s->tp - 1, s->tp);
                return;
            }
}

/* Every configuration in turn; ranks outside one wait at the barrier that follows it (outside its windows). */
static tfb_status run_configurations(run_ctx *r) {
    for (int i = 0; i < r->n_strategies; i++) {
        const tfb_strategy *s = &r->strategies[i];
        record_start(r, &r->recs[i], s);
        if (!s->skip[0]) {
            warn_tensor_across_nodes(r, s);
            if (r->world->rank == 0 && r->o.compare)
                fprintf(stderr, "tfbench: %s, %d x %d x %d (data x tensor x pipeline)\n", s->name, s->dp, s->tp, s->pp);
            TFB_CHECK(tfb_train_run(&r->env, s, &r->recs[i]));
            tfb_watchdog_mark("waiting for the other ranks' configuration to finish", -1);
            tfb_watchdog_idle(1);
            TFB_CHECK(r->world->barrier(r->world));
            tfb_watchdog_idle(0);
        }
        r->done = i + 1;
        if (r->o.compare && i + 1 < r->n_strategies) TFB_CHECK(write_results(r, 0));
    }
    return TFB_OK;
}

/* Loads this machine's topology, binds this rank as --bind asks, and gathers every rank's binding as read back.
 * *threads: the cores bound (or, unbound, this rank's share of its affinity set). */
static tfb_status place_rank(run_ctx *r, int *threads) {
    int local_rank = 0, local_size = 1, node = 0;
    char err[600] = "", mine[BIND_TEXT] = "";
    tfb_bind_mode mode;
    tfb_comm_mpi_node(&node, &r->nodes, &local_rank, &local_size);
    r->local_rank = local_rank;
    r->local_size = local_size;
    TFB_CHECK_ALLOC(r->rank_node = calloc((size_t)r->world->size, sizeof(int)));
    TFB_CHECK(r->world->allgather(r->world, &node, r->rank_node, 1, TFB_COMM_I32));
    tfb_status st = tfb_topo_load(NULL, NULL, &r->topo, err, sizeof err);
    if (st != TFB_OK) {
        if (r->world->rank == 0) fprintf(stderr, "tfbench: %s\n", err);
        return st;
    }
    TFB_CHECK(tfb_bind_mode_parse(r->o.bind, r->topo.n_gpus > 0, &mode));
    TFB_CHECK(tfb_bind_plan_make(&r->topo, mode, local_rank, local_size, &r->bind));
    if (tfb_bind_apply(&r->topo, &r->bind) != TFB_OK && r->world->rank == 0)
        fprintf(stderr, "tfbench: --bind %s: the operating system refused cpus %s; running unbound\n",
                tfb_bind_mode_name(mode), r->bind.cpulist);
    *threads = mode == TFB_BIND_NONE || r->bind.cores < 1 ? threads_for_rank(local_size) : r->bind.cores;
    tfb_bind_read(&r->topo, mine, sizeof mine);
    TFB_CHECK_ALLOC(r->rank_binding = calloc((size_t)r->world->size, BIND_TEXT));
    return r->world->allgather(r->world, mine, r->rank_binding, BIND_TEXT / 8, TFB_COMM_U64);
}

/* Every rank opens its backend (the GPU of its node-local rank); any rank that cannot stops them all. */
static tfb_status open_backend(run_ctx *r, int threads) {
    tfb_backend_spec spec = {.name = r->o.device, .threads = threads, .local_rank = r->local_rank,
                             .local_size = r->local_size, .allow_shared_gpu = r->o.allow_shared_gpu};
    return tfb_job_backend_open(&spec, "tfbench", &r->world, &r->be);
}

/* --attention fused where the backend has no fused op for the model's head width, sequence length and precision is
 * bad input, decided alike on every rank. */
static tfb_status check_fused_attention(const run_ctx *r) {
    const bert_config *c = r->o.fused_attention ? bert_config_find(r->o.model) : NULL;
    if (!c) return TFB_OK;
    tfb_attn_desc d = {.batch = 1, .heads = c->heads, .heads_total = c->heads, .seq = r->o.seq_len,
                       .head_dim = c->hidden / c->heads, .ldc = c->hidden, .type = r->o.gemm_type};
    if (r->be->attn_fused_supports && r->be->attn_fused_supports(r->be->ctx, &d)) return TFB_OK;
    if (r->world->rank == 0)
        fprintf(stderr, "tfbench: --attention fused: the %s backend has no fused attention for %s at head width %d "
                "and sequence length %d (on a GPU it needs fp16 or bf16, head width 64 and a --seq-len that is a "
                "multiple of 64)\n", r->be->name, r->o.precision, d.head_dim, d.seq);
    return TFB_ERR_ARG;
}

static tfb_status run_job(run_ctx *r) {
    int threads = 1;
    TFB_CHECK(place_rank(r, &threads));
    if (r->o.threads) threads = r->o.threads;
    TFB_TRY(open_backend(r, threads));
    tfb_log_device = r->be->name;
    tfb_options_resolve_backend(&r->o, r->be->name);
    TFB_TRY(check_fused_attention(r));
    tfb_watchdog_probe(r->be->pending_text, r->be->ctx);
    if (tfb_watchdog_start(r->world->rank, r->o.timeout) != 0) return TFB_ERR_NOMEM;
    time_t now = time(NULL);
    strftime(r->started_at, sizeof r->started_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const char *exit_step = getenv("TFB_TEST_EXIT_STEP");
    TFB_CHECK(open_log(r));
    TFB_CHECK(measure_peak(r));
    r->env = (tfb_train_env){.o = &r->o, .world = r->world, .be = r->be, .peak_tflops_rank = r->env.peak_tflops_rank,
                             .peak_source = r->env.peak_source, .log = r->log,
                             .exit_step = exit_step ? atoi(exit_step) : -1, .dump = r->o.dump[0] != 0,
                             .node = r->rank_node[r->world->rank]};
    r->env.progress = r->world->rank == 0 && (strcmp(r->o.progress, "on") == 0 ||
                                              (strcmp(r->o.progress, "auto") == 0 && isatty(2)));
    TFB_CHECK(run_configurations(r));
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

/* A job that ended well on every rank releases its world communicator (on a GPU the device one, which holds NCCL's)
 * and then its backend, before MPI ends. After a failure both are left to the exit: NCCL's teardown may wait for a
 * peer that is gone. */
static void release_job(run_ctx *r) {
    r->world->destroy(r->world); /* MPI_COMM_WORLD itself stays MPI's */
    r->world = NULL;
    if (r->be) r->be->destroy(r->be);
    r->be = NULL;
}

static void free_records(run_ctx *r) {
    for (int i = 0; i < r->n_strategies; i++) tfb_record_free(&r->recs[i]);
}

int tfb_run_main(int argc, char **argv) {
    static run_ctx r;
    char err[512] = "";
    if (tfb_comm_mpi_world(&argc, &argv, &r.world) != TFB_OK) return 1;
    tfb_log_rank = r.world->rank;
    r.argc = argc;
    r.argv = argv;
    tfb_status st = tfb_options_parse(argc, argv, &r.o, err, sizeof err);
    if (st == TFB_OK && (r.o.help || r.o.version)) {
        if (r.world->rank == 0) r.o.help ? tfb_options_help(stdout) : (void)printf("tfbench %s\n", TFB_VERSION);
    } else {
        if (st == TFB_OK) st = check_job(&r, err, sizeof err);
        if (st != TFB_OK && r.world->rank == 0 && err[0]) fprintf(stderr, "tfbench: %s\n", err);
        if (st == TFB_OK) st = run_job(&r);
        log_run_end(&r, st);
        end_if_rank_local(&r, st);
    }
    tfb_watchdog_stop();
    int code = exit_code(st), worst = code;
    if (r.world->allreduce(r.world, &worst, 1, TFB_COMM_I32, TFB_MAX) != TFB_OK) worst = code ? code : 1;
    free_records(&r);
    free(r.rank_binding);
    free(r.rank_node);
    tfb_topo_free(&r.topo);
    if (worst == 0) release_job(&r);
    tfb_comm_mpi_finalize();
    return worst;
}
