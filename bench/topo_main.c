/* topo_main.c — `tfbench topo [--topology FILE] [--save FILE]`: the GPU matrix in nvidia-smi's form, the GPUs and
 * their links, and the CPU side, of this machine or of a saved hwloc topology; --save writes the loaded topology as
 * hwloc XML so a user can send theirs. Bad input: one line, exit status 2. No MPI, no GPU needed. */
#include <stdio.h>
#include <string.h>
#include "topo_main.h"
#include "../topology/topo.h"

static int usage(const char *why) {
    fprintf(stderr, "tfbench topo: %s (usage: tfbench topo [--topology FILE.xml] [--save FILE.xml])\n", why);
    return 2;
}

int tfb_topo_main(int argc, char **argv) {
    const char *xml = NULL, *save = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--topology") == 0 && i + 1 < argc) xml = argv[++i];
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) save = argv[++i];
        else if (strcmp(argv[i], "--help") == 0) { printf("usage: tfbench topo [--topology FILE.xml] [--save FILE.xml]\n"); return 0; }
        else {
            char why[300];
            snprintf(why, sizeof why, "%.200s: unknown option or missing value", argv[i]);
            return usage(why);
        }
    }
    static tfb_topo t;
    char err[700] = "";
    if (tfb_topo_load(xml, NULL, &t, err, sizeof err) != TFB_OK) {
        fprintf(stderr, "tfbench topo: %s\n", err[0] ? err : "cannot load the topology");
        return 2;
    }
    tfb_topo_print_matrix(stdout, &t);
    tfb_topo_print_links(stdout, &t);
    tfb_topo_print_cpu(stdout, &t);
    int code = 0;
    if (save && tfb_topo_save(&t, save) != TFB_OK) {
        fprintf(stderr, "tfbench topo: --save: cannot write %s\n", save);
        code = 2;
    } else if (save) {
        printf("saved: %s\n", save);
    }
    tfb_topo_free(&t);
    return code;
}
