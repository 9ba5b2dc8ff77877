/*
** The CUDA pooling and BatchNorm kernels' math (core/backend/cuda/channel_math.h), compiled here as
** plain C on the CPU, against the CPU backend's operations (lamp_maxpool_*, lamp_avgpool_*,
** lamp_batchnorm_* on LAMP_CPU) bit for bit: the CPU proof that pool.cu and batchnorm.cu compute
** the CPU's values (they run only on a GPU).
**
** Each check runs the kernels' structure on the host: the pools one output (forward) or one input
** (backward, a gather) at a time; BatchNorm's row sums lane by lane as rows_kernel splits them, the
** rows folded per channel, then the per-channel formulas and the elementwise passes. Inputs: f32,
** f16 and bf16 operands in every pairing the contracts allow, geometries with padding, dilation,
** strides that overlap or skip, windows of padding only, odd sizes under the 2x2 tiling; values
** with ties, signed zeros, infinities and NaN; BatchNorm in training and inference, with and
** without the affine parameters and the fused ReLU, large offsets, constant channels, rows longer
** than the CPU's staging chunk, outputs at the 16-bit zero bounds, and the gradients written or
** added in each gradient dtype. Any NaN equals any NaN (a GPU's arithmetic NaN has its own
** payload, elementwise_math.h); every other result must have the CPU's bits.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda/channel_math.h"
#include "tensor/half.h"

static const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};

/* ---- helpers ------------------------------------------------------------------------------- */

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(next_u32() >> 8) * 0x1p-24f; }

static size_t dsize(lamp_dtype t) { return t == LAMP_F32 ? 4 : 2; }

static void *alloc(lamp_dtype t, size_t n) {
  void *p = calloc(n ? n : 1, dsize(t));
  assert_non_null(p);
  return p;
}

/* Element i of two arrays of dtype t: the same bits, or both NaN. */
static void assert_same(const void *dev, const void *cpu, lamp_dtype t, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    float a = lamp_em_load(dev, t, i), b = lamp_em_load(cpu, t, i);
    if (lamp_em_isnan(a) && lamp_em_isnan(b)) continue;
    if (bits_of(a) != bits_of(b))
      fail_msg("%s: element %zu: device math %a (0x%08x), cpu %a (0x%08x)", what, i, (double)a, (unsigned)bits_of(a),
               (double)b, (unsigned)bits_of(b));
  }
}

/* Values that break comparisons and sums: many ties (few distinct values), signed zeros, and in
   `specials` of every 16 elements an infinity or a NaN. */
static void fill_pool_input(void *x, lamp_dtype t, size_t n, int specials) {
  static const float odd[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < n; i++) {
    float v = (float)(int)(next_u32() % 9) - 4.0f;
    if (next_u32() % 3 == 0) v = uniform(-3.0f, 3.0f);
    if (specials && next_u32() % 16 == 0) v = odd[next_u32() % 5];
    lamp_em_store(x, t, i, v);
  }
}

/* ---- pooling -------------------------------------------------------------------------------- */

static lamp_conv_geom geom(size_t h, size_t w, size_t kh, size_t kw, size_t sh, size_t sw, size_t ph, size_t pw,
                           size_t dh, size_t dw) {
  lamp_conv_geom g = {0, h, w, kh, kw, sh, sw, ph, pw, dh, dw, 0, 0};
  g.out_h = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  g.out_w = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  return g;
}

static const lamp_conv_geom *geometries(size_t *count) {
  static lamp_conv_geom g[12];
  size_t n = 0;
  g[n++] = geom(8, 8, 2, 2, 2, 2, 0, 0, 1, 1);  /* the 2x2 tiling */
  g[n++] = geom(7, 5, 2, 2, 2, 2, 0, 0, 1, 1);  /* ... with a row and a column left out */
  g[n++] = geom(9, 9, 3, 3, 2, 2, 1, 1, 1, 1);  /* ResNet's stem pool */
  g[n++] = geom(6, 7, 3, 3, 1, 1, 1, 1, 1, 1);  /* overlapping windows */
  g[n++] = geom(10, 9, 3, 2, 2, 3, 1, 0, 2, 1); /* dilation, uneven strides */
  g[n++] = geom(5, 5, 2, 2, 3, 3, 0, 0, 1, 1);  /* strides that skip inputs */
  g[n++] = geom(3, 4, 3, 3, 1, 2, 2, 2, 1, 1);  /* windows of padding only */
  g[n++] = geom(1, 1, 1, 1, 1, 1, 0, 0, 1, 1);
  g[n++] = geom(4, 4, 4, 4, 1, 1, 0, 0, 1, 1);  /* one window, the whole plane */
  g[n++] = geom(12, 11, 5, 3, 2, 1, 2, 1, 2, 3);
  *count = n;
  return g;
}

static void maxpool_matches(void **state) {
  (void)state;
  size_t ng;
  const lamp_conv_geom *gs = geometries(&ng);
  const size_t planes = 3;
  for (size_t gi = 0; gi < ng; gi++)
    for (int xi = 0; xi < 3; xi++)
      for (int yi = 0; yi < 3; yi++) {
        const lamp_conv_geom *g = &gs[gi];
        lamp_dtype xt = dtypes[xi], yt = dtypes[yi];
        size_t in = g->height * g->width, out = g->out_h * g->out_w;
        void *x = alloc(xt, planes * in), *y_cpu = alloc(yt, planes * out), *y_dev = alloc(yt, planes * out);
        int32_t *arg_cpu = calloc(planes * out, 4), *arg_dev = calloc(planes * out, 4);
        assert_non_null(arg_cpu);
        assert_non_null(arg_dev);
        fill_pool_input(x, xt, planes * in, 1);
        assert_int_equal(lamp_maxpool_forward(LAMP_CPU, y_cpu, yt, arg_cpu, x, xt, planes, g), LAMP_OK);
        for (size_t i = 0; i < planes * out; i++) {
          size_t p = i / out, o = i % out;
          lamp_em_store(y_dev, yt, i, lamp_cm_maxpool_at(x, xt, p * in, g, o / g->out_w, o % g->out_w, &arg_dev[i]));
        }
        assert_memory_equal(arg_dev, arg_cpu, planes * out * 4);
        assert_memory_equal(y_dev, y_cpu, planes * out * dsize(yt)); /* no arithmetic: NaN payloads too */

        /* backward from the CPU's winners, dy with signed zeros and NaN */
        void *dy = alloc(yt, planes * out), *dx_cpu = alloc(xt, planes * in), *dx_dev = alloc(xt, planes * in);
        fill_pool_input(dy, yt, planes * out, 1);
        assert_int_equal(lamp_maxpool_backward(LAMP_CPU, dx_cpu, xt, dy, yt, arg_cpu, planes, g), LAMP_OK);
        for (size_t i = 0; i < planes * in; i++) {
          size_t p = i / in, e = i % in;
          lamp_em_store(dx_dev, xt, i, lamp_cm_maxpool_grad_at(dy, yt, arg_cpu, p, g, e / g->width, e % g->width));
        }
        assert_same(dx_dev, dx_cpu, xt, planes * in, "maxpool_backward");
        free(dy);
        free(dx_cpu);
        free(dx_dev);
        free(arg_cpu);
        free(arg_dev);
        free(x);
        free(y_cpu);
        free(y_dev);
      }
}

/* A NaN anywhere in a window wins over every number, whatever its place in the scan. */
static void maxpool_nan_wins_everywhere(void **state) {
  (void)state;
  lamp_conv_geom g = geom(3, 3, 3, 3, 1, 1, 0, 0, 1, 1);
  for (size_t at = 0; at < 9; at++) {
    float x[9];
    for (size_t i = 0; i < 9; i++) x[i] = (float)i;
    x[at] = NAN;
    int32_t cpu_at, dev_at;
    float cpu;
    assert_int_equal(lamp_maxpool_forward(LAMP_CPU, &cpu, LAMP_F32, &cpu_at, x, LAMP_F32, 1, &g), LAMP_OK);
    float dev = lamp_cm_maxpool_at(x, LAMP_F32, 0, &g, 0, 0, &dev_at);
    assert_true(lamp_em_isnan(dev) && lamp_em_isnan(cpu));
    assert_int_equal(dev_at, (int32_t)at);
    assert_int_equal(cpu_at, (int32_t)at);
  }
}

static void avgpool_matches(void **state) {
  (void)state;
  size_t ng;
  const lamp_conv_geom *gs = geometries(&ng);
  const size_t planes = 3;
  for (size_t gi = 0; gi < ng; gi++)
    for (int xi = 0; xi < 3; xi++)
      for (int yi = 0; yi < 3; yi++)
        for (int specials = 0; specials < 2; specials++) {
          const lamp_conv_geom *g = &gs[gi];
          lamp_dtype xt = dtypes[xi], yt = dtypes[yi];
          size_t in = g->height * g->width, out = g->out_h * g->out_w;
          float inv = lamp_cm_avg_factor(g);
          void *x = alloc(xt, planes * in), *y_cpu = alloc(yt, planes * out), *y_dev = alloc(yt, planes * out);
          fill_pool_input(x, xt, planes * in, specials);
          assert_int_equal(lamp_avgpool_forward(LAMP_CPU, y_cpu, yt, x, xt, planes, g), LAMP_OK);
          for (size_t i = 0; i < planes * out; i++) {
            size_t p = i / out, o = i % out;
            lamp_em_store(y_dev, yt, i, lamp_cm_avgpool_at(x, xt, p * in, g, o / g->out_w, o % g->out_w, inv));
          }
          assert_same(y_dev, y_cpu, yt, planes * out, "avgpool_forward");
          void *dy = alloc(yt, planes * out), *dx_cpu = alloc(xt, planes * in), *dx_dev = alloc(xt, planes * in);
          fill_pool_input(dy, yt, planes * out, specials);
          assert_int_equal(lamp_avgpool_backward(LAMP_CPU, dx_cpu, xt, dy, yt, planes, g), LAMP_OK);
          for (size_t i = 0; i < planes * in; i++) {
            size_t p = i / in, e = i % in;
            lamp_em_store(dx_dev, xt, i, lamp_cm_avgpool_grad_at(dy, yt, p, g, e / g->width, e % g->width, inv));
          }
          assert_same(dx_dev, dx_cpu, xt, planes * in, "avgpool_backward");
          free(dy);
          free(dx_cpu);
          free(dx_dev);
          free(x);
          free(y_cpu);
          free(y_dev);
        }
}

/* ---- BatchNorm, through the kernels' structure ------------------------------------------------ */

/* rows_kernel on the host: each (image, channel) row's 8 lanes, the tail, the fold. */
static void device_rows(const void *a, lamp_dtype at, const void *b, lamp_dtype bt, size_t n, size_t c, size_t hw,
                        int forward, const float *mean, const float *scale, const float *shift, int masked,
                        float zero_bound, float *row_sum, float *row_dot) {
  for (size_t row = 0; row < n * c; row++) {
    size_t k = row % c, first = row * hw;
    float ca = 0.0f, cb, ls[LAMP_CM_LANES], ld[LAMP_CM_LANES], s, d;
    if (forward) ca = cb = lamp_em_load(b, bt, k * hw);
    else cb = mean[k];
    lamp_cm_mask m = {masked, masked ? scale[k] : 0.0f, masked ? shift[k] : 0.0f, zero_bound};
    for (size_t l = 0; l < LAMP_CM_LANES; l++) lamp_cm_lane_sums(a, at, b, bt, first, hw, l, ca, cb, m, &ls[l], &ld[l]);
    lamp_cm_tail_sums(a, at, b, bt, first, hw, ca, cb, m, &s, &d);
    lamp_cm_fold_lanes(&s, &d, ls, ld);
    /* the whole-row reference in the CPU's order agrees with the split */
    float s2, d2;
    lamp_cm_row_sums(a, at, b, bt, first, hw, ca, cb, m, &s2, &d2);
    assert_true(bits_of(s) == bits_of(s2) || (lamp_em_isnan(s) && lamp_em_isnan(s2)));
    assert_true(bits_of(d) == bits_of(d2) || (lamp_em_isnan(d) && lamp_em_isnan(d2)));
    row_sum[row] = s;
    row_dot[row] = d;
  }
}

static void fold(const float *row_sum, const float *row_dot, size_t n, size_t c, size_t k, double *sum, double *dot) {
  *sum = *dot = 0.0;
  for (size_t i = 0; i < n; i++) {
    *sum = lamp_em_dadd(*sum, (double)row_sum[i * c + k]);
    *dot = lamp_em_dadd(*dot, (double)row_dot[i * c + k]);
  }
}

/* batchnorm.cu's forward on the host, on a's (host) memory. */
static void device_forward(const lamp_batchnorm_args *a) {
  size_t n = a->batch, c = a->channels, hw = a->plane;
  float *mean = a->saved, *invstd = mean + c, *scale = invstd + c, *shift = scale + c;
  float *row_sum = calloc(n * c + 1, 4), *row_dot = calloc(n * c + 1, 4);
  assert_non_null(row_sum);
  assert_non_null(row_dot);
  if (a->training) {
    device_rows(a->x, a->x_dtype, a->x, a->x_dtype, n, c, hw, 1, NULL, NULL, NULL, 0, 0.0f, row_sum, row_dot);
    a->batches_tracked[0] = lamp_em_add(a->batches_tracked[0], 1.0f);
  }
  for (size_t k = 0; k < c; k++) {
    if (a->training) {
      double sum, sq, m = (double)(n * hw);
      fold(row_sum, row_dot, n, c, k, &sum, &sq);
      float center = m > 0 ? lamp_em_load(a->x, a->x_dtype, k * hw) : 0.0f;
      lamp_cm_bn_statistics(sum, sq, center, m, a->momentum, a->eps, &mean[k], &invstd[k], &a->running_mean[k],
                            &a->running_var[k]);
    } else {
      mean[k] = a->running_mean[k];
      invstd[k] = lamp_cm_bn_invstd(a->running_var[k], a->eps);
    }
    lamp_cm_bn_affine(a->weight ? a->weight[k] : 1.0f, a->bias ? a->bias[k] : 0.0f, mean[k], invstd[k], &scale[k],
                      &shift[k]);
  }
  for (size_t i = 0; i < n * c * hw; i++) {
    size_t k = i / hw % c;
    float v = lamp_cm_bn_apply(lamp_em_load(a->x, a->x_dtype, i), scale[k], shift[k], a->relu);
    lamp_em_store(a->y, a->y_dtype, i, v);
  }
  free(row_sum);
  free(row_dot);
}

/* batchnorm.cu's backward on the host. */
static void device_backward(const lamp_batchnorm_args *a) {
  size_t n = a->batch, c = a->channels, hw = a->plane;
  const float *mean = a->saved, *invstd = mean + c, *scale = invstd + c, *shift = scale + c;
  float zero_bound = lamp_cm_zero_bound(a->y_dtype);
  float *row_sum = calloc(n * c + 1, 4), *row_dot = calloc(n * c + 1, 4), *coef = calloc(3 * c + 1, 4);
  assert_non_null(row_sum);
  assert_non_null(row_dot);
  assert_non_null(coef);
  device_rows(a->dy, a->dy_dtype, a->x, a->x_dtype, n, c, hw, 0, mean, scale, shift, a->relu, zero_bound, row_sum,
              row_dot);
  for (size_t k = 0; k < c; k++) {
    double sum, sum_xc, m = (double)(n * hw);
    fold(row_sum, row_dot, n, c, k, &sum, &sum_xc);
    if (a->grad_weight != NULL) {
      float dw, db;
      lamp_cm_bn_param_grads(sum, sum_xc, invstd[k], &dw, &db);
      a->grad_weight[k] = lamp_cm_grad_into(a->grad_weight[k], dw, a->grad_dtype, a->overwrite_grads);
      a->grad_bias[k] = lamp_cm_grad_into(a->grad_bias[k], db, a->grad_dtype, a->overwrite_grads);
    }
    lamp_cm_bn_grad_coefs(a->training, a->weight ? a->weight[k] : 1.0f, mean[k], invstd[k], sum, sum_xc, m, &coef[k],
                          &coef[c + k], &coef[2 * c + k]);
  }
  if (a->dx != NULL)
    for (size_t i = 0; i < n * c * hw; i++) {
      size_t k = i / hw % c;
      lamp_cm_mask m = {a->relu, a->relu ? scale[k] : 0.0f, a->relu ? shift[k] : 0.0f, zero_bound};
      float g = lamp_cm_bn_combine(lamp_em_load(a->dy, a->dy_dtype, i), lamp_em_load(a->x, a->x_dtype, i), coef[k],
                                   coef[c + k], coef[2 * c + k], m);
      lamp_em_store(a->dx, a->dx_dtype, i, g);
    }
  free(row_sum);
  free(row_dot);
  free(coef);
}

/* One BatchNorm configuration, forward then backward on both sides, compared. */
typedef struct bn_case {
  size_t n, c, hw;
  lamp_dtype xt, yt, gt;
  int training, relu, affine, overwrite;
  int kind; /* 0: uniform; 1: a large offset; 2: constant channels; 3: outputs at the zero bounds */
} bn_case;

static void fill_bn_input(const bn_case *t, void *x, float *w, float *b, float *rm, float *rv) {
  size_t total = t->n * t->c * t->hw;
  for (size_t i = 0; i < total; i++) {
    size_t k = i / t->hw % t->c;
    float v = uniform(-2.0f, 2.0f) + (float)k;
    if (t->kind == 1) v = 1000.0f + uniform(-0.01f, 0.01f);
    if (t->kind == 2) v = 0.5f + (float)k;
    if (t->kind == 3) v = 0x1p-20f + (float)((int)(next_u32() % 9) - 4) * 0x1p-26f;
    lamp_em_store(x, t->xt, i, v);
  }
  for (size_t k = 0; k < t->c; k++) {
    w[k] = uniform(0.5f, 1.5f);
    b[k] = uniform(-0.5f, 0.5f);
    rm[k] = uniform(-0.5f, 0.5f);
    rv[k] = uniform(0.5f, 2.0f);
    if (t->kind == 3) { /* y = x - 2^-20 exactly: the outputs straddle the 16-bit zero bounds */
      w[k] = 1.0f;
      b[k] = -0x1p-20f;
      rm[k] = 0.0f;
      rv[k] = 1.0f;
    }
  }
}

static void run_bn_case(const bn_case *t) {
  size_t c = t->c, total = t->n * c * t->hw;
  double eps = t->kind == 3 ? 0.0 : 1e-5;
  void *x = alloc(t->xt, total), *y_cpu = alloc(t->yt, total), *y_dev = alloc(t->yt, total);
  float w[16], b[16], rm_cpu[16], rv_cpu[16], rm_dev[16], rv_dev[16], saved_cpu[64], saved_dev[64];
  float bt_cpu = 3.0f, bt_dev = 3.0f;
  assert_true(c <= 16);
  if (t->xt != LAMP_F32 && t->kind == 3) { /* 2^-20 + small steps are not 16-bit values: keep f32 x */
    free(x);
    free(y_cpu);
    free(y_dev);
    return;
  }
  fill_bn_input(t, x, w, b, rm_cpu, rv_cpu);
  memcpy(rm_dev, rm_cpu, sizeof rm_dev);
  memcpy(rv_dev, rv_cpu, sizeof rv_dev);
  lamp_batchnorm_args a = {.batch = t->n, .channels = c, .plane = t->hw, .momentum = 0.1, .eps = eps,
                           .training = t->training, .relu = t->relu, .x = x, .x_dtype = t->xt, .y_dtype = t->yt,
                           .weight = t->affine ? w : NULL, .bias = t->affine ? b : NULL};
  lamp_batchnorm_args cpu = a, dev = a;
  cpu.y = y_cpu, cpu.running_mean = rm_cpu, cpu.running_var = rv_cpu, cpu.batches_tracked = &bt_cpu;
  cpu.saved = saved_cpu;
  dev.y = y_dev, dev.running_mean = rm_dev, dev.running_var = rv_dev, dev.batches_tracked = &bt_dev;
  dev.saved = saved_dev;
  assert_int_equal(lamp_batchnorm_forward(LAMP_CPU, &cpu), LAMP_OK);
  device_forward(&dev);
  assert_same(y_dev, y_cpu, t->yt, total, "batchnorm_forward y");
  assert_same(saved_dev, saved_cpu, LAMP_F32, 4 * c, "batchnorm_forward saved");
  assert_same(rm_dev, rm_cpu, LAMP_F32, c, "batchnorm_forward running_mean");
  assert_same(rv_dev, rv_cpu, LAMP_F32, c, "batchnorm_forward running_var");
  assert_true(bits_of(bt_dev) == bits_of(bt_cpu));

  /* backward from the CPU's saved statistics (the same bits as the device's, checked above) */
  void *dy = alloc(t->yt, total), *dx_cpu = alloc(t->xt, total), *dx_dev = alloc(t->xt, total);
  for (size_t i = 0; i < total; i++) lamp_em_store(dy, t->yt, i, uniform(-1.0f, 1.0f));
  if (total > 2) lamp_em_store(dy, t->yt, 1, -0.0f);
  float gw_cpu[16], gb_cpu[16], gw_dev[16], gb_dev[16];
  for (size_t k = 0; k < c; k++) gw_cpu[k] = gw_dev[k] = gb_cpu[k] = gb_dev[k] = uniform(-1.0f, 1.0f);
  cpu.dy = dev.dy = dy, cpu.dy_dtype = dev.dy_dtype = t->yt;
  cpu.dx = dx_cpu, dev.dx = dx_dev, cpu.dx_dtype = dev.dx_dtype = t->xt;
  cpu.grad_dtype = dev.grad_dtype = t->gt, cpu.overwrite_grads = dev.overwrite_grads = t->overwrite;
  if (t->affine) cpu.grad_weight = gw_cpu, cpu.grad_bias = gb_cpu, dev.grad_weight = gw_dev, dev.grad_bias = gb_dev;
  dev.saved = saved_cpu;
  assert_int_equal(lamp_batchnorm_backward(LAMP_CPU, &cpu), LAMP_OK);
  device_backward(&dev);
  assert_same(dx_dev, dx_cpu, t->xt, total, "batchnorm_backward dx");
  if (t->affine) {
    assert_same(gw_dev, gw_cpu, LAMP_F32, c, "batchnorm_backward grad_weight");
    assert_same(gb_dev, gb_cpu, LAMP_F32, c, "batchnorm_backward grad_bias");
  }
  free(dy);
  free(dx_cpu);
  free(dx_dev);
  free(x);
  free(y_cpu);
  free(y_dev);
}

static void batchnorm_matches(void **state) {
  (void)state;
  /* hw: one element, under a block, a block and a tail, several blocks, and past a 512 chunk */
  static const size_t shapes[][3] = {{2, 3, 1}, {4, 3, 5}, {3, 2, 8}, {2, 4, 17}, {8, 3, 49}, {2, 2, 1037}, {1, 5, 2}};
  size_t cases = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int xi = 0; xi < 3; xi++)
      for (int yi = 0; yi < 3; yi++)
        for (int mode = 0; mode < 8; mode++) {
          bn_case t = {shapes[s][0], shapes[s][1], shapes[s][2], dtypes[xi], dtypes[yi], dtypes[(xi + yi + mode) % 3],
                       mode & 1, (mode >> 1) & 1, !((mode >> 2) & 1) || s % 2, (int)(s + mode) % 2, 0};
          t.kind = (int)((s + (size_t)mode) % 3); /* uniform, offset, constant */
          run_bn_case(&t);
          cases++;
        }
  assert_true(cases > 400);
}

/* Outputs around the zero bounds of f16 (2^-25) and bf16 (2^-134 is below what x - 2^-20 reaches,
   so there every nonzero output passes): the forward's rectified output and the backward's mask
   from x and the saved map. */
static void batchnorm_relu_at_the_zero_bounds(void **state) {
  (void)state;
  assert_true(bits_of(lamp_cm_zero_bound(LAMP_F16)) == bits_of(LAMP_F16_ZERO_BOUND));
  assert_true(bits_of(lamp_cm_zero_bound(LAMP_BF16)) == bits_of(LAMP_BF16_ZERO_BOUND));
  assert_true(bits_of(lamp_cm_zero_bound(LAMP_F32)) == bits_of(0.0f));
  for (int yi = 0; yi < 3; yi++)
    for (int training = 0; training < 2; training++) {
      bn_case t = {4, 2, 33, LAMP_F32, dtypes[yi], LAMP_F32, training, 1, 1, 1, 3};
      run_bn_case(&t);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(maxpool_matches),
      cmocka_unit_test(maxpool_nan_wins_everywhere),
      cmocka_unit_test(avgpool_matches),
      cmocka_unit_test(batchnorm_matches),
      cmocka_unit_test(batchnorm_relu_at_the_zero_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
