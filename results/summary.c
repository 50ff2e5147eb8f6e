/* summary.c — the figures derived from a run record (see record.h), computed once for tables and JSON.
 * Throughput is total samples over total window time (never a mean of per-step rates).
 */
#include <math.h>
#include <stdlib.h>
#include "record.h"
#include "../bench/stats.h"

const char *const tfb_phase_names[TFB_N_PHASES] = {"forward", "backward", "pipeline_wait", "comm_exposed", "optimizer",
                                                      "other"};

tfb_run_summary tfb_record_summarize(const tfb_run_record *r) {
    tfb_run_summary s = {0};
    size_t n = (size_t)r->trials * (size_t)r->steps;
    double *tput = malloc((size_t)r->trials * sizeof *tput);
    for (int t = 0; t < r->trials; t++) {
        s.window_s += r->window_s[t];
        if (tput) tput[t] = (double)r->global_batch * r->steps / r->window_s[t];
    }
    s.samples = (double)r->global_batch * (double)n;
    s.throughput = s.samples / s.window_s;
    tfb_summary st = tfb_summarize(r->step_s, n);
    s.step_median = st.median;
    s.step_p5 = st.p5;
    s.step_p95 = st.p95;
    s.step_min = st.min;
    s.step_max = st.max;
    for (int p = 0; p < TFB_N_PHASES; p++) s.phase_median[p] = tfb_percentile(r->phase_s[p], n, 50);
    s.trial_tput_mean = tput ? tfb_summarize(tput, (size_t)r->trials).mean : NAN;
    s.trial_tput_ci95 = tput ? tfb_ci95_halfwidth(tput, (size_t)r->trials) : NAN;
    s.achieved_tflops = s.throughput * r->flops_per_sample / 1e12;
    s.mfu = r->peak_tflops > 0 ? s.achieved_tflops / r->peak_tflops : NAN;
    s.hfu = r->peak_tflops > 0 ? s.throughput * (r->flops_per_sample + r->recompute_flops_per_sample) / 1e12 /
                                     r->peak_tflops
                               : NAN;
    free(tput);
    return s;
}
