/* strategy.c — see strategy.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "strategy.h"
#include "bert.h"
#include "resnet.h"

/* 4 micro-batches on a pipeline unless the replica's batch does not divide; 1 otherwise. */
static int auto_microbatches(int pp, int replica_batch) {
    if (pp == 1) return 1;
    for (int m = 4; m > 1; m /= 2)
        if (replica_batch % m == 0) return m;
    return 1;
}

static tfb_strategy make(const tfb_options *o, const char *name, int dp, int tp, int pp) {
    int ranks = dp * tp * pp;
    tfb_strategy s = {.name = name, .dp = dp, .tp = tp, .pp = pp,
                      .schedule = strcmp(o->schedule, "gpipe") == 0 ? TFB_SCHED_GPIPE : TFB_SCHED_1F1B,
                      .global_batch = o->strong ? o->batch : o->batch * ranks};
    s.microbatches = o->microbatches ? o->microbatches : auto_microbatches(pp, s.global_batch / dp);
    tfb_strategy_fits(o, &s);
    return s;
}

static int fits_bert(const tfb_options *o, tfb_strategy *s) {
    const bert_config *c = bert_config_find(o->model);
    if (c->heads % s->tp || c->ffn % s->tp) {
        s->skip_dim = "tensor";
        snprintf(s->skip, sizeof s->skip, "%s has %d heads, which do not split over %d tensor-parallel ranks", c->name,
                 c->heads, s->tp);
        return 0;
    }
    if (s->pp > bert_units(c)) {
        s->skip_dim = "pipeline";
        snprintf(s->skip, sizeof s->skip, "%d pipeline stages, but %s has %d units (embeddings, %d layers, heads)",
                 s->pp, c->name, bert_units(c), c->layers);
        return 0;
    }
    return 1;
}

static int fits_resnet(const tfb_options *o, tfb_strategy *s) {
    const resnet_config *c = resnet_config_find(o->model);
    int ok = c->stem_width % s->tp == 0;
    for (int i = 0; i < c->stages; i++) ok &= c->widths[i] % s->tp == 0;
    if (!ok) {
        s->skip_dim = "tensor";
        snprintf(s->skip, sizeof s->skip, "the channel counts of %s do not split over %d tensor-parallel ranks",
                 c->name, s->tp);
        return 0;
    }
    if (s->pp > resnet_units(c)) {
        s->skip_dim = "pipeline";
        snprintf(s->skip, sizeof s->skip, "%d pipeline stages, but %s has %d units (stem, %d blocks, head)", s->pp,
                 c->name, resnet_units(c), resnet_units(c) - 2);
        return 0;
    }
    return 1;
}

int tfb_strategy_fits(const tfb_options *o, tfb_strategy *s) {
    s->skip[0] = '\0';
    if (!(o->resnet ? fits_resnet(o, s) : fits_bert(o, s))) return 0;
    int per = s->dp * s->microbatches;
    if (s->global_batch % per != 0) {
        s->skip_dim = "batch";
        snprintf(s->skip, sizeof s->skip, "--batch: the global batch of %d does not split into %d replica%s x %d "
                 "micro-batch%s", s->global_batch, s->dp, s->dp > 1 ? "s" : "", s->microbatches,
                 s->microbatches > 1 ? "es" : "");
        return 0;
    }
    return 1;
}

static int compare_list(const tfb_options *o, int world, tfb_strategy *out, int max) {
    int n = 0;
    out[n++] = make(o, "single", 1, 1, 1);
    for (int r = 2; r <= world && n + 3 <= max; r *= 2) {
        out[n++] = make(o, "data", r, 1, 1);
        out[n++] = make(o, "tensor", 1, r, 1);
        out[n++] = make(o, "pipeline", 1, 1, r);
    }
    return n;
}

int tfb_strategy_list(const tfb_options *o, int world, tfb_strategy *out, int max) {
    if (o->compare) return compare_list(o, world, out, max);
    if (strcmp(o->parallel, "hybrid") == 0) {
        int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1;
        out[0] = make(o, "hybrid", dp, tp, pp);
    } else if (strcmp(o->parallel, "tensor") == 0) {
        out[0] = make(o, "tensor", 1, world, 1);
    } else if (strcmp(o->parallel, "pipeline") == 0) {
        out[0] = make(o, "pipeline", 1, 1, world);
    } else {
        out[0] = make(o, "data", world, 1, 1);
    }
    return 1;
}

tfb_workload_config tfb_strategy_workload_config(const tfb_options *o, const tfb_strategy *s, int dp_rank,
                                                 int pp_rank, int slots) {
    int replica = s->global_batch / s->dp;
    return (tfb_workload_config){.local_batch = replica / s->microbatches, .global_batch = s->global_batch,
                                 .sample0 = replica * dp_rank, .seq_len = o->seq_len, .masked = o->masked,
                                 .gemm_type = o->gemm_type, .tf32 = o->tf32, .dropout = (float)o->dropout, .seed = (uint64_t)o->seed,
                                 .fixed_batch = o->fixed_batch, .image_size = o->image_size,
                                 .sync_bn = o->sync_bn, .layout = o->act_layout, .checkpointing = o->checkpointing,
                                 .fused_attention = o->fused_attention, .dp_size = s->dp, .pp_size = s->pp, .pp_rank = pp_rank,
                                 .slots = slots, .microbatches = s->microbatches};
}

int tfb_strategy_slots(const tfb_strategy *s, int pp_rank) {
    tfb_op *ops = calloc((size_t)8 * s->microbatches + 8, sizeof *ops);
    if (!ops) return -1;
    int n = tfb_schedule_build(s->schedule, s->pp, pp_rank, s->microbatches, ops);
    int slots = tfb_schedule_in_flight(ops, n);
    free(ops);
    return slots;
}
