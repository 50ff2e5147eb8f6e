/* test_emu.cpp — checks the CUDA emulator itself (tests/emu/cuda_emu.h) before gpu_check_emu trusts it with the
 * backend's kernels: barriers order shared memory, a missing barrier changes the result between the two thread
 * orders, warp shuffles move the right lanes' values, a launch CUDA rejects sets the last error, a shuffle that
 * part of its warp never reaches aborts with a message, tensor-core fragments multiply as loops do and a lane
 * sees another's stored elements only after __syncwarp, a misaligned fragment load aborts, and so does an event
 * used after it was destroyed. Written in CUDA syntax with tfb_emu_launch spelled out.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../check.h"

/* *out = the sum of base + t over the block's threads t, added by thread 0 after a barrier (barrier = 0: without) */
__global__ void k_block_sum(int *out, int base, int barrier) {
    __shared__ int s[256];
    s[threadIdx.x] = base + (int)threadIdx.x;
    if (barrier) __syncthreads();
    if (threadIdx.x != 0) return;
    int t = 0;
    for (unsigned i = 0; i < blockDim.x; i++) t += s[i];
    *out = t;
}

/* 1 when one block of 256 threads sums right; each call uses a new base, so stale shared memory shows */
static int block_sum_right(int barrier, int reverse) {
    static int base = 0;
    int out = 0;
    base += 1000;
    tfb_emu_order(reverse);
    tfb_emu_launch("k_block_sum", [&] { k_block_sum(&out, base, barrier); }, 1, 256);
    tfb_emu_order(0);
    return out == 256 * base + 255 * 128;
}

/* out[t] = the sum over t's warp (xor butterfly), down[t] = lane + 1's value, idx[t] = lane 5's */
__global__ void k_shuffles(float *out, int *down, int *idx) {
    int t = (int)threadIdx.x, lane = t & 31;
    float v = (float)t;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[t] = v;
    down[t] = __shfl_down_sync(0xffffffffu, t, 1);
    idx[t] = __shfl_sync(0xffffffffu, t, 5);
    (void)lane;
}

static int shuffles_right(void) {
    float sum[64];
    int down[64], idx[64], ok = 1;
    tfb_emu_launch("k_shuffles", [&] { k_shuffles(sum, down, idx); }, 1, 64);
    for (int t = 0; t < 64; t++) {
        int w = t / 32, lane = t % 32;
        ok &= sum[t] == (float)(32 * 32 * w + 31 * 16);      /* 32 w .. 32 w + 31 */
        ok &= down[t] == (lane == 31 ? t : t + 1);            /* the last lane keeps its own */
        ok &= idx[t] == 32 * w + 5;
    }
    return ok;
}

__global__ void k_half_warp_shuffle(float *out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* 1 when f, run in a child process, kills it with SIGABRT (the emulator's message on stderr, expected and kept
 * quiet) */
template <typename F> static int aborts(F f) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        f();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* 1 when running the half-warp shuffle aborts */
static int divergent_shuffle_aborts(void) {
    return aborts([] {
        float out[32];
        tfb_emu_launch("k_half_warp_shuffle", [&] { k_half_warp_shuffle(out); }, 1, 32);
    });
}

/* One warp: C (16 x 16, FP32) = A (16 x 32, row-major) B (32 x 16, column-major), FP16 operands staged in shared
 * memory, then *peek = C(0, 1) as lane 0 reads it right after its own store (sync = 0) or after a __syncwarp. */
__global__ void k_wmma(const __half *a, const __half *b, float *c, float *peek, int sync) {
    using namespace nvcuda;
    __shared__ __align__(32) float sc[16 * 16];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < 32; k += 16) {
        wmma::load_matrix_sync(fa, a + k, 32);
        wmma::load_matrix_sync(fb, b + k, 32);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    if (threadIdx.x == 0) sc[1] = -1.0f; /* stale until lane 1 stores element 1 */
    __syncwarp();
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    if (sync) __syncwarp();
    if (threadIdx.x == 0) *peek = sc[1];
    __syncwarp();
    for (int e = (int)threadIdx.x; e < 256; e += 32) c[e] = sc[e];
}

/* The product against loops; and lane 0 sees lane 1's stored element only after a __syncwarp (threads in index
 * order: lane 0 runs on to its read before lane 1 stores). */
static int wmma_right(void) {
    alignas(32) static __half a[16 * 32], b[16 * 32];
    float c[256], peek[2] = {0, 0}, want[256];
    for (int i = 0; i < 16 * 32; i++) {
        a[i] = __float2half((float)(i % 7) - 3.0f);
        b[i] = __float2half((float)(i % 5) - 2.0f);
    }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            want[r * 16 + n] = 0.0f;
            for (int k = 0; k < 32; k++)
                want[r * 16 + n] += __half2float(a[r * 32 + k]) * __half2float(b[n * 32 + k]);
        }
    int ok = 1;
    tfb_emu_order(0);
    for (int sync = 0; sync < 2; sync++) {
        tfb_emu_launch("k_wmma", [&] { k_wmma(a, b, c, &peek[sync], sync); }, 1, 32);
        for (int e = 0; e < 256; e++) ok &= c[e] == want[e];
    }
    return ok && peek[0] == -1.0f && peek[1] == want[1];
}

__global__ void k_wmma_misaligned(const __half *a) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::load_matrix_sync(fa, a + 1, 16);
}

/* 1 when a fragment load from a pointer the GPU would refuse (not 32-byte aligned) aborts */
static int wmma_misaligned_aborts(void) {
    return aborts([] {
        alignas(32) static __half a[17 * 16];
        tfb_emu_launch("k_wmma_misaligned", [&] { k_wmma_misaligned(a); }, 1, 32);
    });
}

/* 1 when a live event records and waits, and the same event used after cudaEventDestroy aborts */
static int destroyed_event_aborts(void) {
    cudaEvent_t e = NULL;
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 0;
    int live = cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
               cudaEventRecord(e, s) == cudaSuccess && cudaStreamWaitEvent(s, e, 0) == cudaSuccess &&
               cudaEventQuery(e) == cudaSuccess && cudaEventDestroy(e) == cudaSuccess;
    int dead = live && aborts([&] { cudaEventRecord(e, s); }) && aborts([&] { cudaStreamWaitEvent(s, e, 0); });
    cudaStreamDestroy(s);
    return dead;
}

__global__ void k_nothing(int *x) { x[0] = 1; }

static int bad_launch_reported(void) {
    int x = 0;
    tfb_emu_launch("k_nothing", [&] { k_nothing(&x); }, 1, 1025);
    int too_many = cudaGetLastError() == cudaErrorInvalidConfiguration && x == 0;
    tfb_emu_launch("k_nothing", [&] { k_nothing(&x); }, dim3(1, 65536), 32);
    int grid_y = cudaGetLastError() == cudaErrorInvalidConfiguration && x == 0;
    tfb_emu_launch("k_nothing", [&] { k_nothing(&x); }, 1, 32);
    return too_many && grid_y && cudaGetLastError() == cudaSuccess && x == 1;
}

int main(void) {
    EXPECT("emu_barrier_orders_shared_memory", block_sum_right(1, 0) && block_sum_right(1, 1), "wrong sum");
    /* without the barrier thread 0 reads stale slots when it runs first, fresh ones when it runs last */
    EXPECT("emu_missing_barrier_shows_in_one_order", !block_sum_right(0, 0) && block_sum_right(0, 1),
           "the missing barrier went unseen");
    EXPECT("emu_warp_shuffles_xor_down_idx", shuffles_right(), "wrong lanes");
    EXPECT("emu_rejected_launch_sets_last_error", bad_launch_reported(), "not reported");
    EXPECT("emu_shuffle_missing_lanes_aborts", divergent_shuffle_aborts(), "no abort");
    EXPECT("emu_wmma_product_and_store_by_lane", wmma_right(), "wrong product, or another lane's store seen early");
    EXPECT("emu_wmma_misaligned_pointer_aborts", wmma_misaligned_aborts(), "no abort");
    EXPECT("emu_event_used_after_destroy_aborts", destroyed_event_aborts(), "a live event failed, or no abort");
    return test_failures ? 1 : 0;
}
