/* bert.h — BERT pre-training (post-LN encoder, MLM head tied to the word embedding, NSP head) as a workload.
 *
 * Shapes follow google-research/bert; see bert.c for the kernel sequence. This header does not know about ranks:
 * the data-parallel split arrives as tfb_workload_config.local_batch and sample0.
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
/* Parameter count including the pre-training heads. */
size_t bert_param_count(const bert_config *c);
/* Training FLOPs per sequence: 3 x forward, 2 FLOPs per multiply-add, MLM on masked positions only. */
double bert_train_flops(const bert_config *c, int seq_len, int masked);

tfb_status bert_create(const bert_config *c, const tfb_workload_config *wc, tfb_backend *be, tfb_workload **out);

#endif
