/*
** Sequential: children applied in order. The container owns the activations between its
** children and the gradients with respect to them (both charged to the ledger as activations
** and reused across batches), because accumulate_grads, which the model calls after
** backward_input, must hand each child the same (input, output gradient) pair that
** backward_input computed.
**
** Inside nn.Recompute (exec->in_scratch) both come from the model's shared scratch instead
** (lamp_nn_intermediate), and the combined backward gives each back as soon as it is used up.
**
** A child that fuses with the ReLU after it (fusion.h) runs with it as one forward (fused[i]):
** the child's own output is never stored. Backward still walks both: the ReLU reads only its
** output, which stands in for its input, and the child is handed the rectified output as y;
** except that the combined walk hands the pair to the fusion's backward where it has one (no ReLU
** pass, and no gradient at the child's output).
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "nn/fusion.h"
#include "nn/layer.h"
#include "nn/layer_util.h"

typedef struct sequential {
  lamp_layer base;
  size_t n;
  lamp_layer **children;
  size_t *first_param; /* [n + 1]: child j owns parameters first_param[j] .. first_param[j+1]-1 */
  size_t *first_buffer; /* [n + 1]: the same for buffers */
  lamp_tensor **acts;  /* [n - 1]: output of child i, the input of child i + 1 (NULL when fused[i]) */
  lamp_tensor **grads; /* [n - 1]: dL/d acts[i] */
  const lamp_fusion **fused; /* [n]: child i runs with the ReLU after it as one operation, or NULL */
  int forwarded;        /* a forward has run: backward has activations to work from */
} sequential;

/* What child i's output is stored as: for a fused child, the pair's (rectified) output. */
static const lamp_tensor *output_of(const sequential *s, size_t i, const lamp_tensor *y) {
  if (s->fused[i]) i++;
  return i + 1 == s->n ? y : s->acts[i];
}

/* Child i's input; for the ReLU of a fused pair, never stored, its output stands in (ReLU's
   backward reads only the output, and shapes and dtypes agree). y may be NULL where child i
   cannot be such a ReLU. */
static const lamp_tensor *input_of(const sequential *s, size_t i, const lamp_tensor *x, const lamp_tensor *y) {
  if (i == 0) return x;
  return s->fused[i - 1] ? output_of(s, i, y) : s->acts[i - 1];
}

static lamp_status seq_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                    int64_t *out) {
  const sequential *s = (const sequential *)layer;
  /* Two buffers in turn: a child's output_shape need not allow its input and output to alias. */
  int64_t buf[2][LAMP_MAX_DIMS];
  const int64_t *cur = in;
  int nd = ndim;
  for (size_t i = 0; i < s->n; i++) {
    lamp_layer *c = s->children[i];
    int64_t *next = buf[i % 2];
    lamp_status st = c->ops->output_shape(c, nd, cur, &nd, next);
    if (st != LAMP_OK) return st;
    cur = next;
  }
  *out_ndim = nd;
  for (int d = 0; d < nd; d++) out[d] = cur[d];
  return LAMP_OK;
}

static size_t seq_param_count(const lamp_layer *layer) {
  const sequential *s = (const sequential *)layer;
  return s->first_param[s->n];
}

/*
** Child j owns the parameters (or buffers) first[j] .. first[j+1]-1; *local is i's index inside
** it. `what` is "parameter" or "buffer", for the message.
*/
static lamp_status find_owner(const sequential *s, const size_t *first, size_t i, const char *what, size_t *child,
                              size_t *local) {
  for (size_t j = 0; j < s->n; j++) {
    if (i < first[j + 1]) {
      *child = j;
      *local = i - first[j];
      return LAMP_OK;
    }
  }
  return lamp_error(LAMP_ERR_INVALID_ARG, "Sequential: no %s %zu (it has %zu)", what, i, first[s->n]);
}

static lamp_status find_param(const sequential *s, size_t i, size_t *child, size_t *local) {
  return find_owner(s, s->first_param, i, "parameter", child, local);
}

static lamp_status find_buffer(const sequential *s, size_t i, size_t *child, size_t *local) {
  return find_owner(s, s->first_buffer, i, "buffer", child, local);
}

/* The child's name gets the 0-based child index as prefix: "2.weight", "0.1.bias". */
static lamp_status seq_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                  size_t name_size) {
  const sequential *s = (const sequential *)layer;
  size_t j, local;
  lamp_status st = find_param(s, i, &j, &local);
  if (st != LAMP_OK) return st;
  char child_name[256], prefix[24];
  lamp_layer *c = s->children[j];
  st = c->ops->param_decl(c, local, out, child_name, sizeof child_name);
  snprintf(prefix, sizeof prefix, "%zu", j);
  return st != LAMP_OK ? st : lamp_nn_prefix_name(&out->name, prefix, name_buf, name_size, "Sequential: parameter");
}

static size_t seq_buffer_count(const lamp_layer *layer) {
  const sequential *s = (const sequential *)layer;
  return s->first_buffer[s->n];
}

static lamp_status seq_buffer_decl(const lamp_layer *layer, size_t i, lamp_buffer_decl *out, char *name_buf,
                                   size_t name_size) {
  const sequential *s = (const sequential *)layer;
  size_t j, local;
  lamp_status st = find_buffer(s, i, &j, &local);
  if (st != LAMP_OK) return st;
  char child_name[256], prefix[24];
  lamp_layer *c = s->children[j];
  st = c->ops->buffer_decl(c, local, out, child_name, sizeof child_name);
  snprintf(prefix, sizeof prefix, "%zu", j);
  return st != LAMP_OK ? st : lamp_nn_prefix_name(&out->name, prefix, name_buf, name_size, "Sequential: buffer");
}

static lamp_status seq_bind_buffer(lamp_layer *layer, size_t i, lamp_tensor *buffer) {
  sequential *s = (sequential *)layer;
  size_t j, local;
  lamp_status st = find_buffer(s, i, &j, &local);
  if (st != LAMP_OK) return st;
  return s->children[j]->ops->bind_buffer(s->children[j], local, buffer);
}

static size_t seq_child_count(const lamp_layer *layer) { return ((const sequential *)layer)->n; }
static lamp_layer *seq_child(const lamp_layer *layer, size_t i) { return ((const sequential *)layer)->children[i]; }

static lamp_status seq_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  sequential *s = (sequential *)layer;
  size_t j, local;
  lamp_status st = find_param(s, i, &j, &local);
  if (st != LAMP_OK) return st;
  return s->children[j]->ops->bind(s->children[j], local, weight, grad);
}

/* Where child i's forward writes: y when it (or the ReLU fused after it) is the last child, else
   that one's slot in acts, sized from child i's output_shape (a ReLU keeps the shape). */
static lamp_status output_tensor(sequential *s, size_t i, const lamp_exec *exec, const lamp_tensor *in,
                                 lamp_tensor *y, lamp_tensor **out) {
  lamp_layer *c = s->children[i];
  if (s->fused[i]) i++;
  *out = y;
  if (i + 1 == s->n) return LAMP_OK;
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  lamp_status st = c->ops->output_shape(c, in->ndim, in->shape, &nd, shape);
  if (st == LAMP_OK) st = lamp_nn_intermediate(exec, &s->acts[i], exec->activation_dtype, nd, shape);
  if (st == LAMP_OK) *out = s->acts[i];
  return st;
}

/* The children in order, a fused pair as one operation. */
static lamp_status seq_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  sequential *s = (sequential *)layer;
  const lamp_tensor *in = x;
  s->forwarded = 0;
  for (size_t i = 0; i < s->n; i++) {
    lamp_layer *c = s->children[i];
    lamp_tensor *out;
    lamp_status st = output_tensor(s, i, exec, in, y, &out);
    if (st == LAMP_OK) st = s->fused[i] ? s->fused[i]->forward(c, exec, in, out) : c->ops->forward(c, exec, in, out);
    if (st != LAMP_OK) return st;
    in = out;
    if (s->fused[i]) i++;
  }
  s->forwarded = 1;
  return LAMP_OK;
}

/* Where child i's input gradient goes: dx for the first child, else a buffer shaped like its input. */
static lamp_status input_gradient(sequential *s, size_t i, const lamp_exec *exec, const lamp_tensor *in,
                                  lamp_tensor *dx, lamp_tensor **din) {
  *din = dx;
  if (i == 0) return LAMP_OK;
  lamp_status st = lamp_nn_intermediate(exec, &s->grads[i - 1], in->dtype, in->ndim, in->shape);
  if (st == LAMP_OK) *din = s->grads[i - 1];
  return st;
}

static lamp_status check_forwarded(const sequential *s) {
  if (s->forwarded) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE, "Sequential: backward before forward");
}

/* Walks the children in reverse; dx == NULL reaches the first child, which then does nothing. */
static lamp_status seq_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                      const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  sequential *s = (sequential *)layer;
  lamp_status st = check_forwarded(s);
  if (st != LAMP_OK) return st;
  const lamp_tensor *dout = dy;
  for (size_t i = s->n; i-- > 0;) {
    lamp_layer *c = s->children[i];
    lamp_tensor *din;
    const lamp_tensor *in = input_of(s, i, x, y);
    st = input_gradient(s, i, exec, in, dx, &din);
    if (st != LAMP_OK) return st;
    st = c->ops->backward_input(c, exec, in, output_of(s, i, y), dout, din);
    if (st != LAMP_OK) return st;
    dout = din;
  }
  return LAMP_OK;
}

/* Child i and the ReLU fused after it go back as one call. */
static int backward_with_relu(const sequential *s, size_t i) { return s->fused[i] && s->fused[i]->backward != NULL; }

/*
** After child i's backward, inside nn.Recompute: its output gradient and its output (unless it is
** the ReLU of a pair, whose output the child before it still takes) are needed no more.
*/
static void release_after(const sequential *s, const lamp_exec *exec, size_t i, const lamp_tensor *out,
                          const lamp_tensor *y, const lamp_tensor *dout, const lamp_tensor *dy) {
  if (dout != dy) lamp_nn_done_with(exec, dout);
  if (out != y && !(i > 0 && s->fused[i - 1])) lamp_nn_done_with(exec, out);
}

/*
** The combined walk, last child first: each child's parameter gradients are accumulated and
** announced as soon as its output gradient is known, then its input gradient is computed for
** the child before it. A data-parallel trainer overlaps its reductions with what remains.
*/
static lamp_status seq_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  sequential *s = (sequential *)layer;
  lamp_status st = check_forwarded(s);
  if (st != LAMP_OK) return st;
  const lamp_tensor *dout = dy;
  for (size_t i = s->n; i-- > 0;) {
    lamp_layer *c = s->children[i];
    if (i > 0 && backward_with_relu(s, i - 1)) continue; /* the ReLU of a pair: the child before it applies it */
    lamp_tensor *din;
    const lamp_tensor *in = input_of(s, i, x, y), *out = output_of(s, i, y);
    st = input_gradient(s, i, exec, in, dx, &din);
    if (st != LAMP_OK) return st;
    size_t child_first = first_param + s->first_param[i];
    if (backward_with_relu(s, i)) {
      st = s->fused[i]->backward(c, exec, in, out, dout, din, child_first);
    } else if (c->ops->backward != NULL) {
      st = c->ops->backward(c, exec, in, out, dout, din, child_first);
    } else {
      st = c->ops->accumulate_grads != NULL ? c->ops->accumulate_grads(c, exec, in, dout) : LAMP_OK;
      if (st == LAMP_OK && c->ops->accumulate_grads != NULL && exec->grads_ready != NULL)
        exec->grads_ready(exec->grads_ready_ctx, child_first);
      if (st == LAMP_OK) st = c->ops->backward_input(c, exec, in, out, dout, din);
    }
    if (st != LAMP_OK) return st;
    release_after(s, exec, i, out, y, dout, dy);
    dout = din;
  }
  return LAMP_OK;
}

/* Last child first: gradients become ready in the order a bucketed all-reduce wants them. */
static lamp_status seq_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                        const lamp_tensor *dy) {
  sequential *s = (sequential *)layer;
  if (s->n > 1 && s->grads[s->n - 2] == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "Sequential: accumulate_grads before backward_input");
  for (size_t i = s->n; i-- > 0;) {
    lamp_layer *c = s->children[i];
    if (c->ops->accumulate_grads == NULL) continue; /* the ReLU of a fused pair among them: y is not needed */
    const lamp_tensor *dout = i + 1 == s->n ? dy : s->grads[i];
    lamp_status st = c->ops->accumulate_grads(c, exec, input_of(s, i, x, NULL), dout);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

/* Bounded text building: output past the end is dropped, the buffer stays terminated. */
typedef struct text {
  char *buf;
  size_t size, used;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...) {
  if (t->used + 1 >= t->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->used, t->size - t->used, fmt, ap);
  va_end(ap);
  if (n > 0) t->used += (size_t)n < t->size - t->used ? (size_t)n : t->size - t->used - 1;
}

/* A child's (possibly multi-line) description, its continuation lines indented one level. */
static void add_indented(text *t, const char *child) {
  for (const char *p = child; *p; p++) {
    if (*p == '\n') text_add(t, "\n  ");
    else text_add(t, "%c", *p);
  }
}

/*
** Torch7's layout, 1-based like Torch7 (parameter names stay 0-based like PyTorch's):
**   Sequential {
**     [input -> (1) -> (2) -> output]
**     (1): Linear(784 -> 1024)
**     (2): ReLU
**   }
*/
static void seq_describe(const lamp_layer *layer, char *buf, size_t size) {
  const sequential *s = (const sequential *)layer;
  if (size == 0) return;
  buf[0] = '\0';
  text t = {buf, size, 0};
  text_add(&t, "Sequential {\n  [input");
  for (size_t i = 0; i < s->n; i++) text_add(&t, " -> (%zu)", i + 1);
  text_add(&t, " -> output]");
  char *child = malloc(size);
  for (size_t i = 0; i < s->n; i++) {
    text_add(&t, "\n  (%zu): ", i + 1);
    if (child == NULL) {
      text_add(&t, "%s", s->children[i]->ops->type);
      continue;
    }
    s->children[i]->ops->describe(s->children[i], child, size);
    add_indented(&t, child);
  }
  free(child);
  text_add(&t, "\n}");
}

static void release_tensors(lamp_tensor **ts, size_t n) {
  if (ts == NULL) return;
  for (size_t i = 0; i < n; i++) lamp_tensor_release(ts[i]);
  free(ts);
}

static void seq_destroy(lamp_layer *layer) {
  sequential *s = (sequential *)layer;
  for (size_t i = 0; s->children != NULL && i < s->n; i++) lamp_layer_release(s->children[i]);
  free(s->children);
  free(s->first_param);
  free(s->first_buffer);
  release_tensors(s->acts, s->n); /* the last slot is always NULL */
  release_tensors(s->grads, s->n);
  free(s->fused);
  free(s);
}

static const lamp_layer_ops sequential_ops = {
    .type = "Sequential",
    .output_shape = seq_output_shape,
    .param_count = seq_param_count,
    .param_decl = seq_param_decl,
    .bind = seq_bind,
    .forward = seq_forward,
    .backward_input = seq_backward_input,
    .accumulate_grads = seq_accumulate_grads,
    .backward = seq_backward,
    .describe = seq_describe,
    .destroy = seq_destroy,
    .buffer_count = seq_buffer_count,
    .buffer_decl = seq_buffer_decl,
    .bind_buffer = seq_bind_buffer,
    .child_count = seq_child_count,
    .child = seq_child,
};

static lamp_status check_children(lamp_layer *const *children, size_t n) {
  if (n == 0 || children == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Sequential: needs at least one child");
  for (size_t i = 0; i < n; i++)
    if (children[i] == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Sequential: child %zu is NULL", i + 1);
  return LAMP_OK;
}

lamp_status lamp_sequential_new(lamp_layer **out, lamp_layer *const *children, size_t n) {
  *out = NULL;
  lamp_status st = check_children(children, n);
  if (st != LAMP_OK) return st;
  sequential *s = calloc(1, sizeof *s);
  if (s != NULL) {
    s->n = n;
    s->children = calloc(n, sizeof *s->children);
    s->first_param = calloc(n + 1, sizeof *s->first_param);
    s->first_buffer = calloc(n + 1, sizeof *s->first_buffer);
    s->acts = calloc(n, sizeof *s->acts); /* n - 1 used; n keeps calloc(0) out of the picture */
    s->grads = calloc(n, sizeof *s->grads);
    s->fused = calloc(n, sizeof *s->fused);
  }
  if (s == NULL || s->children == NULL || s->first_param == NULL || s->first_buffer == NULL || s->acts == NULL ||
      s->grads == NULL || s->fused == NULL) {
    if (s != NULL) {
      s->n = 0; /* nothing retained yet */
      seq_destroy(&s->base);
    }
    return lamp_error(LAMP_ERR_SYSTEM, "Sequential: out of memory");
  }
  s->base.ops = &sequential_ops;
  s->base.refcount = 1;
  for (size_t i = 0; i < n; i++) {
    s->children[i] = lamp_layer_retain(children[i]);
    s->first_param[i + 1] = s->first_param[i] + children[i]->ops->param_count(children[i]);
    s->first_buffer[i + 1] = s->first_buffer[i] + lamp_layer_buffer_count(children[i]);
    s->fused[i] = i + 1 < n ? lamp_fusion_with_relu(children[i], children[i + 1]) : NULL;
  }
  *out = &s->base;
  return LAMP_OK;
}
