/* power.h — energy of the timed windows, measured where the machine exposes it. On the CPU backend: the RAPL
 * package energy counters of this node (/sys/class/powercap/intel-rapl:N, the whole sockets, so other processes
 * count too) read by one rank per node, and the CPU package throttle counters (thermal_throttle). A helper thread
 * samples the counters once a second during the windows (wraparound and the highest one-second power); the
 * counters are also read at each window's edges, outside the timed region. On a GPU backend: each GPU's board
 * energy counter through NVML, read the same way, with the clock throttle reasons sampled each second. This file
 * reads counters and keeps sums; it prints nothing and never fails a run: a meter that cannot read gives a reason
 * instead. TFB_TEST_SYSFS_DIR stands for /sys and TFB_TEST_LIBNVML for NVML (tests).
 */
#ifndef TFB_POWER_H
#define TFB_POWER_H
#include <stddef.h>

typedef struct tfb_power_meter tfb_power_meter;

/* A meter over this node's RAPL packages, or NULL with the reason in why (no powercap, not readable, ...). */
tfb_power_meter *tfb_power_open(char *why, size_t len);
/* A meter over the GPU at PCI domain:bus:device (NVML's energy counter), or NULL with the reason. */
tfb_power_meter *tfb_power_open_gpu(unsigned domain, unsigned bus, unsigned dev, char *why, size_t len);
/* Starts the sampling thread; energy is counted only between window_begin and window_end. */
void tfb_power_start(tfb_power_meter *m);
void tfb_power_window_begin(tfb_power_meter *m);
void tfb_power_window_end(tfb_power_meter *m);
/* Stops the thread. joules: energy inside the windows; peak_w: highest power over a sampling interval (0 when no
 * interval fell inside a window); samples: sampling intervals inside windows; throttled: package throttle events
 * during the windows (GPU meters: sampling intervals with a slowing clock throttle reason; -1: not readable). */
void tfb_power_stop(tfb_power_meter *m, double *joules, double *peak_w, int *samples, long *throttled);
/* Words for the source: "RAPL package energy, 2 packages (whole sockets)". */
const char *tfb_power_source(const tfb_power_meter *m);
/* GPU meters: the mean SM clock over the sampling intervals inside windows, MHz (0: a CPU meter or no sample). */
double tfb_power_mean_clock_mhz(const tfb_power_meter *m);
void tfb_power_close(tfb_power_meter *m);

#endif
