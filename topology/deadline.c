/* deadline.c — see deadline.h. */
#include <errno.h>
#include <time.h>
#include "deadline.h"

void tfb_deadline_init(tfb_deadline *d) {
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->done = d->abandoned = 0;
}

void tfb_deadline_finish(tfb_deadline *d) {
    pthread_mutex_lock(&d->mu);
    d->done = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void destroy(tfb_deadline *d) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
}

int tfb_deadline_run(tfb_deadline *d, void *(*fn)(void *), void *arg, double seconds, void (*on_timeout)(void *)) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0) { destroy(d); return 0; }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)seconds;
    until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&d->mu);
    int rc = 0;
    while (!d->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&d->cv, &d->mu, &until);
    int finished = d->done;
    if (!finished) {
        d->abandoned = 1;
        if (on_timeout) on_timeout(arg);
    }
    pthread_mutex_unlock(&d->mu);
    if (!finished) { pthread_detach(t); return -1; }
    pthread_join(t, NULL);
    destroy(d);
    return 1;
}
