/* fuzz_results.c — libFuzzer target for the results-file reader of `tfbench compare`: any bytes are either a
 * usable results file or rejected with a reason, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../results/compare.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), err[512] = "";
    memcpy(text, data, size);
    text[size] = '\0';
    if (!tfb_compare_check_text(text, err, sizeof err) && err[0] == '\0') abort();
    free(text);
    return 0;
}
