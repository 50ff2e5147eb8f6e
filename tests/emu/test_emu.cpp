/* test_emu.cpp — checks the CUDA emulator itself (tests/emu/cuda_emu.h) before gpu_check_emu trusts it with the
 * backend's kernels: barriers order shared memory, a missing barrier changes the result between the two thread
 * orders, warp shuffles move the right lanes' values, a launch CUDA rejects sets the last error, and a shuffle that
 * part of its warp never reaches aborts with a message. Written in CUDA syntax with tfb_emu_launch spelled out.
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

/* 1 when running the half-warp shuffle kills the process with SIGABRT (its message on stderr) */
static int divergent_shuffle_aborts(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        float out[32];
        if (!freopen("/dev/null", "w", stderr)) _exit(3); /* the abort's message is expected: keep it quiet */
        tfb_emu_launch("k_half_warp_shuffle", [&] { k_half_warp_shuffle(out); }, 1, 32);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
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
    return test_failures ? 1 : 0;
}
