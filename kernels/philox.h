/* philox.h — the counter-based random number generator every backend shares (Philox4x32-10, Salmon et al. 2011).
 *
 * A draw is a pure function of (key, counter): the dropout mask of element i of a tensor depends only on the seed,
 * the step, the dropout site (layer and place) and i's global index, so every backend and every parallel layout
 * draws the same mask. Written as header-only inline C so a CUDA translation unit can include it unchanged
 * (TFB_HD expands to __host__ __device__ there). It deliberately holds no state.
 */
#ifndef TFB_PHILOX_H
#define TFB_PHILOX_H
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TFB_HD __host__ __device__ __forceinline__
#else
#define TFB_HD static inline
#endif

typedef struct { uint32_t v[4]; } tfb_philox_ctr;
typedef struct { uint32_t v[2]; } tfb_philox_key;

TFB_HD uint32_t tfb_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Ten rounds of Philox4x32 with the published multipliers and Weyl constants. */
TFB_HD tfb_philox_ctr tfb_philox4x32_10(tfb_philox_ctr c, tfb_philox_key k) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = tfb_mulhilo(0xD2511F53u, c.v[0], &hi0);
        uint32_t lo1 = tfb_mulhilo(0xCD9E8D57u, c.v[2], &hi1);
        tfb_philox_ctr n;
        n.v[0] = hi1 ^ c.v[1] ^ k.v[0];
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k.v[1];
        n.v[3] = lo0;
        c = n;
        k.v[0] += 0x9E3779B9u;
        k.v[1] += 0xBB67AE85u;
    }
    return c;
}

/* The key of one random stream: seed plus a 32-bit stream id (dropout site, data, init). */
TFB_HD tfb_philox_key tfb_philox_key_make(uint64_t seed, uint32_t stream) {
    tfb_philox_key k;
    k.v[0] = (uint32_t)seed ^ (stream * 0x85EBCA6Bu);
    k.v[1] = (uint32_t)(seed >> 32) ^ stream;
    return k;
}

/* Four uniform 32-bit words for element group `index / 4` of draw number `step` of a stream. */
TFB_HD tfb_philox_ctr tfb_philox_block(tfb_philox_key k, uint64_t index, uint32_t step) {
    tfb_philox_ctr c;
    c.v[0] = (uint32_t)(index >> 2);
    c.v[1] = (uint32_t)(index >> 34);
    c.v[2] = step;
    c.v[3] = 0x7466626Eu; /* "tfbn": separates these draws from other users of the same key */
    return tfb_philox4x32_10(c, k);
}

/* Uniform float in [0, 1) from the top 24 bits of a word. */
TFB_HD float tfb_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* Two standard normal values (Box-Muller) for elements i and i + 1 (i even) of row `row` of a stream: the
 * synthetic images, one row per sample. The second value is for element i + 1 (dropped past a row's end). */
TFB_HD void tfb_normal_pair(tfb_philox_key k, uint64_t row, uint64_t i, float *first, float *second) {
    tfb_philox_ctr r = tfb_philox_block(k, (row << 24) + (i << 1), 1);
    float u1 = tfb_u32_to_unit(r.v[0]) + 1e-7f, u2 = tfb_u32_to_unit(r.v[1]), rad = sqrtf(-2.0f * logf(u1));
    *first = rad * cosf(6.28318530718f * u2);
    *second = rad * sinf(6.28318530718f * u2);
}

#endif
