/* resnet.h — ResNet image classification (ResNet-50 v1.5, ResNet-18, a tiny ResNet for tests) as a workload:
 * convolution + batch norm units, bottleneck or basic blocks, global average pool, a fully connected layer and
 * softmax cross-entropy, trained with SGD and momentum. See resnet.c for the kernel sequence.
 */
#ifndef TFB_RESNET_H
#define TFB_RESNET_H
#include "workload.h"

typedef struct {
    const char *name;
    int stem_kernel, stem_stride, stem_width, stem_pool; /* stem conv k x k / stride, then max pool 3x3/2 or not */
    int bottleneck;          /* 1: 1x1-3x3-1x1 blocks, output 4 x width; 0: basic 3x3-3x3 blocks */
    int stages;
    int blocks[4], widths[4];
    int classes;
    int default_image;
} resnet_config;

const resnet_config *resnet_config_find(const char *name);
const char *resnet_config_names(void);
/* Units a pipeline can place: stem, each block, head. */
int resnet_units(const resnet_config *c);
/* Trainable parameters (convolutions, batch-norm gamma and beta, the FC layer). */
size_t resnet_param_count(const resnet_config *c);
/* Forward multiply-adds per image at image x image, stride on the 3x3 (v1.5) or, with v1, on the first 1x1. */
double resnet_forward_macs(const resnet_config *c, int image, int v1);
/* Training FLOPs per image: 3 x forward minus the first convolution's backward-data, 2 FLOPs per MAC. */
double resnet_train_flops(const resnet_config *c, int image);

tfb_status resnet_create(const resnet_config *c, const tfb_workload_config *wc, tfb_backend *be, tfb_workload **out);

#endif
