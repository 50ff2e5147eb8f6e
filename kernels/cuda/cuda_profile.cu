/* cuda_profile.cu — the kernel profile (TFB_KERNEL_PROFILE=N): CUPTI's activity records of every kernel, copy and
 * memset this process ran on the GPU between the driver's trace(1) and trace(0) (the timed windows), summed by
 * name, and the N largest printed on stderr with their share of the GPU's busy time. It answers where a step's
 * GPU time goes where no profiler is at hand. Diagnostic only: CUPTI's records cost a little per kernel, so a
 * profiled run's throughput is not a benchmark figure (the run says so when it starts). Without CUPTI at build
 * time (HAVE_CUPTI 0) the profile says it is unavailable. Not here: hardware counters (ncu's job).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "cuda_internal.h"
#if HAVE_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_record;
typedef CUpti_ActivityMemcpy6 copy_record;
#else
typedef CUpti_ActivityKernel9 kernel_record;
typedef CUpti_ActivityMemcpy5 copy_record;
#endif
typedef CUpti_ActivityMemset4 set_record;
#endif

typedef struct {
    char name[88];
    double ns;
    long calls;
} profile_row;

static struct {
    profile_row *rows;
    int n, cap;
    int top;          /* rows to print; 0: the profile is off */
    int tracing;
} P;


#if HAVE_CUPTI
static void profile_add(const char *name, double ns) {
    for (int i = 0; i < P.n; i++)
        if (strcmp(P.rows[i].name, name) == 0) { P.rows[i].ns += ns; P.rows[i].calls++; return; }
    if (P.n == P.cap) {
        int cap = P.cap ? 2 * P.cap : 128;
        profile_row *r = (profile_row *)realloc(P.rows, (size_t)cap * sizeof *r);
        if (!r) return;
        P.rows = r;
        P.cap = cap;
    }
    profile_row *r = &P.rows[P.n++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ns = ns;
    r->calls = 1;
}

/* "void k_bn_apply<unsigned int>(float*, ...)" -> "k_bn_apply<unsigned int>"; library kernels keep their names. */
static void kernel_name(const char *mangled, char *out, size_t cap) {
    int st = 0;
    char *d = abi::__cxa_demangle(mangled, NULL, NULL, &st);
    const char *s = st == 0 && d ? d : mangled;
    if (strncmp(s, "void ", 5) == 0) s += 5;
    size_t len = strcspn(s, "(");
    snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), s);
    free(d);
}

static const char *copy_name(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[copy host to device]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[copy device to host]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[copy device to device]";
    default: return "[copy, other]";
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = (size_t)8 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    CUpti_Activity *r = NULL;
    char name[256];
    (void)ctx; (void)stream; (void)size;
    while (buffer && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const kernel_record *k = (const kernel_record *)r;
            kernel_name(k->name ? k->name : "?", name, sizeof name);
            profile_add(name, (double)(k->end - k->start));
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const copy_record *m = (const copy_record *)r;
            profile_add(copy_name(m->copyKind), (double)(m->end - m->start));
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const set_record *m = (const set_record *)r;
            profile_add("[memset]", (double)(m->end - m->start));
        }
    }
    free(buffer);
}

static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                          CUPTI_ACTIVITY_KIND_MEMSET};

static int cupti_ok(CUptiResult r, const char *call) {
    if (r == CUPTI_SUCCESS) return 1;
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    fprintf(stderr, "tfbench[rank %d]: kernel profile: %s failed: %s; no profile\n", tfb_log_rank, call, s ? s : "?");
    P.top = 0;
    return 0;
}

static void trace_start(void) {
    if (!cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks"))
        return;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && P.top; i++)
        cupti_ok(cuptiActivityEnable(kinds[i]), "cuptiActivityEnable");
    P.tracing = P.top > 0;
}

static void trace_stop(void) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) cuptiActivityDisable(kinds[i]);
    cuptiActivityFlushAll(1);
    P.tracing = 0;
}

static int by_time(const void *a, const void *b) {
    double x = ((const profile_row *)a)->ns, y = ((const profile_row *)b)->ns;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void profile_print(void) {
    double total = 0;
    for (int i = 0; i < P.n; i++) total += P.rows[i].ns;
    qsort(P.rows, (size_t)P.n, sizeof *P.rows, by_time);
    fprintf(stderr, "\nkernel profile, rank %d (CUPTI; the timed windows; %d names, %.3f ms of GPU time):\n",
            tfb_log_rank, P.n, total * 1e-6);
    fprintf(stderr, "| %-60s | %8s | %10s | %9s | %6s |\n", "kernel", "calls", "total ms", "us/call", "share");
    for (int i = 0; i < P.n && i < P.top; i++) {
        const profile_row *r = &P.rows[i];
        fprintf(stderr, "| %-60.60s | %8ld | %10.3f | %9.2f | %5.1f%% |\n", r->name, r->calls, r->ns * 1e-6,
                r->ns * 1e-3 / (double)r->calls, total > 0 ? 100.0 * r->ns / total : 0.0);
    }
}

#endif

/* backend hook: on = 1 starts recording, on = 0 stops and prints the table (nothing when the profile is off). */
tfb_status tfb_cuda_trace(void *ctx, int on) {
    if (!P.top) return TFB_OK;
#if HAVE_CUPTI
    if (on && !P.tracing) {
        P.n = 0;
        trace_start();
    } else if (!on && P.tracing) {
        TFB_CHECK_CUDA(cudaStreamSynchronize(((cuda_ctx *)ctx)->stream));
        trace_stop();
        profile_print();
    }
#else
    (void)ctx;
    if (!on) fprintf(stderr, "tfbench[rank %d]: kernel profile: this build has no CUPTI\n", tfb_log_rank);
#endif
    return TFB_OK;
}

/* The profile's size from TFB_KERNEL_PROFILE (0: off), read once when the backend opens. */
int tfb_cuda_profile_open(void) {
    const char *v = getenv("TFB_KERNEL_PROFILE");
    int n = v && v[0] ? atoi(v) : 0;
    P.top = n > 0 ? n : 0;
    return P.top;
}
