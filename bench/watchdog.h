/* watchdog.h — ends a job that stops making progress. The run driver marks each phase it enters and the workloads
 * each unit they finish; a helper thread on every rank wakes once a second and, when neither has happened for
 * --timeout seconds, prints which operation this rank is stuck in and ends the process 2 s later (the launcher
 * then ends the other ranks; the pause lets those stuck at about the same time print their own report first). On
 * a GPU the host runs ahead of the device, so a probe (the backend's pending_text) adds what the device has not
 * finished: the collective that never ended. It never touches MPI: a hung collective cannot block it.
 */
#ifndef TFB_WATCHDOG_H
#define TFB_WATCHDOG_H

/* Before tfb_watchdog_start: what the device has not finished (tfb_backend.pending_text, NULL for none), printed on
 * a line after the hang report. It runs on a thread of its own and is given PROBE_WAIT_S (2 s), so a call that
 * blocks cannot keep a hung job alive. */
void tfb_watchdog_probe(int (*text)(void *ctx, char *buf, size_t len), void *ctx);
/* Starts the thread; timeout_s <= 0 leaves it off. */
int tfb_watchdog_start(int rank, double timeout_s);
/* The operation this rank is entering (a string literal) and the step it belongs to. */
void tfb_watchdog_mark(const char *op, int step);
/* Progress inside the current operation (a workload's unit, a layer or a block, is done): the deadline starts
 * again and the operation keeps its name. A long phase of a large model on the CPU is not a hang; a rank blocked
 * in a collective or a sync makes no such progress. */
void tfb_watchdog_tick(void);
/* idle = 1 while this rank waits outside a configuration it takes no part in (a comparison run's smaller
 * layouts): the ranks doing the work keep their own deadline, and a stall there ends the job from them. */
void tfb_watchdog_idle(int idle);
void tfb_watchdog_stop(void);

#endif
