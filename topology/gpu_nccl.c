/* gpu_nccl.c — see gpu_nccl.h. Signatures are declared here from the CUDA runtime's and NCCL's documentation
 * (error codes are ints, streams and communicators pointers; ncclFloat32 = 7, ncclSum = 0). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpu_nccl.h"
#include "gpu_probe.h"
#include "deadline.h"
#include "../bench/clock.h"

enum { MAX_GPUS = 8, COUNT = 1 << 18, NOT_READY = 600, NCCL_FLOAT32 = 7, NCCL_SUM = 0, H2D = 1, D2H = 2 };

typedef struct {
    int (*cudaSetDevice)(int);
    int (*cudaMalloc)(void **, size_t);
    int (*cudaFree)(void *);
    int (*cudaMemcpy)(void *, const void *, size_t, int);
    int (*cudaStreamCreate)(void **);
    int (*cudaStreamQuery)(void *);
    int (*cudaStreamDestroy)(void *);
    int (*ncclCommInitAll)(void **, int, const int *);
    int (*ncclGroupStart)(void);
    int (*ncclGroupEnd)(void);
    int (*ncclAllReduce)(const void *, void *, size_t, int, int, void *, void *);
    int (*ncclCommGetAsyncError)(void *, int *);
    int (*ncclCommDestroy)(void *);
} api;

typedef struct {
    tfb_deadline dl;
    api f;
    int n;
    void *buf[MAX_GPUS], *stream[MAX_GPUS], *comm[MAX_GPUS];
    float *host;             /* COUNT floats */
    tfb_nccl_result res;     /* the worker's */
    tfb_nccl_result *out;    /* the caller's: written once the worker finished, or at the deadline under dl.mu */
} nccl_job;

static int api_load(api *f, char *why, size_t len) {
    char so_rt[48], so_nccl[48];
    void *rt = tfb_lib_open("cudart", so_rt, sizeof so_rt), *nc = tfb_lib_open("nccl", so_nccl, sizeof so_nccl);
    if (!rt || !nc) { snprintf(why, len, "%s not found", !rt ? "the CUDA runtime (libcudart)" : "NCCL (libnccl.so.2)"); return 0; }
    const char *names[] = {"cudaSetDevice", "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaStreamCreate", "cudaStreamQuery",
                           "cudaStreamDestroy", "ncclCommInitAll", "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce",
                           "ncclCommGetAsyncError", "ncclCommDestroy"};
    void **slots[] = {(void **)&f->cudaSetDevice, (void **)&f->cudaMalloc, (void **)&f->cudaFree,
                      (void **)&f->cudaMemcpy, (void **)&f->cudaStreamCreate, (void **)&f->cudaStreamQuery,
                      (void **)&f->cudaStreamDestroy, (void **)&f->ncclCommInitAll, (void **)&f->ncclGroupStart,
                      (void **)&f->ncclGroupEnd, (void **)&f->ncclAllReduce, (void **)&f->ncclCommGetAsyncError,
                      (void **)&f->ncclCommDestroy};
    for (int i = 0; i < 13; i++) {
        *slots[i] = dlsym(i < 7 ? rt : nc, names[i]);
        if (!*slots[i]) { snprintf(why, len, "%s lacks %s", i < 7 ? so_rt : so_nccl, names[i]); return 0; }
    }
    return 1; /* both stay loaded: a hung call may still be inside them */
}

/* Runs a call; on failure records it and returns from the calling function. */
#define TRY(j, fn, ...)                                                                                   \
    do {                                                                                                  \
        int e_ = (j)->f.fn(__VA_ARGS__);                                                                  \
        if (e_) {                                                                                         \
            snprintf((j)->res.why, sizeof (j)->res.why, "%s failed (error %d) while %s", #fn, e_, (j)->res.stage); \
            return TFB_NCCL_FAILED;                                                                       \
        }                                                                                                 \
    } while (0)

static void stage(nccl_job *j, const char *what) {
    pthread_mutex_lock(&j->dl.mu);
    snprintf(j->res.stage, sizeof j->res.stage, "%s", what);
    pthread_mutex_unlock(&j->dl.mu);
}

static tfb_nccl_status buffers_fill(nccl_job *j) {
    stage(j, "allocating and filling buffers");
    for (int i = 0; i < j->n; i++) {
        for (int k = 0; k < COUNT; k++) j->host[k] = (float)(i + 1);
        TRY(j, cudaSetDevice, i);
        TRY(j, cudaMalloc, &j->buf[i], COUNT * sizeof(float));
        TRY(j, cudaMemcpy, j->buf[i], j->host, COUNT * sizeof(float), H2D);
        TRY(j, cudaStreamCreate, &j->stream[i]);
    }
    return TFB_NCCL_OK;
}

/* Waits for every stream, polling the communicators' asynchronous errors (a dead peer shows there). */
static tfb_nccl_status streams_wait(nccl_job *j) {
    for (int pending = j->n; pending > 0;) {
        pending = 0;
        for (int i = 0; i < j->n; i++) {
            int async = 0, q;
            TRY(j, ncclCommGetAsyncError, j->comm[i], &async);
            if (async) {
                snprintf(j->res.why, sizeof j->res.why, "GPU %d's communicator reported error %d", i, async);
                return TFB_NCCL_FAILED;
            }
            TRY(j, cudaSetDevice, i);
            if ((q = j->f.cudaStreamQuery(j->stream[i])) == NOT_READY) pending++;
            else if (q) { snprintf(j->res.why, sizeof j->res.why, "cudaStreamQuery: error %d", q); return TFB_NCCL_FAILED; }
        }
        struct timespec tick = {0, 1000000}; /* poll every millisecond: the waiter holds the deadline */
        if (pending) nanosleep(&tick, NULL);
    }
    return TFB_NCCL_OK;
}

static tfb_nccl_status allreduce_run(nccl_job *j) {
    int devs[MAX_GPUS];
    for (int i = 0; i < j->n; i++) devs[i] = i;
    if (buffers_fill(j) != TFB_NCCL_OK) return TFB_NCCL_FAILED;
    stage(j, "initialising the communicators");
    TRY(j, ncclCommInitAll, j->comm, j->n, devs);
    stage(j, "in the all-reduce");
    TRY(j, ncclGroupStart);
    for (int i = 0; i < j->n; i++) {
        TRY(j, cudaSetDevice, i);
        TRY(j, ncclAllReduce, j->buf[i], j->buf[i], (size_t)COUNT, NCCL_FLOAT32, NCCL_SUM, j->comm[i], j->stream[i]);
    }
    TRY(j, ncclGroupEnd);
    if (streams_wait(j) != TFB_NCCL_OK) return TFB_NCCL_FAILED;
    stage(j, "checking the sums");
    float want = 0.5f * (float)(j->n * (j->n + 1)); /* 1 + 2 + ... + n */
    for (int i = 0; i < j->n; i++) {
        TRY(j, cudaSetDevice, i);
        TRY(j, cudaMemcpy, j->host, j->buf[i], COUNT * sizeof(float), D2H);
        for (int k = 0; k < COUNT; k++)
            if (j->host[k] != want) {
                snprintf(j->res.why, sizeof j->res.why, "GPU %d holds %g at element %d, not %g", i, (double)j->host[k],
                         k, (double)want);
                return TFB_NCCL_WRONG_SUM;
            }
    }
    return TFB_NCCL_OK;
}

static void release(nccl_job *j) {
    for (int i = 0; i < j->n; i++) {
        if (j->comm[i]) j->f.ncclCommDestroy(j->comm[i]);
        if (j->f.cudaSetDevice(i) != 0) continue;
        if (j->stream[i]) j->f.cudaStreamDestroy(j->stream[i]);
        if (j->buf[i]) j->f.cudaFree(j->buf[i]);
    }
}

static void *worker(void *arg) {
    nccl_job *j = arg;
    double t0 = tfb_clock_s();
    tfb_nccl_status st = allreduce_run(j);
    release(j);
    pthread_mutex_lock(&j->dl.mu);
    j->res.status = st;
    j->res.seconds = tfb_clock_s() - t0;
    pthread_mutex_unlock(&j->dl.mu);
    tfb_deadline_finish(&j->dl);
    return NULL;
}

static void mark_timeout(void *arg) {
    nccl_job *j = arg;
    *j->out = j->res;
    j->out->status = TFB_NCCL_TIMED_OUT;
}

tfb_nccl_status tfb_nccl_check(int n, double deadline_s, tfb_nccl_result *r) {
    memset(r, 0, sizeof *r);
    r->status = TFB_NCCL_NOT_RUN;
    r->gpus = n > MAX_GPUS ? MAX_GPUS : n;
    nccl_job *j = calloc(1, sizeof *j); /* left behind, never freed, when the deadline passes */
    if (j) j->host = malloc(COUNT * sizeof(float));
    if (!j || !j->host) {
        snprintf(r->why, sizeof r->why, "out of memory");
        if (j) free(j->host);
        free(j);
        return r->status;
    }
    j->n = r->gpus;
    j->out = r;
    tfb_deadline_init(&j->dl);
    int run = api_load(&j->f, r->why, sizeof r->why) ? tfb_deadline_run(&j->dl, worker, j, deadline_s, mark_timeout) : 0;
    if (run > 0) *r = j->res; /* the thread was joined */
    if (run != 0) r->gpus = j->n;
    if (run < 0) r->seconds = deadline_s;
    if (run == 0 && !r->why[0]) snprintf(r->why, sizeof r->why, "cannot start a thread");
    if (run >= 0) {
        free(j->host);
        free(j);
    }
    return r->status;
}
