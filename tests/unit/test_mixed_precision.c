/*
** Mixed precision, end to end through the trainer with the real plugins (fp32, fp16, bf16,
** sgd, single) and synthetic tensors whose values are chosen so that every expected number
** can be derived by hand or in double:
**
**   1. fp16 underflow is real (true gradients ~1e-8 become exactly 0 without a loss scale)
**      and the dynamic scaler cures it (the unscaled slab matches an fp64 reference, the
**      loss falls).
**   2. fp32 master weights keep updates below half the fp16 spacing; without them they are lost.
**   3. An inf injected into the gradients between micro-steps skips the step and leaves
**      weights, masters, optimizer state and the schedule untouched; the scale halves.
**   4. The forward pass rounds exactly where the policy says (inputs, weights, every layer
**      output in 16 bits), and the loss is computed in fp32/double from the 16-bit logits.
**   5. 16-bit activations take at most 55 % of the fp32 activation memory.
**   6. A NaN loss under fp32 stops training with a message naming the step.
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
#include "base/log.h"
#include "test_support.h"
#include "train/trainer.h"
#include "trainer_rig.h"

/* ---- a trainer with its plugins ------------------------------------------------------------- */

static float *grads_of(const lamp_model *m) { return fp(lamp_model_grads(m)); }

/* A copy of a slab's bytes (NULL for a NULL slab), compared with memcmp: bit identity. */
static void *snapshot(const lamp_tensor *t) {
  if (t == NULL) return NULL;
  void *copy = malloc(lamp_tensor_nbytes(t));
  assert_non_null(copy);
  memcpy(copy, lamp_tensor_data(t), lamp_tensor_nbytes(t));
  return copy;
}

static int same_bytes(const lamp_tensor *t, const void *copy) {
  return memcmp(lamp_tensor_data(t), copy, lamp_tensor_nbytes(t)) == 0;
}

static double round16(lamp_dtype dtype, double v) {
  return dtype == LAMP_F16 ? lamp_f16_to_f32(lamp_f32_to_f16((float)v)) : lamp_bf16_to_f32(lamp_f32_to_bf16((float)v));
}

/* The spacing of the 16-bit format at v (v already a 16-bit value): next pattern minus v. */
static double ulp16(lamp_dtype dtype, double v) {
  uint16_t bits = dtype == LAMP_F16 ? lamp_f32_to_f16((float)fabs(v)) : lamp_f32_to_bf16((float)fabs(v));
  float up = dtype == LAMP_F16 ? lamp_f16_to_f32((uint16_t)(bits + 1)) : lamp_bf16_to_f32((uint16_t)(bits + 1));
  return (double)up - fabs(v);
}

/* ---- 1. underflow and the loss scaler --------------------------------------------------------- */
/*
** One Linear(IN -> C) with W = 0 and bias (18.5, 0, 0, 0), every label class 0. The logits are
** then exactly the bias (18.5 is an fp16 value), whatever x is, so the softmax is known in
** closed form: each wrong class has p = e^-18.5 / (1 + 3 e^-18.5) = 9.24e-9, and the true
** gradients are
**     dL/db_c    = p                        (c != 0)
**     dL/dW_c,j  = p * mean_b x_b,j         (x ~ U(0.5, 1.5), so ~1e-8)
** all below fp16's smallest subnormal (5.96e-8). The loss gradient is stored in fp16 as
** dlogits = (p - onehot) * S / B: with S = 1 and B = 4 that is 2.3e-9, which rounds to exactly 0
** (anything below half the smallest subnormal, 2.98e-8, does), so no gradient survives. With
** S = 2^16 it is 1.5e-4, a normal fp16 number.
**
** The label class is left out of the fp64 comparison: its gradient p_0 - 1 = -2.8e-8 is below
** fp32's own spacing just under 1 (6e-8), so fp32 softmax (here as in PyTorch) rounds p_0 to 1;
** that is an fp32 limit, not fp16's, and the scaler has nothing to do with it.
*/
#define U_IN 16
#define U_C 4
#define U_B 4
#define U_MARGIN 18.5f

typedef struct underflow_data {
  lamp_tensor *x, *y;
  double xmean[U_IN]; /* mean over the batch of each feature, as the model sees it */
} underflow_data;

static void underflow_data_make(underflow_data *d) {
  int64_t xs[2] = {U_B, U_IN}, ys[1] = {U_B};
  d->x = new_tensor(LAMP_F32, 2, xs);
  d->y = new_tensor(LAMP_I32, 1, ys);
  lamp_rng rng;
  lamp_rng_seed(&rng, 3);
  float *x = fp(d->x);
  for (size_t i = 0; i < U_B * U_IN; i++) /* fp16 values: the model's rounding of x is exact */
    x[i] = (float)round16(LAMP_F16, 0.5 + lamp_rng_uniform(&rng));
  for (size_t b = 0; b < U_B; b++) ((int32_t *)lamp_tensor_data(d->y))[b] = 0;
  for (size_t j = 0; j < U_IN; j++) {
    double s = 0.0;
    for (size_t b = 0; b < U_B; b++) s += x[b * U_IN + j];
    d->xmean[j] = s / U_B;
  }
}

static void underflow_data_free(underflow_data *d) {
  lamp_tensor_release(d->x);
  lamp_tensor_release(d->y);
}

/* W = 0, bias = (18.5, 0, 0, 0). */
static void underflow_rig(rig *r, const lamp_option *prec_opts, size_t n_prec_opts) {
  /* lr 1e6 (sgd's maximum): each step lowers a wrong logit by lr * p * (1 + sum_j xmean_j x_j),
     about 0.15 at the start, which makes the fall of a 3e-8 loss measurable in a few steps. */
  static const lamp_option sgd_opts[] = {{"lr", 1e6}};
  rig_spec spec = {.seed = 7, .precision = "fp16", .prec_opts = prec_opts, .n_prec_opts = n_prec_opts,
                   .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = 1};
  rig_open(r, &spec, linear(U_IN, U_C));
  float w[U_C * U_IN] = {0}, b[U_C] = {U_MARGIN, 0.0f, 0.0f, 0.0f};
  set_param(r->model, 0, w);
  set_param(r->model, 1, b);
}

static double wrong_class_p(void) {
  double e = exp(-(double)U_MARGIN);
  return e / (1.0 + (U_C - 1) * e);
}

static void test_fp16_gradients_underflow_without_loss_scaling(void **state) {
  (void)state;
  underflow_data d;
  underflow_data_make(&d);
  static const lamp_option no_scaling[] = {{"dynamic", 0}, {"init_scale", 1}};
  rig r;
  underflow_rig(&r, no_scaling, 2);
  void *w0 = snapshot(lamp_model_weights(r.model)), *m0 = snapshot(lamp_model_master(r.model));
  size_t n = lamp_model_numel(r.model);
  double first_loss = 0.0;
  for (int s = 0; s < 10; s++) {
    OK(lamp_trainer_step(r.t, d.x, d.y));
    const float *g = grads_of(r.model);
    for (size_t i = 0; i < n; i++)
      if (g[i] != 0.0f) fail_msg("step %d: gradient %zu is %g, expected exactly 0 (fp16 underflow)", s + 1, i, g[i]);
    if (s == 0) first_loss = rig_stats(&r).last_loss;
  }
  lamp_trainer_stats st = rig_stats(&r);
  /* Ten real steps were taken (nothing was skipped), with lr 1e6, and nothing moved. */
  assert_int_equal(st.steps, 10);
  assert_int_equal(st.skipped_steps, 0);
  assert_true(st.loss_scale == 1.0);
  assert_true(same_bytes(lamp_model_weights(r.model), w0));
  assert_true(same_bytes(lamp_model_master(r.model), m0));
  /* The loss itself is representable (computed in fp32/double): 3 p = 2.77e-8, and stuck. */
  assert_near(first_loss, log1p((U_C - 1) * exp(-(double)U_MARGIN)), 1e-12);
  assert_true(st.last_loss == first_loss);
  print_message("without scaling: loss %.6g before and after 10 steps, gradient slab all zero\n", first_loss);
  free(w0);
  free(m0);
  rig_close(&r);
  underflow_data_free(&d);
}

static void test_fp16_loss_scaler_recovers_tiny_gradients(void **state) {
  (void)state;
  underflow_data d;
  underflow_data_make(&d);
  rig r;
  underflow_rig(&r, NULL, 0); /* the default dynamic scaler: S = 65536 */
  OK(lamp_trainer_step(r.t, d.x, d.y));
  lamp_trainer_stats st = rig_stats(&r);
  assert_int_equal(st.steps, 1);
  assert_int_equal(st.skipped_steps, 0);
  const double S = 65536.0;
  assert_true(st.loss_scale == S); /* one clean step: no growth before 2000 */
  /*
  ** The slab holds S * (true gradient) (unscaling is folded into the optimizer step). dlogits
  ** is one fp16 value for every wrong class and row, rounded once with relative error at most
  ** 2^-11 (it is a normal number); everything after it (fp32 GEMM over 4 rows, the exact
  ** power-of-two unscale) adds ~1e-7. Hence the tolerance: 2^-11 + 1e-6, relative.
  */
  const double p = wrong_class_p(), tol = ldexp(1.0, -11) + 1e-6;
  const float *g = grads_of(r.model);
  const lamp_model_param *W = lamp_model_param_at(r.model, 0), *bias = lamp_model_param_at(r.model, 1);
  double gmin = INFINITY, gmax = 0.0;
  for (size_t c = 1; c < U_C; c++) {
    for (size_t j = 0; j < U_IN; j++) {
      double want = p * d.xmean[j], got = g[W->offset + c * U_IN + j] / S;
      assert_near(got, want, tol * want);
      gmin = fmin(gmin, got);
      gmax = fmax(gmax, got);
    }
    double got_b = g[bias->offset + c] / S;
    assert_near(got_b, p, tol * p);
  }
  print_message("with S = 65536: unscaled weight gradients %.4g .. %.4g, bias gradient %.5g (fp64: %.5g)\n", gmin,
                gmax, g[bias->offset + 1] / S, p);
  /* And the loss falls: 10 more steps, then the loss the next forward reports. */
  double before = st.last_loss;
  for (int s = 0; s < 10; s++) OK(lamp_trainer_step(r.t, d.x, d.y));
  double after = rig_stats(&r).last_loss;
  print_message("with S = 65536: loss %.4g -> %.4g after 10 steps\n", before, after);
  assert_near(before, log1p((U_C - 1) * exp(-(double)U_MARGIN)), 1e-12);
  assert_true(after < 0.5 * before);
  assert_int_equal(rig_stats(&r).skipped_steps, 0);
  rig_close(&r);
  underflow_data_free(&d);
}

/* ---- 2. master weights ---------------------------------------------------------------------- */
/*
** Linear(1 -> 2), x = 1 for every row, labels 0, W = (1, 0), bias = (0, 30): logits (1, 30),
** exact in fp16. The softmax is saturated (p_0 = e^-29 = 2.5e-13), so in fp32 p_0 - 1 is exactly
** -1 and p_1 exactly 1: dlogits = (-S/B, S/B) = (-16384, 16384), exact in fp16, and the
** gradient of W_0 (the weight at 1.0) is sum_b dlogits_b,0 * x_b = -S exactly, i.e. exactly -1
** after unscaling. It stays so for 100 steps: the margin shrinks by only 4e-4 per step.
** With lr = 1e-4 each step adds lr to W_0 = 1, less than half the fp16 spacing above 1
** (2^-10 / 2 = 4.9e-4), so a weight rounded to fp16 after every update never moves.
*/
#define MW_B 4
#define MW_STEPS 100
#define MW_LR 1e-4

static void master_rig(rig *r, int masters, lamp_tensor **x, lamp_tensor **y) {
  static const lamp_option sgd_opts[] = {{"lr", MW_LR}};
  lamp_option prec_opts[] = {{"master_weights", masters}};
  rig_spec spec = {.seed = 7, .precision = "fp16", .prec_opts = prec_opts, .n_prec_opts = 1, .optim_opts = sgd_opts,
                   .n_optim_opts = 1, .accum = 1};
  rig_open(r, &spec, linear(1, 2));
  const float w[2] = {1.0f, 0.0f}, b[2] = {0.0f, 30.0f};
  set_param(r->model, 0, w);
  set_param(r->model, 1, b);
  int64_t xs[2] = {MW_B, 1}, ys[1] = {MW_B};
  *x = new_tensor(LAMP_F32, 2, xs);
  *y = new_tensor(LAMP_I32, 1, ys);
  for (size_t i = 0; i < MW_B; i++) {
    fp(*x)[i] = 1.0f;
    ((int32_t *)lamp_tensor_data(*y))[i] = 0;
  }
}

static void test_fp16_without_masters_loses_small_updates(void **state) {
  (void)state;
  rig r;
  lamp_tensor *x, *y;
  master_rig(&r, 0, &x, &y);
  assert_null(lamp_model_master(r.model));
  for (int s = 0; s < MW_STEPS; s++) {
    OK(lamp_trainer_step(r.t, x, y));
    assert_true(grads_of(r.model)[0] == -65536.0f); /* S * (-1): the gradient is what we built */
  }
  assert_int_equal(rig_stats(&r).steps, MW_STEPS);
  const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(r.model));
  assert_int_equal(w16[0], 0x3c00); /* still exactly 1.0 after 100 updates of +1e-4 */
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

static void test_fp16_master_weights_keep_small_updates(void **state) {
  (void)state;
  rig r;
  lamp_tensor *x, *y;
  master_rig(&r, 1, &x, &y);
  assert_non_null(lamp_model_master(r.model));
  for (int s = 0; s < MW_STEPS; s++) {
    OK(lamp_trainer_step(r.t, x, y));
    assert_true(grads_of(r.model)[0] == -65536.0f);
  }
  assert_int_equal(rig_stats(&r).steps, MW_STEPS);
  float master = fp(lamp_model_master(r.model))[0];
  /*
  ** sgd computes p -= lr * g in fp32 with g = -1 exactly: 100 additions of (float)1e-4 to a
  ** value in [1, 2), each rounded by at most half an fp32 ulp there (2^-24). Tolerance:
  ** 100 * (2^-24 + |(float)1e-4 - 1e-4|) = 6.0e-6. The fp32 replay must match bit for bit.
  */
  float replay = 1.0f, lr = (float)MW_LR;
  for (int s = 0; s < MW_STEPS; s++) replay -= lr * -1.0f;
  assert_true(master == replay);
  double tol = MW_STEPS * (ldexp(1.0, -24) + fabs((double)lr - MW_LR));
  assert_near(master, 1.0 + MW_STEPS * MW_LR, tol);
  /* The 16-bit weight is round(master): 1.009765625, where the run without masters stayed at 1. */
  const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(r.model));
  assert_int_equal(w16[0], lamp_f32_to_f16(master));
  assert_true(lamp_f16_to_f32(w16[0]) == 1.009765625f);
  print_message("master %.9g (expected 1.01 within %.2g), fp16 weight %.9g\n", master, tol,
                lamp_f16_to_f32(w16[0]));
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

/* ---- 3. an injected inf skips the step ------------------------------------------------------ */
/*
** MLP 8-16-3 under fp16, sgd with momentum 0.9 and a cosine schedule, accum = 2 over two fixed
** micro-batches (x1, y1), (x2, y2). Run A: a clean group, then a group into whose gradient slab
** +inf is poked between the micro-steps (the second micro-step accumulates onto it, so the
** boundary check sees it), then a clean group. Run B: two clean groups only.
**
** The trainer does not expose the momentum buffer, so its integrity is proved indirectly: run A's
** last step uses buf = 0.9 * buf + g and the schedule's lr for step index 1; it equals run B's
** second step only if the skipped group left the buffer, the step counter and the schedule
** alone. Run A's last group runs at S = 32768 against run B's 65536, which changes nothing: S
** is a power of two, so every scaled quantity (fp16 dlogits and activation gradients, far from
** fp16's subnormal and overflow ranges here, and fp32 gradient sums) is exactly halved, and
** the unscale 1/S then gives identical fp32 gradients. Hence bit identity.
*/
#define INF_IN 8
#define INF_H 16
#define INF_C 3
#define INF_B 4

typedef struct two_batches {
  lamp_tensor *x[2], *y[2];
} two_batches;

static void two_batches_make(two_batches *d) {
  lamp_rng rng;
  lamp_rng_seed(&rng, 21);
  int64_t xs[2] = {INF_B, INF_IN}, ys[1] = {INF_B};
  for (int k = 0; k < 2; k++) {
    d->x[k] = new_tensor(LAMP_F32, 2, xs);
    d->y[k] = new_tensor(LAMP_I32, 1, ys);
    for (size_t i = 0; i < INF_B * INF_IN; i++) fp(d->x[k])[i] = (float)lamp_rng_normal(&rng);
    for (size_t i = 0; i < INF_B; i++) ((int32_t *)lamp_tensor_data(d->y[k]))[i] = (int32_t)lamp_rng_below(&rng, INF_C);
  }
}

static void two_batches_free(two_batches *d) {
  for (int k = 0; k < 2; k++) {
    lamp_tensor_release(d->x[k]);
    lamp_tensor_release(d->y[k]);
  }
}

static void inf_rig(rig *r) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.seed = 7, .precision = "fp16", .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = 2,
                   .schedule = {.kind = LAMP_SCHEDULE_COSINE, .total = 4}};
  rig_open(r, &spec, seq(3, (lamp_layer *[]){linear(INF_IN, INF_H), relu(), linear(INF_H, INF_C)}));
}

/* One accumulation group of the two micro-batches; `poke` >= 0 puts +inf into that gradient. */
static void group(rig *r, const two_batches *d, long poke) {
  OK(lamp_trainer_step(r->t, d->x[0], d->y[0]));
  if (poke >= 0) grads_of(r->model)[poke] = INFINITY;
  OK(lamp_trainer_step(r->t, d->x[1], d->y[1]));
}

static void test_fp16_injected_inf_skips_the_step(void **state) {
  (void)state;
  two_batches d;
  two_batches_make(&d);
  rig a, b;
  inf_rig(&a);
  inf_rig(&b);

  group(&a, &d, -1);
  lamp_trainer_stats st = rig_stats(&a);
  assert_int_equal(st.steps, 1);
  assert_true(st.loss_scale == 65536.0);
  void *w1 = snapshot(lamp_model_weights(a.model)), *m1 = snapshot(lamp_model_master(a.model));
  double lr1 = st.lr;

  group(&a, &d, 5); /* +inf into the gradient of weight element 5 of the first layer */
  st = rig_stats(&a);
  assert_int_equal(st.steps, 1);         /* the schedule's counter did not advance */
  assert_int_equal(st.skipped_steps, 1);
  assert_int_equal(st.micro_steps, 4);
  assert_true(st.loss_scale == 32768.0); /* 65536 * backoff 0.5 */
  assert_true(st.lr == lr1);             /* no new lr was taken from the schedule */
  assert_true(same_bytes(lamp_model_weights(a.model), w1));
  assert_true(same_bytes(lamp_model_master(a.model), m1));

  group(&a, &d, -1); /* the next group writes the slab afresh: the inf is gone, the step runs */
  st = rig_stats(&a);
  assert_int_equal(st.steps, 2);
  assert_int_equal(st.skipped_steps, 1);
  assert_true(st.loss_scale == 32768.0);
  assert_false(same_bytes(lamp_model_master(a.model), m1));

  group(&b, &d, -1);
  group(&b, &d, -1);
  lamp_trainer_stats sb = rig_stats(&b);
  assert_int_equal(sb.steps, 2);
  assert_int_equal(sb.skipped_steps, 0);
  assert_true(sb.lr == st.lr); /* lr of schedule step index 1 in both */
  assert_true(sb.lr != lr1);
  void *wb = snapshot(lamp_model_weights(b.model)), *mb = snapshot(lamp_model_master(b.model));
  assert_true(same_bytes(lamp_model_master(a.model), mb));
  assert_true(same_bytes(lamp_model_weights(a.model), wb));
  print_message("skipped step: scale 65536 -> %g, steps %llu, skipped %llu; weights after the next step equal a "
                "clean run's bit for bit\n",
                st.loss_scale, (unsigned long long)st.steps, (unsigned long long)st.skipped_steps);
  free(w1);
  free(m1);
  free(wb);
  free(mb);
  rig_close(&a);
  rig_close(&b);
  two_batches_free(&d);
}

/* ---- 4. where the policy rounds ------------------------------------------------------------- */
/*
** MLP 12-24-5 (default initialisation, seed 7), batch 8, x ~ N(0, 1) in fp32. The reference,
** in double, applies the roundings the kernels do (core/nn/linear.c, core/backend/cpu):
**   x16 = round16(x)                       the input converted to the compute dtype
**   W16 = the 16-bit weight slab, checked to equal round16(masters) bit for bit
**   a   = round16(sum_j x16_j W16_kj)      GEMM accumulates in fp32, the output is 16-bit
**   h   = relu(round16(a + b16_k))         the bias is added to the widened 16-bit output
**   z   = round16(round16(sum_k h_k W2_ck) + b2_c)
** Tolerance: 1 ulp of the 16-bit logit. The only difference from the kernels is fp32 against
** double accumulation inside the GEMMs (a relative ~1e-7), which can flip a 16-bit rounding
** that falls near a tie, by one ulp.
*/
#define P_IN 12
#define P_H 24
#define P_C 5
#define P_B 8

/* z = the logits for x under the roundings above; round_hidden = 0 keeps the GEMM results and
   the hidden layer unrounded (only the stored logits are rounded), for contrast. */
static void reference_logits(lamp_dtype dtype, const float *x, const double *W1, const double *b1, const double *W2,
                             const double *b2, int round_hidden, double z[P_B][P_C]) {
  for (size_t b = 0; b < P_B; b++) {
    double h[P_H];
    for (size_t k = 0; k < P_H; k++) {
      double a = 0.0;
      for (size_t j = 0; j < P_IN; j++) a += round16(dtype, x[b * P_IN + j]) * W1[k * P_IN + j];
      double v = round_hidden ? round16(dtype, round16(dtype, a) + b1[k]) : a + b1[k];
      h[k] = v > 0.0 ? v : 0.0;
    }
    for (size_t c = 0; c < P_C; c++) {
      double a = 0.0;
      for (size_t k = 0; k < P_H; k++) a += h[k] * W2[c * P_H + k];
      z[b][c] = round16(dtype, (round_hidden ? round16(dtype, a) : a) + b2[c]);
    }
  }
}

/* A batch for the P_IN-P_H-P_C MLP: normal inputs, uniform labels. */
static void policy_batch(uint64_t seed, lamp_tensor **x, lamp_tensor **y) {
  int64_t xs[2] = {P_B, P_IN}, ys[1] = {P_B};
  *x = new_tensor(LAMP_F32, 2, xs);
  *y = new_tensor(LAMP_I32, 1, ys);
  lamp_rng rng;
  lamp_rng_seed(&rng, seed);
  for (size_t i = 0; i < P_B * P_IN; i++) fp(*x)[i] = (float)lamp_rng_normal(&rng);
  for (size_t i = 0; i < P_B; i++) ((int32_t *)lamp_tensor_data(*y))[i] = (int32_t)lamp_rng_below(&rng, P_C);
}

static void check_policy(const char *precision, lamp_dtype dtype) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}};
  rig_spec spec = {.seed = 7, .precision = precision, .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = 1};
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(P_IN, P_H), relu(), linear(P_H, P_C)}));
  lamp_tensor *x, *y;
  policy_batch(99, &x, &y);

  /* Weights: 16-bit slab == round16(masters), element by element. */
  lamp_tensor *wt = lamp_model_weights(r.model);
  const float *master = fp(lamp_model_master(r.model));
  assert_int_equal(wt->dtype, dtype);
  const uint16_t *w16 = lamp_tensor_data(wt);
  size_t n = lamp_model_numel(r.model);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(w16[i], dtype == LAMP_F16 ? lamp_f32_to_f16(master[i]) : lamp_f32_to_bf16(master[i]));
  double W[P_H * P_IN + P_H + P_C * P_H + P_C];
  assert_int_equal(n, sizeof W / sizeof W[0]);
  for (size_t i = 0; i < n; i++) W[i] = load_as_f32(dtype, w16, i);
  const double *W1 = W + lamp_model_param_at(r.model, 0)->offset, *b1 = W + lamp_model_param_at(r.model, 1)->offset;
  const double *W2 = W + lamp_model_param_at(r.model, 2)->offset, *b2 = W + lamp_model_param_at(r.model, 3)->offset;

  double z[P_B][P_C], z_unrounded[P_B][P_C];
  reference_logits(dtype, fp(x), W1, b1, W2, b2, 1, z);
  reference_logits(dtype, fp(x), W1, b1, W2, b2, 0, z_unrounded);

  /* The model's own forward: 16-bit logits within 1 ulp of the reference. */
  const lamp_tensor *logits;
  OK(lamp_model_forward(r.model, x, 0, &logits));
  assert_int_equal(logits->dtype, dtype); /* the output activation is stored in 16 bits */
  double got[P_B][P_C];
  int exact = 0, misses = 0;
  for (size_t b = 0; b < P_B; b++)
    for (size_t c = 0; c < P_C; c++) {
      got[b][c] = load_as_f32(dtype, lamp_tensor_data(logits), b * P_C + c);
      assert_near(got[b][c], z[b][c], ulp16(dtype, z[b][c]));
      exact += got[b][c] == z[b][c];
      misses += fabs(got[b][c] - z_unrounded[b][c]) > ulp16(dtype, z_unrounded[b][c]);
    }
  /* The comparison has teeth: a reference that keeps the hidden layer unrounded (only the
     logits rounded) misses some logits by more than 1 ulp. */
  assert_true(misses > 0);

  /*
  ** The loss in double from the widened 16-bit logits. The kernel exponentiates in fp32 (1 ulp,
  ** 6e-8 relative per term) and sums and takes the log in double: agreement to 1e-6 relative.
  ** A 16-bit computation would not be: ce16 below, the same formula with every intermediate
  ** rounded to 16 bits, lands 6.8e-5 (fp16) and 1.5e-3 (bf16) relative away from it on this
  ** batch, so the comparison can tell the two apart (asserted: more than 10x the tolerance).
  */
  double ce = 0.0, ce16 = 0.0;
  for (size_t b = 0; b < P_B; b++) {
    int label = ((int32_t *)lamp_tensor_data(y))[b];
    double mx = -INFINITY;
    for (size_t c = 0; c < P_C; c++) mx = fmax(mx, got[b][c]);
    double s = 0.0, s16 = 0.0;
    for (size_t c = 0; c < P_C; c++) {
      s += exp(got[b][c] - mx);
      s16 = round16(dtype, s16 + round16(dtype, exp(round16(dtype, got[b][c] - mx))));
    }
    ce += log(s) - (got[b][label] - mx);
    ce16 += round16(dtype, round16(dtype, log(s16)) - round16(dtype, got[b][label] - mx));
  }
  ce /= P_B;
  ce16 /= P_B;
  OK(lamp_trainer_step(r.t, x, y));
  double reported = rig_stats(&r).last_loss;
  assert_near(reported, ce, 1e-6 * ce);
  assert_true(fabs(ce16 - ce) > 10 * 1e-6 * ce);
  print_message("%s: %d of %d logits bit-equal to the reference, the rest within 1 ulp (%d beyond 1 ulp of the "
                "unrounded-hidden reference); loss %.9g, double %.9g (rel %.2g), 16-bit arithmetic would give "
                "%.6g (rel %.2g)\n",
                precision, exact, P_B * P_C, misses, reported, ce, fabs(reported - ce) / ce, ce16,
                fabs(ce16 - ce) / ce);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

static void test_fp16_policy_rounds_where_stated(void **state) {
  (void)state;
  check_policy("fp16", LAMP_F16);
}

static void test_bf16_policy_rounds_where_stated(void **state) {
  (void)state;
  check_policy("bf16", LAMP_BF16);
}

/*
** Where the GEMM reads bf16 natively (oneDNN's on a CPU with AVX512_BF16), the layers read the
** bf16 slab itself, which the optimizer writes in its own pass (weights_out), instead of rounding
** the fp32 masters into GEMM operands at every forward; elsewhere they read the masters and the
** model offers no slab to write. Either way the slab holds round(master) after every step.
*/
static void test_bf16_layers_read_the_slab_the_optimizer_writes(void **state) {
  (void)state;
  static const lamp_option sgd_opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.seed = 7, .precision = "bf16", .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = 1};
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(P_IN, P_H), relu(), linear(P_H, P_C)}));
  lamp_tensor *x, *y;
  policy_batch(5, &x, &y);
  int native = lamp_device_has(lamp_model_get_config(r.model)->device, LAMP_CAP_NATIVE_BF16_GEMM);
  lamp_dtype out_dtype;
  void *out = lamp_model_weights_out(r.model, &out_dtype);
  if (native) {
    assert_ptr_equal(out, lamp_tensor_data(lamp_model_weights(r.model)));
    assert_int_equal(out_dtype, LAMP_BF16);
  } else {
    assert_null(out);
  }
  size_t n = lamp_model_numel(r.model);
  for (int step = 0; step < 5; step++) {
    OK(lamp_trainer_step(r.t, x, y));
    const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(r.model));
    const float *master = fp(lamp_model_master(r.model));
    for (size_t i = 0; i < n; i++)
      if (w16[i] != lamp_f32_to_bf16(master[i])) fail_msg("step %d: weight %zu is not round(master)", step + 1, i);
  }
  print_message("bf16 GEMM %s: the layers read %s\n", native ? "native" : "widened",
                native ? "the bf16 slab" : "the fp32 masters");
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

/* ---- 5. activation memory ------------------------------------------------------------------- */
/*
** MLP 64-256-10, batch 32, one training step under each policy, trainers built and freed one
** after the other. The ledger is global, so each measurement is the peak of the activations
** tag after lamp_ledger_reset_peaks() minus what was in use before the trainer existed.
** Everything tagged as activations (layer outputs, their gradients, dlogits) is stored in the
** activation dtype, so 16-bit policies should need exactly half.
*/
static size_t activation_peak(const char *precision) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}};
  rig_spec spec = {.seed = 7, .precision = precision, .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = 1};
  int64_t xs[2] = {32, 64}, ys[1] = {32};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, xs), *y = new_tensor(LAMP_I32, 1, ys);
  lamp_rng rng;
  lamp_rng_seed(&rng, 1);
  fill_uniform(x, &rng, -1.0, 1.0);
  for (size_t i = 0; i < 32; i++) ((int32_t *)lamp_tensor_data(y))[i] = (int32_t)lamp_rng_below(&rng, 10);
  size_t base = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current;
  lamp_ledger_reset_peaks();
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(64, 256), relu(), linear(256, 10)}));
  OK(lamp_trainer_step(r.t, x, y));
  size_t peak = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).peak - base;
  rig_close(&r);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current, base); /* all given back */
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  return peak;
}

static void test_16bit_activations_take_half_the_memory(void **state) {
  (void)state;
  size_t f32 = activation_peak("fp32"), f16 = activation_peak("fp16"), bf16 = activation_peak("bf16");
  print_message("activation peak: fp32 %zu bytes, fp16 %zu (%.1f %%), bf16 %zu (%.1f %%)\n", f32, f16,
                100.0 * (double)f16 / (double)f32, bf16, 100.0 * (double)bf16 / (double)f32);
  /* The measurement sees the step's buffers: in fp32 at least the logits and dlogits (32 x 10)
     and one hidden activation with its gradient (32 x 256), 4 bytes each. (Today it is exactly
     4 x (2 x 320 + 4 x 8192) = 133632: the Linear and ReLU outputs and both their gradients.) */
  assert_true(f32 >= 4 * (2 * 32 * 10 + 2 * 32 * 256));
  assert_true((double)f16 <= 0.55 * (double)f32);
  assert_true((double)bf16 <= 0.55 * (double)f32);
}

/* ---- 6. a NaN loss under fp32 ---------------------------------------------------------------- */
/* Two clean steps, then a batch with one NaN feature: its row's logits, and so the mean loss,
   are NaN. fp32 has no scaler to skip the step, so the trainer stops, naming step 3. */
static void test_fp32_nan_loss_stops_with_the_step(void **state) {
  (void)state;
  static const lamp_option sgd_opts[] = {{"lr", 0.1}};
  rig_spec spec = {.seed = 7, .precision = "fp32", .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = 1};
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(6, 8), relu(), linear(8, 3)}));
  int64_t xs[2] = {4, 6}, ys[1] = {4};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, xs), *y = new_tensor(LAMP_I32, 1, ys);
  lamp_rng rng;
  lamp_rng_seed(&rng, 2);
  fill_uniform(x, &rng, -1.0, 1.0);
  for (size_t i = 0; i < 4; i++) ((int32_t *)lamp_tensor_data(y))[i] = (int32_t)(i % 3);
  OK(lamp_trainer_step(r.t, x, y));
  OK(lamp_trainer_step(r.t, x, y));
  void *w = snapshot(lamp_model_weights(r.model));
  fp(x)[7] = NAN;
  assert_int_equal(lamp_trainer_step(r.t, x, y), LAMP_ERR_NUMERIC);
  assert_string_equal(lamp_last_error(),
                      "Trainer: loss is NaN at step 3; training cannot continue (lower the learning rate or enable "
                      "clipping)");
  assert_int_equal(rig_stats(&r).steps, 2);
  assert_true(same_bytes(lamp_model_weights(r.model), w)); /* nothing was applied */
  free(w);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp16_gradients_underflow_without_loss_scaling),
      cmocka_unit_test(test_fp16_loss_scaler_recovers_tiny_gradients),
      cmocka_unit_test(test_fp16_without_masters_loses_small_updates),
      cmocka_unit_test(test_fp16_master_weights_keep_small_updates),
      cmocka_unit_test(test_fp16_injected_inf_skips_the_step),
      cmocka_unit_test(test_fp16_policy_rounds_where_stated),
      cmocka_unit_test(test_bf16_policy_rounds_where_stated),
      cmocka_unit_test(test_bf16_layers_read_the_slab_the_optimizer_writes),
      cmocka_unit_test(test_16bit_activations_take_half_the_memory),
      cmocka_unit_test(test_fp32_nan_loss_stops_with_the_step),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
