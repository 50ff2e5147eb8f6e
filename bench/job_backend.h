/* job_backend.h — opening each rank's compute backend as one collective step of an MPI job (the run and `tfbench
 * links` share it). It does not pick the backend (kernels/registry.c does) or place the rank (bind.c does).
 */
#ifndef TFB_JOB_BACKEND_H
#define TFB_JOB_BACKEND_H
#include "../kernels/backend.h"
#include "comm.h"

/* Every rank of *world opens spec's backend; if any rank cannot, every rank returns TFB_ERR_ARG (each failing rank
 * prints why, prefixed by `who`). A note from the choice (--device auto's fallback) is printed once, by rank 0. A
 * backend whose memory MPI cannot read (a GPU's) then wraps *world, and every later split of it, in its own
 * transport: *world is replaced by the wrapped communicator. */
tfb_status tfb_job_backend_open(const tfb_backend_spec *spec, const char *who, tfb_comm **world, tfb_backend **be);

#endif
