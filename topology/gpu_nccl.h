/* gpu_nccl.h — does an NCCL all-reduce across this machine's GPUs finish and add up? One process drives every GPU
 * (ncclCommInitAll), each GPU contributes 1 MiB of its ordinal + 1, and every result is checked on the host; all
 * through the CUDA runtime and NCCL loaded with dlopen (no headers, no link), on a helper thread with a deadline
 * (topology/deadline.h): a hang — the classic PCIe ACS/IOMMU symptom — is reported with the stage it hung in. The
 * communicators' asynchronous errors are polled while waiting. Used by `tfbench doctor`; it prints nothing.
 * TFB_TEST_LIBCUDART and TFB_TEST_LIBNCCL load stubs (tests).
 */
#ifndef TFB_GPU_NCCL_H
#define TFB_GPU_NCCL_H

typedef enum { TFB_NCCL_OK = 0, TFB_NCCL_NOT_RUN, TFB_NCCL_WRONG_SUM, TFB_NCCL_FAILED, TFB_NCCL_TIMED_OUT } tfb_nccl_status;

typedef struct {
    tfb_nccl_status status;
    int gpus;                /* GPUs in the all-reduce */
    char stage[48];          /* where it stopped: "initialising the communicators", "all-reduce", ... */
    char why[200];           /* the failing call and its error, or why it could not run */
    double seconds;
} tfb_nccl_result;

/* All-reduces over GPUs 0 .. min(n, 8) - 1 within deadline_s seconds. */
tfb_nccl_status tfb_nccl_check(int n, double deadline_s, tfb_nccl_result *r);

#endif
