/*
** Residual: y = block(x) + skip(x), skip = the projection when given, else the identity
** (torch's `x + f(x)` and the downsampling shortcut of ResNets). The block's output h and the
** projection's output are kept (activations) for their backward; since dL/dh = dy and
** dL/d(projection output) = dy, both branches take dy as it comes and dx is the sum of their
** input gradients (plus dy itself for the identity).
**
** Inside nn.Recompute the three come from the model's shared scratch (lamp_nn_intermediate) and
** the combined backward gives each back once used.
**
** Parameters (and buffers) are the block's, then the projection's, named "block.*" and
** "projection.*". The combined backward walks the projection first (its parameters come
** last), so gradients are announced highest index first, as the bucketed all-reduce wants.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/fusion.h"
#include "nn/layer.h"
#include "nn/layer_util.h"

typedef struct residual {
  lamp_layer base;
  lamp_layer *block, *proj;
  size_t block_params, block_buffers;
  lamp_tensor *h, *p;   /* outputs of the block and the projection */
  lamp_tensor *dxp;     /* the projection's input gradient */
} residual;

/* The block's output shape [hd, hs] against another's. */
static lamp_status check_shape(int hd, const int64_t *hs, int ndim, const int64_t *shape, const char *what) {
  int same = hd == ndim;
  for (int d = 0; same && d < ndim; d++) same = hs[d] == shape[d];
  if (same) return LAMP_OK;
  char a[128], b[128];
  return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the block's output %s does not match %s %s",
                    lamp_nn_shape_text(hd, hs, a, sizeof a), what, lamp_nn_shape_text(ndim, shape, b, sizeof b));
}

static lamp_status check_same(const lamp_tensor *h, int ndim, const int64_t *shape, const char *what) {
  return check_shape(h->ndim, h->shape, ndim, shape, what);
}

static lamp_status res_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                    int64_t *out) {
  const residual *r = (const residual *)layer;
  lamp_status st = r->block->ops->output_shape(r->block, ndim, in, out_ndim, out);
  if (st != LAMP_OK) return st;
  int skip_ndim = ndim;
  int64_t skip[LAMP_MAX_DIMS];
  memcpy(skip, in, sizeof *in * (size_t)ndim);
  if (r->proj != NULL) {
    st = r->proj->ops->output_shape(r->proj, ndim, in, &skip_ndim, skip);
    if (st != LAMP_OK) return st;
  }
  int same = skip_ndim == *out_ndim;
  for (int i = 0; same && i < skip_ndim; i++) same = skip[i] == out[i];
  if (same) return LAMP_OK;
  char a[128], b[128];
  return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the block's output %s does not match the %s %s",
                    lamp_nn_shape_text(*out_ndim, out, a, sizeof a), r->proj ? "projection's output" : "input",
                    lamp_nn_shape_text(skip_ndim, skip, b, sizeof b));
}

/* ---- parameters and buffers: the block's, then the projection's ---------------------------- */

static size_t res_param_count(const lamp_layer *layer) {
  const residual *r = (const residual *)layer;
  return r->block_params + (r->proj ? r->proj->ops->param_count(r->proj) : 0);
}

static size_t res_buffer_count(const lamp_layer *layer) {
  const residual *r = (const residual *)layer;
  return r->block_buffers + (r->proj ? lamp_layer_buffer_count(r->proj) : 0);
}

/* The child owning index i (of n_block in the block); *local is i inside it. */
static lamp_layer *owner(const residual *r, size_t i, size_t n_block, size_t *local, const char **prefix) {
  if (i < n_block) {
    *local = i;
    *prefix = "block";
    return r->block;
  }
  *local = i - n_block;
  *prefix = "projection";
  return r->proj;
}

static lamp_status res_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                  size_t name_size) {
  const residual *r = (const residual *)layer;
  if (i >= res_param_count(layer))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: no parameter %zu (it has %zu)", i, res_param_count(layer));
  size_t local;
  const char *prefix;
  lamp_layer *c = owner(r, i, r->block_params, &local, &prefix);
  char child_name[256];
  lamp_status st = c->ops->param_decl(c, local, out, child_name, sizeof child_name);
  if (st == LAMP_OK) st = lamp_nn_prefix_name(&out->name, prefix, name_buf, name_size, "Residual:");
  return st;
}

static lamp_status res_buffer_decl(const lamp_layer *layer, size_t i, lamp_buffer_decl *out, char *name_buf,
                                   size_t name_size) {
  const residual *r = (const residual *)layer;
  if (i >= res_buffer_count(layer))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: no buffer %zu (it has %zu)", i, res_buffer_count(layer));
  size_t local;
  const char *prefix;
  lamp_layer *c = owner(r, i, r->block_buffers, &local, &prefix);
  char child_name[256];
  lamp_status st = c->ops->buffer_decl(c, local, out, child_name, sizeof child_name);
  if (st == LAMP_OK) st = lamp_nn_prefix_name(&out->name, prefix, name_buf, name_size, "Residual:");
  return st;
}

static lamp_status res_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  const residual *r = (const residual *)layer;
  if (i >= res_param_count(layer))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: no parameter %zu (it has %zu)", i, res_param_count(layer));
  size_t local;
  const char *prefix;
  lamp_layer *c = owner(r, i, r->block_params, &local, &prefix);
  return c->ops->bind(c, local, weight, grad);
}

static lamp_status res_bind_buffer(lamp_layer *layer, size_t i, lamp_tensor *buffer) {
  const residual *r = (const residual *)layer;
  if (i >= res_buffer_count(layer))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: no buffer %zu (it has %zu)", i, res_buffer_count(layer));
  size_t local;
  const char *prefix;
  lamp_layer *c = owner(r, i, r->block_buffers, &local, &prefix);
  return c->ops->bind_buffer(c, local, buffer);
}

/* ---- forward and backward ------------------------------------------------------------------ */

/* Runs child on x into *out, sized from its output_shape (activation dtype). */
static lamp_status run_child(lamp_layer *child, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor **out) {
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  lamp_status st = child->ops->output_shape(child, x->ndim, x->shape, &nd, shape);
  if (st == LAMP_OK) st = lamp_nn_intermediate(exec, out, exec->activation_dtype, nd, shape);
  if (st == LAMP_OK) st = child->ops->forward(child, exec, x, *out);
  return st;
}

static lamp_status check_output(const lamp_tensor *y) {
  if (lamp_nn_is_activation(y)) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the output must be a contiguous floating-point tensor");
}

/* skip: x, or the projection's output (run first). */
static lamp_status skip_branch(residual *r, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor **skip) {
  *skip = x;
  if (r->proj == NULL) return LAMP_OK;
  lamp_status st = run_child(r->proj, exec, x, &r->p);
  *skip = r->p;
  return st;
}

static lamp_status forward_pass(residual *r, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y, int relu) {
  const lamp_tensor *skip;
  lamp_status st = run_child(r->block, exec, x, &r->h);
  if (st == LAMP_OK) st = skip_branch(r, exec, x, &skip);
  if (st != LAMP_OK) return st;
  st = check_same(r->h, skip->ndim, skip->shape, r->proj ? "the projection's output" : "the input");
  if (st == LAMP_OK) st = check_same(r->h, y->ndim, y->shape, "the output");
  if (st == LAMP_OK) st = check_output(y);
  size_t n = lamp_tensor_numel(y);
  if (st == LAMP_OK) /* one pass: the sum of both branches (rectified when fused), rounded once */
    st = lamp_add(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(r->h), r->h->dtype,
                  lamp_tensor_data(skip), skip->dtype, n, relu);
  return st;
}

static lamp_status res_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  return forward_pass((residual *)layer, exec, x, y, 0);
}

/* A ResNet block's closing ReLU rides on the sum (fusion.h); backward never reads y. */
lamp_status lamp_residual_forward_relu(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       lamp_tensor *y) {
  return forward_pass((residual *)layer, exec, x, y, 1);
}

static lamp_status check_ready(const residual *r, const lamp_tensor *dy) {
  if (r->h == NULL || (r->proj != NULL && r->p == NULL))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "Residual: backward before forward");
  return check_same(r->h, dy->ndim, dy->shape, "the output gradient");
}

/* dx += the skip branch's input gradient: dy itself, or the projection's (computed into dxp). */
static lamp_status add_skip_gradient(residual *r, const lamp_exec *exec, const lamp_tensor *dy, lamp_tensor *dx) {
  const lamp_tensor *g = r->proj != NULL ? r->dxp : dy;
  if (lamp_tensor_numel(g) != lamp_tensor_numel(dx))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the input gradient does not match the skip branch");
  return lamp_add_into(exec->device, lamp_tensor_data(dx), dx->dtype, lamp_tensor_data(g), g->dtype, lamp_tensor_numel(dx));
}

static lamp_status ensure_dxp(residual *r, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *dx) {
  if (r->proj == NULL || dx == NULL) return LAMP_OK;
  return lamp_nn_intermediate(exec, &r->dxp, dx->dtype, x->ndim, x->shape);
}

static lamp_status res_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                      const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  residual *r = (residual *)layer;
  (void)y; /* the block's output is h; the sum's own is not needed */
  lamp_status st = check_ready(r, dy);
  if (st == LAMP_OK) st = ensure_dxp(r, exec, x, dx);
  if (st == LAMP_OK && r->proj != NULL) st = r->proj->ops->backward_input(r->proj, exec, x, r->p, dy, dx ? r->dxp : NULL);
  if (st == LAMP_OK) st = r->block->ops->backward_input(r->block, exec, x, r->h, dy, dx);
  if (st == LAMP_OK && dx != NULL) st = add_skip_gradient(r, exec, dy, dx);
  return st;
}

static lamp_status res_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                        const lamp_tensor *dy) {
  residual *r = (residual *)layer;
  lamp_status st = check_ready(r, dy);
  if (st == LAMP_OK && r->proj != NULL && r->proj->ops->accumulate_grads != NULL)
    st = r->proj->ops->accumulate_grads(r->proj, exec, x, dy);
  if (st == LAMP_OK && r->block->ops->accumulate_grads != NULL)
    st = r->block->ops->accumulate_grads(r->block, exec, x, dy);
  return st;
}

static lamp_status res_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                                const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  residual *r = (residual *)layer;
  (void)y;
  lamp_status st = check_ready(r, dy);
  if (st == LAMP_OK) st = ensure_dxp(r, exec, x, dx);
  if (st == LAMP_OK && r->proj != NULL)
    st = lamp_layer_backward_walk(r->proj, exec, x, r->p, dy, dx ? r->dxp : NULL, first_param + r->block_params);
  if (st == LAMP_OK) lamp_nn_done_with(exec, r->p); /* inside nn.Recompute: used up */
  if (st == LAMP_OK) st = lamp_layer_backward_walk(r->block, exec, x, r->h, dy, dx, first_param);
  if (st == LAMP_OK) lamp_nn_done_with(exec, r->h);
  if (st == LAMP_OK && dx != NULL) st = add_skip_gradient(r, exec, dy, dx);
  if (st == LAMP_OK) lamp_nn_done_with(exec, r->dxp);
  return st;
}

/* ---- the rest -------------------------------------------------------------------------------- */

static size_t res_child_count(const lamp_layer *layer) { return ((const residual *)layer)->proj ? 2 : 1; }

static lamp_layer *res_child(const lamp_layer *layer, size_t i) {
  const residual *r = (const residual *)layer;
  return i == 0 ? r->block : r->proj;
}

/* "Residual {\n  block: ...\n  projection: ...\n}" with the children's lines indented. */
static void res_describe(const lamp_layer *layer, char *buf, size_t size) {
  const residual *r = (const residual *)layer;
  if (size == 0) return;
  char *child = malloc(size);
  size_t used = (size_t)snprintf(buf, size, "Residual {");
  for (size_t i = 0; i < res_child_count(layer) && used < size; i++) {
    lamp_layer *c = res_child(layer, i);
    used += (size_t)snprintf(buf + used, size - used, "\n  %s: ", i == 0 ? "block" : "projection");
    used = lamp_nn_describe_child(buf, size, used, c, child);
  }
  if (used < size) snprintf(buf + used, size - used, "\n}");
  free(child);
  (void)r;
}

static void res_destroy(lamp_layer *layer) {
  residual *r = (residual *)layer;
  lamp_layer_release(r->block);
  lamp_layer_release(r->proj);
  lamp_tensor_release(r->h);
  lamp_tensor_release(r->p);
  lamp_tensor_release(r->dxp);
  free(r);
}

static const lamp_layer_ops residual_ops = {
    .type = "Residual",
    .output_shape = res_output_shape,
    .param_count = res_param_count,
    .param_decl = res_param_decl,
    .bind = res_bind,
    .forward = res_forward,
    .backward_input = res_backward_input,
    .accumulate_grads = res_accumulate_grads,
    .backward = res_backward,
    .describe = res_describe,
    .destroy = res_destroy,
    .buffer_count = res_buffer_count,
    .buffer_decl = res_buffer_decl,
    .bind_buffer = res_bind_buffer,
    .child_count = res_child_count,
    .child = res_child,
};

lamp_status lamp_residual_new(lamp_layer **out, lamp_layer *block, lamp_layer *projection) {
  *out = NULL;
  if (block == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the block is NULL");
  if (block == projection) return lamp_error(LAMP_ERR_INVALID_ARG, "Residual: the block cannot be its own projection");
  residual *r = calloc(1, sizeof *r);
  if (r == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Residual: out of memory");
  r->base.ops = &residual_ops;
  r->base.refcount = 1;
  r->block = lamp_layer_retain(block);
  r->proj = lamp_layer_retain(projection);
  r->block_params = block->ops->param_count(block);
  r->block_buffers = lamp_layer_buffer_count(block);
  *out = &r->base;
  return LAMP_OK;
}

int lamp_layer_is_residual(const lamp_layer *layer) { return layer != NULL && layer->ops == &residual_ops; }
