/* bench_conv.c — times tfbench's CPU convolution (im2col + OpenBLAS) on ResNet-50 shapes at batch 2: forward,
 * backward-data and backward-filter, median of 5 after one warm-up, one line per shape. scripts/bench-cpu.sh
 * prints it next to PyTorch's CPU convolution (oneDNN) on the same shapes (scripts/torch_conv.py). The layout
 * (NCHW by default, or NHWC: channels-last activations and filters) is the second argument.
 * usage: bench_conv THREADS [nchw|nhwc]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../kernels/backend.h"
#include "../bench/clock.h"
#include "../bench/stats.h"

static const int SHAPES[][6] = { /* c, h, k, r, stride: ResNet-50 v1.5 layers */
    {3, 224, 64, 7, 2}, {64, 56, 64, 1, 1}, {64, 56, 64, 3, 1}, {64, 56, 256, 1, 1},
    {128, 56, 128, 3, 2}, {256, 14, 256, 3, 1}, {512, 7, 2048, 1, 1}, {512, 7, 512, 3, 1},
};

static double time_shape(tfb_backend *be, const int *s, tfb_layout layout) {
    tfb_conv_desc d = {.n = 2, .c = s[0], .h = s[1], .w = s[1], .k = s[2], .r = s[3], .s = s[3], .stride = s[4],
                       .pad = s[3] / 2, .layout = layout, .in_type = TFB_F32};
    d.p = d.q = (d.h + 2 * d.pad - d.r) / d.stride + 1;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.k * d.p * d.q, nw = (size_t)d.k * d.c * d.r * d.s;
    float *x = be->alloc(be->ctx, nx * 4), *dx = be->alloc(be->ctx, nx * 4), *y = be->alloc(be->ctx, ny * 4);
    float *w = be->alloc(be->ctx, nw * 4), *dw = be->alloc(be->ctx, nw * 4);
    be->fill(be->ctx, x, 0.5f, nx);
    be->fill(be->ctx, w, 0.01f, nw);
    double t[5];
    for (int rep = 0; rep < 6; rep++) {
        double t0 = tfb_clock_s();
        be->conv_fwd(be->ctx, &d, y, x, w);
        be->conv_bwd_data(be->ctx, &d, dx, y, w);
        be->conv_bwd_filter(be->ctx, &d, dw, x, y);
        be->sync(be->ctx);
        if (rep) t[rep - 1] = tfb_clock_s() - t0;
    }
    be->free(be->ctx, x); be->free(be->ctx, dx); be->free(be->ctx, y); be->free(be->ctx, w); be->free(be->ctx, dw);
    return tfb_percentile(t, 5, 50);
}

int main(int argc, char **argv) {
    tfb_backend *be;
    char why[128];
    tfb_layout layout = argc > 2 && strcmp(argv[2], "nhwc") == 0 ? TFB_NHWC : TFB_NCHW;
    if (tfb_backend_open(&(tfb_backend_spec){.name = "cpu", .threads = argc > 1 ? atoi(argv[1]) : 1}, &be, why, sizeof why) != TFB_OK) return 1;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const int *s = SHAPES[i];
        printf("%d %d %d %d %d %.3f\n", s[0], s[1], s[2], s[3], s[4], 1e3 * time_shape(be, s, layout));
    }
    be->destroy(be);
    return 0;
}
