/* fuzz_csv.c — libFuzzer target for the CSV files tfbench reads: the input, split at its first form feed, is
 * written as data/gpus.csv and data/gpu-archs.csv (the GPU catalog and architecture table); the whole input is also
 * read as a `tfbench report --prices` file and as data/published.csv. Each load gives usable rows or an error naming
 * file and line, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../bench/catalog.h"
#include "../../results/report_data.h"

static void write_part(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, size, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64], gpus[96], archs[96], prices[96], published[96];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/tfbench-fuzz-csv-%ld", (long)getpid());
        mkdir(dir, 0700);
        snprintf(gpus, sizeof gpus, "%s/gpus.csv", dir);
        snprintf(archs, sizeof archs, "%s/gpu-archs.csv", dir);
        snprintf(prices, sizeof prices, "%s/prices.csv", dir);
        snprintf(published, sizeof published, "%s/published.csv", dir);
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
    write_part(prices, data, size);
    write_part(published, data, size);
    tfb_prices p;
    if (tfb_prices_load(&p, prices, err, sizeof err) == TFB_OK) {
        for (int i = 0; i < p.n; i++)
            if (tfb_prices_find(&p, p.rows[i].label) != &p.rows[i] || !(p.rows[i].price > 0)) abort();
        tfb_prices_free(&p);
    }
    tfb_published_set s;
    if (tfb_published_load(&s, dir, err, sizeof err) == TFB_OK) {
        for (int i = 0; i < s.n; i++)
            if (!(s.rows[i].samples_per_s > 0) || s.rows[i].gpus < 1) abort();
        tfb_published_free(&s);
    }
    return 0;
}
