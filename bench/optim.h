/* optim.h — the optimizer the workload asks for on the FP32 master weights, the whole pool in one call (decay only
 * inside the runs of parameters whose table entry says so): AdamW (BERT) or SGD with momentum (ResNet); and
 * the dynamic loss scaler for FP16 (formulas.md: skip the step and halve on inf/NaN, double after a window of clean
 * steps). The moments and the decay runs live in one pool. This file does not decide when gradients are complete
 * (ddp.c does).
 */
#ifndef TFB_OPTIM_H
#define TFB_OPTIM_H
#include "workload.h"
#include "mempool.h"

typedef struct {
    tfb_backend *be;
    const tfb_workload *wl;
    float *m, *v;               /* (numel) Adam moments, or m alone: the SGD momentum buffer */
    uint64_t *runs;             /* (n_runs, 2) [start, end) element offsets of the weight-decay runs */
    int n_runs;
    tfb_mempool pool;
    tfb_adamw_hparams hp;       /* lr, betas, eps, weight decay; step counts applied updates */
    float momentum;             /* SGD */
} tfb_optim;

typedef struct {
    int enabled;                /* FP16 only */
    double scale;
    int window, clean_steps;
    int skipped;                /* steps skipped for inf/NaN */
    int backoffs;               /* times the scale was halved */
} tfb_loss_scaler;

tfb_status tfb_optim_init(tfb_optim *o, tfb_backend *be, const tfb_workload *wl, float lr, float weight_decay);
/* Bytes tfb_optim_init takes for wl (its pool, as planned): what `tfbench estimate` counts. 0 when it cannot be planned. */
size_t tfb_optim_plan_bytes(const tfb_workload *wl);
/* One update; grad_scale multiplies every gradient first (1 / (loss scale * ranks)). */
tfb_status tfb_optim_step(tfb_optim *o, float grad_scale);
void tfb_optim_free(tfb_optim *o);

void tfb_loss_scaler_init(tfb_loss_scaler *s, int enabled, double scale, int window);
/* After the global finiteness check: returns 1 when the step must be applied, 0 when skipped. */
int tfb_loss_scaler_update(tfb_loss_scaler *s, int all_finite);

#endif
