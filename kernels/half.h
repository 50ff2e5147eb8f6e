/* half.h — IEEE binary16 and bfloat16 conversions, round-to-nearest-even, for the CPU backend and host code.
 *
 * 16-bit tensors are stored as uint16_t and computed in FP32, the numerics of tensor cores. Overflow in the FP32 to
 * FP16 conversion gives ±inf (what the FP16 loss scaler must detect); NaN stays NaN. Also the TF32 rounding of an
 * FP32 value (the CPU's emulation of --precision tf32). Does not provide arithmetic.
 */
#ifndef TFB_HALF_H
#define TFB_HALF_H
#include <stdint.h>
#include <string.h>

static inline uint32_t tfb_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float tfb_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t tfb_f32_to_bf16(float f) {
    uint32_t u = tfb_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f rounded (to nearest even) to TF32's 10-bit mantissa, kept in FP32: what tensor cores multiply in TF32 mode. */
static inline float tfb_f32_round_tf32(float f) {
    uint32_t u = tfb_f32_bits(f);
    if ((u & 0x7F800000u) == 0x7F800000u) return f; /* inf and NaN unchanged */
    u += 0xFFFu + ((u >> 13) & 1u);
    return tfb_bits_f32(u & ~0x1FFFu);
}

static inline float tfb_bf16_to_f32(uint16_t h) { return tfb_bits_f32((uint32_t)h << 16); }

static inline uint16_t tfb_f32_to_f16(float f) {
    uint32_t u = tfb_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);      /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);     /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                       /* subnormal or zero in FP16 */
        float m = tfb_bits_f32(a) * 16777216.0f;                 /* scale by 2^24: units of 2^-24 */
        uint32_t q = (uint32_t)m;
        float rem = m - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u;   /* rebias exponent 127 -> 15 and round */
    return (uint16_t)(sign | (r >> 13));
}

static inline float tfb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) return tfb_bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)m * (1.0f / 16777216.0f);
    if (e == 31) return tfb_bits_f32(sign | 0x7F800000u | (m << 13));
    return tfb_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
