/*
** BatchNorm (backend.h's contract; core/backend/cpu/batchnorm.c and channel.c are the reference),
** in three launches per pass, none with atomics:
**
**   rows      8 threads per (image, channel) row, one per channel.c lane, the first also summing
**             the row's tail; the lanes are added to the tail in order (channel_math.h), so each
**             row's fp32 sums are the CPU's;
**   channels  one thread per channel folds its rows in double in image order (the CPU's order:
**             the same bits) and runs the per-channel formulas: statistics, running statistics,
**             the saved affine map (forward); parameter gradients and the input gradient's
**             coefficients (backward);
**   elements  the affine map (and the fused ReLU) or the input gradient, one thread per element.
**
** The rows' partial sums and the coefficients live in the stream's scratch buffer.
*/
#include "backend/cuda/channel_math.h"
#include "backend/cuda/channel_ops.h"
#include "backend/cuda/launch.cuh"

#define FULL_WARP 0xffffffffu
#define ROWS_PER_BLOCK (LAMP_CUDA_THREADS / LAMP_CM_LANES)

/* The saved statistics, c floats each (backend.h: mean, 1/std, scale, shift). */
typedef struct saved_view {
  float *mean, *invstd, *scale, *shift;
} saved_view;

static saved_view view_of(float *saved, size_t c) { return saved_view{saved, saved + c, saved + 2 * c, saved + 3 * c}; }

/* What the rows kernel reads: a through the mask (when `masked`) and b; the forward's centers are
   the channel's first value of x (image 0), the backward's 0 for dy and the saved mean for x. */
typedef struct rows_job {
  const void *a, *b;
  lamp_dtype a_dtype, b_dtype;
  size_t n, c, hw;
  int forward, masked;
  float zero_bound;
  saved_view v;
  float *row_sum, *row_dot; /* [n * c] */
} rows_job;

static __global__ void rows_kernel(rows_job j) {
  size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LAMP_CM_LANES, lane = threadIdx.x % LAMP_CM_LANES;
  int active = row < j.n * j.c;
  float s = 0.0f, d = 0.0f, tail_s = 0.0f, tail_d = 0.0f;
  if (active) {
    size_t k = row % j.c, first = row * j.hw;
    float ca = 0.0f, cb;
    if (j.forward) ca = cb = lamp_em_load(j.b, j.b_dtype, k * j.hw);
    else cb = j.v.mean[k];
    lamp_cm_mask m = {j.masked, j.masked ? j.v.scale[k] : 0.0f, j.masked ? j.v.shift[k] : 0.0f, j.zero_bound};
    lamp_cm_lane_sums(j.a, j.a_dtype, j.b, j.b_dtype, first, j.hw, lane, ca, cb, m, &s, &d);
    if (lane == 0) lamp_cm_tail_sums(j.a, j.a_dtype, j.b, j.b_dtype, first, j.hw, ca, cb, m, &tail_s, &tail_d);
  }
  /* every lane of the warp takes part in the shuffles; a row's 8 lanes are adjacent */
  float ls[LAMP_CM_LANES], ld[LAMP_CM_LANES];
  unsigned base = threadIdx.x % 32 / LAMP_CM_LANES * LAMP_CM_LANES;
  for (unsigned l = 0; l < LAMP_CM_LANES; l++) {
    ls[l] = __shfl_sync(FULL_WARP, s, (int)(base + l));
    ld[l] = __shfl_sync(FULL_WARP, d, (int)(base + l));
  }
  if (active && lane == 0) {
    lamp_cm_fold_lanes(&tail_s, &tail_d, ls, ld);
    j.row_sum[row] = tail_s;
    j.row_dot[row] = tail_d;
  }
}

/* Channel k's rows folded in double, images in order (channel.c's reduce_rows). */
static __device__ void fold_rows(const float *row_sum, const float *row_dot, size_t n, size_t c, size_t k,
                                 double *sum, double *dot) {
  double sa = 0.0, sab = 0.0;
  for (size_t i = 0; i < n; i++) {
    sa = lamp_em_dadd(sa, (double)row_sum[i * c + k]);
    sab = lamp_em_dadd(sab, (double)row_dot[i * c + k]);
  }
  *sum = sa;
  *dot = sab;
}

typedef struct channel_job {
  lamp_batchnorm_args a; /* its pointers are device memory */
  saved_view v;
  const float *row_sum, *row_dot;
  float *p, *q, *r; /* backward: the input gradient's coefficients */
} channel_job;

static __device__ float weight_at(const lamp_batchnorm_args *a, size_t k) { return a->weight ? a->weight[k] : 1.0f; }
static __device__ float bias_at(const lamp_batchnorm_args *a, size_t k) { return a->bias ? a->bias[k] : 0.0f; }

static __global__ void forward_channels_kernel(channel_job j) {
  const lamp_batchnorm_args *a = &j.a;
  if (a->training && blockIdx.x == 0 && threadIdx.x == 0)
    a->batches_tracked[0] = lamp_em_add(a->batches_tracked[0], 1.0f);
  LAMP_GRID_STRIDE(k, a->channels) {
    if (a->training) {
      double sum, sum_sq, m = (double)(a->batch * a->plane);
      fold_rows(j.row_sum, j.row_dot, a->batch, a->channels, k, &sum, &sum_sq);
      float center = m > 0 ? lamp_em_load(a->x, a->x_dtype, k * a->plane) : 0.0f;
      lamp_cm_bn_statistics(sum, sum_sq, center, m, a->momentum, a->eps, &j.v.mean[k], &j.v.invstd[k],
                            &a->running_mean[k], &a->running_var[k]);
    } else {
      j.v.mean[k] = a->running_mean[k];
      j.v.invstd[k] = lamp_cm_bn_invstd(a->running_var[k], a->eps);
    }
    lamp_cm_bn_affine(weight_at(a, k), bias_at(a, k), j.v.mean[k], j.v.invstd[k], &j.v.scale[k], &j.v.shift[k]);
  }
}

static __global__ void affine_kernel(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const float *scale,
                                     const float *shift, size_t c, size_t hw, size_t n, int relu) {
  LAMP_GRID_STRIDE(i, n) {
    size_t k = i / hw % c;
    lamp_em_store(y, y_dtype, i, lamp_cm_bn_apply(lamp_em_load(x, x_dtype, i), scale[k], shift[k], relu));
  }
}

static __global__ void backward_channels_kernel(channel_job j) {
  const lamp_batchnorm_args *a = &j.a;
  LAMP_GRID_STRIDE(k, a->channels) {
    double sum, sum_xc, m = (double)(a->batch * a->plane);
    fold_rows(j.row_sum, j.row_dot, a->batch, a->channels, k, &sum, &sum_xc);
    if (a->grad_weight != NULL) {
      float dw, db;
      lamp_cm_bn_param_grads(sum, sum_xc, j.v.invstd[k], &dw, &db);
      a->grad_weight[k] = lamp_cm_grad_into(a->grad_weight[k], dw, a->grad_dtype, a->overwrite_grads);
      if (a->grad_bias != NULL)
        a->grad_bias[k] = lamp_cm_grad_into(a->grad_bias[k], db, a->grad_dtype, a->overwrite_grads);
    }
    if (a->dx != NULL)
      lamp_cm_bn_grad_coefs(a->training, weight_at(a, k), j.v.mean[k], j.v.invstd[k], sum, sum_xc, m, &j.p[k], &j.q[k],
                            &j.r[k]);
  }
}

static __global__ void combine_kernel(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype, const void *x,
                                      lamp_dtype x_dtype, const float *p, const float *q, const float *r, saved_view v,
                                      int masked, float zero_bound, size_t c, size_t hw, size_t n) {
  LAMP_GRID_STRIDE(i, n) {
    size_t k = i / hw % c;
    lamp_cm_mask m = {masked, masked ? v.scale[k] : 0.0f, masked ? v.shift[k] : 0.0f, zero_bound};
    float g = lamp_cm_bn_combine(lamp_em_load(dy, dy_dtype, i), lamp_em_load(x, x_dtype, i), p[k], q[k], r[k], m);
    lamp_em_store(dx, dx_dtype, i, g);
  }
}

/* ---- the operations ------------------------------------------------------------------------ */

/* The CPU's checks (batchnorm.c's check_dtypes), in its order and words, then the operands. */
static lamp_status check_args(const char *fn, const lamp_batchnorm_args *a) {
  lamp_status s = lamp_cuda_check_data(fn, "args", a, 1);
  if (s != LAMP_OK) return s;
  size_t n = a->batch * a->channels * a->plane;
  s = lamp_cuda_check_float(fn, "x", a->x_dtype);
  if (s == LAMP_OK && a->y != NULL) s = lamp_cuda_check_float(fn, "y", a->y_dtype);
  if (s == LAMP_OK && a->dy != NULL) s = lamp_cuda_check_float(fn, "dy", a->dy_dtype);
  if (s == LAMP_OK && a->dx != NULL) s = lamp_cuda_check_float(fn, "dx", a->dx_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "saved", a->saved, 1);
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "x", a->x, n);
  return s;
}

/* The rows' sums (n * c of each) into scratch, with room for the coefficients after them. */
static lamp_status sum_rows_of(const char *fn, rows_job *j, float **coefs) {
  size_t rows = j->n * j->c;
  float *scratch = NULL;
  lamp_status s = lamp_cuda_scratch((2 * rows + 3 * j->c) * sizeof(float) + sizeof(float), (void **)&scratch);
  if (s != LAMP_OK) return s;
  j->row_sum = scratch;
  j->row_dot = scratch + rows;
  *coefs = scratch + 2 * rows;
  if (rows == 0) return LAMP_OK;
  size_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  rows_kernel<<<(unsigned)blocks, LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(*j);
  return lamp_cuda_launched(fn);
}

lamp_status lamp_cuda_batchnorm_forward(const lamp_batchnorm_args *a) {
  static const char fn[] = "batchnorm_forward";
  lamp_status s = check_args(fn, a);
  size_t c = a != NULL ? a->channels : 0, n = s == LAMP_OK ? a->batch * c * a->plane : 0;
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "y", a->y, n);
  if (s == LAMP_OK && a->training) {
    s = lamp_cuda_check_data(fn, "running_mean", a->running_mean, c);
    if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "running_var", a->running_var, c);
    if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "batches_tracked", a->batches_tracked, 1);
  } else if (s == LAMP_OK) {
    s = lamp_cuda_check_data(fn, "running_mean", a->running_mean, c);
    if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "running_var", a->running_var, c);
  }
  if (s != LAMP_OK || (c == 0 && !a->training)) return s; /* training still counts the batch */
  channel_job cj = {*a, view_of(a->saved, c), NULL, NULL, NULL, NULL, NULL};
  if (a->training) {
    rows_job rj = {a->x, a->x, a->x_dtype, a->x_dtype, a->batch, c, a->plane, 1, 0, 0.0f, cj.v, NULL, NULL};
    float *coefs;
    s = sum_rows_of(fn, &rj, &coefs);
    if (s != LAMP_OK) return s;
    cj.row_sum = rj.row_sum;
    cj.row_dot = rj.row_dot;
  }
  forward_channels_kernel<<<lamp_cuda_blocks(c), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(cj);
  s = lamp_cuda_launched(fn);
  if (s != LAMP_OK || n == 0) return s;
  affine_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      a->y, a->y_dtype, a->x, a->x_dtype, cj.v.scale, cj.v.shift, c, a->plane, n, a->relu != 0);
  return lamp_cuda_launched(fn);
}

lamp_status lamp_cuda_batchnorm_backward(const lamp_batchnorm_args *a) {
  static const char fn[] = "batchnorm_backward";
  lamp_status s = check_args(fn, a);
  size_t c = a != NULL ? a->channels : 0, n = s == LAMP_OK ? a->batch * c * a->plane : 0;
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "dy", a->dy, n);
  if (s != LAMP_OK || c == 0) return s;
  int masked = a->relu != 0;
  float zero_bound = lamp_cm_zero_bound(a->y_dtype);
  channel_job cj = {*a, view_of(a->saved, c), NULL, NULL, NULL, NULL, NULL};
  rows_job rj = {a->dy, a->x, a->dy_dtype, a->x_dtype, a->batch, c, a->plane, 0, masked, zero_bound, cj.v, NULL, NULL};
  float *coefs;
  s = sum_rows_of(fn, &rj, &coefs);
  if (s != LAMP_OK) return s;
  cj.row_sum = rj.row_sum;
  cj.row_dot = rj.row_dot;
  cj.p = coefs;
  cj.q = coefs + c;
  cj.r = coefs + 2 * c;
  backward_channels_kernel<<<lamp_cuda_blocks(c), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(cj);
  s = lamp_cuda_launched(fn);
  if (s != LAMP_OK || a->dx == NULL || n == 0) return s;
  combine_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      a->dx, a->dx_dtype, a->dy, a->dy_dtype, a->x, a->x_dtype, cj.p, cj.q, cj.r, cj.v, masked, zero_bound, c,
      a->plane, n);
  return lamp_cuda_launched(fn);
}
