/* cpu.h — internal declarations shared by the CPU backend's files (cpu_backend.c: memory and GEMM; cpu_ops.c:
 * the training ops; cpu_conv.c: convolutional ops; cpu_shard.c: tensor-parallel shard ops). Not part of the public interface: everything else reaches the CPU backend through
 * tfb_backend (kernels/backend.h) after tfb_cpu_backend_create().
 */
#ifndef TFB_CPU_H
#define TFB_CPU_H
#include "../backend.h"

/* Scratch slots of the CPU backend's context: FP32 buffers that grow to the largest request. */
enum { TFB_CPU_SLOT_GEMM_A, TFB_CPU_SLOT_GEMM_B, TFB_CPU_SLOT_CONV_X, TFB_CPU_SLOT_CONV_W, TFB_CPU_SLOT_CONV_DY,
       TFB_CPU_SLOT_COL, TFB_CPU_SLOT_GROUP, TFB_CPU_SLOTS };

tfb_status tfb_cpu_backend_create(int threads, tfb_backend **out);
void tfb_cpu_ops_install(tfb_backend *be);
void tfb_cpu_conv_install(tfb_backend *be);
void tfb_cpu_shard_install(tfb_backend *be);
/* Scratch slot `slot` with room for n floats (NULL when out of memory). */
float *tfb_cpu_scratch(void *ctx, int slot, size_t n);
/* p (n elements of type t) as FP32: p itself, or widened (FP32 with tf32: rounded to TF32) into scratch `slot`. */
const float *tfb_cpu_as_f32(void *ctx, int slot, const void *p, tfb_dtype t, int tf32, size_t n);

#endif
