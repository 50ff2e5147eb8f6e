/* test_watchdog.c — the watchdog (bench/watchdog.c) in child processes, since it ends the process it watches:
 * - a rank that finishes a workload unit (tfb_workload_unit_stop) more often than --timeout keeps running through a
 *   phase several times longer than the timeout (a large model on the CPU is not a hang);
 * - a rank that stops making progress is ended with exit status 124 and a message naming its operation and step;
 * - the backend's probe adds what the device has not finished, and a probe that never returns still lets the
 *   watchdog end the rank (it says the device did not answer).
 * Not here: the job-wide behaviour (the launcher ending the other ranks), which tests/test_training.py checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "../bench/watchdog.h"
#include "../bench/workload.h"

#define TIMEOUT_S 2.0

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* A phase of 3.5 s (1.75 times the timeout) made of units of 0.25 s, each ended by the workloads' unit_stop. */
static void child_busy(void) {
    tfb_workload wl;
    memset(&wl, 0, sizeof wl); /* no unit timing: unit_stop touches no backend */
    if (tfb_watchdog_start(0, TIMEOUT_S) != 0) _exit(3);
    tfb_watchdog_mark("a long phase", 2);
    for (int i = 0; i < 14; i++) {
        nap(0.25);
        if (tfb_workload_unit_stop(&wl, NULL, i, 0) != TFB_OK) _exit(4);
    }
    tfb_watchdog_stop();
    _exit(0);
}

/* A rank stuck in one operation: no mark, no unit done, until the watchdog ends it. */
static void child_stuck(void) {
    if (tfb_watchdog_start(0, TIMEOUT_S) != 0) _exit(3);
    tfb_watchdog_mark("a test stall", 7);
    nap(10 * TIMEOUT_S); /* far past the deadline, the wait for a probe and the pause before exiting */
    _exit(0);
}

static int probe_answers(void *ctx, char *buf, size_t len) {
    (void)ctx;
    snprintf(buf, len, "a test collective");
    return 1;
}

static int probe_blocks(void *ctx, char *buf, size_t len) {
    (void)ctx; (void)buf; (void)len;
    nap(1e6); /* far past the watchdog's wait for it */
    return 0;
}

static void child_stuck_probed(void) {
    tfb_watchdog_probe(probe_answers, NULL);
    child_stuck();
}

static void child_stuck_probe_blocks(void) {
    tfb_watchdog_probe(probe_blocks, NULL);
    child_stuck();
}

/* Runs fn in a child; returns its exit status (-1: killed or not started) and its stderr in err. */
static int run_child(void (*fn)(void), char *err, size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fd[0], err + got, len - 1 - got)) > 0) got += (size_t)r;
    err[got] = 0;
    close(fd[0]);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

int main(void) {
    char err[512];
    int rc = run_child(child_busy, err, sizeof err);
    EXPECT("watchdog_units_done_keep_a_long_phase_alive", rc == 0, "exit status %d, stderr: %s", rc, err);
    rc = run_child(child_stuck, err, sizeof err);
    EXPECT("watchdog_ends_a_stuck_rank_naming_its_operation",
           rc == 124 && strstr(err, "stuck in a test stall at step 7") && strstr(err, "--timeout 2"),
           "exit status %d, stderr: %s", rc, err);
    EXPECT("watchdog_without_probe_says_nothing_of_a_device", !strstr(err, "device"), "stderr: %s", err);
    rc = run_child(child_stuck_probed, err, sizeof err);
    EXPECT("watchdog_adds_what_the_device_has_not_finished",
           rc == 124 && strstr(err, "stuck in a test stall at step 7") &&
               strstr(err, "rank 0]: the device has not finished: a test collective\n"),
           "exit status %d, stderr: %s", rc, err);
    rc = run_child(child_stuck_probe_blocks, err, sizeof err);
    EXPECT("watchdog_ends_the_rank_when_the_probe_never_returns",
           rc == 124 && strstr(err, "stuck in a test stall") && strstr(err, "did not say within 2 s"),
           "exit status %d, stderr: %s", rc, err);
    return test_failures ? 1 : 0;
}
