/* emu_cudnn.cpp — the cuDNN calls that cuda_conv.cu makes, computed on the CPU, for the emulated CUDA backend
 * (cuda_emu_backend.cpp). Written from cuDNN's definitions, not from tfbench's descriptor: a 4-D tensor's format
 * sets its strides (NCHW, or NHWC: channels innermost), a filter's format its layout ((k, c, r, s), or (k, r, s, c)
 * for NHWC), and each convolution is output = alpha * op(inputs) + beta * output, the output not read when beta is
 * 0. So cuda_conv.cu's descriptors, its staging of 16-bit results and its accumulation into dw are checked against
 * the CPU backend without a GPU.
 * What cuDNN checks, this checks: x, w and y of one type (FP32 with FP32 compute, or FP16/BF16 with FP32 compute),
 * channels and output sizes that agree, and a workspace of the size the chosen algorithm asked for. FP32 data runs
 * as TF32 (inputs rounded) unless the convolution's math type is CUDNN_FMA_MATH, as on an Ampere or newer GPU. The
 * searches (cudnnFind*) list, fastest first, an algorithm whose workspace is too large for tfbench, one that is not
 * supported, and two that work, one of them needing a workspace.
 * Deliberately absent: every other cuDNN call, groups, 5-D tensors, streams (calls run at once), and speed.
 */
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cudnn.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "emu_tf32.h"

struct cudnnContext {
    cudaStream_t stream;
};
struct cudnnTensorStruct {
    int set;
    cudnnDataType_t type;
    int n, c, h, w;
    long long sn, sc, sh, sw; /* element strides */
};
struct cudnnFilterStruct {
    int set;
    cudnnDataType_t type;
    cudnnTensorFormat_t format;
    int k, c, r, s;
};
struct cudnnConvolutionStruct {
    int set;
    int pad_h, pad_w, u, v, dil_h, dil_w;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    cudnnMathType_t math;
};

const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "CUDNN_STATUS (other)";
    }
}

/* ---- handles and descriptors ---- */

template <typename T> static cudnnStatus_t create(T **out) {
    if (!out) return CUDNN_STATUS_BAD_PARAM;
    *out = (T *)calloc(1, sizeof(T));
    return *out ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

template <typename T> static cudnnStatus_t destroy(T *p) {
    free(p);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *handle) { return create(handle); }
cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) { return destroy(handle); }
cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUDNN_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { return create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
cudnnStatus_t CUDNNWINAPI cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { return create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) { return create(d); }
cudnnStatus_t CUDNNWINAPI cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return destroy(d); }

static int data_type_known(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16;
}

cudnnStatus_t CUDNNWINAPI cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                                     cudnnDataType_t type, int n, int c, int h, int w) {
    if (!d || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if (!data_type_known(type)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (format == CUDNN_TENSOR_NCHW) *d = {1, type, n, c, h, w, (long long)c * h * w, (long long)h * w, w, 1};
    else if (format == CUDNN_TENSOR_NHWC) *d = {1, type, n, c, h, w, (long long)h * w * c, 1, (long long)w * c, c};
    else return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                                     cudnnTensorFormat_t format, int k, int c, int h, int w) {
    if (!d || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if (!data_type_known(type) || (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {1, type, format, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                                          int u, int v, int dilation_h, int dilation_w,
                                                          cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
    if (!d || pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
    cudnnMathType_t math = d->set ? d->math : CUDNN_DEFAULT_MATH;
    *d = {1, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute, math};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    d->math = math;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- one convolution problem ---- */

typedef struct {
    const cudnnTensorStruct *x, *y;
    const cudnnFilterStruct *w;
    const cudnnConvolutionStruct *cv;
    int tf32; /* FP32 inputs rounded to TF32 */
} conv_problem;

/* Whether cuDNN would run x, w, conv, y: descriptors set, one data type with FP32 compute, sizes that agree. */
static cudnnStatus_t conv_check(cudnnHandle_t h, const conv_problem *p) {
    if (!h) return CUDNN_STATUS_NOT_INITIALIZED;
    const cudnnTensorStruct *x = p->x, *y = p->y;
    const cudnnFilterStruct *w = p->w;
    const cudnnConvolutionStruct *cv = p->cv;
    if (!x || !y || !w || !cv || !x->set || !y->set || !w->set || !cv->set) return CUDNN_STATUS_BAD_PARAM;
    if (x->type != w->type || y->type != x->type) return CUDNN_STATUS_BAD_PARAM;
    if (cv->compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    int ph = (x->h + 2 * cv->pad_h - cv->dil_h * (w->r - 1) - 1) / cv->u + 1;
    int pw = (x->w + 2 * cv->pad_w - cv->dil_w * (w->s - 1) - 1) / cv->v + 1;
    if (x->c != w->c || y->n != x->n || y->c != w->k || y->h != ph || y->w != pw) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

static float load(const void *p, cudnnDataType_t t, long long i) {
    if (t == CUDNN_DATA_HALF) return __half2float(((const __half *)p)[i]);
    if (t == CUDNN_DATA_BFLOAT16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

static void store(void *p, cudnnDataType_t t, long long i, float v) {
    if (t == CUDNN_DATA_HALF) ((__half *)p)[i] = __float2half_rn(v);
    else if (t == CUDNN_DATA_BFLOAT16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((float *)p)[i] = v;
}

static size_t tensor_elems(const cudnnTensorStruct *t) { return (size_t)t->n * t->c * t->h * t->w; }
static size_t filter_elems(const cudnnFilterStruct *w) { return (size_t)w->k * w->c * w->r * w->s; }

/* An input tensor's n elements as FP32 (rounded to TF32 where the problem runs as TF32), in its own layout. */
static std::vector<float> inputs(const conv_problem *p, const void *a, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        float e = load(a, p->x->type, (long long)i);
        v[i] = p->tf32 ? emu_round_tf32(e) : e;
    }
    return v;
}

static long long at_tensor(const cudnnTensorStruct *t, int n, int c, int h, int w) {
    return n * t->sn + c * t->sc + h * t->sh + w * t->sw;
}

/* Filter tap (k, c, r, s) of the correlation: a true convolution reads the filter flipped. */
static long long at_filter(const conv_problem *p, int k, int c, int r, int s) {
    const cudnnFilterStruct *w = p->w;
    if (p->cv->mode == CUDNN_CONVOLUTION) r = w->r - 1 - r, s = w->s - 1 - s;
    if (w->format == CUDNN_TENSOR_NHWC) return (((long long)k * w->r + r) * w->s + s) * w->c + c;
    return (((long long)k * w->c + c) * w->r + r) * w->s + s;
}

/* The input row (column) that output row oh (column) reads at tap r, or -1 in the padding. */
static int in_row(const conv_problem *p, int oh, int r) {
    int ih = oh * p->cv->u - p->cv->pad_h + r * p->cv->dil_h;
    return ih >= 0 && ih < p->x->h ? ih : -1;
}
static int in_col(const conv_problem *p, int ow, int s) {
    int iw = ow * p->cv->v - p->cv->pad_w + s * p->cv->dil_w;
    return iw >= 0 && iw < p->x->w ? iw : -1;
}

/* out = alpha * v + beta * out, rounded once; out not read when beta is 0. The sums v are in double: the
 * reference's own rounding stays far below what the checks it serves can see. */
static void blend(void *out, cudnnDataType_t t, long long i, float alpha, float beta, double v) {
    double o = alpha * v;
    if (beta != 0.0f) o += beta * (double)load(out, t, i);
    store(out, t, i, (float)o);
}

/* ---- algorithms and their searches ---- */

#define TOO_LARGE ((size_t)1 << 40) /* a workspace no run could give */
#define PRECOMP_BYTES ((size_t)4096)
static const size_t ALGO_BYTES[4] = {TOO_LARGE, 0, PRECOMP_BYTES, 0}; /* each search's i-th result's workspace */

static cudnnStatus_t workspace_check(size_t need, const void *ws, size_t have) {
    return have < need || (need && !ws) ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
}

/* What a search returns: four results, fastest first (see the file's comment). */
template <typename Perf, typename Algo>
static cudnnStatus_t search(const conv_problem *p, cudnnHandle_t h, int requested, int *returned, Perf *perf,
                            const Algo algos[4]) {
    cudnnStatus_t st = conv_check(h, p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (requested < 1 || !returned || !perf) return CUDNN_STATUS_BAD_PARAM;
    int n = requested < 4 ? requested : 4;
    for (int i = 0; i < n; i++) {
        memset(&perf[i], 0, sizeof perf[i]);
        perf[i].algo = algos[i];
        perf[i].status = i == 1 ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
        perf[i].time = i == 1 ? -1.0f : 0.1f * (float)(i + 1);
        perf[i].memory = ALGO_BYTES[i];
        perf[i].determinism = CUDNN_DETERMINISTIC;
        perf[i].mathType = p->cv->math;
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

static const cudnnConvolutionFwdAlgo_t FWD_ALGOS[4] = {
    CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
static const cudnnConvolutionBwdDataAlgo_t DATA_ALGOS[4] = {
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
static const cudnnConvolutionBwdFilterAlgo_t FILTER_ALGOS[4] = {
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0};

/* The workspace algorithm `algo` (of the list `algos`) needs, or -1 when the search never offers it. */
template <typename Algo> static long long algo_bytes(const Algo algos[4], Algo algo) {
    for (int i = 0; i < 4; i++)
        if (algos[i] == algo && i != 1) return (long long)ALGO_BYTES[i];
    return -1;
}

static conv_problem problem(const cudnnTensorStruct *x, const cudnnFilterStruct *w, const cudnnConvolutionStruct *cv,
                            const cudnnTensorStruct *y) {
    int tf32 = x && cv && x->type == CUDNN_DATA_FLOAT && cv->math != CUDNN_FMA_MATH;
    return conv_problem{x, y, w, cv, tf32};
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                               const cudnnFilterDescriptor_t w,
                                                               const cudnnConvolutionDescriptor_t conv,
                                                               const cudnnTensorDescriptor_t y, const int requested,
                                                               int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    conv_problem p = problem(x, w, conv, y);
    return search(&p, handle, requested, returned, perf, FWD_ALGOS);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    conv_problem p = problem(dx, w, conv, dy);
    return search(&p, handle, requested, returned, perf, DATA_ALGOS);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    conv_problem p = problem(x, dw, conv, dy);
    return search(&p, handle, requested, returned, perf, FILTER_ALGOS);
}

/* A run's checks: the problem, then the algorithm (one the search offers) and its workspace. */
template <typename Algo>
static cudnnStatus_t run_check(cudnnHandle_t h, const conv_problem *p, const Algo algos[4], Algo algo,
                               const void *ws, size_t ws_bytes) {
    cudnnStatus_t st = conv_check(h, p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    long long need = algo_bytes(algos, algo);
    if (need < 0) return CUDNN_STATUS_NOT_SUPPORTED;
    return workspace_check((size_t)need, ws, ws_bytes);
}

/* ---- the three convolutions ---- */

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                                                  const cudnnTensorDescriptor_t xd, const void *x,
                                                  const cudnnFilterDescriptor_t wd, const void *w,
                                                  const cudnnConvolutionDescriptor_t conv,
                                                  cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                                  const void *beta, const cudnnTensorDescriptor_t yd, void *y) {
    conv_problem p = problem(xd, wd, conv, yd);
    cudnnStatus_t st = run_check(handle, &p, FWD_ALGOS, algo, ws, ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    std::vector<float> xv = inputs(&p, x, tensor_elems(xd)), wv = inputs(&p, w, filter_elems(wd));
    for (int n = 0; n < yd->n; n++)
        for (int k = 0; k < yd->c; k++)
            for (int oh = 0; oh < yd->h; oh++)
                for (int ow = 0; ow < yd->w; ow++) {
                    double acc = 0.0;
                    for (int c = 0; c < xd->c; c++)
                        for (int r = 0; r < wd->r; r++)
                            for (int s = 0; s < wd->s; s++) {
                                int ih = in_row(&p, oh, r), iw = in_col(&p, ow, s);
                                if (ih >= 0 && iw >= 0)
                                    acc += (double)xv[at_tensor(xd, n, c, ih, iw)] * wv[at_filter(&p, k, c, r, s)];
                            }
                    blend(y, yd->type, at_tensor(yd, n, k, oh, ow), *(const float *)alpha, *(const float *)beta, acc);
                }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                                       const cudnnFilterDescriptor_t wd, const void *w,
                                                       const cudnnTensorDescriptor_t dyd, const void *dy,
                                                       const cudnnConvolutionDescriptor_t conv,
                                                       cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t ws_bytes,
                                                       const void *beta, const cudnnTensorDescriptor_t dxd, void *dx) {
    conv_problem p = problem(dxd, wd, conv, dyd);
    cudnnStatus_t st = run_check(handle, &p, DATA_ALGOS, algo, ws, ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    std::vector<float> dyv = inputs(&p, dy, tensor_elems(dyd)), wv = inputs(&p, w, filter_elems(wd));
    std::vector<double> acc(tensor_elems(dxd), 0.0); /* in dx's layout: each output's taps scattered into it */
    for (int n = 0; n < dyd->n; n++)
        for (int k = 0; k < dyd->c; k++)
            for (int oh = 0; oh < dyd->h; oh++)
                for (int ow = 0; ow < dyd->w; ow++) {
                    float g = dyv[at_tensor(dyd, n, k, oh, ow)];
                    for (int c = 0; c < dxd->c; c++)
                        for (int r = 0; r < wd->r; r++)
                            for (int s = 0; s < wd->s; s++) {
                                int ih = in_row(&p, oh, r), iw = in_col(&p, ow, s);
                                if (ih >= 0 && iw >= 0)
                                    acc[at_tensor(dxd, n, c, ih, iw)] += (double)g * wv[at_filter(&p, k, c, r, s)];
                            }
                }
    for (size_t i = 0; i < acc.size(); i++)
        blend(dx, dxd->type, (long long)i, *(const float *)alpha, *(const float *)beta, acc[i]);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                                         const cudnnTensorDescriptor_t xd, const void *x,
                                                         const cudnnTensorDescriptor_t dyd, const void *dy,
                                                         const cudnnConvolutionDescriptor_t conv,
                                                         cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                                         size_t ws_bytes, const void *beta,
                                                         const cudnnFilterDescriptor_t dwd, void *dw) {
    conv_problem p = problem(xd, dwd, conv, dyd);
    cudnnStatus_t st = run_check(handle, &p, FILTER_ALGOS, algo, ws, ws_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    std::vector<float> xv = inputs(&p, x, tensor_elems(xd)), dyv = inputs(&p, dy, tensor_elems(dyd));
    for (int k = 0; k < dwd->k; k++)
        for (int c = 0; c < dwd->c; c++)
            for (int r = 0; r < dwd->r; r++)
                for (int s = 0; s < dwd->s; s++) {
                    double acc = 0.0;
                    for (int n = 0; n < xd->n; n++)
                        for (int oh = 0; oh < dyd->h; oh++)
                            for (int ow = 0; ow < dyd->w; ow++) {
                                int ih = in_row(&p, oh, r), iw = in_col(&p, ow, s);
                                if (ih >= 0 && iw >= 0)
                                    acc += (double)dyv[at_tensor(dyd, n, k, oh, ow)] * xv[at_tensor(xd, n, c, ih, iw)];
                            }
                    blend(dw, dwd->type, at_filter(&p, k, c, r, s), *(const float *)alpha, *(const float *)beta, acc);
                }
    return CUDNN_STATUS_SUCCESS;
}
