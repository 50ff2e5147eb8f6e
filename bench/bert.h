/* bert.h — BERT pre-training (post-LN encoder, MLM head tied to the word embedding, NSP head) as a workload.
 *
 * Shapes follow google-research/bert; see bert.c for the kernel sequence. The data-parallel split arrives as
 * tfb_workload_config.local_batch and sample0, the tensor group and pipeline stage as its tp, pp_size, pp_rank.
 */
#ifndef TFB_BERT_H
#define TFB_BERT_H
#include "workload.h"

typedef struct {
    const char *name;
    int layers, hidden, heads, ffn;
    int vocab, max_pos, type_vocab;
} bert_config;

/* The named configuration, or NULL. */
const bert_config *bert_config_find(const char *name);
/* "bert-tiny, bert-mini, ..." */
const char *bert_config_names(void);
/* Units a pipeline can place: embeddings, each layer, heads. */
int bert_units(const bert_config *c);
/* Parameter count including the pre-training heads. */
size_t bert_param_count(const bert_config *c);
/* Training FLOPs per sequence: 3 x forward, 2 FLOPs per multiply-add, MLM on masked positions only. */
double bert_train_flops(const bert_config *c, int seq_len, int masked);

tfb_status bert_create(const bert_config *c, const tfb_workload_config *wc, tfb_backend *be, tfb_workload **out);

#endif
