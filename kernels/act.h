/* act.h — the activation functions and their slopes, shared by the CPU and CUDA backends so both compute the same
 * formulas: GELU in the exact erf form (BERT's published GELU; PyTorch nn.GELU() default), tanh and ReLU. Written
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

#endif
