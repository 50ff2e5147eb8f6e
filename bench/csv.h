/* csv.h — the small comma-separated files tfbench reads (GPU catalog, architecture table, prices): one record per
 * line, '#' comment lines and blank lines skipped, a header line naming the columns, no quoting (fields may not
 * hold commas), fields trimmed. It does not convert values; callers do, with tfb_csv_number.
 */
#ifndef TFB_CSV_H
#define TFB_CSV_H
#include <stddef.h>
#include "../kernels/check.h"

enum { TFB_CSV_MAX_FIELDS = 32, TFB_CSV_MAX_LINE = 1024 };

/* Called for each data line: fields[0..n-1], the line number for messages. A non-OK status stops the read. */
typedef tfb_status (*tfb_csv_row_fn)(void *ctx, char **fields, int n, int line, char *err, size_t err_len);

/* Splits `line` in place at commas; returns the number of fields (at most max; more fields: max + 1). */
int tfb_csv_split(char *line, char **fields, int max);
/* Reads `path`; the first data line must equal `header` (after trimming). Errors name the file and line. */
tfb_status tfb_csv_read(const char *path, const char *header, tfb_csv_row_fn row, void *ctx, char *err,
                        size_t err_len);
/* tfb_csv_read whose messages all name the file: a row callback's "line N: ..." becomes "path: line N: ...". */
tfb_status tfb_csv_read_named(const char *path, const char *header, tfb_csv_row_fn row, void *ctx, char *err,
                              size_t err_len);
/* tfb_csv_read_named of `name` in dir, or (dir NULL) in tfbench's data folder. */
tfb_status tfb_csv_read_data(const char *dir, const char *name, const char *header, tfb_csv_row_fn row, void *ctx,
                             char *err, size_t err_len);
/* tfbench's data folder (GPU catalog, published figures): $TFB_DATA_DIR, else data/ beside the executable's
 * folder (../data from it). */
void tfb_csv_data_dir(char *dir, size_t n);
/* A number from a field: empty gives `empty`; anything not a finite number in [lo, hi] is an error. */
tfb_status tfb_csv_number(const char *field, double empty, double lo, double hi, double *out);
/* A row callback's last step: the array of rows (the T * that array_ptr points to, *n rows of `size` bytes) grows
 * by one, a copy of *row. TFB_CSV_APPEND(array, n, row) passes the sizes. */
tfb_status tfb_csv_append(void *array_ptr, int *n, size_t size, const void *row);
#define TFB_CSV_APPEND(array, n, row) tfb_csv_append(&(array), &(n), sizeof *(array), &(row))

#endif
