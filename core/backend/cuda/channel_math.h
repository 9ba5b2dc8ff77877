/*
** The per-element and per-channel math of the CUDA pooling and BatchNorm kernels (pool.cu,
** batchnorm.cu), written once for the device and the host as elementwise_math.h is (its
** conventions: __host__ __device__ under nvcc, plain static inline C11 elsewhere, every fp32 and
** double operation rounded on its own, never contracted). tests/unit/test_cuda_channel_math.c
** compiles it on the CPU and checks it bit for bit against the CPU backend's operations.
**
** The formulas are core/backend/cpu/pool.c's, batchnorm.c's and channel.c's, in their order:
**   pooling     windows scanned row by row, the first maximum wins and NaN beats a number; the
**               backward passes gather, for each input, the contributions the CPU scatters, in
**               the CPU's order (outputs in increasing index), so the sums are the CPU's;
**   BatchNorm   one (image, channel) row is summed in fp32 as channel.c's sum_row does (8 lanes
**               over whole blocks of 8, the tail on its own, then the lanes added to the tail in
**               order), the rows of a channel are folded in double in image order, and the
**               per-channel formulas run in double as batchnorm.c writes them. This is the CPU's
**               summation order exactly, so the statistics are the CPU's bits, not merely close.
*/
#ifndef LAMP_BACKEND_CUDA_CHANNEL_MATH_H
#define LAMP_BACKEND_CUDA_CHANNEL_MATH_H

#include "backend/backend.h"
#include "backend/cuda/elementwise_math.h"

/* ---- pooling (core/backend/cpu/pool.c) ------------------------------------------------------- */

/* The input rows (or columns) [*lo, *hi) of window o, step dil, clipped to the image. */
LAMP_EM_FN void lamp_cm_window(size_t o, size_t stride, size_t pad, size_t kernel, size_t dil, size_t size, size_t *lo,
                               size_t *hi) {
  size_t base = o * stride;
  size_t t0 = base >= pad ? 0 : (pad - base + dil - 1) / dil;
  size_t t1 = kernel;
  size_t limit = size + pad > base ? (size + pad - base + dil - 1) / dil : 0;
  if (t1 > limit) t1 = limit;
  if (t0 > t1) t0 = t1;
  *lo = base + t0 * dil - pad;
  *hi = t1 > t0 ? base + (t1 - 1) * dil - pad + 1 : *lo;
}

/* The 2x2 window at stride 2 without padding or dilation: the windows tile the plane, and the CPU
   writes its backward without a zeroing pass (an assignment, so a -0 gradient stays -0). */
LAMP_EM_FN int lamp_cm_is_2x2(const lamp_conv_geom *g) {
  return g->kernel_h == 2 && g->kernel_w == 2 && g->stride_h == 2 && g->stride_w == 2 && g->pad_h == 0 &&
         g->pad_w == 0 && g->dilation_h == 1 && g->dilation_w == 1;
}

/* Whether v replaces the running maximum: none yet, larger, or NaN over a number. */
LAMP_EM_FN int lamp_cm_max_wins(float v, float best, int32_t at) {
  return at < 0 || v > best || (lamp_em_isnan(v) && !lamp_em_isnan(best));
}

/* Output (oy, ox) of the plane starting at element `plane` of x: the maximum, and in *at its
   index inside the plane (-1 when the window holds only padding; the value is then -inf). */
LAMP_EM_FN float lamp_cm_maxpool_at(const void *x, lamp_dtype dtype, size_t plane, const lamp_conv_geom *g, size_t oy,
                                    size_t ox, int32_t *at) {
  size_t y0, y1, x0, x1;
  lamp_cm_window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1);
  lamp_cm_window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1);
  float best = -INFINITY;
  int32_t where = -1;
  for (size_t iy = y0; iy < y1; iy += g->dilation_h)
    for (size_t ix = x0; ix < x1; ix += g->dilation_w) {
      float v = lamp_em_load(x, dtype, plane + iy * g->width + ix);
      if (lamp_cm_max_wins(v, best, where)) {
        best = v;
        where = (int32_t)(iy * g->width + ix);
      }
    }
  *at = where;
  return best;
}

/* The window along one axis whose tap t holds input i: (i + pad - t * dil) / stride where that
   divides and lies below out_size; else out_size (none). As t falls, the window rises. */
LAMP_EM_FN size_t lamp_cm_window_of(size_t i, size_t t, size_t stride, size_t pad, size_t dil, size_t out_size) {
  size_t reach = i + pad;
  if (reach < t * dil) return out_size;
  size_t a = reach - t * dil;
  return a % stride != 0 || a / stride >= out_size ? out_size : a / stride;
}

/*
** dx at input (iy, ix) of plane p: the CPU zeroes dx and adds dy[k] at argmax[k] for k ascending,
** so the gather adds, from +0, the dy of the windows holding this input whose winner it is, in
** increasing k (taps from the last down: windows in row-major order). The 2x2 tiling assigns
** instead (see lamp_cm_is_2x2); rows and columns no window reaches get +0. argmax must be what
** the forward wrote (each index inside its window).
*/
LAMP_EM_FN float lamp_cm_maxpool_grad_at(const void *dy, lamp_dtype dtype, const int32_t *argmax, size_t p,
                                         const lamp_conv_geom *g, size_t iy, size_t ix) {
  size_t first = p * g->out_h * g->out_w;
  int32_t self = (int32_t)(iy * g->width + ix);
  if (lamp_cm_is_2x2(g)) {
    if (iy / 2 >= g->out_h || ix / 2 >= g->out_w) return 0.0f;
    size_t k = first + (iy / 2) * g->out_w + ix / 2;
    return argmax[k] == self ? lamp_em_load(dy, dtype, k) : 0.0f;
  }
  float acc = 0.0f;
  for (size_t th = g->kernel_h; th-- > 0;) {
    size_t oy = lamp_cm_window_of(iy, th, g->stride_h, g->pad_h, g->dilation_h, g->out_h);
    if (oy == g->out_h) continue;
    for (size_t tw = g->kernel_w; tw-- > 0;) {
      size_t ox = lamp_cm_window_of(ix, tw, g->stride_w, g->pad_w, g->dilation_w, g->out_w);
      if (ox == g->out_w) continue;
      size_t k = first + oy * g->out_w + ox;
      if (argmax[k] == self) acc = lamp_em_add(acc, lamp_em_load(dy, dtype, k));
    }
  }
  return acc;
}

/* 1 / window size, the average's factor (count_include_pad); computed on the host. */
static inline float lamp_cm_avg_factor(const lamp_conv_geom *g) { return 1.0f / (float)(g->kernel_h * g->kernel_w); }

/* Average pooling's output (oy, ox): the in-image values summed in fp32 in scan order, times inv. */
LAMP_EM_FN float lamp_cm_avgpool_at(const void *x, lamp_dtype dtype, size_t plane, const lamp_conv_geom *g, size_t oy,
                                    size_t ox, float inv) {
  size_t y0, y1, x0, x1;
  lamp_cm_window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1);
  lamp_cm_window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1);
  float sum = 0.0f;
  for (size_t iy = y0; iy < y1; iy += g->dilation_h)
    for (size_t ix = x0; ix < x1; ix += g->dilation_w)
      sum = lamp_em_add(sum, lamp_em_load(x, dtype, plane + iy * g->width + ix));
  return lamp_em_mul(sum, inv);
}

/* Its backward at input (iy, ix) of plane p: the CPU adds dy[k] * inv over the windows holding the
   input, windows in row-major order, from +0; so does this, in that order. */
LAMP_EM_FN float lamp_cm_avgpool_grad_at(const void *dy, lamp_dtype dtype, size_t p, const lamp_conv_geom *g,
                                         size_t iy, size_t ix, float inv) {
  size_t first = p * g->out_h * g->out_w;
  float acc = 0.0f;
  for (size_t th = g->kernel_h; th-- > 0;) {
    size_t oy = lamp_cm_window_of(iy, th, g->stride_h, g->pad_h, g->dilation_h, g->out_h);
    if (oy == g->out_h) continue;
    for (size_t tw = g->kernel_w; tw-- > 0;) {
      size_t ox = lamp_cm_window_of(ix, tw, g->stride_w, g->pad_w, g->dilation_w, g->out_w);
      if (ox == g->out_w) continue;
      acc = lamp_em_add(acc, lamp_em_mul(lamp_em_load(dy, dtype, first + oy * g->out_w + ox), inv));
    }
  }
  return acc;
}

/* ---- BatchNorm (core/backend/cpu/batchnorm.c, channel.c) ------------------------------------- */

/* channel.c's lanes (LAMP_CPU_BLOCK): lane l sums elements l, l + 8, ... of a row's whole blocks. */
#define LAMP_CM_LANES 8

LAMP_EM_FN float lamp_cm_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

LAMP_EM_FN double lamp_cm_ddiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

LAMP_EM_FN double lamp_cm_dsqrt(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return sqrt(a);
#endif
}

/* The fused ReLU's mask, read from x through the saved affine map: the stored output x * scale +
   shift (fp32, two roundings) is > 0 in its dtype exactly when it exceeds zero_bound (a value
   that rounds to 0 in 16 bits passes no gradient: core/tensor/half.h's zero bounds). */
typedef struct lamp_cm_mask {
  int on;
  float scale, shift, zero_bound;
} lamp_cm_mask;

LAMP_EM_FN float lamp_cm_zero_bound(lamp_dtype y_dtype) {
  return y_dtype == LAMP_F16 ? 0x1p-25f : y_dtype == LAMP_BF16 ? 0x1p-134f : 0.0f;
}

/* a read through the mask (channel.c's through_mask): masked-off elements read as +0. */
LAMP_EM_FN float lamp_cm_through(float a, float b, lamp_cm_mask m) {
  if (!m.on) return a;
  return lamp_em_add(lamp_em_mul(b, m.scale), m.shift) > m.zero_bound ? a : 0.0f;
}

/*
** One lane of channel.c's sum_row over the row [first, first + hw) of a (through the mask) and
** b: *sum += a, *dot += (a - ca)(b - cb) for the row's whole-block elements lane, lane + 8, ...
*/
LAMP_EM_FN void lamp_cm_lane_sums(const void *a, lamp_dtype at, const void *b, lamp_dtype bt, size_t first, size_t hw,
                                  size_t lane, float ca, float cb, lamp_cm_mask m, float *sum, float *dot) {
  float s = 0.0f, d = 0.0f;
  size_t whole = hw / LAMP_CM_LANES * LAMP_CM_LANES;
  for (size_t i = lane; i < whole; i += LAMP_CM_LANES) {
    float bv = lamp_em_load(b, bt, first + i), av = lamp_cm_through(lamp_em_load(a, at, first + i), bv, m);
    s = lamp_em_add(s, av);
    d = lamp_em_add(d, lamp_em_mul(lamp_cm_sub(av, ca), lamp_cm_sub(bv, cb)));
  }
  *sum = s;
  *dot = d;
}

/* The row's tail (its last hw % 8 elements), summed on its own in order. */
LAMP_EM_FN void lamp_cm_tail_sums(const void *a, lamp_dtype at, const void *b, lamp_dtype bt, size_t first, size_t hw,
                                  float ca, float cb, lamp_cm_mask m, float *sum, float *dot) {
  float s = 0.0f, d = 0.0f;
  for (size_t i = hw / LAMP_CM_LANES * LAMP_CM_LANES; i < hw; i++) {
    float bv = lamp_em_load(b, bt, first + i), av = lamp_cm_through(lamp_em_load(a, at, first + i), bv, m);
    s = lamp_em_add(s, av);
    d = lamp_em_add(d, lamp_em_mul(lamp_cm_sub(av, ca), lamp_cm_sub(bv, cb)));
  }
  *sum = s;
  *dot = d;
}

/* The lanes added to the tail, lane 0 first: the row's fp32 sums. */
LAMP_EM_FN void lamp_cm_fold_lanes(float *sum, float *dot, const float *lane_sum, const float *lane_dot) {
  for (size_t l = 0; l < LAMP_CM_LANES; l++) {
    *sum = lamp_em_add(*sum, lane_sum[l]);
    *dot = lamp_em_add(*dot, lane_dot[l]);
  }
}

/* A whole row in the CPU's order (the host's reference for the lanes; the kernel splits it). */
LAMP_EM_FN void lamp_cm_row_sums(const void *a, lamp_dtype at, const void *b, lamp_dtype bt, size_t first, size_t hw,
                                 float ca, float cb, lamp_cm_mask m, float *sum, float *dot) {
  float ls[LAMP_CM_LANES], ld[LAMP_CM_LANES];
  for (size_t l = 0; l < LAMP_CM_LANES; l++) lamp_cm_lane_sums(a, at, b, bt, first, hw, l, ca, cb, m, &ls[l], &ld[l]);
  lamp_cm_tail_sums(a, at, b, bt, first, hw, ca, cb, m, sum, dot);
  lamp_cm_fold_lanes(sum, dot, ls, ld);
}

/*
** A channel's training statistics from its sums over m values (sum of x; sum of (x - center)^2,
** center being the channel's first value): the mean and 1/std into *mean and *invstd, and the
** running statistics moved by `momentum` toward the mean and the unbiased variance.
** batch_statistics' formulas in its order: the shifted sum of squares is clamped at 0.
*/
LAMP_EM_FN void lamp_cm_bn_statistics(double sum, double sum_sq, float center, double m, double momentum, double eps,
                                      float *mean, float *invstd, float *running_mean, float *running_var) {
  double mu = lamp_cm_ddiv(sum, m), shift = lamp_em_dadd(mu, -(double)center);
  double sq = lamp_em_dadd(sum_sq, -lamp_em_dmul(lamp_em_dmul(m, shift), shift));
  sq = sq > 0 ? sq : 0.0;
  *mean = (float)mu;
  double var = lamp_cm_ddiv(sq, m);
  *invstd = (float)lamp_cm_ddiv(1.0, lamp_cm_dsqrt(lamp_em_dadd(var, eps)));
  double keep = lamp_em_dadd(1.0, -momentum);
  *running_mean = (float)lamp_em_dadd(lamp_em_dmul(keep, (double)*running_mean), lamp_em_dmul(momentum, (double)*mean));
  *running_var = (float)lamp_em_dadd(lamp_em_dmul(keep, (double)*running_var),
                                     lamp_cm_ddiv(lamp_em_dmul(momentum, sq), lamp_em_dadd(m, -1.0)));
}

/* Inference: 1/std from the running variance. */
LAMP_EM_FN float lamp_cm_bn_invstd(float running_var, double eps) {
  return (float)lamp_cm_ddiv(1.0, lamp_cm_dsqrt(lamp_em_dadd((double)running_var, eps)));
}

/* The affine map y = x * scale + shift that normalises and applies weight and bias (fp32). */
LAMP_EM_FN void lamp_cm_bn_affine(float weight, float bias, float mean, float invstd, float *scale, float *shift) {
  *scale = lamp_em_mul(weight, invstd);
  *shift = lamp_cm_sub(bias, lamp_em_mul(mean, *scale));
}

/* One output element: x * scale + shift, rectified (ReLU's rule) with `relu`. */
LAMP_EM_FN float lamp_cm_bn_apply(float x, float scale, float shift, int relu) {
  float v = lamp_em_add(lamp_em_mul(x, scale), shift);
  return relu ? lamp_em_relu(v) : v;
}

/* The parameter gradients' sums from the backward's sums: dweight = sum(dy (x - mean)) * invstd,
   dbias = sum(dy), each rounded once to fp32. */
LAMP_EM_FN void lamp_cm_bn_param_grads(double sum_dy, double sum_dy_xc, float invstd, float *dweight, float *dbias) {
  *dweight = (float)lamp_em_dmul(sum_dy_xc, (double)invstd);
  *dbias = (float)sum_dy;
}

/* A parameter gradient v into its fp32 slab element g (lamp_cpu_add_grad): produced in grad_dtype
   (rounded once), then written when `overwrite`, else added. */
LAMP_EM_FN float lamp_cm_grad_into(float g, float v, lamp_dtype grad_dtype, int overwrite) {
  if (grad_dtype == LAMP_F32) return overwrite ? v : lamp_em_axpy(g, 1.0f, v);
  float r = lamp_em_round_via(v, grad_dtype);
  return overwrite ? r : lamp_em_add(g, r);
}

/*
** dx = p * dy + q * x + r per channel: with w = weight * invstd and M = m values,
**   training:   p = w, q = -w invstd^2 sum(dy (x - mean)) / M, r = -w sum(dy) / M - q mean;
**   inference:  p = w, q = r = 0.
** In double, rounded once each, in batchnorm.c's order.
*/
LAMP_EM_FN void lamp_cm_bn_grad_coefs(int training, float weight, float mean, float invstd, double sum_dy,
                                      double sum_dy_xc, double m, float *p, float *q, float *r) {
  double w = lamp_em_dmul((double)weight, (double)invstd);
  double qd = 0.0;
  if (training)
    qd = lamp_cm_ddiv(lamp_em_dmul(lamp_em_dmul(lamp_em_dmul(-w, (double)invstd), (double)invstd), sum_dy_xc), m);
  *p = (float)w;
  *q = (float)qd;
  *r = training ? (float)lamp_em_dadd(lamp_cm_ddiv(lamp_em_dmul(-w, sum_dy), m), -lamp_em_dmul(qd, (double)mean))
                : 0.0f;
}

/* One input-gradient element: p * dy (through the mask) + q * x + r, in fp32. */
LAMP_EM_FN float lamp_cm_bn_combine(float dy, float x, float p, float q, float r, lamp_cm_mask m) {
  return lamp_em_add(lamp_em_add(lamp_em_mul(p, lamp_cm_through(dy, x, m)), lamp_em_mul(q, x)), r);
}

#endif
