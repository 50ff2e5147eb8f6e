/* mempool.c — see mempool.h. */
#include <stdlib.h>
#include <string.h>
#include "mempool.h"

void tfb_mempool_add(tfb_mempool *p, void **slot, size_t bytes) {
    if (p->count == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        tfb_mempool_entry *e = realloc(p->entries, (size_t)cap * sizeof *e);
        if (!e) { p->failed = 1; return; }
        p->entries = e;
        p->cap = cap;
    }
    p->entries[p->count++] = (tfb_mempool_entry){.slot = slot, .offset = p->bytes};
    p->bytes += (bytes + 63) & ~(size_t)63;
}

tfb_status tfb_mempool_commit(tfb_mempool *p, tfb_backend *be, int host_mirror) {
    if (p->failed) return TFB_ERR_NOMEM;
    p->base = be->alloc(be->ctx, p->bytes ? p->bytes : 64);
    TFB_CHECK_ALLOC(p->base);
    if (host_mirror) {
        p->host_mirror = calloc(1, p->bytes ? p->bytes : 64);
        TFB_CHECK_ALLOC(p->host_mirror);
    }
    for (int i = 0; i < p->count; i++) *p->entries[i].slot = (char *)p->base + p->entries[i].offset;
    return TFB_OK;
}

void *tfb_mempool_mirror(const tfb_mempool *p, const void *dev) {
    return (char *)p->host_mirror + ((const char *)dev - (const char *)p->base);
}

void tfb_mempool_release(tfb_mempool *p, tfb_backend *be) {
    if (p->base) be->free(be->ctx, p->base);
    free(p->host_mirror);
    free(p->entries);
    memset(p, 0, sizeof *p);
}
