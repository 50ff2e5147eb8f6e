/* event_log.h — `--log FILE`: a timestamped stream of JSON lines (run start, configuration, each step, each
 * trial, run end), flushed line by line so a long run can be followed while it goes. Step events are written
 * after each timed window closes, never inside it. Written by rank 0 only; not an MLPerf log.
 */
#ifndef TFB_EVENT_LOG_H
#define TFB_EVENT_LOG_H
#include <cjson/cJSON.h>
#include "../kernels/check.h"

typedef struct tfb_event_log tfb_event_log;

tfb_status tfb_event_log_open(const char *path, tfb_event_log **out);
/* Writes {"time_unix_s": t, "event": name, ...fields}; fields (may be NULL) is consumed. */
void tfb_event_log_emit(tfb_event_log *log, double time_unix_s, const char *event, cJSON *fields);
void tfb_event_log_close(tfb_event_log *log);
/* The wall clock, seconds since the epoch (for event times; intervals use the monotonic clock). */
double tfb_event_log_now(void);

#endif
