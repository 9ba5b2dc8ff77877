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
typedef struct lamp_scratch lamp_scratch; /* scratch.h */

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
  int keep_f32;     /* 1: the layer reads this parameter in fp32 under every policy (norm
                       weights): the model binds it to fp32 storage (the masters, or the fp32
                       copy the optimizer updates), never to a 16-bit slab */
} lamp_param_decl;

/*
** A buffer: fp32 state that is not trained but belongs to the model (BatchNorm's running
** statistics). The model packs every buffer into one fp32 slab, initialises it and binds
** views, as it does for parameters; the trainer broadcasts and checkpoints the slab.
*/
typedef struct lamp_buffer_decl {
  const char *name; /* "running_mean"; containers prefix child indices like parameters */
  int ndim;
  int64_t shape[LAMP_MAX_DIMS];
  lamp_init_kind init; /* zeros or ones */
} lamp_buffer_decl;

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
  /*
  ** Randomness of stochastic layers (Dropout), reproducible from the model's seed: a layer
  ** draws from a generator seeded by (seed, forward_index, stream), taking its stream number
  ** from *rng_streams (reset to 0 by every forward) so that two Dropouts in one forward get
  ** different masks. rng_streams may be NULL (a layer driven without a model): the layer then
  ** counts its own forwards.
  */
  uint64_t seed;
  uint64_t forward_index;
  uint64_t *rng_streams;
  /*
  ** Which of its host buffers a layer that uploads from the host (Dropout's mask) draws into:
  ** the micro-step of the optimizer step, given by the trainer (0 otherwise). A buffer is drawn
  ** into again by the same micro-step of a later optimizer step, after the step's one
  ** synchronisation, so waiting for its last upload costs nothing.
  */
  unsigned host_slot;
  /*
  ** nn.Recompute (recompute.c). scratch: the model's scratch (scratch.h) that every Recompute of
  ** it shares; NULL for layers driven without a model. in_scratch: set inside a Recompute:
  ** containers take the tensors they keep between their children (outputs and their gradients)
  ** from exec->scratch instead of owning them (lamp_nn_intermediate). repeat: this forward
  ** repeats the last training forward of these layers, in a Recompute's backward: Dropout applies
  ** the mask it drew then (no new draw, no stream taken), BatchNorm computes the same batch
  ** statistics but leaves its running statistics alone.
  */
  lamp_scratch *scratch;
  int in_scratch;
  int repeat;
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

  /* Optional (NULL for layers without buffers): buffer declarations, and binding buffer i to
     an fp32 view of the model's buffer slab (NULL unbinds), with bind's rules. */
  size_t (*buffer_count)(const lamp_layer *layer);
  lamp_status (*buffer_decl)(const lamp_layer *layer, size_t i, lamp_buffer_decl *out, char *name_buf,
                             size_t name_size);
  lamp_status (*bind_buffer)(lamp_layer *layer, size_t i, lamp_tensor *buffer);

  /* Optional (NULL for leaves): the children of a container, for printing the tree. */
  size_t (*child_count)(const lamp_layer *layer);
  lamp_layer *(*child)(const lamp_layer *layer, size_t i);
} lamp_layer_ops;

struct lamp_layer {
  const lamp_layer_ops *ops;
  int refcount;
};

lamp_layer *lamp_layer_retain(lamp_layer *layer);
void lamp_layer_release(lamp_layer *layer); /* NULL is a no-op */

/* 0 for layers without buffers (buffer_count NULL). */
size_t lamp_layer_buffer_count(const lamp_layer *layer);
/* A child's share of a combined backward: its backward op, or for a leaf accumulate_grads
   (announced through exec->grads_ready at first_param) then backward_input. */
lamp_status lamp_layer_backward_walk(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                     const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx, size_t first_param);
/* Parameter elements the layer declares (what it will have once built). */
lamp_status lamp_layer_param_numel(const lamp_layer *layer, size_t *out);
/*
** The tree with parameter counts, one layer a line, and the total:
**   Sequential                                  [1,234 parameters]
**     (1): Conv2d(1 -> 16, 3x3, padding 1, no bias)          144
**   ...
** Truncated (terminated) when buf is too small.
*/
void lamp_layer_summary(const lamp_layer *layer, char *buf, size_t size);

/* Constructors. Each returns a layer with refcount 1. */
lamp_status lamp_linear_new(lamp_layer **out, int64_t in_features, int64_t out_features, int bias);
lamp_status lamp_relu_new(lamp_layer **out);
int lamp_layer_is_relu(const lamp_layer *layer); /* 1 for a layer made by lamp_relu_new */

/* Retains each child. */
lamp_status lamp_sequential_new(lamp_layer **out, lamp_layer *const *children, size_t n);

/* Conv2d on NCHW tensors; weight [out, in/groups, k, k] (PyTorch's layout), bias [out]. */
typedef struct lamp_conv2d_options {
  int64_t stride, padding, dilation, groups; /* 0 means the default: 1, 0, 1, 1 */
  int no_bias;                               /* 0: with bias (PyTorch's default) */
} lamp_conv2d_options;
lamp_status lamp_conv2d_new(lamp_layer **out, int64_t in_channels, int64_t out_channels, int64_t kernel,
                            const lamp_conv2d_options *options); /* options may be NULL */

/* BatchNorm2d over the channels of NCHW tensors. weight [C], bias [C] (keep_f32, no decay);
   buffers running_mean [C], running_var [C], num_batches_tracked [1]. */
typedef struct lamp_batchnorm_options {
  double momentum; /* 0 means the default 0.1; in (0, 1] otherwise */
  double eps;      /* <= 0 means the default 1e-5 */
  int no_affine;   /* 1: no weight and bias */
} lamp_batchnorm_options;
lamp_status lamp_batchnorm2d_new(lamp_layer **out, int64_t channels, const lamp_batchnorm_options *options);

/* What a BatchNorm2d reads (for tests and tools): its bound views, NULL where unbound. */
typedef struct lamp_batchnorm_views {
  const lamp_tensor *weight, *bias, *running_mean, *running_var, *num_batches_tracked;
} lamp_batchnorm_views;
lamp_status lamp_batchnorm2d_views(const lamp_layer *layer, lamp_batchnorm_views *out);

/* Pooling over NCHW. stride 0 means stride = kernel. AvgPool counts padding (PyTorch's
   count_include_pad = True). GlobalAvgPool: [N, C, H, W] -> [N, C, 1, 1]. */
lamp_status lamp_maxpool2d_new(lamp_layer **out, int64_t kernel, int64_t stride, int64_t padding);
lamp_status lamp_avgpool2d_new(lamp_layer **out, int64_t kernel, int64_t stride, int64_t padding);
lamp_status lamp_global_avgpool_new(lamp_layer **out);

/* [N, d1, d2, ...] -> [N, d1 * d2 * ...]. */
lamp_status lamp_flatten_new(lamp_layer **out);

/* Zeroes each element with probability p in training (survivors scaled by 1/(1-p));
   the identity in evaluation. 0 <= p < 1. */
lamp_status lamp_dropout_new(lamp_layer **out, double p);

/*
** Activation recomputation: in a training forward the module's intermediate tensors go to the
** model's shared scratch and are overwritten by the next Recompute; its backward runs its forward
** again (the same kernels on the same input: the same bits) and then its backward. Parameters and
** buffers are the module's, under the module's own names (no name level of its own). Retains
** module.
*/
lamp_status lamp_recompute_new(lamp_layer **out, lamp_layer *module);

/* y = block(x) + (projection ? projection(x) : x). Retains block and projection (may be NULL);
   parameters: the block's, then the projection's. */
lamp_status lamp_residual_new(lamp_layer **out, lamp_layer *block, lamp_layer *projection);

#endif
