/* results_json.h — the versioned JSON results file (schema in results/SCHEMA.md), written atomically: a temporary
 * file in the same directory, flushed and renamed. Also the check, made before any work, that the path can be
 * written, so a bad --output fails fast and leaves nothing behind.
 */
#ifndef TFB_RESULTS_JSON_H
#define TFB_RESULTS_JSON_H
#include <stddef.h>
#include "record.h"
#include "../kernels/check.h"

#define TFB_SCHEMA_VERSION 2

/* TFB_ERR_ARG with a message when the file's directory is missing or not writable, or the path is a directory. */
tfb_status tfb_results_check_path(const char *flag, const char *path, char *err, size_t err_len);
/* The default path: results/runs/tfbench-MODEL-PRECISION-NrR-YYYYmmdd-HHMMSS.json (directories created). */
tfb_status tfb_results_default_path(const char *model, const char *precision, int ranks, char *path, size_t len);
/* Writes the n configurations of a run (skipped ones with their reason); complete = 0 marks a comparison run cut
 * short, whose finished configurations are kept. */
tfb_status tfb_results_write(const char *path, const tfb_run_record *recs, int n, int complete,
                             const char *mpi_library);

#endif
