/* fake_libcuda.c — a stand-in for the NVIDIA driver library, loaded by `tfbench doctor` through
 * TFB_TEST_LIBCUDA so that its GPU checks and their failure paths run on machines without a GPU. Only the driver
 * API calls gpu_probe.c makes exist. FAKE_CUDA_VERSION (default 13000), FAKE_CUDA_DEVICES (default 2) and
 * FAKE_CUDA_INIT_ERROR (default 0) set what it answers; every device is an "NVIDIA H100 80GB HBM3" (compute
 * capability 9.0), or with FAKE_CUDA_V100=1 a "Tesla V100-SXM2-32GB" (7.0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : def;
}

int cuInit(unsigned flags) { (void)flags; return env_int("FAKE_CUDA_INIT_ERROR", 0); }
int cuDriverGetVersion(int *v) { *v = env_int("FAKE_CUDA_VERSION", 13000); return 0; }
int cuDeviceGetCount(int *n) { *n = env_int("FAKE_CUDA_DEVICES", 2); return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal < env_int("FAKE_CUDA_DEVICES", 2) ? 0 : 101; }
int cuDeviceGetName(char *name, int len, int dev) {
    (void)dev;
    snprintf(name, (size_t)len, "%s", env_int("FAKE_CUDA_V100", 0) ? "Tesla V100-SXM2-32GB" : "NVIDIA H100 80GB HBM3");
    return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return 0; }

int cuDeviceGetAttribute(int *v, int attr, int dev) {
    switch (attr) {
    case 75: *v = env_int("FAKE_CUDA_V100", 0) ? 7 : 9; break; /* compute capability major */
    case 76: *v = 0; break;              /* minor */
    case 16: *v = 132; break;            /* SMs */
    case 13: *v = 1980000; break;        /* clock, kHz */
    case 33: *v = 0x18 + 0x10 * dev; break; /* PCI bus */
    default: *v = 0;
    }
    return 0;
}
