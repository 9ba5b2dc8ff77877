/*
** Small helpers the layer files share: dtype and shape tests, shape text for messages, and
** the bind/unbind bookkeeping every layer with parameters or buffers does the same way.
*/
#ifndef LAMP_NN_LAYER_UTIL_H
#define LAMP_NN_LAYER_UTIL_H

#include <stdio.h>

#include "base/error.h"
#include "nn/layer.h"
#include "nn/scratch.h"
#include "tensor/dtype.h"

/* "[2, 3, 28, 28]" */
static inline const char *lamp_nn_shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

static inline int lamp_nn_has_shape(const lamp_tensor *t, int ndim, const int64_t *shape) {
  if (t->ndim != ndim || !lamp_tensor_is_contiguous(t)) return 0;
  for (int i = 0; i < ndim; i++)
    if (t->shape[i] != shape[i]) return 0;
  return 1;
}

static inline int lamp_nn_same_shape(const lamp_tensor *a, const lamp_tensor *b) {
  return lamp_nn_has_shape(a, b->ndim, b->shape);
}

/* A contiguous floating-point tensor (what activations and their gradients must be). */
static inline int lamp_nn_is_activation(const lamp_tensor *t) {
  return lamp_dtype_is_float(t->dtype) && lamp_tensor_is_contiguous(t);
}

/*
** A child's description appended at buf + used, its further lines indented one level; `work`
** (size bytes) holds the child's own text, and where it is NULL (out of memory) the child's type
** stands in. Returns the new length (>= size once the text is cut).
*/
static inline size_t lamp_nn_describe_child(char *buf, size_t size, size_t used, const lamp_layer *child, char *work) {
  if (used >= size) return used;
  if (work == NULL) return used + (size_t)snprintf(buf + used, size - used, "%s", child->ops->type);
  child->ops->describe(child, work, size);
  for (const char *q = work; *q && used + 1 < size; q++) {
    if (*q == '\n') used += (size_t)snprintf(buf + used, size - used, "\n  ");
    else buf[used++] = *q, buf[used] = '\0';
  }
  return used;
}

/*
** A container's name for a child's parameter or buffer: "<prefix>.<child name>" written into
** buf, *name pointed at it ("2.weight", "block.1.running_mean"). `what` ("Sequential: parameter")
** starts the message when the result does not fit.
*/
static inline lamp_status lamp_nn_prefix_name(const char **name, const char *prefix, char *buf, size_t size,
                                              const char *what) {
  int len = snprintf(buf, size, "%s.%s", prefix, *name);
  if (len < 0 || (size_t)len >= size)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s name %s.%s is longer than %zu characters", what, prefix, *name,
                      size ? size - 1 : 0);
  *name = buf;
  return LAMP_OK;
}

/*
** The bind protocol for one parameter (slot w, g): weight == grad == NULL unbinds; binding a
** bound slot is an error; the views must be contiguous, shaped as declared, the gradient f32
** (and the weight too when keep_f32). `layer` and `what` name the layer and the parameter.
*/
static inline lamp_status lamp_nn_bind_param(const char *layer, const lamp_param_decl *d, lamp_tensor **w,
                                             lamp_tensor **g, lamp_tensor *weight, lamp_tensor *grad) {
  if (weight == NULL && grad == NULL) {
    lamp_tensor_release(*w);
    lamp_tensor_release(*g);
    *w = *g = NULL;
    return LAMP_OK;
  }
  if (*w != NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s is already bound (a layer belongs to one model, once)", layer,
                      d->name);
  if (weight == NULL || grad == NULL || !lamp_dtype_is_float(weight->dtype) || grad->dtype != LAMP_F32 ||
      (d->keep_f32 && weight->dtype != LAMP_F32) || !lamp_nn_has_shape(weight, d->ndim, d->shape) ||
      !lamp_nn_has_shape(grad, d->ndim, d->shape))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s needs a contiguous %sweight view and an f32 gradient view of its shape",
                      layer, d->name, d->keep_f32 ? "f32 " : "");
  *w = lamp_tensor_retain(weight);
  *g = lamp_tensor_retain(grad);
  return LAMP_OK;
}

/*
** A tensor a container keeps between its children (an output, or the gradient at one), in
** exec's activation place: its own *t, reused across batches, or inside nn.Recompute a place in
** the shared scratch that lives until the next Recompute runs.
*/
static inline lamp_status lamp_nn_intermediate(const lamp_exec *exec, lamp_tensor **t, lamp_dtype dtype, int ndim,
                                               const int64_t *shape) {
  if (exec->in_scratch) return lamp_scratch_take(exec->scratch, t, dtype, exec->device, ndim, shape);
  return lamp_tensor_ensure(t, dtype, exec->device, ndim, shape, LAMP_MEM_ACTIVATIONS);
}

/* Inside nn.Recompute, a tensor of lamp_nn_intermediate that the backward no longer needs: its
   place in the scratch is free for the next one (t may be NULL or a tensor of another's). */
static inline void lamp_nn_done_with(const lamp_exec *exec, const lamp_tensor *t) {
  if (exec->in_scratch) lamp_scratch_give_back(exec->scratch, t);
}

#endif
