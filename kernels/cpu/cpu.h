/* cpu.h — internal declarations shared by the CPU backend's files (cpu_backend.c: memory and GEMM; cpu_ops.c:
 * the training ops). Not part of the public interface: everything else reaches the CPU backend through
 * tfb_backend (kernels/backend.h) after tfb_cpu_backend_create().
 */
#ifndef TFB_CPU_H
#define TFB_CPU_H
#include "../backend.h"

tfb_status tfb_cpu_backend_create(int threads, tfb_backend **out);
void tfb_cpu_ops_install(tfb_backend *be);

#endif
