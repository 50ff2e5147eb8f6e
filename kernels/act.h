/* act.h — the activation functions and their slopes, shared by the CPU and CUDA backends so both compute the same
 * formulas: GELU in the exact erf form (BERT's published GELU; PyTorch nn.GELU() default), tanh and ReLU; and batch
 * norm's affine map, which its fused ReLU's backward recomputes. Written
 * as header-only inline C that a CUDA translation unit can include unchanged (TFB_HD from philox.h expands to
 * __host__ __device__ there). It holds no state and no kernels.
 */
#ifndef TFB_ACT_H
#define TFB_ACT_H
#include <math.h>
#include "backend.h"
#include "philox.h"

TFB_HD float tfb_act_value(int act, float x) {
    if (act == TFB_ACT_RELU) return x > 0.0f ? x : 0.0f;
    return act == TFB_ACT_GELU ? 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)) : tanhf(x);
}

/* For ReLU the slope is read off the input or, equally, the output (both positive together). */
TFB_HD float tfb_act_slope(int act, float x) {
    if (act == TFB_ACT_RELU) return x > 0.0f ? 1.0f : 0.0f;
    if (act == TFB_ACT_TANH) { float t = tanhf(x); return 1.0f - t * t; }
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}

/* Batch norm's per-channel affine map y = x * scale + shift and its value: one formula for bn_apply and for the
 * ReLU mask its backward recomputes from x, so on each backend the mask is its forward's y > 0 bit for bit. A GPU
 * takes rsqrtf (one instruction, within 2 ulp of the CPU's correctly rounded division: both backends' element-wise
 * batch norm kernels stay memory-bound). */
TFB_HD void tfb_bn_affine(float mean, float var, float gamma, float beta, float eps, float *scale, float *shift) {
#ifdef __CUDA_ARCH__
    *scale = gamma * rsqrtf(var + eps);
#else
    *scale = gamma / sqrtf(var + eps);
#endif
    *shift = beta - mean * *scale;
}
TFB_HD float tfb_bn_value(float x, float scale, float shift) { return x * scale + shift; }

#endif
