/* optim.c — see optim.h. */
#include <stdlib.h>
#include "optim.h"

/* The weight-decay runs of wl: the parameters with decay, adjacent ones merged, as [start, end) element offsets in
 * runs (room for n_params runs). The table lists parameters in pool order (the layouts carve them so). Returns
 * their number, -1 when the table is not in pool order. */
static int decay_runs(const tfb_workload *wl, uint64_t *runs) {
    int n = 0;
    for (int i = 0; i < wl->n_params; i++) {
        const tfb_param_info *p = &wl->params[i];
        if (i > 0 && p->offset < wl->params[i - 1].offset + wl->params[i - 1].numel) return -1;
        if (!p->decay || p->numel == 0) continue;
        if (n > 0 && runs[2 * n - 1] == p->offset) { runs[2 * n - 1] += p->numel; continue; }
        runs[2 * n] = p->offset;
        runs[2 * n + 1] = p->offset + p->numel;
        n++;
    }
    return n;
}

/* The optimizer's pool planned (nothing allocated): moments, and the decay runs, left in *runs (caller frees). */
static tfb_status optim_plan(tfb_optim *o, const tfb_workload *wl, uint64_t **runs) {
    *runs = malloc((size_t)(wl->n_params ? wl->n_params : 1) * 2 * sizeof **runs);
    TFB_CHECK_ALLOC(*runs);
    o->n_runs = decay_runs(wl, *runs);
    if (o->n_runs < 0) return TFB_ERR_STATE;
    tfb_mempool_add(&o->pool, (void **)&o->m, wl->numel * sizeof(float));
    if (wl->optimizer == TFB_OPT_ADAMW) tfb_mempool_add(&o->pool, (void **)&o->v, wl->numel * sizeof(float));
    if (o->n_runs) tfb_mempool_add(&o->pool, (void **)&o->runs, (size_t)o->n_runs * 2 * sizeof **runs);
    return o->pool.failed ? TFB_ERR_NOMEM : TFB_OK;
}

tfb_status tfb_optim_init(tfb_optim *o, tfb_backend *be, const tfb_workload *wl, float lr, float weight_decay) {
    *o = (tfb_optim){.be = be, .wl = wl, .momentum = 0.9f};
    o->hp = (tfb_adamw_hparams){.lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = weight_decay};
    uint64_t *runs = NULL;
    tfb_status st = optim_plan(o, wl, &runs);
    if (st == TFB_OK) st = tfb_mempool_commit(&o->pool, be, 0);
    if (st == TFB_OK && o->n_runs) st = be->copy_h2d(be->ctx, o->runs, runs, (size_t)o->n_runs * 2 * sizeof *runs);
    free(runs);
    return st;
}

size_t tfb_optim_plan_bytes(const tfb_workload *wl) {
    tfb_optim o = {0};
    uint64_t *runs = NULL;
    size_t bytes = optim_plan(&o, wl, &runs) == TFB_OK ? o.pool.bytes : 0;
    free(runs);
    free(o.pool.entries);
    return bytes;
}

/* One launch for the whole pool: weight decay only inside the runs of parameters that take it; in 16-bit runs the
 * same pass writes the GEMMs' 16-bit weight copy. */
tfb_status tfb_optim_step(tfb_optim *o, float grad_scale) {
    const tfb_workload *wl = o->wl;
    tfb_adamw_hparams hp = o->hp;
    hp.step = ++o->hp.step;
    hp.grad_scale = grad_scale;
    if (wl->optimizer == TFB_OPT_ADAMW)
        return o->be->adamw_pool(o->be->ctx, wl->param_pool, wl->grad_pool, o->m, o->v, wl->numel, o->runs,
                                 o->n_runs, &hp, wl->lowp_pool, wl->gemm_type);
    tfb_sgd_hparams s = {.lr = hp.lr, .momentum = o->momentum, .weight_decay = hp.weight_decay,
                         .grad_scale = hp.grad_scale};
    return o->be->sgd_pool(o->be->ctx, wl->param_pool, wl->grad_pool, o->m, wl->numel, o->runs, o->n_runs, &s,
                           wl->lowp_pool, wl->gemm_type);
}

void tfb_optim_free(tfb_optim *o) { tfb_mempool_release(&o->pool, o->be); }

void tfb_loss_scaler_init(tfb_loss_scaler *s, int enabled, double scale, int window) {
    *s = (tfb_loss_scaler){.enabled = enabled, .scale = enabled ? scale : 1.0, .window = window};
}

int tfb_loss_scaler_update(tfb_loss_scaler *s, int all_finite) {
    if (!s->enabled) return all_finite;
    if (!all_finite) {
        s->skipped++;
        s->backoffs++;
        s->scale = s->scale / 2 < 1.0 ? 1.0 : s->scale / 2;
        s->clean_steps = 0;
        return 0;
    }
    if (++s->clean_steps >= s->window) { s->scale *= 2; s->clean_steps = 0; }
    return 1;
}
