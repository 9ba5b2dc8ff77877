/*
** Conv2d on NCHW tensors: weight [out, in/groups, k, k] (PyTorch's layout), bias [out].
**
** The layer says what to compute: it checks shapes, owns its parameters, and applies the
** autocast rule (the weights and bias enter the products with the values of
** exec->compute_dtype, as GEMM operands, see operand.h; x and dy as they are stored). The
** device's backend computes (lamp_conv2d_forward / lamp_conv2d_backward) and keeps what it plans
** with in the layer's plan: thread workspaces, transformed weights, algorithm choice. The weights'
** operand made in forward is reused by the backward of the same step.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "nn/operand.h"

typedef struct conv2d {
  lamp_layer base;
  int64_t in, out, k, stride, pad, dil, groups;
  int has_bias;
  lamp_tensor *weight, *bias;   /* views of the weight slab */
  lamp_tensor *gweight, *gbias; /* views of the fp32 gradient slab */
  lamp_operand w_op, b_op;
  void *plan;                   /* the backend's, for plan_device */
  lamp_device plan_device;
} conv2d;

/* "Conv2d(16 -> 32, 3x3)" */
static const char *name_of(const conv2d *c, char *buf, size_t size) {
  snprintf(buf, size, "Conv2d(%lld -> %lld, %lldx%lld)", (long long)c->in, (long long)c->out, (long long)c->k,
           (long long)c->k);
  return buf;
}

/* The output size along one axis, or -1 when the window does not fit. */
static int64_t out_size(const conv2d *c, int64_t in) {
  int64_t span = c->dil * (c->k - 1) + 1;
  if (in + 2 * c->pad < span) return -1;
  return (in + 2 * c->pad - span) / c->stride + 1;
}

static lamp_status check_shape(const conv2d *c, int ndim, const int64_t *in, const char *what,
                               lamp_conv2d_shape *shape) {
  char name[64];
  if (ndim != 4 || in[0] < 0 || in[2] <= 0 || in[3] <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be [batch, channels, height, width]",
                      name_of(c, name, sizeof name), what);
  if (in[1] != c->in)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s has %lld channels, expected %lld",
                      name_of(c, name, sizeof name), what, (long long)in[1], (long long)c->in);
  int64_t oh = out_size(c, in[2]), ow = out_size(c, in[3]);
  if (oh <= 0 || ow <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG,
                      "%s: input %s is smaller than the kernel (%lld with dilation %lld) after padding %lld",
                      name_of(c, name, sizeof name), what, (long long)c->k, (long long)c->dil, (long long)c->pad);
  if (shape == NULL) return LAMP_OK;
  *shape = (lamp_conv2d_shape){.batch = (size_t)in[0], .in_channels = (size_t)c->in, .out_channels = (size_t)c->out,
                               .groups = (size_t)c->groups, .height = (size_t)in[2], .width = (size_t)in[3],
                               .kernel = (size_t)c->k, .stride = (size_t)c->stride, .padding = (size_t)c->pad,
                               .dilation = (size_t)c->dil, .out_h = (size_t)oh, .out_w = (size_t)ow};
  return LAMP_OK;
}

static lamp_status check_input(const conv2d *c, const lamp_tensor *x, lamp_conv2d_shape *shape) {
  char what[128], name[64];
  lamp_tensor_describe(x, what, sizeof what);
  lamp_status st = check_shape(c, x->ndim, x->shape, what, shape);
  if (st == LAMP_OK && !lamp_nn_is_activation(x))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be a contiguous f32, f16 or bf16 tensor",
                      name_of(c, name, sizeof name), what);
  return st;
}

/* y, dy, dx: contiguous floating point, shaped [n, channels, plane]. */
static lamp_status check_like(const conv2d *c, const lamp_tensor *t, const char *role, size_t n, int64_t channels,
                              size_t plane) {
  char what[128], name[64];
  if (lamp_nn_is_activation(t) && t->ndim == 4 && (size_t)t->shape[0] == n && t->shape[1] == channels &&
      (size_t)(t->shape[2] * t->shape[3]) == plane)
    return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s %s, expected [%zu, %lld, ...] with %zu values per plane",
                    name_of(c, name, sizeof name), role, lamp_tensor_describe(t, what, sizeof what), n,
                    (long long)channels, plane);
}

static lamp_status check_bound(const conv2d *c) {
  char name[64];
  if (c->weight == NULL || (c->has_bias && c->bias == NULL))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: parameters are not bound (build a model first)",
                      name_of(c, name, sizeof name));
  return LAMP_OK;
}

static lamp_status conv_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                     int64_t *out) {
  const conv2d *c = (const conv2d *)layer;
  char what[128];
  lamp_nn_shape_text(ndim, in, what, sizeof what);
  lamp_status st = check_shape(c, ndim, in, what, NULL);
  if (st != LAMP_OK) return st;
  *out_ndim = 4;
  out[0] = in[0];
  out[1] = c->out;
  out[2] = out_size(c, in[2]);
  out[3] = out_size(c, in[3]);
  return LAMP_OK;
}

static size_t conv_param_count(const lamp_layer *layer) { return ((const conv2d *)layer)->has_bias ? 2 : 1; }

/* PyTorch's default (kaiming-uniform, a = sqrt(5)): weight and bias U(-1/sqrt(fan_in), ..). */
static lamp_status conv_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                   size_t name_size) {
  const conv2d *c = (const conv2d *)layer;
  (void)name_buf, (void)name_size;
  if (i >= conv_param_count(layer)) {
    char name[64];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no parameter %zu", name_of(c, name, sizeof name), i);
  }
  *out = (lamp_param_decl){0};
  out->init = LAMP_INIT_UNIFORM;
  out->bound = 1.0 / sqrt((double)(c->in / c->groups * c->k * c->k));
  if (i == 0) {
    out->name = "weight";
    out->ndim = 4;
    out->shape[0] = c->out;
    out->shape[1] = c->in / c->groups;
    out->shape[2] = out->shape[3] = c->k;
    out->decay = 1;
  } else {
    out->name = "bias";
    out->ndim = 1;
    out->shape[0] = c->out;
  }
  return LAMP_OK;
}

static lamp_status conv_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  conv2d *c = (conv2d *)layer;
  char name[64];
  lamp_param_decl d;
  lamp_status st = conv_param_decl(layer, i, &d, NULL, 0);
  if (st != LAMP_OK) return st;
  c->w_op.valid = c->b_op.valid = 0;
  return lamp_nn_bind_param(name_of(c, name, sizeof name), &d, i == 0 ? &c->weight : &c->bias,
                            i == 0 ? &c->gweight : &c->gbias, weight, grad);
}

/* ---- forward and backward ------------------------------------------------------------------- */

/* The plan belongs to one device: a layer moved to another (a new model) starts a new one. */
static void **plan_for(conv2d *c, lamp_device device) {
  if (c->plan != NULL && c->plan_device != device) {
    lamp_conv2d_plan_free(c->plan_device, c->plan);
    c->plan = NULL;
  }
  c->plan_device = device;
  return &c->plan;
}

/* The call's arguments that forward and backward share: shape, x, and the operands of W and the
   bias, made now (`reuse` 0, a new step) or taken from this step's forward. */
static lamp_status common_args(conv2d *c, const lamp_exec *exec, const lamp_tensor *x, int reuse,
                               lamp_conv2d_args *a) {
  lamp_status st = check_bound(c);
  if (st == LAMP_OK) st = check_input(c, x, &a->shape);
  if (st != LAMP_OK) return st;
  const void *w = NULL, *b = NULL;
  st = lamp_operand_get(&c->w_op, exec, c->weight, lamp_tensor_numel(c->weight), reuse, &w);
  if (st == LAMP_OK && c->has_bias) st = lamp_operand_get(&c->b_op, exec, c->bias, (size_t)c->out, reuse, &b);
  a->compute = exec->compute_dtype;
  a->x = lamp_tensor_data(x);
  a->x_dtype = x->dtype;
  a->weight = w;
  a->bias = b;
  a->operand_dtype = lamp_operand_dtype(exec);
  return st;
}

static lamp_status conv_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  conv2d *c = (conv2d *)layer;
  lamp_conv2d_args a = {0};
  c->w_op.valid = c->b_op.valid = 0; /* a new step */
  lamp_status st = common_args(c, exec, x, 0, &a);
  if (st == LAMP_OK) st = check_like(c, y, "output", a.shape.batch, c->out, a.shape.out_h * a.shape.out_w);
  if (st != LAMP_OK) return st;
  a.y = lamp_tensor_data(y);
  a.y_dtype = y->dtype;
  return lamp_conv2d_forward(exec->device, plan_for(c, exec->device), &a);
}

/*
** The backward pass: dx when dx is not NULL, the parameter gradients when `grads`, in one call
** when both are wanted (the combined backward), so the backend can share its pass over dy.
*/
static lamp_status backward_pass(conv2d *c, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *dy,
                                 lamp_tensor *dx, int grads) {
  lamp_conv2d_args a = {0};
  lamp_status st = common_args(c, exec, x, 1, &a);
  size_t plane_out = a.shape.out_h * a.shape.out_w, plane_in = a.shape.height * a.shape.width;
  if (st == LAMP_OK) st = check_like(c, dy, "output gradient", a.shape.batch, c->out, plane_out);
  if (st == LAMP_OK && dx != NULL) st = check_like(c, dx, "input gradient", a.shape.batch, c->in, plane_in);
  if (st != LAMP_OK) return st;
  a.dy = lamp_tensor_data(dy);
  a.dy_dtype = dy->dtype;
  if (dx != NULL) {
    a.dx = lamp_tensor_data(dx);
    a.dx_dtype = dx->dtype;
  }
  if (grads) {
    a.grad_weight = lamp_tensor_data(c->gweight);
    a.grad_bias = c->has_bias ? lamp_tensor_data(c->gbias) : NULL;
    a.grad_dtype = exec->grad_dtype;
    a.overwrite_grads = exec->overwrite_grads;
  }
  return lamp_conv2d_backward(exec->device, plan_for(c, exec->device), &a);
}

static lamp_status conv_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  (void)y;
  if (dx == NULL) return LAMP_OK;
  return backward_pass((conv2d *)layer, exec, x, dy, dx, 0);
}

static lamp_status conv_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                         const lamp_tensor *dy) {
  return backward_pass((conv2d *)layer, exec, x, dy, NULL, 1);
}

/* Both in one walk; the gradients are announced once final (see layer.h). */
static lamp_status conv_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                                 const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  (void)y;
  lamp_status st = backward_pass((conv2d *)layer, exec, x, dy, dx, 1);
  if (st == LAMP_OK && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  return st;
}

static void conv_describe(const lamp_layer *layer, char *buf, size_t size) {
  const conv2d *c = (const conv2d *)layer;
  char name[64];
  int n = snprintf(buf, size, "%s", name_of(c, name, sizeof name));
  /* the options that differ from the defaults, inside the parentheses */
  char extra[160] = "";
  size_t used = 0;
  if (c->stride != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", stride %lld", (long long)c->stride);
  if (c->pad != 0) used += (size_t)snprintf(extra + used, sizeof extra - used, ", padding %lld", (long long)c->pad);
  if (c->dil != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", dilation %lld", (long long)c->dil);
  if (c->groups != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", groups %lld", (long long)c->groups);
  if (!c->has_bias) snprintf(extra + used, sizeof extra - used, ", no bias");
  if (n > 0 && (size_t)n < size) snprintf(buf + n - 1, size - (size_t)n + 1, "%s)", extra);
}

static void conv_destroy(lamp_layer *layer) {
  conv2d *c = (conv2d *)layer;
  lamp_tensor *ts[] = {c->weight, c->bias, c->gweight, c->gbias};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lamp_tensor_release(ts[i]);
  lamp_conv2d_plan_free(c->plan_device, c->plan);
  lamp_operand_free(&c->w_op);
  lamp_operand_free(&c->b_op);
  free(c);
}

static const lamp_layer_ops conv2d_ops = {
    .type = "Conv2d",
    .output_shape = conv_output_shape,
    .param_count = conv_param_count,
    .param_decl = conv_param_decl,
    .bind = conv_bind,
    .forward = conv_forward,
    .backward_input = conv_backward_input,
    .accumulate_grads = conv_accumulate_grads,
    .backward = conv_backward,
    .describe = conv_describe,
    .destroy = conv_destroy,
};

static lamp_status check_options(int64_t in, int64_t out, int64_t k, const lamp_conv2d_options *o) {
  char name[96];
  snprintf(name, sizeof name, "Conv2d(%lld -> %lld, %lldx%lld)", (long long)in, (long long)out, (long long)k,
           (long long)k);
  if (in <= 0 || out <= 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: channel counts must be positive", name);
  if (k <= 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel size must be positive", name);
  if (o->stride <= 0 || o->dilation <= 0 || o->groups <= 0 || o->padding < 0)
    return lamp_error(LAMP_ERR_INVALID_ARG,
                      "%s: stride %lld, dilation %lld and groups %lld must be positive, padding %lld not negative",
                      name, (long long)o->stride, (long long)o->dilation, (long long)o->groups, (long long)o->padding);
  if (in % o->groups != 0 || out % o->groups != 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: groups %lld must divide both channel counts", name,
                      (long long)o->groups);
  if (k > 4096 || o->stride > 4096 || o->dilation > 4096 || o->padding > 4096)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride, dilation and padding must be at most 4096", name);
  return LAMP_OK;
}

lamp_status lamp_conv2d_new(lamp_layer **out, int64_t in_channels, int64_t out_channels, int64_t kernel,
                            const lamp_conv2d_options *options) {
  *out = NULL;
  lamp_conv2d_options o = options != NULL ? *options : (lamp_conv2d_options){0};
  if (o.stride == 0) o.stride = 1;
  if (o.dilation == 0) o.dilation = 1;
  if (o.groups == 0) o.groups = 1;
  lamp_status st = check_options(in_channels, out_channels, kernel, &o);
  if (st != LAMP_OK) return st;
  conv2d *c = calloc(1, sizeof *c);
  if (c == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Conv2d: out of memory");
  c->base.ops = &conv2d_ops;
  c->base.refcount = 1;
  c->in = in_channels;
  c->out = out_channels;
  c->k = kernel;
  c->stride = o.stride;
  c->pad = o.padding;
  c->dil = o.dilation;
  c->groups = o.groups;
  c->has_bias = !o.no_bias;
  *out = &c->base;
  return LAMP_OK;
}
