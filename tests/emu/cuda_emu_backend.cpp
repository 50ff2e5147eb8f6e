/* cuda_emu_backend.cpp — a tfb_backend named "cuda-emu" whose ops are the CUDA backend's own (cuda_ops.cu,
 * cuda_cnn.cu, cuda_shard.cu, compiled for tests/emu/cuda_emu.h), with host memory standing in for device memory.
 * gpu_check --device cuda-emu checks them against the CPU backend on a machine with no GPU.
 *
 * Deliberately absent: GEMM, convolution, timing marks and communication (cuBLAS, cuDNN, events and NCCL have no
 * emulation; gpu_check skips the checks of ops a backend lacks), and every device query but the SM count.
 */
#include <stdio.h>
#include <stdlib.h>
#include "cuda_internal.h"
#include "cuda_emu_backend.h"

/* Device memory is host memory: every allocation zero-filled, like cuda_alloc. */
static void *emu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return calloc(1, bytes ? bytes : 1);
}

static void emu_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static tfb_status emu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
    return TFB_OK;
}

static tfb_status emu_sync(void *ctx) {
    (void)ctx;
    return TFB_OK;
}

static void emu_destroy(tfb_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    free(c->flag);
    free(c->partials);
    free(c->scratch);
    free(c->workspace);
    free(c->gemm_ptrs);
    free(c);
    free(be);
}

extern "C" void tfb_cuda_report(const char *call, const char *file, int line, const char *detail) {
    tfb_check_report(call, file, line, detail);
}

tfb_status tfb_cuda_stream_wait(cuda_ctx *c) {
    (void)c;
    return TFB_OK;
}

tfb_status tfb_cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes) {
    (void)c;
    if (*have >= bytes) return TFB_OK;
    free(*buf);
    *buf = calloc(1, bytes);
    *have = *buf ? bytes : 0;
    return *buf ? TFB_OK : TFB_ERR_NOMEM;
}

/* sms: how many SMs the kernels size their grids for (the batch-norm reductions split channels by it). */
extern "C" tfb_status tfb_cuda_emu_backend_create(int sms, tfb_backend **out) {
    tfb_backend *be = (tfb_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    int *flag = (int *)calloc(1, sizeof(int));
    if (!be || !c || !flag) { free(be); free(c); free(flag); return TFB_ERR_NOMEM; }
    c->sms = sms;
    c->flag = flag;
    snprintf(c->name, sizeof c->name, "CUDA kernels emulated on the CPU, %d SMs", sms);
    *be = tfb_backend{};
    be->name = "cuda-emu";
    be->ctx = c;
    be->threads = 1;
    be->device_name = c->name;
    be->device_sms = sms;
    be->alloc = emu_alloc; be->free = emu_free;
    be->copy_h2d = emu_copy; be->copy_d2h = emu_copy; be->copy_d2d = emu_copy;
    be->sync = emu_sync; be->destroy = emu_destroy;
    tfb_cuda_ops_install(be);
    tfb_cuda_cnn_install(be);
    tfb_cuda_shard_install(be);
    *out = be;
    return TFB_OK;
}
