/* optim.c — see optim.h. */
#include "optim.h"

tfb_status tfb_optim_init(tfb_optim *o, tfb_backend *be, const tfb_workload *wl, float lr, float weight_decay) {
    *o = (tfb_optim){.be = be, .wl = wl, .momentum = 0.9f};
    o->hp = (tfb_adamw_hparams){.lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = weight_decay};
    tfb_mempool_add(&o->pool, (void **)&o->m, wl->numel * sizeof(float));
    if (wl->optimizer == TFB_OPT_ADAMW) tfb_mempool_add(&o->pool, (void **)&o->v, wl->numel * sizeof(float));
    return tfb_mempool_commit(&o->pool, be, 0);
}

static tfb_status optim_tensor(tfb_optim *o, const tfb_param_info *p, const tfb_adamw_hparams *hp) {
    const tfb_workload *wl = o->wl;
    float *w = wl->param_pool + p->offset, *g = wl->grad_pool + p->offset;
    if (wl->optimizer == TFB_OPT_ADAMW) return o->be->adamw(o->be->ctx, w, g, o->m + p->offset, o->v + p->offset,
                                                            p->numel, hp);
    tfb_sgd_hparams s = {.lr = hp->lr, .momentum = o->momentum, .weight_decay = hp->weight_decay,
                         .grad_scale = hp->grad_scale};
    return o->be->sgd(o->be->ctx, w, g, o->m + p->offset, p->numel, &s);
}

tfb_status tfb_optim_step(tfb_optim *o, float grad_scale) {
    const tfb_workload *wl = o->wl;
    tfb_adamw_hparams hp = o->hp;
    hp.step = ++o->hp.step;
    hp.grad_scale = grad_scale;
    for (int i = 0; i < wl->n_params; i++) {
        hp.weight_decay = wl->params[i].decay ? o->hp.weight_decay : 0.0f;
        TFB_CHECK(optim_tensor(o, &wl->params[i], &hp));
    }
    return tfb_workload_refresh_lowp(wl, o->be);
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
