/*
** BatchNorm2d over the channels of NCHW tensors, PyTorch's semantics:
**   training:   y = (x - mean_B) / sqrt(var_B + eps) * weight + bias with the batch's mean and
**               biased variance; running_mean/var move by `momentum` toward the batch's mean
**               and UNBIASED variance; num_batches_tracked counts the batches.
**   evaluation: the running statistics replace the batch's.
**
** Precision (DESIGN.md, Numerics): statistics, normalisation and gradients run in fp32 under
** every policy. weight and bias are declared keep_f32, so the model binds them to fp32 storage
** even when the other weights are 16-bit; the running statistics live in the model's fp32
** buffer slab. 16-bit inputs and output gradients are read as they are (the kernels widen them
** exactly, a chunk at a time; no fp32 copy is kept); the output and the input gradient are
** rounded once to their dtype.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

enum { BN_WEIGHT, BN_BIAS };
enum { BUF_MEAN, BUF_VAR, BUF_COUNT, BN_BUFFERS };

typedef struct batchnorm {
  lamp_layer base;
  int64_t c;
  double momentum, eps;
  int affine;
  lamp_tensor *weight, *bias, *gweight, *gbias;
  lamp_tensor *buffers[BN_BUFFERS];
  int trained;                    /* the last forward used batch statistics */
  int rectified;                  /* the last forward was forward_relu */
  /* per channel, [c] each: of the last forward (mean, invstd, and its y = x * scale + shift),
     and scratch */
  float *mean, *invstd, *scale, *shift, *p, *q, *r;
  double *sum_a, *sum_ab;
} batchnorm;

static const char *name_of(const batchnorm *b, char *buf, size_t size) {
  snprintf(buf, size, "BatchNorm2d(%lld)", (long long)b->c);
  return buf;
}

static float *f32(const lamp_tensor *t) { return lamp_tensor_data(t); }

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

/* ---- forward ------------------------------------------------------------------------------- */

static float weight_at(const batchnorm *b, size_t k) { return b->affine ? f32(b->weight)[k] : 1.0f; }
static float bias_at(const batchnorm *b, size_t k) { return b->affine ? f32(b->bias)[k] : 0.0f; }

/* Batch statistics into b->mean / b->invstd, and the running statistics' update. */
static lamp_status batch_statistics(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, size_t n, size_t hw) {
  size_t c = (size_t)b->c, m = n * hw;
  char name[64];
  if (m < 2)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: training needs more than one value per channel, got %zu",
                      name_of(b, name, sizeof name), m);
  /*
  ** One pass: the sum, and the sum of squares about a shift s = the channel's first value.
  ** var = E[(x - s)^2] - (mean - s)^2 has no catastrophic cancellation because s lies within
  ** the data (mean - s is of the order of the standard deviation), unlike E[x^2] - mean^2.
  */
  const char *xd = lamp_tensor_data(x);
  size_t size = lamp_dtype_size(x->dtype);
  lamp_status st = LAMP_OK;
  for (size_t k = 0; k < c && st == LAMP_OK; k++)
    st = lamp_convert(exec->device, &b->p[k], LAMP_F32, xd + k * hw * size, x->dtype, 1);
  if (st == LAMP_OK)
    st = lamp_channel_reduce(exec->device, xd, x->dtype, b->p, xd, x->dtype, b->p, n, c, hw, b->sum_a, b->sum_ab);
  if (st != LAMP_OK) return st;
  float *rm = f32(b->buffers[BUF_MEAN]), *rv = f32(b->buffers[BUF_VAR]);
  double mom = b->momentum;
  for (size_t k = 0; k < c; k++) {
    double mean = b->sum_a[k] / (double)m, shift = mean - b->p[k];
    double sq = b->sum_ab[k] - (double)m * shift * shift; /* sum of (x - mean)^2 */
    b->sum_ab[k] = sq > 0 ? sq : 0.0;
    b->mean[k] = (float)mean;
    double var = b->sum_ab[k] / (double)m;
    b->invstd[k] = (float)(1.0 / sqrt(var + b->eps));
    rm[k] = (float)((1.0 - mom) * rm[k] + mom * b->mean[k]);
    rv[k] = (float)((1.0 - mom) * rv[k] + mom * b->sum_ab[k] / (double)(m - 1));
  }
  f32(b->buffers[BUF_COUNT])[0] += 1.0f;
  return LAMP_OK;
}

static void running_statistics(batchnorm *b) {
  const float *rm = f32(b->buffers[BUF_MEAN]), *rv = f32(b->buffers[BUF_VAR]);
  for (size_t k = 0; k < (size_t)b->c; k++) {
    b->mean[k] = rm[k];
    b->invstd[k] = (float)(1.0 / sqrt((double)rv[k] + b->eps));
  }
}

/* relu: a ReLU rides on the pass; skip (then relu too): a residual branch added before it. */
static lamp_status forward_pass(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *skip,
                                lamp_tensor *y, int relu) {
  size_t n, hw, c = (size_t)b->c;
  lamp_status st = check_bound(b);
  if (st == LAMP_OK) st = check_input(b, x, &n, &hw);
  if (st == LAMP_OK) st = check_tensor(b, y, "output", x);
  if (st == LAMP_OK && skip != NULL) st = check_tensor(b, skip, "residual branch", x);
  if (st != LAMP_OK) return st;
  b->trained = exec->training;
  if (exec->training) st = batch_statistics(b, exec, x, n, hw);
  else running_statistics(b);
  if (st != LAMP_OK) return st;
  for (size_t k = 0; k < c; k++) { /* the normalisation and the affine map in one pass */
    b->scale[k] = weight_at(b, k) * b->invstd[k];
    b->shift[k] = bias_at(b, k) - b->mean[k] * b->scale[k];
  }
  b->rectified = relu && skip == NULL;
  if (skip != NULL)
    return lamp_channel_affine_add_relu(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(x), x->dtype,
                                        b->scale, b->shift, lamp_tensor_data(skip), skip->dtype, n, c, hw);
  return lamp_channel_affine(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(x), x->dtype, b->scale,
                             b->shift, n, c, hw, relu);
}

static lamp_status bn_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  return forward_pass((batchnorm *)layer, exec, x, NULL, y, 0);
}

/* The ReLU after a BatchNorm rides on its affine pass; backward never reads y (see layer.h). */
static lamp_status bn_forward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  return forward_pass((batchnorm *)layer, exec, x, NULL, y, 1);
}

/* A residual block's closing sum and ReLU ride on the affine pass; backward never reads y. */
static lamp_status bn_forward_add_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *skip, lamp_tensor *y) {
  return forward_pass((batchnorm *)layer, exec, x, skip, y, 1);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* g (+)= v for a c-vector of fp32 sums, in exec->grad_dtype (see Linear's bias gradient). */
static lamp_status add_grad(const lamp_exec *exec, float *g, float *v, size_t c) {
  if (exec->grad_dtype == LAMP_F32) {
    if (exec->overwrite_grads) {
      memcpy(g, v, c * sizeof *g);
      return LAMP_OK;
    }
    return lamp_axpy(exec->device, g, v, c, 1.0f);
  }
  if (exec->overwrite_grads) return lamp_round_through(exec->device, g, v, exec->grad_dtype, c);
  return lamp_accumulate_rounded(exec->device, g, v, exec->grad_dtype, c);
}

/* The mask of the ReLU fused after the last forward, for a rectified output of y_dtype. */
static lamp_relu_mask relu_mask(const batchnorm *b, lamp_dtype y_dtype) {
  float bound = y_dtype == LAMP_F16 ? LAMP_F16_ZERO_BOUND : y_dtype == LAMP_BF16 ? LAMP_BF16_ZERO_BOUND : 0.0f;
  return (lamp_relu_mask){b->scale, b->shift, bound};
}

/*
** With xhat = (x - mean) * invstd and M = n * hw values per channel:
**   dweight = sum(dy * xhat), dbias = sum(dy)
**   training:   dx = w*invstd * (dy - sum(dy)/M - xhat * sum(dy*xhat)/M), the batch statistics
**               depending on x; written p*dy + q*x + r per channel.
**   evaluation: dx = w * invstd * dy (the running statistics are constants).
** mask: dy is the gradient at the output of the ReLU fused after this layer, read through that
** ReLU's mask (backward_relu); NULL: dy is this layer's own output gradient.
*/
static lamp_status backward_pass(batchnorm *b, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *dy,
                                 lamp_tensor *dx, int grads, const lamp_relu_mask *mask) {
  size_t n, hw, c = (size_t)b->c;
  lamp_status st = check_bound(b);
  if (st == LAMP_OK) st = check_input(b, x, &n, &hw);
  if (st == LAMP_OK) st = check_tensor(b, dy, "output gradient", x);
  if (st == LAMP_OK && dx != NULL) st = check_tensor(b, dx, "input gradient", x);
  if (st != LAMP_OK) return st;
  const void *xd = lamp_tensor_data(x), *dyd = lamp_tensor_data(dy);
  if (mask != NULL)
    st = lamp_channel_reduce_masked(exec->device, dyd, dy->dtype, xd, x->dtype, b->mean, mask, n, c, hw, b->sum_a,
                                    b->sum_ab);
  else
    st = lamp_channel_reduce(exec->device, dyd, dy->dtype, NULL, xd, x->dtype, b->mean, n, c, hw, b->sum_a,
                             b->sum_ab);
  if (st != LAMP_OK) return st;
  double m = (double)(n * hw);
  if (grads && b->affine) {
    for (size_t k = 0; k < c; k++) {
      b->p[k] = (float)(b->sum_ab[k] * b->invstd[k]);
      b->q[k] = (float)b->sum_a[k];
    }
    st = add_grad(exec, f32(b->gweight), b->p, c);
    if (st == LAMP_OK) st = add_grad(exec, f32(b->gbias), b->q, c);
    if (st != LAMP_OK) return st;
  }
  if (dx == NULL || n * hw == 0) return LAMP_OK;
  for (size_t k = 0; k < c; k++) {
    double a = (double)weight_at(b, k) * b->invstd[k];
    double q = b->trained ? -a * b->invstd[k] * b->invstd[k] * b->sum_ab[k] / m : 0.0;
    b->p[k] = (float)a;
    b->q[k] = (float)q;
    b->r[k] = b->trained ? (float)(-a * b->sum_a[k] / m - q * b->mean[k]) : 0.0f;
  }
  /* a 16-bit dx is rounded as it is written (the walk hands it a buffer of its own) */
  if (mask != NULL)
    return lamp_channel_combine_masked(exec->device, lamp_tensor_data(dx), dx->dtype, dyd, dy->dtype, xd, x->dtype,
                                       b->p, b->q, b->r, mask, n, c, hw);
  return lamp_channel_combine_typed(exec->device, lamp_tensor_data(dx), dx->dtype, dyd, dy->dtype, xd, x->dtype, b->p,
                                    b->q, b->r, n, c, hw);
}

static lamp_status bn_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                     const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  (void)y;
  if (dx == NULL) return LAMP_OK;
  return backward_pass((batchnorm *)layer, exec, x, dy, dx, 0, NULL);
}

static lamp_status bn_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *dy) {
  if (!((batchnorm *)layer)->affine) return LAMP_OK;
  return backward_pass((batchnorm *)layer, exec, x, dy, NULL, 1, NULL);
}

static lamp_status bn_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                               const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  (void)y;
  batchnorm *b = (batchnorm *)layer;
  lamp_status st = backward_pass(b, exec, x, dy, dx, 1, NULL);
  if (st == LAMP_OK && b->affine && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  return st;
}

/* The pair of forward_relu in one backward: the ReLU's mask rides on the reduce and combine passes,
   recomputed from x (relu_mask), so neither the ReLU's pass nor its input gradient exists. */
static lamp_status bn_backward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                    const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  batchnorm *b = (batchnorm *)layer;
  char name[64];
  if (!b->rectified)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: backward through a fused ReLU after a forward without it",
                      name_of(b, name, sizeof name));
  lamp_relu_mask mask = relu_mask(b, y->dtype);
  lamp_status st = backward_pass(b, exec, x, dy, dx, 1, &mask);
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
  free(b->mean);
  free(b->sum_a);
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
    .forward_relu = bn_forward_relu,
    .backward_relu = bn_backward_relu,
    .forward_add_relu = bn_forward_add_relu,
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
  size_t c = (size_t)channels;
  if (b != NULL) {
    b->mean = calloc(7 * c, sizeof *b->mean); /* mean, invstd, scale, shift, p, q, r */
    b->sum_a = calloc(2 * c, sizeof *b->sum_a);
  }
  if (b == NULL || b->mean == NULL || b->sum_a == NULL) {
    if (b != NULL) {
      free(b->mean);
      free(b->sum_a);
    }
    free(b);
    return lamp_error(LAMP_ERR_SYSTEM, "BatchNorm2d: out of memory");
  }
  b->invstd = b->mean + c;
  b->scale = b->mean + 2 * c;
  b->shift = b->mean + 3 * c;
  b->p = b->mean + 4 * c;
  b->q = b->mean + 5 * c;
  b->r = b->mean + 6 * c;
  b->sum_ab = b->sum_a + c;
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
