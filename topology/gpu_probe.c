/* gpu_probe.c — see gpu_probe.h. Function types are declared here from the driver API's documented signatures
 * (CUresult is an int, CUdevice an int), so no CUDA header is needed to build it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_probe.h"
#include "config.h"

enum { ATTR_CLOCK_RATE = 13, ATTR_SM_COUNT = 16, ATTR_PCI_BUS = 33, ATTR_PCI_DEVICE = 34, ATTR_PCI_DOMAIN = 50,
       ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_int_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);

/* dlopen the first of the names that loads, on the loader's path and then in the toolkit's lib64. */
static void *open_first(const char *const *names, char *which, size_t n) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; names[i]; i++) {
            char path[512];
            if (pass == 1 && !TFB_CUDA_HOME[0]) return NULL;
            if (pass == 0) snprintf(path, sizeof path, "%s", names[i]);
            else snprintf(path, sizeof path, "%s/lib64/%s", TFB_CUDA_HOME, names[i]);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) { snprintf(which, n, "%s", names[i]); return h; }
        }
    return NULL;
}

static void probe_device(void *h, int ordinal, tfb_gpu_dev *d) {
    cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
    cu_name_fn name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
    cu_attr_fn attr = (cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
    cu_mem_fn mem = (cu_mem_fn)dlsym(h, "cuDeviceTotalMem_v2");
    int dev = 0, a[7] = {0};
    static const int which[7] = {ATTR_CC_MAJOR, ATTR_CC_MINOR, ATTR_SM_COUNT, ATTR_CLOCK_RATE, ATTR_PCI_DOMAIN,
                                 ATTR_PCI_BUS, ATTR_PCI_DEVICE};
    memset(d, 0, sizeof *d);
    if (!get || get(&dev, ordinal) != 0) return;
    if (name) name(d->name, (int)sizeof d->name, dev);
    d->name[sizeof d->name - 1] = '\0';
    for (int i = 0; attr && i < 7; i++) attr(&a[i], which[i], dev);
    d->cc = a[0] * 10 + a[1];
    d->sms = a[2];
    d->clock_mhz = a[3] / 1000;
    snprintf(d->bus_id, sizeof d->bus_id, "%04x:%02x:%02x.0", a[4] & 0xffff, a[5] & 0xff, a[6] & 0xff);
    if (mem) mem(&d->memory_bytes, dev);
}

void tfb_gpu_probe_run(tfb_gpu_probe *p) {
    memset(p, 0, sizeof *p);
    const char *test = getenv("TFB_TEST_LIBCUDA");
    const char *const names[] = {test && test[0] ? test : "libcuda.so.1", NULL};
    void *h = test && test[0] ? dlopen(test, RTLD_NOW | RTLD_LOCAL) : open_first(names, p->driver_lib,
                                                                                 sizeof p->driver_lib);
    if (!h) return;
    p->driver_found = 1;
    if (test && test[0]) snprintf(p->driver_lib, sizeof p->driver_lib, "%s", strrchr(test, '/') ? strrchr(test, '/') + 1 : test);
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_int_fn version = (cu_int_fn)dlsym(h, "cuDriverGetVersion"), count = (cu_int_fn)dlsym(h, "cuDeviceGetCount");
    if (version) version(&p->driver_version);
    p->init_error = init ? init(0) : -1;
    if (p->init_error == 0 && count && count(&p->n) != 0) p->n = 0;
    if (p->n > TFB_PROBE_MAX_GPUS) p->n = TFB_PROBE_MAX_GPUS;
    for (int i = 0; i < p->n; i++) probe_device(h, i, &p->dev[i]);
    dlclose(h);
}

int tfb_driver_load(const char *const *names, void **const *slots, int n, char *why, size_t len) {
    const char *test = getenv("TFB_TEST_LIBCUDA");
    void *h = dlopen(test && test[0] ? test : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { snprintf(why, len, "no NVIDIA driver library (libcuda.so.1)"); return 0; }
    for (int i = 0; i < n; i++) {
        *slots[i] = dlsym(h, names[i]);
        if (!*slots[i]) { snprintf(why, len, "the driver lacks %s", names[i]); return 0; }
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    int err = init ? init(0) : -1;
    if (err) { snprintf(why, len, "cuInit failed (error %d)", err); return 0; }
    return 1;
}

static void version_of(void *h, const char *which, char *out, size_t n) {
    int v = 0;
    if (strcmp(which, "cudart") == 0) {
        cu_int_fn f = (cu_int_fn)dlsym(h, "cudaRuntimeGetVersion");
        if (f && f(&v) == 0) snprintf(out, n, "%d.%d", v / 1000, v % 1000 / 10);
    } else if (strcmp(which, "cublas") == 0) {
        typedef int (*prop_fn)(int, int *); /* (libraryPropertyType: 0 major, 1 minor, 2 patch, int *) */
        prop_fn f = (prop_fn)dlsym(h, "cublasGetProperty");
        int part[3] = {0};
        for (int i = 0; f && i < 3; i++) f(i, &part[i]);
        if (f) snprintf(out, n, "%d.%d.%d", part[0], part[1], part[2]);
    } else if (strcmp(which, "cudnn") == 0) {
        size_t (*f)(void) = (size_t(*)(void))dlsym(h, "cudnnGetVersion");
        size_t c = f ? f() : 0;
        if (c >= 90000) snprintf(out, n, "%zu.%zu.%zu", c / 10000, c % 10000 / 100, c % 100);
        else if (c) snprintf(out, n, "%zu.%zu.%zu", c / 1000, c % 1000 / 100, c % 100);
    } else if (strcmp(which, "nccl") == 0) {
        cu_int_fn f = (cu_int_fn)dlsym(h, "ncclGetVersion");
        if (f && f(&v) == 0) snprintf(out, n, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
    } else if (strcmp(which, "nvml") == 0) {
        typedef int (*drv_fn)(char *, unsigned);
        int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
        drv_fn f = (drv_fn)dlsym(h, "nvmlSystemGetDriverVersion");
        int (*shut)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
        if (init && f && init() == 0) {
            if (f(out, (unsigned)n) != 0) out[0] = '\0';
            if (shut) shut();
        }
    }
}

/* The sonames tried for a library, newest first. */
static const char *const *lib_names(const char *which) {
    static const char *const cudart[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", NULL},
                             *const cublas[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", NULL},
                             *const cudnn[] = {"libcudnn.so.9", "libcudnn.so.8", NULL},
                             *const nccl[] = {"libnccl.so.2", NULL}, *const nvml[] = {"libnvidia-ml.so.1", NULL};
    return strcmp(which, "cudart") == 0 ? cudart : strcmp(which, "cublas") == 0 ? cublas
         : strcmp(which, "cudnn") == 0  ? cudnn  : strcmp(which, "nccl") == 0   ? nccl
                                                                                 : nvml;
}

void *tfb_lib_open(const char *which, char *soname, size_t len) {
    char var[32];
    snprintf(var, sizeof var, "TFB_TEST_LIB%s", which);
    for (char *c = var; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    const char *test = getenv(var);
    if (test && test[0]) {
        snprintf(soname, len, "%s", strrchr(test, '/') ? strrchr(test, '/') + 1 : test);
        return dlopen(test, RTLD_NOW | RTLD_LOCAL);
    }
    return open_first(lib_names(which), soname, len);
}

void tfb_lib_probe_run(const char *which, tfb_lib_probe *out) {
    memset(out, 0, sizeof *out);
    void *h = tfb_lib_open(which, out->soname, sizeof out->soname);
    if (!h) return;
    out->found = 1;
    version_of(h, which, out->version, sizeof out->version);
    if (!out->version[0]) snprintf(out->version, sizeof out->version, "version unknown");
    dlclose(h);
}
