/* cuda_emu_backend.cpp — a tfb_backend named "cuda-emu" whose ops are the CUDA backend's own (cuda_gemm.cu,
 * cuda_conv.cu, cuda_ops.cu, cuda_cnn.cu, cuda_shard.cu, compiled for tests/emu/cuda_emu.h), with host memory
 * standing in for device memory and the cuBLAS and cuDNN calls computed on the CPU (emu_cublas.cpp,
 * emu_cudnn.cpp). gpu_check --device cuda-emu checks them against the CPU backend on a machine with no GPU;
 * tfbench_emu trains with them.
 *
 * Every allocation is registered as device memory (cudaPointerGetAttributes). Without a CPU delegate the backend
 * lacks timing marks (gpu_check skips the checks of ops a backend lacks); with one, those and memory (so its
 * accounting sees every buffer) are the delegate's, so whole training steps run with every op on the CUDA
 * backend's code. Communication between ranks is the CUDA backend's own communicator (cuda_comm.cu) over
 * emu_nccl.c, which does NCCL's calls with MPI, where NCCL's header was found (HAVE_EMU_NCCL); else the job's MPI
 * communicator on the host buffers. Deliberately absent either way: every device query but the SM count.
 */
#include <stdio.h>
#include <stdlib.h>
#include "config.h"
#include "cuda_internal.h"
#include "cuda_emu_backend.h"

/* The backend's context: what the CUDA kernels' host code reads (first, so a cuda_ctx * is an emu_ctx *), and the
 * CPU backend that GEMM, convolution, memory, marks and communication are delegated to, or NULL. */
typedef struct {
    cuda_ctx c;
    tfb_backend *cpu;
} emu_ctx;

static tfb_backend *cpu_of(void *ctx) { return ((emu_ctx *)ctx)->cpu; }

/* Device memory is host memory: every allocation zero-filled, like cuda_alloc. */
static void *emu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = calloc(1, bytes ? bytes : 1);
    tfb_emu_device_range(p, bytes, 1);
    return p;
}

static void emu_free(void *ctx, void *p) {
    (void)ctx;
    tfb_emu_device_range(p, 0, 0);
    free(p);
}

static tfb_status emu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
    return TFB_OK;
}

/* As on a GPU, waiting for the device is where the communicators' failures surface (tfb_cuda_stream_wait). */
static tfb_status emu_sync(void *ctx) { return tfb_cuda_stream_wait((cuda_ctx *)ctx); }

static tfb_status emu_copy_d2h(void *ctx, void *dst, const void *src, size_t bytes) {
    memmove(dst, src, bytes);
    return emu_sync(ctx);
}

static void emu_destroy(tfb_backend *be) {
    emu_ctx *e = (emu_ctx *)be->ctx;
    cuda_ctx *c = &e->c;
    if (e->cpu) e->cpu->destroy(e->cpu);
    tfb_cuda_plans_free(c);
    if (c->blas) cublasDestroy(c->blas);
    if (c->dnn) cudnnDestroy(c->dnn);
    void *grown[] = {c->flag, c->partials, c->tickets, c->scratch, c->workspace, c->gemm_ptrs};
    for (void *p : grown) {
        tfb_emu_device_range(p, 0, 0); /* so a later host allocation at that address is not taken for the device's */
        free(p);
    }
    free(e);
    free(be);
}

extern "C" void tfb_cuda_report(const char *call, const char *file, int line, const char *detail) {
    tfb_check_report(call, file, line, detail);
}

/* The compute stream's work ran when queued, and so did every collective it waits for (cudaStreamWaitEvent); a
 * collective it does not wait for stays deferred, as a GPU's sync of the compute stream does not wait for it. As on
 * a GPU, a wait is where a communicator's failure surfaces. */
tfb_status tfb_cuda_stream_wait(cuda_ctx *c) {
#if HAVE_EMU_NCCL
    if (c->comms) return tfb_cuda_comms_poll(c);
#endif
    (void)c;
    return TFB_OK;
}

#if HAVE_EMU_NCCL
/* Kernels run when queued, so only the communicators' collectives can be unfinished (deferred, or stuck waiting
 * for a peer). */
static int emu_pending_text(void *ctx, char *buf, size_t len) {
    return tfb_cuda_comms_pending_text((cuda_ctx *)ctx, buf, len);
}
#endif

tfb_status tfb_cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes) {
    (void)c;
    if (*have >= bytes) return TFB_OK;
    tfb_emu_device_range(*buf, 0, 0);
    free(*buf);
    *buf = calloc(1, bytes);
    *have = *buf ? bytes : 0;
    tfb_emu_device_range(*buf, bytes, 1);
    return *buf ? TFB_OK : TFB_ERR_NOMEM;
}

/* ---- what a CPU delegate does: each call is the delegate's op on its own context ---- */

static void *cpu_alloc(void *ctx, size_t bytes) {
    void *p = cpu_of(ctx)->alloc(cpu_of(ctx)->ctx, bytes);
    tfb_emu_device_range(p, bytes, 1);
    return p;
}
static void cpu_free(void *ctx, void *p) {
    tfb_emu_device_range(p, 0, 0);
    cpu_of(ctx)->free(cpu_of(ctx)->ctx, p);
}
static void cpu_mem_stats(void *ctx, size_t *in_use, size_t *peak, int reset_peak) {
    cpu_of(ctx)->mem_stats(cpu_of(ctx)->ctx, in_use, peak, reset_peak);
}
static tfb_status cpu_marks_reserve(void *ctx, int n) { return cpu_of(ctx)->marks_reserve(cpu_of(ctx)->ctx, n); }
static tfb_status cpu_mark(void *ctx, int i) { return cpu_of(ctx)->mark(cpu_of(ctx)->ctx, i); }
static tfb_status cpu_mark_seconds(void *ctx, int a, int b, double *seconds) {
    return cpu_of(ctx)->mark_seconds(cpu_of(ctx)->ctx, a, b, seconds);
}

/* The delegate's ops over be's, where the delegate has them. */
static void emu_delegate(tfb_backend *be, const tfb_backend *cpu) {
    be->alloc = cpu_alloc; be->free = cpu_free; be->mem_stats = cpu_mem_stats;
    be->threads = cpu->threads;
    be->device_memory_bytes = cpu->device_memory_bytes;
    if (cpu->marks_reserve) {
        be->marks_reserve = cpu_marks_reserve;
        be->mark = cpu_mark;
        be->mark_seconds = cpu_mark_seconds;
    }
}

/* sms: how many SMs the kernels size their grids for (the batch-norm reductions split channels by it); cpu: the
 * delegate (owned from here on, also on failure), or NULL. */
extern "C" tfb_status tfb_cuda_emu_backend_create(int sms, tfb_backend *cpu, tfb_backend **out) {
    tfb_backend *be = (tfb_backend *)calloc(1, sizeof *be);
    emu_ctx *e = (emu_ctx *)calloc(1, sizeof *e);
    cuda_ctx *c = e ? &e->c : NULL;
    int *flag = (int *)calloc(1, sizeof(int));
    if (!be || !e || !flag || cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cudnnCreate(&c->dnn) != CUDNN_STATUS_SUCCESS) {
        if (c && c->blas) cublasDestroy(c->blas);
        free(be); free(e); free(flag);
        if (cpu) cpu->destroy(cpu);
        return TFB_ERR_NOMEM;
    }
    e->cpu = cpu;
    c->sms = sms;
    c->cc = 90; /* what the kernels may assume of the GPU: BF16 fragments included */
    c->flag = flag;
    tfb_emu_device_range(flag, sizeof(int), 1);
    snprintf(c->name, sizeof c->name, "CUDA kernels emulated on the CPU, %d SMs", sms);
    *be = tfb_backend{};
    be->name = "cuda-emu";
    be->ctx = c;
    be->threads = 1;
    be->device_name = c->name;
    be->device_sms = sms;
    be->alloc = emu_alloc; be->free = emu_free;
    be->copy_h2d = emu_copy; be->copy_d2h = emu_copy_d2h; be->copy_d2d = emu_copy;
    be->sync = emu_sync; be->destroy = emu_destroy;
    tfb_cuda_kernels_install(be);
#if HAVE_EMU_NCCL
    be->comm_wrap = tfb_cuda_comm_wrap; /* cuda_comm.cu over emu_nccl.c: NCCL's calls done by MPI */
    be->pending_text = emu_pending_text;
#endif
    if (cpu) emu_delegate(be, cpu);
    *out = be;
    return TFB_OK;
}
