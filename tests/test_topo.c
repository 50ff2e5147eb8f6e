/* test_topo.c — topology discovery and the binding plan on saved and synthetic topologies (never on the machine
 * running the test); run from the repository root:
 * - power8-4xP100-nvlink.xml: 4 GPUs in CUDA order; (0,1) and (2,3) NV2, the other pairs SYS; GPUs 0-1 on NUMA
 *   node 0 and 2-3 on node 1; under the NVLink, GPUs 0 and 1 sit on two host bridges of one node (NODE);
 * - 2socket-k40m-pcie.xml: the one GPU with a CUDA device (K40m) found, its NUMA node and cpuset, no NVLink, the
 *   two NVIDIA boards without a CUDA device counted apart;
 * - a synthetic pack:2 numa:2 core:4 pu:2: 4 ranks bound by core get disjoint cores, one NUMA node each;
 *   by GPU on the POWER8: each rank's cores local to its GPU, the two ranks of one package disjoint;
 * - a missing and a corrupt file are TFB_ERR_ARG with a message;
 * - the GPU energy meter over the stub NVML (300 W): the energy of a window is 300 W times its length within 5%,
 *   the highest one-second power 300 W, throttled seconds counted when the stub reports a power cap, and a GPU
 *   NVML does not list gives a reason, not a meter.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "../topology/bind.h"
#include "../topology/topo.h"
#include "../bench/clock.h"
#include "../bench/power.h"

#define DIR "tests/fixtures/topology/"

static void test_power8(void) {
    static tfb_topo t;
    char err[600] = "";
    tfb_status st = tfb_topo_load(DIR "power8-4xP100-nvlink.xml", NULL, &t, err, sizeof err);
    EXPECT("topo_power8_loads_4_gpus", st == TFB_OK && t.n_gpus == 4 && !t.is_this_machine, "%d %s", t.n_gpus, err);
    if (st != TFB_OK) return;
    int ok = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int linked = i != j && i / 2 == j / 2;
            ok &= linked ? t.pair[i][j].kind == TFB_LINK_NV && t.pair[i][j].nvlinks == 2
                 : i == j ? t.pair[i][j].kind == TFB_LINK_X : t.pair[i][j].kind == TFB_LINK_SYS;
        }
    EXPECT("topo_power8_nvlink_pairs_01_23_others_sys", ok, "matrix");
    EXPECT("topo_power8_numa_and_pcie_path", t.gpus[0].numa == 0 && t.gpus[1].numa == 0 && t.gpus[2].numa == 1 &&
           t.gpus[3].numa == 1 && t.pair[0][1].pcie == TFB_LINK_NODE && t.gpus[2].cuda_index == 2 &&
           strcmp(t.gpus[0].cpulist, "0-1,8-9,16-17,24-25") == 0, "numa %d %d %d %d cpus %s", t.gpus[0].numa,
           t.gpus[1].numa, t.gpus[2].numa, t.gpus[3].numa, t.gpus[0].cpulist);
    tfb_bind_plan p[4];
    for (int r = 0; r < 4; r++) tfb_bind_plan_make(&t, TFB_BIND_GPU, r, 4, &p[r]);
    EXPECT("bind_gpu_plan_local_cores_disjoint_within_package",
           p[0].gpu == 0 && p[3].gpu == 3 && strcmp(p[0].numalist, "0") == 0 && strcmp(p[2].numalist, "1") == 0 &&
           strcmp(p[0].cpulist, p[1].cpulist) != 0 && p[0].cores == 2 && p[1].cores == 2,
           "%s | %s | %s", p[0].cpulist, p[1].cpulist, p[2].cpulist);
    tfb_topo_free(&t);
}

static void test_k40m(void) {
    static tfb_topo t;
    char err[600] = "";
    tfb_status st = tfb_topo_load(DIR "2socket-k40m-pcie.xml", NULL, &t, err, sizeof err);
    EXPECT("topo_k40m_found_with_numa_and_cpuset", st == TFB_OK && t.n_gpus == 1 && strstr(t.gpus[0].name, "K40m") &&
           t.gpus[0].numa == 1 && strcmp(t.gpus[0].cpulist, "8-15,24-31") == 0 && t.other_nvidia == 2,
           "%d gpus, %s numa %d cpus %s", t.n_gpus, t.n_gpus ? t.gpus[0].name : "-", t.n_gpus ? t.gpus[0].numa : -9,
           t.n_gpus ? t.gpus[0].cpulist : "-");
    EXPECT("topo_k40m_two_sockets_no_nvlink", st == TFB_OK && t.packages == 2 && t.n_numa == 2 && t.cores == 16 &&
           t.pus == 32 && t.pair[0][0].kind == TFB_LINK_X, "%d %d %d %d", t.packages, t.n_numa, t.cores, t.pus);
    if (st == TFB_OK) tfb_topo_free(&t);
}

static void test_synthetic_binding(void) {
    static tfb_topo t;
    char err[600] = "";
    tfb_status st = tfb_topo_load(NULL, "pack:2 numa:2 core:4 pu:2", &t, err, sizeof err);
    EXPECT("topo_synthetic_loads", st == TFB_OK && t.cores == 16 && t.n_numa == 4 && t.n_gpus == 0, "%s", err);
    if (st != TFB_OK) return;
    tfb_bind_plan p[4];
    int ok = 1;
    for (int r = 0; r < 4; r++) {
        ok &= tfb_bind_plan_make(&t, TFB_BIND_CORE, r, 4, &p[r]) == TFB_OK && p[r].cores == 4;
        char want[16];
        snprintf(want, sizeof want, "%d", r);
        ok &= strcmp(p[r].numalist, want) == 0;
        for (int q = 0; q < r; q++) ok &= strcmp(p[q].cpulist, p[r].cpulist) != 0;
    }
    EXPECT("bind_core_plan_4_ranks_disjoint_one_numa_node_each", ok, "%s | %s | %s | %s (nodes %s %s)", p[0].cpulist,
           p[1].cpulist, p[2].cpulist, p[3].cpulist, p[0].numalist, p[3].numalist);
    tfb_bind_plan g;
    tfb_bind_plan_make(&t, TFB_BIND_GPU, 1, 4, &g);
    tfb_bind_plan_make(&t, TFB_BIND_NUMA, 5, 8, &p[0]);
    EXPECT("bind_gpu_without_gpus_falls_back_to_core_numa_round_robin", g.mode == TFB_BIND_CORE &&
           strcmp(g.cpulist, p[1].cpulist) == 0 && strcmp(p[0].numalist, "1") == 0, "%s %s", g.cpulist, p[0].numalist);
    tfb_topo_free(&t);
}

static void test_bad_files(void) {
    static tfb_topo t;
    char err[600] = "";
    tfb_status a = tfb_topo_load(DIR "no-such-file.xml", NULL, &t, err, sizeof err);
    int named = strstr(err, "no-such-file.xml") != NULL;
    char path[] = "/tmp/tfbench-corrupt-topology-XXXXXX", err2[600] = "";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) { fputs("<?xml version=\"1.0\"?>\n<topology><object type=\"Machine\"", f); fclose(f); }
    tfb_status b = tfb_topo_load(path, NULL, &t, err2, sizeof err2);
    EXPECT("topo_missing_and_corrupt_files_are_bad_input", a == TFB_ERR_ARG && named && b == TFB_ERR_ARG &&
           strstr(err2, "corrupt") != NULL, "%d '%s' %d '%s'", a, err, b, err2);
    remove(path);
}

/* One window of about 1.3 s over the stub's GPU at 0000:28:00.0. */
static double last_clock;
static void gpu_meter_window(double *joules, double *seconds, double *peak, int *samples, long *throttled) {
    char why[200] = "";
    tfb_power_meter *m = tfb_power_open_gpu(0, 0x28, 0, why, sizeof why);
    *joules = *seconds = *peak = 0;
    *samples = 0;
    *throttled = 0;
    if (!m) { printf("  no meter: %s\n", why); return; }
    tfb_power_start(m);
    tfb_power_window_begin(m);
    double t0 = tfb_clock_s();
    while (tfb_clock_s() - t0 < 1.3) {
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL); /* waiting for the stub's counter to advance, not a measured benchmark */
    }
    tfb_power_window_end(m);
    *seconds = tfb_clock_s() - t0;
    tfb_power_stop(m, joules, peak, samples, throttled);
    last_clock = tfb_power_mean_clock_mhz(m);
    tfb_power_close(m);
}

static void test_gpu_meter(const char *stub) {
    double j, s, peak;
    int samples;
    long thr;
    char why[200] = "";
    setenv("TFB_TEST_LIBNVML", stub, 1);
    setenv("FAKE_NVML_THROTTLE", "0", 1);
    gpu_meter_window(&j, &s, &peak, &samples, &thr);
    EXPECT("gpu_meter_energy_is_300w_times_window", fabs(j / s - 300.0) < 15.0, "%.1f J over %.3f s", j, s);
    EXPECT("gpu_meter_peak_300w_no_throttle", samples >= 1 && fabs(peak - 300.0) < 15.0 && thr == 0,
           "peak %.1f W over %d samples, %ld throttled", peak, samples, thr);
    EXPECT("gpu_meter_mean_sm_clock", last_clock == 1755.0, "%.1f MHz (the stub reports 1755)", last_clock);
    setenv("FAKE_NVML_THROTTLE", "0x4", 1); /* software power cap */
    gpu_meter_window(&j, &s, &peak, &samples, &thr);
    EXPECT("gpu_meter_counts_throttled_seconds", samples >= 1 && thr == samples, "%ld of %d", thr, samples);
    tfb_power_meter *m = tfb_power_open_gpu(0, 0x99, 0, why, sizeof why);
    EXPECT("gpu_meter_unknown_gpu_gives_reason", !m && strstr(why, "does not list"), "%s", why);
    tfb_power_close(m);
    unsetenv("TFB_TEST_LIBNVML");
}

int main(int argc, char **argv) {
    char stub[4096];
    (void)argc;
    snprintf(stub, sizeof stub, "%s", argv[0]);
    char *slash = strrchr(stub, '/');
    snprintf(slash ? slash + 1 : stub, sizeof stub - (size_t)(slash ? slash + 1 - stub : 0), "libfakenvml.so");
    test_gpu_meter(stub);
    test_power8();
    test_k40m();
    test_synthetic_binding();
    test_bad_files();
    return test_failures ? 1 : 0;
}
