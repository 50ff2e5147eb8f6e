/* gpu_bw.c — see gpu_bw.h. Driver API signatures are declared here (CUresult and CUdevice are ints, contexts and
 * streams pointers, a device pointer an unsigned 64-bit integer), so no CUDA header is needed to build it. Every
 * figure is bytes moved over the host time from the first queued copy to the synchronisation after the last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_bw.h"
#include "deadline.h"
#include "gpu_probe.h"
#include "../bench/clock.h"

typedef unsigned long long devptr;
typedef struct {
    int (*cuDeviceGet)(int *, int);
    int (*cuDeviceCanAccessPeer)(int *, int, int);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuCtxEnablePeerAccess)(void *, unsigned);
    int (*cuCtxDisablePeerAccess)(void *);
    int (*cuMemAlloc)(devptr *, size_t);
    int (*cuMemAllocHost)(void **, size_t);
    int (*cuMemcpyPeerAsync)(devptr, void *, devptr, void *, size_t, void *);
    int (*cuMemcpyHtoDAsync)(devptr, const void *, size_t, void *);
    int (*cuMemcpyDtoHAsync)(void *, devptr, size_t, void *);
    int (*cuStreamCreate)(void **, unsigned);
    int (*cuStreamSynchronize)(void *);
    int (*cuMemFree)(devptr);
    int (*cuMemFreeHost)(void *);
} driver;

typedef struct {
    tfb_deadline dl;            /* first: shared by the worker and the waiter */
    driver cu;
    tfb_gpu_bw work;            /* the worker's figures, published to *out under dl.mu after each step */
    tfb_gpu_bw *out;
    void *ctx[TFB_BW_MAX_GPUS], *stream[TFB_BW_MAX_GPUS];
    devptr src[TFB_BW_MAX_GPUS], dst[TFB_BW_MAX_GPUS];
    void *host;                 /* pinned, `bytes` */
    char failed[120];           /* the driver call that failed */
} bw_job;

static int driver_load(driver *cu, char *why, size_t len) {
    static const char *const names[] = {"cuDeviceGet", "cuDeviceCanAccessPeer", "cuDevicePrimaryCtxRetain",
                                        "cuCtxSetCurrent", "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess",
                                        "cuMemAlloc_v2", "cuMemAllocHost_v2", "cuMemcpyPeerAsync",
                                        "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuStreamCreate",
                                        "cuStreamSynchronize", "cuMemFree_v2", "cuMemFreeHost"};
    void **const slots[] = {(void **)&cu->cuDeviceGet, (void **)&cu->cuDeviceCanAccessPeer,
                            (void **)&cu->cuDevicePrimaryCtxRetain, (void **)&cu->cuCtxSetCurrent,
                            (void **)&cu->cuCtxEnablePeerAccess, (void **)&cu->cuCtxDisablePeerAccess,
                            (void **)&cu->cuMemAlloc, (void **)&cu->cuMemAllocHost, (void **)&cu->cuMemcpyPeerAsync,
                            (void **)&cu->cuMemcpyHtoDAsync, (void **)&cu->cuMemcpyDtoHAsync,
                            (void **)&cu->cuStreamCreate, (void **)&cu->cuStreamSynchronize, (void **)&cu->cuMemFree,
                            (void **)&cu->cuMemFreeHost};
    return tfb_driver_load(names, slots, (int)(sizeof names / sizeof names[0]), why, len);
}

/* Runs a driver call; on failure names it in j->failed and returns 0 from the calling function. */
#define CU(j, fn, ...)                                                                                  \
    do {                                                                                                \
        int e_ = (j)->cu.fn(__VA_ARGS__);                                                               \
        if (e_) { snprintf((j)->failed, sizeof (j)->failed, "%s failed (error %d)", #fn, e_); return 0; } \
    } while (0)

static void publish(bw_job *j) {
    pthread_mutex_lock(&j->dl.mu);
    if (!j->dl.abandoned) *j->out = j->work;
    pthread_mutex_unlock(&j->dl.mu);
}

static int gpu_open(bw_job *j, int g) {
    int dev;
    size_t bytes = j->work.bytes;
    CU(j, cuDeviceGet, &dev, g);
    CU(j, cuDevicePrimaryCtxRetain, &j->ctx[g], dev);
    CU(j, cuCtxSetCurrent, j->ctx[g]);
    CU(j, cuStreamCreate, &j->stream[g], 0);
    CU(j, cuMemAlloc, &j->src[g], bytes);
    CU(j, cuMemAlloc, &j->dst[g], bytes);
    return 1;
}

/* GB/s of `copies` copies of `bytes` queued by fn, 1 untimed first; 0 when a call failed. */
static int host_copies(bw_job *j, int g, int to_device, double *gbs) {
    size_t bytes = j->work.bytes;
    CU(j, cuCtxSetCurrent, j->ctx[g]);
    for (int i = 0; i <= j->work.iters; i++) {
        if (i == 1) { CU(j, cuStreamSynchronize, j->stream[g]); *gbs = tfb_clock_s(); }
        if (to_device) CU(j, cuMemcpyHtoDAsync, j->dst[g], j->host, bytes, j->stream[g]);
        else CU(j, cuMemcpyDtoHAsync, j->host, j->src[g], bytes, j->stream[g]);
    }
    CU(j, cuStreamSynchronize, j->stream[g]);
    *gbs = (double)bytes * j->work.iters / (tfb_clock_s() - *gbs) / 1e9;
    return 1;
}

/* a -> b (and b -> a at once when both) `bytes` each, iters times after one untimed round: GB/s summed. */
static int peer_copies(bw_job *j, int a, int b, size_t bytes, int both, double *seconds) {
    double t0 = 0;
    for (int i = 0; i <= j->work.iters; i++) {
        if (i == 1) {
            CU(j, cuStreamSynchronize, j->stream[a]);
            CU(j, cuStreamSynchronize, j->stream[b]);
            t0 = tfb_clock_s();
        }
        CU(j, cuMemcpyPeerAsync, j->dst[b], j->ctx[b], j->src[a], j->ctx[a], bytes, j->stream[a]);
        if (both) CU(j, cuMemcpyPeerAsync, j->dst[a], j->ctx[a], j->src[b], j->ctx[b], bytes, j->stream[b]);
    }
    CU(j, cuStreamSynchronize, j->stream[a]);
    CU(j, cuStreamSynchronize, j->stream[b]);
    *seconds = (tfb_clock_s() - t0) / j->work.iters;
    return 1;
}

/* Peer access from a's context to b's memory on or off (an already-enabled or not-enabled state is fine). */
static int set_peer(bw_job *j, int a, int b, int on) {
    CU(j, cuCtxSetCurrent, j->ctx[a]);
    int e = on ? j->cu.cuCtxEnablePeerAccess(j->ctx[b], 0) : j->cu.cuCtxDisablePeerAccess(j->ctx[b]);
    if (e && e != 704 && e != 705) { snprintf(j->failed, sizeof j->failed, "peer access %s failed (error %d)", on ? "on" : "off", e); return 0; }
    return 1; /* 704: already enabled, 705: not enabled */
}

static int pair_measure(bw_job *j, int a, int b) {
    tfb_gpu_bw *w = &j->work;
    double s;
    int devs[2];
    CU(j, cuDeviceGet, &devs[0], a);
    CU(j, cuDeviceGet, &devs[1], b);
    CU(j, cuDeviceCanAccessPeer, &w->peer[a][b], devs[0], devs[1]);
    if (!set_peer(j, a, b, 0) || !set_peer(j, b, a, 0) || !peer_copies(j, a, b, w->bytes, 0, &s)) return 0;
    w->no_peer[a][b] = (double)w->bytes / s / 1e9;
    if (w->peer[a][b] && (!set_peer(j, a, b, 1) || !set_peer(j, b, a, 1))) return 0;
    if (!peer_copies(j, a, b, w->bytes, 0, &s)) return 0;
    w->one_way[a][b] = (double)w->bytes / s / 1e9;
    if (!peer_copies(j, a, b, w->bytes, 1, &s)) return 0;
    w->both[a][b] = 2.0 * (double)w->bytes / s / 1e9;
    if (!peer_copies(j, a, b, 4, 0, &s)) return 0;
    w->latency_us[a][b] = s * 1e6;
    return 1;
}

static int measure_all(bw_job *j) {
    tfb_gpu_bw *w = &j->work;
    CU(j, cuMemAllocHost, &j->host, w->bytes);
    memset(j->host, 1, w->bytes);
    for (int g = 0; g < w->n; g++) {
        if (!gpu_open(j, g) || !host_copies(j, g, 1, &w->h2d[g]) || !host_copies(j, g, 0, &w->d2h[g])) return 0;
        publish(j);
    }
    for (int a = 0; a < w->n; a++)
        for (int b = 0; b < w->n; b++) {
            if (a == b) continue;
            if (!pair_measure(j, a, b)) return 0;
            publish(j);
        }
    return 1;
}

static void release_all(bw_job *j) {
    for (int g = 0; g < j->work.n; g++) {
        if (!j->ctx[g] || j->cu.cuCtxSetCurrent(j->ctx[g])) continue;
        if (j->src[g]) j->cu.cuMemFree(j->src[g]);
        if (j->dst[g]) j->cu.cuMemFree(j->dst[g]);
    }
    if (j->host) j->cu.cuMemFreeHost(j->host);
}

static void *worker(void *arg) {
    bw_job *j = arg;
    j->work.complete = measure_all(j);
    release_all(j);
    if (!j->work.complete) snprintf(j->work.why, sizeof j->work.why, "%s", j->failed);
    publish(j);
    tfb_deadline_finish(&j->dl);
    return NULL;
}

static void mark_timeout(void *arg) {
    bw_job *j = arg;
    snprintf(j->out->why, sizeof j->out->why, "a copy did not finish within the deadline (a PCIe ACS/IOMMU "
             "setting that blocks peer traffic is the usual cause)");
}

int tfb_gpu_bw_measure(int n, size_t bytes, int iters, double deadline_s, tfb_gpu_bw *r) {
    memset(r, 0, sizeof *r);
    r->n = n < TFB_BW_MAX_GPUS ? n : TFB_BW_MAX_GPUS;
    r->bytes = bytes;
    r->iters = iters;
    bw_job *j = calloc(1, sizeof *j); /* outlives this call when a copy hangs, so never freed on that path */
    if (!j) { snprintf(r->why, sizeof r->why, "out of memory"); return 0; }
    j->work = *r;
    j->out = r;
    tfb_deadline_init(&j->dl);
    int run = driver_load(&j->cu, r->why, sizeof r->why) ? tfb_deadline_run(&j->dl, worker, j, deadline_s, mark_timeout)
                                                         : 0;
    if (run == 0 && !r->why[0]) snprintf(r->why, sizeof r->why, "cannot start a thread");
    if (run >= 0) free(j); /* finished or never started: ours to free (device memory goes with the process) */
    return run == 1 && r->complete;
}
