/* topo.h — the machine as tfbench sees it: packages, NUMA nodes and cores from hwloc, the GPUs (NVIDIA PCI
 * devices, named and indexed by their CUDA OS devices when the topology has them), and every GPU pair classified
 * the way `nvidia-smi topo -m` does: NV# (bonded NVLinks, from a saved topology's NVLinkBandwidth matrix), PIX,
 * PXB, PHB, NODE or SYS (from the PCI tree). The topology is this machine's (hwloc with I/O discovery), a saved
 * hwloc XML (--topology FILE or HWLOC_XMLFILE) or a synthetic description (for tests).
 *
 * On this machine, NVML (when present) is joined on PCI ids and its NVLinks replace the saved-matrix reading
 * (topo_nvml.c). This file does not talk to the CUDA runtime and does not bind anything (bind.c does).
 */
#ifndef TFB_TOPO_H
#define TFB_TOPO_H
#include <stdio.h>
#include "../kernels/check.h"

enum { TFB_TOPO_MAX_GPUS = 64, TFB_TOPO_MAX_NUMA = 64 };

typedef enum { TFB_LINK_X, TFB_LINK_NV, TFB_LINK_PIX, TFB_LINK_PXB, TFB_LINK_PHB, TFB_LINK_NODE, TFB_LINK_SYS } tfb_link;

typedef struct {
    char name[96];            /* the GPU model (OS device info) or the PCI device name */
    char busid[16];           /* dddd:bb:dd.f */
    unsigned domain, bus, dev, func;
    int cuda_index;           /* from a cudaN OS device, else the live driver's order; -1: not a CUDA device */
    int numa;                 /* OS index of the NUMA node it is local to; -1 when unknown */
    char cpulist[256];        /* cores (PUs) local to it, as a list: "0-7,16-23" */
    double pcie_gbs;          /* PCIe link speed hwloc recorded (or NVML's current link), GB/s (0: not recorded) */
    char uuid[96];            /* from NVML ("" without) */
    int pcie_gen, pcie_width, pcie_gen_max, pcie_width_max; /* from NVML (0 without) */
    void *obj;                /* hwloc PCI object */
} tfb_gpu;

typedef struct {
    tfb_link kind;            /* the closest connection between two GPUs */
    int nvlinks;              /* NV#: bonded links */
    double nvlink_gbs;        /* NVLink bandwidth per direction, GB/s (from the NVLinkBandwidth matrix) */
    tfb_link pcie;            /* the PCIe class under the NVLink, for reference */
    int via_switch;           /* NV#: through NVSwitches (NVML) */
} tfb_gpu_pair;

typedef struct {
    int os_index;
    char cpulist[256];
    double memory_bytes;
} tfb_numa;

typedef struct {
    void *hw;                 /* hwloc_topology_t */
    char source[512];         /* "this machine", "saved: FILE", "synthetic: ..." */
    int is_this_machine;      /* binding applies */
    int packages, cores, pus;
    int n_numa;
    tfb_numa numa[TFB_TOPO_MAX_NUMA];
    int n_gpus;
    tfb_gpu gpus[TFB_TOPO_MAX_GPUS];
    tfb_gpu_pair pair[TFB_TOPO_MAX_GPUS][TFB_TOPO_MAX_GPUS];
    int other_nvidia;         /* NVIDIA GPUs on the PCI bus without a CUDA device (when the topology has CUDA devices) */
    char cpu_model[128];
    int nvml;                 /* GPUs and NVLinks joined with NVML (live), not from the saved NVLinkBandwidth matrix */
} tfb_topo;

/* Loads a topology: xml (a saved hwloc export), else synthetic (an hwloc synthetic string), else HWLOC_XMLFILE,
 * else this machine. TFB_ERR_ARG with a one-line reason in err for a missing or unreadable file. */
tfb_status tfb_topo_load(const char *xml, const char *synthetic, tfb_topo *t, char *err, size_t err_len);
void tfb_topo_free(tfb_topo *t);
/* Writes the topology as hwloc XML (what `lstopo file.xml` writes). */
tfb_status tfb_topo_save(const tfb_topo *t, const char *path);
const char *tfb_link_name(tfb_link k);

/* The GPU matrix in nvidia-smi's form with CPU and NUMA affinity, and its legend. */
void tfb_topo_print_matrix(FILE *f, const tfb_topo *t);
/* One line per GPU pair: kind, NVLinks or PCIe path, nominal bandwidth per direction. */
void tfb_topo_print_links(FILE *f, const tfb_topo *t);
/* Packages, NUMA nodes (cores, memory), cores and hardware threads. */
void tfb_topo_print_cpu(FILE *f, const tfb_topo *t);
/* topo_nvml.c: joins NVML's GPUs to these on PCI (domain, bus, device) and classifies NVLink pairs from NVML's
 * links (direct: links whose far end is the other GPU; NVSwitch: the smaller of the two GPUs' switch links).
 * Applies to this machine's topology, or to any when TFB_TEST_LIBNVML names a test stub. Without NVML: nothing. */
void tfb_topo_join_nvml(tfb_topo *t);

#endif
