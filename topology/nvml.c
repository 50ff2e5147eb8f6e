/* nvml.c — see nvml.h. Signatures and struct layouts follow NVML's documented API (nvmlPciInfo_t v3 layout);
 * every return value is an nvmlReturn_t, 0 on success. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nvml.h"

typedef void *nvml_dev;
typedef struct {
    char bus_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;

typedef int (*f_void)(void);
typedef int (*f_str)(char *, unsigned);
typedef int (*f_uint)(unsigned *);
typedef int (*f_handle)(unsigned, nvml_dev *);
typedef int (*f_dev_str)(nvml_dev, char *, unsigned);
typedef int (*f_dev_pci)(nvml_dev, nvml_pci *);
typedef int (*f_dev_uint)(nvml_dev, unsigned *);
typedef int (*f_dev_ull)(nvml_dev, unsigned long long *);
typedef int (*f_dev_type_uint)(nvml_dev, int, unsigned *);
typedef int (*f_dev_2int)(nvml_dev, int *, int *);
typedef int (*f_dev_mem)(nvml_dev, nvml_memory *);
typedef int (*f_dev_ecc)(nvml_dev, int, int, unsigned long long *);
typedef int (*f_link_int)(nvml_dev, unsigned, int *);
typedef int (*f_link_uint)(nvml_dev, unsigned, unsigned *);
typedef int (*f_link_pci)(nvml_dev, unsigned, nvml_pci *);

struct tfb_nvml {
    void *lib;
    char driver[32];
    int n;
    nvml_dev handle[TFB_NVML_MAX_GPUS];
    tfb_nvml_gpu gpu[TFB_NVML_MAX_GPUS];
};

static void *sym(const tfb_nvml *n, const char *name) { return dlsym(n->lib, name); }

static void read_pci(tfb_nvml *n, int i) {
    tfb_nvml_gpu *g = &n->gpu[i];
    nvml_pci pci;
    f_dev_pci f = (f_dev_pci)sym(n, "nvmlDeviceGetPciInfo_v3");
    memset(&pci, 0, sizeof pci);
    if (f && f(n->handle[i], &pci) == 0) {
        g->domain = pci.domain;
        g->bus = pci.bus;
        g->dev = pci.device;
    }
    snprintf(g->busid, sizeof g->busid, "%04x:%02x:%02x.0", g->domain & 0xffff, g->bus & 0xff, g->dev & 0x1f);
}

static void read_links(tfb_nvml *n, int i) {
    tfb_nvml_gpu *g = &n->gpu[i];
    f_link_int state = (f_link_int)sym(n, "nvmlDeviceGetNvLinkState"),
               kind = (f_link_int)sym(n, "nvmlDeviceGetNvLinkRemoteDeviceType");
    f_link_uint version = (f_link_uint)sym(n, "nvmlDeviceGetNvLinkVersion");
    f_link_pci remote = (f_link_pci)sym(n, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    g->n_links = 0;
    for (unsigned l = 0; state && l < TFB_NVML_MAX_LINKS; l++) {
        int active = 0, type = -1;
        unsigned v = 0;
        nvml_pci pci;
        memset(&pci, 0, sizeof pci);
        if (state(n->handle[i], l, &active) != 0 || !active) continue;
        tfb_nvlink *k = &g->link[g->n_links++];
        if (version) version(n->handle[i], l, &v);
        if (remote) remote(n->handle[i], l, &pci);
        if (kind) kind(n->handle[i], l, &type);
        *k = (tfb_nvlink){.version = (int)v, .domain = pci.domain, .bus = pci.bus, .dev = pci.device,
                          .to_switch = type == 2};
    }
}

static void read_static(tfb_nvml *n, int i) {
    tfb_nvml_gpu *g = &n->gpu[i];
    f_dev_str name = (f_dev_str)sym(n, "nvmlDeviceGetName"), uuid = (f_dev_str)sym(n, "nvmlDeviceGetUUID");
    f_dev_uint gen = (f_dev_uint)sym(n, "nvmlDeviceGetCurrPcieLinkGeneration"),
               gen_max = (f_dev_uint)sym(n, "nvmlDeviceGetMaxPcieLinkGeneration"),
               width = (f_dev_uint)sym(n, "nvmlDeviceGetCurrPcieLinkWidth"),
               width_max = (f_dev_uint)sym(n, "nvmlDeviceGetMaxPcieLinkWidth"),
               limit = (f_dev_uint)sym(n, "nvmlDeviceGetEnforcedPowerLimit");
    f_dev_type_uint max_clock = (f_dev_type_uint)sym(n, "nvmlDeviceGetMaxClockInfo");
    f_dev_2int cc = (f_dev_2int)sym(n, "nvmlDeviceGetCudaComputeCapability"),
               ecc = (f_dev_2int)sym(n, "nvmlDeviceGetEccMode");
    unsigned u[7] = {0};
    int major = 0, minor = 0, cur = -1, pending = -1;
    if (name) name(n->handle[i], g->name, sizeof g->name);
    if (uuid) uuid(n->handle[i], g->uuid, sizeof g->uuid);
    if (gen) gen(n->handle[i], &u[0]);
    if (gen_max) gen_max(n->handle[i], &u[1]);
    if (width) width(n->handle[i], &u[2]);
    if (width_max) width_max(n->handle[i], &u[3]);
    if (limit) limit(n->handle[i], &u[4]);
    if (max_clock) { max_clock(n->handle[i], 1, &u[5]); max_clock(n->handle[i], 2, &u[6]); } /* SM, memory */
    if (cc && cc(n->handle[i], &major, &minor) == 0) g->cc = major * 10 + minor;
    g->ecc = ecc && ecc(n->handle[i], &cur, &pending) == 0 ? cur != 0 : -1;
    g->pcie_gen = (int)u[0];
    g->pcie_gen_max = (int)u[1];
    g->pcie_width = (int)u[2];
    g->pcie_width_max = (int)u[3];
    g->power_limit_w = u[4] / 1000.0;
    g->sm_mhz_max = (int)u[5];
    g->mem_mhz_max = (int)u[6];
}

void tfb_nvml_refresh(tfb_nvml *n, int i) {
    tfb_nvml_gpu *g = &n->gpu[i];
    f_dev_type_uint clock = (f_dev_type_uint)sym(n, "nvmlDeviceGetClockInfo");
    f_dev_ull reasons = (f_dev_ull)sym(n, "nvmlDeviceGetCurrentClocksThrottleReasons");
    f_dev_mem mem = (f_dev_mem)sym(n, "nvmlDeviceGetMemoryInfo");
    f_dev_ecc errors = (f_dev_ecc)sym(n, "nvmlDeviceGetTotalEccErrors");
    unsigned sm = 0, mc = 0;
    nvml_memory m = {0, 0, 0};
    if (clock) { clock(n->handle[i], 1, &sm); clock(n->handle[i], 2, &mc); }
    g->sm_mhz = (int)sm;
    g->mem_mhz = (int)mc;
    if (!reasons || reasons(n->handle[i], &g->throttle) != 0) g->throttle = 0;
    if (mem && mem(n->handle[i], &m) == 0) { g->mem_total = m.total; g->mem_free = m.free; }
    /* (NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0) */
    if (!errors || g->ecc != 1 || errors(n->handle[i], 1, 0, &g->ecc_uncorrected) != 0) g->ecc_uncorrected = 0;
}

static tfb_nvml *fail(tfb_nvml *n, char *err, size_t len, const char *why) {
    snprintf(err, len, "%s", why);
    if (n->lib) dlclose(n->lib);
    free(n);
    return NULL;
}

tfb_nvml *tfb_nvml_open(char *err, size_t len) {
    const char *test = getenv("TFB_TEST_LIBNVML");
    tfb_nvml *n = calloc(1, sizeof *n);
    if (!n) { snprintf(err, len, "out of memory"); return NULL; }
    n->lib = dlopen(test && test[0] ? test : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) return fail(n, err, len, "libnvidia-ml.so.1 not found");
    f_void init = (f_void)sym(n, "nvmlInit_v2");
    f_str driver = (f_str)sym(n, "nvmlSystemGetDriverVersion");
    f_uint count = (f_uint)sym(n, "nvmlDeviceGetCount_v2");
    f_handle handle = (f_handle)sym(n, "nvmlDeviceGetHandleByIndex_v2");
    unsigned c = 0;
    if (!init || !count || !handle || init() != 0) return fail(n, err, len, "NVML did not initialise");
    if (driver) driver(n->driver, sizeof n->driver);
    if (count(&c) != 0) c = 0;
    for (unsigned i = 0; i < c && n->n < TFB_NVML_MAX_GPUS; i++) {
        if (handle(i, &n->handle[n->n]) != 0) continue;
        read_pci(n, n->n);
        read_static(n, n->n);
        read_links(n, n->n);
        tfb_nvml_refresh(n, n->n);
        n->n++;
    }
    return n;
}

void tfb_nvml_close(tfb_nvml *n) {
    if (!n) return;
    f_void shut = (f_void)sym(n, "nvmlShutdown");
    if (shut) shut();
    dlclose(n->lib);
    free(n);
}

int tfb_nvml_count(const tfb_nvml *n) { return n ? n->n : 0; }
const tfb_nvml_gpu *tfb_nvml_gpu_info(const tfb_nvml *n, int i) { return &n->gpu[i]; }
const char *tfb_nvml_driver(const tfb_nvml *n) { return n->driver; }

double tfb_nvml_power_w(const tfb_nvml *n, int i) {
    f_dev_uint f = (f_dev_uint)sym(n, "nvmlDeviceGetPowerUsage");
    unsigned mw = 0;
    return f && f(n->handle[i], &mw) == 0 ? mw / 1000.0 : -1.0;
}

unsigned long long tfb_nvml_energy_mj(const tfb_nvml *n, int i) {
    f_dev_ull f = (f_dev_ull)sym(n, "nvmlDeviceGetTotalEnergyConsumption");
    unsigned long long mj = 0;
    return f && f(n->handle[i], &mj) == 0 ? mj : 0;
}

const char *tfb_nvml_throttle_text(unsigned long long r, char *buf, size_t len) {
    static const struct { unsigned long long bit; const char *what; } reasons[] = {
        {0x4, "software power cap"}, {0x8, "hardware slowdown"}, {0x10, "sync boost"},
        {0x20, "software thermal slowdown"}, {0x40, "hardware thermal slowdown"}, {0x80, "power brake"},
    };
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (r & reasons[i].bit) {
            int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", reasons[i].what);
            if (w < 0 || (size_t)w >= len - used) break;
            used += (size_t)w;
        }
    return buf;
}

double tfb_pcie_gbs(int gen, int width) {
    static const double per_lane[] = {0, 0.25, 0.5, 0.984375, 1.96875, 3.9375, 7.875}; /* GB/s per lane */
    if (gen < 1 || width < 1) return 0;
    return (gen < 7 ? per_lane[gen] : per_lane[6]) * width;
}

double tfb_nvlink_gbs(int version) { return version <= 0 ? 0 : version == 1 ? 20.0 : version >= 5 ? 50.0 : 25.0; }
