/* check.h — tfbench's one family of status codes and error-check macros.
 *
 * Library code returns a tfb_status; the macros print the failing call, file:line, the rank and the device, and
 * return from the enclosing function. Only the driver (bench/main.c) turns a status into an exit code.
 * This file deliberately knows nothing about MPI or CUDA types: each transport adds its own macro next to its code
 * (TFB_CHECK_MPI in bench/comm_mpi.c) and reports through tfb_check_report().
 */
#ifndef TFB_CHECK_H
#define TFB_CHECK_H

typedef enum {
    TFB_OK = 0,
    TFB_ERR_ARG = 2,     /* bad input from the user: exit status 2 */
    TFB_ERR_NOMEM = 3,   /* an allocation failed */
    TFB_ERR_BACKEND = 4, /* a compute library reported an error */
    TFB_ERR_COMM = 5,    /* the communication library reported an error */
    TFB_ERR_IO = 6,      /* a file could not be read or written */
    TFB_ERR_NUMERIC = 7, /* a non-finite value where training cannot continue */
    TFB_ERR_STATE = 8    /* an internal invariant failed (a bug in tfbench) */
} tfb_status;

/* Who is reporting: set once by the driver, printed by every failed check. */
extern int tfb_log_rank;
extern const char *tfb_log_device;

/* Prints "tfbench[rank R, DEVICE]: CALL failed at FILE:LINE: DETAIL" on stderr. */
void tfb_check_report(const char *call, const char *file, int line, const char *detail);

/* Evaluate a call returning tfb_status; on failure report it and return the status. */
#define TFB_CHECK(call)                                                  \
    do {                                                                 \
        tfb_status tfb_st_ = (call);                                     \
        if (tfb_st_ != TFB_OK) {                                         \
            tfb_check_report(#call, __FILE__, __LINE__, "status != OK"); \
            return tfb_st_;                                              \
        }                                                                \
    } while (0)

/* Propagate an expected failure (bad user input) whose one-line message is already written: no report. */
#define TFB_TRY(call)                            \
    do {                                         \
        tfb_status tfb_st_ = (call);             \
        if (tfb_st_ != TFB_OK) return tfb_st_;   \
    } while (0)

/* Evaluate a pointer-returning allocation; on NULL report it and return TFB_ERR_NOMEM. */
#define TFB_CHECK_ALLOC(ptr)                                                  \
    do {                                                                      \
        if ((ptr) == NULL) {                                                  \
            tfb_check_report(#ptr, __FILE__, __LINE__, "allocation failed");  \
            return TFB_ERR_NOMEM;                                             \
        }                                                                     \
    } while (0)

#endif
