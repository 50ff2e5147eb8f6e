/* npy.h — reading and writing NumPy .npy files (format version 1.0, little-endian, C order), for --dump and for
 * the reference tensors the tests compare against. Only float32 and int32 arrays of rank 1 or 2.
 */
#ifndef TFB_NPY_H
#define TFB_NPY_H
#include <stddef.h>
#include "../kernels/check.h"

tfb_status tfb_npy_write_f32(const char *path, const float *data, int rows, int cols);
tfb_status tfb_npy_write_i32(const char *path, const int *data, int rows, int cols);
/* Parses a float32 .npy image of len bytes (the shape must match the data); *data is malloc'd. */
tfb_status tfb_npy_parse_f32(const void *buf, size_t len, float **data, size_t *numel);
/* Reads a float32 array; *data is malloc'd; *numel its element count. */
tfb_status tfb_npy_read_f32(const char *path, float **data, size_t *numel);

#endif
