/* cuda_comm.cu — a communicator for the CUDA backend: NCCL for buffers in GPU memory, the wrapped MPI communicator
 * for host buffers, behind the one tfb_comm interface (bench/comm.h), so no caller chooses a transport.
 *
 * Each communicator (the world and every split) of two or more ranks owns an NCCL communicator of the same ranks,
 * bootstrapped over MPI (its rank 0 makes the id and broadcasts it), and a communication stream; a one-rank
 * communicator has none: its device collectives are copies or nothing, and a send or a receive on it is an error
 * (there is no peer). Every NCCL operation first waits for the work already queued on the compute stream (an event),
 * so it sees the gradients the backward pass wrote, and the compute stream then waits for the operation (another
 * event): the host never waits for a collective, so it keeps queueing work while the GPU communicates. Non-blocking
 * all-reduces (the data-parallel buckets, the tensor-parallel dX all-reduce) let the compute stream run on until
 * wait(). Failures surface where the host does wait, in the backend's sync and copies to the host: they poll
 * ncclCommGetAsyncError of every communicator (tfb_cuda_comms_poll), so a peer that died or an NCCL failure ends the
 * job with a message naming the rank, the oldest operation the GPU has not finished and the last one queued. A peer
 * that hangs is ended by tfbench's watchdog (bench/watchdog.c), which names the phase this rank's host is in and,
 * through tfb_cuda_comms_pending_text, the oldest collective the GPU has not finished: each communicator remembers
 * its last PENDING_RING operations with their completion events, and one lock guards those and the list of
 * communicators, since the watchdog reads both from its own thread. NCCL's send and receive match in issue order per
 * pair of ranks: the tag is not used (tfbench's pipeline schedules issue them in the same order on both sides).
 * Not here: the choice of algorithms or protocols (NCCL's own, steered by its NCCL_* variables).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <nccl.h>
#include "cuda_internal.h"
#include "../../bench/comm.h"

/* One NCCL operation queued on a communicator, for the hang report. */
typedef struct {
    const char *what;          /* "all-reduce", ... */
    unsigned long long number; /* this communicator's operation count, from 1 (the same on every member) */
    unsigned long long order;  /* the backend's count over all its communicators: which was queued first */
    cudaEvent_t done;          /* recorded on the communication stream after the operation */
    int recorded;              /* 0 while the host is still in the NCCL call (a blocking transport waits there) */
} pending_op;

/* Operations remembered per communicator, older ones forgotten: ten micro-batches of bert-large's tensor-parallel
 * collectives (four a layer, 100 in all), and a step's closing synchronisation finishes every one. */
#define PENDING_RING 1024

struct nccl_comm {
    tfb_comm *host;        /* the MPI communicator of the same ranks: host buffers, bootstrap, barrier */
    ncclComm_t nccl;       /* NULL for a one-rank communicator */
    cudaStream_t stream;   /* communication stream */
    cuda_ctx *be;          /* the compute stream's owner */
    cudaEvent_t ready;     /* compute work queued so far, for the communication stream to wait on */
    pending_op ring[PENDING_RING]; /* the last operations queued, operation k in ring[(k - 1) % PENDING_RING] */
    unsigned long long queued;     /* operations queued so far */
    nccl_comm *next;       /* the backend's list of communicators (polled for errors) */
};

/* Every backend's list of communicators and their rings, which the watchdog's thread reads (pending_text). */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
/* unchevron: namespace below */

typedef struct {
    int on_host;
    tfb_comm_request *host_req;
    cudaEvent_t done;      /* NULL: nothing to wait for (a one-rank communicator) */
} nccl_request;

static tfb_status nccl_check(ncclResult_t r, const char *call, const char *file, int line) {
    if (r == ncclSuccess || r == ncclInProgress) return TFB_OK;
    char detail[256];
    snprintf(detail, sizeof detail, "%s%s", ncclGetErrorString(r),
             r == ncclRemoteError ? " (a peer failed or exited)" : r == ncclSystemError ? " (network or OS error)" : "");
    tfb_cuda_report(call, file, line, detail);
    return TFB_ERR_COMM;
}
#define TFB_CHECK_NCCL(call) TFB_TRY(nccl_check((call), #call, __FILE__, __LINE__))

static nccl_comm *ctx_of(tfb_comm *c) { return (nccl_comm *)c->ctx; }

static int on_device(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Both buffers of a two-buffer operation must live on the same side: *dev = 1 for GPU memory. */
static tfb_status same_side(const void *send, const void *recv, const char *what, int *dev) {
    *dev = on_device(recv);
    if (*dev == on_device(send)) return TFB_OK;
    fprintf(stderr, "tfbench[rank %d]: %s between host and GPU memory (a bug in tfbench: both buffers must be on "
            "one side)\n", tfb_log_rank, what);
    return TFB_ERR_STATE;
}

static ncclDataType_t nccl_type(tfb_comm_type t) {
    return t == TFB_COMM_F64 ? ncclFloat64 : t == TFB_COMM_I32 ? ncclInt32 : t == TFB_COMM_U64 ? ncclUint64 : ncclFloat32;
}

static ncclRedOp_t nccl_op(tfb_comm_op op) { return op == TFB_MAX ? ncclMax : op == TFB_MIN ? ncclMin : ncclSum; }

static pending_op *newest(nccl_comm *n) { return &n->ring[(n->queued - 1) % PENDING_RING]; }

/* The ring's events, made with the communicator, so no step pays for them (none on a one-rank communicator). */
static tfb_status pending_open(nccl_comm *n) {
    for (int i = 0; n->nccl && i < PENDING_RING; i++)
        TFB_CHECK_CUDA(cudaEventCreateWithFlags(&n->ring[i].done, cudaEventDisableTiming));
    return TFB_OK;
}

/* `what` enters the ring as unfinished. */
static void pending_begin(nccl_comm *n, const char *what) {
    pending_op *p = &n->ring[n->queued % PENDING_RING];
    pending_op fresh = {what, n->queued + 1, n->be->comm_ops + 1, p->done, 0};
    pthread_mutex_lock(&pending_lock);
    *p = fresh;
    n->queued++;
    n->be->comm_ops++;
    pthread_mutex_unlock(&pending_lock);
}

/* The newest operation was queued: its event marks its end on the communication stream. */
static tfb_status pending_end(nccl_comm *n) {
    pending_op *p = newest(n);
    TFB_CHECK_CUDA(cudaEventRecord(p->done, n->stream));
    pthread_mutex_lock(&pending_lock);
    p->recorded = 1;
    pthread_mutex_unlock(&pending_lock);
    return TFB_OK;
}

/* The communication stream waits for everything queued on the compute stream so far, before `what`. */
static tfb_status after_compute(nccl_comm *n, const char *what) {
    pending_begin(n, what);
    TFB_CHECK_CUDA(cudaEventRecord(n->ready, n->be->stream));
    TFB_CHECK_CUDA(cudaStreamWaitEvent(n->stream, n->ready, 0));
    return TFB_OK;
}

/* The compute stream waits for `done` (recorded on the communication stream); the host does not. */
static tfb_status order_after(nccl_comm *n, cudaEvent_t done) {
    TFB_CHECK_CUDA(cudaStreamWaitEvent(n->be->stream, done, 0));
    return TFB_OK;
}

/* The operation just queued on the communication stream comes before the compute stream's next work. */
static tfb_status complete(tfb_comm *c) {
    nccl_comm *n = ctx_of(c);
    TFB_TRY(pending_end(n));
    return order_after(n, newest(n)->done);
}

/* The oldest unfinished operation over a backend's communicators, and how many are unfinished in all. */
typedef struct {
    pending_op op;
    int size, rank;    /* its communicator's */
    int forgotten;     /* it is the oldest its communicator remembers: an older one may be unfinished too */
    int unfinished;
} pending_report;

/* n's remembered operations, oldest first, into r (under pending_lock: no slot is rewritten while queried). */
static void pending_scan(const nccl_comm *n, pending_report *r) {
    unsigned long long first = n->queued > PENDING_RING ? n->queued - PENDING_RING + 1 : 1;
    for (unsigned long long k = first; k <= n->queued; k++) {
        const pending_op *p = &n->ring[(k - 1) % PENDING_RING];
        if (p->recorded && cudaEventQuery(p->done) != cudaErrorNotReady) continue;
        if (!r->unfinished++ || p->order < r->op.order) {
            r->op = *p;
            r->size = n->host->size;
            r->rank = n->host->rank;
            r->forgotten = k == first && first > 1;
        }
    }
}

/* The oldest unfinished operation of communicator `only`, or of every communicator of be when `only` is NULL. */
static pending_report pending_collect(const cuda_ctx *be, const nccl_comm *only) {
    pending_report r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&pending_lock);
    if (only) pending_scan(only, &r);
    else
        for (const nccl_comm *n = be->comms; n; n = n->next) pending_scan(n, &r);
    pthread_mutex_unlock(&pending_lock);
    return r;
}

/* Every communicator of the backend: an asynchronous NCCL error ends the wait the host is in. */
tfb_status tfb_cuda_comms_poll(cuda_ctx *be) {
    for (nccl_comm *n = be->comms; n; n = n->next) {
        ncclResult_t async = ncclSuccess;
        if (!n->nccl) continue;
        TFB_CHECK_NCCL(ncclCommGetAsyncError(n->nccl, &async));
        if (async == ncclSuccess || async == ncclInProgress) continue;
        pending_report r = pending_collect(be, n);
        char oldest[128] = ""; /* the operation that failed, on a GPU where the host has queued past it */
        if (r.unfinished)
            snprintf(oldest, sizeof oldest, "oldest unfinished: %s, operation %llu; ", r.op.what, r.op.number);
        fprintf(stderr, "tfbench[rank %d, cuda:%d]: NCCL failed on a communicator of %d ranks (%slast operation "
                "queued: %s): %s; ending the job\n", tfb_log_rank, be->device, n->host->size, oldest,
                n->queued ? newest(n)->what : "none", ncclGetErrorString(async));
        ncclCommAbort(n->nccl);
        n->nccl = NULL;
        return TFB_ERR_COMM;
    }
    return TFB_OK;
}

int tfb_cuda_comms_pending_text(cuda_ctx *be, char *buf, size_t len) {
    pending_report r = pending_collect(be, NULL);
    if (!r.unfinished) return 0;
    char older[96] = "";
    if (r.forgotten)
        snprintf(older, sizeof older, ", or one before it (a communicator remembers its last %d)", PENDING_RING);
    /* recorded: the host returned from NCCL and the device has not reached the operation's end; else the host is
     * still inside the NCCL call (a transport that blocks the host, or a thread other than the one waiting) */
    const char *where = r.op.recorded ? "queued on the device" : "the host still inside the NCCL call";
    snprintf(buf, len, "%s, operation %llu on a communicator of %d ranks (this rank is its rank %d), %s%s; %d "
             "collective%s unfinished in all", r.op.what, r.op.number, r.size, r.rank, where, older, r.unfinished,
             r.unfinished == 1 ? "" : "s");
    return 1;
}

static size_t type_size(tfb_comm_type t) { return t == TFB_COMM_F32 || t == TFB_COMM_I32 ? 4 : 8; }

/* A one-rank communicator has no NCCL communicator: its collectives are copies (or nothing), on the compute stream. */
static tfb_status alone_copy(nccl_comm *n, void *dst, const void *src, size_t count, tfb_comm_type t) {
    if (dst != src && count)
        TFB_CHECK_CUDA(cudaMemcpyAsync(dst, src, count * type_size(t), cudaMemcpyDeviceToDevice, n->be->stream));
    return TFB_OK;
}

static tfb_status nc_allreduce(tfb_comm *c, void *buf, size_t count, tfb_comm_type t, tfb_comm_op op) {
    nccl_comm *n = ctx_of(c);
    if (!on_device(buf)) return n->host->allreduce(n->host, buf, count, t, op);
    if (!n->nccl) return TFB_OK;
    TFB_TRY(after_compute(n, "all-reduce"));
    TFB_CHECK_NCCL(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), n->nccl, n->stream));
    return complete(c);
}

static tfb_status nc_iallreduce(tfb_comm *c, void *buf, size_t count, tfb_comm_type t, tfb_comm_op op,
                                tfb_comm_request **req) {
    nccl_comm *n = ctx_of(c);
    nccl_request *r = (nccl_request *)calloc(1, sizeof *r);
    TFB_CHECK_ALLOC(r);
    *req = (tfb_comm_request *)r;
    if (!on_device(buf)) {
        r->on_host = 1;
        return n->host->iallreduce(n->host, buf, count, t, op, &r->host_req);
    }
    if (!n->nccl) return TFB_OK; /* one rank: done already (no event) */
    TFB_TRY(after_compute(n, "all-reduce"));
    TFB_CHECK_NCCL(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), n->nccl, n->stream));
    TFB_TRY(pending_end(n));
    TFB_CHECK_CUDA(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    TFB_CHECK_CUDA(cudaEventRecord(r->done, n->stream));
    return TFB_OK;
}

static tfb_status nc_test(tfb_comm *c, tfb_comm_request *req, int *done) {
    nccl_request *r = (nccl_request *)req;
    if (r->on_host) {
        TFB_TRY(ctx_of(c)->host->test(ctx_of(c)->host, r->host_req, done));
        if (*done) free(r);
        return TFB_OK;
    }
    if (!r->done) { *done = 1; free(r); return TFB_OK; }
    cudaError_t e = cudaEventQuery(r->done);
    *done = e == cudaSuccess;
    if (e != cudaSuccess && e != cudaErrorNotReady) TFB_CHECK_CUDA(e);
    if (!*done) return TFB_OK;
    tfb_status st = order_after(ctx_of(c), r->done);
    cudaEventDestroy(r->done);
    free(r);
    return st;
}

static tfb_status nc_wait(tfb_comm *c, tfb_comm_request *req) {
    nccl_request *r = (nccl_request *)req;
    tfb_status st = r->on_host ? ctx_of(c)->host->wait(ctx_of(c)->host, r->host_req)
                    : r->done  ? order_after(ctx_of(c), r->done) : TFB_OK;
    if (r->done) cudaEventDestroy(r->done);
    free(r);
    return st;
}

static tfb_status nc_allgather(tfb_comm *c, const void *send, void *recv, size_t count, tfb_comm_type t) {
    nccl_comm *n = ctx_of(c);
    int dev;
    TFB_TRY(same_side(send, recv, "all-gather", &dev));
    if (!dev) return n->host->allgather(n->host, send, recv, count, t);
    if (!n->nccl) return alone_copy(n, recv, send, count, t);
    TFB_TRY(after_compute(n, "all-gather"));
    TFB_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(t), n->nccl, n->stream));
    return complete(c);
}

static tfb_status nc_reduce_scatter(tfb_comm *c, const void *send, void *recv, size_t count, tfb_comm_type t) {
    nccl_comm *n = ctx_of(c);
    int dev;
    TFB_TRY(same_side(send, recv, "reduce-scatter", &dev));
    if (!dev) return n->host->reduce_scatter(n->host, send, recv, count, t);
    if (!n->nccl) return alone_copy(n, recv, send, count, t);
    TFB_TRY(after_compute(n, "reduce-scatter"));
    TFB_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, n->nccl, n->stream));
    return complete(c);
}

static tfb_status nc_bcast(tfb_comm *c, void *buf, size_t count, tfb_comm_type t, int root) {
    nccl_comm *n = ctx_of(c);
    if (!on_device(buf)) return n->host->bcast(n->host, buf, count, t, root);
    if (!n->nccl) return TFB_OK;
    TFB_TRY(after_compute(n, "broadcast"));
    TFB_CHECK_NCCL(ncclBroadcast(buf, buf, count, nccl_type(t), root, n->nccl, n->stream));
    return complete(c);
}

/* A send or a receive pairs this rank with another: a one-rank communicator has none to pair with. */
static tfb_status has_peer(const nccl_comm *n, const char *what) {
    if (n->host->size > 1) return TFB_OK;
    fprintf(stderr, "tfbench[rank %d]: %s on a communicator of one rank (a bug in tfbench: there is no peer)\n",
            tfb_log_rank, what);
    return TFB_ERR_STATE;
}

static tfb_status nc_send(tfb_comm *c, const void *buf, size_t count, tfb_comm_type t, int peer, int tag) {
    nccl_comm *n = ctx_of(c);
    if (!on_device(buf)) return n->host->send(n->host, buf, count, t, peer, tag);
    TFB_TRY(has_peer(n, "a send"));
    TFB_TRY(after_compute(n, "send"));
    TFB_CHECK_NCCL(ncclSend(buf, count, nccl_type(t), peer, n->nccl, n->stream));
    return complete(c);
}

static tfb_status nc_recv(tfb_comm *c, void *buf, size_t count, tfb_comm_type t, int peer, int tag) {
    nccl_comm *n = ctx_of(c);
    if (!on_device(buf)) return n->host->recv(n->host, buf, count, t, peer, tag);
    TFB_TRY(has_peer(n, "a receive"));
    TFB_TRY(after_compute(n, "receive"));
    TFB_CHECK_NCCL(ncclRecv(buf, count, nccl_type(t), peer, n->nccl, n->stream));
    return complete(c);
}

static tfb_status nc_sendrecv(tfb_comm *c, const void *send, size_t ns, int to, void *recv, size_t nr, int from,
                              tfb_comm_type t, int tag) {
    nccl_comm *n = ctx_of(c);
    int dev = nr ? on_device(recv) : on_device(send);
    if (ns && nr) TFB_TRY(same_side(send, recv, "send/receive", &dev));
    if (!dev) return n->host->sendrecv(n->host, send, ns, to, recv, nr, from, t, tag);
    if (!n->nccl) return alone_copy(n, recv, send, nr < ns ? nr : ns, t); /* to and from itself */
    TFB_TRY(after_compute(n, "send/receive"));
    TFB_CHECK_NCCL(ncclGroupStart());
    if (ns) TFB_CHECK_NCCL(ncclSend(send, ns, nccl_type(t), to, n->nccl, n->stream));
    if (nr) TFB_CHECK_NCCL(ncclRecv(recv, nr, nccl_type(t), from, n->nccl, n->stream));
    TFB_CHECK_NCCL(ncclGroupEnd());
    return complete(c);
}

static tfb_status nc_barrier(tfb_comm *c) {
    nccl_comm *n = ctx_of(c);
    TFB_TRY(tfb_cuda_stream_wait(n->be));
    return n->host->barrier(n->host);
}

static void nc_abort(tfb_comm *c, int code) {
    nccl_comm *n = ctx_of(c);
    if (n->nccl) ncclCommAbort(n->nccl);
    n->nccl = NULL;
    n->host->abort(n->host, code);
}

static void comm_unlink(nccl_comm *n) {
    pthread_mutex_lock(&pending_lock);
    for (nccl_comm **p = &n->be->comms; *p; p = &(*p)->next)
        if (*p == n) { *p = n->next; break; }
    pthread_mutex_unlock(&pending_lock);
}

/* The NCCL communicator, events and stream of n (any of them may not exist yet). */
static void comm_release(nccl_comm *n) {
    if (n->nccl) ncclCommDestroy(n->nccl);
    for (int i = 0; i < PENDING_RING; i++)
        if (n->ring[i].done) cudaEventDestroy(n->ring[i].done);
    if (n->ready) cudaEventDestroy(n->ready);
    if (n->stream) cudaStreamDestroy(n->stream);
}

static void nc_destroy(tfb_comm *c) {
    nccl_comm *n = ctx_of(c);
    comm_unlink(n);
    comm_release(n);
    n->host->destroy(n->host);
    free(n);
    free(c);
}

static tfb_status nc_wrap(cuda_ctx *be, tfb_comm *host, tfb_comm **out);

static tfb_status nc_split(tfb_comm *c, int color, int key, tfb_comm **out) {
    tfb_comm *host = NULL;
    *out = NULL;
    TFB_TRY(ctx_of(c)->host->split(ctx_of(c)->host, color, key, &host));
    if (!host) return TFB_OK;
    tfb_status st = nc_wrap(ctx_of(c)->be, host, out);
    if (st != TFB_OK) host->destroy(host);
    return st;
}

/* NCCL communicator of host's ranks: host rank 0 makes the id, every rank joins (collective over host). */
static tfb_status nccl_open(nccl_comm *n) {
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    if (n->host->size == 1) return TFB_OK;
    memset(&id, 0, sizeof id);
    if (n->host->rank == 0) TFB_CHECK_NCCL(ncclGetUniqueId(&id));
    TFB_TRY(n->host->bcast(n->host, &id, sizeof id / 8, TFB_COMM_U64, 0));
    TFB_CHECK_CUDA(cudaSetDevice(n->be->device));
    TFB_CHECK_NCCL(ncclCommInitRank(&comm, n->host->size, id, n->host->rank));
    n->nccl = comm; /* only a communicator that was made is destroyed on a later failure */
    return TFB_OK;
}

static tfb_status nc_wrap(cuda_ctx *be, tfb_comm *host, tfb_comm **out) {
    tfb_comm *c = (tfb_comm *)calloc(1, sizeof *c);
    nccl_comm *n = (nccl_comm *)calloc(1, sizeof *n);
    if (!c || !n) { free(c); free(n); return TFB_ERR_NOMEM; }
    n->host = host;
    n->be = be;
    *c = tfb_comm{};
    c->rank = host->rank; c->size = host->size; c->ctx = n;
    c->allreduce = nc_allreduce; c->iallreduce = nc_iallreduce; c->test = nc_test; c->wait = nc_wait;
    c->allgather = nc_allgather; c->reduce_scatter = nc_reduce_scatter; c->bcast = nc_bcast;
    c->send = nc_send; c->recv = nc_recv; c->sendrecv = nc_sendrecv; c->barrier = nc_barrier;
    c->split = nc_split; c->abort = nc_abort; c->destroy = nc_destroy;
    tfb_status st = TFB_OK;
    if (cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming) != cudaSuccess)
        st = TFB_ERR_BACKEND;
    if (st == TFB_OK) st = nccl_open(n);
    if (st == TFB_OK) st = pending_open(n);
    if (st != TFB_OK) {
        comm_release(n);
        free(n);
        free(c);
        return st;
    }
    pthread_mutex_lock(&pending_lock);
    n->next = be->comms;
    be->comms = n;
    pthread_mutex_unlock(&pending_lock);
    *out = c;
    return TFB_OK;
}

/* backend hook: a communicator over host's ranks that also moves this backend's memory (host stays owned by the
 * caller: the world communicator is finalised by MPI, not destroyed). */
tfb_status tfb_cuda_comm_wrap(void *ctx, tfb_comm *host, tfb_comm **out) {
    return nc_wrap((cuda_ctx *)ctx, host, out);
}
