/* fuzz_npy.c — libFuzzer target for the .npy reader: any bytes parse to an array whose size matches the data or
 * to an error, never a crash or an over-read. */
#include <stdint.h>
#include <stdlib.h>
#include "../../bench/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    float *values = NULL;
    size_t n = 0;
    if (tfb_npy_parse_f32(data, size, &values, &n) == TFB_OK) {
        volatile float sum = 0;
        for (size_t i = 0; i < n; i++) sum += values[i]; /* every element must be readable */
        free(values);
    }
    return 0;
}
