/* links.c — see links.h. Times are the maximum over ranks of each rank's average over the timed iterations, after
 * a barrier; sizes follow nccl-tests: all-gather counts the gathered bytes, reduce-scatter the bytes before the
 * scatter, the others the buffer. Bus bandwidth factors (nccl-tests, PERFORMANCE.md): all-reduce 2(n-1)/n,
 * all-gather and reduce-scatter (n-1)/n, broadcast and send/receive 1. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "links.h"
#include "links_gpu.h"
#include "job_backend.h"
#include "clock.h"
#include "comm.h"
#include "../kernels/backend.h"
#include "../results/env.h"
#include "../results/results_json.h"

typedef struct {
    size_t min_bytes, max_bytes;
    double factor;
    int iters, warmup;
    double timeout;            /* seconds for the GPU copy matrices */
    char device[16];           /* auto, cpu or cuda: whose memory the buffers are */
    char output[4096];
} links_opts;

typedef struct {
    tfb_comm *w;
    tfb_backend *be;
    float *a, *b, *c;          /* (max_bytes / 4 * ranks) each: send, receive, host check copy */
    float *host;
    links_opts o;
    cJSON *json;
} links_ctx;

typedef enum { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BCAST, OP_SENDRECV, N_OPS } coll_op;
static const char *const OP_NAMES[N_OPS] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"};

/* ---- options ---- */

static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
    if (*end && end[1] != '\0') return 0;
    if (*end && mult == 1.0) return 0;
    v *= mult;
    if (errno || !(v >= 4) || v > 4294967296.0) return 0;
    *out = (size_t)v / 4 * 4;
    return 1;
}

static int bad(int rank, const char *flag, const char *what) {
    if (rank == 0) fprintf(stderr, "tfbench links: %s: %s\n", flag, what);
    return 0;
}

static int parse_one(links_opts *o, const char *f, const char *v, int rank) {
    if (strcmp(f, "-b") == 0) return parse_size(v, &o->min_bytes) || bad(rank, f, "expected a size (4 .. 4G, K/M/G)");
    if (strcmp(f, "-e") == 0) return parse_size(v, &o->max_bytes) || bad(rank, f, "expected a size (4 .. 4G, K/M/G)");
    if (strcmp(f, "-f") == 0) return ((o->factor = strtod(v, NULL)) > 1.0 && o->factor <= 1024) ||
                                     bad(rank, f, "expected a factor above 1");
    if (strcmp(f, "-n") == 0) return ((o->iters = atoi(v)) >= 1 && o->iters <= 100000) ||
                                     bad(rank, f, "expected 1 .. 100000 iterations");
    if (strcmp(f, "-w") == 0) return ((o->warmup = atoi(v)) >= 0 && o->warmup <= 100000) ||
                                     bad(rank, f, "expected 0 .. 100000 warm-up iterations");
    if (strcmp(f, "--timeout") == 0) return ((o->timeout = strtod(v, NULL)) > 0 && o->timeout <= 86400) ||
                                           bad(rank, f, "expected seconds above 0");
    if (strcmp(f, "--device") == 0) {
        snprintf(o->device, sizeof o->device, "%s", v);
        return strcmp(v, "auto") == 0 || strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0 ||
               bad(rank, f, "expected auto, cpu or cuda");
    }
    if (strcmp(f, "--output") == 0) {
        snprintf(o->output, sizeof o->output, "%s", v);
        return 1;
    }
    return bad(rank, f, "unknown option (-b SIZE -e SIZE -f FACTOR -n ITERS -w WARMUP --device D --timeout S "
                        "--output FILE)");
}

static int parse_opts(int argc, char **argv, int rank, links_opts *o) {
    *o = (links_opts){.min_bytes = 8, .max_bytes = 64 << 20, .factor = 2, .iters = 20, .warmup = 5, .timeout = 60,
                      .device = "auto"};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return bad(rank, argv[i], "missing value or unknown option");
        if (!parse_one(o, argv[i], argv[i + 1], rank)) return 0;
    }
    if (o->min_bytes > o->max_bytes) return bad(rank, "-b", "larger than -e");
    return 1;
}

/* ---- collectives ---- */

/* Elements of one rank's buffer for op at `bytes` (nccl-tests' size convention). */
static size_t op_count(coll_op op, size_t bytes, int ranks) {
    size_t n = bytes / 4;
    return op == OP_ALLGATHER || op == OP_REDUCE_SCATTER ? n / (size_t)ranks : n;
}

static double bus_factor(coll_op op, int n) {
    if (op == OP_ALLREDUCE) return 2.0 * (n - 1) / n;
    if (op == OP_ALLGATHER || op == OP_REDUCE_SCATTER) return (double)(n - 1) / n;
    return 1.0;
}

static tfb_status run_op(links_ctx *L, coll_op op, size_t n) {
    tfb_comm *w = L->w;
    int R = w->size, peer = w->rank ^ 1;
    switch (op) {
    case OP_ALLREDUCE: return w->allreduce(w, L->a, n, TFB_COMM_F32, TFB_SUM);
    case OP_ALLGATHER: return w->allgather(w, L->a, L->b, n, TFB_COMM_F32);
    case OP_REDUCE_SCATTER: return w->reduce_scatter(w, L->a, L->b, n, TFB_COMM_F32);
    case OP_BCAST: return w->bcast(w, L->a, n, TFB_COMM_F32, 0);
    default:
        if (peer >= R) return TFB_OK; /* an odd rank out waits */
        return w->sendrecv(w, L->a, n, peer, L->b, n, peer, TFB_COMM_F32, 11);
    }
}

/* Rank r's input element i: small integers, so every sum is exact in FP32. */
static float input_value(int r, size_t i) { return (float)((r + 1) * (int)(1 + i % 7)); }

static tfb_status fill_inputs(links_ctx *L, coll_op op, size_t n) {
    int r = L->w->rank, R = L->w->size;
    size_t total = op == OP_REDUCE_SCATTER ? n * (size_t)R : n;
    for (size_t i = 0; i < total; i++) L->host[i] = input_value(r, i);
    return L->be->copy_h2d(L->be->ctx, L->a, L->host, total * 4);
}

/* Elements that differ from the exact result on this rank. */
static tfb_status count_wrong(links_ctx *L, coll_op op, size_t n, double *wrong) {
    int r = L->w->rank, R = L->w->size, peer = r ^ 1;
    size_t out = op == OP_ALLGATHER ? n * (size_t)R : n;
    const float *src = op == OP_ALLREDUCE || op == OP_BCAST ? L->a : L->b;
    if (op == OP_SENDRECV && peer >= R) return TFB_OK;
    TFB_CHECK(L->be->copy_d2h(L->be->ctx, L->host, src, out * 4));
    long bad_here = 0, ranks_sum = (long)R * (R + 1) / 2; /* sum of r + 1 over ranks */
    for (size_t i = 0; i < out; i++) {
        float want;
        if (op == OP_ALLREDUCE) want = (float)(ranks_sum * (long)(1 + i % 7));
        else if (op == OP_ALLGATHER) want = input_value((int)(i / n), i % n);
        else if (op == OP_REDUCE_SCATTER) want = (float)(ranks_sum * (long)(1 + ((size_t)r * n + i) % 7));
        else if (op == OP_BCAST) want = input_value(0, i);
        else want = input_value(peer, i);
        bad_here += L->host[i] != want;
    }
    *wrong += (double)bad_here;
    return TFB_OK;
}

/* Average seconds per operation on this rank, then the maximum over ranks. */
static tfb_status time_op(links_ctx *L, coll_op op, size_t n, double *seconds) {
    tfb_backend *be = L->be;
    for (int i = 0; i < L->o.warmup; i++) TFB_CHECK(run_op(L, op, n));
    TFB_CHECK(be->sync(be->ctx));
    TFB_CHECK(L->w->barrier(L->w));
    double t0 = tfb_clock_s();
    for (int i = 0; i < L->o.iters; i++) TFB_CHECK(run_op(L, op, n));
    TFB_CHECK(be->sync(be->ctx));
    *seconds = (tfb_clock_s() - t0) / L->o.iters;
    return L->w->allreduce(L->w, seconds, 1, TFB_COMM_F64, TFB_MAX);
}

static tfb_status sweep(links_ctx *L, coll_op op, cJSON *rows) {
    int R = L->w->size;
    if (L->w->rank == 0)
        printf("\n# %s, %d ranks\n#%12s %12s %10s %10s %10s %7s\n", OP_NAMES[op], R, "size (B)", "count", "time (us)",
               "algbw GB/s", "busbw GB/s", "#wrong");
    int steps = (int)floor(log((double)L->o.max_bytes / (double)L->o.min_bytes) / log(L->o.factor) + 1e-9);
    for (int k = 0; k <= steps; k++) {
        size_t bytes = (size_t)((double)L->o.min_bytes * pow(L->o.factor, k)) / 4 * 4, n = op_count(op, bytes, R);
        if (n == 0) continue;
        double s, wrong = 0;
        TFB_CHECK(fill_inputs(L, op, n));
        TFB_CHECK(run_op(L, op, n));
        TFB_CHECK(count_wrong(L, op, n, &wrong));
        TFB_CHECK(L->w->allreduce(L->w, &wrong, 1, TFB_COMM_F64, TFB_SUM));
        TFB_CHECK(time_op(L, op, n, &s));
        size_t size = op == OP_ALLGATHER || op == OP_REDUCE_SCATTER ? n * 4 * (size_t)R : n * 4;
        double algbw = (double)size / s / 1e9, busbw = algbw * bus_factor(op, R);
        if (L->w->rank != 0) continue;
        printf(" %12zu %12zu %10.2f %10.3f %10.3f %7.0f\n", size, n, s * 1e6, algbw, busbw, wrong);
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "op", OP_NAMES[op]);
        cJSON_AddNumberToObject(row, "size_bytes", (double)size);
        cJSON_AddNumberToObject(row, "count", (double)n);
        cJSON_AddNumberToObject(row, "time_s", s);
        cJSON_AddNumberToObject(row, "algbw_gb_s", algbw);
        cJSON_AddNumberToObject(row, "busbw_gb_s", busbw);
        cJSON_AddNumberToObject(row, "bus_factor", bus_factor(op, R));
        cJSON_AddNumberToObject(row, "wrong", wrong);
        cJSON_AddItemToArray(rows, row);
    }
    return TFB_OK;
}

/* ---- the pair matrix ---- */

/* Between ranks i and j (the others wait): one-way bandwidth (i to j), both ways at once, and half the round trip
 * of a 4-byte message; on rank 0, times are those of rank i. */
static tfb_status pair_measure(links_ctx *L, int i, int j, double out[3]) {
    tfb_comm *w = L->w;
    tfb_backend *be = L->be; /* device transfers return once queued: the clock is read after a sync */
    int me = w->rank, peer = me == i ? j : i, n = (int)(L->o.max_bytes < (16u << 20) ? L->o.max_bytes / 4 : 4u << 20);
    double t = 0, v[3] = {0, 0, 0};
    TFB_CHECK(w->barrier(w));
    if (me == i || me == j) {
        for (int k = 0; k < L->o.warmup + L->o.iters; k++) {
            if (k == L->o.warmup) { TFB_CHECK(be->sync(be->ctx)); t = tfb_clock_s(); }
            if (me == i) TFB_CHECK(w->send(w, L->a, (size_t)n, TFB_COMM_F32, j, 12));
            else TFB_CHECK(w->recv(w, L->b, (size_t)n, TFB_COMM_F32, i, 12));
        }
        TFB_CHECK(w->sendrecv(w, L->a, 1, peer, L->b, 1, peer, TFB_COMM_F32, 13)); /* the receiver has all of it */
        TFB_CHECK(be->sync(be->ctx));
        v[0] = (double)n * 4 * L->o.iters / (tfb_clock_s() - t) / 1e9;
        t = tfb_clock_s();
        for (int k = 0; k < L->o.iters; k++)
            TFB_CHECK(w->sendrecv(w, L->a, (size_t)n, peer, L->b, (size_t)n, peer, TFB_COMM_F32, 14));
        TFB_CHECK(be->sync(be->ctx));
        v[1] = 2.0 * n * 4 * L->o.iters / (tfb_clock_s() - t) / 1e9;
        t = tfb_clock_s();
        for (int k = 0; k < L->o.iters; k++) {
            if (me == i) { TFB_CHECK(w->send(w, L->a, 1, TFB_COMM_F32, j, 15)); TFB_CHECK(w->recv(w, L->b, 1, TFB_COMM_F32, j, 15)); }
            else { TFB_CHECK(w->recv(w, L->b, 1, TFB_COMM_F32, i, 15)); TFB_CHECK(w->send(w, L->a, 1, TFB_COMM_F32, i, 15)); }
        }
        TFB_CHECK(be->sync(be->ctx));
        v[2] = (tfb_clock_s() - t) / L->o.iters / 2 * 1e6;
        if (me == i && i != 0) TFB_CHECK(w->send(w, v, 3, TFB_COMM_F64, 0, 16));
    }
    if (me == 0 && i != 0) TFB_CHECK(w->recv(w, v, 3, TFB_COMM_F64, i, 16));
    memcpy(out, v, sizeof v);
    return TFB_OK;
}

static tfb_status pair_matrix(links_ctx *L) {
    int R = L->w->size;
    cJSON *pairs = cJSON_CreateArray();
    if (L->w->rank == 0)
        printf("# point to point between ranks (MPI transport; no nominal figure: the link is the MPI library's)\n"
               "#%6s %6s %16s %16s %14s\n", "from", "to", "one-way GB/s", "both ways GB/s", "latency (us)");
    for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++) {
            double v[3];
            if (i == j) continue;
            TFB_CHECK(pair_measure(L, i, j, v));
            if (L->w->rank != 0) continue;
            printf(" %6d %6d %16.3f %16.3f %14.2f\n", i, j, v[0], v[1], v[2]);
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "from", i);
            cJSON_AddNumberToObject(p, "to", j);
            cJSON_AddNumberToObject(p, "one_way_gb_s", v[0]);
            cJSON_AddNumberToObject(p, "both_ways_gb_s", v[1]);
            cJSON_AddNumberToObject(p, "latency_us", v[2]);
            cJSON_AddItemToArray(pairs, p);
        }
    if (L->json) cJSON_AddItemToObject(L->json, "pairs", pairs);
    else cJSON_Delete(pairs);
    return TFB_OK;
}

/* ---- the command ---- */

static tfb_status write_json(links_ctx *L) {
    if (L->w->rank != 0 || !L->o.output[0]) return TFB_OK;
    char *text = cJSON_Print(L->json);
    TFB_CHECK_ALLOC(text);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", L->o.output);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, L->o.output) != 0) { remove(tmp); return TFB_ERR_IO; }
    printf("results: %s\n", L->o.output);
    return TFB_OK;
}

/* The backend of --device on every rank (GPU = node-local rank); a GPU backend's communicator (NCCL) replaces
 * MPI for its buffers. Any rank that cannot open it stops them all with its reason. */
static tfb_status links_backend(links_ctx *L) {
    int node, nodes, local_rank, local_size;
    tfb_comm_mpi_node(&node, &nodes, &local_rank, &local_size);
    tfb_backend_spec spec = {.name = L->o.device, .threads = 1, .local_rank = local_rank, .local_size = local_size};
    return tfb_job_backend_open(&spec, "tfbench links", &L->w, &L->be);
}

/* World rank 0 measures its node's GPU copies while the other ranks wait; a failed or hung copy is reported and
 * fails the run at the end (exit status 1), after the rest is measured and written. */
static tfb_status gpu_copies(links_ctx *L, int *failed) {
    *failed = 0;
    if (strcmp(L->o.device, "cpu") != 0 && L->w->rank == 0) {
        cJSON *g = tfb_links_gpu_copies(L->o.max_bytes, L->o.iters, L->o.timeout, failed);
        if (g) cJSON_AddItemToObject(L->json, "gpu_copies", g);
    }
    return L->w->bcast(L->w, failed, 1, TFB_COMM_I32, 0);
}

static tfb_status links_run(links_ctx *L) {
    size_t elems = L->o.max_bytes / 4 * (size_t)L->w->size + 4;
    int copies_failed = 0;
    TFB_TRY(links_backend(L));
    L->a = L->be->alloc(L->be->ctx, elems * 4);
    L->b = L->be->alloc(L->be->ctx, elems * 4);
    L->host = malloc(elems * 4);
    if (!L->a || !L->b || !L->host) return TFB_ERR_NOMEM;
    if (L->w->rank == 0) {
        L->json = cJSON_CreateObject();
        cJSON_AddNumberToObject(L->json, "schema_version", TFB_SCHEMA_VERSION);
        cJSON_AddStringToObject(L->json, "tool", "tfbench links");
        cJSON_AddNumberToObject(L->json, "ranks", L->w->size);
        cJSON_AddStringToObject(L->json, "backend", L->be->name);
        if (L->be->device_name) cJSON_AddStringToObject(L->json, "device", L->be->device_name);
        cJSON_AddStringToObject(L->json, "definition", "time: max over ranks of the mean over timed iterations; "
                                "busbw = algbw x bus_factor (nccl-tests); wrong: elements differing from the exact "
                                "result, summed over ranks");
        cJSON_AddItemToObject(L->json, "environment", tfb_env_capture(tfb_comm_mpi_library()));
        printf("tfbench links | %d ranks | backend %s%s%s | sizes %zu .. %zu B x %g | %d iterations after %d warm-up\n",
               L->w->size, L->be->name, L->be->device_name ? " on " : "", L->be->device_name ? L->be->device_name : "",
               L->o.min_bytes, L->o.max_bytes, L->o.factor, L->o.iters, L->o.warmup);
    }
    TFB_CHECK(gpu_copies(L, &copies_failed));
    if (L->w->size > 1) TFB_CHECK(pair_matrix(L));
    cJSON *rows = cJSON_CreateArray();
    tfb_status st = TFB_OK;
    for (int op = 0; op < N_OPS && st == TFB_OK; op++) st = sweep(L, (coll_op)op, rows);
    if (L->json) cJSON_AddItemToObject(L->json, "collectives", rows);
    else cJSON_Delete(rows);
    TFB_CHECK(st);
    TFB_CHECK(write_json(L));
    return copies_failed ? TFB_ERR_BACKEND : TFB_OK;
}

int tfb_links_main(int argc, char **argv) {
    static links_ctx L;
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("usage: [mpirun -np N] tfbench links [-b SIZE] [-e SIZE] [-f FACTOR] [-n ITERS] [-w WARMUP] "
               "[--device auto|cpu|cuda] [--timeout S] [--output FILE]\n  with GPUs (unless --device cpu): rank 0's "
               "node's GPU copy matrices (host<->GPU pinned, peer access on and off, both ways, latency; -e bytes "
               "per copy, -n copies, within --timeout seconds, default 60) against each link's nominal bandwidth; "
               "then the point-to-point matrix between ranks and all-reduce, all-gather, reduce-scatter, broadcast "
               "and send/recv sweeps from -b to -e bytes (x -f), nccl-tests' algbw and busbw; on the CUDA backend "
               "the buffers are each rank's GPU memory and the transport NCCL\n");
        return 0;
    }
    if (tfb_comm_mpi_world(&argc, &argv, &L.w) != TFB_OK) return 1;
    tfb_status st = TFB_ERR_ARG;
    char err[600] = "";
    if (parse_opts(argc, argv, L.w->rank, &L.o)) {
        st = L.o.output[0] && L.w->rank == 0 ? tfb_results_check_path("--output", L.o.output, err, sizeof err) : TFB_OK;
        int bad_path = st != TFB_OK;
        L.w->bcast(L.w, &bad_path, 1, TFB_COMM_I32, 0);
        if (bad_path && L.w->rank == 0) fprintf(stderr, "tfbench links: %s\n", err);
        st = bad_path ? TFB_ERR_ARG : links_run(&L);
    }
    if (L.json) cJSON_Delete(L.json);
    if (L.be) { L.be->free(L.be->ctx, L.a); L.be->free(L.be->ctx, L.b); }
    free(L.host);
    int code = st == TFB_OK ? 0 : st == TFB_ERR_ARG ? 2 : 1, worst = code;
    L.w->allreduce(L.w, &worst, 1, TFB_COMM_I32, TFB_MAX);
    /* the world communicator (on a GPU NCCL's) before the backend, and only after a run that ended well: NCCL's
     * teardown may wait for a peer that is gone */
    if (worst == 0) L.w->destroy(L.w);
    if (L.be) L.be->destroy(L.be);
    tfb_comm_mpi_finalize();
    return worst;
}
