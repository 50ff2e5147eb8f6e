/* mempool.h — memory planned as data: callers declare every tensor's size, then one allocation per pool is made
 * and each tensor is carved from it at a 64-byte aligned offset. A pool may keep a host mirror of the same layout
 * (for inputs built on the host and uploaded in one copy). It does not track lifetimes or reuse memory.
 */
#ifndef TFB_MEMPOOL_H
#define TFB_MEMPOOL_H
#include <stddef.h>
#include "../kernels/backend.h"

typedef struct {
    void **slot;
    size_t offset;
} tfb_mempool_entry;

typedef struct {
    tfb_mempool_entry *entries;
    int count, cap;
    size_t bytes;        /* total planned bytes */
    void *base;          /* backend memory, after commit */
    void *host_mirror;   /* host memory of the same layout, when asked for */
    int failed;          /* an add could not record its entry */
} tfb_mempool;

/* Plans `bytes` for *slot; *slot is set by commit. */
void tfb_mempool_add(tfb_mempool *p, void **slot, size_t bytes);
/* One backend allocation for everything planned (and a host mirror when host_mirror != 0). */
tfb_status tfb_mempool_commit(tfb_mempool *p, tfb_backend *be, int host_mirror);
/* The host-mirror address of a pointer into the pool. */
void *tfb_mempool_mirror(const tfb_mempool *p, const void *dev);
void tfb_mempool_release(tfb_mempool *p, tfb_backend *be);

#endif
