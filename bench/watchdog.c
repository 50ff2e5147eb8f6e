/* watchdog.c — see watchdog.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "watchdog.h"
#include "clock.h"

static struct {
    pthread_t thread;
    int running, rank;
    double timeout_s;
    _Atomic(const char *) op;
    atomic_int step;
    _Atomic long long marked_ns; /* monotonic time of the last mark */
    atomic_int stop;
    atomic_int idle;             /* waiting outside a configuration: other ranks' watchdogs cover the work */
    int (*probe)(void *ctx, char *buf, size_t len);
    void *probe_ctx;
    char probe_text[512];
    atomic_int probe_state;      /* 0 running, 1 answered in probe_text, 2 nothing unfinished */
} wd;

#define PROBE_WAIT_S 2
/* How long a rank that reported waits before it exits: a peer stuck at about the same time (its deadline a poll or
 * two later) reports too before the launcher, seeing this exit, ends it. */
#define PEER_GRACE_S 2

static long long now_ns(void) { return (long long)(tfb_clock_s() * 1e9); }

void tfb_watchdog_mark(const char *op, int step) {
    atomic_store(&wd.op, op);
    atomic_store(&wd.step, step);
    atomic_store(&wd.marked_ns, now_ns());
}

void tfb_watchdog_tick(void) { atomic_store(&wd.marked_ns, now_ns()); }

void tfb_watchdog_probe(int (*text)(void *ctx, char *buf, size_t len), void *ctx) {
    wd.probe = text;
    wd.probe_ctx = ctx;
}

static void *probe_run(void *arg) {
    (void)arg;
    int said = wd.probe(wd.probe_ctx, wd.probe_text, sizeof wd.probe_text);
    atomic_store(&wd.probe_state, said ? 1 : 2);
    return NULL;
}

/* The probe's answer as a line of the report (empty when there is none), waited for up to PROBE_WAIT_S; a probe
 * that does not return is left behind. */
static void device_line(char *line, size_t len) {
    pthread_t t;
    line[0] = 0;
    if (!wd.probe || pthread_create(&t, NULL, probe_run, NULL) != 0) return;
    pthread_detach(t);
    struct timespec tick = {0, 1000 * 1000};
    for (int i = 0; i < PROBE_WAIT_S * 1000 && !atomic_load(&wd.probe_state); i++)
        nanosleep(&tick, NULL); /* the job is ending already: this only bounds the wait for the probe */
    int state = atomic_load(&wd.probe_state);
    if (state == 1)
        snprintf(line, len, "tfbench[rank %d]: the device has not finished: %s\n", wd.rank, wd.probe_text);
    else if (state == 0)
        snprintf(line, len, "tfbench[rank %d]: the device did not say within %d s what it has not finished\n",
                 wd.rank, PROBE_WAIT_S);
}

static void *watch(void *arg) {
    (void)arg;
    struct timespec second = {1, 0};
    while (!atomic_load(&wd.stop)) {
        nanosleep(&second, NULL); /* polling interval of the watchdog, not part of any measurement */
        double idle = (double)(now_ns() - atomic_load(&wd.marked_ns)) * 1e-9;
        if (idle <= wd.timeout_s || atomic_load(&wd.idle)) continue;
        char device[640];
        device_line(device, sizeof device); /* first, so the report is written at once: a peer's exit may end us */
        fprintf(stderr, "tfbench[rank %d]: no progress for %.0f s (--timeout %.0f), stuck in %s at step %d; "
                "ending the job\n%s", wd.rank, idle, wd.timeout_s, atomic_load(&wd.op), atomic_load(&wd.step), device);
        fflush(stderr);
        struct timespec grace = {PEER_GRACE_S, 0};
        nanosleep(&grace, NULL); /* the job is ending already: this only lets the peers' reports out */
        _exit(124);
    }
    return NULL;
}

int tfb_watchdog_start(int rank, double timeout_s) {
    if (timeout_s <= 0) return 0;
    wd.rank = rank;
    wd.timeout_s = timeout_s;
    tfb_watchdog_mark("start-up", -1);
    atomic_store(&wd.stop, 0);
    if (pthread_create(&wd.thread, NULL, watch, NULL) != 0) return -1;
    wd.running = 1;
    return 0;
}

void tfb_watchdog_idle(int idle) {
    atomic_store(&wd.idle, idle);
    atomic_store(&wd.marked_ns, now_ns());
}

void tfb_watchdog_stop(void) {
    if (!wd.running) return;
    atomic_store(&wd.stop, 1);
    pthread_join(wd.thread, NULL);
    wd.running = 0;
}
