/* dropout.h — the dropout mask both backends apply, written once as inline C that a CUDA translation unit includes
 * unchanged (TFB_HD from philox.h), as the activations are in act.h.
 *
 * Element i of a tensor whose first element has global index key.offset is kept when the Philox draw for global
 * index key.offset + i is at least p; kept elements are scaled by 1 / (1 - p). One Philox block serves the four
 * global indices of a group, so a backend loops (or launches threads) over groups and stores each element in its
 * output's type. It deliberately holds no loop: the CPU backend parallelises over groups with OpenMP, the CUDA
 * backend with a grid-stride loop.
 */
#ifndef TFB_DROPOUT_H
#define TFB_DROPOUT_H
#include <stddef.h>
#include "backend.h"
#include "philox.h"

/* The groups [*g0, *g1) that cover the n elements starting at global index key.offset. */
TFB_HD void tfb_dropout_groups(tfb_dropout_key key, size_t n, uint64_t *g0, uint64_t *g1) {
    *g0 = key.offset >> 2;
    *g1 = (key.offset + n + 3) >> 2;
}

/* The factors of group g's four global indices 4g .. 4g + 3: 1 / (1 - p) where kept, else 0 (a dropped element
 * is written as 0 whatever it held, so use f > 0 ? x * f : 0, not x * f). */
TFB_HD void tfb_dropout_factors(tfb_dropout_key key, float p, uint64_t g, float f[4]) {
    tfb_philox_ctr r = tfb_philox_block(tfb_philox_key_make(key.seed, key.site), g << 2, key.step);
    float keep_scale = 1.0f / (1.0f - p);
    for (int q = 0; q < 4; q++) f[q] = tfb_u32_to_unit(r.v[q]) >= p ? keep_scale : 0.0f;
}

/* Group g's element q (0..3) as an element index of the tensor, or -1 when it falls outside. */
TFB_HD long long tfb_dropout_elem(tfb_dropout_key key, size_t n, uint64_t g, int q) {
    uint64_t idx = (g << 2) + (uint64_t)q;
    return idx < key.offset || idx >= key.offset + n ? -1 : (long long)(idx - key.offset);
}

#endif
