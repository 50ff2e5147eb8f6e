/* job_backend.c — see job_backend.h. */
#include <stdio.h>
#include "job_backend.h"

tfb_status tfb_job_backend_open(const tfb_backend_spec *spec, const char *who, tfb_comm **world, tfb_backend **be) {
    char why[320] = "";
    tfb_comm *w = *world;
    int ok = tfb_backend_open(spec, be, why, sizeof why) == TFB_OK, all_ok = ok;
    TFB_CHECK(w->allreduce(w, &all_ok, 1, TFB_COMM_I32, TFB_MIN));
    if (!ok) fprintf(stderr, "%s: --device %s (rank %d): %s\n", who, spec->name, w->rank, why);
    if (!all_ok) {
        if (ok) (*be)->destroy(*be);
        *be = NULL;
        return TFB_ERR_ARG;
    }
    if (why[0] && w->rank == 0) fprintf(stderr, "%s: --device %s: %s\n", who, spec->name, why);
    if (w->size == 1 || !(*be)->comm_wrap) return TFB_OK;
    tfb_comm *dev = NULL; /* from here on every communicator moves backend memory too (NCCL for the CUDA backend) */
    TFB_CHECK((*be)->comm_wrap((*be)->ctx, w, &dev));
    *world = dev;
    return TFB_OK;
}
