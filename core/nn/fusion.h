/*
** Fusions: a layer and the ReLU right after it, run as one operation. Containers ask
** lamp_fusion_with_relu about each adjacent pair once, when they are built; this is the one place
** that decides which pairs fuse, and each fusion names the layer's own entry points for it.
** A fusion must give the same bits as the pair run one after the other and pay for itself (one
** pass and one stored activation fewer); tests/unit/test_fusion.c checks both.
*/
#ifndef LAMP_NN_FUSION_H
#define LAMP_NN_FUSION_H

#include "nn/layer.h"

typedef struct lamp_fusion {
  const char *name; /* "BatchNorm2d+ReLU" */
  /* y = relu(layer(x)), rounded once to y's dtype; the layer's own output is never stored. */
  lamp_status (*forward)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y);
  /*
  ** The pair's combined backward (as lamp_layer_ops.backward), dy at the ReLU's output, the
  ** ReLU's mask applied inside the layer's passes. NULL: the pair goes back one by one, the
  ** ReLU's backward reading only the rectified output, and the layer handed that output as its
  ** own (which only layers whose backward ignores y can allow).
  */
  lamp_status (*backward)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                          const lamp_tensor *dy, lamp_tensor *dx, size_t first_param);
} lamp_fusion;

/* The fusion of `layer` with `next`, or NULL when the pair runs as two layers. */
const lamp_fusion *lamp_fusion_with_relu(const lamp_layer *layer, const lamp_layer *next);

/* The fused forms the layers provide (batchnorm.c, residual.c), and the tests that find them. */
int lamp_layer_is_batchnorm2d(const lamp_layer *layer);
lamp_status lamp_batchnorm2d_forward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                          lamp_tensor *y);
lamp_status lamp_batchnorm2d_backward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                           const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx,
                                           size_t first_param);
int lamp_layer_is_residual(const lamp_layer *layer);
lamp_status lamp_residual_forward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       lamp_tensor *y);

#endif
