/* cuda_conv.cu — the CUDA backend's convolutions, through cuDNN.
 *
 * NCHW or NHWC tensors (NHWC filters (k, r, s, c)) in the input type with FP32 compute. cuDNN's search
 * (cudnnFind*) picks the algorithm once per shape, the first time the shape is seen (a warm-up step), and the plan
 * is cached. A 16-bit output asked for in 16 bits (y_type, dx_type) is written by cuDNN directly; other 16-bit
 * outputs are staged in the input type and widened to FP32 (dw added) by a small kernel: cuDNN keeps x, w and y in
 * one type.
 * FP32 convolutions accept only FMA algorithms (CUDNN_FMA_MATH), so FP32 never silently means TF32. An algorithm
 * whose workspace exceeds CONV_WORKSPACE_LIMIT is passed over for the fastest one within it: the workspace and the
 * 16-bit staging come out of the 1 GiB that `tfbench estimate` reserves beside the planned pools, and an FFT
 * algorithm of a large batch can ask for several GiB. Not here: the handle's creation and stream
 * (cuda_backend.cu), batch norm and pooling (cuda_cnn.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "cuda_internal.h"

/* ---- convolution plans ---- */

static int same_shape(const tfb_conv_desc *a, const tfb_conv_desc *b) {
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k && a->r == b->r &&
           a->s == b->s && a->stride == b->stride && a->pad == b->pad && a->p == b->p && a->q == b->q &&
           a->layout == b->layout && a->in_type == b->in_type && a->tf32 == b->tf32;
}

static cudnnDataType_t dnn_type(tfb_dtype t) {
    return t == TFB_F16 ? CUDNN_DATA_HALF : t == TFB_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* FP32 without TF32 must run on FMA units; everything else may use tensor cores. */
static cudnnMathType_t plan_math(const tfb_conv_desc *d) {
    return d->in_type == TFB_F32 && !d->tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

static tfb_status plan_describe(tfb_conv_plan *p, const tfb_conv_desc *d) {
    cudnnDataType_t t = dnn_type(d->in_type);
    cudnnTensorFormat_t f = d->layout == TFB_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    TFB_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->x));
    TFB_CHECK_CUDNN(cudnnCreateTensorDescriptor(&p->y));
    TFB_CHECK_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    TFB_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
    TFB_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->x, f, t, d->n, d->c, d->h, d->w));
    TFB_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->y, f, t, d->n, d->k, d->p, d->q));
    TFB_CHECK_CUDNN(cudnnSetFilter4dDescriptor(p->w, t, f, d->k, d->c, d->r, d->s));
    TFB_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, d->pad, d->pad, d->stride, d->stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TFB_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv, plan_math(d)));
    return TFB_OK;
}

static tfb_status plan_get(cuda_ctx *c, const tfb_conv_desc *d, tfb_conv_plan **out) {
    for (int i = 0; i < c->n_plans; i++)
        if (same_shape(&c->plans[i].key, d)) { *out = &c->plans[i]; return TFB_OK; }
    if (c->n_plans == c->cap_plans) {
        int cap = c->cap_plans ? 2 * c->cap_plans : 16;
        tfb_conv_plan *p = (tfb_conv_plan *)realloc(c->plans, (size_t)cap * sizeof *p);
        TFB_CHECK_ALLOC(p);
        c->plans = p;
        c->cap_plans = cap;
    }
    tfb_conv_plan *p = &c->plans[c->n_plans++];
    memset(p, 0, sizeof *p);
    p->key = *d;
    TFB_CHECK(plan_describe(p, d));
    *out = p;
    return TFB_OK;
}

void tfb_cuda_plans_free(cuda_ctx *c) {
    for (int i = 0; i < c->n_plans; i++) {
        tfb_conv_plan *p = &c->plans[i];
        if (p->x) cudnnDestroyTensorDescriptor(p->x);
        if (p->y) cudnnDestroyTensorDescriptor(p->y);
        if (p->w) cudnnDestroyFilterDescriptor(p->w);
        if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    }
    free(c->plans);
    c->plans = NULL;
    c->n_plans = c->cap_plans = 0;
}

static int is_tensor_op(cudnnMathType_t m) {
    return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

#define CONV_WORKSPACE_LIMIT ((size_t)512 << 20)

/* The fastest successful algorithm of a search (cuDNN lists them fastest first) whose math type the plan allows
 * and whose workspace fits CONV_WORKSPACE_LIMIT (index into perf, or -1). */
template <typename Perf> static int pick(const Perf *perf, int n, const tfb_conv_desc *d) {
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= CONV_WORKSPACE_LIMIT &&
            (plan_math(d) != CUDNN_FMA_MATH || !is_tensor_op(perf[i].mathType)))
            return i;
    return -1;
}

/* The math type a chosen algorithm runs with: FMA always for strict FP32, else what the search measured. */
static cudnnMathType_t run_math(const tfb_conv_desc *d, cudnnMathType_t searched) {
    return plan_math(d) == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : searched;
}

#define SEARCH 16
static tfb_status no_algorithm(const char *search, int line) {
    tfb_cuda_report(search, __FILE__, line, "no algorithm that succeeded, with the math type asked for, within the "
                    "512 MiB workspace limit");
    return TFB_ERR_BACKEND;
}

static tfb_status plan_search_fwd(cuda_ctx *c, tfb_conv_plan *p) {
    cudnnConvolutionFwdAlgoPerf_t perf[SEARCH];
    int n = 0;
    TFB_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(c->dnn, p->x, p->w, p->conv, p->y, SEARCH, &n, perf));
    int i = pick(perf, n, &p->key);
    if (i < 0) return no_algorithm("cudnnFindConvolutionForwardAlgorithm", __LINE__);
    p->fwd = perf[i];
    p->have_fwd = 1;
    return TFB_OK;
}

static tfb_status plan_search_data(cuda_ctx *c, tfb_conv_plan *p) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[SEARCH];
    int n = 0;
    TFB_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(c->dnn, p->w, p->y, p->conv, p->x, SEARCH, &n, perf));
    int i = pick(perf, n, &p->key);
    if (i < 0) return no_algorithm("cudnnFindConvolutionBackwardDataAlgorithm", __LINE__);
    p->data = perf[i];
    p->have_data = 1;
    return TFB_OK;
}

static tfb_status plan_search_filter(cuda_ctx *c, tfb_conv_plan *p) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[SEARCH];
    int n = 0;
    TFB_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(c->dnn, p->x, p->y, p->conv, p->w, SEARCH, &n, perf));
    int i = pick(perf, n, &p->key);
    if (i < 0) return no_algorithm("cudnnFindConvolutionBackwardFilterAlgorithm", __LINE__);
    p->filter = perf[i];
    p->have_filter = 1;
    return TFB_OK;
}

/* out (n) FP32 = widen(in (n) 16-bit) (accumulate: out += ...) */
template <typename T> __global__ void k_widen(float *out, const T *in, size_t n, int accumulate) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = (float)in[i];
        out[i] = accumulate ? out[i] + v : v;
    }
}

static tfb_status widen(cuda_ctx *c, float *out, const void *in, tfb_dtype t, size_t n, int accumulate) {
    if (t == TFB_F16) k_widen<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, c->stream>>>(out, (const __half *)in, n, accumulate);
    else k_widen<<<tfb_cuda_blocks(n), TFB_CUDA_THREADS, 0, c->stream>>>(out, (const __nv_bfloat16 *)in, n, accumulate);
    TFB_CHECK_LAUNCH();
    return TFB_OK;
}

static size_t y_elems(const tfb_conv_desc *d) { return (size_t)d->n * d->k * d->p * d->q; }
static size_t x_elems(const tfb_conv_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t w_elems(const tfb_conv_desc *d) { return (size_t)d->k * d->c * d->r * d->s; }

/* Where a 16-bit result of n elements is staged (the FP32 destination itself for FP32 convolutions). */
static tfb_status stage(cuda_ctx *c, const tfb_conv_desc *d, float *dst, size_t n, void **out) {
    if (d->in_type == TFB_F32) { *out = dst; return TFB_OK; }
    TFB_CHECK(tfb_cuda_grow(c, &c->scratch, &c->scratch_bytes, n * 2));
    *out = c->scratch;
    return TFB_OK;
}

/* y in d->y_type: cuDNN writes a 16-bit y_type (= in_type) directly, an FP32 one from 16-bit inputs is staged */
static tfb_status cuda_conv_fwd(void *ctx, const tfb_conv_desc *d, void *y, const void *x, const void *w) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    tfb_conv_plan *p;
    void *out = y;
    const float one = 1.0f, zero = 0.0f;
    int widened = d->in_type != TFB_F32 && d->y_type == TFB_F32;
    if (d->y_type != TFB_F32 && d->y_type != d->in_type) return TFB_ERR_ARG;
    TFB_CHECK(plan_get(c, d, &p));
    if (!p->have_fwd) TFB_CHECK(plan_search_fwd(c, p));
    TFB_CHECK(tfb_cuda_grow(c, &c->workspace, &c->workspace_bytes, p->fwd.memory));
    if (widened) TFB_CHECK(stage(c, d, (float *)y, y_elems(d), &out));
    TFB_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv, run_math(d, p->fwd.mathType)));
    TFB_CHECK_CUDNN(cudnnConvolutionForward(c->dnn, &one, p->x, x, p->w, w, p->conv, p->fwd.algo, c->workspace,
                                            p->fwd.memory, &zero, p->y, out));
    return widened ? widen(c, (float *)y, out, d->in_type, y_elems(d), 0) : TFB_OK;
}

/* dx in d->dx_type: likewise, cuDNN writes a 16-bit dx_type (= in_type) directly */
static tfb_status cuda_conv_bwd_data(void *ctx, const tfb_conv_desc *d, void *dx, const void *dy, const void *w) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    tfb_conv_plan *p;
    void *out = dx;
    const float one = 1.0f, zero = 0.0f;
    int widened = d->in_type != TFB_F32 && d->dx_type == TFB_F32;
    if (d->dx_type != TFB_F32 && d->dx_type != d->in_type) return TFB_ERR_ARG;
    TFB_CHECK(plan_get(c, d, &p));
    if (!p->have_data) TFB_CHECK(plan_search_data(c, p));
    TFB_CHECK(tfb_cuda_grow(c, &c->workspace, &c->workspace_bytes, p->data.memory));
    if (widened) TFB_CHECK(stage(c, d, (float *)dx, x_elems(d), &out));
    TFB_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv, run_math(d, p->data.mathType)));
    TFB_CHECK_CUDNN(cudnnConvolutionBackwardData(c->dnn, &one, p->w, w, p->y, dy, p->conv, p->data.algo,
                                                 c->workspace, p->data.memory, &zero, p->x, out));
    return widened ? widen(c, (float *)dx, out, d->in_type, x_elems(d), 0) : TFB_OK;
}

static tfb_status cuda_conv_bwd_filter(void *ctx, const tfb_conv_desc *d, float *dw, const void *x, const void *dy) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    tfb_conv_plan *p;
    void *out;
    const float one = 1.0f, zero = 0.0f;
    TFB_CHECK(plan_get(c, d, &p));
    if (!p->have_filter) TFB_CHECK(plan_search_filter(c, p));
    TFB_CHECK(tfb_cuda_grow(c, &c->workspace, &c->workspace_bytes, p->filter.memory));
    TFB_CHECK(stage(c, d, dw, w_elems(d), &out));
    TFB_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv, run_math(d, p->filter.mathType)));
    /* FP32 accumulates into dw directly (beta 1); 16-bit is computed alone and added in FP32 */
    TFB_CHECK_CUDNN(cudnnConvolutionBackwardFilter(c->dnn, &one, p->x, x, p->y, dy, p->conv, p->filter.algo,
                                                   c->workspace, p->filter.memory,
                                                   d->in_type == TFB_F32 ? &one : &zero, p->w, out));
    return d->in_type == TFB_F32 ? TFB_OK : widen(c, dw, out, d->in_type, w_elems(d), 1);
}

static const char *fwd_name(cudnnConvolutionFwdAlgo_t a) {
    static const char *const n[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                    "WINOGRAD", "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "other";
}
static const char *data_name(cudnnConvolutionBwdDataAlgo_t a) {
    static const char *const n[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "other";
}
static const char *filter_name(cudnnConvolutionBwdFilterAlgo_t a) {
    static const char *const n[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "other";
}
static const char *math_name(cudnnMathType_t m) { return is_tensor_op(m) ? "tensor ops" : "fma"; }

static int cuda_conv_plan_text(void *ctx, int i, char *buf, size_t len) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (i < 0 || i >= c->n_plans) return 0;
    const tfb_conv_plan *p = &c->plans[i];
    const tfb_conv_desc *d = &p->key;
    snprintf(buf, len, "x %dx%dx%dx%d, w %dx%dx%dx%d, stride %d, pad %d, %s, %s: forward %s (%s, %.0f MiB), "
             "backward data %s (%s, %.0f MiB), backward filter %s (%s, %.0f MiB)", d->n, d->c, d->h, d->w, d->k,
             d->c, d->r, d->s, d->stride, d->pad, d->layout == TFB_NHWC ? "nhwc" : "nchw",
             d->in_type == TFB_F16 ? "fp16" : d->in_type == TFB_BF16 ? "bf16" : d->tf32 ? "tf32" : "fp32",
             p->have_fwd ? fwd_name(p->fwd.algo) : "-", p->have_fwd ? math_name(p->fwd.mathType) : "-",
             p->have_fwd ? p->fwd.memory / 1048576.0 : 0.0,
             p->have_data ? data_name(p->data.algo) : "-", p->have_data ? math_name(p->data.mathType) : "-",
             p->have_data ? p->data.memory / 1048576.0 : 0.0,
             p->have_filter ? filter_name(p->filter.algo) : "-", p->have_filter ? math_name(p->filter.mathType) : "-",
             p->have_filter ? p->filter.memory / 1048576.0 : 0.0);
    return 1;
}

void tfb_cuda_conv_install(tfb_backend *be) {
    be->conv_fwd = cuda_conv_fwd;
    be->conv_bwd_data = cuda_conv_bwd_data;
    be->conv_bwd_filter = cuda_conv_bwd_filter;
    be->conv_plan_text = cuda_conv_plan_text;
}
