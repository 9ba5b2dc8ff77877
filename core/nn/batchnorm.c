/*
** BatchNorm2d over the channels of NCHW tensors, PyTorch's semantics (see
** lamp_batchnorm_forward in backend.h): batch statistics in training, running statistics in
** evaluation; running_mean/var move by `momentum` toward the batch's mean and UNBIASED variance,
** num_batches_tracked counts the batches.
**
** Precision: statistics, normalisation and gradients run in fp32 under every policy. weight and
** bias are declared keep_f32, so the model binds them to fp32 storage even when the other weights
** are 16-bit; the running statistics live in the model's fp32 buffer slab. 16-bit inputs and
** output gradients are read as they are; the output and the input gradient are rounded once to
** their dtype.
**
** The layer checks shapes and holds its parameters, buffers and the statistics its last forward
** saved (on the device, for backward); the device's backend does the arithmetic.
**
** A repeated training forward (exec->repeat, in nn.Recompute's backward) computes the batch
** statistics again, to the same bits, but the running statistics must move once per training
** forward: the backend's training forward always moves them, so the repeat hands it a sink of
** the same shape instead, whose values nothing reads.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/fusion.h"
#include "nn/layer.h"
#include "nn/layer_util.h"

enum { BN_WEIGHT, BN_BIAS };
enum { BUF_MEAN, BUF_VAR, BUF_COUNT, BN_BUFFERS };

typedef struct batchnorm {
  lamp_layer base;
  int64_t c;
  double momentum, eps;
  int affine;
  lamp_tensor *weight, *bias, *gweight, *gbias;
  lamp_tensor *buffers[BN_BUFFERS];
  lamp_tensor *saved;             /* fp32 [4C] on the device: the last forward's mean, 1/std, scale, shift */
  lamp_tensor *sink;              /* fp32 [2C + 1]: running statistics a repeated forward moves instead */
  int trained;                    /* the last forward used batch statistics */
  int rectified;                  /* the last forward had the ReLU fused on */
} batchnorm;

static const char *name_of(const batchnorm *b, char *buf, size_t size) {
  snprintf(buf, size, "BatchNorm2d(%lld)", (long long)b->c);
  return buf;
}

/* [batch, channels, ...] with channels == C: the trailing dimensions form the plane. */
static lamp_status check_shape(const batchnorm *b, int ndim, const int64_t *in, const char *what, size_t *n,
                               size_t *hw) {
  char name[64];
  if (ndim < 2 || in[0] < 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be [batch, channels, height, width]",
                      name_of(b, name, sizeof name), what);
  if (in[1] != b->c)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s has %lld channels, expected %lld",
                      name_of(b, name, sizeof name), what, (long long)in[1], (long long)b->c);
  size_t plane = 1;
  if (!lamp_shape_numel(ndim - 2, in + 2, &plane))
    return lamp_error_context(LAMP_ERR_INVALID_ARG, "%s: input %s", name_of(b, name, sizeof name), what);
  if (n != NULL) *n = (size_t)in[0];
  if (hw != NULL) *hw = plane;
  return LAMP_OK;
}

static lamp_status check_tensor(const batchnorm *b, const lamp_tensor *t, const char *role, const lamp_tensor *like) {
  char what[128], name[64], want[128];
  if (lamp_nn_is_activation(t) && lamp_nn_same_shape(t, like)) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s %s, expected a contiguous floating-point tensor shaped %s",
                    name_of(b, name, sizeof name), role, lamp_tensor_describe(t, what, sizeof what),
                    lamp_nn_shape_text(like->ndim, like->shape, want, sizeof want));
}

static lamp_status check_input(const batchnorm *b, const lamp_tensor *x, size_t *n, size_t *hw) {
  char what[128], name[64];
  lamp_tensor_describe(x, what, sizeof what);
  lamp_status st = check_shape(b, x->ndim, x->shape, what, n, hw);
  if (st == LAMP_OK && !lamp_nn_is_activation(x))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be a contiguous f32, f16 or bf16 tensor",
                      name_of(b, name, sizeof name), what);
  return st;
}

static lamp_status check_bound(const batchnorm *b) {
  char name[64];
  if (b->affine && (b->weight == NULL || b->bias == NULL))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: parameters are not bound (build a model first)",
                      name_of(b, name, sizeof name));
  for (int i = 0; i < BN_BUFFERS; i++)
    if (b->buffers[i] == NULL)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: running statistics are not bound (build a model first)",
                        name_of(b, name, sizeof name));
  return LAMP_OK;
}

static lamp_status bn_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                   int64_t *out) {
  const batchnorm *b = (const batchnorm *)layer;
  char what[128];
  lamp_nn_shape_text(ndim, in, what, sizeof what);
  lamp_status st = check_shape(b, ndim, in, what, NULL, NULL);
  if (st != LAMP_OK) return st;
  *out_ndim = ndim;
  for (int i = 0; i < ndim; i++) out[i] = in[i];
  return LAMP_OK;
}

/* ---- parameters and buffers ---------------------------------------------------------------- */

static size_t bn_param_count(const lamp_layer *layer) { return ((const batchnorm *)layer)->affine ? 2 : 0; }

/* weight = 1, bias = 0 (PyTorch's reset_parameters); fp32 under every policy, no decay. */
static lamp_status bn_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                 size_t name_size) {
  const batchnorm *b = (const batchnorm *)layer;
  (void)name_buf, (void)name_size;
  if (i >= bn_param_count(layer)) {
    char name[64];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no parameter %zu", name_of(b, name, sizeof name), i);
  }
  *out = (lamp_param_decl){0};
  out->name = i == BN_WEIGHT ? "weight" : "bias";
  out->ndim = 1;
  out->shape[0] = b->c;
  out->init = i == BN_WEIGHT ? LAMP_INIT_ONES : LAMP_INIT_ZEROS;
  out->decay = 0;
  out->keep_f32 = 1;
  return LAMP_OK;
}

static lamp_status bn_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  batchnorm *b = (batchnorm *)layer;
  char name[64];
  lamp_param_decl d;
  lamp_status st = bn_param_decl(layer, i, &d, NULL, 0);
  if (st != LAMP_OK) return st;
  return lamp_nn_bind_param(name_of(b, name, sizeof name), &d, i == BN_WEIGHT ? &b->weight : &b->bias,
                            i == BN_WEIGHT ? &b->gweight : &b->gbias, weight, grad);
}

static size_t bn_buffer_count(const lamp_layer *layer) {
  (void)layer;
  return BN_BUFFERS;
}

static lamp_status bn_buffer_decl(const lamp_layer *layer, size_t i, lamp_buffer_decl *out, char *name_buf,
                                  size_t name_size) {
  const batchnorm *b = (const batchnorm *)layer;
  (void)name_buf, (void)name_size;
  static const char *const names[BN_BUFFERS] = {"running_mean", "running_var", "num_batches_tracked"};
  if (i >= BN_BUFFERS) {
    char name[64];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no buffer %zu", name_of(b, name, sizeof name), i);
  }
  *out = (lamp_buffer_decl){0};
  out->name = names[i];
  out->ndim = 1;
  out->shape[0] = i == BUF_COUNT ? 1 : b->c;
  out->init = i == BUF_VAR ? LAMP_INIT_ONES : LAMP_INIT_ZEROS;
  return LAMP_OK;
}

static lamp_status bn_bind_buffer(lamp_layer *layer, size_t i, lamp_tensor *buffer) {
  batchnorm *b = (batchnorm *)layer;
  char name[64];
  lamp_buffer_decl d;
  lamp_status st = bn_buffer_decl(layer, i, &d, NULL, 0);
  if (st != LAMP_OK) return st;
  if (buffer == NULL) {
    lamp_tensor_release(b->buffers[i]);
    b->buffers[i] = NULL;
    return LAMP_OK;
  }
  if (b->buffers[i] != NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s is already bound (a layer belongs to one model, once)",
                      name_of(b, name, sizeof name), d.name);
  if (buffer->dtype != LAMP_F32 || !lamp_nn_has_shape(buffer, d.ndim, d.shape))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s needs a contiguous f32 view of %lld elements",
                      name_of(b, name, sizeof name), d.name, (long long)d.shape[0]);
  b->buffers[i] = lamp_tensor_retain(buffer);
  return LAMP_OK;
}

/* ---- forward and backward ------------------------------------------------------------------- */

static const float *data_or_null(const lamp_tensor *t) { return t != NULL ? lamp_tensor_data(t) : NULL; }

/* The arguments every call shares: shape, x, the affine parameters and the saved statistics. */
static lamp_status common_args(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, lamp_batchnorm_args *a) {
  size_t n, hw;
  lamp_status st = check_bound(b);
  if (st == LAMP_OK) st = check_input(b, x, &n, &hw);
  int64_t shape[1] = {4 * b->c};
  if (st == LAMP_OK) st = lamp_tensor_ensure(&b->saved, LAMP_F32, exec->device, 1, shape, LAMP_MEM_WORKSPACE);
  if (st != LAMP_OK) return st;
  *a = (lamp_batchnorm_args){.batch = n, .channels = (size_t)b->c, .plane = hw, .momentum = b->momentum,
                             .eps = b->eps, .x = lamp_tensor_data(x), .x_dtype = x->dtype,
                             .weight = b->affine ? data_or_null(b->weight) : NULL,
                             .bias = b->affine ? data_or_null(b->bias) : NULL, .saved = lamp_tensor_data(b->saved)};
  return LAMP_OK;
}

/* A repeated forward's running statistics: the sink's (a new tensor is zeros), not the buffers'. */
static lamp_status point_at_sink(batchnorm *b, const lamp_exec *exec, lamp_batchnorm_args *a) {
  int64_t shape[1] = {2 * b->c + 1};
  lamp_status st = lamp_tensor_ensure(&b->sink, LAMP_F32, exec->device, 1, shape, LAMP_MEM_WORKSPACE);
  if (st != LAMP_OK) return st;
  float *sink = lamp_tensor_data(b->sink);
  a->running_mean = sink;
  a->running_var = sink + b->c;
  a->batches_tracked = sink + 2 * b->c;
  return LAMP_OK;
}

/* relu: a ReLU rides on the affine pass. */
static lamp_status forward_pass(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y, int relu) {
  lamp_batchnorm_args a;
  char name[64];
  lamp_status st = common_args(b, exec, x, &a);
  if (st == LAMP_OK) st = check_tensor(b, y, "output", x);
  if (st != LAMP_OK) return st;
  if (exec->training && a.batch * a.plane < 2)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: training needs more than one value per channel, got %zu",
                      name_of(b, name, sizeof name), a.batch * a.plane);
  a.training = exec->training;
  a.relu = relu;
  a.y = lamp_tensor_data(y);
  a.y_dtype = y->dtype;
  a.running_mean = lamp_tensor_data(b->buffers[BUF_MEAN]);
  a.running_var = lamp_tensor_data(b->buffers[BUF_VAR]);
  a.batches_tracked = lamp_tensor_data(b->buffers[BUF_COUNT]);
  if (exec->training && exec->repeat) st = point_at_sink(b, exec, &a);
  if (st == LAMP_OK) st = lamp_batchnorm_forward(exec->device, &a);
  if (st == LAMP_OK) {
    b->trained = exec->training;
    b->rectified = relu;
  }
  return st;
}

static lamp_status bn_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  return forward_pass((batchnorm *)layer, exec, x, y, 0);
}

/*
** dx when dx is not NULL, the parameter gradients when `grads`. With `y` (the rectified output of
** the fused forward), dy is the gradient at the ReLU's output, read through its mask.
*/
static lamp_status backward_pass(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                                 const lamp_tensor *dy, lamp_tensor *dx, int grads) {
  lamp_batchnorm_args a;
  char name[64];
  lamp_status st = common_args(b, exec, x, &a);
  if (st == LAMP_OK) st = check_tensor(b, dy, "output gradient", x);
  if (st == LAMP_OK && dx != NULL) st = check_tensor(b, dx, "input gradient", x);
  if (st != LAMP_OK) return st;
  if (y != NULL && !b->rectified)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: backward through a fused ReLU after a forward without it",
                      name_of(b, name, sizeof name));
  a.training = b->trained;
  a.relu = y != NULL;
  a.y_dtype = y != NULL ? y->dtype : LAMP_F32;
  a.dy = lamp_tensor_data(dy);
  a.dy_dtype = dy->dtype;
  if (dx != NULL) { /* a 16-bit dx is rounded as it is written (the walk hands it a buffer of its own) */
    a.dx = lamp_tensor_data(dx);
    a.dx_dtype = dx->dtype;
  }
  if (grads && b->affine) {
    a.grad_weight = lamp_tensor_data(b->gweight);
    a.grad_bias = lamp_tensor_data(b->gbias);
    a.grad_dtype = exec->grad_dtype;
    a.overwrite_grads = exec->overwrite_grads;
  }
  return lamp_batchnorm_backward(exec->device, &a);
}

static lamp_status bn_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                     const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  (void)y;
  if (dx == NULL) return LAMP_OK;
  return backward_pass((batchnorm *)layer, exec, x, NULL, dy, dx, 0);
}

static lamp_status bn_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *dy) {
  if (!((batchnorm *)layer)->affine) return LAMP_OK;
  return backward_pass((batchnorm *)layer, exec, x, NULL, dy, NULL, 1);
}

static lamp_status bn_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                               const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  (void)y;
  batchnorm *b = (batchnorm *)layer;
  lamp_status st = backward_pass(b, exec, x, NULL, dy, dx, 1);
  if (st == LAMP_OK && b->affine && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  return st;
}

/* ---- fused with the ReLU after it (fusion.h) ---------------------------------------------- */

lamp_status lamp_batchnorm2d_forward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                          lamp_tensor *y) {
  return forward_pass((batchnorm *)layer, exec, x, y, 1);
}

/* The pair in one backward: the ReLU's mask rides on the reduce and combine passes, recomputed
   from x, so neither the ReLU's pass nor its input gradient exists. */
lamp_status lamp_batchnorm2d_backward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                           const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx,
                                           size_t first_param) {
  batchnorm *b = (batchnorm *)layer;
  lamp_status st = backward_pass(b, exec, x, y, dy, dx, 1);
  if (st == LAMP_OK && b->affine && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  return st;
}

static void bn_describe(const lamp_layer *layer, char *buf, size_t size) {
  const batchnorm *b = (const batchnorm *)layer;
  char name[64];
  snprintf(buf, size, "%s", name_of(b, name, sizeof name));
  if (b->momentum != 0.1 || b->eps != 1e-5 || !b->affine) {
    size_t used = strlen(buf);
    if (used > 0 && used < size)
      snprintf(buf + used - 1, size - used + 1, ", momentum %g, eps %g%s)", b->momentum, b->eps,
               b->affine ? "" : ", no affine");
  }
}

static void bn_destroy(lamp_layer *layer) {
  batchnorm *b = (batchnorm *)layer;
  lamp_tensor *ts[] = {b->weight, b->bias, b->gweight, b->gbias};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lamp_tensor_release(ts[i]);
  for (int i = 0; i < BN_BUFFERS; i++) lamp_tensor_release(b->buffers[i]);
  lamp_tensor_release(b->saved);
  lamp_tensor_release(b->sink);
  free(b);
}

static const lamp_layer_ops batchnorm_ops = {
    .type = "BatchNorm2d",
    .output_shape = bn_output_shape,
    .param_count = bn_param_count,
    .param_decl = bn_param_decl,
    .bind = bn_bind,
    .forward = bn_forward,
    .backward_input = bn_backward_input,
    .accumulate_grads = bn_accumulate_grads,
    .backward = bn_backward,
    .describe = bn_describe,
    .destroy = bn_destroy,
    .buffer_count = bn_buffer_count,
    .buffer_decl = bn_buffer_decl,
    .bind_buffer = bn_bind_buffer,
};

lamp_status lamp_batchnorm2d_new(lamp_layer **out, int64_t channels, const lamp_batchnorm_options *options) {
  *out = NULL;
  lamp_batchnorm_options o = options != NULL ? *options : (lamp_batchnorm_options){0};
  if (o.momentum == 0) o.momentum = 0.1;
  if (o.eps <= 0) o.eps = 1e-5;
  if (channels <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "BatchNorm2d(%lld): the channel count must be positive", (long long)channels);
  if (!(o.momentum > 0.0 && o.momentum <= 1.0) || !isfinite(o.eps))
    return lamp_error(LAMP_ERR_INVALID_ARG, "BatchNorm2d(%lld): momentum %g must be in (0, 1] and eps %g finite",
                      (long long)channels, o.momentum, o.eps);
  batchnorm *b = calloc(1, sizeof *b);
  if (b == NULL) return lamp_error(LAMP_ERR_SYSTEM, "BatchNorm2d: out of memory");
  b->base.ops = &batchnorm_ops;
  b->base.refcount = 1;
  b->c = channels;
  b->momentum = o.momentum;
  b->eps = o.eps;
  b->affine = !o.no_affine;
  *out = &b->base;
  return LAMP_OK;
}

lamp_status lamp_batchnorm2d_views(const lamp_layer *layer, lamp_batchnorm_views *out) {
  if (layer->ops != &batchnorm_ops)
    return lamp_error(LAMP_ERR_INVALID_ARG, "BatchNorm2d views: the layer is a %s", layer->ops->type);
  const batchnorm *b = (const batchnorm *)layer;
  *out = (lamp_batchnorm_views){b->weight, b->bias, b->buffers[BUF_MEAN], b->buffers[BUF_VAR], b->buffers[BUF_COUNT]};
  return LAMP_OK;
}

int lamp_layer_is_batchnorm2d(const lamp_layer *layer) { return layer != NULL && layer->ops == &batchnorm_ops; }
