/* env.h — the environment known so far, taken from the system and the libraries themselves: host, OS, kernel,
 * CPU model, cores, memory, compiler, MPI library, BLAS, hwloc, OpenMP, tfbench version and commit, and the
 * environment variables that change behaviour (and /etc/nccl.conf). GPU, driver and
 * topology fields arrive with the issues that discover them. Returns a cJSON object; reads, never writes.
 */
#ifndef TFB_ENV_H
#define TFB_ENV_H
#include <cjson/cJSON.h>

cJSON *tfb_env_capture(const char *mpi_library);
/* "Open MPI ...", the CPU model name, and the version strings, for the table header. */
const char *tfb_env_cpu_model(void);
const char *tfb_env_blas(void);
/* 1 when a "NAME=value" environment entry is one tfbench records (NCCL_, CUDA_, OMPI_MCA_ but not the launcher's
 * own wiring, UCX_, HWLOC_, OMP_, TFB_, Slurm's binding and task counts). */
int tfb_env_var_recorded(const char *entry);

#endif
