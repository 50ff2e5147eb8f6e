/* env.c — see env.h. */
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <cblas.h>
#include <omp.h>
#include "env.h"
#include "config.h"
#include "../topology/gpu_probe.h"
#include "../topology/nvml.h"
#if HAVE_HWLOC
#include <hwloc.h>
#endif

#ifndef TFB_GIT_COMMIT
#define TFB_GIT_COMMIT "unknown"
#endif

/* First "key: value" line of a text file whose key starts with `key`; "" if none. */
static const char *file_field(const char *path, const char *key, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key)) != 0) continue;
        char *v = strchr(line, ':');
        if (!v) v = strchr(line, '=');
        if (!v) continue;
        for (v++; *v == ' ' || *v == '\t' || *v == '"'; v++) {}
        v[strcspn(v, "\"\n")] = '\0';
        snprintf(buf, len, "%s", v);
        break;
    }
    fclose(f);
    return buf;
}

const char *tfb_env_cpu_model(void) {
    static char buf[256];
    if (!buf[0]) file_field("/proc/cpuinfo", "model name", buf, sizeof buf);
    return buf[0] ? buf : "unknown";
}

const char *tfb_env_blas(void) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s", openblas_get_config());
    return buf;
}

static void add_system(cJSON *e) {
    struct utsname u;
    struct sysinfo si;
    char buf[256];
    if (uname(&u) == 0) {
        cJSON_AddStringToObject(e, "host", u.nodename);
        cJSON_AddStringToObject(e, "kernel", u.release);
        cJSON_AddStringToObject(e, "machine", u.machine);
    }
    cJSON_AddStringToObject(e, "os", file_field("/etc/os-release", "PRETTY_NAME", buf, sizeof buf));
    cJSON_AddStringToObject(e, "cpu_model", tfb_env_cpu_model());
    cJSON_AddNumberToObject(e, "cpu_cores_online", (double)sysconf(_SC_NPROCESSORS_ONLN));
    if (sysinfo(&si) == 0) cJSON_AddNumberToObject(e, "memory_bytes", (double)si.totalram * si.mem_unit);
}

static void add_libraries(cJSON *e, const char *mpi_library) {
    char buf[64];
#ifdef __clang__
    cJSON_AddStringToObject(e, "compiler", "clang " __VERSION__);
#else
    cJSON_AddStringToObject(e, "compiler", "gcc " __VERSION__);
#endif
    cJSON_AddStringToObject(e, "mpi_library", mpi_library);
    cJSON_AddStringToObject(e, "blas", tfb_env_blas());
    snprintf(buf, sizeof buf, "%d", _OPENMP);
    cJSON_AddStringToObject(e, "openmp", buf);
#if HAVE_HWLOC
    unsigned v = hwloc_get_api_version();
    snprintf(buf, sizeof buf, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
    cJSON_AddStringToObject(e, "hwloc", buf);
#else
    cJSON_AddNullToObject(e, "hwloc");
#endif
    cJSON_AddStringToObject(e, "cjson", cJSON_Version());
    cJSON_AddStringToObject(e, "tfbench_version", TFB_VERSION);
    cJSON_AddStringToObject(e, "tfbench_commit", TFB_GIT_COMMIT);
}

int tfb_env_var_recorded(const char *entry) {
    static const char *const prefixes[] = {"NCCL_", "CUDA_", "OMPI_MCA_", "UCX_", "HWLOC_", "OMP_", "TFB_",
                                           "SLURM_CPU_BIND", "SLURM_CPUS_PER_TASK", "SLURM_NTASKS", "SLURM_GPUS",
                                           "SLURM_MPI_TYPE", "SLURM_DISTRIBUTION", "SLURM_JOB_NUM_NODES", NULL};
    /* what Open MPI's launcher passes to each process about itself (some differ on every launch) */
    static const char *const internal[] = {"OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
                                           "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "OMPI_MCA_mpi_oversubscribe",
                                           "OMPI_MCA_rmaps_ppr_n_pernode", NULL};
    for (int i = 0; internal[i]; i++)
        if (strncmp(entry, internal[i], strlen(internal[i])) == 0) return 0;
    for (int i = 0; prefixes[i]; i++)
        if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

extern char **environ;

/* The variables that change what tfbench, MPI, NCCL or CUDA do, and /etc/nccl.conf, verbatim. */
static void add_variables(cJSON *e) {
    cJSON *v = cJSON_CreateObject();
    for (char **p = environ; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if (!eq || !tfb_env_var_recorded(*p)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *p) < 255 ? (int)(eq - *p) : 255, *p);
        if (!cJSON_GetObjectItemCaseSensitive(v, name)) cJSON_AddStringToObject(v, name, eq + 1);
    }
    cJSON_AddItemToObject(e, "variables", v);
    FILE *f = fopen("/etc/nccl.conf", "r");
    if (!f) return;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON_AddStringToObject(e, "nccl_conf", buf);
}

/* The CUDA libraries' versions as they report them; null when not found. */
static void add_cuda_libraries(cJSON *e) {
    static const char *const libs[] = {"cudart", "cublas", "cudnn", "nccl"};
    static const char *const keys[] = {"cuda_runtime", "cublas", "cudnn", "nccl"};
    for (int i = 0; i < 4; i++) {
        tfb_lib_probe p;
        tfb_lib_probe_run(libs[i], &p);
        if (p.found) cJSON_AddStringToObject(e, keys[i], p.version);
        else cJSON_AddNullToObject(e, keys[i]);
    }
}

/* One GPU: what the driver API says (SMs, compute capability) joined with NVML (UUID, clocks, power, ECC, PCIe). */
static const char *gpu_name(const tfb_gpu_dev *d, const tfb_nvml_gpu *n) {
    return d ? d->name : n ? n->name : "unknown";
}

static cJSON *gpu_json(const tfb_gpu_dev *d, const tfb_nvml_gpu *n) {
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "name", gpu_name(d, n));
    cJSON_AddStringToObject(g, "pci_bus_id", d ? d->bus_id : n ? n->busid : "unknown");
    if (d) {
        char cc[24];
        snprintf(cc, sizeof cc, "%d.%d", d->cc / 10, d->cc % 10);
        cJSON_AddStringToObject(g, "compute_capability", cc);
        cJSON_AddNumberToObject(g, "sm_count", d->sms);
        cJSON_AddNumberToObject(g, "memory_bytes", (double)d->memory_bytes);
    }
    if (!n) return g;
    cJSON_AddStringToObject(g, "uuid", n->uuid);
    cJSON_AddNumberToObject(g, "sm_clock_mhz", n->sm_mhz);
    cJSON_AddNumberToObject(g, "sm_clock_max_mhz", n->sm_mhz_max);
    cJSON_AddNumberToObject(g, "memory_clock_max_mhz", n->mem_mhz_max);
    cJSON_AddNumberToObject(g, "power_limit_w", n->power_limit_w);
    if (n->ecc >= 0) cJSON_AddBoolToObject(g, "ecc", n->ecc);
    char link[48];
    snprintf(link, sizeof link, "Gen%d x%d (max Gen%d x%d)", n->pcie_gen, n->pcie_width, n->pcie_gen_max,
             n->pcie_width_max);
    cJSON_AddStringToObject(g, "pcie_link", link);
    cJSON_AddNumberToObject(g, "nvlinks_active", n->n_links);
    return g;
}

static const tfb_nvml_gpu *nvml_match(const tfb_nvml *nv, const char *bus_id) {
    for (int k = 0; k < tfb_nvml_count(nv); k++)
        if (strcmp(tfb_nvml_gpu_info(nv, k)->busid, bus_id) == 0) return tfb_nvml_gpu_info(nv, k);
    return NULL;
}

/* GPUs, driver versions (NVML's and the CUDA driver's: they can differ) and the CUDA libraries. The first GPU's
 * model, clocks and power limit also sit at the top level so that `tfbench compare` lists their changes. */
static void add_gpus(cJSON *e) {
    static tfb_gpu_probe probe;
    char err[200];
    tfb_gpu_probe_run(&probe);
    tfb_nvml *nv = tfb_nvml_open(err, sizeof err);
    if (nv) cJSON_AddStringToObject(e, "nvidia_driver", tfb_nvml_driver(nv));
    else cJSON_AddNullToObject(e, "nvidia_driver");
    char v[16];
    snprintf(v, sizeof v, "%d.%d", probe.driver_version / 1000, probe.driver_version % 1000 / 10);
    if (probe.driver_found) cJSON_AddStringToObject(e, "cuda_driver", v);
    else cJSON_AddNullToObject(e, "cuda_driver");
    add_cuda_libraries(e);
    cJSON *list = cJSON_CreateArray();
    int n = probe.n ? probe.n : tfb_nvml_count(nv);
    for (int i = 0; i < n; i++) {
        const tfb_gpu_dev *d = probe.n ? &probe.dev[i] : NULL;
        const tfb_nvml_gpu *x = d ? nvml_match(nv, d->bus_id) : tfb_nvml_gpu_info(nv, i);
        cJSON_AddItemToArray(list, gpu_json(d, x));
        if (i > 0) continue;
        cJSON_AddStringToObject(e, "gpu_model", gpu_name(d, x));
        if (x) cJSON_AddNumberToObject(e, "gpu_power_limit_w", x->power_limit_w);
        if (x) cJSON_AddNumberToObject(e, "gpu_sm_clock_max_mhz", x->sm_mhz_max);
    }
    cJSON_AddNumberToObject(e, "gpu_count", n);
    cJSON_AddItemToObject(e, "gpus", list);
    tfb_nvml_close(nv);
}

cJSON *tfb_env_capture(const char *mpi_library) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    add_system(e);
    add_libraries(e, mpi_library);
    add_gpus(e);
    add_variables(e);
    return e;
}
