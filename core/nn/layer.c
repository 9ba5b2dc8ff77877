/* Reference counting shared by every layer type (the type's destroy frees the rest), and the
   helpers that walk any layer through its vtable. */
#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"
#include "nn/layer.h"

lamp_layer *lamp_layer_retain(lamp_layer *layer) {
  if (layer != NULL) layer->refcount++;
  return layer;
}

void lamp_layer_release(lamp_layer *layer) {
  if (layer == NULL || --layer->refcount > 0) return;
  layer->ops->destroy(layer);
}

size_t lamp_layer_buffer_count(const lamp_layer *layer) {
  return layer->ops->buffer_count != NULL ? layer->ops->buffer_count(layer) : 0;
}

lamp_status lamp_layer_param_numel(const lamp_layer *layer, size_t *out) {
  size_t total = 0, n = layer->ops->param_count(layer);
  for (size_t i = 0; i < n; i++) {
    lamp_param_decl d;
    char name[128];
    size_t count;
    lamp_status st = layer->ops->param_decl(layer, i, &d, name, sizeof name);
    if (st != LAMP_OK) return st;
    if (!lamp_shape_numel(d.ndim, d.shape, &count)) return lamp_error_context(LAMP_ERR_INVALID_ARG, "%s", d.name);
    total += count;
  }
  *out = total;
  return LAMP_OK;
}

/* ---- the summary ------------------------------------------------------------------------- */

typedef struct summary {
  char *buf;
  size_t size, used;
} summary;

static void summary_add(summary *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void summary_add(summary *s, const char *fmt, ...) {
  if (s->used + 1 >= s->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(s->buf + s->used, s->size - s->used, fmt, ap);
  va_end(ap);
  if (n > 0) s->used += (size_t)n < s->size - s->used ? (size_t)n : s->size - s->used - 1;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(size_t v, char *buf, size_t size) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%zu", v);
  size_t k = 0;
  for (int i = 0; i < n && k + 2 < size; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = digits[i];
  }
  buf[k] = '\0';
  return buf;
}

/* One line per layer: its label padded to a column, then its own count (containers: the sum). */
static void summary_layer(summary *s, const lamp_layer *layer, const char *label, int depth) {
  char desc[256], count[32];
  size_t numel = 0;
  if (lamp_layer_param_numel(layer, &numel) != LAMP_OK) numel = 0;
  size_t kids = layer->ops->child_count != NULL ? layer->ops->child_count(layer) : 0;
  if (kids > 0) snprintf(desc, sizeof desc, "%s", layer->ops->type);
  else layer->ops->describe(layer, desc, sizeof desc);
  char line[384];
  int len = snprintf(line, sizeof line, "%*s%s%s", 2 * depth, "", label, desc);
  summary_add(s, "%s%*s%12s\n", line, len < 56 ? 56 - len : 1, "", grouped(numel, count, sizeof count));
  for (size_t i = 0; i < kids; i++) {
    char child_label[32];
    snprintf(child_label, sizeof child_label, "(%zu): ", i + 1);
    summary_layer(s, layer->ops->child(layer, i), child_label, depth + 1);
  }
}

void lamp_layer_summary(const lamp_layer *layer, char *buf, size_t size) {
  if (size == 0) return;
  buf[0] = '\0';
  summary s = {buf, size, 0};
  summary_layer(&s, layer, "", 0);
  size_t numel = 0;
  char count[32];
  if (lamp_layer_param_numel(layer, &numel) != LAMP_OK) numel = 0;
  summary_add(&s, "total parameters: %s", grouped(numel, count, sizeof count));
}

lamp_status lamp_layer_backward_walk(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                     const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  const lamp_layer_ops *ops = layer->ops;
  if (ops->backward != NULL) return ops->backward(layer, exec, x, y, dy, dx, first_param);
  lamp_status st = LAMP_OK;
  if (ops->accumulate_grads != NULL) {
    st = ops->accumulate_grads(layer, exec, x, dy);
    if (st == LAMP_OK && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  }
  if (st == LAMP_OK) st = ops->backward_input(layer, exec, x, y, dy, dx);
  return st;
}
