/* cuda.h — what the rest of tfbench may call of the CUDA backend: the device count (with the reason when there is
 * no usable GPU) and the constructor. Only kernels/registry.c includes it, behind TFB_CUDA_BACKEND; everything else
 * reaches the backend through tfb_backend (kernels/backend.h). Plain C: no CUDA types cross this header.
 */
#ifndef TFB_CUDA_H
#define TFB_CUDA_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../backend.h"

/* Usable GPUs (0 with `why` set: no driver, driver older than the runtime, no device, ...). */
int tfb_cuda_device_count(char *why, size_t why_len);
/* The backend on GPU `device`; an error (why set) when that device cannot run this binary's kernels. */
tfb_status tfb_cuda_backend_create(int device, tfb_backend **out, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
