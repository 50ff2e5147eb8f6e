/* emu_nccl.c — NCCL's calls that kernels/cuda/cuda_comm.cu makes, done with MPI on host memory, so tfbench_emu
 * (the CUDA backend's code on the emulator, where device memory is host memory) runs its communicator on several
 * ranks: the bootstrap of every (sub-)communicator from a broadcast id, the collectives with NCCL's counts and
 * in-place rules, and grouped sends and receives (one communicator and one stream a group: NCCL allows several, tfbench
 * does not use them, and a group that mixes them is refused rather than run on the first's). A call only queues its
 * operation on its stream (tfb_emu_defer); the emulator runs it when something needs it (tests/emu/cuda_emu.cpp), so
 * the ordering cuda_comm.cu builds with events is exercised: work that reads a result without waiting for it sees the
 * old data. A failure while it runs is the communicator's asynchronous error. NCCL's algorithms are not emulated.
 *
 * The id names the rank that made it (the communicator's rank 0, in MPI_COMM_WORLD) and a serial number; every other
 * member sends its world rank to the maker, which answers with the members' world ranks in communicator order, and
 * the members make an MPI communicator of exactly those ranks (MPI_Comm_create_group, collective over them alone).
 * The bootstrap's tags start at 20000, above tfbench's own. Test hooks: EMU_NCCL_ASYNC_ERROR=N makes
 * ncclCommGetAsyncError of a communicator that has had an operation report error N, as NCCL does when a peer has
 * failed during one; EMU_NCCL_WRONG=1 adds 1 to the first element of every FP32 all-reduce's result on the
 * communicator's rank 0 (so a test sees the device collectives go through here).
 */
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The emulator's (tests/emu/cuda_emu.cpp): run(arg) deferred to stream s (at once for the compute stream, 0), and
 * the host's wait for every deferred work. */
void tfb_emu_defer(cudaStream_t s, void (*run)(void *), void *arg);
void tfb_emu_flush_all(void);

struct ncclComm {
    MPI_Comm mc;         /* the members, ranked as in NCCL */
    int rank, size;
    unsigned long ops;   /* operations queued, for EMU_NCCL_ASYNC_ERROR */
    ncclResult_t async;  /* the first failure of an operation run, for ncclCommGetAsyncError */
    int aborted;         /* ncclCommAbort: its operations not yet run are dropped */
};

enum { TAG0 = 20000, TAGS = 10000, MAX_GROUP = 64 };

typedef struct {
    int send;             /* 1: send, 0: receive */
    void *buf;
    size_t count;
    ncclDataType_t type;
    int peer;
    ncclComm_t comm;
} emu_p2p;

static struct {
    int depth;                 /* ncclGroupStart nesting */
    int n;
    emu_p2p ops[MAX_GROUP];    /* sends and receives queued in the group */
    cudaStream_t stream;       /* the first one's */
} G;

typedef enum { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BCAST, OP_P2P } op_kind;

/* An operation as queued; it reads its buffers when it runs, as NCCL's kernel does. */
typedef struct {
    op_kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    ncclComm_t comm;     /* OP_P2P: the first send's or receive's */
    int n;               /* OP_P2P: sends and receives, posted together and then waited for */
    emu_p2p p2p[];
} emu_op;

typedef struct {
    uint32_t magic, maker, serial;
} emu_id;

#define EMU_ID_MAGIC 0x454d5549u

static MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclFloat64: return MPI_DOUBLE;
    case ncclInt32: return MPI_INT;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    default: return MPI_DATATYPE_NULL;
    }
}

static size_t type_size(ncclDataType_t t) { return t == ncclFloat64 || t == ncclUint64 ? 8 : 4; }

static MPI_Op mpi_op(ncclRedOp_t op) {
    return op == ncclSum ? MPI_SUM : op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : MPI_OP_NULL;
}

static ncclResult_t mpi_result(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated NCCL)";
    case ncclSystemError: return "unhandled system error (emulated NCCL)";
    default: return "error (emulated NCCL)";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static uint32_t serial;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    emu_id e = {EMU_ID_MAGIC, (uint32_t)me, serial++};
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &e, sizeof e);
    return ncclSuccess;
}

/* world[r] = the world rank of member r: the members tell the maker theirs, it answers with all of them. */
static ncclResult_t members_gather(const emu_id *e, int nranks, int rank, int *world) {
    int me, tag = TAG0 + (int)(e->serial % TAGS), rc = MPI_SUCCESS;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (rank != 0) {
        int mine[2] = {rank, me};
        rc = MPI_Send(mine, 2, MPI_INT, (int)e->maker, tag, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS)
            rc = MPI_Recv(world, nranks, MPI_INT, (int)e->maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return mpi_result(rc);
    }
    world[0] = me;
    for (int i = 1; i < nranks && rc == MPI_SUCCESS; i++) {
        int theirs[2];
        MPI_Status st;
        rc = MPI_Recv(theirs, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st);
        if (rc == MPI_SUCCESS && (theirs[0] < 1 || theirs[0] >= nranks || theirs[1] != st.MPI_SOURCE))
            return ncclInvalidArgument;
        if (rc == MPI_SUCCESS) world[theirs[0]] = theirs[1];
    }
    for (int i = 1; i < nranks && rc == MPI_SUCCESS; i++)
        rc = MPI_Send(world, nranks, MPI_INT, world[i], tag, MPI_COMM_WORLD);
    return mpi_result(rc);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    emu_id e;
    memcpy(&e, id.internal, sizeof e);
    if (e.magic != EMU_ID_MAGIC || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    int *world = malloc((size_t)nranks * sizeof *world);
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!world || !c) { free(world); free(c); return ncclSystemError; }
    ncclResult_t r = members_gather(&e, nranks, rank, world);
    MPI_Group all, mine;
    if (r == ncclSuccess) {
        MPI_Comm_group(MPI_COMM_WORLD, &all);
        MPI_Group_incl(all, nranks, world, &mine);
        r = mpi_result(MPI_Comm_create_group(MPI_COMM_WORLD, mine, TAG0 + (int)(e.serial % TAGS), &c->mc));
        MPI_Group_free(&mine);
        MPI_Group_free(&all);
    }
    free(world);
    if (r != ncclSuccess) { free(c); return r; }
    MPI_Comm_rank(c->mc, &c->rank);
    MPI_Comm_size(c->mc, &c->size);
    if (c->rank != rank || c->size != nranks) { MPI_Comm_free(&c->mc); free(c); return ncclInternalError; }
    *comm = c;
    return ncclSuccess;
}

/* As NCCL's, it lets the operations queued so far finish first. */
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    tfb_emu_flush_all();
    MPI_Comm_free(&comm->mc);
    free(comm);
    return ncclSuccess;
}

/* An aborted communicator is left to MPI_Finalize: freeing its MPI communicator would wait for peers that may be
 * gone. Its operations not yet run are dropped; they still point to it, so it is not freed either. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm) comm->aborted = 1;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
    const char *v = getenv("EMU_NCCL_ASYNC_ERROR");
    if (!comm) return ncclInvalidArgument;
    if (comm->async != ncclSuccess) *async = comm->async;
    else *async = v && v[0] && comm->ops ? (ncclResult_t)atoi(v) : ncclSuccess;
    return ncclSuccess;
}

static emu_op *op_new(op_kind kind, const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                      int n) {
    emu_op *o = calloc(1, sizeof *o + (size_t)n * sizeof(emu_p2p));
    if (!o) return NULL;
    o->kind = kind;
    o->send = send;
    o->recv = recv;
    o->count = count;
    o->type = t;
    o->comm = comm;
    o->n = n;
    return o;
}

static int run_allreduce(const emu_op *o) {
    ncclComm_t comm = o->comm;
    int rc = MPI_Allreduce(o->send == o->recv ? MPI_IN_PLACE : o->send, o->recv, (int)o->count, mpi_type(o->type),
                           mpi_op(o->op), comm->mc);
    const char *wrong = getenv("EMU_NCCL_WRONG");
    if (rc == MPI_SUCCESS && wrong && atoi(wrong) == 1 && o->type == ncclFloat32 && comm->rank == 0 && o->count > 0)
        ((float *)o->recv)[0] += 1.0f;
    return rc;
}

/* recv (count * size) = every member's send (count), in rank order; in place when send is this rank's block. */
static int run_allgather(const emu_op *o) {
    const char *mine = (const char *)o->recv + (size_t)o->comm->rank * o->count * type_size(o->type);
    return MPI_Allgather(o->send == mine ? MPI_IN_PLACE : o->send, (int)o->count, mpi_type(o->type), o->recv,
                         (int)o->count, mpi_type(o->type), o->comm->mc);
}

/* recv (count) = this rank's block of the sum of every member's send (count * size); recv may lie in send (NCCL's
 * in place puts it at this rank's block), so send is copied first when they overlap. */
static int run_reduce_scatter(const emu_op *o) {
    size_t all = o->count * (size_t)o->comm->size * type_size(o->type);
    const char *s = o->send, *r = o->recv;
    const void *send = o->send;
    void *copy = NULL;
    if (r + o->count * type_size(o->type) > s && r < s + all) {
        if (!(copy = malloc(all))) return MPI_ERR_NO_MEM;
        memcpy(copy, send, all);
        send = copy;
    }
    int rc = MPI_Reduce_scatter_block(send, o->recv, (int)o->count, mpi_type(o->type), mpi_op(o->op), o->comm->mc);
    free(copy);
    return rc;
}

static int run_bcast(const emu_op *o) {
    if (o->comm->rank == o->root && o->send != o->recv)
        memmove(o->recv, o->send, o->count * type_size(o->type));
    return MPI_Bcast(o->recv, (int)o->count, mpi_type(o->type), o->root, o->comm->mc);
}

/* The sends and receives, posted together and then waited for (so a pair of ranks may swap). */
/* NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker): it does not follow requests through loops; every request
 * posted in the first loop is waited for in the second */
static int run_p2p(const emu_op *o) {
    MPI_Request req[MAX_GROUP];
    int rc = MPI_SUCCESS, posted = 0;
    while (posted < o->n && rc == MPI_SUCCESS) {
        const emu_p2p *p = &o->p2p[posted];
        MPI_Datatype t = mpi_type(p->type);
        if (p->send) rc = MPI_Isend(p->buf, (int)p->count, t, p->peer, 0, p->comm->mc, &req[posted]);
        else rc = MPI_Irecv(p->buf, (int)p->count, t, p->peer, 0, p->comm->mc, &req[posted]);
        posted += rc == MPI_SUCCESS;
    }
    for (int i = 0; i < posted; i++) {
        int w = MPI_Wait(&req[i], MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS) rc = w;
    }
    return rc;
}
/* NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker) */

/* Runs a queued operation (the emulator calls it when its stream's work is needed); a failure is the
 * communicator's asynchronous error. */
static void run_op(void *arg) {
    emu_op *o = arg;
    ncclComm_t c = o->comm;
    if (!c->aborted) {
        int rc = o->kind == OP_ALLREDUCE ? run_allreduce(o) : o->kind == OP_ALLGATHER ? run_allgather(o)
               : o->kind == OP_REDUCE_SCATTER ? run_reduce_scatter(o) : o->kind == OP_BCAST ? run_bcast(o)
               : run_p2p(o);
        if (rc != MPI_SUCCESS && c->async == ncclSuccess) c->async = ncclSystemError;
    }
    free(o);
}

static ncclResult_t queue(emu_op *o, cudaStream_t stream) {
    if (!o) return ncclSystemError;
    o->comm->ops++;
    tfb_emu_defer(stream, run_op, o);
    return ncclSuccess;
}

/* An all-reduce or a reduce-scatter. */
static ncclResult_t queue_reduction(op_kind kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (!comm || mpi_type(t) == MPI_DATATYPE_NULL || mpi_op(op) == MPI_OP_NULL) return ncclInvalidArgument;
    emu_op *o = op_new(kind, send, recv, count, t, comm, 0);
    if (o) o->op = op;
    return queue(o, stream);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    return queue_reduction(OP_ALLREDUCE, send, recv, count, t, op, comm, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
    if (!comm || mpi_type(t) == MPI_DATATYPE_NULL) return ncclInvalidArgument;
    return queue(op_new(OP_ALLGATHER, send, recv, count, t, comm, 0), stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    return queue_reduction(OP_REDUCE_SCATTER, send, recv, count, t, op, comm, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    if (!comm || mpi_type(t) == MPI_DATATYPE_NULL || root < 0 || root >= comm->size) return ncclInvalidArgument;
    emu_op *o = op_new(OP_BCAST, send, recv, count, t, comm, 0);
    if (o) o->root = root;
    return queue(o, stream);
}

/* A send or receive: kept for the group's end inside a group, else queued alone. */
static ncclResult_t p2p(int is_send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                        cudaStream_t stream) {
    if (!comm || mpi_type(t) == MPI_DATATYPE_NULL || peer < 0 || peer >= comm->size) return ncclInvalidArgument;
    emu_p2p one = {is_send, buf, count, t, peer, comm};
    if (G.depth > 0) {
        if (G.n == MAX_GROUP) return ncclInternalError;
        if (G.n > 0 && (comm != G.ops[0].comm || stream != G.stream)) return ncclInvalidUsage;
        if (G.n == 0) G.stream = stream;
        G.ops[G.n++] = one;
        return ncclSuccess;
    }
    emu_op *o = op_new(OP_P2P, NULL, NULL, 0, t, comm, 1);
    if (o) o->p2p[0] = one;
    return queue(o, stream);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return p2p(1, (void *)send, count, t, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    return p2p(0, recv, count, t, peer, comm, stream);
}

ncclResult_t ncclGroupStart(void) {
    if (G.depth++ == 0) G.n = 0;
    return ncclSuccess;
}

/* The group's sends and receives, queued as one operation. */
ncclResult_t ncclGroupEnd(void) {
    if (G.depth < 1) return ncclInvalidUsage;
    if (--G.depth > 0 || G.n == 0) return ncclSuccess;
    emu_op *o = op_new(OP_P2P, NULL, NULL, 0, G.ops[0].type, G.ops[0].comm, G.n);
    if (o) memcpy(o->p2p, G.ops, (size_t)G.n * sizeof *G.ops);
    G.n = 0;
    return queue(o, G.stream);
}

