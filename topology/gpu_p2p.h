/* gpu_p2p.h — does copying between GPUs actually work? For every pair of the first GPUs: whether peer access is
 * possible each way (cuDeviceCanAccessPeer), then a 1 MiB copy each way (cuMemcpyPeer, with peer access enabled
 * where possible) whose data is checked on the host. All through the driver API loaded with dlopen (no CUDA
 * headers or runtime), on a helper thread with a deadline: a copy that hangs — the classic PCIe ACS/IOMMU
 * problem — is reported, not waited for (the thread is left behind; the caller is expected to exit soon).
 * TFB_TEST_LIBCUDA names a stub driver (tests). Used by `tfbench doctor`; it prints nothing.
 */
#ifndef TFB_GPU_P2P_H
#define TFB_GPU_P2P_H

enum { TFB_P2P_MAX_GPUS = 8, TFB_P2P_MAX_PAIRS = TFB_P2P_MAX_GPUS * (TFB_P2P_MAX_GPUS - 1) / 2 };

typedef enum { TFB_P2P_OK = 0, TFB_P2P_NOT_RUN, TFB_P2P_WRONG_DATA, TFB_P2P_CALL_FAILED, TFB_P2P_TIMED_OUT } tfb_p2p_status;

typedef struct {
    int a, b;                /* device ordinals, a < b */
    int access_ab, access_ba;/* peer access possible a -> b, b -> a */
    tfb_p2p_status status;
    char call[40];           /* the driver call that failed, with its error code */
    double seconds;          /* both copies and their checks */
} tfb_p2p_pair;

typedef struct {
    int n_pairs;
    tfb_p2p_pair pair[TFB_P2P_MAX_PAIRS];
    char why[160];           /* set when nothing could run (no driver, cuInit failed) */
} tfb_p2p_result;

/* Checks the pairs of GPUs 0 .. min(n, 8) - 1 within deadline_s seconds in all. Returns the worst status. */
tfb_p2p_status tfb_p2p_check(int n, double deadline_s, tfb_p2p_result *r);

#endif
