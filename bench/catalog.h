/* catalog.h — the GPU catalog (data/gpus.csv) and the architecture table (data/gpu-archs.csv): which GPU a device
 * name is, its memory and dense peaks; what a compute capability can do (tensor cores per precision); a peak for
 * GPUs the catalog lacks from SMs x clock x the architecture's per-SM rate; whether this binary holds code for a
 * compute capability. Data lives in the files, not here; this file reads and looks up, and touches no device.
 */
#ifndef TFB_CATALOG_H
#define TFB_CATALOG_H
#include <stddef.h>
#include "../kernels/backend.h"
#include "../kernels/check.h"

typedef enum { TFB_PREC_FP32 = 0, TFB_PREC_TF32, TFB_PREC_FP16, TFB_PREC_BF16, TFB_PREC_FP8, TFB_N_PREC } tfb_prec;

typedef struct {
    char name[48];
    char match[96];            /* '|' alternatives of '+'-joined words, lower case */
    int cc;                    /* compute capability x 10: 90 for 9.0 */
    double memory_gb;          /* decimal GB */
    double peak[TFB_N_PREC];   /* dense TFLOP/s; 0: the GPU has no such math */
    double bandwidth_gbs;
    char gpu_link[24];
    double link_gbs;           /* GPU-to-GPU per direction; 0: none or unknown */
    char host_link[24];
} tfb_gpu_spec;

typedef struct {
    char arch[16];
    int cc_from, cc_to;        /* compute capability x 10, inclusive */
    char examples[48];
    int tc_gen;                /* tensor-core generation, 0: none */
    int tc[TFB_N_PREC];        /* tensor cores for this precision (FP32 never) */
    double fp32_rate, fp16_rate; /* dense FLOP per clock per SM; 0: not known */
    char note[64];
} tfb_gpu_arch;

typedef struct {
    tfb_gpu_spec *gpus;
    int n_gpus;
    tfb_gpu_arch *archs;
    int n_archs;
} tfb_catalog;

/* Loads both files from dir, or (dir NULL) from $TFB_DATA_DIR, else data/ beside the executable's folder. */
tfb_status tfb_catalog_load(tfb_catalog *c, const char *dir, char *err, size_t err_len);
void tfb_catalog_free(tfb_catalog *c);
/* Parses "fp32", "tf32", "fp16", "bf16", "fp8"; -1 when none of them. */
int tfb_prec_parse(const char *s);
const char *tfb_prec_name(tfb_prec p);
/* The catalog precision of a run: its GEMM input type, or TF32 when FP32 inputs are rounded (--precision tf32). */
tfb_prec tfb_prec_of(tfb_dtype gemm_type, int tf32);
/* The first catalog row whose words all appear in the device name (any case); NULL when none does. */
const tfb_gpu_spec *tfb_catalog_find(const tfb_catalog *c, const char *device_name);
const tfb_gpu_arch *tfb_catalog_arch(const tfb_catalog *c, int cc);
/* Dense peak TFLOP/s of precision p on a GPU that is not in the catalog: SMs x rate x clock; `how` says which rate
 * (a borrowed earlier architecture's, or FP32 cores when p has no tensor cores). Always > 0 for sms, clock > 0. */
double tfb_catalog_peak_from_sms(const tfb_catalog *c, int cc, int sms, double clock_mhz, tfb_prec p, char *how,
                                 size_t how_len);
/* What this binary holds for a compute capability: "machine code", "PTX (JIT-compiled by the driver)" or
 * "nothing (CPU-only build)" / "nothing for this compute capability". */
const char *tfb_catalog_binary_support(int cc);

#endif
