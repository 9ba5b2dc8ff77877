/*
** Linear: y = x W^T + b with W [out, in] (PyTorch layout) and b [out].
**
** Autocast: the GEMMs take their inputs with the values of exec->compute_dtype and accumulate
** in fp32. An input whose dtype differs (fp32 images entering the first layer under a 16-bit
** policy), or any 16-bit input on a device without 16-bit GEMMs (the CPU, where operands are
** kept widened to fp32), is converted into a workspace tensor owned by the layer and reused
** across batches; under an fp32 policy the GEMM reads the tensors in place, so the steady
** state neither copies nor allocates.
**
** The converted copies made in one step are reused by the later phases of the same step
** (W from forward in backward_input, x from forward and dy from backward_input in
** accumulate_grads). That relies on the training-step order: the weights and the input do
** not change between forward and backward. Every forward re-makes them.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "nn/operand.h"

typedef struct linear {
  lamp_layer base;
  int64_t in, out;
  int has_bias;
  lamp_tensor *weight, *bias;   /* views of the weight slab (weight dtype) */
  lamp_tensor *gweight, *gbias; /* views of the fp32 gradient slab */
  lamp_operand x_copy, w_copy, b_copy, dy_copy;
  lamp_tensor *grad_buf;        /* fp32 GEMM result before rounding to a 16-bit grad_dtype */
} linear;

/* "Linear(784 -> 10)": the prefix of every message this layer writes. */
static const char *name_of(const linear *l, char *buf, size_t size) {
  snprintf(buf, size, "Linear(%lld -> %lld)", (long long)l->in, (long long)l->out);
  return buf;
}

/*
** The batch is the first dimension; the trailing dimensions flatten into the features (an
** image [B, 1, 28, 28] feeds Linear(784 -> ...)). `what` describes the input for the message:
** the shape alone from output_shape, which sees no dtype, or the whole tensor from forward.
*/
static lamp_status check_features(const linear *l, int ndim, const int64_t *shape, const char *what,
                                  size_t *rows) {
  char name[64];
  if (ndim < 2)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s needs a batch dimension and features",
                      name_of(l, name, sizeof name), what);
  size_t features;
  if (shape[0] < 0 || !lamp_shape_numel(ndim - 1, shape + 1, &features))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s is not a valid shape", name_of(l, name, sizeof name),
                      what);
  if (features != (size_t)l->in)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s has %zu features, expected %lld",
                      name_of(l, name, sizeof name), what, features, (long long)l->in);
  *rows = (size_t)shape[0];
  return LAMP_OK;
}

static lamp_status check_input(const linear *l, const lamp_tensor *x, size_t *rows) {
  char what[128], name[64];
  lamp_tensor_describe(x, what, sizeof what);
  lamp_status st = check_features(l, x->ndim, x->shape, what, rows);
  if (st != LAMP_OK) return st;
  if (!lamp_dtype_is_float(x->dtype) || !lamp_tensor_is_contiguous(x))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be a contiguous f32, f16 or bf16 tensor",
                      name_of(l, name, sizeof name), what);
  return LAMP_OK;
}

/* A tensor that must hold rows x cols contiguous floating-point values (y, dy, dx). */
static lamp_status check_matrix(const linear *l, const lamp_tensor *t, const char *role, size_t rows,
                                size_t cols) {
  char what[128], name[64];
  if (lamp_dtype_is_float(t->dtype) && lamp_tensor_is_contiguous(t) && t->ndim >= 1 &&
      (size_t)t->shape[0] == rows && lamp_tensor_numel(t) == rows * cols)
    return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s %s, expected %zu x %zu contiguous floating-point values",
                    name_of(l, name, sizeof name), role, lamp_tensor_describe(t, what, sizeof what),
                    rows, cols);
}

static lamp_status check_bound(const linear *l) {
  char name[64];
  if (l->weight == NULL || (l->has_bias && l->bias == NULL))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: parameters are not bound (build a model first)",
                      name_of(l, name, sizeof name));
  return LAMP_OK;
}

static lamp_status linear_output_shape(const lamp_layer *layer, int ndim, const int64_t *in,
                                       int *out_ndim, int64_t *out) {
  const linear *l = (const linear *)layer;
  char what[128];
  size_t rows;
  lamp_nn_shape_text(ndim, in, what, sizeof what);
  lamp_status st = check_features(l, ndim, in, what, &rows);
  if (st != LAMP_OK) return st;
  *out_ndim = 2;
  out[0] = in[0];
  out[1] = l->out;
  return LAMP_OK;
}

static size_t linear_param_count(const lamp_layer *layer) {
  return ((const linear *)layer)->has_bias ? 2 : 1;
}

/* PyTorch's default: weight and bias both U(-1/sqrt(in), 1/sqrt(in)). */
static lamp_status linear_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out,
                                     char *name_buf, size_t name_size) {
  const linear *l = (const linear *)layer;
  (void)name_buf;
  (void)name_size;
  if (i >= linear_param_count(layer)) {
    char name[64];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no parameter %zu", name_of(l, name, sizeof name), i);
  }
  *out = (lamp_param_decl){0};
  out->init = LAMP_INIT_UNIFORM;
  out->bound = 1.0 / sqrt((double)l->in);
  if (i == 0) {
    out->name = "weight";
    out->ndim = 2;
    out->shape[0] = l->out;
    out->shape[1] = l->in;
    out->decay = 1;
  } else {
    out->name = "bias";
    out->ndim = 1;
    out->shape[0] = l->out;
    out->decay = 0;
  }
  return LAMP_OK;
}

static lamp_status linear_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  linear *l = (linear *)layer;
  char name[64];
  lamp_param_decl decl;
  lamp_status st = linear_param_decl(layer, i, &decl, NULL, 0);
  if (st != LAMP_OK) return st;
  l->w_copy.valid = l->b_copy.valid = 0;
  return lamp_nn_bind_param(name_of(l, name, sizeof name), &decl, i == 0 ? &l->weight : &l->bias,
                            i == 0 ? &l->gweight : &l->gbias, weight, grad);
}

static lamp_status linear_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                  lamp_tensor *y) {
  linear *l = (linear *)layer;
  size_t rows, in = (size_t)l->in, out = (size_t)l->out;
  lamp_status st = check_bound(l);
  if (st == LAMP_OK) st = check_input(l, x, &rows);
  if (st == LAMP_OK) st = check_matrix(l, y, "output", rows, out);
  if (st != LAMP_OK) return st;
  /* A new step: copies made from an earlier step's data are stale. */
  l->x_copy.valid = l->w_copy.valid = l->dy_copy.valid = 0;
  if (rows == 0) return LAMP_OK;
  const void *xd, *wd;
  st = lamp_operand_get(&l->x_copy, exec, x, rows * in, 0, &xd);
  if (st == LAMP_OK) st = lamp_operand_get(&l->w_copy, exec, l->weight, out * in, 0, &wd);
  if (st != LAMP_OK) return st;
  void *yd = lamp_tensor_data(y);
  lamp_dtype op = lamp_operand_dtype_of(&l->w_copy, exec);
  st = lamp_gemm(exec->device, 0, 1, rows, out, in, 1.0f, xd, op, in, wd, op, in, 0.0f, yd, y->dtype, out);
  if (st != LAMP_OK || !l->has_bias) return st;
  /* The bias joins the GEMM's inputs in the compute dtype too (autocast's addmm rounds it). */
  const void *bd;
  st = lamp_operand_get(&l->b_copy, exec, l->bias, out, 0, &bd);
  if (st != LAMP_OK) return st;
  return lamp_add_bias_rows(exec->device, yd, y->dtype, bd, lamp_operand_dtype(exec), rows, out);
}

/* dx = dy W. */
static lamp_status linear_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                         const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  linear *l = (linear *)layer;
  (void)y;
  if (dx == NULL) return LAMP_OK;
  size_t rows, in = (size_t)l->in, out = (size_t)l->out;
  lamp_status st = check_bound(l);
  if (st == LAMP_OK) st = check_input(l, x, &rows);
  if (st == LAMP_OK) st = check_matrix(l, dy, "output gradient", rows, out);
  if (st == LAMP_OK) st = check_matrix(l, dx, "input gradient", rows, in);
  if (st != LAMP_OK || rows == 0) return st;
  const void *dyd, *wd;
  st = lamp_operand_get(&l->dy_copy, exec, dy, rows * out, 0, &dyd);
  if (st == LAMP_OK) st = lamp_operand_get(&l->w_copy, exec, l->weight, out * in, 1, &wd);
  if (st != LAMP_OK) return st;
  lamp_dtype op = lamp_operand_dtype_of(&l->w_copy, exec);
  return lamp_gemm(exec->device, 0, 0, rows, in, out, 1.0f, dyd, op, out, wd, op, in, 0.0f, lamp_tensor_data(dx),
                   dx->dtype, in);
}

/*
** Parameter gradients are produced in exec->grad_dtype, as a 16-bit autocast GEMM would
** produce them (so an fp16 gradient below the smallest subnormal really is zero: the loss
** scaler's reason to exist), and added to the fp32 slab. With fp32 gradients the GEMM
** accumulates straight into the slab (beta = 1) and nothing is rounded.
*/
static lamp_status accumulate_weight_grad(linear *l, const lamp_exec *exec, const void *dyd, const void *xd,
                                          size_t rows) {
  size_t in = (size_t)l->in, out = (size_t)l->out;
  lamp_dtype op = lamp_operand_dtype_of(&l->w_copy, exec);
  float *g = lamp_tensor_data(l->gweight);
  if (exec->grad_dtype == LAMP_F32 || exec->overwrite_grads) { /* straight into the slab */
    lamp_status st = lamp_gemm(exec->device, 1, 0, out, in, rows, 1.0f, dyd, op, out, xd, op, in,
                               exec->overwrite_grads ? 0.0f : 1.0f, g, LAMP_F32, in);
    if (st != LAMP_OK || exec->grad_dtype == LAMP_F32) return st;
    return lamp_round_through(exec->device, g, g, exec->grad_dtype, out * in);
  }
  int64_t shape[1] = {(int64_t)(out * in)};
  lamp_status st = lamp_tensor_ensure(&l->grad_buf, LAMP_F32, exec->device, 1, shape, LAMP_MEM_WORKSPACE);
  if (st == LAMP_OK)
    st = lamp_gemm(exec->device, 1, 0, out, in, rows, 1.0f, dyd, op, out, xd, op, in, 0.0f,
                   lamp_tensor_data(l->grad_buf), LAMP_F32, in);
  if (st == LAMP_OK)
    st = lamp_accumulate_rounded(exec->device, lamp_tensor_data(l->gweight), lamp_tensor_data(l->grad_buf),
                                 exec->grad_dtype, out * in);
  return st;
}

/* db += sum over rows of dy, summed in fp32 from the stored values (reductions run in fp32). */
static lamp_status accumulate_bias_grad(linear *l, const lamp_exec *exec, const lamp_tensor *dy, size_t rows) {
  size_t out = (size_t)l->out;
  float *g = lamp_tensor_data(l->gbias);
  if (exec->grad_dtype == LAMP_F32 || exec->overwrite_grads) {
    lamp_status st = lamp_sum_rows(exec->device, g, lamp_tensor_data(dy), dy->dtype, rows, out, 1.0f,
                                   exec->overwrite_grads ? 0.0f : 1.0f);
    if (st != LAMP_OK || exec->grad_dtype == LAMP_F32) return st;
    return lamp_round_through(exec->device, g, g, exec->grad_dtype, out);
  }
  /* grad_buf (out * in >= out fp32 elements) is free again once the weight gradient is in. */
  float *sums = lamp_tensor_data(l->grad_buf);
  lamp_status st = lamp_sum_rows(exec->device, sums, lamp_tensor_data(dy), dy->dtype, rows, out, 1.0f, 0.0f);
  if (st == LAMP_OK)
    st = lamp_accumulate_rounded(exec->device, lamp_tensor_data(l->gbias), sums, exec->grad_dtype, out);
  return st;
}

/* An empty batch still owes a fresh backward its (zero) gradients. */
static lamp_status zero_grads(linear *l, const lamp_exec *exec) {
  lamp_status st = lamp_fill(exec->device, lamp_tensor_data(l->gweight), LAMP_F32, (size_t)(l->out * l->in), 0.0f);
  if (st == LAMP_OK && l->has_bias)
    st = lamp_fill(exec->device, lamp_tensor_data(l->gbias), LAMP_F32, (size_t)l->out, 0.0f);
  return st;
}

/* dW += dy^T x; db += sum over rows of dy (or = when exec->overwrite_grads). */
static lamp_status linear_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                           const lamp_tensor *dy) {
  linear *l = (linear *)layer;
  size_t rows, in = (size_t)l->in, out = (size_t)l->out;
  lamp_status st = check_bound(l);
  if (st == LAMP_OK) st = check_input(l, x, &rows);
  if (st == LAMP_OK) st = check_matrix(l, dy, "output gradient", rows, out);
  if (st != LAMP_OK) return st;
  if (rows == 0) return exec->overwrite_grads ? zero_grads(l, exec) : LAMP_OK;
  const void *xd, *dyd;
  st = lamp_operand_get(&l->x_copy, exec, x, rows * in, 1, &xd);
  if (st == LAMP_OK) st = lamp_operand_get(&l->dy_copy, exec, dy, rows * out, 1, &dyd);
  if (st == LAMP_OK) st = accumulate_weight_grad(l, exec, dyd, xd, rows);
  if (st == LAMP_OK && l->has_bias) st = accumulate_bias_grad(l, exec, dy, rows);
  /*
  ** dy's copy is done with (a second backward may bring new values at the same address). The
  ** weights' copy stays valid until the next forward, which always re-makes it: a backward
  ** that walks layer by layer (accumulate_grads before backward_input) still reuses it.
  */
  l->x_copy.valid = l->dy_copy.valid = 0;
  return st;
}

static void linear_describe(const lamp_layer *layer, char *buf, size_t size) {
  const linear *l = (const linear *)layer;
  char name[64];
  snprintf(buf, size, "%s%s", name_of(l, name, sizeof name), l->has_bias ? "" : " without bias");
}

static void linear_destroy(lamp_layer *layer) {
  linear *l = (linear *)layer;
  lamp_tensor_release(l->weight);
  lamp_tensor_release(l->bias);
  lamp_tensor_release(l->gweight);
  lamp_tensor_release(l->gbias);
  lamp_operand_free(&l->x_copy);
  lamp_operand_free(&l->w_copy);
  lamp_operand_free(&l->dy_copy);
  lamp_operand_free(&l->b_copy);
  lamp_tensor_release(l->grad_buf);
  free(l);
}

static const lamp_layer_ops linear_ops = {
    .type = "Linear",
    .output_shape = linear_output_shape,
    .param_count = linear_param_count,
    .param_decl = linear_param_decl,
    .bind = linear_bind,
    .forward = linear_forward,
    .backward_input = linear_backward_input,
    .accumulate_grads = linear_accumulate_grads,
    .describe = linear_describe,
    .destroy = linear_destroy,
};

lamp_status lamp_linear_new(lamp_layer **out, int64_t in_features, int64_t out_features, int bias) {
  *out = NULL;
  if (in_features <= 0 || out_features <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "Linear(%lld -> %lld): feature counts must be positive",
                      (long long)in_features, (long long)out_features);
  linear *l = calloc(1, sizeof *l);
  if (l == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Linear: out of memory");
  l->base.ops = &linear_ops;
  l->base.refcount = 1;
  l->in = in_features;
  l->out = out_features;
  l->has_bias = bias != 0;
  /* The bias copy is added by add_bias_rows, not multiplied: it keeps the layers' common dtype. */
  l->x_copy.gemm_only = l->w_copy.gemm_only = l->dy_copy.gemm_only = 1;
  *out = &l->base;
  return LAMP_OK;
}
