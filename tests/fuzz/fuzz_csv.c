/* fuzz_csv.c — libFuzzer target for the CSV data files tfbench reads (the GPU catalog and the architecture table):
 * the input, split at its first form feed, is written as data/gpus.csv and data/gpu-archs.csv; loading gives a
 * catalog whose lookups work or an error naming file and line, never a crash. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../bench/catalog.h"

static void write_part(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, size, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64], gpus[96], archs[96];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/tfbench-fuzz-csv-%ld", (long)getpid());
        mkdir(dir, 0700);
        snprintf(gpus, sizeof gpus, "%s/gpus.csv", dir);
        snprintf(archs, sizeof archs, "%s/gpu-archs.csv", dir);
    }
    const uint8_t *ff = memchr(data, '\f', size);
    size_t first = ff ? (size_t)(ff - data) : size;
    write_part(gpus, data, first);
    write_part(archs, ff ? ff + 1 : data, ff ? size - first - 1 : 0);
    tfb_catalog c;
    char err[600], how[200];
    if (tfb_catalog_load(&c, dir, err, sizeof err) == TFB_OK) {
        for (int i = 0; i < c.n_gpus; i++) {
            tfb_catalog_find(&c, c.gpus[i].name);
            tfb_catalog_arch(&c, c.gpus[i].cc);
            for (int p = 0; p < TFB_N_PREC; p++)
                tfb_catalog_peak_from_sms(&c, c.gpus[i].cc, 100, 1500, (tfb_prec)p, how, sizeof how);
        }
        tfb_catalog_free(&c);
    }
    return 0;
}
