/* doctor.c — `[mpirun -np N] tfbench doctor`: each check printed by rank 0 as ✓ (passed), ✗ (failed, with a
 * one-line fix) or – (not applicable here, saying why); exit status 1 when any check failed, else 0.
 *
 * CPU side: the MPI world against the launcher's own count (a misconfigured PMI starts N singletons), hwloc, the
 * binding (ranks and threads against cores per node). GPU side, through gpu_probe.c (dlopen, so a machine without
 * a driver is not an error): the driver and its CUDA version against the toolkit tfbench was built with, the
 * devices and one per rank, a kernel image for each, cuBLAS, cuDNN, NCCL, NVML (free memory, ECC, throttling), P2P
 * copies between every GPU pair and an NCCL all-reduce over all GPUs, each with a deadline (gpu_p2p.c, gpu_nccl.c). Environment variables that
 * change behaviour are listed. This file changes nothing on the machine.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "doctor.h"
#include "catalog.h"
#include "comm.h"
#include "config.h"
#include "../topology/gpu_nccl.h"
#include "../topology/gpu_p2p.h"
#include "../results/env.h"
#include "../topology/gpu_probe.h"
#include "../topology/nvml.h"
#include "../topology/topo.h"

typedef enum { CHK_OK, CHK_FAIL, CHK_NA } chk_state;

typedef struct {
    int fails, total;
} doctor;

typedef struct {                  /* what rank 0 needs from every rank, gathered as 8 integers */
    long long node, local_size, gpus, cpus_allowed, launcher_size, world_size, pad[2];
} rank_facts;

static void say(doctor *d, chk_state st, const char *name, const char *fix, const char *fmt, ...) {
    static const char *const mark[] = {"✓", "✗", "–"};
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%s %-16s %s\n", mark[st], name, detail);
    if (st == CHK_FAIL && fix && fix[0]) printf("  %-16s fix: %s\n", "", fix);
    d->fails += st == CHK_FAIL;
    d->total++;
}

/* The number of processes the launcher says it started, and which variable said it (0: none set). */
static long long launcher_size(const char **var) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS",
                                       "SLURM_NTASKS", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoll(v) > 0) { *var = vars[i]; return atoll(v); }
    }
    *var = NULL;
    return 0;
}

static void check_world(doctor *d, const rank_facts *all, int n) {
    const char *var;
    launcher_size(&var);
    for (int r = 0; r < n; r++)
        if (all[r].launcher_size && all[r].launcher_size != all[r].world_size) {
            say(d, CHK_FAIL, "MPI world", "launch with this MPI's own mpirun, or with Slurm use srun --mpi=pmix "
                "(check srun --mpi=list); a launcher/MPI PMI mismatch starts every process as its own world",
                "the launcher started %lld processes (%s) but MPI sees a world of %lld", all[r].launcher_size,
                var ? var : "launcher variable", all[r].world_size);
            say(d, CHK_OK, "MPI library", NULL, "%.200s", tfb_comm_mpi_library());
            return;
        }
    if (!var) say(d, CHK_OK, "MPI world", NULL, "%d rank%s, no launcher variables (started without mpirun/srun)",
                  n, n > 1 ? "s" : "");
    else say(d, CHK_OK, "MPI world", NULL, "%d rank%s, as the launcher says (%s)", n, n > 1 ? "s" : "", var);
    say(d, CHK_OK, "MPI library", NULL, "%.200s", tfb_comm_mpi_library());
}

static void check_hwloc(doctor *d, tfb_topo *t, int *ok) {
    char err[700];
    *ok = tfb_topo_load(NULL, NULL, t, err, sizeof err) == TFB_OK;
    if (!*ok) {
        say(d, CHK_FAIL, "hwloc", "install hwloc (make deps) or unset HWLOC_XMLFILE", "%s", err);
        return;
    }
    say(d, CHK_OK, "hwloc", NULL, "%s: %d package%s, %d cores, %d hardware threads, %d NUMA node%s, %d NVIDIA "
        "GPU%s on PCI", t->source, t->packages, t->packages > 1 ? "s" : "", t->cores, t->pus, t->n_numa,
        t->n_numa > 1 ? "s" : "", t->n_gpus, t->n_gpus == 1 ? "" : "s");
}

/* Ranks per node against cores; OMP_NUM_THREADS (when set) times ranks against cores. */
static void check_binding(doctor *d, const tfb_topo *t, const rank_facts *all, int n) {
    long long most = 0;
    for (int r = 0; r < n; r++)
        if (all[r].local_size > most) most = all[r].local_size;
    const char *omp = getenv("OMP_NUM_THREADS");
    long long threads = omp ? atoll(omp) : 0;
    if (most > t->cores) {
        say(d, CHK_FAIL, "binding", "start at most one rank per core (fewer ranks, or more nodes)",
            "%lld ranks on one node but %d cores: ranks would share cores and every timing would suffer", most,
            t->cores);
    } else if (threads > 0 && threads * most > t->pus) {
        say(d, CHK_FAIL, "binding", "unset OMP_NUM_THREADS (tfbench sizes threads from each rank's cores) or lower it",
            "OMP_NUM_THREADS=%lld x %lld ranks per node = %lld threads on %d hardware threads", threads, most,
            threads * most, t->pus);
    } else {
        say(d, CHK_OK, "binding", NULL, "%lld rank%s per node on %d cores: each rank gets its own cores (--bind "
            "auto)", most, most > 1 ? "s" : "", t->cores);
    }
}

static void check_driver(doctor *d, const tfb_gpu_probe *g, const tfb_topo *t) {
    if (!g->driver_found) {
        if (t->n_gpus > 0)
            say(d, CHK_FAIL, "driver", "install the NVIDIA driver (nvidia-smi must work) and reboot if the module is new",
                "%d NVIDIA GPU%s on the PCI bus but no driver library (libcuda.so.1)", t->n_gpus, t->n_gpus > 1 ? "s" : "");
        else
            say(d, CHK_NA, "driver", NULL, "no NVIDIA driver (libcuda.so.1 not found) and no NVIDIA GPU: the GPU "
                "checks below do not apply; tfbench runs on the CPU backend");
        return;
    }
    say(d, CHK_OK, "driver", NULL, "%s, CUDA %d.%d", g->driver_lib, g->driver_version / 1000,
        g->driver_version % 1000 / 10);
    int tk = TFB_CUDA_TOOLKIT_VERSION;
    if (!tk) {
        say(d, CHK_NA, "driver vs CUDA", NULL, "this tfbench was built without the CUDA toolkit");
    } else if (g->driver_version / 1000 < tk / 1000) {
        say(d, CHK_FAIL, "driver vs CUDA", "install a driver for CUDA >= the toolkit's major version, or rebuild "
            "tfbench with an older toolkit (CUDA_HOME=... make)", "the driver supports CUDA %d.%d but tfbench was "
            "built with CUDA %d.%d: \"CUDA driver version is insufficient\"", g->driver_version / 1000,
            g->driver_version % 1000 / 10, tk / 1000, tk % 1000 / 10);
    } else {
        say(d, CHK_OK, "driver vs CUDA", NULL, "built with CUDA %d.%d%s", tk / 1000, tk % 1000 / 10,
            g->driver_version < tk ? " (older minor version: minor-version compatibility)" : "");
    }
}

static void check_devices(doctor *d, const tfb_gpu_probe *g, const tfb_catalog *cat) {
    if (!g->driver_found) { say(d, CHK_NA, "GPUs", NULL, "no driver"); return; }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    const char *fix = "check nvidia-smi, the nvidia kernel module, and CUDA_VISIBLE_DEVICES";
    if (g->init_error) {
        say(d, CHK_FAIL, "GPUs", fix, "cuInit failed (error %d); CUDA_VISIBLE_DEVICES=%s", g->init_error,
            vis ? vis : "(unset)");
        return;
    }
    if (g->n == 0) {
        say(d, CHK_FAIL, "GPUs", fix, "the driver sees no CUDA device; CUDA_VISIBLE_DEVICES=%s", vis ? vis : "(unset)");
        return;
    }
    for (int i = 0; i < g->n; i++) {
        const tfb_gpu_dev *v = &g->dev[i];
        const tfb_gpu_spec *s = cat ? tfb_catalog_find(cat, v->name) : NULL;
        const tfb_gpu_arch *a = cat ? tfb_catalog_arch(cat, v->cc) : NULL;
        say(d, CHK_OK, i == 0 ? "GPUs" : "", NULL, "%d: %s, %s CC %d.%d, %d SMs, %.1f GiB, %s; catalog: %s", i,
            v->name, a ? a->arch : "unknown architecture", v->cc / 10, v->cc % 10, v->sms,
            (double)v->memory_bytes / 1073741824.0, v->bus_id, s ? s->name : "not listed (peak from SMs x clock)");
    }
}

static void check_per_rank(doctor *d, const tfb_gpu_probe *g, const rank_facts *all, int n) {
    if (!g->driver_found || g->n == 0) { say(d, CHK_NA, "GPU per rank", NULL, "no GPU"); return; }
    for (int r = 0; r < n; r++)
        if (all[r].local_size > all[r].gpus) {
            say(d, CHK_FAIL, "GPU per rank", "start one rank per GPU on each node (mpirun --map-by ppr:G:node)",
                "node %lld runs %lld ranks but has %lld GPU%s: ranks would share a GPU", all[r].node,
                all[r].local_size, all[r].gpus, all[r].gpus == 1 ? "" : "s");
            return;
        }
    say(d, CHK_OK, "GPU per rank", NULL, "every rank gets its own GPU (by node-local rank)");
}

static void check_kernel_image(doctor *d, const tfb_gpu_probe *g) {
    if (!g->driver_found || g->n == 0) { say(d, CHK_NA, "kernel image", NULL, "no GPU"); return; }
    for (int i = 0; i < g->n; i++) {
        const char *has = tfb_catalog_binary_support(g->dev[i].cc);
        if (strncmp(has, "nothing (CPU", 12) == 0) {
            say(d, CHK_NA, "kernel image", NULL, "this tfbench holds no CUDA kernels (CPU backend only): the GPUs "
                "are not used");
            return;
        }
        if (strncmp(has, "nothing", 7) == 0) {
            say(d, CHK_FAIL, "kernel image", "rebuild with CUDA_ARCHS including this compute capability",
                "GPU %d (CC %d.%d): %s", i, g->dev[i].cc / 10, g->dev[i].cc % 10, has);
            return;
        }
    }
    say(d, CHK_OK, "kernel image", NULL, "machine code or PTX for every GPU");
}

static void check_libs(doctor *d, const tfb_gpu_probe *g) {
    static const char *const libs[] = {"cudart", "cublas", "cudnn", "nccl"};
    static const char *const names[] = {"CUDA runtime", "cuBLAS", "cuDNN", "NCCL"};
    int gpus = g->driver_found && g->n > 0;
    for (int i = 0; i < 4; i++) {
        tfb_lib_probe p;
        tfb_lib_probe_run(libs[i], &p);
        if (p.found) say(d, CHK_OK, names[i], NULL, "%s (%s)", p.version, p.soname);
        else if (gpus)
            say(d, CHK_FAIL, names[i], "install it (CUDA toolkit, cuDNN, NCCL) or add its folder to LD_LIBRARY_PATH",
                "not found on the loader's path or in the CUDA toolkit");
        else say(d, CHK_NA, names[i], NULL, "not found (not needed without a GPU)");
    }
}

/* say() and leave the calling check. */
#define RETSAY(...)          \
    do {                     \
        say(__VA_ARGS__);    \
        return;              \
    } while (0)

#define ACS_FIX "a hang or corruption here is the classic PCIe ACS/IOMMU problem: disable ACS in the BIOS or " \
                "boot with iommu=pt, or run with NCCL_P2P_DISABLE=1"

/* Peer access between every GPU pair and a 1 MiB copy each way that really arrives, within the deadline. */
static void check_p2p(doctor *d, const tfb_gpu_probe *g, double timeout) {
    if (!g->driver_found || g->n == 0 || g->init_error) { say(d, CHK_NA, "P2P copies", NULL, "no GPU"); return; }
    if (g->n < 2) { say(d, CHK_NA, "P2P copies", NULL, "one GPU: no pair to copy between"); return; }
    static tfb_p2p_result r;
    tfb_p2p_status worst = tfb_p2p_check(g->n, timeout, &r);
    int access = 0;
    double slowest = 0;
    for (int i = 0; i < r.n_pairs; i++) {
        const tfb_p2p_pair *p = &r.pair[i];
        access += p->access_ab && p->access_ba;
        if (p->seconds > slowest) slowest = p->seconds;
        if (p->status == TFB_P2P_TIMED_OUT)
            RETSAY(d, CHK_FAIL, "P2P copies", ACS_FIX, "GPU %d <-> GPU %d: a 1 MiB copy did not finish within %g s",
                       p->a, p->b, timeout);
        if (p->status == TFB_P2P_WRONG_DATA)
            RETSAY(d, CHK_FAIL, "P2P copies", ACS_FIX, "GPU %d <-> GPU %d: the copied data arrived wrong", p->a, p->b);
        if (p->status == TFB_P2P_CALL_FAILED)
            RETSAY(d, CHK_FAIL, "P2P copies", "see the driver error; nvidia-smi -q shows the GPUs' state",
                       "GPU %d <-> GPU %d: %s", p->a, p->b, p->call);
    }
    if (worst == TFB_P2P_NOT_RUN)
        RETSAY(d, CHK_FAIL, "P2P copies", "check the driver installation", "not run: %s", r.why);
    say(d, CHK_OK, "P2P copies", NULL, "%d pair%s: 1 MiB each way arrived intact (slowest pair %.0f ms); peer access "
        "on %d of them%s", r.n_pairs, r.n_pairs > 1 ? "s" : "", slowest * 1e3, access,
        access < r.n_pairs ? " (the others copy through host memory)" : "");
}

/* Memory other processes hold (more than 10% of a GPU distorts a benchmark and may not leave room). */
static void check_memory(doctor *d, const tfb_nvml *nv) {
    for (int i = 0; i < tfb_nvml_count(nv); i++) {
        const tfb_nvml_gpu *g = tfb_nvml_gpu_info(nv, i);
        double used = (double)(g->mem_total - g->mem_free);
        if (g->mem_total && used > 0.1 * (double)g->mem_total) {
            say(d, CHK_FAIL, "GPU memory", "end the processes nvidia-smi lists on that GPU, or use another GPU",
                "GPU %d (%s): %.1f of %.1f GiB already in use by other processes", i, g->busid, used / 1073741824.0,
                (double)g->mem_total / 1073741824.0);
            return;
        }
    }
    say(d, CHK_OK, "GPU memory", NULL, "every GPU at least 90%% free (GPU 0: %.1f of %.1f GiB free)",
        (double)tfb_nvml_gpu_info(nv, 0)->mem_free / 1073741824.0,
        (double)tfb_nvml_gpu_info(nv, 0)->mem_total / 1073741824.0);
}

static void check_ecc_clocks(doctor *d, tfb_nvml *nv) {
    char why[200];
    int fails_before = d->fails;
    for (int i = 0; i < tfb_nvml_count(nv); i++) {
        const tfb_nvml_gpu *g = tfb_nvml_gpu_info(nv, i);
        if (g->ecc_uncorrected)
            say(d, CHK_FAIL, "ECC", "reset the GPU (nvidia-smi -r) or have it replaced if the errors return",
                "GPU %d (%s): %llu uncorrected ECC errors since the driver loaded", i, g->busid, g->ecc_uncorrected);
        if (tfb_nvml_throttle_text(g->throttle, why, sizeof why)[0])
            say(d, CHK_FAIL, "clocks", "check cooling, power capping (nvidia-smi -q -d PERFORMANCE) and the power "
                "limit", "GPU %d (%s) throttled: %s (SM %d of %d MHz)", i, g->busid, why, g->sm_mhz, g->sm_mhz_max);
    }
    const tfb_nvml_gpu *g = tfb_nvml_gpu_info(nv, 0);
    if (d->fails == fails_before)
        say(d, CHK_OK, "ECC and clocks", NULL, "ECC %s; GPU 0 SM clock %d of %d MHz, power limit %.0f W",
            g->ecc == 1 ? "on" : g->ecc == 0 ? "off" : "unknown", g->sm_mhz, g->sm_mhz_max, g->power_limit_w);
}

/* NVML: the driver's own view (memory in use, ECC, throttling) when the library is there. */
static void check_nvml(doctor *d, const tfb_gpu_probe *g) {
    char err[200];
    tfb_nvml *nv = tfb_nvml_open(err, sizeof err);
    int gpus = g->driver_found && g->n > 0;
    if (!nv || tfb_nvml_count(nv) == 0) {
        say(d, CHK_NA, "NVML", NULL, "%s (%s)", nv ? "no GPU" : err,
            gpus ? "memory, ECC and clock checks need it" : "not needed without a GPU");
        say(d, CHK_NA, "GPU memory", NULL, "%s", gpus ? "needs NVML" : "no GPU");
        say(d, CHK_NA, "ECC and clocks", NULL, "%s", gpus ? "needs NVML" : "no GPU");
        tfb_nvml_close(nv);
        return;
    }
    say(d, CHK_OK, "NVML", NULL, "driver %s, %d GPU%s", tfb_nvml_driver(nv), tfb_nvml_count(nv),
        tfb_nvml_count(nv) > 1 ? "s" : "");
    check_memory(d, nv);
    check_ecc_clocks(d, nv);
    tfb_nvml_close(nv);
}

/* Variables that change what tfbench, MPI, NCCL or CUDA do; CUDA_LAUNCH_BLOCKING=1 falsifies every timing. envp
 * is the environment as the process started, before MPI added its own. */
static void check_environment(doctor *d, char **envp) {
    int listed = 0;
    for (char **e = envp; e && *e; e++) {
        if (!tfb_env_var_recorded(*e)) continue;
        int bad = strcmp(*e, "CUDA_LAUNCH_BLOCKING=1") == 0;
        say(d, bad ? CHK_FAIL : CHK_NA, listed++ ? "" : "environment",
            bad ? "unset CUDA_LAUNCH_BLOCKING: it serialises every kernel launch" : NULL, "%.300s%s", *e,
            bad ? " (every timing would be wrong)" : " (changes behaviour; recorded in results)");
    }
    if (!listed) say(d, CHK_OK, "environment", NULL, "no NCCL_, CUDA_, OMPI_MCA_, UCX_, HWLOC_ or OMP_ variables set");
}

static void gather_facts(tfb_comm *w, const tfb_gpu_probe *g, rank_facts *all) {
    int node = 0, nodes = 1, local = 0, local_size = 1;
    const char *var;
    cpu_set_t set;
    tfb_comm_mpi_node(&node, &nodes, &local, &local_size);
    rank_facts me = {.node = node, .local_size = local_size, .gpus = g->driver_found ? g->n : 0,
                     .launcher_size = launcher_size(&var), .world_size = w->size};
    me.cpus_allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (w->allgather(w, &me, all, sizeof me / 8, TFB_COMM_U64) != TFB_OK) all[0] = me;
}

/* With --precision: every GPU has tensor cores for it (FP32 never needs them). */
static void check_precision(doctor *d, const tfb_gpu_probe *g, const tfb_catalog *cat, int prec) {
    if (prec < 0) return;
    if (!g->driver_found || g->n == 0 || !cat) { say(d, CHK_NA, "tensor cores", NULL, "no GPU"); return; }
    for (int i = 0; i < g->n && prec != TFB_PREC_FP32; i++) {
        const tfb_gpu_arch *a = tfb_catalog_arch(cat, g->dev[i].cc);
        if (!a || !a->tc[prec]) {
            say(d, CHK_FAIL, "tensor cores", "use a precision the GPU has tensor cores for (fp16 on Volta and Turing)",
                "GPU %d (%s, %s) has no %s tensor cores: %s GEMMs run far below the tensor-core rate", i,
                g->dev[i].name, a ? a->arch : "unknown architecture", tfb_prec_name((tfb_prec)prec),
                tfb_prec_name((tfb_prec)prec));
            return;
        }
    }
    say(d, CHK_OK, "tensor cores", NULL, "%s: %s", tfb_prec_name((tfb_prec)prec),
        prec == TFB_PREC_FP32 ? "runs on CUDA cores everywhere" : "every GPU has tensor cores for it");
}

/* A 1 MiB NCCL all-reduce over every GPU from this process, within the deadline, with the sums checked. */
static void check_nccl(doctor *d, const tfb_gpu_probe *g, double timeout) {
    if (!g->driver_found || g->n == 0 || g->init_error) { say(d, CHK_NA, "NCCL all-reduce", NULL, "no GPU"); return; }
    static tfb_nccl_result r;
    tfb_nccl_status st = tfb_nccl_check(g->n, timeout, &r);
    if (st == TFB_NCCL_OK)
        say(d, CHK_OK, "NCCL all-reduce", NULL, "%d GPU%s, 1 MiB: sums right in %.0f ms", r.gpus, r.gpus > 1 ? "s" : "",
            r.seconds * 1e3);
    else if (st == TFB_NCCL_TIMED_OUT)
        say(d, CHK_FAIL, "NCCL all-reduce", ACS_FIX, "%d GPUs: no result within %g s (stuck %s)", r.gpus, timeout, r.stage);
    else if (st == TFB_NCCL_WRONG_SUM)
        say(d, CHK_FAIL, "NCCL all-reduce", ACS_FIX, "%d GPUs: wrong sums: %s", r.gpus, r.why);
    else if (st == TFB_NCCL_FAILED)
        say(d, CHK_FAIL, "NCCL all-reduce", "NCCL_DEBUG=INFO shows NCCL's own account", "%s", r.why);
    else
        say(d, CHK_FAIL, "NCCL all-reduce", "install NCCL and the CUDA runtime, or add their folder to LD_LIBRARY_PATH",
            "not run: %s", r.why);
}

typedef struct {
    int prec;                /* --precision, -1: not given */
    double timeout;          /* --timeout: seconds for the P2P copies */
} doctor_opts;

static void run_checks(doctor *d, const tfb_gpu_probe *g, const rank_facts *all, int n, char **envp,
                       const doctor_opts *o) {
    static tfb_topo t;
    tfb_catalog cat;
    char err[512];
    int topo_ok, have_cat = tfb_catalog_load(&cat, NULL, err, sizeof err) == TFB_OK;
    printf("tfbench doctor: %d rank%s\n", n, n > 1 ? "s" : "");
    check_world(d, all, n);
    check_hwloc(d, &t, &topo_ok);
    if (topo_ok) check_binding(d, &t, all, n);
    if (!have_cat) say(d, CHK_FAIL, "GPU catalog", "reinstall tfbench's data folder or set TFB_DATA_DIR", "%s", err);
    check_driver(d, g, &t);
    check_devices(d, g, have_cat ? &cat : NULL);
    check_per_rank(d, g, all, n);
    check_kernel_image(d, g);
    check_precision(d, g, have_cat ? &cat : NULL, o->prec);
    check_libs(d, g);
    check_nvml(d, g);
    check_p2p(d, g, o->timeout);
    check_nccl(d, g, o->timeout);
    check_environment(d, envp);
    printf("%d checks, %d failed\n", d->total, d->fails);
    if (topo_ok) tfb_topo_free(&t);
    if (have_cat) tfb_catalog_free(&cat);
}

extern char **environ;

/* The environment as the process started (MPI_Init adds its own variables); NULL-terminated copies. */
static char **environment_copy(void) {
    int n = 0;
    while (environ[n]) n++;
    char **copy = calloc((size_t)n + 1, sizeof *copy);
    for (int i = 0; copy && i < n; i++) copy[i] = strdup(environ[i]);
    return copy;
}

static void environment_free(char **copy) {
    for (int i = 0; copy && copy[i]; i++) free(copy[i]);
    free(copy);
}

/* --precision P and --timeout S into o; -1 for a bad option (message printed). */
static int parse_args(int argc, char **argv, doctor_opts *o) {
    *o = (doctor_opts){.prec = -1, .timeout = 20};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: [mpirun -np N] tfbench doctor [--precision fp32|tf32|fp16|bf16|fp8] [--timeout S]\n"
                   "  checks the launcher, MPI, hwloc, binding, driver, GPUs, CUDA libraries, P2P copies between GPUs and\n"
                   "  an NCCL all-reduce (each given --timeout seconds, default 20) and environment; with --precision, whether every GPU\n"
                   "  has tensor cores for it; exit 1 when a check fails\n");
            exit(0);
        }
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        char *end = NULL;
        if (strcmp(argv[i], "--precision") == 0 && (o->prec = tfb_prec_parse(v)) >= 0) { i++; continue; }
        if (strcmp(argv[i], "--timeout") == 0 && (o->timeout = strtod(v, &end)) >= 0.1 && o->timeout <= 3600 &&
            end != v && *end == '\0') {
            i++;
            continue;
        }
        fprintf(stderr, "tfbench doctor: %.200s: %s (see tfbench doctor --help)\n", argv[i],
                strcmp(argv[i], "--precision") == 0 ? "needs fp32, tf32, fp16, bf16 or fp8"
                : strcmp(argv[i], "--timeout") == 0 ? "needs seconds, 0.1 to 3600" : "unknown option");
        return -1;
    }
    return 0;
}

int tfb_doctor_main(int argc, char **argv) {
    doctor_opts o;
    if (parse_args(argc, argv, &o) < 0) return 2;
    tfb_comm *w = NULL;
    int zero = 0;
    char **none = NULL, **env0 = environment_copy();
    if (tfb_comm_mpi_world(&zero, &none, &w) != TFB_OK) { environment_free(env0); return 1; }
    static tfb_gpu_probe g;
    tfb_gpu_probe_run(&g);
    rank_facts *all = calloc((size_t)w->size, sizeof *all);
    doctor d = {0};
    if (!all) { environment_free(env0); tfb_comm_mpi_finalize(); return 1; }
    gather_facts(w, &g, all);
    if (w->rank == 0) run_checks(&d, &g, all, w->size, env0, &o);
    int fails = d.fails;
    if (w->bcast(w, &fails, 1, TFB_COMM_I32, 0) != TFB_OK) fails = 1;
    free(all);
    environment_free(env0);
    tfb_comm_mpi_finalize();
    return fails ? 1 : 0;
}
