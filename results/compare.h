/* compare.h — `tfbench compare BASE.json NEW.json`: matches the two runs' configurations, prints what differs in
 * their environments, both throughputs, the change and whether it is beyond noise (Mann-Whitney U on the per-step
 * times, p < 0.01, and at least --threshold percent). Exit status 0: nothing regressed; 1: a regression beyond
 * threshold and noise; 2: bad input (unreadable, not JSON, wrong schema, incomparable without --force).
 * It never runs MPI or a backend.
 */
#ifndef TFB_COMPARE_H
#define TFB_COMPARE_H

/* argv[0] is "compare". */
int tfb_compare_main(int argc, char **argv);
/* 1 when text is a results file compare can use, else 0 with a one-line reason in err (for tests and fuzzing). */
int tfb_compare_check_text(const char *text, char *err, size_t len);

#endif
