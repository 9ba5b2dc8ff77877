/*
** The entry points of backend.h: each finds the device's backend and the operation in its table,
** or fails with the uniform message. Nothing here knows any device.
*/
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "base/error.h"

/* The backend of `device` when its slot at `offset` is filled; else NULL, the error recorded. */
static const lamp_backend *with_op(lamp_device device, size_t offset, const char *op) {
  const lamp_backend *b = lamp_backend_get(device, op);
  if (b == NULL) return NULL;
  void (*slot)(void);
  memcpy(&slot, (const char *)b + offset, sizeof slot);
  if (slot != NULL) return b;
  lamp_error(LAMP_ERR_UNSUPPORTED, "%s: not implemented for device %s", op, b->memory.name);
  return NULL;
}

#define WITH(device, op) with_op(device, offsetof(lamp_backend, op), #op)

/* ---- copies and ordering --------------------------------------------------------------------- */

/* Between two devices, neither of them the host: through a host buffer. */
static lamp_status copy_across(lamp_device dst_device, void *dst, lamp_device src_device, const void *src,
                               size_t bytes) {
  void *bounce = malloc(bytes ? bytes : 1);
  if (bounce == NULL) return lamp_error(LAMP_ERR_SYSTEM, "copy: out of host memory for %zu bytes", bytes);
  lamp_status st = lamp_copy(LAMP_HOST, bounce, src_device, src, bytes);
  if (st == LAMP_OK) st = lamp_copy(dst_device, dst, LAMP_HOST, bounce, bytes);
  free(bounce);
  return st;
}

lamp_status lamp_copy(lamp_device dst_device, void *dst, lamp_device src_device, const void *src, size_t bytes) {
  const lamp_backend *b;
  if (bytes == 0) return LAMP_OK;
  if (dst_device == LAMP_HOST && src_device == LAMP_HOST) {
    memmove(dst, src, bytes);
    return LAMP_OK;
  }
  if (src_device == LAMP_HOST) return (b = WITH(dst_device, upload)) ? b->upload(dst, src, bytes) : LAMP_ERR_UNSUPPORTED;
  if (dst_device == LAMP_HOST)
    return (b = WITH(src_device, download)) ? b->download(dst, src, bytes) : LAMP_ERR_UNSUPPORTED;
  if (dst_device != src_device) return copy_across(dst_device, dst, src_device, src, bytes);
  return (b = WITH(dst_device, copy)) ? b->copy(dst, src, bytes) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_upload_async(lamp_device device, void *dst, const void *src, size_t bytes) {
  const lamp_backend *b = lamp_backend_get(device, "upload_async");
  if (b == NULL) return LAMP_ERR_UNSUPPORTED;
  if (bytes == 0) return LAMP_OK;
  if (b->upload_async == NULL) return lamp_copy(device, dst, LAMP_HOST, src, bytes); /* a synchronous device */
  return b->upload_async(dst, src, bytes);
}

lamp_status lamp_zero(lamp_device device, void *ptr, size_t bytes) {
  const lamp_backend *b = lamp_backend_get(device, "zero");
  return b != NULL ? b->memory.zero(ptr, bytes) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_synchronize(lamp_device device) {
  const lamp_backend *b = lamp_backend_get(device, "synchronize");
  if (b == NULL) return LAMP_ERR_UNSUPPORTED;
  return b->synchronize != NULL ? b->synchronize() : LAMP_OK; /* NULL: work is done on return */
}

struct lamp_event {
  const lamp_backend *backend;
  void *handle; /* NULL on a device whose work is done on return */
};

lamp_status lamp_event_new(lamp_device device, lamp_event **out) {
  *out = NULL;
  const lamp_backend *b = lamp_backend_get(device, "event_new");
  if (b == NULL) return LAMP_ERR_UNSUPPORTED;
  lamp_event *e = calloc(1, sizeof *e);
  if (e == NULL) return lamp_error(LAMP_ERR_SYSTEM, "event: out of memory");
  e->backend = b;
  if (b->event_new != NULL) {
    lamp_status st = b->event_new(&e->handle);
    if (st != LAMP_OK) {
      free(e);
      return st;
    }
  }
  *out = e;
  return LAMP_OK;
}

void lamp_event_free(lamp_event *event) {
  if (event == NULL) return;
  if (event->handle != NULL) event->backend->event_free(event->handle);
  free(event);
}

lamp_status lamp_event_record(lamp_event *event) {
  return event->handle != NULL ? event->backend->event_record(event->handle) : LAMP_OK;
}

lamp_status lamp_event_wait(lamp_event *event) {
  return event->handle != NULL ? event->backend->event_wait(event->handle) : LAMP_OK;
}

void *lamp_device_host_view(lamp_device device, const void *ptr) {
  if (!lamp_device_has(device, LAMP_CAP_HOST_VIEW)) return NULL;
  return lamp_backend_get(device, "host_view")->host_view(ptr);
}

void *lamp_device_stream(lamp_device device) {
  const lamp_backend *b = lamp_backend_get(device, "stream");
  return b != NULL && b->stream != NULL ? b->stream() : NULL;
}

/* ---- graphs ---------------------------------------------------------------------------------- */

struct lamp_graph {
  const lamp_backend *backend;
  void *handle;
};

/* The backend of `device` when it records graphs; else NULL, the error naming op and device. */
static const lamp_backend *with_graphs(lamp_device device, const char *op) {
  const lamp_backend *b = lamp_backend_get(device, op);
  if (b == NULL) return NULL;
  if ((b->caps & LAMP_CAP_GRAPHS) && b->graph_begin != NULL) return b;
  lamp_error(LAMP_ERR_UNSUPPORTED, "%s: device %s does not record graphs", op, b->memory.name);
  return NULL;
}

lamp_status lamp_graph_begin(lamp_device device) {
  const lamp_backend *b = with_graphs(device, "graph_begin");
  return b != NULL ? b->graph_begin() : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_graph_end(lamp_device device, lamp_graph **out) {
  *out = NULL;
  const lamp_backend *b = with_graphs(device, "graph_end");
  if (b == NULL) return LAMP_ERR_UNSUPPORTED;
  void *handle = NULL;
  lamp_status st = b->graph_end(&handle);
  if (st != LAMP_OK) return st;
  lamp_graph *g = malloc(sizeof *g);
  if (g == NULL) {
    b->graph_free(handle);
    return lamp_error(LAMP_ERR_SYSTEM, "graph_end: out of memory");
  }
  *g = (lamp_graph){b, handle};
  *out = g;
  return LAMP_OK;
}

lamp_status lamp_graph_launch(lamp_graph *graph) { return graph->backend->graph_launch(graph->handle); }

void lamp_graph_free(lamp_graph *graph) {
  if (graph == NULL) return;
  graph->backend->graph_free(graph->handle);
  free(graph);
}

/* ---- kernels --------------------------------------------------------------------------------- */

lamp_status lamp_gemm(lamp_device device, int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                      const void *a, lamp_dtype a_dtype, size_t lda, const void *b_, lamp_dtype b_dtype, size_t ldb,
                      float beta, void *c, lamp_dtype c_dtype, size_t ldc) {
  const lamp_backend *b = WITH(device, gemm);
  return b ? b->gemm(trans_a, trans_b, m, n, k, alpha, a, a_dtype, lda, b_, b_dtype, ldb, beta, c, c_dtype, ldc)
           : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_convert(lamp_device device, void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype,
                         size_t n) {
  const lamp_backend *b = WITH(device, convert);
  return b ? b->convert(dst, dst_dtype, src, src_dtype, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_fill(lamp_device device, void *x, lamp_dtype dtype, size_t n, float value) {
  const lamp_backend *b = WITH(device, fill);
  return b ? b->fill(x, dtype, n, value) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_add_bias_rows(lamp_device device, void *y, lamp_dtype y_dtype, const void *bias,
                               lamp_dtype bias_dtype, size_t rows, size_t cols) {
  const lamp_backend *b = WITH(device, add_bias_rows);
  return b ? b->add_bias_rows(y, y_dtype, bias, bias_dtype, rows, cols) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_sum_rows(lamp_device device, float *out, const void *dy, lamp_dtype dy_dtype, size_t rows,
                          size_t cols, float alpha, float beta) {
  const lamp_backend *b = WITH(device, sum_rows);
  return b ? b->sum_rows(out, dy, dy_dtype, rows, cols, alpha, beta) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_relu_forward(lamp_device device, void *y, const void *x, lamp_dtype dtype, size_t n) {
  const lamp_backend *b = WITH(device, relu_forward);
  return b ? b->relu_forward(y, x, dtype, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_relu_backward(lamp_device device, void *dx, const void *dy, const void *y, lamp_dtype dtype,
                               size_t n) {
  const lamp_backend *b = WITH(device, relu_backward);
  return b ? b->relu_backward(dx, dy, y, dtype, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_cross_entropy(lamp_device device, const void *logits, lamp_dtype logits_dtype,
                               const int32_t *labels, size_t rows, size_t classes, float grad_scale, double *loss,
                               void *dlogits, lamp_dtype dlogits_dtype, size_t *correct) {
  const lamp_backend *b = WITH(device, cross_entropy);
  return b ? b->cross_entropy(logits, logits_dtype, labels, rows, classes, grad_scale, loss, dlogits,
                              dlogits_dtype, correct)
           : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_argmax_rows(lamp_device device, int32_t *out, const void *x, lamp_dtype dtype, size_t rows,
                             size_t cols) {
  const lamp_backend *b = WITH(device, argmax_rows);
  return b ? b->argmax_rows(out, x, dtype, rows, cols) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_unscale_and_check(lamp_device device, float *g, size_t n, float inv_scale, int *found_inf) {
  const lamp_backend *b = WITH(device, unscale_and_check);
  return b ? b->unscale_and_check(g, n, inv_scale, found_inf) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_round_through(lamp_device device, float *dst, const float *src, lamp_dtype via, size_t n) {
  const lamp_backend *b = WITH(device, round_through);
  return b ? b->round_through(dst, src, via, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_accumulate_rounded(lamp_device device, float *dst, const float *src, lamp_dtype via, size_t n) {
  const lamp_backend *b = WITH(device, accumulate_rounded);
  return b ? b->accumulate_rounded(dst, src, via, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_round_stochastic(lamp_device device, void *dst, lamp_dtype dst_dtype, const float *src, size_t n,
                                  uint64_t seed, uint64_t stream) {
  const lamp_backend *b = WITH(device, round_stochastic);
  return b ? b->round_stochastic(dst, dst_dtype, src, n, seed, stream) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_scale(lamp_device device, float *x, size_t n, float alpha) {
  const lamp_backend *b = WITH(device, scale);
  return b ? b->scale(x, n, alpha) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_axpy(lamp_device device, float *y, const float *x, size_t n, float alpha) {
  const lamp_backend *b = WITH(device, axpy);
  return b ? b->axpy(y, x, n, alpha) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_sum_squares(lamp_device device, const float *x, size_t n, double *out) {
  const lamp_backend *b = WITH(device, sum_squares);
  return b ? b->sum_squares(x, n, out) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_add_into(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                          size_t n) {
  const lamp_backend *b = WITH(device, add_into);
  return b ? b->add_into(y, y_dtype, x, x_dtype, n) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_add(lamp_device device, void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype,
                     const void *b_, lamp_dtype b_dtype, size_t n, int relu) {
  const lamp_backend *b = WITH(device, add);
  return b ? b->add(y, y_dtype, a, a_dtype, b_, b_dtype, n, relu) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_apply_mask(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                            const uint8_t *mask, float scale, size_t n) {
  const lamp_backend *b = WITH(device, apply_mask);
  return b ? b->apply_mask(y, y_dtype, x, x_dtype, mask, scale, n) : LAMP_ERR_UNSUPPORTED;
}

/* ---- coarse layer operations ----------------------------------------------------------------- */

lamp_status lamp_maxpool_forward(lamp_device device, void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x,
                                 lamp_dtype x_dtype, size_t n_planes, const lamp_conv_geom *g) {
  const lamp_backend *b = WITH(device, maxpool_forward);
  return b ? b->maxpool_forward(y, y_dtype, argmax, x, x_dtype, n_planes, g) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_maxpool_backward(lamp_device device, void *dx, lamp_dtype dx_dtype, const void *dy,
                                  lamp_dtype dy_dtype, const int32_t *argmax, size_t n_planes,
                                  const lamp_conv_geom *g) {
  const lamp_backend *b = WITH(device, maxpool_backward);
  return b ? b->maxpool_backward(dx, dx_dtype, dy, dy_dtype, argmax, n_planes, g) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_avgpool_forward(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                 size_t n_planes, const lamp_conv_geom *g) {
  const lamp_backend *b = WITH(device, avgpool_forward);
  return b ? b->avgpool_forward(y, y_dtype, x, x_dtype, n_planes, g) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_avgpool_backward(lamp_device device, void *dx, lamp_dtype dx_dtype, const void *dy,
                                  lamp_dtype dy_dtype, size_t n_planes, const lamp_conv_geom *g) {
  const lamp_backend *b = WITH(device, avgpool_backward);
  return b ? b->avgpool_backward(dx, dx_dtype, dy, dy_dtype, n_planes, g) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_conv2d_forward(lamp_device device, void **plan, const lamp_conv2d_args *a) {
  const lamp_backend *b = WITH(device, conv2d_forward);
  return b ? b->conv2d_forward(plan, a) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_conv2d_backward(lamp_device device, void **plan, const lamp_conv2d_args *a) {
  const lamp_backend *b = WITH(device, conv2d_backward);
  return b ? b->conv2d_backward(plan, a) : LAMP_ERR_UNSUPPORTED;
}

void lamp_conv2d_plan_free(lamp_device device, void *plan) {
  if (plan == NULL) return;
  const lamp_backend *b = lamp_backend_get(device, "conv2d_plan_free");
  if (b != NULL && b->conv2d_plan_free != NULL) b->conv2d_plan_free(plan);
}

lamp_status lamp_batchnorm_forward(lamp_device device, const lamp_batchnorm_args *a) {
  const lamp_backend *b = WITH(device, batchnorm_forward);
  return b ? b->batchnorm_forward(a) : LAMP_ERR_UNSUPPORTED;
}

lamp_status lamp_batchnorm_backward(lamp_device device, const lamp_batchnorm_args *a) {
  const lamp_backend *b = WITH(device, batchnorm_backward);
  return b ? b->batchnorm_backward(a) : LAMP_ERR_UNSUPPORTED;
}
