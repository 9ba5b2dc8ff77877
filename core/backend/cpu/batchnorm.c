/*
** BatchNorm on the CPU (the coarse operations of backend.h): per-channel sums by channel.c's
** kernels, a few scalar formulas per channel in double, then one pass that applies the affine
** map (and the fused ReLU) or the input gradient. 16-bit inputs and output gradients are read as
** they are (the kernels widen them a chunk at a time; no fp32 copy is kept); the output and the
** input gradient are rounded once to their dtype.
*/
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* The per-channel scratch of one call: double sums, then fp32 coefficients. */
typedef struct channels {
  double *sum_a, *sum_ab;
  float *p, *q, *r;
} channels;

static lamp_status scratch_for(size_t c, channels *s) {
  char *block = lamp_cpu_workspace(LAMP_CPU_WS_CHANNELS, c * (2 * sizeof(double) + 3 * sizeof(float)));
  if (block == NULL) return LAMP_ERR_SYSTEM;
  s->sum_a = (double *)(void *)block;
  s->sum_ab = s->sum_a + c;
  s->p = (float *)(void *)(s->sum_ab + c);
  s->q = s->p + c;
  s->r = s->q + c;
  return LAMP_OK;
}

/* `saved` holds mean, 1/std, scale and shift, c floats each. */
typedef struct saved_view {
  float *mean, *invstd, *scale, *shift;
} saved_view;

static saved_view view_of(float *saved, size_t c) { return (saved_view){saved, saved + c, saved + 2 * c, saved + 3 * c}; }

static float weight_at(const lamp_batchnorm_args *a, size_t k) { return a->weight != NULL ? a->weight[k] : 1.0f; }
static float bias_at(const lamp_batchnorm_args *a, size_t k) { return a->bias != NULL ? a->bias[k] : 0.0f; }

static lamp_status check_dtypes(const char *fn, const lamp_batchnorm_args *a) {
  lamp_status st = lamp_cpu_check_float(fn, "x", a->x_dtype);
  if (st == LAMP_OK && a->y != NULL) st = lamp_cpu_check_float(fn, "y", a->y_dtype);
  if (st == LAMP_OK && a->dy != NULL) st = lamp_cpu_check_float(fn, "dy", a->dy_dtype);
  if (st == LAMP_OK && a->dx != NULL) st = lamp_cpu_check_float(fn, "dx", a->dx_dtype);
  if (st == LAMP_OK && a->saved == NULL) st = lamp_error(LAMP_ERR_INVALID_ARG, "%s: saved is NULL", fn);
  return st;
}

/* ---- forward ------------------------------------------------------------------------------- */

/* Batch statistics into the saved mean and 1/std, and the running statistics' update. */
static void batch_statistics(const lamp_batchnorm_args *a, saved_view v, const channels *s) {
  size_t c = a->channels;
  double m = (double)(a->batch * a->plane), mom = a->momentum;
  for (size_t k = 0; k < c; k++) {
    double mean = s->sum_a[k] / m, shift = mean - s->p[k];
    double sq = s->sum_ab[k] - m * shift * shift; /* sum of (x - mean)^2 */
    s->sum_ab[k] = sq > 0 ? sq : 0.0;
    v.mean[k] = (float)mean;
    double var = s->sum_ab[k] / m;
    v.invstd[k] = (float)(1.0 / sqrt(var + a->eps));
    a->running_mean[k] = (float)((1.0 - mom) * a->running_mean[k] + mom * v.mean[k]);
    a->running_var[k] = (float)((1.0 - mom) * a->running_var[k] + mom * s->sum_ab[k] / (m - 1));
  }
  a->batches_tracked[0] += 1.0f;
}

/*
** One pass for the sums: the sum, and the sum of squares about a shift s = the channel's first
** value. var = E[(x - s)^2] - (mean - s)^2 has no catastrophic cancellation because s lies within
** the data (mean - s is of the order of the standard deviation), unlike E[x^2] - mean^2.
*/
static lamp_status batch_sums(const lamp_batchnorm_args *a, const channels *s) {
  size_t c = a->channels, hw = a->plane, size = lamp_dtype_size(a->x_dtype);
  const char *x = a->x;
  lamp_status st = LAMP_OK;
  for (size_t k = 0; k < c && st == LAMP_OK; k++) st = lamp_cpu_convert(&s->p[k], LAMP_F32, x + k * hw * size, a->x_dtype, 1);
  if (st == LAMP_OK)
    st = lamp_cpu_channel_reduce(x, a->x_dtype, s->p, x, a->x_dtype, s->p, a->batch, c, hw, s->sum_a, s->sum_ab);
  return st;
}

static void running_statistics(const lamp_batchnorm_args *a, saved_view v) {
  for (size_t k = 0; k < a->channels; k++) {
    v.mean[k] = a->running_mean[k];
    v.invstd[k] = (float)(1.0 / sqrt((double)a->running_var[k] + a->eps));
  }
}

lamp_status lamp_cpu_batchnorm_forward(const lamp_batchnorm_args *a) {
  size_t c = a->channels;
  channels s;
  lamp_status st = check_dtypes("batchnorm_forward", a);
  if (st == LAMP_OK) st = scratch_for(c, &s);
  if (st != LAMP_OK) return st;
  saved_view v = view_of(a->saved, c);
  if (a->training) {
    st = batch_sums(a, &s);
    if (st != LAMP_OK) return st;
    batch_statistics(a, v, &s);
  } else {
    running_statistics(a, v);
  }
  for (size_t k = 0; k < c; k++) { /* the normalisation and the affine map in one pass */
    v.scale[k] = weight_at(a, k) * v.invstd[k];
    v.shift[k] = bias_at(a, k) - v.mean[k] * v.scale[k];
  }
  return lamp_cpu_channel_affine(a->y, a->y_dtype, a->x, a->x_dtype, v.scale, v.shift, a->batch, c, a->plane,
                                 a->relu);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* The mask of the ReLU fused after the forward, for a rectified output of y_dtype: where the
   stored output is > 0 (a value that rounds to 0 in 16 bits passes no gradient). */
static lamp_relu_mask relu_mask(saved_view v, lamp_dtype y_dtype) {
  float bound = y_dtype == LAMP_F16 ? LAMP_F16_ZERO_BOUND : y_dtype == LAMP_BF16 ? LAMP_BF16_ZERO_BOUND : 0.0f;
  return (lamp_relu_mask){v.scale, v.shift, bound};
}

/*
** With xhat = (x - mean) * invstd and M = n * hw values per channel:
**   dweight = sum(dy * xhat), dbias = sum(dy)
**   training:   dx = w*invstd * (dy - sum(dy)/M - xhat * sum(dy*xhat)/M), the batch statistics
**               depending on x; written p*dy + q*x + r per channel.
**   evaluation: dx = w * invstd * dy (the running statistics are constants).
** With relu, dy is read through the fused ReLU's mask.
*/
lamp_status lamp_cpu_batchnorm_backward(const lamp_batchnorm_args *a) {
  size_t n = a->batch, hw = a->plane, c = a->channels;
  channels s;
  lamp_status st = check_dtypes("batchnorm_backward", a);
  if (st == LAMP_OK) st = scratch_for(c, &s);
  if (st != LAMP_OK) return st;
  saved_view v = view_of(a->saved, c);
  lamp_relu_mask mask = relu_mask(v, a->y_dtype);
  if (a->relu)
    st = lamp_cpu_channel_reduce_masked(a->dy, a->dy_dtype, a->x, a->x_dtype, v.mean, &mask, n, c, hw, s.sum_a,
                                        s.sum_ab);
  else
    st = lamp_cpu_channel_reduce(a->dy, a->dy_dtype, NULL, a->x, a->x_dtype, v.mean, n, c, hw, s.sum_a, s.sum_ab);
  if (st != LAMP_OK) return st;
  double m = (double)(n * hw);
  if (a->grad_weight != NULL) {
    for (size_t k = 0; k < c; k++) {
      s.p[k] = (float)(s.sum_ab[k] * v.invstd[k]);
      s.q[k] = (float)s.sum_a[k];
    }
    st = lamp_cpu_add_grad(a->grad_weight, s.p, c, a->grad_dtype, a->overwrite_grads);
    if (st == LAMP_OK) st = lamp_cpu_add_grad(a->grad_bias, s.q, c, a->grad_dtype, a->overwrite_grads);
    if (st != LAMP_OK) return st;
  }
  if (a->dx == NULL || n * hw == 0) return LAMP_OK;
  for (size_t k = 0; k < c; k++) {
    double w = (double)weight_at(a, k) * v.invstd[k];
    double q = a->training ? -w * v.invstd[k] * v.invstd[k] * s.sum_ab[k] / m : 0.0;
    s.p[k] = (float)w;
    s.q[k] = (float)q;
    s.r[k] = a->training ? (float)(-w * s.sum_a[k] / m - q * v.mean[k]) : 0.0f;
  }
  if (a->relu)
    return lamp_cpu_channel_combine_masked(a->dx, a->dx_dtype, a->dy, a->dy_dtype, a->x, a->x_dtype, s.p, s.q, s.r,
                                           &mask, n, c, hw);
  return lamp_cpu_channel_combine_typed(a->dx, a->dx_dtype, a->dy, a->dy_dtype, a->x, a->x_dtype, s.p, s.q, s.r, n,
                                        c, hw);
}
