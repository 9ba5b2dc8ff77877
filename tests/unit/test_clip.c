/*
** Global-norm clipping, checked by hand. One Linear(3 -> 2) with fixed weights, a fixed batch
** of 4 rows and labels, sgd with lr 1 and no momentum, so one optimizer step moves every
** parameter by -lr * coef * g with coef = min(1, clip / (norm + 1e-6)) (PyTorch's
** clip_grad_norm_). The gradient g of the mean softmax cross-entropy is computed here in
** double:
**     z_bc = sum_j W_cj x_bj + b_c,  p_b = softmax(z_b),  d_bc = (p_bc - [c == y_b]) / B
**     dW_cj = sum_b d_bc x_bj,       db_c = sum_b d_bc,   norm = sqrt(sum dW^2 + sum db^2)
** and the trainer must report stats.grad_norm = norm and move the parameters by exactly that,
** with clip below the norm (coef ~ 0.5) and above it (coef = 1), under fp32 and under fp16,
** where the gradient slab holds S = 65536 times the gradient and the norm must still be the
** unscaled one.
**
** Every input is a short dyadic number (exact in fp16), so the logits are exact in both
** precisions and the only roundings are the ones each test names.
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
#include "test_support.h"
#include "trainer_rig.h"

#define IN 3
#define OUT 2
#define B 4
#define NP (OUT * IN + OUT) /* weight [2][3] at 0, bias [2] at 6 */

static const float W0[OUT * IN] = {0.5f, -0.25f, 1.0f, -1.0f, 0.75f, 0.25f};
static const float B0[OUT] = {0.25f, -0.5f};
static const float X[B * IN] = {1.0f, 2.0f, -1.0f, 0.5f, -1.0f, 2.0f, -2.0f, 0.25f, 1.0f, 1.5f, 1.0f, -0.5f};
static const int32_t Y[B] = {0, 1, 1, 0};

/* The true gradient in slab order (weight then bias), its norm, and for each element the sum
   of |d_bc x_bj| over the rows (the scale a rounding of d is relative to). */
typedef struct reference {
  double g[NP], abs_terms[NP], norm;
} reference;

static reference reference_gradient(void) {
  reference r = {0};
  for (size_t b = 0; b < B; b++) {
    double z[OUT], mx = -INFINITY, sum = 0.0;
    for (size_t c = 0; c < OUT; c++) {
      z[c] = B0[c];
      for (size_t j = 0; j < IN; j++) z[c] += (double)W0[c * IN + j] * X[b * IN + j];
      mx = fmax(mx, z[c]);
    }
    for (size_t c = 0; c < OUT; c++) sum += exp(z[c] - mx);
    for (size_t c = 0; c < OUT; c++) {
      double d = (exp(z[c] - mx) / sum - (Y[b] == (int32_t)c ? 1.0 : 0.0)) / B;
      for (size_t j = 0; j < IN; j++) {
        r.g[c * IN + j] += d * X[b * IN + j];
        r.abs_terms[c * IN + j] += fabs(d * X[b * IN + j]);
      }
      r.g[OUT * IN + c] += d;
      r.abs_terms[OUT * IN + c] += fabs(d);
    }
  }
  double s = 0.0;
  for (size_t i = 0; i < NP; i++) s += r.g[i] * r.g[i];
  r.norm = sqrt(s);
  return r;
}

/* One step of the tiny model under `precision` with clipping at `clip`; returns the stats and
   the fp32 parameters (the masters under fp16) before and after, and the gradient slab. */
typedef struct outcome {
  lamp_trainer_stats st;
  float before[NP], after[NP], slab[NP];
} outcome;

static outcome one_step(const char *precision, double clip) {
  static const lamp_option sgd_opts[] = {{"lr", 1.0}};
  rig_spec spec = {.precision = precision, .optim_opts = sgd_opts, .n_optim_opts = 1, .clip = clip};
  rig r;
  rig_open(&r, &spec, linear(IN, OUT));
  assert_int_equal(lamp_model_numel(r.model), NP);
  set_param(r.model, 0, W0);
  set_param(r.model, 1, B0);
  int64_t xs[2] = {B, IN}, ys[1] = {B};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, xs), *y = new_tensor(LAMP_I32, 1, ys);
  memcpy(fp(x), X, sizeof X);
  memcpy(lamp_tensor_data(y), Y, sizeof Y);
  outcome o;
  memcpy(o.before, lamp_model_trainable(r.model), sizeof o.before);
  OK(lamp_trainer_step(r.t, x, y));
  o.st = rig_stats(&r);
  memcpy(o.after, lamp_model_trainable(r.model), sizeof o.after);
  memcpy(o.slab, fp(lamp_model_grads(r.model)), sizeof o.slab); /* sgd reads the slab, never writes it */
  assert_int_equal(o.st.steps, 1);
  assert_int_equal(o.st.skipped_steps, 0);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
  return o;
}

/* fp32's spacing at v: the distance to the next float away from zero. */
static double ulp32(float v) { return (double)nextafterf(fabsf(v), INFINITY) - fabsf(v); }

/*
** Checks one step against the reference. S is the loss scale the slab carries; g_tol[i] bounds
** |slab_i / S - g_i| (each precision's own rounding); norm_tol bounds the norm's error.
*/
static void check_step(const char *precision, double clip_factor, double S, const double *g_tol, double norm_tol) {
  reference ref = reference_gradient();
  double clip = clip_factor * ref.norm;
  outcome o = one_step(precision, clip);
  assert_true(o.st.loss_scale == S);

  /* The gradient the slab holds, unscaled, is the true one. */
  double sumsq = 0.0;
  for (size_t i = 0; i < NP; i++) {
    assert_near(o.slab[i] / S, ref.g[i], g_tol[i]);
    sumsq += (double)o.slab[i] * o.slab[i];
  }
  /* The reported norm is the unscaled one: the slab's own norm / S to double rounding, and the
     true norm to the precision's rounding (under fp16 the scaled norm would be 65536x off). */
  assert_near(o.st.grad_norm, sqrt(sumsq) / S, 1e-12 * o.st.grad_norm);
  assert_near(o.st.grad_norm, ref.norm, norm_tol);

  double coef = clip / (o.st.grad_norm + 1e-6), coef_ref = clip / (ref.norm + 1e-6);
  if (clip_factor >= 1.0) {
    assert_true(coef >= 1.0); /* no clipping: the step is -lr g */
    coef = coef_ref = 1.0;
  } else {
    /* clipping by clip_factor, up to the norm's error and the 1e-6 in the denominator */
    assert_near(coef, clip_factor, clip_factor * (norm_tol + 1e-6) / (ref.norm - norm_tol));
  }
  for (size_t i = 0; i < NP; i++) {
    double moved = (double)o.after[i] - o.before[i];
    /*
    ** Replayed the way the trainer and sgd compute it: grad_scale = (float)(coef / S), then
    ** g = slab * grad_scale and p -= lr * g in fp32. Equal up to 1 ulp of the result (the last
    ** two operations may or may not be fused into one FMA).
    */
    float gs = (float)(coef * (1.0 / S)), g = o.slab[i] * gs, replay = o.before[i] - 1.0f * g;
    if (!(fabs((double)o.after[i] - replay) <= ulp32(replay)))
      fail_msg("%s, clip %.3g x norm: parameter %zu is %.9g, the replayed update gives %.9g", precision, clip_factor,
               i, o.after[i], replay);
    /*
    ** Against the double reference -lr coef g: the gradient's own error (g_tol, times coef),
    ** coef's (from the norm's: relative norm_tol / norm, times |coef g|), and the fp32 rounding
    ** of the parameter (half an ulp) and of the product (2^-24 relative).
    */
    double want = -1.0 * coef_ref * ref.g[i];
    double tol = coef_ref * g_tol[i] + fabs(want) * (norm_tol / ref.norm + ldexp(1.0, -23)) + ulp32(o.after[i]);
    if (!(fabs(moved - want) <= tol))
      fail_msg("%s, clip %.3g x norm: parameter %zu moved by %.9g, expected %.9g within %.3g", precision, clip_factor,
               i, moved, want, tol);
  }
  print_message("%s, clip = %.2g x norm: grad_norm %.9g (double: %.9g), coef %.7g, largest move %.6g\n", precision,
                clip_factor, o.st.grad_norm, ref.norm, coef, fabs((double)o.after[0] - o.before[0]));
}

/*
** fp32: the logits are exact; p carries expf's and the division's rounding (~2^-23 relative),
** d = (p - onehot) / 4 an absolute error below 2^-23 (|p| <= 1, the division by 4 exact), and a
** 4-term fp32 dot product adds 3 roundings of at most 2^-24 of the sum of |terms|. Bound per
** element: 2^-22 * (1 + sum_b |x_bj|) covers both with room; the norm, at most the Euclidean
** length of those bounds.
*/
static void fp32_tolerances(double *g_tol, double *norm_tol) {
  double s = 0.0;
  for (size_t i = 0; i < NP; i++) {
    double xs = 0.0;
    for (size_t b = 0; b < B; b++) xs += i < OUT * IN ? fabs(X[b * IN + i % IN]) : 1.0;
    g_tol[i] = ldexp(1.0, -22) * (1.0 + xs);
    s += g_tol[i] * g_tol[i];
  }
  *norm_tol = sqrt(s);
}

/*
** fp16: dlogits = d * S is stored in fp16 (activation dtype), a relative rounding of at most
** 2^-11; the weight-gradient GEMM then multiplies exact fp16 inputs and accumulates in fp32
** (~2^-24 per term). So |slab / S - g| <= 2^-11 * sum_b |d x| (plus the fp32 terms, 2^-20 of
** it covers them). This is the precision's rounding, not a loose tolerance: a gradient off by
** the factor S, or by a missing 1/B, misses it by orders of magnitude.
*/
static void fp16_tolerances(double *g_tol, double *norm_tol) {
  reference ref = reference_gradient();
  double s = 0.0;
  for (size_t i = 0; i < NP; i++) {
    g_tol[i] = (ldexp(1.0, -11) + ldexp(1.0, -20)) * ref.abs_terms[i] + 1e-9;
    s += g_tol[i] * g_tol[i];
  }
  *norm_tol = sqrt(s);
}

static void test_fp32_clip_below_the_norm(void **state) {
  (void)state;
  double g_tol[NP], norm_tol;
  fp32_tolerances(g_tol, &norm_tol);
  check_step("fp32", 0.5, 1.0, g_tol, norm_tol);
}

static void test_fp32_clip_above_the_norm(void **state) {
  (void)state;
  double g_tol[NP], norm_tol;
  fp32_tolerances(g_tol, &norm_tol);
  check_step("fp32", 10.0, 1.0, g_tol, norm_tol);
}

static void test_fp16_clip_below_the_norm(void **state) {
  (void)state;
  double g_tol[NP], norm_tol;
  fp16_tolerances(g_tol, &norm_tol);
  check_step("fp16", 0.5, 65536.0, g_tol, norm_tol);
}

static void test_fp16_clip_above_the_norm(void **state) {
  (void)state;
  double g_tol[NP], norm_tol;
  fp16_tolerances(g_tol, &norm_tol);
  check_step("fp16", 10.0, 65536.0, g_tol, norm_tol);
}

/*
** Under a loss scaler with clipping, the trainer takes the inf/NaN check from the squared norm
** (one pass over the gradients instead of two): a scale of 2^40 overflows the fp16 logit
** gradients, and the step must still be skipped with the parameters untouched and the scale
** halved, exactly as without clipping.
*/
static void overflowing_step(double clip) {
  static const lamp_option sgd_opts[] = {{"lr", 1.0}};
  static const lamp_option fp16_opts[] = {{"init_scale", 0x1p40}};
  rig_spec spec = {.precision = "fp16", .prec_opts = fp16_opts, .n_prec_opts = 1, .optim_opts = sgd_opts,
                   .n_optim_opts = 1, .clip = clip};
  rig r;
  rig_open(&r, &spec, linear(IN, OUT));
  set_param(r.model, 0, W0);
  set_param(r.model, 1, B0);
  int64_t xs[2] = {B, IN}, ys[1] = {B};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, xs), *y = new_tensor(LAMP_I32, 1, ys);
  memcpy(fp(x), X, sizeof X);
  memcpy(lamp_tensor_data(y), Y, sizeof Y);
  float before[NP];
  memcpy(before, lamp_model_trainable(r.model), sizeof before);
  OK(lamp_trainer_step(r.t, x, y));
  lamp_trainer_stats st = rig_stats(&r);
  assert_int_equal(st.steps, 0);
  assert_int_equal(st.skipped_steps, 1);
  assert_true(st.loss_scale == 0x1p39);
  assert_memory_equal(lamp_model_trainable(r.model), before, sizeof before);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

static void test_fp16_overflow_skipped_with_clipping(void **state) {
  (void)state;
  overflowing_step(1.0);
}

static void test_fp16_overflow_skipped_without_clipping(void **state) {
  (void)state;
  overflowing_step(0.0);
}

/* The reference itself, so that the tests above cannot pass against a wrong one: the
   gradient of a softmax cross-entropy sums to 0 over the classes, row by row, hence the two
   bias gradients cancel; and a central finite difference of the double loss agrees. */
static double reference_loss(const double *theta) {
  double total = 0.0;
  for (size_t b = 0; b < B; b++) {
    double z[OUT], mx = -INFINITY, sum = 0.0;
    for (size_t c = 0; c < OUT; c++) {
      z[c] = theta[OUT * IN + c];
      for (size_t j = 0; j < IN; j++) z[c] += theta[c * IN + j] * X[b * IN + j];
      mx = fmax(mx, z[c]);
    }
    for (size_t c = 0; c < OUT; c++) sum += exp(z[c] - mx);
    total += log(sum) + mx - z[Y[b]];
  }
  return total / B;
}

static void test_reference_gradient_is_the_gradient(void **state) {
  (void)state;
  reference ref = reference_gradient();
  assert_near(ref.g[OUT * IN] + ref.g[OUT * IN + 1], 0.0, 1e-15);
  double theta[NP];
  for (size_t i = 0; i < OUT * IN; i++) theta[i] = W0[i];
  for (size_t c = 0; c < OUT; c++) theta[OUT * IN + c] = B0[c];
  for (size_t i = 0; i < NP; i++) {
    const double h = 1e-5; /* central difference: error ~h^2 * |f'''| ~ 1e-10, rounding ~1e-16 / h */
    double saved = theta[i];
    theta[i] = saved + h;
    double up = reference_loss(theta);
    theta[i] = saved - h;
    double down = reference_loss(theta);
    theta[i] = saved;
    assert_near((up - down) / (2 * h), ref.g[i], 1e-9);
  }
  assert_true(ref.norm > 0.1); /* a gradient worth clipping */
}

/* Without clipping the norm costs a pass the trainer skips: grad_norm reads 0. */
static void test_no_clip_reports_no_norm(void **state) {
  (void)state;
  reference ref = reference_gradient();
  outcome o = one_step("fp32", 0.0);
  assert_true(o.st.grad_norm == 0.0);
  for (size_t i = 0; i < NP; i++) assert_near((double)o.after[i] - o.before[i], -ref.g[i], 1e-6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_gradient_is_the_gradient),
      cmocka_unit_test(test_fp32_clip_below_the_norm),
      cmocka_unit_test(test_fp32_clip_above_the_norm),
      cmocka_unit_test(test_fp16_clip_below_the_norm),
      cmocka_unit_test(test_fp16_clip_above_the_norm),
      cmocka_unit_test(test_fp16_overflow_skipped_with_clipping),
      cmocka_unit_test(test_fp16_overflow_skipped_without_clipping),
      cmocka_unit_test(test_no_clip_reports_no_norm),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
