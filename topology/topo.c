/* topo.c — see topo.h. hwloc 2.x; I/O objects (PCI devices, bridges, OS devices) are walked through their parents
 * by hand, because hwloc's common-ancestor helper compares depths, which I/O objects do not have. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <hwloc.h>
#include "topo.h"
#include "gpu_probe.h"

#define NVIDIA 0x10de

const char *tfb_link_name(tfb_link k) {
    static const char *const names[] = {"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"};
    return names[k];
}

static hwloc_topology_t hw(const tfb_topo *t) { return (hwloc_topology_t)t->hw; }

/* hwloc 2.9 can crash on a damaged XML file (a NUMA node without complete_nodeset reaches a NULL bitmap; found
 * by tests/fuzz/fuzz_topo.c). A saved file is therefore loaded once in a child process first: if the child does
 * not finish cleanly, the file is refused as corrupt instead of taking tfbench down. */
static int loads_in_child(const char *xml) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 1; /* cannot check: let the real load decide */
    if (pid == 0) {
        static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) signal(fatal[i], SIG_DFL); /* die quietly */
        hwloc_topology_t topo;
        int ok = hwloc_topology_init(&topo) == 0 && hwloc_topology_set_xml(topo, xml) == 0 &&
                 hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == 0 &&
                 hwloc_topology_load(topo) == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static tfb_status open_source(tfb_topo *t, const char *xml, const char *synthetic, char *err, size_t len) {
    hwloc_topology_t topo = hw(t);
    const char *env = getenv("HWLOC_XMLFILE");
    if (!xml && !synthetic && env && env[0]) xml = env;
    if (xml) {
        if (access(xml, R_OK) != 0) {
            snprintf(err, len, "--topology: cannot read %s", xml);
            return TFB_ERR_ARG;
        }
        if (!loads_in_child(xml) || hwloc_topology_set_xml(topo, xml) != 0) {
            snprintf(err, len, "--topology: %s could not be loaded (corrupt or not an hwloc topology)", xml);
            return TFB_ERR_ARG;
        }
        snprintf(t->source, sizeof t->source, "saved: %s", xml);
    } else if (synthetic) {
        if (hwloc_topology_set_synthetic(topo, synthetic) != 0) {
            snprintf(err, len, "synthetic topology '%s' is not valid", synthetic);
            return TFB_ERR_ARG;
        }
        snprintf(t->source, sizeof t->source, "synthetic: %s", synthetic);
    } else {
        snprintf(t->source, sizeof t->source, "this machine");
    }
    return TFB_OK;
}

/* ---- GPUs ---- */

static int is_nvidia_gpu(hwloc_obj_t o) {
    unsigned cls = o->attr->pcidev.class_id;
    return o->attr->pcidev.vendor_id == NVIDIA && (cls == 0x0302 || cls == 0x0300);
}

static void gpu_locality(tfb_topo *t, tfb_gpu *g, hwloc_obj_t pci) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(hw(t), pci);
    g->numa = anc && anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : -1;
    if (anc && anc->cpuset) hwloc_bitmap_list_snprintf(g->cpulist, sizeof g->cpulist, anc->cpuset);
}

static void gpu_from_pci(tfb_topo *t, tfb_gpu *g, hwloc_obj_t pci) {
    struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
    *g = (tfb_gpu){.domain = a->domain, .bus = a->bus, .dev = a->dev, .func = a->func, .cuda_index = -1,
                   .pcie_gbs = a->linkspeed, .obj = pci};
    snprintf(g->busid, sizeof g->busid, "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev, a->func);
    const char *name = hwloc_obj_get_info_by_name(pci, "PCIDevice");
    snprintf(g->name, sizeof g->name, "%s", name ? name : "NVIDIA GPU");
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
        const char *model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (model) snprintf(g->name, sizeof g->name, "%s", model);
        if (strncmp(c->name, "cuda", 4) == 0) g->cuda_index = atoi(c->name + 4);
    }
    gpu_locality(t, g, pci);
}

static int by_cuda_index(const void *a, const void *b) {
    return ((const tfb_gpu *)a)->cuda_index - ((const tfb_gpu *)b)->cuda_index;
}

/* On this machine (or with a stub driver), the CUDA driver's device order joined to the PCI devices on (domain,
 * bus, device), for topologies whose hwloc has no CUDA OS devices. Returns how many joined. */
static int join_cuda_order(const tfb_topo *t, tfb_gpu *all, int n) {
    const char *stub = getenv("TFB_TEST_LIBCUDA");
    if (!t->is_this_machine && !(stub && stub[0])) return 0;
    static tfb_gpu_probe p;
    int joined = 0;
    tfb_gpu_probe_run(&p);
    for (int k = 0; k < p.n; k++) {
        unsigned dom, bus, dev;
        if (sscanf(p.dev[k].bus_id, "%x:%x:%x", &dom, &bus, &dev) != 3) continue;
        for (int i = 0; i < n; i++)
            if (all[i].cuda_index < 0 && all[i].domain == dom && all[i].bus == bus && all[i].dev == dev) {
                all[i].cuda_index = k;
                joined++;
            }
    }
    return joined;
}

/* NVIDIA PCI devices; when some have CUDA devices (hwloc's, else the live driver's), those alone, in CUDA's order. */
static void find_gpus(tfb_topo *t) {
    static tfb_gpu all[TFB_TOPO_MAX_GPUS];
    int n = 0, with_cuda = 0;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(hw(t), NULL); o && n < TFB_TOPO_MAX_GPUS;
         o = hwloc_get_next_pcidev(hw(t), o)) {
        if (!is_nvidia_gpu(o)) continue;
        gpu_from_pci(t, &all[n], o);
        with_cuda += all[n++].cuda_index >= 0;
    }
    if (!with_cuda) with_cuda = join_cuda_order(t, all, n);
    for (int i = 0; i < n; i++)
        if (!with_cuda || all[i].cuda_index >= 0) t->gpus[t->n_gpus++] = all[i];
        else t->other_nvidia++;
    if (with_cuda) qsort(t->gpus, (size_t)t->n_gpus, sizeof t->gpus[0], by_cuda_index);
}

/* ---- pairs ---- */

static int is_host_bridge(hwloc_obj_t o) {
    return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

/* The lowest common ancestor of a and b, and how many objects lie strictly between each and it. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b, int *da, int *db) {
    *da = 0;
    for (hwloc_obj_t x = a; x; x = x->parent, (*da)++) {
        *db = 0;
        for (hwloc_obj_t y = b; y; y = y->parent, (*db)++)
            if (x == y) {
                (*da)--; /* exclude the GPU itself: count the objects in between */
                (*db)--;
                return x;
            }
    }
    return NULL;
}

/* nvidia-smi's classes from the PCI tree: a shared switch (PIX), several bridges (PXB), the same host bridge
 * (PHB), host bridges of one NUMA node (NODE), or across NUMA nodes (SYS). */
static tfb_link pcie_class(const tfb_gpu *a, const tfb_gpu *b) {
    int da, db;
    hwloc_obj_t anc = common_ancestor(a->obj, b->obj, &da, &db);
    if (anc && anc->type == HWLOC_OBJ_BRIDGE) {
        if (is_host_bridge(anc)) return TFB_LINK_PHB;
        return da <= 1 && db <= 1 ? TFB_LINK_PIX : TFB_LINK_PXB;
    }
    return a->numa >= 0 && a->numa == b->numa ? TFB_LINK_NODE : TFB_LINK_SYS;
}

/* Bandwidth of one NVLink per direction, MB/s: NVLink 1.0 (P100) 20 GB/s, later generations 25 GB/s. */
static double per_link_mbs(const tfb_gpu *g) { return strstr(g->name, "P100") ? 20000.0 : 25000.0; }

static int gpu_of_osdev(const tfb_topo *t, hwloc_obj_t os) {
    for (int i = 0; i < t->n_gpus; i++)
        if (os && os->parent == t->gpus[i].obj) return i;
    return -1;
}

/* NV# from a saved topology's NVLinkBandwidth distances (MB/s per direction between OS devices). */
static void nvlinks(tfb_topo *t) {
    unsigned nr = 1;
    struct hwloc_distances_s *d = NULL;
    if (hwloc_distances_get_by_name(hw(t), "NVLinkBandwidth", &nr, &d, 0) != 0 || nr == 0) return;
    for (unsigned i = 0; i < d->nbobjs; i++)
        for (unsigned j = 0; j < d->nbobjs; j++) {
            int a = gpu_of_osdev(t, d->objs[i]), b = gpu_of_osdev(t, d->objs[j]);
            double mbs = (double)d->values[i * d->nbobjs + j];
            if (a < 0 || b < 0 || a == b || mbs <= 0) continue;
            tfb_gpu_pair *p = &t->pair[a][b];
            p->kind = TFB_LINK_NV;
            p->nvlink_gbs = mbs / 1000.0;
            p->nvlinks = (int)lround(mbs / per_link_mbs(&t->gpus[a]));
            if (p->nvlinks < 1) p->nvlinks = 1;
        }
    hwloc_distances_release(hw(t), d);
}

static void classify_pairs(tfb_topo *t) {
    for (int i = 0; i < t->n_gpus; i++)
        for (int j = 0; j < t->n_gpus; j++) {
            tfb_link k = i == j ? TFB_LINK_X : pcie_class(&t->gpus[i], &t->gpus[j]);
            t->pair[i][j] = (tfb_gpu_pair){.kind = k, .pcie = k};
        }
    nvlinks(t);
}

/* ---- CPU side ---- */

static void cpu_side(tfb_topo *t) {
    hwloc_topology_t topo = hw(t);
    t->packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    t->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n && t->n_numa < TFB_TOPO_MAX_NUMA; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        tfb_numa *z = &t->numa[t->n_numa++];
        z->os_index = (int)o->os_index;
        z->memory_bytes = (double)o->attr->numanode.local_memory;
        hwloc_bitmap_list_snprintf(z->cpulist, sizeof z->cpulist, o->cpuset);
    }
    hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    snprintf(t->cpu_model, sizeof t->cpu_model, "%s", model ? model : "unknown");
}

tfb_status tfb_topo_load(const char *xml, const char *synthetic, tfb_topo *t, char *err, size_t len) {
    hwloc_topology_t topo;
    memset(t, 0, sizeof *t);
    if (hwloc_topology_init(&topo) != 0) return TFB_ERR_NOMEM;
    t->hw = topo;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    tfb_status st = open_source(t, xml, synthetic, err, len);
    if (st == TFB_OK && hwloc_topology_load(topo) != 0) {
        snprintf(err, len, "--topology: %s could not be loaded (corrupt or not an hwloc topology)", t->source);
        st = TFB_ERR_ARG;
    }
    if (st != TFB_OK) { tfb_topo_free(t); return st; }
    t->is_this_machine = hwloc_topology_is_thissystem(topo);
    cpu_side(t);
    find_gpus(t);
    classify_pairs(t);
    tfb_topo_join_nvml(t);
    return TFB_OK;
}

void tfb_topo_free(tfb_topo *t) {
    if (t->hw) hwloc_topology_destroy(hw(t));
    t->hw = NULL;
}

tfb_status tfb_topo_save(const tfb_topo *t, const char *path) {
    return hwloc_topology_export_xml(hw(t), path, 0) == 0 ? TFB_OK : TFB_ERR_IO;
}

/* ---- printing ---- */

static void cell(char *buf, size_t len, const tfb_gpu_pair *p) {
    if (p->kind == TFB_LINK_NV) snprintf(buf, len, "NV%d", p->nvlinks);
    else snprintf(buf, len, "%s", tfb_link_name(p->kind));
}

void tfb_topo_print_matrix(FILE *f, const tfb_topo *t) {
    if (t->n_gpus == 0) {
        fprintf(f, "no GPU found (%s)\n", t->source);
        return;
    }
    fprintf(f, "%-8s", "");
    for (int j = 0; j < t->n_gpus; j++) fprintf(f, "GPU%-5d", j);
    fprintf(f, "%-22s  %s\n", "CPU Affinity", "NUMA Affinity");
    for (int i = 0; i < t->n_gpus; i++) {
        fprintf(f, "GPU%-5d", i);
        for (int j = 0; j < t->n_gpus; j++) {
            char c[16];
            cell(c, sizeof c, &t->pair[i][j]);
            fprintf(f, "%-8s", c);
        }
        char numa[16] = "N/A";
        if (t->gpus[i].numa >= 0) snprintf(numa, sizeof numa, "%d", t->gpus[i].numa);
        fprintf(f, "%-22s  %s\n", t->gpus[i].cpulist[0] ? t->gpus[i].cpulist : "N/A", numa);
    }
    fprintf(f, "\nLegend:\n"
               "  X    = Self\n"
               "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
               "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
               "NUMA node\n"
               "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
               "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
               "  PIX  = Connection traversing at most a single PCIe bridge\n"
               "  NV#  = Connection traversing a bonded set of # NVLinks\n");
}

void tfb_topo_print_links(FILE *f, const tfb_topo *t) {
    if (t->n_gpus == 0) return;
    fprintf(f, "\nGPUs (%s):\n", t->source);
    for (int i = 0; i < t->n_gpus; i++) {
        const tfb_gpu *g = &t->gpus[i];
        fprintf(f, "  GPU%d  %-28s  pci %s", i, g->name, g->busid);
        if (g->cuda_index >= 0) fprintf(f, "  cuda%d", g->cuda_index);
        if (g->pcie_gen > 0)
            fprintf(f, "  PCIe Gen%d x%d (max Gen%d x%d) %.2f GB/s  %s", g->pcie_gen, g->pcie_width, g->pcie_gen_max,
                    g->pcie_width_max, g->pcie_gbs, g->uuid);
        else if (g->pcie_gbs > 0) fprintf(f, "  PCIe link %.2f GB/s", g->pcie_gbs);
        fputc('\n', f);
    }
    if (t->other_nvidia) fprintf(f, "  (%d more NVIDIA GPU%s on the PCI bus without a CUDA device)\n", t->other_nvidia,
                                 t->other_nvidia > 1 ? "s" : "");
    fprintf(f, "\nlinks (nominal, per direction):\n");
    for (int i = 0; i < t->n_gpus; i++)
        for (int j = i + 1; j < t->n_gpus; j++) {
            const tfb_gpu_pair *p = &t->pair[i][j];
            double pcie = fmin(t->gpus[i].pcie_gbs, t->gpus[j].pcie_gbs);
            if (p->kind == TFB_LINK_NV)
                fprintf(f, "  GPU%d <-> GPU%d  NV%d   %d NVLink%s%s, %.1f GB/s (%s); PCIe path %s\n", i, j,
                        p->nvlinks, p->nvlinks, p->nvlinks > 1 ? "s" : "", p->via_switch ? " via NVSwitch" : "",
                        p->nvlink_gbs, t->nvml ? "NVML" : "NVLinkBandwidth", tfb_link_name(p->pcie));
            else if (pcie > 0)
                fprintf(f, "  GPU%d <-> GPU%d  %-5s PCIe, %.2f GB/s (the slower link)\n", i, j, tfb_link_name(p->kind),
                        pcie);
            else
                fprintf(f, "  GPU%d <-> GPU%d  %-5s PCIe, link speed not recorded\n", i, j, tfb_link_name(p->kind));
        }
}

void tfb_topo_print_cpu(FILE *f, const tfb_topo *t) {
    fprintf(f, "\nCPU (%s): %d package%s, %d NUMA node%s, %d cores, %d hardware threads; %s\n", t->source,
            t->packages, t->packages == 1 ? "" : "s", t->n_numa, t->n_numa == 1 ? "" : "s", t->cores, t->pus,
            t->cpu_model);
    for (int i = 0; i < t->n_numa; i++)
        fprintf(f, "  NUMA %d: cpus %s, %.1f GiB\n", t->numa[i].os_index, t->numa[i].cpulist,
                t->numa[i].memory_bytes / 1073741824.0);
}
