/* comm.h — the communication interface: a struct of function pointers plus a context, one per (sub-)communicator.
 *
 * Buffers are backend memory (host memory for the CPU backend). Collectives are in place where the name says so.
 * MPI implements it (comm_mpi.c), and the CUDA backend's NCCL communicator (kernels/cuda/cuda_comm.cu) fills the
 * same struct. This header holds no MPI types, so code above it never includes mpi.h; C++ may include it.
 */
#ifndef TFB_COMM_H
#define TFB_COMM_H
#include <stddef.h>
#include "../kernels/check.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TFB_COMM_F32 = 0, TFB_COMM_F64 = 1, TFB_COMM_I32 = 2, TFB_COMM_U64 = 3 } tfb_comm_type;
typedef enum { TFB_SUM = 0, TFB_MAX = 1, TFB_MIN = 2 } tfb_comm_op;
typedef struct tfb_comm_request tfb_comm_request; /* a pending non-blocking operation */

typedef struct tfb_comm tfb_comm;
struct tfb_comm {
    int rank, size;
    void *ctx;
    tfb_status (*allreduce)(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op);
    /* starts an in-place all-reduce; complete it with wait() */
    tfb_status (*iallreduce)(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, tfb_comm_op op,
                             tfb_comm_request **req);
    /* test(): *done = 1 when finished (and the request freed); drives progress in transports without a thread */
    tfb_status (*test)(tfb_comm *c, tfb_comm_request *req, int *done);
    tfb_status (*wait)(tfb_comm *c, tfb_comm_request *req);
    /* recv (n * size) = concatenation of every rank's send (n) */
    tfb_status (*allgather)(tfb_comm *c, const void *send, void *recv, size_t n, tfb_comm_type t);
    /* recv (n) = this rank's n-element share of the sum of every rank's send (n * size) */
    tfb_status (*reduce_scatter)(tfb_comm *c, const void *send, void *recv, size_t n, tfb_comm_type t);
    tfb_status (*bcast)(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, int root);
    tfb_status (*send)(tfb_comm *c, const void *buf, size_t n, tfb_comm_type t, int peer, int tag);
    tfb_status (*recv)(tfb_comm *c, void *buf, size_t n, tfb_comm_type t, int peer, int tag);
    /* sends ns elements to `to` while receiving nr from `from` (either peer may be the other end of a pair doing
     * the mirror image, so pipeline stages can swap activations and gradients without deadlock) */
    tfb_status (*sendrecv)(tfb_comm *c, const void *send, size_t ns, int to, void *recv, size_t nr, int from,
                           tfb_comm_type t, int tag);
    tfb_status (*barrier)(tfb_comm *c);
    /* a sub-communicator of the ranks passing the same color (>= 0), ordered by key; *out = NULL for color < 0 */
    tfb_status (*split)(tfb_comm *c, int color, int key, tfb_comm **out);
    /* ends every rank of the job (a rank-local failure must not leave peers waiting in a collective) */
    void (*abort)(tfb_comm *c, int code);
    void (*destroy)(tfb_comm *c);
};

/* comm_mpi.c: MPI_Init (idempotent), the world communicator, and MPI_Finalize. */
tfb_status tfb_comm_mpi_world(int *argc, char ***argv, tfb_comm **out);
void tfb_comm_mpi_finalize(void);
/* This rank's node (0 .. nodes - 1, numbered in rank order) and its place on it. Collective over the world.
 * TFB_TEST_NODES=K (a test hook) makes the job look like K machines of consecutive ranks. */
void tfb_comm_mpi_node(int *node, int *nodes, int *local_rank, int *local_size);
/* "Open MPI v4.1.4, ..." as the library reports it (first line). */
const char *tfb_comm_mpi_library(void);

#ifdef __cplusplus
}
#endif
#endif
