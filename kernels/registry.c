/* registry.c — the one place that knows which backends this build contains and picks one by name.
 *
 * "auto" takes the best backend that can run here: the CUDA backend when this build has it and a usable GPU is
 * present, else the CPU backend (which always builds), with the reason left in `why` so the driver can say it
 * once. Zero GPUs is not an error for "auto"; it is for "cuda". Each rank takes the GPU of its node-local rank.
 * No other file tests TFB_CUDA_BACKEND.
 *
 * Compiled a second time with TFB_REGISTRY_EMU=1 for the test program tfbench_emu, where "cuda" is the CUDA
 * backend emulated on the CPU (tests/emu/: its kernels, and its cuBLAS and cuDNN calls computed by stand-ins),
 * with memory, timing marks and communication on the CPU backend. That program's cuBLAS and cuDNN symbols are
 * the stand-ins, so there the real CUDA backend is never opened, not even by "auto" (TFB_REAL_CUDA).
 */
#include <stdio.h>
#include <string.h>
#include "config.h"
#include "backend.h"
#include "cpu/cpu.h"
#if TFB_CUDA_BACKEND
#include "cuda/cuda.h"
#endif
#define TFB_REAL_CUDA (TFB_CUDA_BACKEND && !TFB_REGISTRY_EMU)
#if TFB_REGISTRY_EMU
#include "../tests/emu/cuda_emu_backend.h"
#define TFB_EMU_SMS 4 /* the SM count the emulated kernels size their grids for */
#endif

const char *tfb_dtype_name(tfb_dtype t) {
    return t == TFB_F16 ? "fp16" : t == TFB_BF16 ? "bf16" : "fp32";
}

const char *tfb_backend_list(void) {
#if TFB_REGISTRY_EMU
    return "cpu, cuda (emulated on the CPU)";
#else
    return TFB_CUDA_BACKEND ? "cpu, cuda" : "cpu";
#endif
}

#if TFB_REAL_CUDA
/* The GPU of this rank: its node-local rank, unless there are more ranks on the node than GPUs. */
static tfb_status cuda_open(const tfb_backend_spec *s, tfb_backend **out, char *why, size_t why_len) {
    int n = tfb_cuda_device_count(why, why_len);
    if (n == 0) return TFB_ERR_ARG;
    if (s->local_size > n && !s->allow_shared_gpu) {
        snprintf(why, why_len, "%d ranks on this node but %d GPU%s: start one rank per GPU, or pass "
                 "--allow-shared-gpu to let ranks share them", s->local_size, n, n == 1 ? "" : "s");
        return TFB_ERR_ARG;
    }
    return tfb_cuda_backend_create(s->local_rank % n, out, why, why_len);
}
#endif

static tfb_status auto_open(const tfb_backend_spec *s, tfb_backend **out, char *why, size_t why_len) {
#if TFB_REAL_CUDA
    char gpu_why[256] = "";
    if (tfb_cuda_device_count(gpu_why, sizeof gpu_why) > 0) return cuda_open(s, out, why, why_len);
    snprintf(why, why_len, "using the CPU backend: %s", gpu_why);
#elif TFB_REGISTRY_EMU
    snprintf(why, why_len, "using the CPU backend: the emulated CUDA backend only when asked for (--device cuda)");
#else
    snprintf(why, why_len, "using the CPU backend: this tfbench was built without CUDA");
#endif
    return tfb_cpu_backend_create(s->threads, out);
}

tfb_status tfb_backend_open(const tfb_backend_spec *s, tfb_backend **out, char *why, size_t why_len) {
    why[0] = '\0';
    if (strcmp(s->name, "auto") == 0) return auto_open(s, out, why, why_len);
    if (strcmp(s->name, "cpu") == 0) return tfb_cpu_backend_create(s->threads, out);
#if TFB_REGISTRY_EMU
    if (strcmp(s->name, "cuda") == 0) {
        tfb_backend *cpu;
        TFB_TRY(tfb_cpu_backend_create(s->threads, &cpu));
        return tfb_cuda_emu_backend_create(TFB_EMU_SMS, cpu, out);
    }
#endif
#if TFB_REAL_CUDA
    if (strcmp(s->name, "cuda") == 0) {
        char reason[256] = "";
        tfb_status st = cuda_open(s, out, reason, sizeof reason);
        if (st != TFB_OK) snprintf(why, why_len, "%s", reason);
        return st;
    }
#endif
    snprintf(why, why_len, "backend '%s' is not in this build (available: %s)", s->name, tfb_backend_list());
    return TFB_ERR_ARG;
}

tfb_status tfb_backend_open_cpu(int threads, tfb_backend **out) { return tfb_cpu_backend_create(threads, out); }
