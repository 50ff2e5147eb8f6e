/* topo_main.c — `tfbench topo [--topology FILE] [--save FILE] [--bind MODE]`: the GPU matrix in nvidia-smi's form,
 * the GPUs and their links, and the CPU side, of this machine or of a saved hwloc topology; --save writes the
 * loaded topology as hwloc XML so a user can send theirs. Under mpirun it also binds every rank as a training run
 * would and prints where each runs (host, node, node-local rank, device, cores, NUMA nodes) and which rank pairs
 * share a node (LOC) or cross the network (NET). Bad input: one line, exit status 2. No GPU needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comm.h"
#include "topo_main.h"
#include "../topology/bind.h"
#include "../topology/topo.h"

enum { HOST = 48, CPUS = 96, NUMA = 128 };

/* One rank's placement, packed for an all-gather of 8-byte words. */
typedef struct {
    char host[HOST], cpus[CPUS], numa[NUMA];
    int node, local, gpu, pad;
} placement;

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* Rank 0 of the launch (before MPI is initialised: from the launcher's environment). */
static int launch_rank0(void) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMIX_RANK");
    return !r || strcmp(r, "0") == 0;
}

static void print_placement(const placement *all, int n, int nodes, const char *mode) {
    printf("\nranks (%d on %d node%s, --bind %s):\n  %-5s %-20s %-5s %-6s %-7s %-22s %s\n", n, nodes,
           nodes > 1 ? "s" : "", mode, "rank", "host", "node", "local", "device", "cpus (bound)", "numa");
    for (int r = 0; r < n; r++) {
        char dev[16] = "cpu";
        if (all[r].gpu >= 0) snprintf(dev, sizeof dev, "GPU%d", all[r].gpu);
        printf("  %-5d %-20.20s %-5d %-6d %-7s %-22s %s\n", r, all[r].host, all[r].node, all[r].local, dev,
               all[r].cpus, all[r].numa);
    }
    printf("\nrank pairs (LOC: same node, NET: different nodes):\n%-6s", "");
    for (int j = 0; j < n; j++) printf("R%-5d", j);
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("R%-5d", i);
        for (int j = 0; j < n; j++) printf("%-6s", i == j ? "X" : all[i].node == all[j].node ? "LOC" : "NET");
        printf("\n");
    }
}

/* Every rank binds as --bind asks and reports; rank 0 prints. */
static int placement_report(const tfb_topo *t, const char *bind) {
    tfb_comm *w = NULL;
    int argc = 0, node = 0, nodes = 1, local = 0, local_size = 1;
    char **argv = NULL;
    if (tfb_comm_mpi_world(&argc, &argv, &w) != TFB_OK) return 1;
    tfb_comm_mpi_node(&node, &nodes, &local, &local_size);
    tfb_bind_mode mode = TFB_BIND_CORE;
    tfb_bind_plan plan;
    placement me = {.node = node, .local = local, .gpu = -1};
    placement *all = calloc((size_t)w->size, sizeof *all);
    int ok = all && tfb_bind_mode_parse(bind, t->n_gpus > 0, &mode) == TFB_OK &&
             tfb_bind_plan_make(t, mode, local, local_size, &plan) == TFB_OK;
    if (ok) {
        tfb_bind_apply(t, &plan);
        me.gpu = plan.gpu;
        snprintf(me.numa, sizeof me.numa, "%s", plan.numalist);
        tfb_bind_read(t, me.cpus, sizeof me.cpus);
        gethostname(me.host, sizeof me.host - 1);
        ok = w->allgather(w, &me, all, sizeof me / 8, TFB_COMM_U64) == TFB_OK;
    }
    if (ok && w->rank == 0) print_placement(all, w->size, nodes, tfb_bind_mode_name(plan.mode));
    free(all);
    tfb_comm_mpi_finalize();
    return ok ? 0 : 1;
}

static int usage(const char *why) {
    fprintf(stderr, "tfbench topo: %s (usage: tfbench topo [--topology FILE.xml] [--save FILE.xml] [--bind MODE])\n",
            why);
    return 2;
}

int tfb_topo_main(int argc, char **argv) {
    const char *xml = NULL, *save = NULL, *bind = "auto";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--topology") == 0 && i + 1 < argc) xml = argv[++i];
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) save = argv[++i];
        else if (strcmp(argv[i], "--bind") == 0 && i + 1 < argc) bind = argv[++i];
        else if (strcmp(argv[i], "--help") == 0) { printf("usage: [mpirun -np N] tfbench topo [--topology FILE.xml] [--save FILE.xml] [--bind MODE]\n"); return 0; }
        else {
            char why[300];
            snprintf(why, sizeof why, "%.200s: unknown option or missing value", argv[i]);
            return usage(why);
        }
    }
    static tfb_topo t;
    char err[700] = "";
    tfb_bind_mode mode;
    if (tfb_bind_mode_parse(bind, 0, &mode) != TFB_OK) return usage("--bind: expected auto, gpu, core, numa or none");
    int mpi = launched_by_mpi(), rank0 = launch_rank0();
    if (tfb_topo_load(xml, NULL, &t, err, sizeof err) != TFB_OK) {
        if (rank0) fprintf(stderr, "tfbench topo: %s\n", err[0] ? err : "cannot load the topology");
        return 2;
    }
    if (rank0) {
        tfb_topo_print_matrix(stdout, &t);
        tfb_topo_print_links(stdout, &t);
        tfb_topo_print_cpu(stdout, &t);
        fflush(stdout);
    }
    int code = mpi ? placement_report(&t, bind) : 0;
    if (save && rank0 && tfb_topo_save(&t, save) != TFB_OK) {
        fprintf(stderr, "tfbench topo: --save: cannot write %s\n", save);
        code = 2;
    } else if (save && rank0) {
        printf("saved: %s\n", save);
    }
    tfb_topo_free(&t);
    return code;
}
