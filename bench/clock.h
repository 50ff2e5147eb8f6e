/* clock.h — the monotonic wall clock every timing in tfbench reads (after the backend is synchronised). */
#ifndef TFB_CLOCK_H
#define TFB_CLOCK_H
#include <time.h>

static inline double tfb_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
