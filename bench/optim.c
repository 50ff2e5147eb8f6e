/* optim.c — see optim.h. */
#include "optim.h"

tfb_status tfb_adamw_init(tfb_adamw *o, tfb_backend *be, const tfb_workload *wl, float lr, float weight_decay) {
    *o = (tfb_adamw){.be = be, .wl = wl};
    o->hp = (tfb_adamw_hparams){.lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = weight_decay};
    tfb_mempool_add(&o->pool, (void **)&o->m, wl->numel * sizeof(float));
    tfb_mempool_add(&o->pool, (void **)&o->v, wl->numel * sizeof(float));
    return tfb_mempool_commit(&o->pool, be, 0);
}

tfb_status tfb_adamw_step(tfb_adamw *o, float grad_scale) {
    const tfb_workload *wl = o->wl;
    tfb_adamw_hparams hp = o->hp;
    hp.step = ++o->hp.step;
    hp.grad_scale = grad_scale;
    for (int i = 0; i < wl->n_params; i++) {
        const tfb_param_info *p = &wl->params[i];
        hp.weight_decay = p->decay ? o->hp.weight_decay : 0.0f;
        TFB_CHECK(o->be->adamw(o->be->ctx, wl->param_pool + p->offset, wl->grad_pool + p->offset,
                               o->m + p->offset, o->v + p->offset, p->numel, &hp));
    }
    return wl->refresh_lowp(wl->self);
}

void tfb_adamw_free(tfb_adamw *o) { tfb_mempool_release(&o->pool, o->be); }

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
