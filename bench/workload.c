/* workload.c — what every workload shares: parameter initialisation on the host and its upload (see workload.h). */
#include <stdlib.h>
#include "workload.h"

tfb_status tfb_workload_refresh_lowp(const tfb_workload *wl, tfb_backend *be) {
    if (!wl->lowp_pool) return TFB_OK;
    return be->cast(be->ctx, wl->lowp_pool, wl->gemm_type, wl->param_pool, TFB_F32, wl->numel);
}

tfb_status tfb_workload_init_params(tfb_workload *wl, tfb_backend *be, tfb_param_init_fn init, const void *ctx) {
    float *host = malloc(wl->numel * sizeof(float));
    TFB_CHECK_ALLOC(host);
    for (int i = 0; i < wl->n_params; i++) init(host + wl->params[i].offset, &wl->params[i], i, ctx);
    tfb_status st = be->copy_h2d(be->ctx, wl->param_pool, host, wl->numel * sizeof(float));
    free(host);
    return st;
}
