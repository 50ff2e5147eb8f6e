/* event_log.c — see event_log.h. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "event_log.h"

struct tfb_event_log { FILE *f; };

tfb_status tfb_event_log_open(const char *path, tfb_event_log **out) {
    tfb_event_log *l = calloc(1, sizeof *l);
    TFB_CHECK_ALLOC(l);
    l->f = fopen(path, "w");
    if (!l->f) { free(l); return TFB_ERR_IO; }
    *out = l;
    return TFB_OK;
}

double tfb_event_log_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tfb_event_log_emit(tfb_event_log *log, double time_unix_s, const char *event, cJSON *fields) {
    if (!log) { cJSON_Delete(fields); return; }
    cJSON *line = cJSON_CreateObject();
    cJSON_AddNumberToObject(line, "time_unix_s", time_unix_s);
    cJSON_AddStringToObject(line, "event", event);
    cJSON *item = fields ? fields->child : NULL;
    while (item) { /* move the fields over, keeping their order */
        cJSON *next = item->next;
        cJSON *moved = cJSON_DetachItemViaPointer(fields, item);
        char *key = moved->string;         /* the key moves with the item */
        moved->string = NULL;
        cJSON_AddItemToObject(line, key, moved);
        cJSON_free(key);
        item = next;
    }
    cJSON_Delete(fields);
    char *text = cJSON_PrintUnformatted(line);
    if (text) fprintf(log->f, "%s\n", text);
    fflush(log->f);
    free(text);
    cJSON_Delete(line);
}

void tfb_event_log_close(tfb_event_log *log) {
    if (!log) return;
    fclose(log->f);
    free(log);
}
