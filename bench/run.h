/* run.h — the run driver: sets up backend, communication, workload and optimizer from the options, runs warm-up
 * and timed trials of data-parallel training, reduces the measurements across ranks and hands rank 0's record to
 * the report and the results file. Returns the process exit status (0, 1 on failure, 2 on bad input).
 */
#ifndef TFB_RUN_H
#define TFB_RUN_H

int tfb_run_main(int argc, char **argv);

#endif
