/* registry.c — the one place that knows which backends this build contains and picks one by name.
 *
 * "auto" takes the best backend that can run here; zero GPUs is not an error (auto falls back to the CPU, which
 * always builds). The CUDA backend registers here, behind HAVE_CUDA, when it lands; no other file tests HAVE_CUDA.
 */
#include <stdio.h>
#include <string.h>
#include "backend.h"
#include "cpu/cpu.h"

const char *tfb_dtype_name(tfb_dtype t) {
    return t == TFB_F16 ? "fp16" : t == TFB_BF16 ? "bf16" : "fp32";
}

const char *tfb_backend_list(void) { return "cpu"; }

tfb_status tfb_backend_open(const char *name, int threads, tfb_backend **out, char *why, size_t why_len) {
    if (strcmp(name, "auto") == 0 || strcmp(name, "cpu") == 0) return tfb_cpu_backend_create(threads, out);
    snprintf(why, why_len, "backend '%s' is not in this build (available: %s)", name, tfb_backend_list());
    return TFB_ERR_ARG;
}
