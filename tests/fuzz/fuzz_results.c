/* fuzz_results.c — libFuzzer target for the results-file readers: `tfbench compare`'s check (any bytes are a usable
 * results file or rejected with a reason) and `tfbench report` over the bytes that are a usable results file (every table
 * built, printed to /dev/null; exit status 0 or 2), never a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../results/compare.h"
#include "../../results/report_machines.h"

static void report_over(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/tfbench-fuzz-results-%ld.json", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, size, f);
    fclose(f);
    char *argv[] = {"report", "--no-published", "--format", "text", path, NULL};
    for (int fmt = 0; fmt < 2; fmt++) {
        argv[3] = fmt ? "csv" : "text";
        int rc = tfb_report_main(5, argv);
        if (rc != 0 && rc != 2) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) quiet = freopen("/dev/null", "w", stdout) != NULL;
    char *text = malloc(size + 1), err[512] = "";
    memcpy(text, data, size);
    text[size] = '\0';
    int usable = tfb_compare_check_text(text, err, sizeof err);
    if (!usable && err[0] == '\0') abort();
    free(text);
    if (usable) report_over(data, size); /* the rest is refused by the same reader */
    return 0;
}
