/* nvml.h — NVIDIA's management library, loaded with dlopen when present (no NVML is not an error): per GPU the
 * name, UUID, PCI id, PCIe generation and width (current and max), clocks (current and max), power limit, memory,
 * ECC mode and uncorrected errors, throttle reasons, and every NVLink (state, version, remote PCI id, NVSwitch or
 * GPU at the far end); and the power and energy readings a sampler needs. TFB_TEST_LIBNVML names another library
 * (a test stub) in place of libnvidia-ml.so.1. This file does not classify GPU pairs (topo.c does).
 */
#ifndef TFB_NVML_H
#define TFB_NVML_H
#include <stddef.h>

enum { TFB_NVML_MAX_GPUS = 64, TFB_NVML_MAX_LINKS = 18 };

typedef struct {
    int version;                 /* NVLink version, 0 when unknown */
    unsigned domain, bus, dev;   /* the far end's PCI id */
    int to_switch;               /* the far end is an NVSwitch */
} tfb_nvlink;

typedef struct {
    char name[96], uuid[96], busid[16];  /* busid as dddd:bb:dd.0, lower case */
    unsigned domain, bus, dev;
    int cc;                              /* compute capability x 10, 0 when unknown */
    int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int sm_mhz, sm_mhz_max, mem_mhz, mem_mhz_max;
    double power_limit_w;
    unsigned long long mem_total, mem_free;
    int ecc;                             /* 1 on, 0 off, -1 unknown */
    unsigned long long ecc_uncorrected;  /* volatile (since the last driver load) */
    unsigned long long throttle;         /* clock throttle reason bits */
    int n_links;                         /* active NVLinks */
    tfb_nvlink link[TFB_NVML_MAX_LINKS];
} tfb_nvml_gpu;

typedef struct tfb_nvml tfb_nvml;

/* Loads NVML and reads every GPU; NULL when there is no NVML or it does not initialise (why: into err). */
tfb_nvml *tfb_nvml_open(char *err, size_t err_len);
void tfb_nvml_close(tfb_nvml *n);
int tfb_nvml_count(const tfb_nvml *n);
const tfb_nvml_gpu *tfb_nvml_gpu_info(const tfb_nvml *n, int i);
const char *tfb_nvml_driver(const tfb_nvml *n);
/* Re-reads clocks, throttle reasons, free memory and ECC counts of GPU i. */
void tfb_nvml_refresh(tfb_nvml *n, int i);
/* Instantaneous power in watts (negative when unavailable); the energy counter in millijoules (0: unavailable). */
double tfb_nvml_power_w(const tfb_nvml *n, int i);
unsigned long long tfb_nvml_energy_mj(const tfb_nvml *n, int i);
/* The throttle reasons that slow a benchmark (idle and application-clock settings left out), in words; "" when
 * none. */
const char *tfb_nvml_throttle_text(unsigned long long reasons, char *buf, size_t len);
/* Nominal per-direction GB/s of a PCIe link (128b/130b from Gen3) and of one NVLink of a version. */
double tfb_pcie_gbs(int gen, int width);
double tfb_nvlink_gbs(int version);

#endif
