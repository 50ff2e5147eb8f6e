/* comm_mpi.c — the communication interface implemented with MPI.
 *
 * Non-blocking all-reduce uses MPI_Iallreduce; Open MPI makes progress on it only inside MPI calls, so callers
 * drive it with test() between pieces of work. This file does not choose algorithms or buckets (bench/ddp.c does).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "comm.h"

#define TFB_CHECK_MPI(call)                                                      \
    do {                                                                         \
        int mpi_rc_ = (call);                                                    \
        if (mpi_rc_ != MPI_SUCCESS) {                                            \
            char msg_[MPI_MAX_ERROR_STRING];                                     \
            int len_ = 0;                                                        \
            MPI_Error_string(mpi_rc_, msg_, &len_);                              \
            tfb_check_report(#call, __FILE__, __LINE__, msg_);                   \
            return TFB_ERR_COMM;                                                 \
        }                                                                        \
    } while (0)

struct tfb_comm_request { MPI_Request req; };

static MPI_Comm comm_of(tfb_comm *c) { return *(MPI_Comm *)c->ctx; }

static MPI_Datatype mpi_type(tfb_comm_type t) {
    switch (t) {
    case TFB_COMM_F64: return MPI_DOUBLE;
    case TFB_COMM_I32: return MPI_INT;
    case TFB_COMM_U64: return MPI_UINT64_T;
    default: return MPI_FLOAT;
    }
}

static MPI_Op mpi_op(tfb_comm_op op) { return op == TFB_MAX ? MPI_MAX : op == TFB_MIN ? MPI_MIN : MPI_SUM; }

/* MPI counts are int: every large buffer goes through in pieces of at most this many elements. */
#define MPI_PIECE (1 << 30)

static tfb_status mpi_allreduce(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op) {
    int es = 0;
    MPI_Type_size(mpi_type(t), &es);
    for (size_t off = 0; off < n; off += MPI_PIECE) {
        int cnt = (int)(n - off < MPI_PIECE ? n - off : MPI_PIECE);
        TFB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, cnt, mpi_type(t), mpi_op(op),
                                    comm_of(c)));
    }
    return TFB_OK;
}

/* The MPI checker follows a request within one function only; here the request is started in mpi_iallreduce and
 * completed through its handle by mpi_test or mpi_wait. */
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker)
static tfb_status mpi_iallreduce(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op,
                                 tfb_comm_request **req) {
    if (n > MPI_PIECE) return TFB_ERR_ARG;
    tfb_comm_request *r = malloc(sizeof *r);
    TFB_CHECK_ALLOC(r);
    TFB_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), mpi_op(op), comm_of(c), &r->req));
    *req = r;
    return TFB_OK;
}

static tfb_status mpi_test(tfb_comm *c, tfb_comm_request *req, int *done) {
    (void)c;
    TFB_CHECK_MPI(MPI_Test(&req->req, done, MPI_STATUS_IGNORE));
    if (*done) free(req);
    return TFB_OK;
}

static tfb_status mpi_wait(tfb_comm *c, tfb_comm_request *req) {
    (void)c;
    TFB_CHECK_MPI(MPI_Wait(&req->req, MPI_STATUS_IGNORE));
    free(req);
    return TFB_OK;
}
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

static tfb_status mpi_allgather(tfb_comm *c, const void *send, void *recv, size_t n, tfb_comm_type t) {
    if (n > MPI_PIECE) return TFB_ERR_ARG;
    TFB_CHECK_MPI(MPI_Allgather(send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), comm_of(c)));
    return TFB_OK;
}

static tfb_status mpi_reduce_scatter(tfb_comm *c, const void *send, void *recv, size_t n, tfb_comm_type t) {
    if (n > MPI_PIECE) return TFB_ERR_ARG;
    TFB_CHECK_MPI(MPI_Reduce_scatter_block(send, recv, (int)n, mpi_type(t), MPI_SUM, comm_of(c)));
    return TFB_OK;
}

static tfb_status mpi_bcast(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, int root) {
    int es = 0;
    MPI_Type_size(mpi_type(t), &es);
    for (size_t off = 0; off < n; off += MPI_PIECE) {
        int cnt = (int)(n - off < MPI_PIECE ? n - off : MPI_PIECE);
        TFB_CHECK_MPI(MPI_Bcast((char *)buf + off * es, cnt, mpi_type(t), root, comm_of(c)));
    }
    return TFB_OK;
}

static tfb_status mpi_send(tfb_comm *c, const void *buf, size_t n, tfb_comm_type t, int peer, int tag) {
    if (n > MPI_PIECE) return TFB_ERR_ARG;
    TFB_CHECK_MPI(MPI_Send(buf, (int)n, mpi_type(t), peer, tag, comm_of(c)));
    return TFB_OK;
}

static tfb_status mpi_recv(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, int peer, int tag) {
    if (n > MPI_PIECE) return TFB_ERR_ARG;
    TFB_CHECK_MPI(MPI_Recv(buf, (int)n, mpi_type(t), peer, tag, comm_of(c), MPI_STATUS_IGNORE));
    return TFB_OK;
}

static tfb_status mpi_sendrecv(tfb_comm *c, const void *send, size_t ns, int to, void *recv, size_t nr, int from,
                               tfb_comm_type t, int tag) {
    if (ns > MPI_PIECE || nr > MPI_PIECE) return TFB_ERR_ARG;
    TFB_CHECK_MPI(MPI_Sendrecv(send, (int)ns, mpi_type(t), to, tag, recv, (int)nr, mpi_type(t), from, tag,
                               comm_of(c), MPI_STATUS_IGNORE));
    return TFB_OK;
}

static tfb_status mpi_barrier(tfb_comm *c) {
    TFB_CHECK_MPI(MPI_Barrier(comm_of(c)));
    return TFB_OK;
}

static void mpi_abort(tfb_comm *c, int code) { MPI_Abort(comm_of(c), code); }

static tfb_status comm_wrap(MPI_Comm mc, tfb_comm **out);

static tfb_status mpi_split(tfb_comm *c, int color, int key, tfb_comm **out) {
    MPI_Comm sub;
    TFB_CHECK_MPI(MPI_Comm_split(comm_of(c), color < 0 ? MPI_UNDEFINED : color, key, &sub));
    if (sub == MPI_COMM_NULL) { *out = NULL; return TFB_OK; }
    return comm_wrap(sub, out);
}

static void mpi_destroy(tfb_comm *c) {
    MPI_Comm *mc = c->ctx;
    if (*mc != MPI_COMM_WORLD) MPI_Comm_free(mc);
    free(mc);
    free(c);
}

static tfb_status comm_wrap(MPI_Comm mc, tfb_comm **out) {
    tfb_comm *c = calloc(1, sizeof *c);
    MPI_Comm *ctx = malloc(sizeof(MPI_Comm)); /* MPI_Comm is itself a pointer type in Open MPI */
    if (!c || !ctx) { free(c); free(ctx); return TFB_ERR_NOMEM; }
    int rank = 0, size = 1;
    *ctx = mc;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    *c = (tfb_comm){.rank = rank, .size = size, .ctx = ctx, .allreduce = mpi_allreduce,
                    .iallreduce = mpi_iallreduce, .test = mpi_test, .wait = mpi_wait, .allgather = mpi_allgather,
                    .reduce_scatter = mpi_reduce_scatter, .bcast = mpi_bcast, .send = mpi_send, .recv = mpi_recv,
                    .sendrecv = mpi_sendrecv,
                    .barrier = mpi_barrier, .split = mpi_split, .abort = mpi_abort, .destroy = mpi_destroy};
    *out = c;
    return TFB_OK;
}

tfb_status tfb_comm_mpi_world(int *argc, char ***argv, tfb_comm **out) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) TFB_CHECK_MPI(MPI_Init(argc, argv));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return comm_wrap(MPI_COMM_WORLD, out);
}

void tfb_comm_mpi_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

/* TFB_TEST_NODES=K (a test hook): the ranks as K blocks of consecutive ranks, as if on K machines. */
static int fake_nodes(int *node, int *nodes, int *local_rank, int *local_size) {
    const char *env = getenv("TFB_TEST_NODES");
    int world = 1, rank = 0, k = env ? atoi(env) : 0;
    if (k < 1) return 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int block = (world + k - 1) / k;
    *node = rank / block;
    *nodes = (world + block - 1) / block;
    *local_rank = rank % block;
    *local_size = world - *node * block < block ? world - *node * block : block;
    return 1;
}

void tfb_comm_mpi_node(int *node, int *nodes, int *local_rank, int *local_size) {
    if (fake_nodes(node, nodes, local_rank, local_size)) return;
    MPI_Comm shared;
    int leader, first = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    MPI_Comm_rank(shared, local_rank);
    MPI_Comm_size(shared, local_size);
    leader = *local_rank == 0;
    MPI_Exscan(&leader, &first, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* leaders before this rank */
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (world_rank == 0) first = 0;                                   /* MPI_Exscan leaves rank 0's undefined */
    MPI_Bcast(&first, 1, MPI_INT, 0, shared);
    *node = first;
    MPI_Allreduce(&leader, nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&shared);
}

const char *tfb_comm_mpi_library(void) {
    static char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    for (int i = 0; i < len; i++)
        if (lib[i] == '\n' || lib[i] == ',') { lib[i] = '\0'; break; }
    return lib;
}
