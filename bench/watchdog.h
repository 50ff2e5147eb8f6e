/* watchdog.h — ends a job that stops making progress. The run driver marks each phase it enters and the workloads
 * each unit they finish; a helper thread on every rank wakes once a second and, when neither has happened for
 * --timeout seconds, prints which operation this rank is stuck in and ends the process (the launcher then ends
 * the other ranks, whose watchdogs report their own operation). It never touches MPI: a hung collective cannot
 * block it.
 */
#ifndef TFB_WATCHDOG_H
#define TFB_WATCHDOG_H

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
