/* deadline.h — run a probe that may hang (a GPU copy or collective stuck in the driver) on a helper thread and
 * stop waiting for it at a deadline. The caller owns a tfb_deadline inside a heap object that it never frees when
 * the wait gives up (the thread may still be inside the driver); the worker publishes results under `mu` and
 * stops touching shared results once `abandoned` is set. Nothing here can cancel a thread stuck in the driver:
 * the process is expected to exit soon after a timeout.
 */
#ifndef TFB_DEADLINE_H
#define TFB_DEADLINE_H
#include <pthread.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, abandoned;
} tfb_deadline;

void tfb_deadline_init(tfb_deadline *d);
/* Worker: the work is finished (wakes the waiter). */
void tfb_deadline_finish(tfb_deadline *d);
/* Starts fn(arg) and waits up to seconds. Returns 1 when it finished (thread joined, d destroyed), 0 when it did
 * not start (d destroyed) and -1 when the deadline passed (abandoned set, thread detached, d left alive);
 * on_timeout(arg) runs under d->mu at that moment, to mark what was under way. */
int tfb_deadline_run(tfb_deadline *d, void *(*fn)(void *), void *arg, double seconds, void (*on_timeout)(void *));

#endif
