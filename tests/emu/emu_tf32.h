/* emu_tf32.h — TF32 rounding for the cuBLAS and cuDNN stand-ins (emu_cublas.cpp, emu_cudnn.cpp): an FP32 value
 * kept to TF32's 10-bit mantissa, rounded to nearest even, as the libraries' tensor-core paths take FP32 inputs.
 * Kept apart from tfbench's own rounding (kernels/half.h) so the stand-ins stay an independent reference.
 */
#ifndef TFB_EMU_TF32_H
#define TFB_EMU_TF32_H
#include <stdint.h>
#include <string.h>

static inline float emu_round_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    memcpy(&x, &u, sizeof x);
    return x;
}
#endif
