/* models.c — the catalog of model configurations (BERT and ResNet shapes) and lookup by name. Only data and
 * lookup: the command line validates names with it without pulling in any workload code. */
#include <string.h>
#include "bert.h"
#include "resnet.h"

static const bert_config BERT_CONFIGS[] = {
    {"bert-tiny", 2, 128, 2, 512, 30522, 512, 2},    {"bert-mini", 4, 256, 4, 1024, 30522, 512, 2},
    {"bert-small", 4, 512, 8, 2048, 30522, 512, 2},  {"bert-medium", 8, 512, 8, 2048, 30522, 512, 2},
    {"bert-base", 12, 768, 12, 3072, 30522, 512, 2}, {"bert-large", 24, 1024, 16, 4096, 30522, 512, 2},
};
#define N_BERT ((int)(sizeof BERT_CONFIGS / sizeof BERT_CONFIGS[0]))

const bert_config *bert_config_find(const char *name) {
    for (int i = 0; i < N_BERT; i++)
        if (strcmp(BERT_CONFIGS[i].name, name) == 0) return &BERT_CONFIGS[i];
    return NULL;
}

const char *bert_config_names(void) {
    return "bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large";
}

static const resnet_config RESNET_CONFIGS[] = {
    {"resnet50", 7, 2, 64, 1, 1, 4, {3, 4, 6, 3}, {64, 128, 256, 512}, 1000, 224},
    {"resnet18", 7, 2, 64, 1, 0, 4, {2, 2, 2, 2}, {64, 128, 256, 512}, 1000, 224},
    {"resnet-tiny", 3, 1, 16, 1, 1, 2, {1, 1}, {16, 32}, 10, 32},
};
#define N_RESNET ((int)(sizeof RESNET_CONFIGS / sizeof RESNET_CONFIGS[0]))

const resnet_config *resnet_config_find(const char *name) {
    for (int i = 0; i < N_RESNET; i++)
        if (strcmp(RESNET_CONFIGS[i].name, name) == 0) return &RESNET_CONFIGS[i];
    return NULL;
}

const char *resnet_config_names(void) { return "resnet50, resnet18, resnet-tiny"; }
