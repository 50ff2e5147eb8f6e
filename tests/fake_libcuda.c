/* fake_libcuda.c — a stand-in for the NVIDIA driver library, loaded by `tfbench doctor` through
 * TFB_TEST_LIBCUDA so that its GPU checks and their failure paths run on machines without a GPU. Only the driver
 * API calls gpu_probe.c, gpu_p2p.c and gpu_bw.c make exist. FAKE_CUDA_VERSION (default 13000), FAKE_CUDA_DEVICES (default 2) and
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
/* FAKE_CUDA_BUSIDS: comma list of dddd:bb:dd.0 in CUDA order (it sets the device count); else devices sit at
 * 0000:18:00.0, 0000:28:00.0, ... */
static int bus_id(int dev, unsigned part) {
    const char *list = getenv("FAKE_CUDA_BUSIDS");
    unsigned id[3] = {0, 0x18u + 0x10u * (unsigned)dev, 0};
    for (int i = 0; list && list[0] && i <= dev; i++) {
        if (sscanf(list, "%x:%x:%x", &id[0], &id[1], &id[2]) != 3) return -1;
        list = strchr(list, ',');
        if (!list && i < dev) return -1;
        if (list) list++;
    }
    return (int)id[part];
}

static int device_count(void) {
    const char *list = getenv("FAKE_CUDA_BUSIDS");
    int n = 1;
    if (!list || !list[0]) return env_int("FAKE_CUDA_DEVICES", 2);
    for (const char *c = list; *c; c++) n += *c == ',';
    return n;
}

int cuDeviceGetCount(int *n) { *n = device_count(); return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal < device_count() ? 0 : 101; }
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
    case 50: *v = bus_id(dev, 0); break;  /* PCI domain */
    case 33: *v = bus_id(dev, 1); break;  /* PCI bus */
    case 34: *v = bus_id(dev, 2); break;  /* PCI device */
    default: *v = 0;
    }
    return 0;
}

/* ---- peer copies (topology/gpu_p2p.c): FAKE_P2P=0 denies peer access (copies still work, through the host, as
 * on a real machine); FAKE_P2P_HANG=1 makes every peer copy block forever (the ACS/IOMMU hang);
 * FAKE_P2P_CORRUPT=1 makes it deliver one wrong byte. Device memory is host memory named by slot. */
#include <unistd.h>

enum { SLOTS = 64 };
static unsigned char *mem_slot[SLOTS];
static int fake_ctx[8];

static unsigned char *slot_of(unsigned long long p) {
    unsigned long long s = p >> 32;
    return s >= 1 && s <= SLOTS ? mem_slot[s - 1] : NULL;
}

int cuDeviceCanAccessPeer(int *can, int dev, int peer) { *can = dev != peer && env_int("FAKE_P2P", 1); return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = &fake_ctx[dev & 7]; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
int cuCtxEnablePeerAccess(void *peer, unsigned flags) { (void)peer; (void)flags; return env_int("FAKE_P2P", 1) ? 0 : 217; }
int cuCtxSynchronize(void) { return 0; }

int cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
    for (int s = 0; s < SLOTS; s++)
        if (!mem_slot[s]) {
            mem_slot[s] = calloc(1, bytes);
            *p = (unsigned long long)(s + 1) << 32;
            return mem_slot[s] ? 0 : 2;
        }
    return 2;
}

int cuMemFree_v2(unsigned long long p) {
    unsigned long long s = p >> 32;
    if (s < 1 || s > SLOTS) return 1;
    free(mem_slot[s - 1]);
    mem_slot[s - 1] = NULL;
    return 0;
}

int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) {
    unsigned char *d = slot_of(dst);
    if (!d) return 1;
    memcpy(d, src, n);
    return 0;
}

int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) {
    unsigned char *s = slot_of(src);
    if (!s) return 1;
    memcpy(dst, s, n);
    return 0;
}

int cuMemcpyPeer(unsigned long long dst, void *dctx, unsigned long long src, void *sctx, size_t n) {
    (void)dctx;
    (void)sctx;
    unsigned char *d = slot_of(dst), *s = slot_of(src);
    if (!d || !s) return 1;
    while (env_int("FAKE_P2P_HANG", 0)) pause(); /* a copy that never completes */
    memcpy(d, s, n);
    if (env_int("FAKE_P2P_CORRUPT", 0)) d[n / 2] ^= 0x40;
    return 0;
}

/* ---- copy bandwidth (topology/gpu_bw.c): asynchronous copies complete at once; streams are tokens; pinned host
 * memory is plain memory. FAKE_P2P_HANG applies to the asynchronous peer copy too. */
static int fake_stream;

int cuCtxDisablePeerAccess(void *peer) { (void)peer; return 705; } /* not enabled: tfbench accepts it */
int cuMemAllocHost_v2(void **p, size_t bytes) { *p = malloc(bytes); return *p ? 0 : 2; }
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = &fake_stream; return 0; }
int cuStreamSynchronize(void *s) { (void)s; return 0; }
int cuMemcpyPeerAsync(unsigned long long dst, void *dctx, unsigned long long src, void *sctx, size_t n, void *s) {
    (void)s;
    return cuMemcpyPeer(dst, dctx, src, sctx, n);
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s) {
    (void)s;
    return cuMemcpyHtoD_v2(dst, src, n);
}
int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *s) {
    (void)s;
    return cuMemcpyDtoH_v2(dst, src, n);
}
