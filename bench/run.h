/* run.h — the run driver: from the options, the backend and the configurations to run (one named layout, or the
 * comparison run: every strategy at every power-of-two scale), each trained and measured by train.c, then rank
 * 0's records to the tables and the results file. Returns the process exit status (0, 1 on failure, 2 on bad
 * input).
 */
#ifndef TFB_RUN_H
#define TFB_RUN_H

int tfb_run_main(int argc, char **argv);

#endif
