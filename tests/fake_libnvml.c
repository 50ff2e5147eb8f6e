/* fake_libnvml.c — a stand-in for NVIDIA's management library, loaded through TFB_TEST_LIBNVML so that tfbench's
 * NVML paths (doctor, topology join, environment, power) run without a GPU. It answers what nvml.c asks:
 *   FAKE_NVML_BUSIDS   comma list of dddd:bb:dd.0 (default two GPUs at 0000:18:00.0, 0000:28:00.0)
 *   FAKE_NVML_LINKS    "pairs" (4 NVLink 2 links between GPUs 2k and 2k+1, the default), "switch" (18 NVLink 4
 *                      links each to an NVSwitch) or "none"
 *   FAKE_NVML_THROTTLE throttle reason bits (default 0); FAKE_NVML_ECC_ERRORS uncorrected errors (default 0);
 *   FAKE_NVML_FREE_MIB free memory per GPU (default 80000 of 81559); FAKE_NVML_DRIVER the driver version
 * Power reads 300 W; the energy counter grows at 300 W of wall time since load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_t;
typedef struct {
    unsigned long long total, free, used;
} mem_t;

static unsigned ids[16][3];
static unsigned n_gpus;
static double t0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *env(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && v[0] ? v : def;
}

static char handles[16];          /* a device handle is the address of its slot */
static int gpu(void *h) { return (int)((char *)h - handles); }
static int links_mode(void) { return strcmp(env("FAKE_NVML_LINKS", "pairs"), "switch") == 0 ? 2 : strcmp(env("FAKE_NVML_LINKS", "pairs"), "none") == 0 ? 0 : 1; }

int nvmlInit_v2(void) {
    char list[512];
    snprintf(list, sizeof list, "%s", env("FAKE_NVML_BUSIDS", "0000:18:00.0,0000:28:00.0"));
    n_gpus = 0;
    for (char *s = strtok(list, ","); s && n_gpus < 16; s = strtok(NULL, ","))
        if (sscanf(s, "%x:%x:%x", &ids[n_gpus][0], &ids[n_gpus][1], &ids[n_gpus][2]) == 3) n_gpus++;
    t0 = now();
    return 0;
}
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *v, unsigned len) { snprintf(v, len, "%s", env("FAKE_NVML_DRIVER", "580.65.06")); return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = n_gpus; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { if (i >= n_gpus) return 2; *h = &handles[i]; return 0; }
int nvmlDeviceGetName(void *h, char *s, unsigned len) { (void)h; snprintf(s, len, "NVIDIA H100 80GB HBM3"); return 0; }
int nvmlDeviceGetUUID(void *h, char *s, unsigned len) { snprintf(s, len, "GPU-fake-%04d", gpu(h)); return 0; }
int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) { (void)h; *major = 9; *minor = 0; return 0; }

int nvmlDeviceGetPciInfo_v3(void *h, pci_t *p) {
    memset(p, 0, sizeof *p);
    p->domain = ids[gpu(h)][0];
    p->bus = ids[gpu(h)][1];
    p->device = ids[gpu(h)][2];
    return 0;
}

static int uint_answer(unsigned *v, unsigned x) { *v = x; return 0; }
int nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned *v) { (void)h; return uint_answer(v, 5); }
int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v) { (void)h; return uint_answer(v, 5); }
int nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned *v) { (void)h; return uint_answer(v, 16); }
int nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v) { (void)h; return uint_answer(v, 16); }
int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *v) { (void)h; return uint_answer(v, 700000); }
int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *v) { (void)h; return uint_answer(v, type == 1 ? 1980 : 2619); }
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *v) { (void)h; return uint_answer(v, type == 1 ? 1755 : 2619); }
int nvmlDeviceGetPowerUsage(void *h, unsigned *v) { (void)h; return uint_answer(v, 300000); }

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    (void)h;
    *mj = 1000000ULL + (unsigned long long)((now() - t0) * 300.0 * 1000.0);
    return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r) {
    (void)h;
    *r = strtoull(env("FAKE_NVML_THROTTLE", "0"), NULL, 0);
    return 0;
}
int nvmlDeviceGetEccMode(void *h, int *cur, int *pending) { (void)h; *cur = *pending = 1; return 0; }
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n) {
    (void)h; (void)type; (void)counter;
    *n = strtoull(env("FAKE_NVML_ECC_ERRORS", "0"), NULL, 0);
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    (void)h;
    m->total = 81559ULL << 20;
    m->free = strtoull(env("FAKE_NVML_FREE_MIB", "80000"), NULL, 0) << 20;
    m->used = m->total - m->free;
    return 0;
}

int nvmlDeviceGetNvLinkState(void *h, unsigned link, int *active) {
    int mode = links_mode(), g = gpu(h);
    *active = mode == 2 ? link < 18 : mode == 1 ? link < 4 && (unsigned)(g ^ 1) < n_gpus : 0;
    return 0;
}
int nvmlDeviceGetNvLinkVersion(void *h, unsigned link, unsigned *v) { (void)h; (void)link; return uint_answer(v, links_mode() == 2 ? 4 : 2); }
int nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned link, int *type) { (void)h; (void)link; *type = links_mode() == 2 ? 2 : 0; return 0; }
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned link, pci_t *p) {
    (void)link;
    memset(p, 0, sizeof *p);
    if (links_mode() == 2) { p->bus = 0xff; return 0; } /* the switch */
    int peer = gpu(h) ^ 1;
    p->domain = ids[peer][0];
    p->bus = ids[peer][1];
    p->device = ids[peer][2];
    return 0;
}
