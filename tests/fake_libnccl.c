/* fake_libnccl.c — a stand-in for NCCL, loaded by `tfbench doctor` through TFB_TEST_LIBNCCL together with
 * fake_libcudart.c (whose device memory is host memory): ncclCommInitAll makes one communicator per device and
 * the all-reduces of a group are summed at ncclGroupEnd. FAKE_NCCL_WRONG=1 leaves one element of GPU 0 wrong;
 * FAKE_NCCL_ASYNC_ERROR=N makes every communicator report asynchronous error N (a dead peer). */
#include <stdlib.h>

enum { MAX = 8 };
typedef struct { int rank, n; } comm_t;
static comm_t comms[MAX];
static struct { const float *send; float *recv; size_t count; } pending[MAX];
static int n_pending;

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : 0;
}

int ncclGetVersion(int *v) { *v = 22809; return 0; }

int ncclCommInitAll(void **out, int n, const int *devs) {
    (void)devs;
    if (n < 1 || n > MAX) return 4;
    for (int i = 0; i < n; i++) comms[i] = (comm_t){i, n}, out[i] = &comms[i];
    return 0;
}

int ncclGroupStart(void) { n_pending = 0; return 0; }

int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, void *comm, void *stream) {
    (void)stream;
    const comm_t *c = comm;
    if (type != 7 || op != 0 || !c || c->rank >= MAX) return 4;
    pending[c->rank].send = send, pending[c->rank].recv = recv, pending[c->rank].count = count;
    n_pending++;
    return 0;
}

int ncclGroupEnd(void) {
    size_t count = pending[0].count;
    float *sum = calloc(count, sizeof *sum);
    if (!sum) return 1;
    for (int r = 0; r < n_pending; r++)
        for (size_t k = 0; k < count; k++) sum[k] += pending[r].send[k];
    for (int r = 0; r < n_pending; r++)
        for (size_t k = 0; k < count; k++) pending[r].recv[k] = sum[k];
    if (env_int("FAKE_NCCL_WRONG")) pending[0].recv[count / 3] += 1;
    free(sum);
    return 0;
}

int ncclCommGetAsyncError(void *comm, int *err) { (void)comm; *err = env_int("FAKE_NCCL_ASYNC_ERROR"); return 0; }
int ncclCommDestroy(void *comm) { (void)comm; return 0; }
