/* cpu.h — internal declarations shared by the CPU backend's files (cpu_backend.c: memory and GEMM; cpu_ops.c:
 * the training ops; cpu_conv.c: convolutional ops; cpu_nhwc.c: their channels-last convolutions and pools;
 * cpu_shard.c: tensor-parallel shard ops; cpu_attn.c: fused attention). Not part of the public interface:
 * everything else reaches the CPU backend through tfb_backend (kernels/backend.h) after tfb_cpu_backend_create().
 */
#ifndef TFB_CPU_H
#define TFB_CPU_H
#include "../backend.h"
#include "../half.h"

/* x as element i of p, a tensor of type t (16-bit: rounded to nearest even). */
static inline void tfb_cpu_store(void *p, tfb_dtype t, size_t i, float x) {
    if (t == TFB_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = t == TFB_F16 ? tfb_f32_to_f16(x) : tfb_f32_to_bf16(x);
}

/* Element i of p, a tensor of type t, as FP32. */
static inline float tfb_cpu_load(const void *p, tfb_dtype t, size_t i) {
    if (t == TFB_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == TFB_F16 ? tfb_f16_to_f32(h) : tfb_bf16_to_f32(h);
}

/* Scratch slots of the CPU backend's context: FP32 buffers that grow to the largest request. */
enum { TFB_CPU_SLOT_GEMM_A, TFB_CPU_SLOT_GEMM_B, TFB_CPU_SLOT_CONV_X, TFB_CPU_SLOT_CONV_W, TFB_CPU_SLOT_CONV_DY,
       TFB_CPU_SLOT_COL, TFB_CPU_SLOT_GROUP, TFB_CPU_SLOT_CONV_Y, TFB_CPU_SLOT_CONV_DX, TFB_CPU_SLOT_BN_X,
       TFB_CPU_SLOT_BN_DY, TFB_CPU_SLOT_BN_Y, TFB_CPU_SLOT_GEMM_C, TFB_CPU_SLOT_ATTN,
       TFB_CPU_SLOT_ATTN_D, TFB_CPU_SLOT_FUSED, TFB_CPU_SLOTS };

tfb_status tfb_cpu_backend_create(int threads, tfb_backend **out);
void tfb_cpu_ops_install(tfb_backend *be);
void tfb_cpu_conv_install(tfb_backend *be);
void tfb_cpu_shard_install(tfb_backend *be);
void tfb_cpu_attn_install(tfb_backend *be);
/* cpu_nhwc.c: channels-last convolutions on FP32 operands (x (n, h, w, c), w (k, r, s, c), y (n, p, q, k)) and
 * pools (argmax: index within the image plane), as the backend ops of the same names describe them. */
tfb_status tfb_cpu_conv_fwd_nhwc(void *ctx, const tfb_conv_desc *d, float *y, const float *x, const float *w);
tfb_status tfb_cpu_conv_bwd_data_nhwc(void *ctx, const tfb_conv_desc *d, float *dx, const float *dy, const float *w);
tfb_status tfb_cpu_conv_bwd_filter_nhwc(void *ctx, const tfb_conv_desc *d, float *dw, const float *x,
                                        const float *dy);
tfb_status tfb_cpu_maxpool_fwd_nhwc(float *y, int *argmax, const float *x, const tfb_pool_desc *d);
tfb_status tfb_cpu_maxpool_bwd_nhwc(float *dx, const float *dy, const int *argmax, const tfb_pool_desc *d);
tfb_status tfb_cpu_avgpool_fwd_nhwc(float *y, const float *x, int n, int c, int hw);
tfb_status tfb_cpu_avgpool_bwd_nhwc(float *dx, const float *dy, int n, int c, int hw);
/* ... and batch norm's ops on (rows, c) tensors, what the ops of the same names compute for hw == 1 */
tfb_status tfb_cpu_bn_rows_moments(float *mean, float *var, const float *x, int rows, int c);
tfb_status tfb_cpu_bn_rows_apply(float *y, const float *x, const float *mean, const float *var, const float *gamma,
                                 const float *beta, int rows, int c, float eps, int relu);
tfb_status tfb_cpu_bn_rows_bwd_reduce(float *sum_dy, float *sum_dy_xhat, float *dgamma, float *dbeta,
                                      const float *dy, const float *x, const float *mean, const float *var,
                                      const float *gamma, const float *beta, int rows, int c, float eps, int relu);
tfb_status tfb_cpu_bn_rows_bwd_apply(float *dx, const float *dy, const float *x, const float *mean, const float *var,
                                     const float *gamma, const float *beta, const float *sum_dy,
                                     const float *sum_dy_xhat, double count, int rows, int c, float eps, int relu);
/* cpu_margin.c: the test hook TFB_TEST_DECISION_MARGIN, the smallest distance of a ReLU input or a max-pool gap
 * from its decision's boundary, in units of its tensor's rms, printed at exit; enable reads the variable, and
 * the others return at once when it is not set. */
void tfb_cpu_margin_enable(void);
void tfb_cpu_margin_bn(const float *x, const float *mean, const float *var, const float *gamma, const float *beta,
                       int n, int c, int hw, float eps);
void tfb_cpu_margin_add(const void *a, tfb_dtype a_type, const void *b, tfb_dtype b_type, size_t n);
void tfb_cpu_margin_pool(const float *x, const tfb_pool_desc *d);
/* The smallest margin since the last call (HUGE_VAL: none), for tests of the hook itself. */
double tfb_cpu_margin_take(void);
/* Scratch slot `slot` with room for n floats (NULL when out of memory). */
float *tfb_cpu_scratch(void *ctx, int slot, size_t n);
/* src (n FP32 values) stored into dst of type t (16-bit: rounded to nearest even), in parallel. */
void tfb_cpu_narrow(void *dst, tfb_dtype t, const float *src, size_t n);
/* p (n elements of type t) as FP32: p itself, or widened (FP32 with tf32: rounded to TF32) into scratch `slot`. */
const float *tfb_cpu_as_f32(void *ctx, int slot, const void *p, tfb_dtype t, int tf32, size_t n);

#endif
