/* fuzz_options.c — libFuzzer target for the command-line parser: the input, split at NUL bytes, is argv[1..].
 * Any input must end in TFB_OK or TFB_ERR_ARG with a message, never a crash (ASan/UBSan watch the rest). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../bench/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1), *argv[64] = {"tfbench"};
    int argc = 1;
    memcpy(buf, data, size);
    buf[size] = '\0';
    for (size_t i = 0; i <= size && argc < 63; i++) {
        argv[argc++] = buf + i;
        i += strlen(buf + i);
    }
    tfb_options o;
    char err[512];
    tfb_status st = tfb_options_parse(argc, argv, &o, err, sizeof err);
    if (st != TFB_OK && st != TFB_ERR_ARG) abort();
    if (st == TFB_ERR_ARG && err[0] == '\0') abort();
    free(buf);
    return 0;
}
