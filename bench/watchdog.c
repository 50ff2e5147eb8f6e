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
} wd;

static long long now_ns(void) { return (long long)(tfb_clock_s() * 1e9); }

void tfb_watchdog_mark(const char *op, int step) {
    atomic_store(&wd.op, op);
    atomic_store(&wd.step, step);
    atomic_store(&wd.marked_ns, now_ns());
}

void tfb_watchdog_tick(void) { atomic_store(&wd.marked_ns, now_ns()); }

static void *watch(void *arg) {
    (void)arg;
    struct timespec second = {1, 0};
    while (!atomic_load(&wd.stop)) {
        nanosleep(&second, NULL); /* polling interval of the watchdog, not part of any measurement */
        double idle = (double)(now_ns() - atomic_load(&wd.marked_ns)) * 1e-9;
        if (idle <= wd.timeout_s || atomic_load(&wd.idle)) continue;
        fprintf(stderr, "tfbench[rank %d]: no progress for %.0f s (--timeout %.0f), stuck in %s at step %d; "
                "ending the job\n", wd.rank, idle, wd.timeout_s, atomic_load(&wd.op), atomic_load(&wd.step));
        fflush(stderr);
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
