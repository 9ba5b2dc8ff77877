/*
** The convolutional layers against references in double: Conv2d (stride 2, padding,
** dilation 2, groups 2, depthwise, with and without bias), BatchNorm2d in training and
** evaluation mode, MaxPool2d / AvgPool2d with padding and stride, GlobalAvgPool, Flatten,
** Dropout and Residual with and without a projection. For each: the forward output against the
** reference, and dx and every parameter gradient against central differences OF THE REFERENCE.
**
** Why differentiate the double reference rather than the fp32 layer: BatchNorm is not
** piecewise linear, so an fp32 central difference mixes truncation error (h^2) with rounding
** error (2^-24 * |objective| / h) and no h makes both small. In double, h = 1e-3 leaves
** truncation ~1e-7 relative (the objectives' third derivatives are O(1)) and rounding ~1e-13.
** The analytic side is the layer's fp32 backward: GEMM sums of K <= 200 terms of size ~1 carry
** ~K * 2^-24 ~ 1e-5 absolute error, BatchNorm's per-channel sums (<= 200 terms) the same. Hence
** |num - ana| <= 2e-4 + 1e-3 |ana|, about 10x the estimate; a wrong index, a missing term or a
** factor 2 is off by O(0.1..1). The forward is compared at 1e-5 + 1e-5 relative.
**
** Both backward protocols are checked: backward_input + accumulate_grads (the model's
** non-combined path) and the combined backward op where the layer has one (Sequential's walk),
** which must agree to the last bit with the first: they run the same arithmetic.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "tensor/dtype.h"
#include "test_support.h"

#define FD_H 1e-3
#define ATOL 2e-4
#define RTOL 1e-3
#define MAX_P 8
#define MAX_B 8

static const lamp_exec TRAIN = {.device = LAMP_CPU, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .training = 1, .grad_dtype = LAMP_F32};
static const lamp_exec EVAL = {.device = LAMP_CPU, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .training = 0, .grad_dtype = LAMP_F32};

/* ---- the unit under test: a layer bound to its own fp32 parameters and buffers -------------- */

typedef struct unit {
  lamp_layer *layer;
  size_t np, nb;
  lamp_tensor *w[MAX_P], *g[MAX_P], *buf[MAX_B];
  lamp_tensor *x, *y, *c, *dx;
  const lamp_exec *exec;
} unit;

static void unit_bind(unit *u, lamp_layer *layer, lamp_rng *r) {
  u->layer = layer;
  u->np = layer->ops->param_count(layer);
  u->nb = lamp_layer_buffer_count(layer);
  assert_true(u->np <= MAX_P && u->nb <= MAX_B);
  for (size_t i = 0; i < u->np; i++) {
    lamp_param_decl d;
    char name[96];
    OK(layer->ops->param_decl(layer, i, &d, name, sizeof name));
    u->w[i] = new_tensor(LAMP_F32, d.ndim, d.shape);
    u->g[i] = new_tensor(LAMP_F32, d.ndim, d.shape);
    fill_uniform(u->w[i], r, -1.0, 1.0);
    if (d.keep_f32) /* norm weights: keep them away from 0 so every channel matters */
      for (size_t k = 0; k < lamp_tensor_numel(u->w[i]); k++) fp(u->w[i])[k] += fp(u->w[i])[k] >= 0 ? 0.5f : -0.5f;
    OK(layer->ops->bind(layer, i, u->w[i], u->g[i]));
  }
  for (size_t i = 0; i < u->nb; i++) {
    lamp_buffer_decl d;
    char name[96];
    OK(layer->ops->buffer_decl(layer, i, &d, name, sizeof name));
    u->buf[i] = new_tensor(LAMP_F32, d.ndim, d.shape);
    if (d.init == LAMP_INIT_ONES)
      for (size_t k = 0; k < lamp_tensor_numel(u->buf[i]); k++) fp(u->buf[i])[k] = 1.0f;
    OK(layer->ops->bind_buffer(layer, i, u->buf[i]));
  }
}

static void unit_setup(unit *u, lamp_layer *layer, lamp_tensor *x, const lamp_exec *exec, lamp_rng *r) {
  memset(u, 0, sizeof *u);
  unit_bind(u, layer, r);
  u->x = x;
  u->exec = exec;
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  OK(layer->ops->output_shape(layer, x->ndim, x->shape, &nd, shape));
  u->y = new_tensor(LAMP_F32, nd, shape);
  u->c = new_tensor(LAMP_F32, nd, shape);
  fill_uniform(u->c, r, -1.0, 1.0);
  u->dx = new_tensor(LAMP_F32, x->ndim, x->shape);
}

static void unit_teardown(unit *u) {
  for (size_t i = 0; i < u->np; i++) {
    OK(u->layer->ops->bind(u->layer, i, NULL, NULL));
    lamp_tensor_release(u->w[i]);
    lamp_tensor_release(u->g[i]);
  }
  for (size_t i = 0; i < u->nb; i++) {
    OK(u->layer->ops->bind_buffer(u->layer, i, NULL));
    lamp_tensor_release(u->buf[i]);
  }
  lamp_layer_release(u->layer);
  lamp_tensor_release(u->x);
  lamp_tensor_release(u->y);
  lamp_tensor_release(u->c);
  lamp_tensor_release(u->dx);
}

/* ---- references in double ------------------------------------------------------------------ */

typedef struct dtensor {
  int64_t n, c, h, w;
  double *v;
} dtensor;

static dtensor dt_new(int64_t n, int64_t c, int64_t h, int64_t w) {
  dtensor t = {n, c, h, w, calloc((size_t)(n * c * h * w), sizeof(double))};
  assert_non_null(t.v);
  return t;
}

static dtensor dt_from(const lamp_tensor *x) {
  int64_t h = x->ndim > 2 ? x->shape[2] : 1, w = x->ndim > 3 ? x->shape[3] : 1;
  dtensor t = dt_new(x->shape[0], x->shape[1], h, w);
  for (size_t i = 0; i < lamp_tensor_numel(x); i++) t.v[i] = fp(x)[i];
  return t;
}

static double *dt_at(const dtensor *t, int64_t n, int64_t c, int64_t y, int64_t x) {
  return &t->v[((n * t->c + c) * t->h + y) * t->w + x];
}

typedef struct conv_ref {
  int64_t out, k, stride, pad, dil, groups;
} conv_ref;

static dtensor ref_conv(const dtensor *x, const float *w, const float *b, const conv_ref *o) {
  int64_t oh = (x->h + 2 * o->pad - o->dil * (o->k - 1) - 1) / o->stride + 1;
  int64_t ow = (x->w + 2 * o->pad - o->dil * (o->k - 1) - 1) / o->stride + 1;
  int64_t cin_g = x->c / o->groups, cout_g = o->out / o->groups;
  dtensor y = dt_new(x->n, o->out, oh, ow);
  for (int64_t n = 0; n < x->n; n++)
    for (int64_t co = 0; co < o->out; co++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double s = b ? b[co] : 0.0;
          int64_t g = co / cout_g;
          for (int64_t ci = 0; ci < cin_g; ci++)
            for (int64_t a = 0; a < o->k; a++)
              for (int64_t e = 0; e < o->k; e++) {
                int64_t yy = i * o->stride - o->pad + a * o->dil, xx = j * o->stride - o->pad + e * o->dil;
                if (yy < 0 || yy >= x->h || xx < 0 || xx >= x->w) continue;
                s += (double)w[((co * cin_g + ci) * o->k + a) * o->k + e] * *dt_at(x, n, g * cin_g + ci, yy, xx);
              }
          *dt_at(&y, n, co, i, j) = s;
        }
  return y;
}

/* Training (batch statistics, biased variance) when rm == NULL, else evaluation. */
static dtensor ref_bn(const dtensor *x, const float *w, const float *b, const float *rm, const float *rv, double eps) {
  dtensor y = dt_new(x->n, x->c, x->h, x->w);
  int64_t hw = x->h * x->w, m = x->n * hw;
  for (int64_t c = 0; c < x->c; c++) {
    double mean = 0, var = 0;
    if (rm == NULL) {
      for (int64_t n = 0; n < x->n; n++)
        for (int64_t p = 0; p < hw; p++) mean += x->v[(n * x->c + c) * hw + p];
      mean /= (double)m;
      for (int64_t n = 0; n < x->n; n++)
        for (int64_t p = 0; p < hw; p++) var += pow(x->v[(n * x->c + c) * hw + p] - mean, 2);
      var /= (double)m;
    } else {
      mean = rm[c];
      var = rv[c];
    }
    for (int64_t n = 0; n < x->n; n++)
      for (int64_t p = 0; p < hw; p++) {
        size_t i = (size_t)((n * x->c + c) * hw + p);
        y.v[i] = (x->v[i] - mean) / sqrt(var + eps) * (w ? w[c] : 1.0) + (b ? b[c] : 0.0);
      }
  }
  return y;
}

static dtensor ref_pool(const dtensor *x, int max, int64_t k, int64_t s, int64_t pad) {
  int64_t oh = (x->h + 2 * pad - k) / s + 1, ow = (x->w + 2 * pad - k) / s + 1;
  dtensor y = dt_new(x->n, x->c, oh, ow);
  for (int64_t n = 0; n < x->n; n++)
    for (int64_t c = 0; c < x->c; c++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double acc = max ? -INFINITY : 0.0;
          for (int64_t a = 0; a < k; a++)
            for (int64_t e = 0; e < k; e++) {
              int64_t yy = i * s - pad + a, xx = j * s - pad + e;
              if (yy < 0 || yy >= x->h || xx < 0 || xx >= x->w) continue;
              double v = *dt_at(x, n, c, yy, xx);
              acc = max ? fmax(acc, v) : acc + v;
            }
          *dt_at(&y, n, c, i, j) = max ? acc : acc / (double)(k * k);
        }
  return y;
}

static dtensor ref_global_avg(const dtensor *x) {
  dtensor y = dt_new(x->n, x->c, 1, 1);
  for (int64_t i = 0; i < x->n * x->c; i++) {
    double s = 0;
    for (int64_t p = 0; p < x->h * x->w; p++) s += x->v[i * x->h * x->w + p];
    y.v[i] = s / (double)(x->h * x->w);
  }
  return y;
}

static void dt_add(dtensor *y, const dtensor *x) {
  for (int64_t i = 0; i < y->n * y->c * y->h * y->w; i++) y->v[i] += x->v[i];
}

static double dt_dot(const dtensor *y, const lamp_tensor *c) {
  double s = 0;
  for (size_t i = 0; i < lamp_tensor_numel(c); i++) s += y->v[i] * fp(c)[i];
  return s;
}

/* ---- the check --------------------------------------------------------------------------- */

/* The reference output for the unit's current x and parameters (the caller frees .v). */
typedef dtensor (*ref_fn)(const unit *u, const void *ctx);

static double ref_objective(const unit *u, ref_fn ref, const void *ctx) {
  dtensor y = ref(u, ctx);
  double s = dt_dot(&y, u->c);
  free(y.v);
  return s;
}

static double numeric(unit *u, ref_fn ref, const void *ctx, float *v) {
  float keep = *v;
  float up = (float)(keep + FD_H), down = (float)(keep - FD_H);
  *v = up;
  double lp = ref_objective(u, ref, ctx);
  *v = down;
  double lm = ref_objective(u, ref, ctx);
  *v = keep;
  return (lp - lm) / ((double)up - (double)down);
}

/* At most MAX_CHECKS elements, evenly spread (a large case would take minutes in full). */
#define MAX_CHECKS 160

static void compare(unit *u, ref_fn ref, const void *ctx, float *v, const float *analytic, size_t n, const char *what) {
  double biggest = 0;
  size_t step = n > MAX_CHECKS ? n / MAX_CHECKS : 1;
  for (size_t i = 0; i < n; i += step) {
    double num = numeric(u, ref, ctx, &v[i]), ana = analytic[i];
    if (fabs(num - ana) > ATOL + RTOL * fabs(ana))
      fail_msg("%s[%zu]: numeric %.7g, analytic %.7g", what, i, num, ana);
    biggest = fmax(biggest, fabs(ana));
  }
  if (n > 0 && biggest < 1e-3) fail_msg("%s: every gradient is (nearly) zero", what);
}

static float *copy_of(const lamp_tensor *t) {
  float *c = malloc(lamp_tensor_nbytes(t));
  memcpy(c, fp(t), lamp_tensor_nbytes(t));
  return c;
}

/* Analytic gradients by both protocols (bit-identical), then all of them against numeric ones. */
static void check_unit(unit *u, ref_fn ref, const void *ctx) {
  lamp_layer *l = u->layer;
  const lamp_exec *ex = u->exec;
  /* forward against the reference */
  dtensor want = ref(u, ctx);
  OK(l->ops->forward(l, ex, u->x, u->y));
  for (size_t i = 0; i < lamp_tensor_numel(u->y); i++)
    if (fabs(fp(u->y)[i] - want.v[i]) > 1e-5 + 1e-5 * fabs(want.v[i]))
      fail_msg("y[%zu]: got %.8g, want %.8g", i, fp(u->y)[i], want.v[i]);
  free(want.v);
  /* protocol 1: backward_input, then accumulate_grads (fresh: overwrite) */
  lamp_exec fresh = *ex;
  fresh.overwrite_grads = 1;
  for (size_t i = 0; i < u->np; i++) fill_uniform(u->g[i], &(lamp_rng){{1, 2, 3, 4}}, 5, 6); /* must be overwritten */
  OK(l->ops->backward_input(l, &fresh, u->x, u->y, u->c, u->dx));
  if (l->ops->accumulate_grads != NULL) OK(l->ops->accumulate_grads(l, &fresh, u->x, u->c));
  float *dx = copy_of(u->dx), *g[MAX_P];
  for (size_t i = 0; i < u->np; i++) g[i] = copy_of(u->g[i]);
  /* protocol 2: the combined walk, accumulating on top: exactly twice the gradients */
  if (l->ops->backward != NULL) {
    memset(fp(u->dx), 0, lamp_tensor_nbytes(u->dx));
    OK(l->ops->backward(l, ex, u->x, u->y, u->c, u->dx, 0));
    for (size_t k = 0; k < lamp_tensor_numel(u->dx); k++) assert_true(fp(u->dx)[k] == dx[k]);
    for (size_t i = 0; i < u->np; i++)
      for (size_t k = 0; k < lamp_tensor_numel(u->g[i]); k++) assert_true(fp(u->g[i])[k] == 2 * g[i][k]);
  }
  compare(u, ref, ctx, fp(u->x), dx, lamp_tensor_numel(u->x), "dx");
  for (size_t i = 0; i < u->np; i++) {
    lamp_param_decl d;
    char name[96];
    OK(l->ops->param_decl(l, i, &d, name, sizeof name));
    compare(u, ref, ctx, fp(u->w[i]), g[i], lamp_tensor_numel(u->w[i]), d.name);
    free(g[i]);
  }
  free(dx);
}

static lamp_tensor *input(lamp_rng *r, int64_t n, int64_t c, int64_t h, int64_t w) {
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){n, c, h, w});
  fill_uniform(x, r, -1.0, 1.0);
  return x;
}

/* ---- Conv2d ------------------------------------------------------------------------------- */

static dtensor conv_reference(const unit *u, const void *ctx) {
  const conv_ref *o = ctx;
  dtensor x = dt_from(u->x);
  dtensor y = ref_conv(&x, fp(u->w[0]), u->np > 1 ? fp(u->w[1]) : NULL, o);
  free(x.v);
  return y;
}

static void conv_case(int64_t n, int64_t cin, int64_t h, int64_t w, conv_ref o, int bias) {
  lamp_rng r;
  lamp_rng_seed(&r, (uint64_t)(17 + o.k * 3 + o.stride * 5 + o.pad * 7 + o.dil * 11 + o.groups * 13 + bias));
  lamp_layer *l;
  lamp_conv2d_options opt = {.stride = o.stride, .padding = o.pad, .dilation = o.dil, .groups = o.groups, .no_bias = !bias};
  OK(lamp_conv2d_new(&l, cin, o.out, o.k, &opt));
  unit u;
  unit_setup(&u, l, input(&r, n, cin, h, w), &TRAIN, &r);
  check_unit(&u, conv_reference, &o);
  unit_teardown(&u);
}

static void test_conv_basic(void **state) {
  (void)state;
  conv_case(2, 3, 5, 6, (conv_ref){.out = 4, .k = 3, .stride = 1, .pad = 0, .dil = 1, .groups = 1}, 1);
}

static void test_conv_padding_no_bias(void **state) {
  (void)state;
  conv_case(3, 2, 5, 5, (conv_ref){.out = 3, .k = 3, .stride = 1, .pad = 1, .dil = 1, .groups = 1}, 0);
}

static void test_conv_stride2(void **state) {
  (void)state;
  conv_case(2, 2, 7, 6, (conv_ref){.out = 3, .k = 3, .stride = 2, .pad = 1, .dil = 1, .groups = 1}, 1);
}

static void test_conv_dilation2(void **state) {
  (void)state;
  conv_case(2, 2, 7, 7, (conv_ref){.out = 2, .k = 3, .stride = 1, .pad = 2, .dil = 2, .groups = 1}, 1);
  conv_case(2, 2, 8, 7, (conv_ref){.out = 2, .k = 3, .stride = 1, .pad = 1, .dil = 2, .groups = 1}, 1);
}

static void test_conv_groups2(void **state) {
  (void)state;
  conv_case(2, 4, 5, 5, (conv_ref){.out = 6, .k = 3, .stride = 1, .pad = 1, .dil = 1, .groups = 2}, 1);
}

static void test_conv_depthwise(void **state) {
  (void)state;
  conv_case(2, 3, 6, 5, (conv_ref){.out = 3, .k = 3, .stride = 2, .pad = 1, .dil = 1, .groups = 3}, 1);
}

static void test_conv_pointwise_and_even_kernel(void **state) {
  (void)state;
  conv_case(3, 4, 4, 5, (conv_ref){.out = 2, .k = 1, .stride = 1, .pad = 0, .dil = 1, .groups = 1}, 1);
  conv_case(2, 2, 6, 6, (conv_ref){.out = 3, .k = 2, .stride = 2, .pad = 1, .dil = 1, .groups = 1}, 0);
}

/* Many images: several chunks and both workers' partial gradients take part. */
static void test_conv_many_images(void **state) {
  (void)state;
  conv_case(40, 4, 6, 6, (conv_ref){.out = 4, .k = 3, .stride = 1, .pad = 1, .dil = 1, .groups = 1}, 1);
}

static void test_conv_errors(void **state) {
  (void)state;
  lamp_layer *l;
  assert_int_equal(lamp_conv2d_new(&l, 3, 4, 3, &(lamp_conv2d_options){.groups = 2}), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Conv2d(3 -> 4, 3x3): groups 2 must divide both channel counts");
  OK(lamp_conv2d_new(&l, 3, 4, 3, NULL));
  int nd;
  int64_t out[4];
  assert_int_equal(l->ops->output_shape(l, 4, (int64_t[]){2, 1, 28, 28}, &nd, out), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Conv2d(3 -> 4, 3x3): input [2, 1, 28, 28] has 1 channels, expected 3");
  assert_int_equal(l->ops->output_shape(l, 4, (int64_t[]){2, 3, 2, 28}, &nd, out), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      "Conv2d(3 -> 4, 3x3): input [2, 3, 2, 28] is smaller than the kernel (3 with dilation 1) after padding 0");
  assert_int_equal(l->ops->output_shape(l, 2, (int64_t[]){2, 3}, &nd, out), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Conv2d(3 -> 4, 3x3): input [2, 3] must be [batch, channels, height, width]");
  char buf[128];
  l->ops->describe(l, buf, sizeof buf);
  assert_string_equal(buf, "Conv2d(3 -> 4, 3x3)");
  lamp_layer_release(l);
  OK(lamp_conv2d_new(&l, 4, 8, 3, &(lamp_conv2d_options){.stride = 2, .padding = 1, .groups = 2, .no_bias = 1}));
  l->ops->describe(l, buf, sizeof buf);
  assert_string_equal(buf, "Conv2d(4 -> 8, 3x3, stride 2, padding 1, groups 2, no bias)");
  lamp_layer_release(l);
}

/* ---- BatchNorm2d --------------------------------------------------------------------------- */

static dtensor bn_reference(const unit *u, const void *ctx) {
  const int *eval = ctx;
  dtensor x = dt_from(u->x);
  dtensor y = ref_bn(&x, fp(u->w[0]), fp(u->w[1]), *eval ? fp(u->buf[0]) : NULL, *eval ? fp(u->buf[1]) : NULL, 1e-5);
  free(x.v);
  return y;
}

static void test_batchnorm_train_grad(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 61);
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, 3, NULL));
  unit u;
  unit_setup(&u, l, input(&r, 4, 3, 3, 5), &TRAIN, &r);
  int eval = 0;
  check_unit(&u, bn_reference, &eval);
  unit_teardown(&u);
}

static void test_batchnorm_eval_grad(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 62);
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, 3, NULL));
  unit u;
  unit_setup(&u, l, input(&r, 3, 3, 4, 4), &EVAL, &r);
  fill_uniform(u.buf[0], &r, -0.5, 0.5);
  fill_uniform(u.buf[1], &r, 0.5, 2.0);
  int eval = 1;
  check_unit(&u, bn_reference, &eval);
  unit_teardown(&u);
}

/* PyTorch's update: running = (1 - m) running + m batch, with the UNBIASED batch variance. */
static void test_batchnorm_running_stats(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 63);
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, 2, &(lamp_batchnorm_options){.momentum = 0.25}));
  unit u;
  unit_setup(&u, l, input(&r, 3, 2, 2, 3), &TRAIN, &r);
  for (int step = 1; step <= 2; step++) {
    double want_m[2], want_v[2];
    for (int c = 0; c < 2; c++) {
      double s = 0, ss = 0;
      for (int n = 0; n < 3; n++)
        for (int p = 0; p < 6; p++) s += fp(u.x)[(n * 2 + c) * 6 + p];
      double mean = s / 18;
      for (int n = 0; n < 3; n++)
        for (int p = 0; p < 6; p++) ss += pow(fp(u.x)[(n * 2 + c) * 6 + p] - mean, 2);
      want_m[c] = 0.75 * fp(u.buf[0])[c] + 0.25 * mean;
      want_v[c] = 0.75 * fp(u.buf[1])[c] + 0.25 * ss / 17;
    }
    OK(l->ops->forward(l, &TRAIN, u.x, u.y));
    for (int c = 0; c < 2; c++) {
      assert_near(fp(u.buf[0])[c], want_m[c], 1e-6);
      assert_near(fp(u.buf[1])[c], want_v[c], 1e-6);
    }
    assert_near(fp(u.buf[2])[0], step, 0);
  }
  /* evaluation reads them and leaves them alone */
  float m0 = fp(u.buf[0])[0];
  OK(l->ops->forward(l, &EVAL, u.x, u.y));
  assert_true(fp(u.buf[0])[0] == m0);
  assert_near(fp(u.buf[2])[0], 2, 0);
  unit_teardown(&u);
}

static void test_batchnorm_decls_and_errors(void **state) {
  (void)state;
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, 4, NULL));
  lamp_param_decl d;
  char name[96];
  for (size_t i = 0; i < 2; i++) {
    OK(l->ops->param_decl(l, i, &d, name, sizeof name));
    assert_int_equal(d.keep_f32, 1);
    assert_int_equal(d.decay, 0);
    assert_int_equal(d.init, i == 0 ? LAMP_INIT_ONES : LAMP_INIT_ZEROS);
  }
  assert_int_equal(lamp_layer_buffer_count(l), 3);
  lamp_buffer_decl b;
  OK(l->ops->buffer_decl(l, 1, &b, name, sizeof name));
  assert_string_equal(b.name, "running_var");
  assert_int_equal(b.init, LAMP_INIT_ONES);
  int nd;
  int64_t out[4];
  assert_int_equal(l->ops->output_shape(l, 4, (int64_t[]){2, 3, 5, 5}, &nd, out), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "BatchNorm2d(4): input [2, 3, 5, 5] has 3 channels, expected 4");
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){1, 4, 1, 1}), *y = new_tensor(LAMP_F32, 4, (int64_t[]){1, 4, 1, 1});
  assert_int_equal(l->ops->forward(l, &TRAIN, x, y), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "BatchNorm2d(4): parameters are not bound (build a model first)");
  lamp_rng r;
  lamp_rng_seed(&r, 1);
  unit u;
  unit_setup(&u, l, x, &TRAIN, &r);
  assert_int_equal(l->ops->forward(l, &TRAIN, x, y), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "BatchNorm2d(4): training needs more than one value per channel, got 1");
  OK(l->ops->forward(l, &EVAL, x, y)); /* evaluation is fine with one value */
  lamp_tensor_release(y);
  unit_teardown(&u);
  assert_int_equal(lamp_batchnorm2d_new(&l, 0, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "BatchNorm2d(0): the channel count must be positive");
}

/* ---- pooling, Flatten ---------------------------------------------------------------------- */

typedef struct pool_ref {
  int max;
  int64_t k, s, pad, global;
} pool_ref;

static dtensor pool_reference(const unit *u, const void *ctx) {
  const pool_ref *o = ctx;
  dtensor x = dt_from(u->x);
  dtensor y = o->global ? ref_global_avg(&x) : ref_pool(&x, o->max, o->k, o->s, o->pad);
  free(x.v);
  return y;
}

/* Distinct values 0.01 apart (> 2h), shuffled: no window has a tie a perturbation could flip. */
static lamp_tensor *distinct_input(lamp_rng *r, int64_t n, int64_t c, int64_t h, int64_t w) {
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){n, c, h, w});
  size_t m = lamp_tensor_numel(x);
  for (size_t i = 0; i < m; i++) fp(x)[i] = (float)(0.01 * (double)i - 0.005 * (double)m);
  for (size_t i = m; i-- > 1;) {
    size_t j = (size_t)lamp_rng_below(r, i + 1);
    float t = fp(x)[i];
    fp(x)[i] = fp(x)[j];
    fp(x)[j] = t;
  }
  return x;
}

static void pool_case(lamp_layer *l, pool_ref o, int64_t h, int64_t w) {
  lamp_rng r;
  lamp_rng_seed(&r, (uint64_t)(71 + o.k + 10 * o.s + 100 * o.pad + o.max));
  unit u;
  unit_setup(&u, l, distinct_input(&r, 2, 3, h, w), &TRAIN, &r);
  check_unit(&u, pool_reference, &o);
  unit_teardown(&u);
}

static void test_maxpool_grad(void **state) {
  (void)state;
  lamp_layer *l;
  OK(lamp_maxpool2d_new(&l, 2, 0, 0));
  pool_case(l, (pool_ref){.max = 1, .k = 2, .s = 2}, 6, 5);
  OK(lamp_maxpool2d_new(&l, 3, 2, 1));
  pool_case(l, (pool_ref){.max = 1, .k = 3, .s = 2, .pad = 1}, 7, 6);
  OK(lamp_maxpool2d_new(&l, 3, 1, 1));
  pool_case(l, (pool_ref){.max = 1, .k = 3, .s = 1, .pad = 1}, 4, 5);
}

static void test_avgpool_grad(void **state) {
  (void)state;
  lamp_layer *l;
  OK(lamp_avgpool2d_new(&l, 2, 0, 0));
  pool_case(l, (pool_ref){.k = 2, .s = 2}, 6, 4);
  OK(lamp_avgpool2d_new(&l, 3, 2, 1));
  pool_case(l, (pool_ref){.k = 3, .s = 2, .pad = 1}, 7, 6);
}

static void test_global_avgpool_grad(void **state) {
  (void)state;
  lamp_layer *l;
  OK(lamp_global_avgpool_new(&l));
  int nd;
  int64_t out[4];
  OK(l->ops->output_shape(l, 4, (int64_t[]){5, 7, 3, 4}, &nd, out));
  assert_int_equal(nd, 4);
  assert_true(out[0] == 5 && out[1] == 7 && out[2] == 1 && out[3] == 1);
  pool_case(l, (pool_ref){.global = 1}, 3, 4);
}

/*
** 16-bit tensors go through the fp32 staging a few planes at a time in each task (32 KiB a side):
** 600 planes of 24x24 take 14 a run, and every task ends on a shorter run; planes of 96x96 are
** larger than a run, so they go one at a time, and 3 of them leave the tasks uneven. Forward and
** backward must give, bit for bit, what the fp32 layer gives on the widened values, rounded once.
*/
static void staged_pool_case(lamp_layer *l, lamp_dtype dt, const int64_t shape[4]) {
  int64_t out[4];
  int nd;
  OK(l->ops->output_shape(l, 4, shape, &nd, out));
  lamp_tensor *x16 = new_tensor(dt, 4, shape), *x32 = new_tensor(LAMP_F32, 4, shape);
  lamp_tensor *y16 = new_tensor(dt, nd, out), *y32 = new_tensor(LAMP_F32, nd, out);
  lamp_tensor *dy16 = new_tensor(dt, nd, out), *dy32 = new_tensor(LAMP_F32, nd, out);
  lamp_tensor *dx16 = new_tensor(dt, 4, shape), *dx32 = new_tensor(LAMP_F32, 4, shape);
  lamp_rng r;
  lamp_rng_seed(&r, 5);
  for (size_t i = 0; i < lamp_tensor_numel(x16); i++) {
    store_f32_as(dt, lamp_tensor_data(x16), i, (float)lamp_rng_uniform(&r) * 4.0f - 2.0f);
    fp(x32)[i] = load_as_f32(dt, lamp_tensor_data(x16), i);
  }
  for (size_t i = 0; i < lamp_tensor_numel(dy16); i++) {
    store_f32_as(dt, lamp_tensor_data(dy16), i, (float)lamp_rng_uniform(&r) - 0.5f);
    fp(dy32)[i] = load_as_f32(dt, lamp_tensor_data(dy16), i);
  }
  lamp_exec e16 = TRAIN;
  e16.activation_dtype = e16.compute_dtype = dt;
  const lamp_tensor *pairs[2][2] = {{y16, y32}, {dx16, dx32}};
  OK(l->ops->forward(l, &TRAIN, x32, y32)); /* each backward right after its forward: MaxPool keeps the argmax */
  OK(l->ops->backward_input(l, &TRAIN, x32, y32, dy32, dx32));
  OK(l->ops->forward(l, &e16, x16, y16));
  OK(l->ops->backward_input(l, &e16, x16, y16, dy16, dx16));
  for (int k = 0; k < 2; k++) {
    const lamp_tensor *got = pairs[k][0], *ref = pairs[k][1];
    for (size_t i = 0; i < lamp_tensor_numel(got); i++) {
      uint16_t want = dt == LAMP_F16 ? lamp_f32_to_f16(fp(ref)[i]) : lamp_f32_to_bf16(fp(ref)[i]);
      if (((const uint16_t *)lamp_tensor_data(got))[i] != want)
        fail_msg("%s %s: %s element %zu differs from the fp32 layer's", l->ops->type, lamp_dtype_name(dt),
                 k == 0 ? "output" : "input gradient", i);
    }
  }
  lamp_tensor *ts[] = {x16, x32, y16, y32, dy16, dy32, dx16, dx32};
  for (size_t i = 0; i < 8; i++) lamp_tensor_release(ts[i]);
}

static void test_pool_16_bit_staged_in_groups(void **state) {
  (void)state;
  lamp_layer *ls[3];
  OK(lamp_maxpool2d_new(&ls[0], 2, 0, 0));
  OK(lamp_avgpool2d_new(&ls[1], 3, 2, 1));
  OK(lamp_global_avgpool_new(&ls[2]));
  const int64_t many[4] = {2, 300, 24, 24}, large[4] = {1, 3, 96, 96};
  for (size_t i = 0; i < 3; i++) {
    staged_pool_case(ls[i], LAMP_BF16, many);
    staged_pool_case(ls[i], LAMP_F16, many);
    staged_pool_case(ls[i], LAMP_BF16, large);
    lamp_layer_release(ls[i]);
  }
}

static void test_pool_errors(void **state) {
  (void)state;
  lamp_layer *l;
  assert_int_equal(lamp_maxpool2d_new(&l, 2, 0, 2), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "MaxPool2d(2): padding 2 must be between 0 and half the kernel");
  OK(lamp_maxpool2d_new(&l, 2, 0, 0));
  int nd;
  int64_t out[4];
  assert_int_equal(l->ops->output_shape(l, 2, (int64_t[]){4, 10}, &nd, out), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "MaxPool2d(2, stride 2): input [4, 10] must be [batch, channels, height, width]");
  lamp_layer_release(l);
}

static dtensor identity_reference(const unit *u, const void *ctx) {
  (void)ctx;
  return dt_from(u->x);
}

static void test_flatten(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 81);
  lamp_layer *l;
  OK(lamp_flatten_new(&l));
  unit u;
  unit_setup(&u, l, input(&r, 3, 2, 2, 2), &TRAIN, &r);
  assert_int_equal(u.y->ndim, 2);
  assert_int_equal(u.y->shape[1], 8);
  check_unit(&u, identity_reference, NULL);
  unit_teardown(&u);
}

/* ---- Dropout ------------------------------------------------------------------------------- */

static void test_dropout(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 91);
  lamp_layer *l;
  OK(lamp_dropout_new(&l, 0.25));
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){50, 40});
  lamp_tensor *y = new_tensor(LAMP_F32, 2, (int64_t[]){50, 40}), *y2 = new_tensor(LAMP_F32, 2, (int64_t[]){50, 40});
  lamp_tensor *dx = new_tensor(LAMP_F32, 2, (int64_t[]){50, 40});
  fill_uniform(x, &r, 0.5, 1.0);
  uint64_t streams = 0;
  lamp_exec ex = TRAIN;
  ex.seed = 7;
  ex.forward_index = 3;
  ex.rng_streams = &streams;
  OK(l->ops->forward(l, &ex, x, y));
  assert_int_equal(streams, 1);
  size_t dropped = 0;
  for (size_t i = 0; i < 2000; i++) {
    if (fp(y)[i] == 0.0f) dropped++;
    else assert_true(fp(y)[i] == fp(x)[i] * (float)(1.0 / 0.75));
  }
  assert_true(dropped > 400 && dropped < 600); /* 500 expected, sd ~19 */
  /* backward applies the same mask and scale */
  OK(l->ops->backward_input(l, &ex, x, y, x, dx));
  for (size_t i = 0; i < 2000; i++) assert_true(fp(dx)[i] == fp(y)[i]);
  /* the same (seed, forward, stream) reproduces the mask; another forward index changes it */
  streams = 0;
  OK(l->ops->forward(l, &ex, x, y2));
  assert_memory_equal(fp(y), fp(y2), 2000 * sizeof(float));
  streams = 0;
  ex.forward_index = 4;
  OK(l->ops->forward(l, &ex, x, y2));
  assert_true(memcmp(fp(y), fp(y2), 2000 * sizeof(float)) != 0);
  /* evaluation: the identity */
  OK(l->ops->forward(l, &EVAL, x, y2));
  assert_memory_equal(fp(x), fp(y2), 2000 * sizeof(float));
  OK(l->ops->backward_input(l, &EVAL, x, y2, y, dx));
  assert_memory_equal(fp(y), fp(dx), 2000 * sizeof(float));
  lamp_tensor *ts[] = {x, y, y2, dx};
  for (int i = 0; i < 4; i++) lamp_tensor_release(ts[i]);
  lamp_layer_release(l);
  assert_int_equal(lamp_dropout_new(&l, 1.0), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Dropout: probability 1 must be in [0, 1)");
}

/* ---- Residual ------------------------------------------------------------------------------- */

/* block = Sequential{Conv(c -> c, 3x3, stride s, pad 1), BatchNorm}; projection Conv 1x1 stride s. */
typedef struct res_ref {
  int64_t c, out, stride;
  int projection;
} res_ref;

static dtensor residual_reference(const unit *u, const void *ctx) {
  const res_ref *o = ctx;
  dtensor x = dt_from(u->x);
  conv_ref c1 = {.out = o->out, .k = 3, .stride = o->stride, .pad = 1, .dil = 1, .groups = 1};
  dtensor h = ref_conv(&x, fp(u->w[0]), NULL, &c1);
  dtensor y = ref_bn(&h, fp(u->w[1]), fp(u->w[2]), NULL, NULL, 1e-5);
  if (o->projection) {
    conv_ref c2 = {.out = o->out, .k = 1, .stride = o->stride, .pad = 0, .dil = 1, .groups = 1};
    dtensor p = ref_conv(&x, fp(u->w[3]), fp(u->w[4]), &c2);
    dt_add(&y, &p);
    free(p.v);
  } else {
    dt_add(&y, &x);
  }
  free(x.v);
  free(h.v);
  return y;
}

static void residual_case(res_ref o) {
  lamp_rng r;
  lamp_rng_seed(&r, 101 + (uint64_t)o.projection);
  lamp_layer *conv, *bn, *proj = NULL, *res;
  OK(lamp_conv2d_new(&conv, o.c, o.out, 3, &(lamp_conv2d_options){.stride = o.stride, .padding = 1, .no_bias = 1}));
  OK(lamp_batchnorm2d_new(&bn, o.out, NULL));
  lamp_layer *block = seq(2, (lamp_layer *[]){conv, bn});
  if (o.projection) OK(lamp_conv2d_new(&proj, o.c, o.out, 1, &(lamp_conv2d_options){.stride = o.stride}));
  OK(lamp_residual_new(&res, block, proj));
  lamp_layer_release(block);
  lamp_layer_release(proj);
  unit u;
  unit_setup(&u, res, input(&r, 3, o.c, 5, 6), &TRAIN, &r);
  assert_int_equal(u.np, o.projection ? 5 : 3);
  lamp_param_decl d;
  char name[96];
  OK(res->ops->param_decl(res, 0, &d, name, sizeof name));
  assert_string_equal(d.name, "block.0.weight");
  if (o.projection) {
    OK(res->ops->param_decl(res, 4, &d, name, sizeof name));
    assert_string_equal(d.name, "projection.bias");
  }
  lamp_buffer_decl b;
  OK(res->ops->buffer_decl(res, 0, &b, name, sizeof name));
  assert_string_equal(b.name, "block.1.running_mean");
  check_unit(&u, residual_reference, &o);
  unit_teardown(&u);
}

static void test_residual_identity_grad(void **state) {
  (void)state;
  residual_case((res_ref){.c = 3, .out = 3, .stride = 1});
}

static void test_residual_projection_grad(void **state) {
  (void)state;
  residual_case((res_ref){.c = 2, .out = 4, .stride = 2, .projection = 1});
}

/* The combined backward announces the projection's parameters first, then the block's. */
static size_t announced[16], n_announced;
static void record_ready(void *ctx, size_t first) {
  (void)ctx;
  announced[n_announced++] = first;
}

static void test_residual_grads_ready_order(void **state) {
  (void)state;
  lamp_layer *conv, *bn, *proj, *res;
  OK(lamp_conv2d_new(&conv, 2, 2, 3, &(lamp_conv2d_options){.padding = 1}));
  OK(lamp_batchnorm2d_new(&bn, 2, NULL));
  lamp_layer *block = seq(2, (lamp_layer *[]){conv, bn});
  OK(lamp_conv2d_new(&proj, 2, 2, 1, NULL));
  OK(lamp_residual_new(&res, block, proj));
  lamp_layer_release(block);
  lamp_layer_release(proj);
  lamp_layer *net = seq(2, (lamp_layer *[]){res, relu()});
  lamp_model *m;
  OK(lamp_model_new(&m, net));
  lamp_layer_release(net);
  lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .seed = 3, .grad_dtype = LAMP_F32};
  OK(lamp_model_build(m, &cfg));
  assert_int_equal(lamp_model_n_params(m), 6);
  assert_string_equal(lamp_model_param_at(m, 4)->name, "0.projection.weight");
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){2, 2, 4, 4}), *dy = new_tensor(LAMP_F32, 4, (int64_t[]){2, 2, 4, 4});
  lamp_rng r;
  lamp_rng_seed(&r, 5);
  fill_uniform(x, &r, -1, 1);
  fill_uniform(dy, &r, -1, 1);
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 1, &y));
  n_announced = 0;
  OK(lamp_model_backward_ex(m, dy, 1, record_ready, NULL));
  /* projection (4), BatchNorm (2), Conv (0), then the model's final 0 */
  assert_int_equal(n_announced, 4);
  assert_int_equal(announced[0], 4);
  assert_int_equal(announced[1], 2);
  assert_int_equal(announced[2], 0);
  assert_int_equal(announced[3], 0);
  lamp_tensor_release(x);
  lamp_tensor_release(dy);
  lamp_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_basic),
      cmocka_unit_test(test_conv_padding_no_bias),
      cmocka_unit_test(test_conv_stride2),
      cmocka_unit_test(test_conv_dilation2),
      cmocka_unit_test(test_conv_groups2),
      cmocka_unit_test(test_conv_depthwise),
      cmocka_unit_test(test_conv_pointwise_and_even_kernel),
      cmocka_unit_test(test_conv_many_images),
      cmocka_unit_test(test_conv_errors),
      cmocka_unit_test(test_batchnorm_train_grad),
      cmocka_unit_test(test_batchnorm_eval_grad),
      cmocka_unit_test(test_batchnorm_running_stats),
      cmocka_unit_test(test_batchnorm_decls_and_errors),
      cmocka_unit_test(test_maxpool_grad),
      cmocka_unit_test(test_avgpool_grad),
      cmocka_unit_test(test_global_avgpool_grad),
      cmocka_unit_test(test_pool_16_bit_staged_in_groups),
      cmocka_unit_test(test_pool_errors),
      cmocka_unit_test(test_flatten),
      cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_residual_identity_grad),
      cmocka_unit_test(test_residual_projection_grad),
      cmocka_unit_test(test_residual_grads_ready_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
