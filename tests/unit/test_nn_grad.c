/*
** Every layer's backward against finite differences, every forward against a naive loop in
** double: Linear (with and without bias; dx, dW, db), ReLU, Sequential (flat and nested),
** CrossEntropy, and the whole model's loss with respect to every parameter of a small MLP.
** Also the autocast paths of Linear (bf16 compute from f32 weights and inputs) against
** naive loops over bf16-rounded operands.
**
** How the finite differences are set up, and why the tolerance is what it is:
**   - Kernels run in fp32 (the layers have no double path); the scalar objective is summed in
**     double (a layer's objective is sum(c * y) with fixed random c, so dL/dy = c), so the
**     only rounding in the numeric derivative is that of the fp32 values themselves.
**   - Central differences with h = 1e-2 on inputs and parameters of magnitude <= 1. Linear
**     and ReLU are piecewise linear, so away from ReLU kinks the central difference is exact
**     up to rounding; cross-entropy is smooth with third derivatives below ~0.1 per row
**     (divided by the batch), so its truncation error h^2/6 * f''' is below 1e-6. ReLU inputs
**     are kept at least 0.05 from 0 (5h, more than any perturbation moves them), so no
**     difference straddles a kink.
**   - Rounding: a perturbed objective carries an fp32 error of a few 2^-24 times the sum of
**     the magnitudes it is made of, divided by 2h = 2e-2. For the layer objectives (~10 terms
**     c*y of size ~1) that is ~3e-5; for the loss objectives (a mean cross-entropy ~1) ~5e-6.
**     Measured worst cases: 1.9e-5 and 1.7e-6.
**   - Hence |num - ana| <= ATOL + RTOL * |ana| with ATOL = 1e-4 for layer objectives and 1e-5
**     for loss objectives (about 3x the estimate, 5x the measured worst case) and RTOL = 1e-3
**     (gradients are O(0.01..1); this absorbs the rounding of the analytic side). A wrong
**     transpose, a missing term or a factor of 2 misses this by orders of magnitude, and
**     every check also asserts that the gradients it compared are not trivially zero.
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
#include "nn/loss.h"
#include "nn/model.h"
#include "tensor/half.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define FD_H 1e-2
#define FD_ATOL_LAYER 1e-4 /* objective sum(c * y), ~10 terms of size ~1 */
#define FD_ATOL_LOSS 1e-5  /* objective a mean cross-entropy of size ~1 */
#define FD_RTOL 1e-3
#define KINK_MARGIN 0.05
#define MAX_PARAMS 16

static const lamp_exec FP32 = {.device = LAMP_CPU, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .training = 1, .grad_dtype = LAMP_F32};

/* ---- tensors ------------------------------------------------------------------------------- */

static lamp_tensor *f32_2d(int64_t rows, int64_t cols) {
  return new_tensor(LAMP_F32, 2, (int64_t[]){rows, cols});
}

/* |v| in [lo, hi] with a random sign: inputs that keep a ReLU away from its kink. */
static void fill_away_from_zero(lamp_tensor *t, lamp_rng *r, double lo, double hi) {
  fill_uniform(t, r, lo, hi);
  float *v = fp(t);
  for (size_t i = 0; i < lamp_tensor_numel(t); i++)
    if (lamp_rng_uniform(r) < 0.5) v[i] = -v[i];
}

static float bf16_round(float x) { return lamp_bf16_to_f32(lamp_f32_to_bf16(x)); }

/* ---- layers with their own fp32 parameters ------------------------------------------------ */

/* A layer bound to fp32 parameter tensors of its own (no model): the unit under test. */
typedef struct bound_layer {
  lamp_layer *layer;
  size_t n;
  lamp_tensor *w[MAX_PARAMS], *g[MAX_PARAMS];
} bound_layer;

static void bind_own(bound_layer *b, lamp_layer *layer, lamp_dtype weight_dtype, lamp_rng *r) {
  b->layer = layer;
  b->n = layer->ops->param_count(layer);
  assert_true(b->n <= MAX_PARAMS);
  for (size_t i = 0; i < b->n; i++) {
    lamp_param_decl d;
    char name[96];
    OK(layer->ops->param_decl(layer, i, &d, name, sizeof name));
    b->g[i] = new_tensor(LAMP_F32, d.ndim, d.shape);
    lamp_tensor *w32 = new_tensor(LAMP_F32, d.ndim, d.shape);
    fill_uniform(w32, r, -1.0, 1.0);
    if (weight_dtype == LAMP_F32) {
      b->w[i] = w32;
    } else { /* 16-bit storage: the same values, rounded */
      b->w[i] = new_tensor(weight_dtype, d.ndim, d.shape);
      lamp_f32_to_bf16_n(lamp_tensor_data(b->w[i]), fp(w32), lamp_tensor_numel(w32));
      lamp_tensor_release(w32);
    }
    OK(layer->ops->bind(layer, i, b->w[i], b->g[i]));
  }
}

static void unbind_own(bound_layer *b) {
  for (size_t i = 0; i < b->n; i++) {
    OK(b->layer->ops->bind(b->layer, i, NULL, NULL));
    lamp_tensor_release(b->w[i]);
    lamp_tensor_release(b->g[i]);
  }
  lamp_layer_release(b->layer);
}

static void zero_grads(bound_layer *b) {
  for (size_t i = 0; i < b->n; i++) memset(fp(b->g[i]), 0, lamp_tensor_nbytes(b->g[i]));
}

/* ---- the finite-difference harness for one layer ------------------------------------------ */

/* Objective sum(c * y): dL/dy = c. */
typedef struct fd_case {
  bound_layer p;
  lamp_tensor *x, *y, *c, *dx;
} fd_case;

static void fd_setup(fd_case *f, lamp_layer *layer, lamp_tensor *x, lamp_rng *r) {
  bind_own(&f->p, layer, LAMP_F32, r);
  f->x = x;
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  OK(layer->ops->output_shape(layer, x->ndim, x->shape, &nd, shape));
  f->y = new_tensor(LAMP_F32, nd, shape);
  f->c = new_tensor(LAMP_F32, nd, shape);
  fill_uniform(f->c, r, -1.0, 1.0);
  f->dx = new_tensor(LAMP_F32, x->ndim, x->shape);
}

static void fd_teardown(fd_case *f) {
  unbind_own(&f->p);
  lamp_tensor_release(f->x);
  lamp_tensor_release(f->y);
  lamp_tensor_release(f->c);
  lamp_tensor_release(f->dx);
}

static double fd_objective(fd_case *f) {
  OK(f->p.layer->ops->forward(f->p.layer, &FP32, f->x, f->y));
  double sum = 0.0;
  for (size_t i = 0; i < lamp_tensor_numel(f->y); i++) sum += (double)fp(f->c)[i] * fp(f->y)[i];
  return sum;
}

/* The analytic gradients, as the model drives them: forward, backward_input, accumulate. */
static void fd_analytic(fd_case *f) {
  lamp_layer *l = f->p.layer;
  zero_grads(&f->p);
  OK(l->ops->forward(l, &FP32, f->x, f->y));
  OK(l->ops->backward_input(l, &FP32, f->x, f->y, f->c, f->dx));
  if (l->ops->accumulate_grads != NULL) OK(l->ops->accumulate_grads(l, &FP32, f->x, f->c));
}

/* The derivative of objective() along *v, by the step actually taken in fp32. */
typedef double (*objective_fn)(void *ctx);

static double central_difference(objective_fn fn, void *ctx, float *v, double h) {
  float keep = *v;
  float up = keep + (float)h, down = keep - (float)h;
  *v = up;
  double lp = fn(ctx);
  *v = down;
  double lm = fn(ctx);
  *v = keep;
  return (lp - lm) / ((double)up - (double)down);
}

/* Compares n numeric derivatives with the analytic ones; returns the largest |analytic|. */
static double compare_all(objective_fn fn, void *ctx, float *v, const float *analytic, size_t n,
                          double atol, const char *what) {
  double biggest = 0.0;
  for (size_t i = 0; i < n; i++) {
    double num = central_difference(fn, ctx, &v[i], FD_H);
    double ana = analytic[i];
    double err = fabs(num - ana);
    if (err > atol + FD_RTOL * fabs(ana))
      fail_msg("%s[%zu]: numeric %.7g, analytic %.7g (error %.3g)", what, i, num, ana, err);
    if (fabs(ana) > biggest) biggest = fabs(ana);
  }
  return biggest;
}

static double fd_objective_cb(void *ctx) { return fd_objective(ctx); }

/* dx and every parameter gradient of f's layer against central differences. */
static void fd_check(fd_case *f) {
  fd_analytic(f);
  size_t nx = lamp_tensor_numel(f->x);
  float *dx = malloc(nx * sizeof *dx);
  memcpy(dx, fp(f->dx), nx * sizeof *dx);
  double big = compare_all(fd_objective_cb, f, fp(f->x), dx, nx, FD_ATOL_LAYER, "dx");
  assert_true(big > 0.05); /* not trivially zero */
  free(dx);
  for (size_t i = 0; i < f->p.n; i++) {
    lamp_param_decl d;
    char name[96];
    OK(f->p.layer->ops->param_decl(f->p.layer, i, &d, name, sizeof name));
    size_t n = lamp_tensor_numel(f->p.g[i]);
    float *g = malloc(n * sizeof *g);
    memcpy(g, fp(f->p.g[i]), n * sizeof *g);
    big = compare_all(fd_objective_cb, f, fp(f->p.w[i]), g, n, FD_ATOL_LAYER, d.name);
    assert_true(big > 0.05);
    free(g);
  }
}

/* ---- naive references ------------------------------------------------------------------- */

/* y[r, o] = sum_i x[r, i] W[o, i] (+ b[o]), in double. */
static void naive_linear(const float *x, const float *w, const float *b, size_t rows, size_t in, size_t out,
                         double *y) {
  for (size_t r = 0; r < rows; r++)
    for (size_t o = 0; o < out; o++) {
      double s = b ? b[o] : 0.0;
      for (size_t i = 0; i < in; i++) s += (double)x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

static void assert_close(const float *got, const double *want, size_t n, double atol, double rtol,
                         const char *what) {
  for (size_t i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > atol + rtol * fabs(want[i]))
      fail_msg("%s[%zu]: got %.8g, want %.8g", what, i, got[i], want[i]);
}

/* ---- Linear ----------------------------------------------------------------------------- */

static void linear_fd(int bias) {
  lamp_rng r;
  lamp_rng_seed(&r, 11 + (uint64_t)bias);
  lamp_layer *l;
  OK(lamp_linear_new(&l, 6, 4, bias));
  /* [3, 2, 3]: the trailing dimensions flatten to the 6 features */
  lamp_tensor *x = new_tensor(LAMP_F32, 3, (int64_t[]){3, 2, 3});
  fill_uniform(x, &r, -1.0, 1.0);
  fd_case f;
  fd_setup(&f, l, x, &r);
  assert_int_equal(f.y->ndim, 2);
  assert_int_equal(f.y->shape[0], 3);
  assert_int_equal(f.y->shape[1], 4);
  fd_check(&f);
  fd_teardown(&f);
}

static void test_linear_grad_bias(void **state) {
  (void)state;
  linear_fd(1);
}

static void test_linear_grad_no_bias(void **state) {
  (void)state;
  linear_fd(0);
}

static void test_linear_forward_naive(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 5);
  for (int bias = 0; bias <= 1; bias++) {
    lamp_layer *l;
    OK(lamp_linear_new(&l, 7, 5, bias));
    bound_layer b;
    bind_own(&b, l, LAMP_F32, &r);
    lamp_tensor *x = f32_2d(9, 7), *y = f32_2d(9, 5);
    fill_uniform(x, &r, -2.0, 2.0);
    OK(l->ops->forward(l, &FP32, x, y));
    double want[45];
    naive_linear(fp(x), fp(b.w[0]), bias ? fp(b.w[1]) : NULL, 9, 7, 5, want);
    /* fp32 GEMM error is below k * 2^-24 * sum|x w| ~ 7 * 6e-8 * 7 ~ 3e-6 */
    assert_close(fp(y), want, 45, 1e-5, 1e-5, "y");
    lamp_tensor_release(x);
    lamp_tensor_release(y);
    unbind_own(&b);
  }
}

/* Gradients accumulate: a second backward without zeroing doubles dW and db. */
static void test_linear_grads_accumulate(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 6);
  lamp_layer *l;
  OK(lamp_linear_new(&l, 3, 2, 1));
  bound_layer b;
  bind_own(&b, l, LAMP_F32, &r);
  lamp_tensor *x = f32_2d(4, 3), *y = f32_2d(4, 2), *dy = f32_2d(4, 2);
  fill_uniform(x, &r, -1, 1);
  fill_uniform(dy, &r, -1, 1);
  zero_grads(&b);
  OK(l->ops->forward(l, &FP32, x, y));
  OK(l->ops->backward_input(l, &FP32, x, y, dy, NULL)); /* dx NULL: nothing to do */
  OK(l->ops->accumulate_grads(l, &FP32, x, dy));
  float once[8];
  memcpy(once, fp(b.g[0]), 6 * sizeof(float));
  memcpy(once + 6, fp(b.g[1]), 2 * sizeof(float));
  OK(l->ops->accumulate_grads(l, &FP32, x, dy));
  for (int i = 0; i < 6; i++) assert_near(fp(b.g[0])[i], 2 * once[i], 1e-6);
  for (int i = 0; i < 2; i++) assert_near(fp(b.g[1])[i], 2 * once[6 + i], 1e-6);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_tensor_release(dy);
  unbind_own(&b);
}

/*
** Autocast with fp32 weights and a bf16 compute dtype: the GEMMs see x, W and dy rounded to
** bf16 and accumulate in fp32 into an fp32 output, so the result equals the naive double
** product of the rounded operands up to fp32 accumulation error. The bias joins the inputs
** rounded to bf16 (as autocast's addmm rounds it); the add itself and the bias-gradient
** reduction run in fp32.
*/
static void test_linear_autocast_bf16(void **state) {
  (void)state;
  const lamp_exec ac = {.device = LAMP_CPU, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_F32, .training = 1, .grad_dtype = LAMP_F32};
  enum { B = 5, IN = 6, OUT = 3 };
  lamp_rng r;
  lamp_rng_seed(&r, 7);
  lamp_layer *l;
  OK(lamp_linear_new(&l, IN, OUT, 1));
  bound_layer b;
  bind_own(&b, l, LAMP_F32, &r);
  lamp_tensor *x = f32_2d(B, IN), *y = f32_2d(B, OUT), *dy = f32_2d(B, OUT), *dx = f32_2d(B, IN);
  fill_uniform(x, &r, -1, 1);
  fill_uniform(dy, &r, -1, 1);
  float xr[B * IN], wr[OUT * IN], dyr[B * OUT], wtr[IN * OUT], dytr[OUT * B], xtr[IN * B];
  for (int i = 0; i < B * IN; i++) xr[i] = bf16_round(fp(x)[i]);
  for (int i = 0; i < OUT * IN; i++) wr[i] = bf16_round(fp(b.w[0])[i]);
  for (int i = 0; i < B * OUT; i++) dyr[i] = bf16_round(fp(dy)[i]);
  for (int o = 0; o < OUT; o++)
    for (int i = 0; i < IN; i++) wtr[i * OUT + o] = wr[o * IN + i];
  for (int s = 0; s < B; s++) {
    for (int o = 0; o < OUT; o++) dytr[o * B + s] = dyr[s * OUT + o];
    for (int i = 0; i < IN; i++) xtr[i * B + s] = xr[s * IN + i];
  }
  double want_y[B * OUT], want_dx[B * IN], want_dw[OUT * IN], want_db[OUT] = {0};
  float bias_r[OUT];
  for (int o = 0; o < OUT; o++) bias_r[o] = bf16_round(fp(b.w[1])[o]);
  naive_linear(xr, wr, bias_r, B, IN, OUT, want_y);
  naive_linear(dyr, wtr, NULL, B, OUT, IN, want_dx);   /* dx = dy W */
  naive_linear(dytr, xtr, NULL, OUT, B, IN, want_dw);  /* dW = dy^T x */
  for (int s = 0; s < B; s++)
    for (int o = 0; o < OUT; o++) want_db[o] += fp(dy)[s * OUT + o];

  zero_grads(&b);
  OK(l->ops->forward(l, &ac, x, y));
  assert_close(fp(y), want_y, B * OUT, 1e-5, 1e-5, "y");
  OK(l->ops->backward_input(l, &ac, x, y, dy, dx));
  assert_close(fp(dx), want_dx, B * IN, 1e-5, 1e-5, "dx");
  OK(l->ops->accumulate_grads(l, &ac, x, dy));
  assert_close(fp(b.g[0]), want_dw, OUT * IN, 1e-5, 1e-5, "dW");
  assert_close(fp(b.g[1]), want_db, OUT, 1e-5, 1e-5, "db");

  /* The weights changed (an optimizer step): the next forward must not reuse a stale copy. */
  for (int i = 0; i < OUT * IN; i++) fp(b.w[0])[i] *= -0.5f;
  for (int i = 0; i < OUT * IN; i++) wr[i] = bf16_round(fp(b.w[0])[i]);
  naive_linear(xr, wr, bias_r, B, IN, OUT, want_y);
  OK(l->ops->forward(l, &ac, x, y));
  assert_close(fp(y), want_y, B * OUT, 1e-5, 1e-5, "y after the weights changed");

  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_tensor_release(dy);
  lamp_tensor_release(dx);
  unbind_own(&b);
}

/*
** The bf16 policy: bf16 weights, bf16 compute, bf16 activations, an fp32 input. y is the
** fp32 product rounded to bf16, then the bias added and rounded again; the reference does the
** same two roundings from the double product. The fp32 GEMM and the double product differ by
** ~1e-7 relative, which can flip a rounding decision: hence one bf16 ulp (<= 2^-7 |y|).
*/
static void test_linear_bf16_policy(void **state) {
  (void)state;
  const lamp_exec pol = {.device = LAMP_CPU, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .training = 1, .grad_dtype = LAMP_F32};
  enum { B = 4, IN = 8, OUT = 5 };
  lamp_rng r;
  lamp_rng_seed(&r, 8);
  lamp_layer *l;
  OK(lamp_linear_new(&l, IN, OUT, 1));
  bound_layer b;
  bind_own(&b, l, LAMP_BF16, &r);
  lamp_tensor *x = f32_2d(B, IN);
  lamp_tensor *y = new_tensor(LAMP_BF16, 2, (int64_t[]){B, OUT});
  fill_uniform(x, &r, -1, 1);
  float xr[B * IN], w[OUT * IN], bias[OUT], got[B * OUT];
  for (int i = 0; i < B * IN; i++) xr[i] = bf16_round(fp(x)[i]);
  lamp_bf16_to_f32_n(w, lamp_tensor_data(b.w[0]), OUT * IN);
  lamp_bf16_to_f32_n(bias, lamp_tensor_data(b.w[1]), OUT);
  double want[B * OUT];
  naive_linear(xr, w, NULL, B, IN, OUT, want);
  for (int i = 0; i < B * OUT; i++) want[i] = bf16_round(bf16_round((float)want[i]) + bias[i % OUT]);
  OK(l->ops->forward(l, &pol, x, y));
  lamp_bf16_to_f32_n(got, lamp_tensor_data(y), B * OUT);
  assert_close(got, want, B * OUT, 0.0, 0x1p-7, "y");
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  unbind_own(&b);
}

/* ---- ReLU ------------------------------------------------------------------------------- */

static void test_relu_grad(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 21);
  lamp_layer *l;
  OK(lamp_relu_new(&l));
  lamp_tensor *x = f32_2d(4, 6);
  fill_away_from_zero(x, &r, KINK_MARGIN, 1.0);
  fd_case f;
  fd_setup(&f, l, x, &r);
  OK(l->ops->forward(l, &FP32, f.x, f.y));
  for (int i = 0; i < 24; i++) assert_true(fp(f.y)[i] == (fp(x)[i] > 0 ? fp(x)[i] : 0.0f));
  fd_check(&f);
  fd_teardown(&f);
}

/* Mixed dtypes (f32 in, bf16 out, f32 gradients) go through the workspace path. */
static void test_relu_mixed_dtypes(void **state) {
  (void)state;
  const lamp_exec pol = {.device = LAMP_CPU, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .training = 1, .grad_dtype = LAMP_F32};
  lamp_rng r;
  lamp_rng_seed(&r, 22);
  lamp_layer *l;
  OK(lamp_relu_new(&l));
  lamp_tensor *x = f32_2d(3, 5), *dy = f32_2d(3, 5), *dx = f32_2d(3, 5);
  lamp_tensor *y = new_tensor(LAMP_BF16, 2, (int64_t[]){3, 5});
  fill_away_from_zero(x, &r, 0.1, 1.0);
  fill_uniform(dy, &r, -1, 1);
  OK(l->ops->forward(l, &pol, x, y));
  OK(l->ops->backward_input(l, &pol, x, y, dy, dx));
  float yv[15];
  lamp_bf16_to_f32_n(yv, lamp_tensor_data(y), 15);
  for (int i = 0; i < 15; i++) {
    float xi = fp(x)[i];
    assert_true(yv[i] == (xi > 0 ? bf16_round(xi) : 0.0f));
    /* dy goes through bf16 on the way: the mask is exact, the values rounded */
    assert_true(fp(dx)[i] == (xi > 0 ? bf16_round(fp(dy)[i]) : 0.0f));
  }
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_tensor_release(dy);
  lamp_tensor_release(dx);
  lamp_layer_release(l);
}

/* ---- Sequential ------------------------------------------------------------------------- */

enum { SEQ_IN = 5, SEQ_HID = 4, SEQ_OUT = 3, SEQ_B = 3 };

/* The 5-4-3 MLP in double from its parameters; returns the smallest |pre-activation|. */
static double naive_mlp2(const bound_layer *b, const float *x, double *y) {
  double z[SEQ_B * SEQ_HID];
  naive_linear(x, fp(b->w[0]), fp(b->w[1]), SEQ_B, SEQ_IN, SEQ_HID, z);
  double margin = INFINITY;
  float h[SEQ_B * SEQ_HID];
  for (int i = 0; i < SEQ_B * SEQ_HID; i++) {
    margin = fmin(margin, fabs(z[i]));
    h[i] = z[i] > 0 ? (float)z[i] : 0.0f;
  }
  naive_linear(h, fp(b->w[2]), fp(b->w[3]), SEQ_B, SEQ_HID, SEQ_OUT, y);
  return margin;
}

/*
** Draws x until every hidden pre-activation is KINK_MARGIN away from 0: a perturbation of h
** moves a pre-activation by at most h * max(|x|, 1) = h < KINK_MARGIN.
*/
static void draw_away_from_kinks(fd_case *f, lamp_rng *r) {
  double y[SEQ_B * SEQ_OUT];
  for (int tries = 0; tries < 1000; tries++) {
    fill_uniform(f->x, r, -1.0, 1.0);
    if (naive_mlp2(&f->p, fp(f->x), y) >= KINK_MARGIN) return;
  }
  fail_msg("no input away from the ReLU kinks in 1000 draws");
}

static void sequential_fd(lamp_layer *net, const char *const *names) {
  lamp_rng r;
  lamp_rng_seed(&r, 31);
  fd_case f;
  fd_setup(&f, net, f32_2d(SEQ_B, SEQ_IN), &r);
  assert_int_equal(f.p.n, 4);
  for (size_t i = 0; i < 4; i++) {
    lamp_param_decl d;
    char name[96];
    OK(net->ops->param_decl(net, i, &d, name, sizeof name));
    assert_string_equal(d.name, names[i]);
    assert_int_equal(d.decay, i % 2 == 0); /* weights decay, biases do not */
  }
  draw_away_from_kinks(&f, &r);
  double want[SEQ_B * SEQ_OUT];
  naive_mlp2(&f.p, fp(f.x), want);
  OK(net->ops->forward(net, &FP32, f.x, f.y));
  assert_close(fp(f.y), want, SEQ_B * SEQ_OUT, 1e-5, 1e-5, "y");
  fd_check(&f);
  fd_teardown(&f);
}

static void test_sequential_grad(void **state) {
  (void)state;
  lamp_layer *net = seq(3, (lamp_layer *[]){linear(SEQ_IN, SEQ_HID), relu(), linear(SEQ_HID, SEQ_OUT)});
  sequential_fd(net, (const char *[]){"0.weight", "0.bias", "2.weight", "2.bias"});
}

/* Nested at both ends: Sequential(Sequential(Linear, ReLU), Sequential(Linear)). */
static void test_nested_sequential_grad(void **state) {
  (void)state;
  lamp_layer *a = seq(2, (lamp_layer *[]){linear(SEQ_IN, SEQ_HID), relu()});
  lamp_layer *b = seq(1, (lamp_layer *[]){linear(SEQ_HID, SEQ_OUT)});
  lamp_layer *net = seq(2, (lamp_layer *[]){a, b});
  sequential_fd(net, (const char *[]){"0.0.weight", "0.0.bias", "1.0.weight", "1.0.bias"});
}

/* ---- CrossEntropy ---------------------------------------------------------------------- */

enum { CE_B = 4, CE_C = 5 };

typedef struct ce_case {
  lamp_loss *loss;
  lamp_tensor *logits, *labels;
} ce_case;

static double ce_value(void *ctx) {
  ce_case *c = ctx;
  double v;
  OK(c->loss->ops->forward_backward(c->loss, &FP32, c->logits, c->labels, 1.0f, &v, NULL, NULL));
  return v;
}

/* Mean over rows of logsumexp(row) - row[label], in double. */
static double naive_ce(const float *logits, const int32_t *labels, size_t *correct) {
  double total = 0.0;
  *correct = 0;
  for (int r = 0; r < CE_B; r++) {
    const float *row = logits + r * CE_C;
    int best = 0;
    double mx = row[0];
    for (int c = 1; c < CE_C; c++)
      if (row[c] > row[best]) best = c;
    mx = row[best];
    double s = 0.0;
    for (int c = 0; c < CE_C; c++) s += exp(row[c] - mx);
    total += mx + log(s) - row[labels[r]];
    *correct += best == labels[r];
  }
  return total / CE_B;
}

static void test_cross_entropy_grad(void **state) {
  (void)state;
  lamp_rng r;
  lamp_rng_seed(&r, 41);
  ce_case c;
  OK(lamp_cross_entropy_new(&c.loss));
  c.logits = f32_2d(CE_B, CE_C);
  fill_uniform(c.logits, &r, -2, 2);
  c.labels = new_tensor(LAMP_I32, 1, (int64_t[]){CE_B});
  int32_t *lab = lamp_tensor_data(c.labels);
  for (int i = 0; i < CE_B; i++) lab[i] = (int32_t)lamp_rng_below(&r, CE_C);
  lamp_tensor *d = f32_2d(CE_B, CE_C), *d8 = f32_2d(CE_B, CE_C);
  double v, v8;
  size_t correct, want_correct;
  OK(c.loss->ops->forward_backward(c.loss, &FP32, c.logits, c.labels, 1.0f, &v, d, &correct));
  /* The loss itself: fp32 arithmetic on O(1) values, so 1e-5 relative is ample. */
  double want = naive_ce(fp(c.logits), lab, &want_correct);
  assert_near(v, want, 1e-5 * fabs(want));
  assert_int_equal(correct, want_correct);
  /* grad_scale scales the gradient, not the reported loss */
  OK(c.loss->ops->forward_backward(c.loss, &FP32, c.logits, c.labels, 8.0f, &v8, d8, NULL));
  assert_near(v8, v, 1e-12);
  for (int i = 0; i < CE_B * CE_C; i++) assert_near(fp(d8)[i], 8.0f * fp(d)[i], 1e-6);
  double big = compare_all(ce_value, &c, fp(c.logits), fp(d), CE_B * CE_C, FD_ATOL_LOSS, "dlogits");
  assert_true(big > 0.05);
  lamp_tensor_release(c.logits);
  lamp_tensor_release(c.labels);
  lamp_tensor_release(d);
  lamp_tensor_release(d8);
  lamp_loss_release(c.loss);
}

static void test_cross_entropy_shape_errors(void **state) {
  (void)state;
  lamp_loss *loss;
  OK(lamp_cross_entropy_new(&loss));
  lamp_tensor *logits = f32_2d(4, 3);
  lamp_tensor *labels = new_tensor(LAMP_I32, 1, (int64_t[]){5});
  lamp_tensor *flabels = new_tensor(LAMP_F32, 1, (int64_t[]){4});
  lamp_tensor *flat = new_tensor(LAMP_F32, 1, (int64_t[]){12});
  lamp_tensor *d = f32_2d(4, 2);
  lamp_tensor *good = new_tensor(LAMP_I32, 1, (int64_t[]){4});
  double v;
  assert_int_equal(loss->ops->forward_backward(loss, &FP32, logits, labels, 1, &v, NULL, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "CrossEntropy: labels i32[5] do not match logits f32[4, 3] (expected i32[4])");
  assert_int_equal(loss->ops->forward_backward(loss, &FP32, logits, flabels, 1, &v, NULL, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "CrossEntropy: labels f32[4] do not match logits f32[4, 3] (expected i32[4])");
  assert_int_equal(loss->ops->forward_backward(loss, &FP32, flat, good, 1, &v, NULL, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      "CrossEntropy: logits f32[12] must be a contiguous f32, f16 or bf16 tensor [batch, classes]");
  assert_int_equal(loss->ops->forward_backward(loss, &FP32, logits, good, 1, &v, d, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      "CrossEntropy: dlogits f32[4, 2] must be a contiguous floating-point tensor shaped like logits f32[4, 3]");
  lamp_tensor *ts[] = {logits, labels, flabels, flat, d, good};
  for (int i = 0; i < 6; i++) lamp_tensor_release(ts[i]);
  lamp_loss_release(loss);
}

/* ---- the whole model -------------------------------------------------------------------- */

enum { M_B = 4, M_LAYERS = 3 };
static const int m_dims[M_LAYERS + 1] = {6, 5, 4, 3};

typedef struct model_case {
  lamp_model *model;
  lamp_loss *loss;
  lamp_tensor *x, *labels, *dlogits;
} model_case;

static double model_loss(void *ctx) {
  model_case *c = ctx;
  const lamp_tensor *y;
  double v;
  OK(lamp_model_forward(c->model, c->x, 1, &y));
  OK(c->loss->ops->forward_backward(c->loss, &FP32, y, c->labels, 1.0f, &v, NULL, NULL));
  return v;
}

/* The MLP in double from the trainable slab and the parameter table; returns min |z| hidden. */
static double naive_model(const model_case *c, double *logits) {
  const float *theta = lamp_model_trainable(c->model);
  float act[M_B * 8];
  double z[M_B * 8];
  memcpy(act, fp(c->x), sizeof(float) * M_B * (size_t)m_dims[0]);
  double margin = INFINITY;
  for (int l = 0; l < M_LAYERS; l++) {
    const lamp_model_param *w = lamp_model_param_at(c->model, 2 * (size_t)l);
    const lamp_model_param *b = lamp_model_param_at(c->model, 2 * (size_t)l + 1);
    naive_linear(act, theta + w->offset, theta + b->offset, M_B, (size_t)m_dims[l], (size_t)m_dims[l + 1], z);
    size_t n = M_B * (size_t)m_dims[l + 1];
    if (l + 1 == M_LAYERS) {
      memcpy(logits, z, n * sizeof *z);
      break;
    }
    for (size_t i = 0; i < n; i++) {
      margin = fmin(margin, fabs(z[i]));
      act[i] = z[i] > 0 ? (float)z[i] : 0.0f;
    }
  }
  return margin;
}

/*
** Every parameter of a 6-5-4-3 MLP under CrossEntropy. A perturbation of h moves a hidden
** pre-activation by at most h * max(|x|, |h1|, 1) < 3h (|x| <= 1, and with the init bound
** 1/sqrt(6) the first hidden layer stays below 7/sqrt(6) < 3), so inputs are drawn until every
** hidden pre-activation is at least 5h from its kink.
*/
static void test_model_grad(void **state) {
  (void)state;
  model_case c;
  lamp_layer *net = seq(5, (lamp_layer *[]){linear(6, 5), relu(), linear(5, 4), relu(), linear(4, 3)});
  OK(lamp_model_new(&c.model, net));
  lamp_layer_release(net);
  lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .master_weights = 0, .seed = 1234, .grad_dtype = LAMP_F32};
  OK(lamp_model_build(c.model, &cfg));
  OK(lamp_cross_entropy_new(&c.loss));
  c.x = f32_2d(M_B, 6);
  c.labels = new_tensor(LAMP_I32, 1, (int64_t[]){M_B});
  c.dlogits = f32_2d(M_B, 3);
  lamp_rng r;
  lamp_rng_seed(&r, 51);
  int32_t *lab = lamp_tensor_data(c.labels);
  for (int i = 0; i < M_B; i++) lab[i] = (int32_t)lamp_rng_below(&r, 3);
  double logits[M_B * 3];
  int tries = 0;
  do {
    fill_uniform(c.x, &r, -1, 1);
    assert_true(++tries < 1000);
  } while (naive_model(&c, logits) < 5 * FD_H);

  /* forward against the naive loop */
  const lamp_tensor *y;
  OK(lamp_model_forward(c.model, c.x, 1, &y));
  assert_close(fp(y), logits, M_B * 3, 1e-5, 1e-5, "logits");

  /* analytic: dL/dlogits from the loss, then backward into the zeroed gradient slab */
  double v;
  OK(lamp_model_zero_grads(c.model));
  OK(c.loss->ops->forward_backward(c.loss, &FP32, y, c.labels, 1.0f, &v, c.dlogits, NULL));
  OK(lamp_model_backward(c.model, c.dlogits));
  size_t n = lamp_model_numel(c.model);
  assert_int_equal(n, 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
  float *grads = malloc(n * sizeof *grads);
  memcpy(grads, fp(lamp_model_grads(c.model)), n * sizeof *grads);
  for (size_t i = 0; i < lamp_model_n_params(c.model); i++) {
    const lamp_model_param *p = lamp_model_param_at(c.model, i);
    double big = compare_all(model_loss, &c, lamp_model_trainable(c.model) + p->offset, grads + p->offset,
                             p->count, FD_ATOL_LOSS, p->name);
    assert_true(big > 1e-3); /* every parameter tensor gets a real gradient */
  }
  free(grads);
  lamp_tensor_release(c.x);
  lamp_tensor_release(c.labels);
  lamp_tensor_release(c.dlogits);
  lamp_loss_release(c.loss);
  lamp_model_free(c.model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_forward_naive),
      cmocka_unit_test(test_linear_grad_bias),
      cmocka_unit_test(test_linear_grad_no_bias),
      cmocka_unit_test(test_linear_grads_accumulate),
      cmocka_unit_test(test_linear_autocast_bf16),
      cmocka_unit_test(test_linear_bf16_policy),
      cmocka_unit_test(test_relu_grad),
      cmocka_unit_test(test_relu_mixed_dtypes),
      cmocka_unit_test(test_sequential_grad),
      cmocka_unit_test(test_nested_sequential_grad),
      cmocka_unit_test(test_cross_entropy_grad),
      cmocka_unit_test(test_cross_entropy_shape_errors),
      cmocka_unit_test(test_model_grad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
