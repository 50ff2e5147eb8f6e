/* bench_batch.c — times BERT's host batch making (prepare_batch: the synthetic samples and the embeddings' id
 * orders), which the driver runs while the device finishes the step before, and load_batch's upload of a batch made
 * ahead, at bert-large's vocabulary and BATCH x sequence 128 (20 masked per 128), on the CPU backend. The model has
 * one layer (the layers do not enter the batch). Each figure is the median of 21 calls after one warm-up call, with
 * p5 and p95 beside it. It does not check values: tests/test_bert_layer does.
 * usage: bench_batch [BATCH]   (default 32)
 */
#include <stdio.h>
#include <stdlib.h>
#include "../bench/bert.h"
#include "../bench/clock.h"
#include "../bench/stats.h"

enum { REPS = 21 };

/* Median, p5 and p95 of REPS timed calls of prepare_batch (load 0) or of load_batch after it (load 1), in µs. */
static int time_calls(tfb_workload *wl, int load, double out[3]) {
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
        int step = r + 1;
        double t0 = tfb_clock_s();
        if (wl->prepare_batch(wl->self, step, 0) != TFB_OK) return -1;
        double t1 = tfb_clock_s();
        if (load && wl->load_batch(wl->self, step, 0, 0) != TFB_OK) return -1;
        double t2 = tfb_clock_s();
        if (r >= 0) t[r] = 1e6 * (load ? t2 - t1 : t1 - t0);
    }
    out[0] = tfb_percentile(t, REPS, 50);
    out[1] = tfb_percentile(t, REPS, 5);
    out[2] = tfb_percentile(t, REPS, 95);
    return 0;
}

int main(int argc, char **argv) {
    int batch = argc > 1 ? atoi(argv[1]) : 32;
    if (batch < 1) { fprintf(stderr, "bench_batch: BATCH must be a positive integer\n"); return 2; }
    bert_config cfg = *bert_config_find("bert-large");
    cfg.layers = 1;
    tfb_workload_config wc = {.local_batch = batch, .global_batch = batch, .seq_len = 128, .masked = 20,
                              .gemm_type = TFB_F32, .seed = 1234, .dp_size = 1, .pp_size = 1, .slots = 1};
    tfb_backend *be;
    tfb_workload *wl = NULL;
    if (tfb_backend_open_cpu(1, &be) != TFB_OK || bert_create(&cfg, &wc, be, &wl) != TFB_OK) {
        fprintf(stderr, "bench_batch: could not create the model\n");
        return 1;
    }
    double make[3], load[3];
    int st = time_calls(wl, 0, make) | time_calls(wl, 1, load);
    if (st == 0) {
        printf("bert-large vocabulary, batch %d x seq 128, CPU backend: median (p5, p95) of %d calls, µs\n", batch, REPS);
        printf("%-40s %8.1f (%.1f, %.1f)\n", "make the batch (prepare_batch, host)", make[0], make[1], make[2]);
        printf("%-40s %8.1f (%.1f, %.1f)\n", "load the batch made ahead (copy+upload)", load[0], load[1], load[2]);
    }
    wl->destroy(wl->self);
    be->destroy(be);
    return st ? 1 : 0;
}
