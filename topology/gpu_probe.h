/* gpu_probe.h — what the NVIDIA driver and the CUDA libraries on this machine are, found with dlopen so that the
 * same binary runs where none of them exists: the driver's version and devices (name, compute capability, SMs,
 * clock, memory, PCI bus id) through libcuda's driver API, and the versions of cuBLAS, cuDNN, NCCL, the CUDA
 * runtime and NVML. It runs no kernel and allocates no device memory. TFB_TEST_LIBCUDA names another driver
 * library (a test stub) in place of libcuda.so.1.
 */
#ifndef TFB_GPU_PROBE_H
#define TFB_GPU_PROBE_H
#include <stddef.h>

enum { TFB_PROBE_MAX_GPUS = 64 };

typedef struct {
    char name[96];
    int cc;                  /* compute capability x 10 */
    int sms, clock_mhz;
    size_t memory_bytes;
    char bus_id[24];         /* dddd:bb:dd.0 */
} tfb_gpu_dev;

typedef struct {
    int driver_found;        /* the driver library loaded */
    char driver_lib[64];
    int driver_version;      /* cuDriverGetVersion: 12040 = CUDA 12.4 */
    int init_error;          /* cuInit's result (0: success) */
    int n;
    tfb_gpu_dev dev[TFB_PROBE_MAX_GPUS];
} tfb_gpu_probe;

typedef struct {
    int found;
    char soname[48];         /* the library that loaded */
    char version[32];        /* as the library reports it */
} tfb_lib_probe;

void tfb_gpu_probe_run(tfb_gpu_probe *p);
/* which: "cudart", "cublas", "cudnn", "nccl" or "nvml"; searched on the loader's path, then in the toolkit. */
void tfb_lib_probe_run(const char *which, tfb_lib_probe *out);
/* dlopen of one of those libraries (NULL when none loads), soname gets which; TFB_TEST_LIBCUDART, TFB_TEST_LIBNCCL,
 * ... (the name upper-cased) load a stub instead. */
void *tfb_lib_open(const char *which, char *soname, size_t len);
/* The driver library (TFB_TEST_LIBCUDA, else libcuda.so.1) with names[i] resolved into *slots[i], then cuInit(0);
 * 0 with the reason in why when it does not load, lacks a name or does not initialise. It stays loaded (a copy
 * that hangs may still be inside it). */
int tfb_driver_load(const char *const *names, void **const *slots, int n, char *why, size_t len);

#endif
