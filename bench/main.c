/* main.c — tfbench's entry point: everything is in the run driver (run.c); this file only owns the process. */
#include "run.h"

int main(int argc, char **argv) { return tfb_run_main(argc, argv); }
