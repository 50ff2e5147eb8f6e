/* links_gpu.h — the GPU copy matrices of `tfbench links` on world rank 0's node (topology/gpu_bw.c): host<->GPU
 * bandwidth from pinned memory per GPU, then one-way bandwidth with peer access on and off, both-ways bandwidth
 * and latency for every ordered GPU pair, each beside the nominal bandwidth of its link (from the topology), as a
 * table and as JSON. Nothing happens without a driver or a GPU. Does not run collectives (links.c does).
 */
#ifndef TFB_LINKS_GPU_H
#define TFB_LINKS_GPU_H
#include <stddef.h>
#include <cjson/cJSON.h>

/* Prints the matrices and returns their JSON object; NULL when there is no GPU. *failed = 1 when a copy failed or
 * the deadline passed (what was measured is still printed and returned). */
cJSON *tfb_links_gpu_copies(size_t bytes, int iters, double deadline_s, int *failed);

#endif
