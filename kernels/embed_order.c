/* embed_order.c — the token order the embedding backward sums in (backend.h: embedding_bwd), built on the host
 * where the batch is made. It does not check the ids' range: the caller names the table's row count.
 */
#include <string.h>
#include "backend.h"

void tfb_embed_order(const int *ids, int n, int nvals, int *order, int *count) {
    memset(count, 0, ((size_t)nvals + 1) * sizeof *count);
    for (int i = 0; i < n; i++) count[ids[i] + 1]++;
    for (int v = 0; v < nvals; v++) count[v + 1] += count[v]; /* count[v]: where id v's tokens begin */
    for (int i = 0; i < n; i++) order[count[ids[i]]++] = i;
}
