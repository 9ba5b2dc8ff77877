/*
** What a device's backend provides: one table of operations (ggml's backend interface, Lua's
** loadlib.c platform functions). The entry points of backend.h check the slot and call it, so a
** backend never checks the device itself. Arguments have the meaning given in backend.h, minus the
** device; pointers are this device's memory unless a comment says host.
**
** Adding a device: a folder core/backend/<name>/ defining its lamp_backend, and one line that
** registers it (lamp_backend_register). Optional slots may be NULL: the entry point then fails
** with "<op>: not implemented for device <name>". The ordering slots (synchronize, events,
** upload_async) are NULL on a device whose work is done when the call returns (the CPU).
*/
#ifndef LAMP_BACKEND_IMPL_H
#define LAMP_BACKEND_IMPL_H

#include "backend/backend.h"

typedef struct lamp_backend {
  lamp_device_memory memory; /* name, alloc, free, zero: lent to core/tensor at registration */
  unsigned caps;             /* LAMP_CAP_* */

  /* ---- devices, copies, ordering ------------------------------------------------------------- */
  int (*count)(void);
  lamp_status (*upload)(void *dst, const void *host_src, size_t bytes);       /* returns once host_src is read */
  lamp_status (*upload_async)(void *dst, const void *host_src, size_t bytes); /* host_src read later, in queue order */
  lamp_status (*download)(void *host_dst, const void *src, size_t bytes);     /* returns with host_dst filled */
  lamp_status (*copy)(void *dst, const void *src, size_t bytes);              /* within the device, queued */
  lamp_status (*synchronize)(void);
  lamp_status (*event_new)(void **event);
  void (*event_free)(void *event);
  lamp_status (*event_record)(void *event);
  lamp_status (*event_wait)(void *event);
  void *(*host_view)(const void *ptr); /* with LAMP_CAP_HOST_VIEW */
  void *(*stream)(void);               /* optional */
  void (*release_workspace)(void);     /* optional: what was kept for work the calling thread issued */

  /* ---- kernels ------------------------------------------------------------------------------- */
  lamp_status (*gemm)(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                      lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb, float beta,
                      void *c, lamp_dtype c_dtype, size_t ldc);
  lamp_status (*convert)(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n);
  lamp_status (*fill)(void *x, lamp_dtype dtype, size_t n, float value);
  lamp_status (*add_bias_rows)(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype, size_t rows,
                               size_t cols);
  lamp_status (*sum_rows)(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols, float alpha,
                          float beta);
  lamp_status (*relu_forward)(void *y, const void *x, lamp_dtype dtype, size_t n);
  lamp_status (*relu_backward)(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n);
  lamp_status (*cross_entropy)(const void *logits, lamp_dtype logits_dtype, const int32_t *labels, size_t rows,
                               size_t classes, float grad_scale, double *loss, void *dlogits,
                               lamp_dtype dlogits_dtype, size_t *correct);
  lamp_status (*argmax_rows)(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols);
  lamp_status (*unscale_and_check)(float *g, size_t n, float inv_scale, int *found_inf);
  lamp_status (*round_through)(float *dst, const float *src, lamp_dtype via, size_t n);
  lamp_status (*accumulate_rounded)(float *dst, const float *src, lamp_dtype via, size_t n);
  lamp_status (*scale)(float *x, size_t n, float alpha);
  lamp_status (*axpy)(float *y, const float *x, size_t n, float alpha);
  lamp_status (*sum_squares)(const float *x, size_t n, double *out);
  lamp_status (*add_into)(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n);
  lamp_status (*add)(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                     lamp_dtype b_dtype, size_t n, int relu);
  lamp_status (*apply_mask)(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const uint8_t *mask,
                            float scale, size_t n);

  /* ---- coarse layer operations --------------------------------------------------------------- */
  lamp_status (*maxpool_forward)(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                 size_t n_planes, const lamp_conv_geom *g);
  lamp_status (*maxpool_backward)(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                  const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g);
  lamp_status (*avgpool_forward)(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                 const lamp_conv_geom *g);
  lamp_status (*avgpool_backward)(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                  size_t n_planes, const lamp_conv_geom *g);
  lamp_status (*conv2d_forward)(void **plan, const lamp_conv2d_args *a);
  lamp_status (*conv2d_backward)(void **plan, const lamp_conv2d_args *a);
  void (*conv2d_plan_free)(void *plan);
  lamp_status (*batchnorm_forward)(const lamp_batchnorm_args *a);
  lamp_status (*batchnorm_backward)(const lamp_batchnorm_args *a);

  /* ---- devices of a kind (optional; added last so tables written before stay valid) ---------- */
  /* Makes ordinal (already checked against count) the device the backend's work goes to; may
     refuse once work has gone to another (the message says why). NULL: nothing to do. */
  lamp_status (*select)(int ordinal);
  /* What device `ordinal` is (lamp_device_info, backend.h). NULL: its name only. */
  lamp_status (*describe)(int ordinal, lamp_device_info *out);

  /* ---- graphs (with LAMP_CAP_GRAPHS; backend.h's lamp_graph_begin) --------------------------- */
  lamp_status (*graph_begin)(void);
  lamp_status (*graph_end)(void **graph); /* *graph NULL on failure */
  lamp_status (*graph_launch)(void *graph);
  void (*graph_free)(void *graph);

  /* ---- stochastic rounding (backend interface 3; backend.h's lamp_round_stochastic) ---------- */
  lamp_status (*round_stochastic)(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                  uint64_t stream);

  /* ---- capabilities known only at run time (backend interface 4; optional) ------------------ */
  /* Bits added to `caps`, asked at every lamp_device_has: the CPU's LAMP_CAP_NATIVE_BF16_GEMM
     depends on the GEMM libraries installed (core/backend/cpu/gemm_provider.h). */
  unsigned (*caps_now)(void);
} lamp_backend;

/*
** Makes `backend` (kept, not copied) the one for `device` and lends its memory to core/tensor.
** The CPU's is built in. A device's backend is set once; registering it again is an error.
*/
lamp_status lamp_backend_register(lamp_device device, const lamp_backend *backend);

/* The backend of `device`, or NULL (with the error naming the device and `op`) when there is none. */
const lamp_backend *lamp_backend_get(lamp_device device, const char *op);

/* The CPU backend (core/backend/cpu): the reference the others are checked against, and what the
   simulated device runs. */
extern const lamp_backend lamp_cpu_backend;

#endif
