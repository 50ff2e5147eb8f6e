/* gpu_bw.h — what this node's GPU links deliver, measured with copies: for every ordered pair of GPUs the one-way
 * bandwidth with peer access on and, as a second matrix, off (the driver then stages through host memory), the
 * both-ways bandwidth (a copy each way at once) and the latency of a 4-byte copy; per GPU the host-to-device and
 * device-to-host bandwidth from pinned host memory. All through the driver API loaded with dlopen (no CUDA header
 * or runtime), timed on the host after synchronising, on a helper thread with a deadline (a copy that hangs is
 * reported, not waited for). TFB_TEST_LIBCUDA names a stub driver (tests). Used by `tfbench links`; prints nothing
 * and does not compare with nominal figures (the caller does, from the topology).
 */
#ifndef TFB_GPU_BW_H
#define TFB_GPU_BW_H
#include <stddef.h>

enum { TFB_BW_MAX_GPUS = 8 };

typedef struct {
    int n;                                             /* GPUs measured (the first n of the driver's order) */
    size_t bytes;                                      /* per copy */
    int iters;                                         /* timed copies per figure, after one untimed */
    int peer[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS];        /* peer access possible a -> b */
    double one_way[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS];  /* GB/s a -> b, peer access on where possible */
    double no_peer[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS];  /* GB/s a -> b, peer access off */
    double both[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS];     /* GB/s a <-> b, both directions summed */
    double latency_us[TFB_BW_MAX_GPUS][TFB_BW_MAX_GPUS]; /* 4-byte copy a -> b, peer access on */
    double h2d[TFB_BW_MAX_GPUS], d2h[TFB_BW_MAX_GPUS]; /* GB/s, pinned host memory */
    int complete;                                      /* every figure measured */
    char why[200];                                     /* what stopped it (no driver, a failed call, the deadline) */
} tfb_gpu_bw;

/* Measures GPUs 0 .. min(n, 8) - 1 with copies of `bytes`, `iters` timed each, within deadline_s in all. Returns
 * 1 when everything was measured; 0 with r->why set otherwise (figures measured before the stop are kept). */
int tfb_gpu_bw_measure(int n, size_t bytes, int iters, double deadline_s, tfb_gpu_bw *r);

#endif
