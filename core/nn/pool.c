/*
** Pooling over NCHW planes: MaxPool2d, AvgPool2d (padding counted in the divisor, PyTorch's
** default) and GlobalAvgPool ([N, C, H, W] -> [N, C, 1, 1], PyTorch's AdaptiveAvgPool2d(1); a
** Flatten or a Linear after it sees C features). No parameters.
**
** Comparisons and averages are those of the values widened to fp32, the result rounded once to
** the output dtype (as in PyTorch's CPU bf16 kernels); the backend decides how (the CPU stages
** 16-bit planes through fp32 a group at a time). MaxPool keeps the winning index of every output
** (an activation: it lives until backward).
*/
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "tensor/dtype.h"

typedef enum pool_kind { POOL_MAX, POOL_AVG, POOL_GLOBAL } pool_kind;

typedef struct pool {
  lamp_layer base;
  pool_kind kind;
  int64_t kernel, stride, pad;
  lamp_tensor *argmax; /* i32, MaxPool only */
} pool;

static const char *name_of(const pool *p, char *buf, size_t size) {
  const char *type = p->kind == POOL_MAX ? "MaxPool2d" : "AvgPool2d";
  if (p->kind == POOL_GLOBAL) snprintf(buf, size, "GlobalAvgPool");
  else if (p->pad == 0) snprintf(buf, size, "%s(%lld, stride %lld)", type, (long long)p->kernel, (long long)p->stride);
  else
    snprintf(buf, size, "%s(%lld, stride %lld, padding %lld)", type, (long long)p->kernel, (long long)p->stride,
             (long long)p->pad);
  return buf;
}

static lamp_status geometry(const pool *p, int ndim, const int64_t *in, const char *what, lamp_conv_geom *g) {
  char name[64];
  if (ndim != 4 || in[0] < 0 || in[1] <= 0 || in[2] <= 0 || in[3] <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be [batch, channels, height, width]",
                      name_of(p, name, sizeof name), what);
  size_t h = (size_t)in[2], w = (size_t)in[3];
  if (p->kind == POOL_GLOBAL) {
    *g = (lamp_conv_geom){.channels = 1, .height = h, .width = w, .kernel_h = h, .kernel_w = w, .stride_h = 1,
                          .stride_w = 1, .dilation_h = 1, .dilation_w = 1, .out_h = 1, .out_w = 1};
    return LAMP_OK;
  }
  if (in[2] + 2 * p->pad < p->kernel || in[3] + 2 * p->pad < p->kernel)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s is smaller than the window", name_of(p, name, sizeof name),
                      what);
  size_t k = (size_t)p->kernel, s = (size_t)p->stride, pad = (size_t)p->pad;
  *g = (lamp_conv_geom){.channels = 1, .height = h, .width = w, .kernel_h = k, .kernel_w = k, .stride_h = s,
                        .stride_w = s, .pad_h = pad, .pad_w = pad, .dilation_h = 1, .dilation_w = 1,
                        .out_h = (h + 2 * pad - k) / s + 1, .out_w = (w + 2 * pad - k) / s + 1};
  return LAMP_OK;
}

static lamp_status pool_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                     int64_t *out) {
  const pool *p = (const pool *)layer;
  char what[128];
  lamp_conv_geom g;
  lamp_status st = geometry(p, ndim, in, lamp_nn_shape_text(ndim, in, what, sizeof what), &g);
  if (st != LAMP_OK) return st;
  *out_ndim = 4;
  out[0] = in[0];
  out[1] = in[1];
  out[2] = (int64_t)g.out_h;
  out[3] = (int64_t)g.out_w;
  return LAMP_OK;
}

static size_t pool_param_count(const lamp_layer *layer) {
  (void)layer;
  return 0;
}

static lamp_status pool_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                   size_t name_size) {
  char name[64];
  (void)out, (void)name_buf, (void)name_size;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no parameter %zu (it has none)",
                    name_of((const pool *)layer, name, sizeof name), i);
}

static lamp_status pool_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  (void)weight, (void)grad;
  return pool_param_decl(layer, i, NULL, NULL, 0);
}

/* Checks x and the tensor shaped like the output (y or dy); fills g and n_planes. */
static lamp_status check_pair(const pool *p, const lamp_tensor *x, const lamp_tensor *t, const char *role,
                              lamp_conv_geom *g, size_t *planes) {
  char what[128], name[64];
  lamp_tensor_describe(x, what, sizeof what);
  lamp_status st = geometry(p, x->ndim, x->shape, what, g);
  if (st != LAMP_OK) return st;
  if (!lamp_nn_is_activation(x))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be a contiguous f32, f16 or bf16 tensor",
                      name_of(p, name, sizeof name), what);
  int64_t want[4] = {x->shape[0], x->shape[1], (int64_t)g->out_h, (int64_t)g->out_w};
  if (!lamp_nn_is_activation(t) || !lamp_nn_has_shape(t, 4, want)) {
    char shape[96];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s %s, expected a contiguous floating-point tensor shaped %s",
                      name_of(p, name, sizeof name), role, lamp_tensor_describe(t, what, sizeof what),
                      lamp_nn_shape_text(4, want, shape, sizeof shape));
  }
  *planes = (size_t)(x->shape[0] * x->shape[1]);
  return LAMP_OK;
}

static lamp_status pool_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  pool *p = (pool *)layer;
  lamp_conv_geom g;
  size_t planes;
  lamp_status st = check_pair(p, x, y, "output", &g, &planes);
  if (st != LAMP_OK) return st;
  if (p->kind != POOL_MAX)
    return lamp_avgpool_forward(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(x), x->dtype, planes,
                                &g);
  st = lamp_nn_intermediate(exec, &p->argmax, LAMP_I32, y->ndim, y->shape);
  if (st != LAMP_OK) return st;
  return lamp_maxpool_forward(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(p->argmax),
                              lamp_tensor_data(x), x->dtype, planes, &g);
}

static lamp_status pool_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  pool *p = (pool *)layer;
  char name[64];
  (void)y;
  if (dx == NULL) return LAMP_OK;
  lamp_conv_geom g;
  size_t planes;
  lamp_status st = check_pair(p, x, dy, "output gradient", &g, &planes);
  if (st == LAMP_OK && !(lamp_nn_is_activation(dx) && lamp_nn_same_shape(dx, x))) {
    char what[128];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input gradient %s is not shaped like the input",
                      name_of(p, name, sizeof name), lamp_tensor_describe(dx, what, sizeof what));
  }
  if (st == LAMP_OK && p->kind == POOL_MAX &&
      (p->argmax == NULL || !lamp_nn_same_shape(p->argmax, dy)))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: backward before forward", name_of(p, name, sizeof name));
  if (st != LAMP_OK) return st;
  if (p->kind != POOL_MAX)
    return lamp_avgpool_backward(exec->device, lamp_tensor_data(dx), dx->dtype, lamp_tensor_data(dy), dy->dtype,
                                 planes, &g);
  return lamp_maxpool_backward(exec->device, lamp_tensor_data(dx), dx->dtype, lamp_tensor_data(dy), dy->dtype,
                               lamp_tensor_data(p->argmax), planes, &g);
}

static void pool_describe(const lamp_layer *layer, char *buf, size_t size) {
  name_of((const pool *)layer, buf, size);
}

static void pool_destroy(lamp_layer *layer) {
  pool *p = (pool *)layer;
  lamp_tensor_release(p->argmax);
  free(p);
}

static const lamp_layer_ops maxpool_ops = {
    .type = "MaxPool2d", .output_shape = pool_output_shape, .param_count = pool_param_count,
    .param_decl = pool_param_decl, .bind = pool_bind, .forward = pool_forward,
    .backward_input = pool_backward_input, .describe = pool_describe, .destroy = pool_destroy,
};
static const lamp_layer_ops avgpool_ops = {
    .type = "AvgPool2d", .output_shape = pool_output_shape, .param_count = pool_param_count,
    .param_decl = pool_param_decl, .bind = pool_bind, .forward = pool_forward,
    .backward_input = pool_backward_input, .describe = pool_describe, .destroy = pool_destroy,
};
static const lamp_layer_ops global_ops = {
    .type = "GlobalAvgPool", .output_shape = pool_output_shape, .param_count = pool_param_count,
    .param_decl = pool_param_decl, .bind = pool_bind, .forward = pool_forward,
    .backward_input = pool_backward_input, .describe = pool_describe, .destroy = pool_destroy,
};

static lamp_status pool_new(lamp_layer **out, pool_kind kind, const lamp_layer_ops *ops, int64_t kernel,
                            int64_t stride, int64_t padding) {
  *out = NULL;
  const char *type = ops->type;
  if (kind != POOL_GLOBAL) {
    if (stride == 0) stride = kernel;
    if (kernel <= 0 || stride <= 0 || kernel > 4096 || stride > 4096)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel %lld and stride %lld must be in 1..4096", type,
                        (long long)kernel, (long long)stride);
    if (padding < 0 || 2 * padding > kernel)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s(%lld): padding %lld must be between 0 and half the kernel", type,
                        (long long)kernel, (long long)padding);
  }
  pool *p = calloc(1, sizeof *p);
  if (p == NULL) return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory", type);
  p->base.ops = ops;
  p->base.refcount = 1;
  p->kind = kind;
  p->kernel = kernel;
  p->stride = stride;
  p->pad = padding;
  *out = &p->base;
  return LAMP_OK;
}

lamp_status lamp_maxpool2d_new(lamp_layer **out, int64_t kernel, int64_t stride, int64_t padding) {
  return pool_new(out, POOL_MAX, &maxpool_ops, kernel, stride, padding);
}

lamp_status lamp_avgpool2d_new(lamp_layer **out, int64_t kernel, int64_t stride, int64_t padding) {
  return pool_new(out, POOL_AVG, &avgpool_ops, kernel, stride, padding);
}

lamp_status lamp_global_avgpool_new(lamp_layer **out) { return pool_new(out, POOL_GLOBAL, &global_ops, 0, 0, 0); }
