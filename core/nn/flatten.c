/*
** Flatten: [N, d1, d2, ...] -> [N, d1 * d2 * ...]. The layer API gives every layer its own
** output buffer, so forward copies (converting when the dtypes differ) and backward copies dy
** back; at the point where a network flattens, the tensors are small.
*/
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"

static lamp_status flatten_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                        int64_t *out) {
  (void)layer;
  char what[128];
  size_t features;
  if (ndim < 1 || in[0] < 0 || !lamp_shape_numel(ndim - 1, in + 1, &features))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Flatten: input %s needs a batch dimension",
                      lamp_nn_shape_text(ndim, in, what, sizeof what));
  *out_ndim = 2;
  out[0] = in[0];
  out[1] = (int64_t)features;
  return LAMP_OK;
}

static size_t flatten_param_count(const lamp_layer *layer) {
  (void)layer;
  return 0;
}

static lamp_status flatten_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                      size_t name_size) {
  (void)layer, (void)out, (void)name_buf, (void)name_size;
  return lamp_error(LAMP_ERR_INVALID_ARG, "Flatten: no parameter %zu (it has none)", i);
}

static lamp_status flatten_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  (void)weight, (void)grad;
  return flatten_param_decl(layer, i, NULL, NULL, 0);
}

/* dst receives src's values: the same number of contiguous floating-point elements. */
static lamp_status copy_values(const lamp_exec *exec, lamp_tensor *dst, const lamp_tensor *src, const char *dst_role,
                               const char *src_role) {
  char a[128], b[128];
  if (!lamp_nn_is_activation(dst) || !lamp_nn_is_activation(src) || lamp_tensor_numel(dst) != lamp_tensor_numel(src) ||
      dst->ndim < 1 || src->ndim < 1 || dst->shape[0] != src->shape[0])
    return lamp_error(LAMP_ERR_INVALID_ARG, "Flatten: %s %s does not hold the values of %s %s", dst_role,
                      lamp_tensor_describe(dst, a, sizeof a), src_role, lamp_tensor_describe(src, b, sizeof b));
  return lamp_convert(exec->device, lamp_tensor_data(dst), dst->dtype, lamp_tensor_data(src), src->dtype,
                      lamp_tensor_numel(src));
}

static lamp_status flatten_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  (void)layer;
  return copy_values(exec, y, x, "output", "input");
}

static lamp_status flatten_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                          const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  (void)layer, (void)x, (void)y;
  if (dx == NULL) return LAMP_OK;
  return copy_values(exec, dx, dy, "input gradient", "output gradient");
}

static void flatten_describe(const lamp_layer *layer, char *buf, size_t size) {
  (void)layer;
  snprintf(buf, size, "Flatten");
}

static void flatten_destroy(lamp_layer *layer) { free(layer); }

static const lamp_layer_ops flatten_ops = {
    .type = "Flatten", .output_shape = flatten_output_shape, .param_count = flatten_param_count,
    .param_decl = flatten_param_decl, .bind = flatten_bind, .forward = flatten_forward,
    .backward_input = flatten_backward_input, .describe = flatten_describe, .destroy = flatten_destroy,
};

lamp_status lamp_flatten_new(lamp_layer **out) {
  *out = NULL;
  lamp_layer *l = calloc(1, sizeof *l);
  if (l == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Flatten: out of memory");
  l->ops = &flatten_ops;
  l->refcount = 1;
  *out = l;
  return LAMP_OK;
}
