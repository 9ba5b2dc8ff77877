/*
** Dropout(p): in training, each element is zeroed with probability p and the survivors are
** scaled by 1/(1-p) (inverted dropout, as PyTorch); in evaluation, the identity.
**
** Reproducibility: the mask of one forward comes from a generator seeded by the model's seed,
** the index of the training forward and this layer's stream number within the forward
** (exec->rng_streams counts the stochastic layers a forward meets, in order), so a seed
** reproduces every mask of a run and two Dropouts in one network draw different masks. The
** mask (one byte per element, an activation) is kept for backward. It is drawn on the host, the
** same sequence on every device, and copied to the device through its queue; a host buffer is
** drawn into again only once that copy has been done. There is one buffer per exec->host_slot
** (the trainer's micro-step in its group), so that wait falls after the optimizer step's one
** synchronisation and costs nothing; with one buffer, the second micro-step of a group would
** wait for the first one's copy.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "tensor/rng.h"

/* A host buffer a mask is drawn into. */
typedef struct mask_buffer {
  uint8_t *drawn;     /* `capacity` bytes */
  size_t capacity;
  lamp_event *copied; /* recorded after its copy to the device; on mask_device */
} mask_buffer;

typedef struct dropout {
  lamp_layer base;
  double p;
  lamp_tensor *mask;     /* u8, of the last training forward, on the device */
  mask_buffer *buffers;  /* one per host slot seen so far, n_buffers of them */
  size_t n_buffers;
  lamp_device mask_device;
  int masked;         /* the last forward applied the mask (training with p > 0) */
  uint64_t forwards;  /* own count, used when the caller gives no exec->rng_streams */
} dropout;

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser: a bijection that spreads every bit */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static lamp_status dropout_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                        int64_t *out) {
  (void)layer;
  *out_ndim = ndim;
  for (int i = 0; i < ndim; i++) out[i] = in[i];
  return LAMP_OK;
}

static size_t dropout_param_count(const lamp_layer *layer) {
  (void)layer;
  return 0;
}

static lamp_status dropout_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                      size_t name_size) {
  (void)layer, (void)out, (void)name_buf, (void)name_size;
  return lamp_error(LAMP_ERR_INVALID_ARG, "Dropout: no parameter %zu (it has none)", i);
}

static lamp_status dropout_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  (void)weight, (void)grad;
  return dropout_param_decl(layer, i, NULL, NULL, 0);
}

static lamp_status check_like(const dropout *d, const lamp_tensor *t, const char *role, const lamp_tensor *x) {
  char what[128], want[128];
  if (lamp_nn_is_activation(t) && lamp_tensor_numel(t) == lamp_tensor_numel(x)) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "Dropout(%g): %s %s, expected %s contiguous floating-point values", d->p,
                    role, lamp_tensor_describe(t, what, sizeof what),
                    lamp_nn_shape_text(x->ndim, x->shape, want, sizeof want));
}

/* Waits until the device has copied every buffer, and forgets their events (on `device`). */
static lamp_status wait_all_copied(dropout *d) {
  lamp_status st = LAMP_OK;
  for (size_t i = 0; i < d->n_buffers; i++) {
    lamp_event *e = d->buffers[i].copied;
    lamp_status waited = e != NULL ? lamp_event_wait(e) : LAMP_OK;
    if (st == LAMP_OK) st = waited;
    lamp_event_free(e);
    d->buffers[i].copied = NULL;
  }
  return st;
}

/* The host buffer of `slot` for n mask bytes, once the device has copied its last contents. */
static lamp_status host_buffer(dropout *d, lamp_device device, unsigned slot, size_t n, mask_buffer **out) {
  lamp_status st = LAMP_OK;
  if (d->mask_device != device) st = wait_all_copied(d); /* events belong to their device */
  d->mask_device = device;
  if (st == LAMP_OK && slot >= d->n_buffers) {
    mask_buffer *more = realloc(d->buffers, ((size_t)slot + 1) * sizeof *more);
    if (more == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Dropout(%g): out of memory for mask buffers", d->p);
    memset(more + d->n_buffers, 0, ((size_t)slot + 1 - d->n_buffers) * sizeof *more);
    d->buffers = more;
    d->n_buffers = (size_t)slot + 1;
  }
  if (st != LAMP_OK) return st;
  mask_buffer *b = &d->buffers[slot];
  if (b->copied == NULL) st = lamp_event_new(device, &b->copied);
  if (st == LAMP_OK && (st = lamp_event_wait(b->copied)) != LAMP_OK)
    return lamp_error_context(st, "Dropout(%g): its mask is drawn on the host", d->p);
  if (st != LAMP_OK) return st;
  if (n > b->capacity) {
    uint8_t *bigger = realloc(b->drawn, n);
    if (bigger == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Dropout(%g): out of memory for a mask of %zu", d->p, n);
    b->drawn = bigger;
    b->capacity = n;
  }
  *out = b;
  return LAMP_OK;
}

static lamp_status draw_mask(dropout *d, const lamp_exec *exec, const lamp_tensor *x) {
  uint64_t stream = 0, index = exec->forward_index;
  if (exec->rng_streams != NULL) stream = (*exec->rng_streams)++;
  else index = d->forwards++;
  size_t n = lamp_tensor_numel(x);
  mask_buffer *b = NULL;
  lamp_status st = lamp_tensor_ensure(&d->mask, LAMP_U8, exec->device, x->ndim, x->shape, LAMP_MEM_ACTIVATIONS);
  if (st == LAMP_OK) st = host_buffer(d, exec->device, exec->host_slot, n, &b);
  if (st != LAMP_OK) return st;
  lamp_rng rng;
  lamp_rng_seed(&rng, mix64(exec->seed ^ mix64(index ^ mix64(stream + 0x9e3779b97f4a7c15ull))));
  for (size_t i = 0; i < n; i++) b->drawn[i] = lamp_rng_uniform(&rng) >= d->p;
  st = lamp_upload_async(exec->device, lamp_tensor_data(d->mask), b->drawn, n);
  return st == LAMP_OK ? lamp_event_record(b->copied) : st;
}

static lamp_status dropout_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  dropout *d = (dropout *)layer;
  lamp_status st = check_like(d, x, "input", x);
  if (st == LAMP_OK) st = check_like(d, y, "output", x);
  if (st != LAMP_OK) return st;
  size_t n = lamp_tensor_numel(x);
  if (exec->repeat) {
    if (d->masked && lamp_tensor_numel(d->mask) != n)
      return lamp_error(LAMP_ERR_INVALID_USAGE,
                        "Dropout(%g): a repeated forward for another input than the last forward's", d->p);
  } else {
    d->masked = exec->training && d->p > 0.0;
  }
  if (!d->masked)
    return lamp_convert(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(x), x->dtype, n);
  if (!exec->repeat) st = draw_mask(d, exec, x);
  if (st != LAMP_OK) return st;
  return lamp_apply_mask(exec->device, lamp_tensor_data(y), y->dtype, lamp_tensor_data(x), x->dtype,
                         lamp_tensor_data(d->mask), (float)(1.0 / (1.0 - d->p)), n);
}

static lamp_status dropout_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                          const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  dropout *d = (dropout *)layer;
  (void)y;
  if (dx == NULL) return LAMP_OK;
  lamp_status st = check_like(d, dy, "output gradient", x);
  if (st == LAMP_OK) st = check_like(d, dx, "input gradient", x);
  if (st != LAMP_OK) return st;
  size_t n = lamp_tensor_numel(x);
  if (!d->masked)
    return lamp_convert(exec->device, lamp_tensor_data(dx), dx->dtype, lamp_tensor_data(dy), dy->dtype, n);
  if (lamp_tensor_numel(d->mask) != n)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "Dropout(%g): backward for another input than the last forward's", d->p);
  return lamp_apply_mask(exec->device, lamp_tensor_data(dx), dx->dtype, lamp_tensor_data(dy), dy->dtype,
                         lamp_tensor_data(d->mask), (float)(1.0 / (1.0 - d->p)), n);
}

static void dropout_describe(const lamp_layer *layer, char *buf, size_t size) {
  snprintf(buf, size, "Dropout(%g)", ((const dropout *)layer)->p);
}

static void dropout_destroy(lamp_layer *layer) {
  dropout *d = (dropout *)layer;
  (void)wait_all_copied(d); /* the device may still be reading the buffers */
  for (size_t i = 0; i < d->n_buffers; i++) free(d->buffers[i].drawn);
  free(d->buffers);
  lamp_tensor_release(d->mask);
  free(d);
}

static const lamp_layer_ops dropout_ops = {
    .type = "Dropout", .output_shape = dropout_output_shape, .param_count = dropout_param_count,
    .param_decl = dropout_param_decl, .bind = dropout_bind, .forward = dropout_forward,
    .backward_input = dropout_backward_input, .describe = dropout_describe, .destroy = dropout_destroy,
};

lamp_status lamp_dropout_new(lamp_layer **out, double p) {
  *out = NULL;
  if (!(p >= 0.0 && p < 1.0))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Dropout: probability %g must be in [0, 1)", p);
  dropout *d = calloc(1, sizeof *d);
  if (d == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Dropout: out of memory");
  d->base.ops = &dropout_ops;
  d->base.refcount = 1;
  d->p = p;
  *out = &d->base;
  return LAMP_OK;
}
