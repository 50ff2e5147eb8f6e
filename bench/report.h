/* report.h — the human table tfbench prints on rank 0: configuration, throughput with its definition, step-time
 * spread, per-phase breakdown, FLOPs and MFU with their conventions, and the cross-rank checks. Text only.
 */
#ifndef TFB_REPORT_H
#define TFB_REPORT_H
#include <stdio.h>
#include "../results/record.h"

void tfb_report_print(FILE *f, const tfb_run_record *r);

#endif
