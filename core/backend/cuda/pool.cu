/*
** Max and average pooling (backend.h's contracts; core/backend/cpu/pool.c is the reference). One
** thread per output in the forwards, one per input in the backwards: a backward gathers, for its
** input, what the CPU scatters into it, in the CPU's order (channel_math.h), so no two threads
** write one element, nothing needs an atomic or a zeroing pass, and the sums are the CPU's bits.
** 16-bit operands are widened on load and the results rounded once on store, as the CPU's staging.
*/
#include "backend/cuda/channel_math.h"
#include "backend/cuda/channel_ops.h"
#include "backend/cuda/launch.cuh"

#define LAUNCH(kernel, n) kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>

static __global__ void maxpool_forward_kernel(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x,
                                              lamp_dtype x_dtype, size_t n, lamp_conv_geom g) {
  size_t out_plane = g.out_h * g.out_w, in_plane = g.height * g.width;
  LAMP_GRID_STRIDE(i, n) {
    size_t p = i / out_plane, o = i % out_plane;
    int32_t at;
    float best = lamp_cm_maxpool_at(x, x_dtype, p * in_plane, &g, o / g.out_w, o % g.out_w, &at);
    lamp_em_store(y, y_dtype, i, best);
    argmax[i] = at;
  }
}

static __global__ void maxpool_backward_kernel(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                               const int32_t *argmax, size_t n, lamp_conv_geom g) {
  size_t in_plane = g.height * g.width;
  LAMP_GRID_STRIDE(i, n) {
    size_t p = i / in_plane, e = i % in_plane;
    lamp_em_store(dx, dx_dtype, i, lamp_cm_maxpool_grad_at(dy, dy_dtype, argmax, p, &g, e / g.width, e % g.width));
  }
}

static __global__ void avgpool_forward_kernel(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n,
                                              lamp_conv_geom g, float inv) {
  size_t out_plane = g.out_h * g.out_w, in_plane = g.height * g.width;
  LAMP_GRID_STRIDE(i, n) {
    size_t p = i / out_plane, o = i % out_plane;
    lamp_em_store(y, y_dtype, i, lamp_cm_avgpool_at(x, x_dtype, p * in_plane, &g, o / g.out_w, o % g.out_w, inv));
  }
}

static __global__ void avgpool_backward_kernel(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                               size_t n, lamp_conv_geom g, float inv) {
  size_t in_plane = g.height * g.width;
  LAMP_GRID_STRIDE(i, n) {
    size_t p = i / in_plane, e = i % in_plane;
    lamp_em_store(dx, dx_dtype, i, lamp_cm_avgpool_grad_at(dy, dy_dtype, p, &g, e / g.width, e % g.width, inv));
  }
}

/* The CPU's checks (pool.c), in its order and words, then the operands. */
static lamp_status check(const char *fn, const lamp_conv_geom *g, lamp_dtype in_dtype, lamp_dtype out_dtype) {
  lamp_status s = lamp_cuda_check_data(fn, "g", g, 1);
  if (s != LAMP_OK) return s;
  if (g->kernel_h == 0 || g->kernel_w == 0 || g->stride_h == 0 || g->stride_w == 0 || g->dilation_h == 0 ||
      g->dilation_w == 0)
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride and dilation must be positive", fn);
  if ((uint64_t)g->height * g->width > INT32_MAX)
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "%s: a plane of %zu x %zu does not fit 32-bit indices", fn,
                                g->height, g->width);
  s = lamp_cuda_check_float(fn, "input", in_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "output", out_dtype);
  return s;
}

lamp_status lamp_cuda_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                      size_t n_planes, const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_forward", g, x_dtype, y_dtype);
  if (s != LAMP_OK) return s;
  size_t n = n_planes * g->out_h * g->out_w;
  s = lamp_cuda_check_data("maxpool_forward", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("maxpool_forward", "argmax", argmax, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("maxpool_forward", "x", x, n_planes * g->height * g->width);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(maxpool_forward_kernel, n)(y, y_dtype, argmax, x, x_dtype, n, *g);
  return lamp_cuda_launched("maxpool_forward");
}

lamp_status lamp_cuda_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                       const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_backward", g, dy_dtype, dx_dtype);
  if (s != LAMP_OK) return s;
  size_t n = n_planes * g->height * g->width, out = n_planes * g->out_h * g->out_w;
  s = lamp_cuda_check_data("maxpool_backward", "dx", dx, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("maxpool_backward", "dy", dy, out);
  if (s == LAMP_OK) s = lamp_cuda_check_data("maxpool_backward", "argmax", argmax, out);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(maxpool_backward_kernel, n)(dx, dx_dtype, dy, dy_dtype, argmax, n, *g);
  return lamp_cuda_launched("maxpool_backward");
}

lamp_status lamp_cuda_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                      const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_forward", g, x_dtype, y_dtype);
  if (s != LAMP_OK) return s;
  size_t n = n_planes * g->out_h * g->out_w;
  s = lamp_cuda_check_data("avgpool_forward", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("avgpool_forward", "x", x, n_planes * g->height * g->width);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(avgpool_forward_kernel, n)(y, y_dtype, x, x_dtype, n, *g, lamp_cm_avg_factor(g));
  return lamp_cuda_launched("avgpool_forward");
}

lamp_status lamp_cuda_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                       size_t n_planes, const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_backward", g, dy_dtype, dx_dtype);
  if (s != LAMP_OK) return s;
  size_t n = n_planes * g->height * g->width;
  s = lamp_cuda_check_data("avgpool_backward", "dx", dx, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("avgpool_backward", "dy", dy, n_planes * g->out_h * g->out_w);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(avgpool_backward_kernel, n)(dx, dx_dtype, dy, dy_dtype, n, *g, lamp_cm_avg_factor(g));
  return lamp_cuda_launched("avgpool_backward");
}
