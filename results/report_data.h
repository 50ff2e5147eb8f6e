/* report_data.h — the two CSV inputs of `tfbench report`: the user's prices file (machine label, price, optional
 * power) and tfbench's published reference figures (data/published.csv). Reading and validation only: every
 * figure is checked for range, labels must be unique, and errors name the file and line. No arithmetic here.
 */
#ifndef TFB_REPORT_DATA_H
#define TFB_REPORT_DATA_H
#include <stddef.h>
#include "../kernels/check.h"

#define TFB_PRICES_HEADER "machine,price,power_w"

typedef struct {
    char label[64];
    double price;        /* currency units, > 0 */
    double power_w;      /* the machine's stated power draw while training; 0: not given */
} tfb_price;

typedef struct {
    tfb_price *rows;
    int n;
} tfb_prices;

typedef struct {
    char source[96], hardware[48], model[32], precision[8];
    int seq_len, image_size;  /* the one that does not apply is 0 */
    int batch;                /* per GPU; 0: not stated */
    int gpus;
    double samples_per_s;
} tfb_published;

typedef struct {
    tfb_published *rows;
    int n;
} tfb_published_set;

tfb_status tfb_prices_load(tfb_prices *p, const char *path, char *err, size_t len);
void tfb_prices_free(tfb_prices *p);
const tfb_price *tfb_prices_find(const tfb_prices *p, const char *label);
/* dir NULL: tfbench's data folder (tfb_csv_data_dir). */
tfb_status tfb_published_load(tfb_published_set *s, const char *dir, char *err, size_t len);
void tfb_published_free(tfb_published_set *s);

#endif
