/*
** Which pairs fuse. BatchNorm2d + ReLU: the ReLU rides on the affine pass forward and on the
** reduce and combine passes backward (its mask recomputed from the input), so neither its pass,
** nor its input, nor the gradient at the BatchNorm's output is ever formed. Residual + ReLU: the
** ReLU rides on the sum that closes the block.
*/
#include <stddef.h>

#include "nn/fusion.h"

static const lamp_fusion batchnorm_relu = {"BatchNorm2d+ReLU", lamp_batchnorm2d_forward_relu,
                                           lamp_batchnorm2d_backward_relu};
static const lamp_fusion residual_relu = {"Residual+ReLU", lamp_residual_forward_relu, NULL};

const lamp_fusion *lamp_fusion_with_relu(const lamp_layer *layer, const lamp_layer *next) {
  if (!lamp_layer_is_relu(next)) return NULL;
  if (lamp_layer_is_batchnorm2d(layer)) return &batchnorm_relu;
  if (lamp_layer_is_residual(layer)) return &residual_relu;
  return NULL;
}
