/* main.c — tfbench's entry point: subcommands (compare, report, topo, estimate without MPI; links and doctor with it) are dispatched here;
 * everything else is the run driver (run.c). This file only owns the process. */
#include <string.h>
#include "doctor.h"
#include "estimate.h"
#include "links.h"
#include "run.h"
#include "topo_main.h"
#include "../results/compare.h"
#include "../results/report_machines.h"

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "compare") == 0) return tfb_compare_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "topo") == 0) return tfb_topo_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "report") == 0) return tfb_report_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "doctor") == 0) return tfb_doctor_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "estimate") == 0) return tfb_estimate_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "links") == 0) return tfb_links_main(argc - 1, argv + 1);
    return tfb_run_main(argc, argv);
}
