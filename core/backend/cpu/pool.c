/*
** Max and average pooling over planes. Max pooling records the winning index per output so
** backward routes each gradient to exactly one input, as PyTorch does (the first maximum wins a
** tie; NaN counts as the largest value). Average pooling divides by the full window, padding
** included (count_include_pad = True, PyTorch's default), so backward spreads dy / window over
** the window's in-image elements.
*/
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

/* The input rows (or columns) of a window: [lo, hi) clipped to the image; o * stride - pad is
   the window's first row before clipping. */
static void window(size_t o, size_t stride, size_t pad, size_t kernel, size_t dil, size_t size, size_t *lo,
                   size_t *hi, size_t *step) {
  /* first tap inside: t >= ceil((pad - o*stride) / dil) */
  size_t base = o * stride;
  size_t t0 = base >= pad ? 0 : (pad - base + dil - 1) / dil;
  size_t t1 = kernel;
  /* base + t*dil - pad < size  <=>  t*dil < size + pad - base */
  size_t limit = size + pad > base ? (size + pad - base + dil - 1) / dil : 0;
  if (t1 > limit) t1 = limit;
  if (t0 > t1) t0 = t1;
  *lo = base + t0 * dil - pad;
  *hi = t1 > t0 ? base + (t1 - 1) * dil - pad + 1 : *lo;
  *step = dil;
}

static void maxpool_plane(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float best = -INFINITY;
      int32_t at = -1;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) {
          float v = x[iy * g->width + ix];
          if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
            best = v;
            at = (int32_t)(iy * g->width + ix);
          }
        }
      y[oy * g->out_w + ox] = best;
      arg[oy * g->out_w + ox] = at;
    }
  }
}

static lamp_status check(const char *fn, lamp_device device, const lamp_conv_geom *g) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device(fn, device);
  if (g->kernel_h == 0 || g->kernel_w == 0 || g->stride_h == 0 || g->stride_w == 0 || g->dilation_h == 0 ||
      g->dilation_w == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride and dilation must be positive", fn);
  if ((uint64_t)g->height * g->width > INT32_MAX)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: a plane of %zu x %zu does not fit 32-bit indices", fn, g->height,
                      g->width);
  return LAMP_OK;
}

/* The common 2x2 window with stride 2 and no padding, without the general window arithmetic. */
static void maxpool_plane_2x2(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  size_t w = g->width;
  for (size_t oy = 0; oy < g->out_h; oy++)
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t i0 = 2 * oy * w + 2 * ox, idx[4] = {i0, i0 + 1, i0 + w, i0 + w + 1};
      float best = x[idx[0]];
      size_t at = idx[0];
      for (int t = 1; t < 4; t++) {
        float v = x[idx[t]];
        if (v > best || (isnan(v) && !isnan(best))) {
          best = v;
          at = idx[t];
        }
      }
      y[oy * g->out_w + ox] = best;
      arg[oy * g->out_w + ox] = (int32_t)at;
    }
}

typedef struct pool_job {
  float *y;
  int32_t *argmax;
  const float *x;
  size_t n_planes, tasks;
  const lamp_conv_geom *g;
} pool_job;

static int is_2x2(const lamp_conv_geom *g) {
  return g->kernel_h == 2 && g->kernel_w == 2 && g->stride_h == 2 && g->stride_w == 2 && g->pad_h == 0 &&
         g->pad_w == 0 && g->dilation_h == 1 && g->dilation_w == 1;
}

static lamp_status maxpool_task(void *ctx, size_t worker, size_t t) {
  const pool_job *j = ctx;
  (void)worker;
  size_t tasks = j->tasks, in = j->g->height * j->g->width, out = j->g->out_h * j->g->out_w;
  for (size_t p = j->n_planes * t / tasks; p < j->n_planes * (t + 1) / tasks; p++) {
    if (is_2x2(j->g)) maxpool_plane_2x2(j->y + p * out, j->argmax + p * out, j->x + p * in, j->g);
    else maxpool_plane(j->y + p * out, j->argmax + p * out, j->x + p * in, j->g);
  }
  return LAMP_OK;
}

lamp_status lamp_maxpool_forward(lamp_device device, float *y, int32_t *argmax, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_forward", device, g);
  if (s != LAMP_OK) return s;
  pool_job j = {y, argmax, x, n_planes, lamp_backend_threads(device), g};
  return lamp_parallel_for(device, j.tasks, maxpool_task, &j);
}

lamp_status lamp_maxpool_backward(lamp_device device, float *dx, const float *dy, const int32_t *argmax,
                                  size_t n_planes, const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_backward", device, g);
  if (s != LAMP_OK) return s;
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  memset(dx, 0, n_planes * in * sizeof *dx);
  for (size_t p = 0; p < n_planes; p++)
    for (size_t k = 0; k < out; k++)
      if (argmax[p * out + k] >= 0) dx[p * in + (size_t)argmax[p * out + k]] += dy[p * out + k];
  return LAMP_OK;
}

static void avgpool_plane(float *y, const float *x, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float sum = 0.0f;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) sum += x[iy * g->width + ix];
      y[oy * g->out_w + ox] = sum * inv;
    }
  }
}

static void avgpool_plane_backward(float *dx, const float *dy, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float d = dy[oy * g->out_w + ox] * inv;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) dx[iy * g->width + ix] += d;
    }
  }
}

lamp_status lamp_avgpool_forward(lamp_device device, float *y, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_forward", device, g);
  if (s != LAMP_OK) return s;
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  for (size_t p = 0; p < n_planes; p++) avgpool_plane(y + p * out, x + p * in, g);
  return LAMP_OK;
}

lamp_status lamp_avgpool_backward(lamp_device device, float *dx, const float *dy, size_t n_planes,
                                  const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_backward", device, g);
  if (s != LAMP_OK) return s;
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  memset(dx, 0, n_planes * in * sizeof *dx);
  for (size_t p = 0; p < n_planes; p++) avgpool_plane_backward(dx + p * in, dy + p * out, g);
  return LAMP_OK;
}
