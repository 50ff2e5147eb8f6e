/* report_machines.h — `tfbench report A.json B.json …`: one procurement table across machines (one results file
 * per machine). Per workload (model, precision, shape, scaling, batch): samples/s at each device count (the best
 * layout at that count), per device, scaling efficiency and MFU at the machine's largest count, interconnect, and
 * throughput relative to a reference machine, with the geometric mean over every workload and device count both
 * measured. Optional prices (and stated power) add samples/s per 1,000 currency units, samples per kWh and cost per
 * million samples. Published figures (data/published.csv) appear as extra rows marked as such and enter no mean.
 * It runs nothing: no MPI, no backend. Exit status 0, or 2 for bad input.
 */
#ifndef TFB_REPORT_MACHINES_H
#define TFB_REPORT_MACHINES_H

/* argv[0] is "report". */
int tfb_report_main(int argc, char **argv);

#endif
