/* results_json.c — see results_json.h and SCHEMA.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "results_json.h"
#include "env.h"
#include "../topology/topo.h"

static void dir_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, len, ".");
    else if (slash == path) snprintf(dir, len, "/");
    else snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

tfb_status tfb_results_check_path(const char *flag, const char *path, char *err, size_t len) {
    char dir[4096];
    struct stat st;
    dir_of(path, dir, sizeof dir);
    if (path[0] == '\0' || path[strlen(path) - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        snprintf(err, len, "%s: '%s' is a directory, not a file name", flag, path);
        return TFB_ERR_ARG;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, len, "%s: directory '%s' does not exist", flag, dir);
        return TFB_ERR_ARG;
    }
    if (access(dir, W_OK) != 0) {
        snprintf(err, len, "%s: directory '%s' is not writable (%s)", flag, dir, strerror(errno));
        return TFB_ERR_ARG;
    }
    return TFB_OK;
}

tfb_status tfb_results_default_path(const char *model, const char *precision, int ranks, char *path, size_t len) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if ((mkdir("results", 0777) != 0 && errno != EEXIST) || (mkdir("results/runs", 0777) != 0 && errno != EEXIST))
        return TFB_ERR_IO;
    snprintf(path, len, "results/runs/tfbench-%s-%s-%dr-%s-%ld.json", model, precision, ranks, stamp,
             (long)getpid());
    return TFB_OK;
}

static cJSON *num_or_null(double x) { return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull(); }

/* "a\nb\n" as ["a", "b"] */
static cJSON *lines_json(const char *text) {
    cJSON *a = cJSON_CreateArray();
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *line = strndup(p, n);
        if (line) cJSON_AddItemToArray(a, cJSON_CreateString(line));
        free(line);
        p += n + (end != NULL);
    }
    return a;
}

static cJSON *config_json(const tfb_run_record *r) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model", r->model);
    cJSON_AddStringToObject(c, "precision", r->precision);
    cJSON_AddStringToObject(c, "math", "GEMM and convolution inputs in the stated precision (tf32: FP32 storage, inputs rounded "
                                       "to TF32 by tensor cores), FP32 accumulation; FP32 master weights, "
                                       "softmax, LayerNorm, loss and AdamW; FP16 with dynamic loss scaling");
    cJSON_AddStringToObject(c, "parallel", r->parallel);
    cJSON_AddStringToObject(c, "strategy", r->strategy);
    cJSON_AddStringToObject(c, "scaling", r->scaling);
    cJSON_AddStringToObject(c, "backend", r->backend);
    if (r->device) cJSON_AddStringToObject(c, "device", r->device);
    if (r->conv_algorithms) cJSON_AddItemToObject(c, "conv_algorithms", lines_json(r->conv_algorithms));
    cJSON_AddNumberToObject(c, "ranks", r->ranks);
    cJSON_AddNumberToObject(c, "data_parallel_size", r->dp);
    cJSON_AddNumberToObject(c, "tensor_parallel_size", r->tp);
    cJSON_AddNumberToObject(c, "pipeline_parallel_size", r->pp);
    cJSON_AddNumberToObject(c, "microbatches", r->microbatches);
    cJSON_AddStringToObject(c, "pipeline_schedule", r->schedule);
    cJSON_AddStringToObject(c, "pipeline_balance", r->balance);
    cJSON_AddNumberToObject(c, "threads_per_rank", r->threads_per_rank);
    if (r->binding) cJSON_AddStringToObject(c, "binding", r->binding);
    cJSON_AddNumberToObject(c, "nodes_in_job", r->nodes);
    cJSON_AddNumberToObject(c, "batch_per_rank", r->local_batch);
    cJSON_AddStringToObject(c, "batch_per_rank_definition", "samples in one micro-batch of one replica");
    cJSON_AddNumberToObject(c, "global_batch", r->global_batch);
    cJSON_AddStringToObject(c, "input", r->shape);
    if (r->image_size) {
        cJSON_AddNumberToObject(c, "image_size", r->image_size);
        cJSON_AddBoolToObject(c, "sync_bn", r->sync_bn);
        if (r->conv_layout) cJSON_AddStringToObject(c, "conv_layout", r->conv_layout);
    } else {
        cJSON_AddNumberToObject(c, "seq_len", r->seq_len);
        cJSON_AddNumberToObject(c, "masked_per_sequence", r->masked);
        if (r->attention) cJSON_AddStringToObject(c, "attention", r->attention);
    }
    cJSON_AddBoolToObject(c, "checkpointing", r->checkpointing);
    cJSON_AddNumberToObject(c, "warmup_steps", r->warmup);
    cJSON_AddNumberToObject(c, "timed_steps_per_trial", r->steps);
    cJSON_AddNumberToObject(c, "trials", r->trials);
    cJSON_AddNumberToObject(c, "dropout", r->dropout);
    cJSON_AddStringToObject(c, "optimizer", r->optimizer);
    cJSON_AddNumberToObject(c, "lr", r->lr);
    cJSON_AddNumberToObject(c, "weight_decay", r->weight_decay);
    cJSON_AddNumberToObject(c, "bucket_mb", r->bucket_mb);
    cJSON_AddNumberToObject(c, "gradient_buckets", r->n_buckets);
    cJSON_AddNumberToObject(c, "seed", (double)r->seed);
    cJSON_AddNumberToObject(c, "parameters", (double)r->params);
    cJSON_AddNumberToObject(c, "memory_planned_bytes_per_rank", (double)r->memory_bytes);
    cJSON_AddNumberToObject(c, "memory_peak_bytes_per_rank", (double)r->memory_peak_bytes);
    if (r->checkpointing) {
        cJSON_AddNumberToObject(c, "memory_planned_without_checkpointing_bytes_per_rank",
                                (double)r->memory_without_checkpointing_bytes);
        cJSON_AddNumberToObject(c, "recompute_s_per_step_median", r->recompute_s_median);
    }
    return c;
}

/* Energy of the timed windows: figures when measured, else the reason. */
static cJSON *energy_json(const tfb_run_record *r, const tfb_run_summary *s) {
    cJSON *e = cJSON_CreateObject();
    if (!(r->energy_j > 0)) {
        cJSON_AddBoolToObject(e, "measured", 0);
        cJSON_AddStringToObject(e, "reason", r->energy_why);
        return e;
    }
    cJSON_AddBoolToObject(e, "measured", 1);
    cJSON_AddStringToObject(e, "source", r->energy_source);
    cJSON_AddNumberToObject(e, "joules", r->energy_j);
    cJSON_AddNumberToObject(e, "mean_w", r->energy_j / s->window_s);
    cJSON_AddItemToObject(e, "peak_w_1s", r->energy_samples > 0 ? cJSON_CreateNumber(r->energy_peak_w) : cJSON_CreateNull());
    cJSON_AddNumberToObject(e, "sampling_intervals", r->energy_samples);
    if (r->energy_clock_mhz > 0) cJSON_AddNumberToObject(e, "sm_clock_mhz_mean", r->energy_clock_mhz);
    cJSON_AddNumberToObject(e, "joules_per_sample", r->energy_j / s->samples);
    cJSON_AddNumberToObject(e, "samples_per_kwh", s->samples * 3.6e6 / r->energy_j);
    cJSON_AddItemToObject(e, "throttle_events", r->throttle_events >= 0 ? cJSON_CreateNumber((double)r->throttle_events)
                                                                       : cJSON_CreateNull());
    cJSON_AddStringToObject(e, "definition", "energy counters read at each timed window's edges (outside the timed "
                            "region) and sampled once a second between them; summed over nodes; mean_w = joules / "
                            "sum of windows; peak_w_1s: each node's highest 1 s interval (intervals under 0.5 s, "
                            "which a window can start with, count towards the energy only), summed");
    return e;
}

static cJSON *summary_json(const tfb_run_record *r, const tfb_run_summary *s) {
    cJSON *o = cJSON_CreateObject(), *st = cJSON_CreateObject(), *ph = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "throughput_samples_per_s", s->throughput);
    cJSON_AddStringToObject(o, "throughput_definition",
                            "timed samples over all ranks / sum of trial windows; a window is the max over ranks "
                            "of the time between barriers, device synchronised");
    cJSON *trials = cJSON_CreateArray();
    for (int t = 0; t < r->trials; t++) {
        cJSON *tr = cJSON_CreateObject();
        cJSON_AddNumberToObject(tr, "window_s", r->window_s[t]);
        cJSON_AddNumberToObject(tr, "throughput_samples_per_s", (double)r->global_batch * r->steps / r->window_s[t]);
        cJSON_AddItemToArray(trials, tr);
    }
    cJSON_AddItemToObject(o, "trials", trials);
    cJSON_AddItemToObject(o, "throughput_trial_mean", num_or_null(s->trial_tput_mean));
    cJSON_AddItemToObject(o, "throughput_ci95_halfwidth_across_trials", num_or_null(s->trial_tput_ci95));
    cJSON_AddNumberToObject(st, "median", s->step_median);
    cJSON_AddNumberToObject(st, "p5", s->step_p5);
    cJSON_AddNumberToObject(st, "p95", s->step_p95);
    cJSON_AddNumberToObject(st, "min", s->step_min);
    cJSON_AddNumberToObject(st, "max", s->step_max);
    cJSON_AddStringToObject(st, "definition", "seconds per step, each step the max over ranks");
    cJSON_AddItemToObject(o, "step_time_s", st);
    for (int p = 0; p < TFB_N_PHASES; p++) cJSON_AddNumberToObject(ph, tfb_phase_names[p], s->phase_median[p]);
    cJSON_AddItemToObject(o, "phase_median_s", ph);
    cJSON_AddNumberToObject(o, "flops_per_sample", r->flops_per_sample);
    cJSON_AddStringToObject(o, "flops_convention", r->flops_convention);
    cJSON_AddNumberToObject(o, "achieved_tflops", s->achieved_tflops);
    cJSON_AddItemToObject(o, "peak_tflops_all_ranks", num_or_null(r->peak_tflops));
    cJSON_AddStringToObject(o, "peak_source", r->peak_source);
    cJSON_AddItemToObject(o, "mfu", num_or_null(s->mfu));
    cJSON_AddNumberToObject(o, "recompute_flops_per_sample", r->recompute_flops_per_sample);
    cJSON_AddItemToObject(o, "hfu", num_or_null(s->hfu));
    cJSON_AddItemToObject(o, "energy", energy_json(r, s));
    cJSON *sh = cJSON_CreateObject();
    cJSON_AddNumberToObject(sh, "compute", r->share_compute);
    cJSON_AddNumberToObject(sh, "exposed_communication", r->share_comm);
    cJSON_AddNumberToObject(sh, "pipeline_bubble", r->share_bubble);
    cJSON_AddStringToObject(sh, "definition", "each rank's median over timed steps of the share of its step time, "
                            "averaged over ranks; communication = tensor-parallel collectives + the data-parallel "
                            "wait after backward; bubble = time blocked in pipeline transfers; compute = the rest: "
                            "forward and backward work, the optimizer and host work the device does not hide");
    cJSON_AddItemToObject(o, "step_shares", sh);
    cJSON_AddNumberToObject(o, "collective_bus_bytes_per_step", r->bus_bytes_per_step);
    cJSON_AddNumberToObject(o, "collective_time_per_step_s", r->coll_time_s);
    cJSON_AddItemToObject(o, "collective_bus_bandwidth_gb_s",
                          num_or_null(r->coll_time_s > 0 ? r->bus_bytes_per_step / r->coll_time_s / 1e9 : NAN));
    cJSON_AddStringToObject(o, "collective_bus_bandwidth_definition",
                            "bus bytes per step and rank (all-reduce 2(n-1)/n, all-gather (n-1)/n of the data, "
                            "nccl-tests convention) / median time waiting on tensor-parallel collectives plus the "
                            "exposed data-parallel wait; an upper bound where collectives overlap compute "
                            "(data-parallel buckets, the tensor-parallel dX all-reduce)");
    return o;
}

static cJSON *per_step_json(const tfb_run_record *r) {
    int n = r->trials * r->steps;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "step_time_s", cJSON_CreateDoubleArray(r->step_s, n));
    for (int p = 0; p < TFB_N_PHASES; p++)
        cJSON_AddItemToObject(o, tfb_phase_names[p], cJSON_CreateDoubleArray(r->phase_s[p], n));
    cJSON_AddItemToObject(o, "loss_all_steps_including_warmup", cJSON_CreateDoubleArray(r->loss, r->warmup + n));
    return o;
}

static cJSON *checks_json(const tfb_run_record *r) {
    cJSON *o = cJSON_CreateObject(), *sums = cJSON_CreateArray();
    for (int i = 0; i < r->ranks; i++) {
        char hex[24];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->param_checksum[i]);
        cJSON_AddItemToArray(sums, cJSON_CreateString(hex));
    }
    cJSON_AddItemToObject(o, "param_checksum_per_rank", sums);
    cJSON_AddBoolToObject(o, "params_identical_across_ranks", r->params_identical);
    cJSON_AddStringToObject(o, "params_identical_definition", "every data-parallel replica holds the same FP32 "
                            "master weights as replica 0 for its stage and tensor shard");
    cJSON_AddItemToObject(o, "rank_median_step_s", cJSON_CreateDoubleArray(r->rank_step_median_s, r->ranks));
    cJSON *per_rank = cJSON_CreateArray();
    int n = r->trials * r->steps;
    for (int i = 0; i < r->ranks; i++)
        cJSON_AddItemToArray(per_rank, cJSON_CreateDoubleArray(r->rank_step_s + (size_t)i * n, n));
    cJSON_AddItemToObject(o, "rank_step_time_s", per_rank);
    cJSON *bind = cJSON_CreateArray();
    for (int i = 0; r->rank_binding && i < r->ranks; i++)
        cJSON_AddItemToArray(bind, cJSON_CreateString(r->rank_binding + (size_t)i * 64));
    cJSON_AddItemToObject(o, "rank_cpu_binding", bind);
    if (r->rank_node) cJSON_AddItemToObject(o, "rank_node", cJSON_CreateIntArray(r->rank_node, r->ranks));
    cJSON_AddNumberToObject(o, "max_rss_bytes_any_rank", r->max_rss_bytes);
    cJSON_AddBoolToObject(o, "dynamic_loss_scaling", r->loss_scaled);
    cJSON_AddNumberToObject(o, "loss_scale_final", r->loss_scale_final);
    cJSON_AddNumberToObject(o, "skipped_steps", r->skipped_steps);
    cJSON_AddNumberToObject(o, "loss_scale_backoffs", r->backoffs);
    return o;
}

static cJSON *pipeline_json(const tfb_run_record *r) {
    cJSON *o = cJSON_CreateObject(), *stages = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "bubble_predicted", r->bubble_predicted);
    cJSON_AddStringToObject(o, "bubble_predicted_definition", "(P - 1) / (M + P - 1)");
    for (int p = 0; p < r->pp && p < TFB_MAX_STAGES; p++) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "stage", p);
        cJSON_AddStringToObject(st, "units", r->stage_desc[p]);
        cJSON_AddNumberToObject(st, "bubble_measured", r->stage_bubble[p]);
        cJSON_AddNumberToObject(st, "peak_microbatches_held", r->stage_peak_slots[p]);
        cJSON_AddNumberToObject(st, "activation_bytes_held", r->stage_act_bytes[p]);
        cJSON_AddItemToArray(stages, st);
    }
    cJSON_AddItemToObject(o, "stages", stages);
    cJSON_AddStringToObject(o, "definition", "bubble_measured: the stage's median share of the step blocked in "
                            "transfers (tensor rank 0 of replica 0); peak_microbatches_held: the allocator's record");
    return o;
}

static cJSON *skipped_json(const tfb_run_record *r) {
    cJSON *c = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "model", r->model);
    cJSON_AddStringToObject(cfg, "precision", r->precision);
    cJSON_AddStringToObject(cfg, "strategy", r->strategy);
    cJSON_AddNumberToObject(cfg, "ranks", r->dp * r->tp * r->pp);
    cJSON_AddNumberToObject(cfg, "data_parallel_size", r->dp);
    cJSON_AddNumberToObject(cfg, "tensor_parallel_size", r->tp);
    cJSON_AddNumberToObject(cfg, "pipeline_parallel_size", r->pp);
    cJSON_AddNumberToObject(cfg, "global_batch", r->global_batch);
    cJSON_AddItemToObject(c, "config", cfg);
    cJSON_AddStringToObject(c, "skipped", r->skip);
    return c;
}

static cJSON *configuration_json(const tfb_run_record *r) {
    if (r->skip) return skipped_json(r);
    tfb_run_summary s = tfb_record_summarize(r);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "config", config_json(r));
    cJSON_AddItemToObject(c, "summary", summary_json(r, &s));
    cJSON_AddItemToObject(c, "pipeline", pipeline_json(r));
    cJSON_AddItemToObject(c, "per_step", per_step_json(r));
    cJSON_AddItemToObject(c, "checks", checks_json(r));
    return c;
}

/* Rank 0's machine: CPU side, GPUs and the GPU matrix (nvidia-smi classes). */
static cJSON *topology_json(const tfb_topo *t) {
    cJSON *o = cJSON_CreateObject(), *gpus = cJSON_CreateArray(), *matrix = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "source", t->source);
    cJSON_AddNumberToObject(o, "packages", t->packages);
    cJSON_AddNumberToObject(o, "numa_nodes", t->n_numa);
    cJSON_AddNumberToObject(o, "cores", t->cores);
    cJSON_AddNumberToObject(o, "hardware_threads", t->pus);
    for (int i = 0; i < t->n_gpus; i++) {
        cJSON *g = cJSON_CreateObject(), *row = cJSON_CreateArray();
        cJSON_AddStringToObject(g, "name", t->gpus[i].name);
        cJSON_AddStringToObject(g, "pci_bus_id", t->gpus[i].busid);
        cJSON_AddNumberToObject(g, "numa_node", t->gpus[i].numa);
        cJSON_AddStringToObject(g, "cpu_affinity", t->gpus[i].cpulist);
        cJSON_AddItemToArray(gpus, g);
        for (int j = 0; j < t->n_gpus; j++) {
            char cell[16];
            const tfb_gpu_pair *p = &t->pair[i][j];
            if (p->kind == TFB_LINK_NV) snprintf(cell, sizeof cell, "NV%d", p->nvlinks);
            else snprintf(cell, sizeof cell, "%s", tfb_link_name(p->kind));
            cJSON_AddItemToArray(row, cJSON_CreateString(cell));
        }
        cJSON_AddItemToArray(matrix, row);
    }
    cJSON_AddItemToObject(o, "gpus", gpus);
    cJSON_AddItemToObject(o, "gpu_matrix", matrix);
    return o;
}

static cJSON *run_json(const tfb_run_record *recs, int n, int complete, const char *mpi_library) {
    const tfb_run_record *r = &recs[0];
    cJSON *root = cJSON_CreateObject(), *argv = cJSON_CreateArray(), *list = cJSON_CreateArray();
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddNumberToObject(root, "schema_version", TFB_SCHEMA_VERSION);
    cJSON_AddStringToObject(root, "tool", "tfbench");
    cJSON_AddStringToObject(root, "started_at", r->started_at);
    cJSON_AddStringToObject(root, "written_at", when);
    cJSON_AddBoolToObject(root, "complete", complete);
    for (int i = 0; i < r->argc; i++) cJSON_AddItemToArray(argv, cJSON_CreateString(r->argv[i]));
    cJSON_AddItemToObject(root, "command_line", argv);
    cJSON_AddItemToObject(root, "environment", tfb_env_capture(mpi_library));
    if (r->topology) cJSON_AddItemToObject(root, "topology", topology_json(r->topology));
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(list, configuration_json(&recs[i]));
    cJSON_AddItemToObject(root, "configurations", list);
    return root;
}

tfb_status tfb_results_write(const char *path, const tfb_run_record *recs, int n, int complete,
                             const char *mpi_library) {
    cJSON *root = run_json(recs, n, complete, mpi_library);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    TFB_CHECK_ALLOC(text);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return TFB_ERR_IO;
    }
    return TFB_OK;
}
