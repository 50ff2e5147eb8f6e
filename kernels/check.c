/* check.c — where failed checks are reported (see check.h). */
#include <stdio.h>
#include "check.h"

int tfb_log_rank = 0;
const char *tfb_log_device = "host";

void tfb_check_report(const char *call, const char *file, int line, const char *detail) {
    fprintf(stderr, "tfbench[rank %d, %s]: %s failed at %s:%d: %s\n", tfb_log_rank, tfb_log_device, call, file,
            line, detail);
}
