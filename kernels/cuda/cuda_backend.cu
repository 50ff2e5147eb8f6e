/* cuda_backend.cu — the CUDA backend's device checks, memory, copies and constructor.
 *
 * Memory: every alloc() is one cudaMalloc (never managed memory), zero-filled; tfbench's workloads carve their
 * tensors from a few pools, so this is called a handful of times per configuration. The bytes held and the peak
 * count the cuDNN workspace and staging buffers too. An allocation that does not fit says what was asked, what is
 * free, and how to find a batch that fits. Copies to the host wait for completion. Copies from the host are queued
 * on the stream without waiting for it: tfbench's host buffers are pageable, and CUDA consumes a pageable source
 * (staging it) before cudaMemcpyAsync returns, so the buffer may be reused at once while a micro-batch's upload does
 * not drain the stream. Everything else is queued on the backend's stream. GEMM/convolution, the training ops and the
 * shard ops are in the other cuda_*.cu files; communication (NCCL) is in cuda_comm.cu.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"

extern "C" void tfb_cuda_report(const char *call, const char *file, int line, const char *detail) {
    tfb_check_report(call, file, line, detail);
}

extern "C" int tfb_cuda_device_count(char *why, size_t why_len) {
    int n = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorInsufficientDriver && driver == 0)
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 not found or no NVIDIA kernel module)");
    else if (e == cudaErrorInsufficientDriver)
        snprintf(why, why_len, "the CUDA driver supports CUDA %d.%d, older than this build's runtime %d.%d: update "
                 "the driver", driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        snprintf(why, why_len, "the CUDA driver sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)");
    else if (e != cudaSuccess)
        snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return e == cudaSuccess ? n : 0;
}

static void note_alloc(cuda_ctx *c, size_t delta, int add) {
    c->in_use = add ? c->in_use + delta : c->in_use - delta;
    if (c->in_use > c->peak) c->peak = c->in_use;
}

static void report_oom(cuda_ctx *c, size_t bytes) {
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    fprintf(stderr, "tfbench[rank %d, cuda:%d]: out of GPU memory: asked for %.3f GiB with %.3f GiB free of %.3f GiB "
            "(tfbench holds %.3f GiB); run `tfbench estimate` with the same options for the largest --batch that "
            "fits, or add --checkpointing\n", tfb_log_rank, c->device, bytes / 1073741824.0, free_b / 1073741824.0,
            total / 1073741824.0, c->in_use / 1073741824.0);
}

static int track(cuda_ctx *c, void *p, size_t bytes) {
    if (c->n_allocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 32;
        void **ptrs = (void **)realloc(c->ptrs, (size_t)cap * sizeof *ptrs);
        if (ptrs) c->ptrs = ptrs;
        size_t *sizes = (size_t *)realloc(c->sizes, (size_t)cap * sizeof *sizes);
        if (sizes) c->sizes = sizes;
        if (!ptrs || !sizes) return 0;
        c->cap_allocs = cap;
    }
    c->ptrs[c->n_allocs] = p;
    c->sizes[c->n_allocs++] = bytes;
    note_alloc(c, bytes, 1);
    return 1;
}

static void *cuda_alloc(void *ctx, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    size_t rounded = ((bytes ? bytes : 1) + 255) & ~(size_t)255;
    void *p = NULL;
    if (cudaMalloc(&p, rounded) != cudaSuccess) {
        cudaGetLastError();
        report_oom(c, rounded);
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, rounded, c->stream) != cudaSuccess || !track(c, p, rounded)) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(void *ctx, void *p) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!p) return;
    for (int i = 0; i < c->n_allocs; i++) {
        if (c->ptrs[i] != p) continue;
        note_alloc(c, c->sizes[i], 0);
        c->ptrs[i] = c->ptrs[--c->n_allocs];
        c->sizes[i] = c->sizes[c->n_allocs];
        cudaStreamSynchronize(c->stream);
        cudaFree(p);
        return;
    }
}

tfb_status tfb_cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes) {
    if (bytes <= *have) return TFB_OK;
    cuda_free(c, *buf);
    *buf = NULL;
    *have = 0;
    TFB_CHECK_ALLOC(*buf = cuda_alloc(c, bytes));
    *have = bytes;
    return TFB_OK;
}

static void cuda_mem_stats(void *ctx, size_t *in_use, size_t *peak, int reset_peak) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (reset_peak) c->peak = c->in_use;
    if (in_use) *in_use = c->in_use;
    if (peak) *peak = c->peak;
}

tfb_status tfb_cuda_stream_wait(cuda_ctx *c) {
    if (!c->comms) {
        TFB_CHECK_CUDA(cudaStreamSynchronize(c->stream));
        return TFB_OK;
    }
    for (;;) { /* a collective of a failed peer never finishes: NCCL's error ends the wait instead */
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return TFB_OK;
        if (e != cudaErrorNotReady) TFB_CHECK_CUDA(e);
        TFB_TRY(tfb_cuda_comms_poll(c));
        sched_yield();
    }
}

/* Pageable src only (CUDA stages it before returning; a pinned src could still be read after the return). */
static tfb_status cuda_copy_h2d(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    TFB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return TFB_OK;
}

static tfb_status cuda_copy_d2h(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    TFB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return tfb_cuda_stream_wait(c);
}

static tfb_status cuda_copy_d2d(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    TFB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return TFB_OK;
}

static tfb_status cuda_sync(void *ctx) { return tfb_cuda_stream_wait((cuda_ctx *)ctx); }

/* Called from the watchdog's thread, which has no current device until this sets it; nothing here blocks. */
static int cuda_pending_text(void *ctx, char *buf, size_t len) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (cudaSetDevice(c->device) != cudaSuccess) return 0;
    if (tfb_cuda_comms_pending_text(c, buf, len)) return 1;
    if (cudaStreamQuery(c->stream) != cudaErrorNotReady) return 0;
    snprintf(buf, len, "a kernel or a copy on the compute stream%s",
             c->comms ? " (every collective it remembers has finished)" : "");
    return 1;
}

static tfb_status cuda_marks_reserve(void *ctx, int n) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (n < 0) return TFB_ERR_ARG;
    if (n <= c->n_marks) return TFB_OK;
    cudaEvent_t *m = (cudaEvent_t *)realloc(c->marks, (size_t)n * sizeof *m);
    TFB_CHECK_ALLOC(m);
    c->marks = m;
    for (; c->n_marks < n; c->n_marks++) TFB_CHECK_CUDA(cudaEventCreate(&c->marks[c->n_marks]));
    return TFB_OK;
}

static tfb_status cuda_mark(void *ctx, int i) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (i < 0 || i >= c->n_marks) return TFB_ERR_ARG;
    TFB_CHECK_CUDA(cudaEventRecord(c->marks[i], c->stream));
    return TFB_OK;
}

static tfb_status cuda_mark_seconds(void *ctx, int a, int b, double *seconds) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    float ms = 0.0f;
    if (a < 0 || b < 0 || a >= c->n_marks || b >= c->n_marks) return TFB_ERR_ARG;
    TFB_CHECK_CUDA(cudaEventElapsedTime(&ms, c->marks[a], c->marks[b]));
    *seconds = ms * 1e-3;
    return TFB_OK;
}

static void cuda_destroy(tfb_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_marks; i++) cudaEventDestroy(c->marks[i]);
    free(c->marks);
    tfb_cuda_plans_free(c);
    for (int i = 0; i < c->n_allocs; i++) cudaFree(c->ptrs[i]);
    if (c->blas) cublasDestroy(c->blas);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->ptrs);
    free(c->sizes);
    free(c);
    free(be);
}

/* A kernel that does nothing with NULL: launching it tells whether this binary has code for the device. */
__global__ void k_probe(int *x) {
    if (x) *x = 1;
}

/* The device can run this binary: a trivial kernel launches (no kernel image for its compute capability fails). */
static tfb_status device_usable(int device, char *why, size_t why_len) {
    cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) {
        k_probe<<<1, 1>>>(NULL);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    if (e == cudaErrorNoKernelImageForDevice)
        snprintf(why, why_len, "GPU %d (%s, compute capability %d.%d) has no kernel image in this build: rebuild with "
                 "CUDA_ARCHS including %d%d", device, prop.name, prop.major, prop.minor, prop.major, prop.minor);
    else if (e != cudaSuccess)
        snprintf(why, why_len, "GPU %d: %s", device, cudaGetErrorString(e));
    return e == cudaSuccess ? TFB_OK : TFB_ERR_ARG;
}

/* What MFU and the results need to know about the GPU (name, compute capability, SMs, maximum clock). */
static tfb_status describe_device(tfb_backend *be, cuda_ctx *c) {
    cudaDeviceProp prop;
    int khz = 0;
    TFB_CHECK_CUDA(cudaGetDeviceProperties(&prop, c->device));
    TFB_CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, c->device));
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    be->device_name = c->name;
    be->device_index = c->device;
    be->device_cc = c->cc = prop.major * 10 + prop.minor;
    be->device_sms = c->sms = prop.multiProcessorCount;
    be->device_memory_bytes = prop.totalGlobalMem;
    be->device_reserved_bytes = (size_t)1 << 30; /* as `tfbench estimate --reserve` assumes */
    be->device_clock_mhz = khz / 1000.0;
    if (cudaDeviceGetPCIBusId(c->pci, sizeof c->pci, c->device) == cudaSuccess) be->device_pci_bus_id = c->pci;
    return TFB_OK;
}

static tfb_status cuda_ctx_open(cuda_ctx *c) {
    TFB_CHECK_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    TFB_CHECK_CUBLAS(cublasCreate(&c->blas));
    TFB_CHECK_CUBLAS(cublasSetStream(c->blas, c->stream));
    TFB_CHECK_CUBLAS(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    TFB_CHECK_CUDNN(cudnnCreate(&c->dnn));
    TFB_CHECK_CUDNN(cudnnSetStream(c->dnn, c->stream));
    TFB_CHECK_ALLOC(c->flag = (int *)cuda_alloc(c, sizeof(int)));
    return TFB_OK;
}

extern "C" tfb_status tfb_cuda_backend_create(int device, tfb_backend **out, char *why, size_t why_len) {
    if (tfb_cuda_device_count(why, why_len) <= device) {
        if (!why[0]) snprintf(why, why_len, "no GPU %d on this machine", device);
        return TFB_ERR_ARG;
    }
    TFB_TRY(device_usable(device, why, why_len));
    tfb_backend *be = (tfb_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return TFB_ERR_NOMEM; }
    c->device = device;
    *be = tfb_backend{};
    be->name = "cuda";
    be->ctx = c;
    be->threads = 1;
    be->alloc = cuda_alloc; be->free = cuda_free; be->mem_stats = cuda_mem_stats;
    be->copy_h2d = cuda_copy_h2d; be->copy_d2h = cuda_copy_d2h; be->copy_d2d = cuda_copy_d2d;
    be->sync = cuda_sync; be->destroy = cuda_destroy;
    be->marks_reserve = cuda_marks_reserve; be->mark = cuda_mark; be->mark_seconds = cuda_mark_seconds;
    be->comm_wrap = tfb_cuda_comm_wrap;
    be->pending_text = cuda_pending_text;
    be->trace = tfb_cuda_trace;
    if (tfb_cuda_profile_open() && tfb_log_rank == 0)
        fprintf(stderr, "tfbench: kernel profile on (TFB_KERNEL_PROFILE): CUPTI records every kernel of the timed "
                        "windows, so this run's throughput is not a benchmark figure\n");
    tfb_cuda_kernels_install(be);
    tfb_status st = cuda_ctx_open(c);
    if (st == TFB_OK) st = describe_device(be, c);
    if (st != TFB_OK) {
        snprintf(why, why_len, "GPU %d: could not create the stream, cuBLAS or cuDNN handle (see above)", device);
        cuda_destroy(be);
        return st;
    }
    *out = be;
    return TFB_OK;
}
