/*
** Layers. Each layer type is a vtable (lamp_layer_ops) plus a private struct that embeds
** lamp_layer as its first member. Layers never allocate their own parameters: the model
** (model.h) enumerates parameter declarations, allocates flat slabs, and binds views.
**
** Backward is split the Torch way: backward_input computes dL/dx, accumulate_grads adds
** dL/dparams into the bound gradient views (never overwriting, so accumulation over
** micro-batches is free). The model calls backward_input first, then accumulate_grads with
** the same tensors; containers rely on that order to reuse the intermediate gradients they
** computed in backward_input.
*/
#ifndef LAMP_NN_LAYER_H
#define LAMP_NN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

typedef struct lamp_layer lamp_layer;

/* How a parameter is initialised when the model is built. */
typedef enum lamp_init_kind {
  LAMP_INIT_ZEROS = 0,
  LAMP_INIT_ONES = 1,
  LAMP_INIT_UNIFORM = 2 /* U(-bound, bound) */
} lamp_init_kind;

typedef struct lamp_param_decl {
  const char *name; /* layer-local: "weight", "bias"; containers prefix child indices: "2.weight" */
  int ndim;
  int64_t shape[LAMP_MAX_DIMS];
  int decay;        /* default weight-decay flag: 1 for weights, 0 for biases and norm params */
  lamp_init_kind init;
  double bound;     /* for LAMP_INIT_UNIFORM */
} lamp_param_decl;

/* What the precision policy decided, as the layers see it. */
typedef struct lamp_exec {
  lamp_device device;
  lamp_dtype compute_dtype;    /* GEMM inputs */
  lamp_dtype activation_dtype; /* layer outputs stored between layers */
  int training;
  lamp_dtype grad_dtype;       /* parameter gradients are produced in this dtype, then
                                  accumulated into the fp32 gradient slab (f32: directly) */
  int overwrite_grads;         /* set on the first backward after the gradients were
                                  released: accumulate_grads must WRITE every element of
                                  its gradient views instead of adding (saves zeroing) */
  /*
  ** Optional (may be NULL): called during a combined backward as soon as the gradients of
  ** every parameter with declaration index >= first_param are final, so a data-parallel
  ** trainer can start reducing them while the rest of the backward pass runs.
  */
  void (*grads_ready)(void *ctx, size_t first_param);
  void *grads_ready_ctx;
} lamp_exec;

typedef struct lamp_layer_ops {
  const char *type; /* "Linear" */

  /* Shape of the output for an input of this shape (batch first). */
  lamp_status (*output_shape)(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                              int64_t *out);

  /* Parameter declarations, i < param_count. Containers recurse with prefixed names. */
  size_t (*param_count)(const lamp_layer *layer);
  lamp_status (*param_decl)(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                            size_t name_size);

  /*
  ** Binds parameter i: `weight` in the weight storage dtype (what forward reads), `grad` the
  ** fp32 gradient view at the same offset. The layer retains both. Binding a parameter that
  ** is already bound is an error (a layer belongs to one model, once); weight == grad == NULL
  ** unbinds, releasing the views (the model does so when it is freed or a build fails, so
  ** that its slabs are really freed while the user still holds the layers).
  */
  lamp_status (*bind)(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad);

  /* y has been sized by the caller from output_shape, dtype exec->activation_dtype. */
  lamp_status (*forward)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                         lamp_tensor *y);

  /* dx = dL/dx given dy = dL/dy; dx has x's shape and dtype. dx may be NULL: nothing to do. */
  lamp_status (*backward_input)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx);

  /* grad += dL/dparams (grad = dL/dparams when exec->overwrite_grads, every element, even
     for an empty batch). NULL for layers without parameters. */
  lamp_status (*accumulate_grads)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                  const lamp_tensor *dy);

  /*
  ** Optional (NULL for leaves): backward_input and accumulate_grads in one walk, so that
  ** parameter gradients become final layer by layer, each announced through
  ** exec->grads_ready with indices offset by first_param (this layer's first parameter in
  ** the model's declaration order). Containers implement it.
  */
  lamp_status (*backward)(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                          const lamp_tensor *dy, lamp_tensor *dx, size_t first_param);

  /* "Linear(784 -> 1024)"; containers describe their children on following lines. */
  void (*describe)(const lamp_layer *layer, char *buf, size_t size);

  void (*destroy)(lamp_layer *layer); /* frees the private struct */
} lamp_layer_ops;

struct lamp_layer {
  const lamp_layer_ops *ops;
  int refcount;
};

lamp_layer *lamp_layer_retain(lamp_layer *layer);
void lamp_layer_release(lamp_layer *layer); /* NULL is a no-op */

/* Constructors. Each returns a layer with refcount 1. */
lamp_status lamp_linear_new(lamp_layer **out, int64_t in_features, int64_t out_features, int bias);
lamp_status lamp_relu_new(lamp_layer **out);
/* Retains each child. */
lamp_status lamp_sequential_new(lamp_layer **out, lamp_layer *const *children, size_t n);

#endif
