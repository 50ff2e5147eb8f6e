/* gpu_p2p.c — see gpu_p2p.h. Driver API signatures are declared here (CUresult and CUdevice are ints, a context
 * a pointer, a device pointer an unsigned 64-bit integer), so no CUDA header is needed to build it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_p2p.h"
#include "deadline.h"
#include "gpu_probe.h"
#include "../bench/clock.h"

enum { COPY_BYTES = 1 << 20, PEER_ACCESS_ALREADY_ENABLED = 704 };

typedef unsigned long long devptr;
typedef struct {
    int (*cuDeviceGet)(int *, int);
    int (*cuDeviceCanAccessPeer)(int *, int, int);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuDevicePrimaryCtxRelease)(int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuCtxEnablePeerAccess)(void *, unsigned);
    int (*cuMemAlloc)(devptr *, size_t);
    int (*cuMemFree)(devptr);
    int (*cuMemcpyHtoD)(devptr, const void *, size_t);
    int (*cuMemcpyDtoH)(void *, devptr, size_t);
    int (*cuMemcpyPeer)(devptr, void *, devptr, void *, size_t);
    int (*cuCtxSynchronize)(void);
} driver;

typedef struct {
    tfb_deadline dl;           /* first: the thread's view and the waiter's */
    driver cu;
    tfb_p2p_result *r;
    int current;
    unsigned char *src, *dst;  /* host buffers, COPY_BYTES each */
} p2p_job;

static int driver_load(driver *cu, char *why, size_t len) {
    static const char *const names[] = {"cuDeviceGet", "cuDeviceCanAccessPeer", "cuDevicePrimaryCtxRetain",
                                        "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxEnablePeerAccess",
                                        "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
                                        "cuMemcpyPeer", "cuCtxSynchronize"};
    void **const slots[] = {(void **)&cu->cuDeviceGet, (void **)&cu->cuDeviceCanAccessPeer,
                            (void **)&cu->cuDevicePrimaryCtxRetain, (void **)&cu->cuDevicePrimaryCtxRelease,
                            (void **)&cu->cuCtxSetCurrent, (void **)&cu->cuCtxEnablePeerAccess,
                            (void **)&cu->cuMemAlloc, (void **)&cu->cuMemFree, (void **)&cu->cuMemcpyHtoD,
                            (void **)&cu->cuMemcpyDtoH, (void **)&cu->cuMemcpyPeer, (void **)&cu->cuCtxSynchronize};
    return tfb_driver_load(names, slots, (int)(sizeof names / sizeof names[0]), why, len);
}

/* Runs a driver call; on failure records "call: error N" in the pair and returns from the calling function. */
#define CU(pair, fn, ...)                                                                            \
    do {                                                                                             \
        int e_ = (fn)(__VA_ARGS__);                                                                  \
        if (e_) {                                                                                    \
            snprintf((pair)->call, sizeof (pair)->call, "%s: error %d", &(#fn)[4], e_); /* no "cu->" */ \
            return TFB_P2P_CALL_FAILED;                                                              \
        }                                                                                            \
    } while (0)

/* One direction: pattern into src's buffer, peer copy to dst's, back to the host, compared. */
static tfb_p2p_status copy_one(p2p_job *j, tfb_p2p_pair *p, void *ctx_src, devptr from, void *ctx_dst, devptr to,
                               unsigned seed) {
    driver *cu = &j->cu;
    for (size_t i = 0; i < COPY_BYTES; i++) j->src[i] = (unsigned char)(i * 31u + seed);
    memset(j->dst, 0, COPY_BYTES);
    CU(p, cu->cuCtxSetCurrent, ctx_src);
    CU(p, cu->cuMemcpyHtoD, from, j->src, COPY_BYTES);
    CU(p, cu->cuMemcpyPeer, to, ctx_dst, from, ctx_src, COPY_BYTES);
    CU(p, cu->cuCtxSynchronize);
    CU(p, cu->cuCtxSetCurrent, ctx_dst);
    CU(p, cu->cuMemcpyDtoH, j->dst, to, COPY_BYTES);
    return memcmp(j->src, j->dst, COPY_BYTES) == 0 ? TFB_P2P_OK : TFB_P2P_WRONG_DATA;
}

static void enable_peer(driver *cu, void *ctx, void *peer_ctx, int possible) {
    if (possible && cu->cuCtxSetCurrent(ctx) == 0) (void)cu->cuCtxEnablePeerAccess(peer_ctx, 0); /* 704: already enabled */
}

static tfb_p2p_status pair_run(p2p_job *j, tfb_p2p_pair *p) {
    driver *cu = &j->cu;
    int da, db;
    void *ca, *cb;
    devptr ba = 0, bb = 0;
    CU(p, cu->cuDeviceGet, &da, p->a);
    CU(p, cu->cuDeviceGet, &db, p->b);
    CU(p, cu->cuDeviceCanAccessPeer, &p->access_ab, da, db);
    CU(p, cu->cuDeviceCanAccessPeer, &p->access_ba, db, da);
    CU(p, cu->cuDevicePrimaryCtxRetain, &ca, da);
    CU(p, cu->cuDevicePrimaryCtxRetain, &cb, db);
    enable_peer(cu, ca, cb, p->access_ab);
    enable_peer(cu, cb, ca, p->access_ba);
    CU(p, cu->cuCtxSetCurrent, ca);
    CU(p, cu->cuMemAlloc, &ba, COPY_BYTES);
    CU(p, cu->cuCtxSetCurrent, cb);
    CU(p, cu->cuMemAlloc, &bb, COPY_BYTES);
    tfb_p2p_status st = copy_one(j, p, ca, ba, cb, bb, 7u);
    if (st == TFB_P2P_OK) st = copy_one(j, p, cb, bb, ca, ba, 101u);
    if (cu->cuCtxSetCurrent(ca) == 0) cu->cuMemFree(ba);
    if (cu->cuCtxSetCurrent(cb) == 0) cu->cuMemFree(bb);
    cu->cuDevicePrimaryCtxRelease(da);
    cu->cuDevicePrimaryCtxRelease(db);
    return st;
}

static void *worker(void *arg) {
    p2p_job *j = arg;
    for (int i = 0;; i++) {
        pthread_mutex_lock(&j->dl.mu);
        int more = i < j->r->n_pairs;
        tfb_p2p_pair p = more ? j->r->pair[i] : (tfb_p2p_pair){0}; /* worked on privately: see below */
        if (more) j->current = i;
        pthread_mutex_unlock(&j->dl.mu);
        if (!more) break;
        double t0 = tfb_clock_s();
        p.status = pair_run(j, &p);
        p.seconds = tfb_clock_s() - t0;
        pthread_mutex_lock(&j->dl.mu);
        int gone = j->dl.abandoned;
        if (!gone) j->r->pair[i] = p;
        pthread_mutex_unlock(&j->dl.mu);
        if (gone) return NULL; /* the caller gave up on us: its result must not change */
    }
    tfb_deadline_finish(&j->dl);
    return NULL;
}

/* Under the deadline's lock when it passed: the pair under way timed out. */
static void mark_timeout(void *arg) {
    p2p_job *j = arg;
    j->r->pair[j->current].status = TFB_P2P_TIMED_OUT;
}

tfb_p2p_status tfb_p2p_check(int n, double deadline_s, tfb_p2p_result *r) {
    memset(r, 0, sizeof *r);
    if (n > TFB_P2P_MAX_GPUS) n = TFB_P2P_MAX_GPUS;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) r->pair[r->n_pairs++] = (tfb_p2p_pair){.a = a, .b = b, .status = TFB_P2P_NOT_RUN};
    /* the job outlives this call when a copy hangs, so it is never freed on that path */
    p2p_job *j = calloc(1, sizeof *j);
    if (j) j->src = malloc(COPY_BYTES), j->dst = malloc(COPY_BYTES);
    if (!j || !j->src || !j->dst) {
        snprintf(r->why, sizeof r->why, "out of memory");
        if (j) { free(j->src); free(j->dst); }
        free(j);
        return TFB_P2P_NOT_RUN;
    }
    j->r = r;
    tfb_deadline_init(&j->dl);
    int run = driver_load(&j->cu, r->why, sizeof r->why) ? tfb_deadline_run(&j->dl, worker, j, deadline_s, mark_timeout)
                                                         : 0;
    if (run == 0 && !r->why[0]) snprintf(r->why, sizeof r->why, "cannot start a thread");
    tfb_p2p_status worst = run == 0 ? TFB_P2P_NOT_RUN : TFB_P2P_OK;
    for (int i = 0; run != 0 && i < r->n_pairs; i++)
        if (r->pair[i].status > worst) worst = r->pair[i].status;
    if (run >= 0) { /* finished or never started: the job is ours to free */
        free(j->src);
        free(j->dst);
        free(j);
    }
    return worst;
}
