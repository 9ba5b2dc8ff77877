/*
** ReLU: y = max(x, 0), elementwise; backward masks dy by y > 0 (the forward output, so the
** input need not be kept). When every tensor shares one dtype (the normal case: activations
** in, activations out) the kernels run directly; mixed dtypes go through a workspace.
*/
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "tensor/dtype.h"

typedef struct relu {
  lamp_layer base;
  lamp_tensor *work; /* dy in y's dtype, only when the dtypes differ */
} relu;

static lamp_status check_like(const lamp_tensor *t, const char *role, size_t n) {
  char what[128];
  if (lamp_dtype_is_float(t->dtype) && lamp_tensor_is_contiguous(t) && lamp_tensor_numel(t) == n) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "ReLU: %s %s, expected %zu contiguous floating-point values", role,
                    lamp_tensor_describe(t, what, sizeof what), n);
}

static lamp_status relu_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                     int64_t *out) {
  (void)layer;
  *out_ndim = ndim;
  for (int i = 0; i < ndim; i++) out[i] = in[i];
  return LAMP_OK;
}

static size_t relu_param_count(const lamp_layer *layer) {
  (void)layer;
  return 0;
}

static lamp_status relu_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                   size_t name_size) {
  (void)layer, (void)out, (void)name_buf, (void)name_size;
  return lamp_error(LAMP_ERR_INVALID_ARG, "ReLU: no parameter %zu (it has none)", i);
}

static lamp_status relu_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  (void)layer, (void)weight, (void)grad;
  return lamp_error(LAMP_ERR_INVALID_ARG, "ReLU: no parameter %zu (it has none)", i);
}

static lamp_status relu_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  (void)layer;
  size_t n = lamp_tensor_numel(x);
  lamp_status st = check_like(x, "input", n);
  if (st == LAMP_OK) st = check_like(y, "output", n);
  if (st != LAMP_OK) return st;
  const void *src = lamp_tensor_data(x);
  void *dst = lamp_tensor_data(y);
  if (x->dtype != y->dtype) { /* convert first, then rectify in place (the kernel allows aliasing) */
    st = lamp_convert(exec->device, dst, y->dtype, src, x->dtype, n);
    if (st != LAMP_OK) return st;
    src = dst;
  }
  return lamp_relu_forward(exec->device, dst, src, y->dtype, n);
}

static lamp_status relu_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  relu *r = (relu *)layer;
  if (dx == NULL) return LAMP_OK;
  size_t n = lamp_tensor_numel(y);
  lamp_status st = check_like(x, "input", n);
  if (st == LAMP_OK) st = check_like(y, "output", n);
  if (st == LAMP_OK) st = check_like(dy, "output gradient", n);
  if (st == LAMP_OK) st = check_like(dx, "input gradient", n);
  if (st != LAMP_OK) return st;
  lamp_dtype t = y->dtype;
  if (dy->dtype == t && dx->dtype == t)
    return lamp_relu_backward(exec->device, lamp_tensor_data(dx), lamp_tensor_data(dy), lamp_tensor_data(y), t, n);
  int64_t shape[1] = {(int64_t)n};
  st = lamp_tensor_ensure(&r->work, t, exec->device, 1, shape, LAMP_MEM_WORKSPACE);
  if (st != LAMP_OK) return st;
  void *w = lamp_tensor_data(r->work);
  st = lamp_convert(exec->device, w, t, lamp_tensor_data(dy), dy->dtype, n);
  if (st == LAMP_OK) st = lamp_relu_backward(exec->device, w, w, lamp_tensor_data(y), t, n);
  if (st == LAMP_OK) st = lamp_convert(exec->device, lamp_tensor_data(dx), dx->dtype, w, t, n);
  return st;
}

static void relu_describe(const lamp_layer *layer, char *buf, size_t size) {
  (void)layer;
  snprintf(buf, size, "ReLU");
}

static void relu_destroy(lamp_layer *layer) {
  relu *r = (relu *)layer;
  lamp_tensor_release(r->work);
  free(r);
}

static const lamp_layer_ops relu_ops = {
    .type = "ReLU",
    .output_shape = relu_output_shape,
    .param_count = relu_param_count,
    .param_decl = relu_param_decl,
    .bind = relu_bind,
    .forward = relu_forward,
    .backward_input = relu_backward_input,
    .accumulate_grads = NULL,
    .describe = relu_describe,
    .destroy = relu_destroy,
};

int lamp_layer_is_relu(const lamp_layer *layer) { return layer != NULL && layer->ops == &relu_ops; }

lamp_status lamp_relu_new(lamp_layer **out) {
  *out = NULL;
  relu *r = calloc(1, sizeof *r);
  if (r == NULL) return lamp_error(LAMP_ERR_SYSTEM, "ReLU: out of memory");
  r->base.ops = &relu_ops;
  r->base.refcount = 1;
  *out = &r->base;
  return LAMP_OK;
}
