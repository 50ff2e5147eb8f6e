/* report.h — what tfbench prints on rank 0. For one layout: configuration, throughput with its definition,
 * step-time spread, per-phase breakdown and shares, FLOPs and MFU with their conventions, memory, the cross-rank
 * checks and, for pipelines, each stage's bubble and held activations. For a comparison run: one row per
 * strategy and scale (throughput, speedup, efficiency, step times, shares, MFU, memory, bus bandwidth) with
 * flags for suspicious scaling, a line per scale naming the fastest strategy, or the same as CSV. Text only.
 */
#ifndef TFB_REPORT_H
#define TFB_REPORT_H
#include <stdio.h>
#include "../results/record.h"

void tfb_report_print(FILE *f, const tfb_run_record *r);
void tfb_report_compare(FILE *f, const tfb_run_record *recs, int n);
void tfb_report_csv(FILE *f, const tfb_run_record *recs, int n);

#endif
