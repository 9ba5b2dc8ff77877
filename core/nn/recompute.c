/*
** Recompute(module): activation recomputation. The module runs with exec->in_scratch set, so
** the containers inside it take the tensors they keep between their children from the model's
** scratch (scratch.h), which every Recompute of the model shares and rewinds: after its forward,
** only the module's input (owned by whoever runs the Recompute) and its output are left. Its
** backward rewinds the scratch, runs the forward again with exec->repeat set (Dropout reapplies
** its mask, BatchNorm leaves its running statistics alone; the same kernels on the same input
** give the same bits) and then the module's backward, whose gradient buffers are taken from the
** scratch too. The activation peak is then what lies outside the wrapped modules plus the
** largest of them, forward and backward, instead of all of them.
**
** The repeated forward writes its output over y: the bits are y's already, and another tensor
** would cost the very activation this layer saves. Where no other Recompute has run between the
** forward and the backward (the wrapped module the backward meets first, usually the last one),
** the scratch still holds the forward's intermediates: nothing is repeated, the backward runs on
** them. A Recompute inside another one (in_scratch already set) is its module: the outer one
** repeats it anyway. An evaluation forward runs once, its intermediates in the scratch as well.
**
** Parameters and buffers are the module's, under the module's names: a model with Recompute and
** the same model without it declare the same tensors, and load each other's checkpoints.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "nn/scratch.h"

typedef struct recompute {
  lamp_layer base;
  lamp_layer *module;
  lamp_scratch *own; /* when driven without a model's scratch (exec->scratch NULL) */
  lamp_tensor *out;  /* the repeated forward's output where y is not given (accumulate_grads) */
  int forwarded;     /* a forward ran in the scratch: backward can repeat it */
  lamp_scratch *used; /* the scratch of that forward, and its rewinds after it began */
  uint64_t pass;
} recompute;

static lamp_status rc_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim, int64_t *out) {
  const lamp_layer *m = ((const recompute *)layer)->module;
  return m->ops->output_shape(m, ndim, in, out_ndim, out);
}

/* ---- parameters and buffers: the module's, names unchanged ---------------------------------- */

static size_t rc_param_count(const lamp_layer *layer) {
  const lamp_layer *m = ((const recompute *)layer)->module;
  return m->ops->param_count(m);
}

static lamp_status rc_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                 size_t name_size) {
  const lamp_layer *m = ((const recompute *)layer)->module;
  return m->ops->param_decl(m, i, out, name_buf, name_size);
}

static lamp_status rc_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  lamp_layer *m = ((recompute *)layer)->module;
  return m->ops->bind(m, i, weight, grad);
}

static size_t rc_buffer_count(const lamp_layer *layer) {
  return lamp_layer_buffer_count(((const recompute *)layer)->module);
}

static lamp_status rc_buffer_decl(const lamp_layer *layer, size_t i, lamp_buffer_decl *out, char *name_buf,
                                  size_t name_size) {
  const lamp_layer *m = ((const recompute *)layer)->module;
  if (i >= lamp_layer_buffer_count(m))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Recompute: no buffer %zu (it has %zu)", i, lamp_layer_buffer_count(m));
  return m->ops->buffer_decl(m, i, out, name_buf, name_size);
}

static lamp_status rc_bind_buffer(lamp_layer *layer, size_t i, lamp_tensor *buffer) {
  lamp_layer *m = ((recompute *)layer)->module;
  if (i >= lamp_layer_buffer_count(m))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Recompute: no buffer %zu (it has %zu)", i, lamp_layer_buffer_count(m));
  return m->ops->bind_buffer(m, i, buffer);
}

/* ---- forward and backward ------------------------------------------------------------------ */

/* The module's exec: exec with the scratch (the model's, else this layer's own), rewound. */
static lamp_status enter(recompute *r, const lamp_exec *exec, lamp_exec *inner) {
  *inner = *exec;
  if (inner->scratch == NULL) {
    if (r->own == NULL) {
      lamp_status st = lamp_scratch_new(&r->own);
      if (st != LAMP_OK) return st;
    }
    inner->scratch = r->own;
  }
  inner->in_scratch = 1;
  lamp_scratch_rewind(inner->scratch);
  return LAMP_OK;
}

static lamp_status rc_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  recompute *r = (recompute *)layer;
  lamp_layer *m = r->module;
  if (exec->in_scratch) return m->ops->forward(m, exec, x, y); /* nested: the outer one repeats it */
  lamp_exec inner;
  r->forwarded = 0;
  lamp_status st = enter(r, exec, &inner);
  if (st == LAMP_OK) st = m->ops->forward(m, &inner, x, y);
  r->forwarded = st == LAMP_OK;
  r->used = inner.scratch;
  r->pass = lamp_scratch_rewinds(inner.scratch);
  return st;
}

/* Rewinds the scratch and runs the last forward again into y, leaving inner set for the backward. */
static lamp_status repeat_forward(recompute *r, const lamp_exec *exec, lamp_exec *inner, const lamp_tensor *x,
                                  lamp_tensor *y) {
  if (!r->forwarded) return lamp_error(LAMP_ERR_INVALID_USAGE, "Recompute: backward before forward");
  lamp_status st = enter(r, exec, inner);
  if (st != LAMP_OK) return st;
  inner->repeat = 1;
  st = r->module->ops->forward(r->module, inner, x, y);
  inner->repeat = 0;
  return st;
}

/* The scratch is as the last forward left it: no Recompute has rewound it since. */
static int still_there(const recompute *r, const lamp_exec *exec) {
  const lamp_scratch *scratch = exec->scratch != NULL ? exec->scratch : r->own;
  return r->forwarded && r->used == scratch && lamp_scratch_rewinds(scratch) == r->pass;
}

static lamp_status rc_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                               const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  recompute *r = (recompute *)layer;
  if (exec->in_scratch) return lamp_layer_backward_walk(r->module, exec, x, y, dy, dx, first_param);
  lamp_exec inner = *exec;
  lamp_status st = LAMP_OK;
  if (still_there(r, exec)) {
    inner.scratch = r->used;
    inner.in_scratch = 1;
  } else {
    st = repeat_forward(r, exec, &inner, x, (lamp_tensor *)y); /* the same bits over y, see above */
  }
  if (st == LAMP_OK) st = lamp_layer_backward_walk(r->module, &inner, x, y, dy, dx, first_param);
  return st;
}

static lamp_status rc_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                     const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  recompute *r = (recompute *)layer;
  lamp_layer *m = r->module;
  if (exec->in_scratch) return m->ops->backward_input(m, exec, x, y, dy, dx);
  lamp_exec inner;
  lamp_status st = repeat_forward(r, exec, &inner, x, (lamp_tensor *)y);
  if (st == LAMP_OK) st = m->ops->backward_input(m, &inner, x, y, dy, dx);
  return st;
}

/*
** Called after backward_input, but other Recomputes may have run in between and overwritten the
** scratch: the forward and the module's backward_input run again (without dx, for the gradients
** its containers keep between their children), the output into a tensor of this layer's own.
*/
static lamp_status rc_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *dy) {
  recompute *r = (recompute *)layer;
  lamp_layer *m = r->module;
  if (m->ops->accumulate_grads == NULL) return LAMP_OK;
  if (exec->in_scratch) return m->ops->accumulate_grads(m, exec, x, dy);
  lamp_status st = lamp_tensor_ensure(&r->out, exec->activation_dtype, exec->device, dy->ndim, dy->shape,
                                      LAMP_MEM_ACTIVATIONS);
  lamp_exec inner;
  if (st == LAMP_OK) st = repeat_forward(r, exec, &inner, x, r->out);
  if (st == LAMP_OK) st = m->ops->backward_input(m, &inner, x, r->out, dy, NULL);
  if (st == LAMP_OK) st = m->ops->accumulate_grads(m, &inner, x, dy);
  return st;
}

/* ---- the rest -------------------------------------------------------------------------------- */

static size_t rc_child_count(const lamp_layer *layer) {
  (void)layer;
  return 1;
}

static lamp_layer *rc_child(const lamp_layer *layer, size_t i) {
  (void)i;
  return ((const recompute *)layer)->module;
}

/* "Recompute(Linear(4 -> 3))"; a container's further lines indented one level. */
static void rc_describe(const lamp_layer *layer, char *buf, size_t size) {
  const lamp_layer *m = ((const recompute *)layer)->module;
  if (size == 0) return;
  char *child = malloc(size);
  size_t used = lamp_nn_describe_child(buf, size, (size_t)snprintf(buf, size, "Recompute("), m, child);
  if (used < size) snprintf(buf + used, size - used, ")");
  free(child);
}

static void rc_destroy(lamp_layer *layer) {
  recompute *r = (recompute *)layer;
  lamp_layer_release(r->module);
  lamp_tensor_release(r->out);
  lamp_scratch_free(r->own);
  free(r);
}

static const lamp_layer_ops recompute_ops = {
    .type = "Recompute",
    .output_shape = rc_output_shape,
    .param_count = rc_param_count,
    .param_decl = rc_param_decl,
    .bind = rc_bind,
    .forward = rc_forward,
    .backward_input = rc_backward_input,
    .accumulate_grads = rc_accumulate_grads,
    .backward = rc_backward,
    .describe = rc_describe,
    .destroy = rc_destroy,
    .buffer_count = rc_buffer_count,
    .buffer_decl = rc_buffer_decl,
    .bind_buffer = rc_bind_buffer,
    .child_count = rc_child_count,
    .child = rc_child,
};

lamp_status lamp_recompute_new(lamp_layer **out, lamp_layer *module) {
  *out = NULL;
  if (module == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Recompute: the module is NULL");
  recompute *r = calloc(1, sizeof *r);
  if (r == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Recompute: out of memory");
  r->base.ops = &recompute_ops;
  r->base.refcount = 1;
  r->module = lamp_layer_retain(module);
  *out = &r->base;
  return LAMP_OK;
}
