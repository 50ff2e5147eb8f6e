/* report.c — see report.h. */
#include <math.h>
#include "report.h"

static void header(FILE *f, const tfb_run_record *r) {
    fprintf(f, "tfbench %s | %s %s | backend %s, %d rank%s x %d thread%s | parallel %s (%s scaling)\n", TFB_VERSION,
            r->model, r->precision, r->backend, r->ranks, r->ranks > 1 ? "s" : "", r->threads_per_rank,
            r->threads_per_rank > 1 ? "s" : "", r->parallel, r->scaling);
    fprintf(f, "parameters %zu | batch %d per rank, %d global | %s | warm-up %d, %d trial%s x %d steps\n",
            r->params, r->local_batch, r->global_batch, r->shape, r->warmup, r->trials,
            r->trials > 1 ? "s" : "", r->steps);
}

static void ms_row(FILE *f, const char *name, double v, const char *note) {
    fprintf(f, "| %-26s | %12.2f ms | %-44s |\n", name, v * 1e3, note);
}

void tfb_report_print(FILE *f, const tfb_run_record *r) {
    tfb_run_summary s = tfb_record_summarize(r);
    header(f, r);
    fprintf(f, "| %-26s | %15s | %-44s |\n", "metric", "value", "definition");
    fprintf(f, "|%s|%s|%s|\n", "----------------------------", "-----------------", "----------------------------------------------");
    fprintf(f, "| %-26s | %15.2f | %-44s |\n", "throughput (samples/s)", s.throughput, "timed samples / window time, max over ranks");
    if (r->trials > 1)
        fprintf(f, "| %-26s | %15.2f | %-44s |\n", "  +- 95% CI across trials", s.trial_tput_ci95, "Student t over trial throughputs");
    ms_row(f, "step time median", s.step_median, "each step: max over ranks");
    ms_row(f, "step time p5 / p95", s.step_p5, "p5 (p95 on the next line)");
    ms_row(f, "", s.step_p95, "p95");
    static const char *notes[TFB_N_PHASES] = {"median; includes making the batch", "median; starts bucket all-reduces",
                                               "median; wait for all-reduce after backward", "median; finiteness check + update"};
    for (int p = 0; p < TFB_N_PHASES; p++) ms_row(f, tfb_phase_names[p], s.phase_median[p], notes[p]);
    fprintf(f, "| %-26s | %15.2f | %-44s |\n", "GFLOP per sample", r->flops_per_sample / 1e9, "convention below the table");
    fprintf(f, "| %-26s | %15.3f | %-44s |\n", "achieved TFLOP/s", s.achieved_tflops, "throughput x FLOP per sample");
    fprintf(f, "| %-26s | %15.3f | %-44.44s |\n", "peak TFLOP/s (all ranks)", r->peak_tflops, r->peak_source);
    fprintf(f, "| %-26s | %14.1f%% | %-44s |\n", "MFU", isfinite(s.mfu) ? 100 * s.mfu : NAN, "achieved / peak");
    fprintf(f, "| %-26s | %15.4f | %-44s |\n", "final loss", r->loss[r->warmup + r->trials * r->steps - 1], "training loss, mean over ranks");
    fprintf(f, "| %-26s | %15s | %-44s |\n", "params identical", r->params_identical ? "yes" : "NO", "checksum of FP32 master weights, all ranks");
    if (r->loss_scaled)
        fprintf(f, "| %-26s | %15d | final loss scale %-27g |\n", "skipped FP16 steps", r->skipped_steps, r->loss_scale_final);
    fprintf(f, "FLOPs: %s\n", r->flops_convention);
}
