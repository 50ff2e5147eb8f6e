/* fuzz_topo.c — libFuzzer target for tfbench's handling of saved topologies: any bytes written as a topology
 * file load into a topology whose GPUs and pairs can be printed, or give an error, never a crash. (hwloc's own
 * XML parser is exercised with it.) */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include "../../topology/bind.h"
#include "../../topology/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/tfbench-fuzz-topo-%ld.xml", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    static tfb_topo t;
    char err[600];
    if (tfb_topo_load(path, NULL, &t, err, sizeof err) == TFB_OK) {
        FILE *null = fopen("/dev/null", "w");
        tfb_bind_plan p;
        if (null) {
            tfb_topo_print_matrix(null, &t);
            tfb_topo_print_links(null, &t);
            tfb_topo_print_cpu(null, &t);
            fclose(null);
        }
        tfb_bind_plan_make(&t, TFB_BIND_GPU, 1, 3, &p);
        tfb_topo_free(&t);
    }
    return 0;
}
