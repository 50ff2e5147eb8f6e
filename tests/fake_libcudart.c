/* fake_libcudart.c — a stand-in for the CUDA runtime, loaded by `tfbench doctor` through TFB_TEST_LIBCUDART, with
 * only the calls topology/gpu_nccl.c makes: device memory is host memory, copies are memcpy, and a stream is
 * always finished unless FAKE_NCCL_HANG=1, when it never is (an all-reduce stuck on the GPU). */
#include <stdlib.h>
#include <string.h>

static int stream_slot[8];

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : 0;
}

int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaSetDevice(int dev) { return dev >= 0 && dev < 8 ? 0 : 101; }
int cudaMalloc(void **p, size_t bytes) { *p = calloc(1, bytes); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) { (void)kind; memcpy(dst, src, n); return 0; }
int cudaStreamCreate(void **s) { *s = &stream_slot[0]; return 0; }
int cudaStreamQuery(void *s) { (void)s; return env_int("FAKE_NCCL_HANG") ? 600 : 0; }
int cudaStreamDestroy(void *s) { (void)s; return 0; }
