/* cuda_internal.h — declarations shared by the CUDA backend's files (cuda_backend.cu: device, memory, copies and
 * constructor; cuda_gemm.cu: GEMM through cuBLAS; cuda_conv.cu: convolution through cuDNN; cuda_ops.cu: the
 * training ops; cuda_attn.cu: fused attention; cuda_cnn.cu: batch norm and pooling; cuda_shard.cu:
 * tensor-parallel shard ops). Not a public interface.
 *
 * Every op is queued on the backend's one stream and returns without waiting; sync() waits. Errors are checked
 * with TFB_CHECK_CUDA / _CUBLAS / _CUDNN, which report the failing call, file:line, rank and device through
 * tfb_check_report() and return TFB_ERR_BACKEND.
 */
#ifndef TFB_CUDA_INTERNAL_H
#define TFB_CUDA_INTERNAL_H
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include "cuda.h"
#include "../dropout.h"

#define TFB_CUDA_THREADS 256

/* One cached convolution plan (cuda_conv.cu): the shape key, cuDNN's descriptors and the algorithms its search
 * chose. */
typedef struct tfb_conv_plan {
    tfb_conv_desc key;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgoPerf_t fwd;
    cudnnConvolutionBwdDataAlgoPerf_t data;
    cudnnConvolutionBwdFilterAlgoPerf_t filter;
    int have_fwd, have_data, have_filter;
} tfb_conv_plan;
/* A communicator's NCCL side (cuda_comm.cu). */
typedef struct nccl_comm nccl_comm;

typedef struct {
    int device;
    char name[256];                           /* the GPU's name as CUDA reports it */
    char pci[32];                             /* its PCI bus id */
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *workspace; size_t workspace_bytes;  /* cuDNN workspace, grown on demand */
    void *scratch; size_t scratch_bytes;      /* FP32-sized staging for 16-bit convolution outputs */
    void *partials; size_t partials_bytes;    /* per-block partial sums of the batch-norm channel reductions and
                                               * of the column reductions (cuda_ops.cu) */
    void *tickets; size_t tickets_bytes;      /* per column tile: the column reductions' blocks arrived (0 between
                                               * launches) */
    void *gemm_ptrs; size_t gemm_ptrs_bytes;  /* (3, batch) matrix addresses of a grouped batched GEMM */
    int sms;                                  /* streaming multiprocessors: how many blocks fill the GPU */
    int cc;                                   /* compute capability, major * 10 + minor */
    int *flag;                                /* one device int for check_finite */
    tfb_conv_plan *plans; int n_plans, cap_plans;
    void **ptrs; size_t *sizes; int n_allocs, cap_allocs;  /* live allocations, for mem_stats and free */
    size_t in_use, peak;
    cudaEvent_t *marks; int n_marks;          /* timing marks (n_marks events, timing enabled) */
    nccl_comm *comms;                         /* the communicators over this backend (cuda_comm.cu), newest first */
    unsigned long long comm_ops;              /* NCCL operations queued over all of them */
} cuda_ctx;

/* Host waits: the stream drained (sync, copies to the host), polling the communicators for asynchronous errors. */
tfb_status tfb_cuda_stream_wait(cuda_ctx *c);
/* TFB_ERR_COMM, after a message, when NCCL reports an asynchronous error on one of c's communicators. */
tfb_status tfb_cuda_comms_poll(cuda_ctx *c);
/* The oldest NCCL operation queued on c's communicators that the GPU has not finished, as one phrase in buf, and 1;
 * 0 when every one remembered has finished. Safe from another thread (the watchdog's) with c's device current. */
int tfb_cuda_comms_pending_text(cuda_ctx *c, char *buf, size_t len);

extern "C" void tfb_cuda_report(const char *call, const char *file, int line, const char *detail);

#define TFB_CHECK_CUDA(call)                                                       \
    do {                                                                           \
        cudaError_t tfb_e_ = (call);                                               \
        if (tfb_e_ != cudaSuccess) {                                               \
            tfb_cuda_report(#call, __FILE__, __LINE__, cudaGetErrorString(tfb_e_)); \
            return TFB_ERR_BACKEND;                                                \
        }                                                                          \
    } while (0)

#define TFB_CHECK_CUBLAS(call)                                                         \
    do {                                                                               \
        cublasStatus_t tfb_e_ = (call);                                                \
        if (tfb_e_ != CUBLAS_STATUS_SUCCESS) {                                         \
            tfb_cuda_report(#call, __FILE__, __LINE__, cublasGetStatusString(tfb_e_)); \
            return TFB_ERR_BACKEND;                                                    \
        }                                                                              \
    } while (0)

#define TFB_CHECK_CUDNN(call)                                                       \
    do {                                                                            \
        cudnnStatus_t tfb_e_ = (call);                                              \
        if (tfb_e_ != CUDNN_STATUS_SUCCESS) {                                       \
            tfb_cuda_report(#call, __FILE__, __LINE__, cudnnGetErrorString(tfb_e_)); \
            return TFB_ERR_BACKEND;                                                 \
        }                                                                           \
    } while (0)

/* A kernel launch: reports a bad configuration (asynchronous faults surface at the next checked call). */
#define TFB_CHECK_LAUNCH() TFB_CHECK_CUDA(cudaGetLastError())

static inline unsigned tfb_cuda_blocks(size_t n) {
    size_t b = (n + TFB_CUDA_THREADS - 1) / TFB_CUDA_THREADS;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

/* Grid-stride loop over [0, n). */
#define TFB_GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* Row kernels: block b handles row b, its threads stride over the row's h columns. Index arithmetic stays per block:
 * a 64-bit division per element (e / h, e % h) costs more than the element's memory traffic on a GPU. */
#define TFB_ROW_LOOP(j, h) for (int j = threadIdx.x; j < (h); j += blockDim.x)
static inline unsigned tfb_row_threads(int h) {
    return h >= 256 ? 256u : h <= 32 ? 32u : (unsigned)((h + 31) / 32 * 32); /* whole warps, at least one */
}

/* The sum (max) of v over the block, returned to every thread; blockDim.x a multiple of 32, at most 1024. Safe to
 * call repeatedly in one kernel (the shared buffer is fenced on both sides). */
__device__ __forceinline__ float tfb_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float tfb_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float tfb_block_reduce(float v, int is_max) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = is_max ? tfb_warp_max(v) : tfb_warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float r = lane < warps ? part[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? tfb_warp_max(r) : tfb_warp_sum(r);
}
__device__ __forceinline__ float tfb_block_sum(float v) { return tfb_block_reduce(v, 0); }
__device__ __forceinline__ float tfb_block_max(float v) { return tfb_block_reduce(v, 1); }

/* Element i of a tensor of tfb_dtype t as FP32, and x stored into one (16-bit: rounded to nearest even). The type
 * is a kernel argument, the same for every thread, so the branch costs no divergence: for ops whose operands come
 * in many type combinations, where templates would multiply the instantiations. */
__device__ __forceinline__ float tfb_load_elem(const void *p, int t, size_t i) {
    if (t == TFB_F16) return __half2float(((const __half *)p)[i]);
    if (t == TFB_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}
__device__ __forceinline__ void tfb_store_elem(void *p, int t, size_t i, float x) {
    if (t == TFB_F16) ((__half *)p)[i] = __float2half_rn(x);
    else if (t == TFB_BF16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else ((float *)p)[i] = x;
}
/* x as tfb_store_elem would store it in type t, read back */
__device__ __forceinline__ float tfb_round_elem(int t, float x) {
    if (t == TFB_F16) return __half2float(__float2half_rn(x));
    if (t == TFB_BF16) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

/* Element i (0..7) of a[0..3] then b[0..3], by selects on constant indices: an array indexed by a run-time value
 * would live in local memory. */
__device__ __forceinline__ float tfb_pick8(const float a[4], const float b[4], int i) {
    float lo = i == 0 ? a[0] : i == 1 ? a[1] : i == 2 ? a[2] : a[3];
    float hi = i == 4 ? b[0] : i == 5 ? b[1] : i == 6 ? b[2] : b[3];
    return i < 4 ? lo : hi;
}

/* Dropout factors of the four elements at global counters i0 .. i0 + 3 (as tfb_dropout_factors gives them): one
 * Philox block when i0 starts a group, else the two blocks the run straddles. */
__device__ __forceinline__ void tfb_dropout_run(tfb_dropout_key k, float p, uint64_t i0, float f[4]) {
    float a[4], b[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    int sh = (int)(i0 & 3);
    tfb_dropout_factors(k, p, i0 >> 2, a);
    if (sh) tfb_dropout_factors(k, p, (i0 >> 2) + 1, b);
#pragma unroll
    for (int q = 0; q < 4; q++) f[q] = tfb_pick8(a, b, q + sh);
}

/* Device memory of at least `bytes` in *buf (grown, never shrunk; counted in mem_stats). */
tfb_status tfb_cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes);

/* cuda_comm.cu: NCCL for device buffers, the wrapped MPI communicator for host ones (tfb_backend.comm_wrap). */
tfb_status tfb_cuda_comm_wrap(void *ctx, struct tfb_comm *host, struct tfb_comm **out);

/* cuda_profile.cu: the kernel profile (TFB_KERNEL_PROFILE), read at open; tfb_backend.trace. */
int tfb_cuda_profile_open(void); /* rows to print, 0: off */
tfb_status tfb_cuda_trace(void *ctx, int on);

void tfb_cuda_gemm_install(tfb_backend *be);
void tfb_cuda_conv_install(tfb_backend *be);
void tfb_cuda_ops_install(tfb_backend *be);
void tfb_cuda_cnn_install(tfb_backend *be);
void tfb_cuda_shard_install(tfb_backend *be);
void tfb_cuda_attn_install(tfb_backend *be);

/* Every kernel family of the backend (GEMM, convolution, ops, CNN ops, shards, fused attention) onto be: what the
 * real backend installs, and the emulator's backend (tests/emu/) over the same files. */
static inline void tfb_cuda_kernels_install(tfb_backend *be) {
    tfb_cuda_gemm_install(be);
    tfb_cuda_conv_install(be);
    tfb_cuda_ops_install(be);
    tfb_cuda_cnn_install(be);
    tfb_cuda_shard_install(be);
    tfb_cuda_attn_install(be);
}
void tfb_cuda_plans_free(cuda_ctx *c); /* cuda_conv.cu: the cached convolution plans */

#endif
