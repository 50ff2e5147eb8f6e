/* peak.h — the CPU peak for MFU, measured once at start-up: the best of a few large FP32 GEMMs through the
 * backend, run on every rank at the same time so shared cores and memory are accounted for. It is a measured
 * SGEMM rate, not a datasheet figure, and the output says so.
 */
#ifndef TFB_PEAK_H
#define TFB_PEAK_H
#include "../kernels/backend.h"

/* *tflops: best rate of `reps` n x n x n FP32 GEMMs on this rank. */
tfb_status tfb_peak_measure(tfb_backend *be, int n, int reps, double *tflops);

#endif
