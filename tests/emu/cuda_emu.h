/* cuda_emu.h — the device side of CUDA, emulated on the CPU, so the CUDA backend's own kernels (cuda_ops.cu,
 * cuda_cnn.cu, cuda_shard.cu) run in tests on a machine with no GPU, against the CPU backend (gpu_check
 * --device cuda-emu). Force-included (-include) before each kernel file, which tests/emu/unchevron.py has turned
 * into plain C++ (every `k<<<grid, block, shmem, stream>>>(args)` becomes a tfb_emu_launch call).
 *
 * Model: a block's threads are fibers on one host thread, run one at a time in index order (or reversed, with
 * TFB_EMU_REVERSE=1, so a missing barrier shows as a different result; blocks too then run last first); each
 * runs until it reaches __syncthreads or a warp shuffle, which release only when every thread (every lane) has
 * arrived. Shared memory is a static variable (blocks run one after another); atomics are plain read-modify-writes
 * (no thread is preempted between two sync points). A shuffle that not all of its warp's lanes reach, or a launch
 * CUDA would reject (more than 1024 threads, a grid dimension out of range), is reported: the first aborts, the
 * second is returned by cudaGetLastError as on a GPU.
 *
 * Deliberately not emulated: cuBLAS, cuDNN and NCCL (stand-ins: emu_cublas.cpp, emu_cudnn.cpp, and emu_nccl.c over
 * MPI), streams and events beyond their existence (work runs when queued), warp-synchronous code without a sync
 * point (there is none), timing.
 */
#ifndef TFB_CUDA_EMU_H
#define TFB_CUDA_EMU_H
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h> /* before the qualifiers are redefined: cuda_internal.h's includes, read as they are */
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#define __global__ static
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)

extern uint3 tfb_emu_thread_idx, tfb_emu_block_idx;
extern dim3 tfb_emu_block_dim, tfb_emu_grid_dim;
#define threadIdx tfb_emu_thread_idx
#define blockIdx tfb_emu_block_idx
#define blockDim tfb_emu_block_dim
#define gridDim tfb_emu_grid_dim

/* Runs body(arg) as every thread of every block of the grid; a configuration CUDA rejects is left for
 * cudaGetLastError. */
void tfb_emu_run(const char *kernel, dim3 grid, dim3 block, void (*body)(void *), void *arg);
/* Threads run in index order (0), or reversed (1); the default is TFB_EMU_REVERSE's value. */
void tfb_emu_order(int reverse);
/* __syncthreads: waits until every thread of the block has arrived (or exited). */
void tfb_emu_sync_block(void);
/* A warp shuffle of 64 raw bits: mode 0 xor, 1 down, 2 index; every lane in mask must take part. */
uint64_t tfb_emu_shuffle(unsigned mask, uint64_t bits, int mode, int arg, int width);

template <typename F> static void tfb_emu_call(void *f) { (*(F *)f)(); }
template <typename F>
static inline void tfb_emu_launch(const char *kernel, F body, dim3 grid, dim3 block, size_t shmem = 0,
                                  cudaStream_t stream = 0) {
    (void)shmem;
    (void)stream;
    tfb_emu_run(kernel, grid, block, tfb_emu_call<F>, &body);
}

template <typename T> static inline T tfb_emu_shfl(unsigned mask, T v, int mode, int arg, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 64 bits");
    uint64_t in = 0, out;
    memcpy(&in, &v, sizeof v);
    out = tfb_emu_shuffle(mask, in, mode, arg, width);
    T r;
    memcpy(&r, &out, sizeof r);
    return r;
}
#define __syncthreads() tfb_emu_sync_block()
/* __syncwarp: a shuffle every lane of the warp must reach, moving nothing */
#define __syncwarp(...) ((void)tfb_emu_shuffle(0xffffffffu, 0, 0, 0, 32))
/* The running thread's lane, and a misuse the emulator reports and aborts on. */
int tfb_emu_lane(void);
void tfb_emu_fail(const char *what);

/* Tensor-core fragments (mma.h's nvcuda::wmma, the 16x16x16 shapes): every lane holds the whole tile, row-major, so
 * loads are each lane's own; an accumulator's element e belongs to lane e % 32, which alone computes it in a product
 * and writes it in a store, as a warp's lanes share a tile's elements on a GPU, so reading another lane's elements
 * before a __syncwarp (or __syncthreads) reads what was there before. A pointer not 32-byte aligned or a leading
 * dimension not a multiple of 16 bytes, which the GPU does not allow, aborts. Products accumulate in FP32 in k
 * order. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    enum { rows = std::is_same<Use, matrix_b>::value ? K : M, cols = std::is_same<Use, matrix_a>::value ? K : N };
    enum { num_elements = rows * cols };
    T x[num_elements];
};
static inline float emu_wide(float v) { return v; }
static inline float emu_wide(__half v) { return __half2float(v); }
static inline float emu_wide(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline void emu_operand(const void *p, unsigned ldm, size_t esz) {
    if ((uintptr_t)p % 32 != 0) tfb_emu_fail("wmma: a pointer not aligned to 32 bytes");
    if (ldm * esz % 16 != 0) tfb_emu_fail("wmma: a leading dimension not a multiple of 16 bytes");
}
/* the tile (r, c) of a row-major (col: column-major) matrix at p, ldm elements apart */
template <typename F, typename T> static inline void emu_load(F &f, const T *p, unsigned ldm, bool col) {
    emu_operand(p, ldm, sizeof(T));
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <typename Use, int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm) {
    emu_load(f, p, ldm, false);
}
template <typename Use, int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm) {
    emu_load(f, p, ldm, true);
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm,
                                    layout_t l) {
    emu_load(f, p, ldm, l == mem_col_major);
}
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = v;
}
template <int M, int N, int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    for (int e = tfb_emu_lane(); e < M * N; e += 32) { /* the lane's own elements: the only ones it stores */
        int r = e / N, n = e % N;
        float s = c.x[e];
        for (int k = 0; k < K; k++) s += emu_wide(a.x[r * K + k]) * emu_wide(b.x[k * N + n]);
        d.x[e] = s;
    }
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm,
                                     layout_t l) {
    emu_operand(p, ldm, sizeof(float));
    for (int e = tfb_emu_lane(); e < M * N; e += 32) {
        int r = e / N, c = e % N;
        p[l == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[e];
    }
}
} // namespace wmma
} // namespace nvcuda
#define __shfl_xor_sync(mask, v, ...) tfb_emu_shfl(mask, v, 0, __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...) tfb_emu_shfl(mask, v, 1, __VA_ARGS__)
#define __shfl_sync(mask, v, ...) tfb_emu_shfl(mask, v, 2, __VA_ARGS__)

template <typename T> static inline T atomicAdd(T *a, T v) {
    T old = *a;
    *a = old + v;
    return old;
}
/* blocks run one after another: every write is visible to the next block, and L1 holds nothing stale */
#define __threadfence() ((void)0)
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T atomicMax(T *a, T v) {
    T old = *a;
    if (v > old) *a = v;
    return old;
}
/* The runtime calls of the kernel files, synchronous on host memory, and the CUDA backend's own entry points, under
 * names of their own: a test program links these beside libtfb.a, which holds the real ones in a CUDA build. */
cudaError_t tfb_emu_get_last_error(void);
const char *tfb_emu_error_string(cudaError_t e);
cudaError_t tfb_emu_memset(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t tfb_emu_memcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t tfb_emu_memcpy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s = 0);
/* For the communicator (cuda_comm.cu): device memory is what the emulated backend registered as such (its
 * allocations, as ranges). A created stream keeps the work deferred to it (tfb_emu_defer: the emulated NCCL's
 * operations) until a stream waits for one of its events, the stream goes, or tfb_emu_flush_all (the emulated
 * ncclCommDestroy, which lets every operation finish). */
void tfb_emu_device_range(const void *p, size_t bytes, int add);
cudaError_t tfb_emu_pointer_attributes(cudaPointerAttributes *a, const void *p);
cudaError_t tfb_emu_event_create(cudaEvent_t *e, unsigned flags);
cudaError_t tfb_emu_event_destroy(cudaEvent_t e);
cudaError_t tfb_emu_event_record(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t tfb_emu_event_query(cudaEvent_t e);
cudaError_t tfb_emu_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t tfb_emu_stream_create(cudaStream_t *s, unsigned flags);
cudaError_t tfb_emu_stream_destroy(cudaStream_t s);
cudaError_t tfb_emu_set_device(int device);
extern "C" void tfb_emu_defer(cudaStream_t s, void (*run)(void *), void *arg);
extern "C" void tfb_emu_flush_all(void);
#define cudaPointerGetAttributes tfb_emu_pointer_attributes
#define cudaEventCreateWithFlags tfb_emu_event_create
#define cudaEventDestroy tfb_emu_event_destroy
#define cudaEventRecord tfb_emu_event_record
#define cudaEventQuery tfb_emu_event_query
#define cudaStreamWaitEvent tfb_emu_stream_wait_event
#define cudaStreamCreateWithFlags tfb_emu_stream_create
#define cudaStreamDestroy tfb_emu_stream_destroy
#define cudaSetDevice tfb_emu_set_device
#define tfb_cuda_comm_wrap tfb_emu_comm_wrap
#define tfb_cuda_comms_poll tfb_emu_comms_poll
#define tfb_cuda_comms_pending_text tfb_emu_comms_pending_text
#define cudaGetLastError tfb_emu_get_last_error
#define cudaGetErrorString tfb_emu_error_string
#define cudaMemsetAsync tfb_emu_memset
#define cudaMemcpyAsync tfb_emu_memcpy
#define cudaMemcpy2DAsync tfb_emu_memcpy_2d
#define tfb_cuda_ops_install tfb_emu_ops_install
#define tfb_cuda_cnn_install tfb_emu_cnn_install
#define tfb_cuda_shard_install tfb_emu_shard_install
#define tfb_cuda_attn_install tfb_emu_attn_install
#define tfb_cuda_grow tfb_emu_grow
#define tfb_cuda_report tfb_emu_report
#define tfb_cuda_stream_wait tfb_emu_stream_wait

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* device code's min and max, for any two arithmetic types */
template <typename A, typename B> static inline auto min(A a, B b) -> typename std::common_type<A, B>::type {
    return b < a ? b : a;
}
template <typename A, typename B> static inline auto max(A a, B b) -> typename std::common_type<A, B>::type {
    return a < b ? b : a;
}
#endif
