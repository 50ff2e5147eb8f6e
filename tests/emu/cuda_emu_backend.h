/* cuda_emu_backend.h — the test-only "cuda-emu" backend (cuda_emu_backend.cpp): the CUDA backend's kernels run
 * on the CPU by tests/emu/cuda_emu.h. Plain C, for gpu_check_emu and tfbench_emu. Not part of tfbench itself.
 */
#ifndef TFB_CUDA_EMU_BACKEND_H
#define TFB_CUDA_EMU_BACKEND_H
#ifdef __cplusplus
extern "C" {
#endif
#include "../../kernels/backend.h"

/* The backend, with kernels sizing their grids for `sms` streaming multiprocessors. cpu: NULL, or a CPU backend
 * that takes GEMM, convolution, memory, timing marks (and is destroyed with it, or at once on failure). */
tfb_status tfb_cuda_emu_backend_create(int sms, tfb_backend *cpu, tfb_backend **out);

#ifdef __cplusplus
}
#endif
#endif
