/* report.c — see report.h. */
#include <math.h>
#include <string.h>
#include "report.h"

static void header(FILE *f, const tfb_run_record *r) {
    fprintf(f, "tfbench %s | %s %s | backend %s, %d rank%s x %d thread%s | %s: data %d x tensor %d x pipeline %d "
            "(%s scaling)\n", TFB_VERSION, r->model, r->precision, r->backend, r->ranks, r->ranks > 1 ? "s" : "",
            r->threads_per_rank, r->threads_per_rank > 1 ? "s" : "", r->strategy, r->dp, r->tp, r->pp, r->scaling);
    fprintf(f, "parameters %zu | batch %d global, %d micro-batch%s of %d per replica | %s | warm-up %d, %d trial%s "
            "x %d steps\n", r->params, r->global_batch, r->microbatches, r->microbatches > 1 ? "es" : "",
            r->local_batch, r->shape, r->warmup, r->trials, r->trials > 1 ? "s" : "", r->steps);
}

static void ms_row(FILE *f, const char *name, double v, const char *note) {
    fprintf(f, "| %-26s | %12.2f ms | %-44s |\n", name, v * 1e3, note);
}

static void pct_row(FILE *f, const char *name, double v, const char *note) {
    fprintf(f, "| %-26s | %14.1f%% | %-44s |\n", name, 100 * v, note);
}

static void stages(FILE *f, const tfb_run_record *r) {
    if (r->pp < 2) return;
    fprintf(f, "pipeline: %s schedule, %d micro-batches, stages cut by %s; ideal bubble (P-1)/(M+P-1) = %.1f%%\n",
            r->schedule, r->microbatches, r->balance, 100 * r->bubble_predicted);
    fprintf(f, "| stage | units                          | bubble measured | micro-batches held | activations held |\n");
    fprintf(f, "|-------|--------------------------------|-----------------|--------------------|------------------|\n");
    for (int p = 0; p < r->pp && p < TFB_MAX_STAGES; p++)
        fprintf(f, "| %5d | %-30.30s | %14.1f%% | %18d | %12.1f MiB |\n", p, r->stage_desc[p],
                100 * r->stage_bubble[p], r->stage_peak_slots[p], r->stage_act_bytes[p] / 1048576.0);
    fprintf(f, "bubble measured: the stage's median share of a step spent blocked in pipeline transfers; micro-batches "
               "held: the allocator's record\n");
}

/* One line per configuration on the energy of its timed windows, or why it was not measured. */
static void energy_lines(FILE *f, const tfb_run_record *recs, int n) {
    const tfb_run_record *first = NULL;
    for (int i = 0; i < n && !first; i++)
        if (!recs[i].skip) first = &recs[i];
    if (!first) return;
    if (!(first->energy_j > 0)) { fprintf(f, "energy: not measured (%s)\n", first->energy_why); return; }
    fprintf(f, "energy (%s; timed windows, all nodes):\n", first->energy_source);
    for (int i = 0; i < n; i++) {
        const tfb_run_record *r = &recs[i];
        if (r->skip) continue;
        tfb_run_summary s = tfb_record_summarize(r);
        if (!(r->energy_j > 0)) { fprintf(f, "  %-8s %2d: not measured (%s)\n", r->strategy, r->ranks, r->energy_why); continue; }
        char thr[48] = "throttling not readable";
        if (r->throttle_events >= 0)
            snprintf(thr, sizeof thr, "%ld %s", r->throttle_events,
                     strncmp(r->energy_source, "NVML", 4) == 0 ? "GPU-seconds clock-throttled" : "package throttle events");
        char clk[48] = "";
        if (r->energy_clock_mhz > 0) snprintf(clk, sizeof clk, ", SM clock %.0f MHz mean", r->energy_clock_mhz);
        fprintf(f, "  %-8s %2d: %.1f W mean, %.4g J/sample, %.4g samples/kWh, %s%s\n", r->strategy, r->ranks,
                r->energy_j / s.window_s, r->energy_j / s.samples, s.samples * 3.6e6 / r->energy_j, thr, clk);
    }
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
    static const char *notes[TFB_N_PHASES] = {"median; includes loading the batch", "median; starts bucket all-reduces",
                                               "median; blocked in pipeline transfers", "median; wait for all-reduce after backward",
                                               "median; finiteness check + update",
                                               "median; host work not hidden, closing sync"};
    for (int p = 0; p < TFB_N_PHASES; p++) ms_row(f, tfb_phase_names[p], s.phase_median[p], notes[p]);
    pct_row(f, "share: compute", r->share_compute, "fwd+bwd+optimizer+host; median, rank mean");
    pct_row(f, "share: exposed comm", r->share_comm, "tensor collectives + data-parallel wait");
    pct_row(f, "share: pipeline bubble", r->share_bubble, "blocked in pipeline transfers");
    fprintf(f, "| %-26s | %15.2f | %-44s |\n", "GFLOP per sample", r->flops_per_sample / 1e9, "convention below the table");
    fprintf(f, "| %-26s | %15.3f | %-44s |\n", "achieved TFLOP/s", s.achieved_tflops, "throughput x FLOP per sample");
    fprintf(f, "| %-26s | %15.3f | %-44.44s |\n", "peak TFLOP/s (all ranks)", r->peak_tflops, r->peak_source);
    fprintf(f, "| %-26s | %14.1f%% | %-44s |\n", "MFU", isfinite(s.mfu) ? 100 * s.mfu : NAN, "achieved / peak");
    if (r->checkpointing) {
        fprintf(f, "| %-26s | %14.1f%% | %-44s |\n", "HFU", isfinite(s.hfu) ? 100 * s.hfu : NAN,
                "recomputed forward FLOPs counted too");
        fprintf(f, "| %-26s | %11.1f MiB | %-44s |\n", "checkpointing saves",
                ((double)r->memory_without_checkpointing_bytes - (double)r->memory_bytes) / 1048576.0,
                "planned memory without it minus with it");
        ms_row(f, "recompute time", r->recompute_s_median, "median per step, max over ranks");
    }
    fprintf(f, "| %-26s | %11.1f MiB | %-44s |\n", "memory per rank", r->memory_bytes / 1048576.0, "planned pools, largest rank");
    fprintf(f, "| %-26s | %15.4f | %-44s |\n", "final loss", r->loss[r->warmup + r->trials * r->steps - 1], "training loss, mean over replicas");
    fprintf(f, "| %-26s | %15s | %-44s |\n", "params identical", r->params_identical ? "yes" : "NO", "FP32 masters agree across replicas");
    if (r->loss_scaled)
        fprintf(f, "| %-26s | %15d | final loss scale %-27g |\n", "skipped FP16 steps", r->skipped_steps, r->loss_scale_final);
    stages(f, r);
    energy_lines(f, r, 1);
    fprintf(f, "FLOPs: %s\n", r->flops_convention);
}

/* ---- the comparison table ---- */

typedef struct {
    double tput, per_dev, speedup, eff, median, p95, mfu, mem_mib, busbw, noise;
    int fell;          /* throughput below the same strategy's at the previous scale */
    int super;         /* efficiency above 100% by more than the noise */
} cmp_row;

/* Relative noise of a configuration's throughput: half the p5-p95 spread of its step times over the median. */
static double noise_of(const tfb_run_summary *s) { return (s->step_p95 - s->step_p5) / (2 * s->step_median); }

static cmp_row row_of(const tfb_run_record *r, const tfb_run_record *base, const tfb_run_record *prev) {
    tfb_run_summary s = tfb_record_summarize(r), b = tfb_record_summarize(base);
    cmp_row c = {.tput = s.throughput, .per_dev = s.throughput / r->ranks, .median = s.step_median,
                 .p95 = s.step_p95, .mfu = s.mfu, .mem_mib = r->memory_bytes / 1048576.0, .noise = noise_of(&s)};
    c.speedup = s.throughput / b.throughput;
    c.eff = c.speedup / r->ranks;
    c.busbw = r->coll_time_s > 0 && r->bus_bytes_per_step > 0 ? r->bus_bytes_per_step / r->coll_time_s / 1e9 : NAN;
    double noise = sqrt(c.noise * c.noise + noise_of(&b) * noise_of(&b));
    c.super = r->ranks > 1 && c.eff - 1 > noise;
    c.fell = prev && s.throughput < tfb_record_summarize(prev).throughput;
    return c;
}

static const tfb_run_record *find(const tfb_run_record *recs, int n, const char *name, int ranks) {
    for (int i = 0; i < n; i++)
        if (!recs[i].skip && recs[i].ranks == ranks && strcmp(recs[i].strategy, name) == 0) return &recs[i];
    if (ranks == 1)
        for (int i = 0; i < n; i++)
            if (!recs[i].skip && recs[i].ranks == 1) return &recs[i];
    return NULL;
}

static void summary_lines(FILE *f, const tfb_run_record *recs, int n) {
    for (int ranks = 2; ranks <= 1 << 20; ranks *= 2) {
        const tfb_run_record *best = NULL, *next = NULL;
        int any = 0;
        for (int i = 0; i < n; i++) {
            if (recs[i].skip || recs[i].ranks != ranks) { any |= recs[i].dp * recs[i].tp * recs[i].pp == ranks; continue; }
            any = 1;
            double t = tfb_record_summarize(&recs[i]).throughput;
            if (!best || t > tfb_record_summarize(best).throughput) { next = best; best = &recs[i]; }
            else if (!next || t > tfb_record_summarize(next).throughput) next = &recs[i];
        }
        if (!any) break;
        if (!best) continue;
        fprintf(f, "%d ranks: %s is fastest", ranks, best->strategy);
        if (next) fprintf(f, ", %.2fx %s (next)", tfb_record_summarize(best).throughput /
                          tfb_record_summarize(next).throughput, next->strategy);
        fputc('\n', f);
    }
}

void tfb_report_compare(FILE *f, const tfb_run_record *recs, int n) {
    const tfb_run_record *base = find(recs, n, "single", 1);
    if (!base) return;
    fprintf(f, "tfbench %s | %s %s | backend %s | %s scaling: global batch %s | %s\n", TFB_VERSION, base->model,
            base->precision, base->backend, base->scaling,
            strcmp(base->scaling, "strong") == 0 ? "fixed" : "--batch x ranks", base->shape);
    fprintf(f, "| strategy | ranks | d x t x p     | samples/s | /device | speedup | eff.   | step med ms | p95 ms  "
               "| compute | comm  | bubble | MFU   | mem/dev MiB | coll GB/s |\n");
    fprintf(f, "|----------|-------|---------------|-----------|---------|---------|--------|-------------|---------"
               "|---------|-------|--------|-------|-------------|-----------|\n");
    for (int i = 0; i < n; i++) {
        const tfb_run_record *r = &recs[i];
        if (r->skip) {
            fprintf(f, "| %-8s | %5d | %3d x%3d x%3d | skipped: %s\n", r->strategy, r->dp * r->tp * r->pp, r->dp, r->tp,
                    r->pp, r->skip);
            continue;
        }
        cmp_row c = row_of(r, base, r->ranks > 1 ? find(recs, n, r->strategy, r->ranks / 2) : NULL);
        char bw[16] = "-";
        if (isfinite(c.busbw)) snprintf(bw, sizeof bw, "%.2f", c.busbw);
        fprintf(f, "| %-8s | %5d | %3d x%3d x%3d | %9.2f | %7.2f | %6.2fx | %5.1f%%%s| %11.2f | %7.2f | %6.1f%% | "
                "%4.1f%% | %5.1f%% | %4.1f%% | %11.1f | %9s |%s\n", r->strategy, r->ranks, r->dp, r->tp, r->pp,
                c.tput, c.per_dev, c.speedup, 100 * c.eff, c.super ? "!" : " ", c.median * 1e3, c.p95 * 1e3,
                100 * r->share_compute, 100 * r->share_comm, 100 * r->share_bubble, 100 * c.mfu, c.mem_mib, bw,
                c.fell ? " throughput fell as ranks were added" : "");
    }
    summary_lines(f, recs, n);
    energy_lines(f, recs, n);
    fprintf(f, "speedup: over the 1-rank run; eff.: speedup / ranks, '!' above 100%% by more than the noise (half the "
               "p5-p95 step spread, both runs); compute/comm/bubble: median shares of a rank's step, mean of ranks; "
               "coll GB/s: bus bytes / time waiting on collectives (upper bound where they overlap compute); "
               "MFU: %s\n", base->peak_source);
}

void tfb_report_csv(FILE *f, const tfb_run_record *recs, int n) {
    const tfb_run_record *base = find(recs, n, "single", 1);
    if (!base) base = &recs[0];
    fprintf(f, "model,precision,strategy,ranks,dp,tp,pp,microbatches,global_batch,samples_per_s,samples_per_s_per_device,"
               "speedup,efficiency,step_median_s,step_p95_s,share_compute,share_comm,share_bubble,mfu,memory_bytes,"
               "coll_bus_gb_s,skipped\n");
    for (int i = 0; i < n; i++) {
        const tfb_run_record *r = &recs[i];
        if (r->skip || base->skip) {
            fprintf(f, "%s,%s,%s,%d,%d,%d,%d,,%d,,,,,,,,,,,,,\"%s\"\n", r->model, r->precision, r->strategy,
                    r->dp * r->tp * r->pp, r->dp, r->tp, r->pp, r->global_batch, r->skip ? r->skip : "");
            continue;
        }
        cmp_row c = row_of(r, base, NULL);
        fprintf(f, "%s,%s,%s,%d,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4f,%.4f,%.4f,%.6g,%zu,%.6g,\n",
                r->model, r->precision, r->strategy, r->ranks, r->dp, r->tp, r->pp, r->microbatches,
                r->global_batch, c.tput, c.per_dev, c.speedup, c.eff, c.median, c.p95, r->share_compute,
                r->share_comm, r->share_bubble, c.mfu, r->memory_bytes, c.busbw);
    }
}
