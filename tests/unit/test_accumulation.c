/*
** Gradient accumulation and the data-parallel path, through the trainer with the real plugins
** (fp32, fp16, sgd, single) and tests/bad_plugins/counting_comm.so, a fake rank 0 of 2 whose
** SUM doubles the buffer (an identical second rank) and logs every call:
**
**   1. accum = 4 x batch 32 equals accum = 1 x batch 128 on the same samples (the micro-batches
**      are the quarters) after 10 sgd-with-momentum steps, to fp32 summation-order rounding;
**      two deliberately wrong accumulations (no 1/A; only the last micro-batch kept) do not.
**   2. Exactly one all-reduce per optimizer step, at the last micro-step, over the whole slab;
**      a "2-rank" run (sum, then / N) equals the single-rank run bit for bit.
**   3. fp16 under accumulation: the scaler is checked and updated once per optimizer step, so
**      with growth_interval 2 the scale doubles every 2 optimizer steps (8 micro-steps).
**   4. Parameter options: lr_mult 0 freezes a parameter; decay = 0 turns sgd's weight decay off
**      for that parameter only; the defaults are weights decay, biases do not.
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

#define IN 20
#define HIDDEN 48
#define CLASSES 5
#define BIG 128 /* samples per optimizer step */
#define A 4     /* micro-batches per optimizer step */
#define MICRO (BIG / A)
#define STEPS 10

static lamp_layer *mlp(void) { return seq(3, (lamp_layer *[]){linear(IN, HIDDEN), relu(), linear(HIDDEN, CLASSES)}); }

/* STEPS batches of BIG samples, and each one's A quarters as separate MICRO-row tensors. */
typedef struct batches {
  lamp_tensor *x[STEPS], *y[STEPS];
  lamp_tensor *qx[STEPS][A], *qy[STEPS][A];
} batches;

static void batches_make(batches *d) {
  lamp_rng rng;
  lamp_rng_seed(&rng, 17);
  int64_t xs[2] = {BIG, IN}, ys[1] = {BIG}, qxs[2] = {MICRO, IN}, qys[1] = {MICRO};
  for (int s = 0; s < STEPS; s++) {
    d->x[s] = new_tensor(LAMP_F32, 2, xs);
    d->y[s] = new_tensor(LAMP_I32, 1, ys);
    for (size_t i = 0; i < BIG * IN; i++) fp(d->x[s])[i] = (float)lamp_rng_normal(&rng);
    for (size_t i = 0; i < BIG; i++) ((int32_t *)lamp_tensor_data(d->y[s]))[i] = (int32_t)lamp_rng_below(&rng, CLASSES);
    for (int q = 0; q < A; q++) {
      d->qx[s][q] = new_tensor(LAMP_F32, 2, qxs);
      d->qy[s][q] = new_tensor(LAMP_I32, 1, qys);
      memcpy(fp(d->qx[s][q]), fp(d->x[s]) + (size_t)q * MICRO * IN, MICRO * IN * sizeof(float));
      memcpy(lamp_tensor_data(d->qy[s][q]), (int32_t *)lamp_tensor_data(d->y[s]) + (size_t)q * MICRO,
             MICRO * sizeof(int32_t));
    }
  }
}

static void batches_free(batches *d) {
  for (int s = 0; s < STEPS; s++) {
    lamp_tensor_release(d->x[s]);
    lamp_tensor_release(d->y[s]);
    for (int q = 0; q < A; q++) {
      lamp_tensor_release(d->qx[s][q]);
      lamp_tensor_release(d->qy[s][q]);
    }
  }
}

typedef enum feed { WHOLE, QUARTERS, LAST_QUARTER } feed;

/*
** Trains STEPS optimizer steps (sgd lr, momentum 0.9, seed 11) and returns the final fp32
** parameters. WHOLE feeds each 128-row batch once (accum 1), QUARTERS its four 32-row
** quarters (accum 4), LAST_QUARTER only its last quarter (accum 1).
*/
static float *train(const batches *d, feed how, double lr, const char *comm, double clip, lamp_trainer_stats *out) {
  lamp_option sgd_opts[] = {{"lr", lr}, {"momentum", 0.9}};
  rig_spec spec = {.comm = comm, .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = how == QUARTERS ? A : 1,
                   .clip = clip, .seed = 11};
  rig r;
  rig_open(&r, &spec, mlp());
  for (int s = 0; s < STEPS; s++) {
    if (how == WHOLE) OK(lamp_trainer_step(r.t, d->x[s], d->y[s]));
    else if (how == LAST_QUARTER) OK(lamp_trainer_step(r.t, d->qx[s][A - 1], d->qy[s][A - 1]));
    else
      for (int q = 0; q < A; q++) OK(lamp_trainer_step(r.t, d->qx[s][q], d->qy[s][q]));
  }
  if (out) *out = rig_stats(&r);
  float *p = params_copy(&r);
  rig_close(&r);
  return p;
}

/* The initial parameters of train()'s model (seed 11), for measuring how far training went. */
static float *initial_params(size_t *n) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}};
  rig_spec spec = {.optim_opts = sgd_opts, .n_optim_opts = 1, .seed = 11};
  rig r;
  rig_open(&r, &spec, mlp());
  *n = lamp_model_numel(r.model);
  float *p = params_copy(&r);
  rig_close(&r);
  return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

/* ---- 1. accum 4 x 32 == accum 1 x 128 --------------------------------------------------------- */

static void test_accum4_of_quarters_equals_batch128(void **state) {
  (void)state;
  batches d;
  batches_make(&d);
  size_t n;
  float *p0 = initial_params(&n);
  lamp_trainer_stats s_whole, s_acc;
  float *whole = train(&d, WHOLE, 0.1, NULL, 0.0, &s_whole);
  float *acc = train(&d, QUARTERS, 0.1, NULL, 0.0, &s_acc);
  /* Wrong on purpose. Summing the micro-batch means without dividing by A is exactly sgd on
     A times the gradient, which with momentum and no weight decay is A times the lr. Keeping
     only the last micro-batch (every backward writing the slab afresh) is its mean over 32
     rows, divided by A: batch 32 with lr / A. */
  float *no_div = train(&d, WHOLE, 0.1 * A, NULL, 0.0, NULL);
  float *last_only = train(&d, LAST_QUARTER, 0.1 / A, NULL, 0.0, NULL);

  assert_int_equal(s_whole.steps, STEPS);
  assert_int_equal(s_acc.steps, STEPS);
  assert_int_equal(s_acc.micro_steps, STEPS * A);
  assert_int_equal(s_acc.samples, STEPS * BIG);
  assert_int_equal(s_acc.batch, MICRO);
  assert_int_equal(s_acc.effective_batch, BIG); /* B_eff = 32 x 1 rank x 4 */
  assert_int_equal(s_whole.effective_batch, BIG);

  /*
  ** The two runs compute the same sums in a different order. dlogits is bit-identical: the
  ** loss gradient's coefficient is S / (A * rows) = 1/128 either way, an exact power of two.
  ** A weight-gradient element is a sum of 128 products, one GEMM over 128 rows against four
  ** GEMMs over 32 rows added into the slab; fp32 reordering moves such a sum by at most
  ** ~128 * 2^-24 of the sum of |terms| (typically sqrt(128) * 2^-24 ~ 7e-7 of it). Over 10
  ** steps these differences feed back through the forward pass and the momentum buffer, but
  ** stay of that relative size. The bound, 1e-5 of the largest parameter movement, is that
  ** worst case with the feedback; the wrong accumulations below sit near 1 on this scale.
  */
  double moved = max_abs_diff(whole, p0, n);
  double diff = max_abs_diff(acc, whole, n);
  double bad1 = max_abs_diff(no_div, whole, n), bad2 = max_abs_diff(last_only, whole, n);
  print_message("largest parameter movement %.4g; accum 4 vs batch 128: max |diff| %.3g (%.3g of it); "
                "without 1/A: %.3g; last micro-batch only: %.3g\n",
                moved, diff, diff / moved, bad1 / moved, bad2 / moved);
  assert_true(moved > 0.05);
  assert_true(diff <= 1e-5 * moved);
  assert_true(bad1 >= 0.1 * moved);
  assert_true(bad2 >= 0.1 * moved);
  /* The per-element view of the same bound, on the parameters themselves. */
  for (size_t i = 0; i < n; i++) assert_near(acc[i], whole[i], 1e-5 * moved);
  free(p0);
  free(whole);
  free(acc);
  free(no_div);
  free(last_only);
  batches_free(&d);
}

/* ---- 2. one all-reduce per optimizer step ----------------------------------------------------- */

static void check_all_reduce_count(const batches *d, int accum) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.comm = COUNTING_COMM, .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = accum, .seed = 11};
  capture_start();
  rig r;
  rig_open(&r, &spec, mlp());
  size_t numel = lamp_model_numel(r.model);
  /* Construction checks that the ranks agree on the model: one small all-reduce (4 values);
     the initial broadcast is none. Training's own all-reduces are counted from here. */
  assert_int_equal(captured.all_reduces, 1);
  assert_int_equal(captured.last_count, 4);
  int micro = 0;
  for (int s = 0; s < STEPS; s++)
    for (int q = 0; q < accum; q++) {
      const lamp_tensor *x = accum == 1 ? d->x[s] : d->qx[s][q], *y = accum == 1 ? d->y[s] : d->qy[s][q];
      OK(lamp_trainer_step(r.t, x, y));
      micro++;
      /* None before the last micro-step of a group, exactly one at it, over the whole slab. */
      if (captured.all_reduces != 1 + micro / accum)
        fail_msg("accum %d: after micro-step %d, %d all-reduces (expected 1 + %d)", accum, micro, captured.all_reduces,
                 micro / accum);
      if (captured.all_reduces > 1) assert_int_equal(captured.last_count, numel);
    }
  lamp_trainer_stats st = rig_stats(&r);
  capture_stop();
  assert_int_equal(st.world, 2);
  assert_int_equal(st.steps, STEPS);
  assert_int_equal(st.micro_steps, STEPS * accum);
  assert_int_equal(captured.all_reduces, 1 + STEPS);
  assert_true(captured.numbering_ok);
  print_message("counting_comm, accum %d: %d micro-steps, %d all-reduces of %zu elements (+1 at construction)\n",
                accum, micro, captured.all_reduces - 1, numel);
  rig_close(&r);
}

static void test_one_all_reduce_per_optimizer_step(void **state) {
  (void)state;
  batches d;
  batches_make(&d);
  check_all_reduce_count(&d, A);
  check_all_reduce_count(&d, 1);
  batches_free(&d);
}

/*
** The fake second rank holds the same gradients, so the sum is exactly 2 g and the trainer's
** unscale 1 / (S N) = 1/2 brings back g exactly: both are powers of two. With clipping on, the
** norm is sqrt(4 sum g^2) / 2, also exact (the sum of squares is in double; scaling by 4 and
** taking sqrt are exact for powers of 4). So the 2-rank run equals the single-rank one bit
** for bit, parameters and reported norm alike.
*/
static void test_two_rank_sum_then_average_equals_single_rank(void **state) {
  (void)state;
  batches d;
  batches_make(&d);
  size_t n;
  float *p0 = initial_params(&n);
  lamp_trainer_stats s1, s2;
  lamp_log_set_level(LAMP_LOG_WARN);
  float *single = train(&d, QUARTERS, 0.1, NULL, 0.2, &s1);
  float *two = train(&d, QUARTERS, 0.1, COUNTING_COMM, 0.2, &s2);
  assert_int_equal(s1.world, 1);
  assert_int_equal(s2.world, 2);
  assert_int_equal(s1.effective_batch, MICRO * 1 * A);
  assert_int_equal(s2.effective_batch, MICRO * 2 * A); /* B_eff = batch x world x accum */
  assert_true(s1.grad_norm > 0.2);                   /* clipping was active on the last step */
  assert_true(s2.grad_norm == s1.grad_norm);
  assert_memory_equal(two, single, n * sizeof(float));
  assert_true(max_abs_diff(single, p0, n) > 0.01); /* and they did train */
  print_message("2 ranks (counting_comm) vs 1: parameters bit-identical; last grad norm %.9g in both\n",
                s1.grad_norm);
  free(p0);
  free(single);
  free(two);
  batches_free(&d);
}

/* ---- 3. the fp16 scaler sees optimizer steps, not micro-steps -------------------------------- */

static void test_fp16_scaler_updates_once_per_accumulation_group(void **state) {
  (void)state;
  batches d;
  batches_make(&d);
  static const lamp_option fp16_opts[] = {{"growth_interval", 2}};
  static const lamp_option sgd_opts[] = {{"lr", 0.05}, {"momentum", 0.9}};
  rig_spec spec = {.precision = "fp16", .prec_opts = fp16_opts, .n_prec_opts = 1, .optim_opts = sgd_opts,
                   .n_optim_opts = 2, .accum = A, .seed = 11};
  rig r;
  rig_open(&r, &spec, mlp());
  /*
  ** 8 optimizer steps = 32 micro-steps; the scale grows to 2^16 * 2^4 = 2^20, where dlogits =
  ** (p - onehot) * S / (A * 32) stays below 2^13, far from fp16's 65504: no overflow, no skip.
  ** Were the scaler updated per micro-step, it would double every 2 micro-steps instead.
  */
  int micro = 0;
  for (int s = 0; s < 8; s++)
    for (int q = 0; q < A; q++) {
      OK(lamp_trainer_step(r.t, d.qx[s][q], d.qy[s][q]));
      micro++;
      lamp_trainer_stats st = rig_stats(&r);
      uint64_t steps = (uint64_t)(micro / A);
      double want = ldexp(65536.0, (int)(steps / 2));
      assert_int_equal(st.steps, steps);
      assert_int_equal(st.skipped_steps, 0);
      if (st.loss_scale != want)
        fail_msg("after micro-step %d (%llu optimizer steps): loss scale %g, expected %g", micro,
                 (unsigned long long)steps, st.loss_scale, want);
    }
  assert_true(rig_stats(&r).loss_scale == 1048576.0);
  print_message("fp16, accum 4, growth_interval 2: scale 65536 -> %g after 32 micro-steps (8 steps)\n",
                rig_stats(&r).loss_scale);
  rig_close(&r);
  batches_free(&d);
}

/* ---- 4. parameter options --------------------------------------------------------------------- */

/* Trains `steps` optimizer steps (sgd lr 0.5, the given weight decay, seed 11) after options(t). */
static float *train_with_options(const batches *d, double weight_decay, void (*options)(lamp_trainer *), int steps) {
  lamp_option sgd_opts[] = {{"lr", 0.5}, {"weight_decay", weight_decay}};
  rig_spec spec = {.optim_opts = sgd_opts, .n_optim_opts = 2, .seed = 11};
  rig r;
  rig_open(&r, &spec, mlp());
  if (options) options(r.t);
  for (int s = 0; s < steps; s++) OK(lamp_trainer_step(r.t, d->x[s], d->y[s]));
  float *p = params_copy(&r);
  rig_close(&r);
  return p;
}

/* Parameters of mlp(): 0 = 0.weight, 1 = 0.bias, 2 = 2.weight, 3 = 2.bias. */
static void freeze_first_layer(lamp_trainer *t) {
  OK(lamp_trainer_set_param_options(t, 0, 0.0, 1));
  OK(lamp_trainer_set_param_options(t, 1, 0.0, 0));
}

/* Decay off where it was on (2.weight), on where it was off (0.bias). */
static void swap_decay(lamp_trainer *t) {
  OK(lamp_trainer_set_param_options(t, 2, 1.0, 0));
  OK(lamp_trainer_set_param_options(t, 1, 1.0, 1));
}

/* Over [from, to): a == b bit for bit when decayed is 0, else a - b == -lr wd p0. */
static void check_decay(const float *a, const float *b, const float *p0, size_t from, size_t to, int decayed,
                        const char *what) {
  const double lr = 0.5, wd = 0.1;
  if (!decayed) {
    if (memcmp(a + from, b + from, (to - from) * sizeof(float)) != 0) fail_msg("%s: decay is off, but it decayed", what);
    return;
  }
  for (size_t i = from; i < to; i++) {
    /*
    ** sgd computes p - lr (g + wd p) against p - lr g: each side rounds g + wd p, the product
    ** with lr and the subtraction, each by at most half an fp32 ulp of a value at most
    ** |p0| + lr |g| (that is |b - p0|) in size: 4 such roundings bound the difference.
    */
    double tol = 4 * ldexp(1.0, -24) * (fabs(p0[i]) + fabs((double)b[i] - p0[i]) + 1e-30);
    double got = (double)a[i] - b[i], want = -lr * wd * p0[i];
    if (!(fabs(got - want) <= tol)) fail_msg("%s[%zu]: decay moved it by %.9g, expected %.9g within %.3g", what, i - from, got, want, tol);
  }
}

static void test_param_options_lr_mult_and_decay(void **state) {
  (void)state;
  batches d;
  batches_make(&d);
  static const lamp_option sgd_opts[] = {{"lr", 0.5}};
  rig_spec spec = {.optim_opts = sgd_opts, .n_optim_opts = 1, .seed = 11};
  rig r;
  rig_open(&r, &spec, mlp());
  /* Defaults: weights decay, biases do not; lr_mult 1. */
  const int want_decay[4] = {1, 0, 1, 0};
  const char *want_name[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  size_t off[5];
  for (size_t i = 0; i < 4; i++) {
    double lr_mult;
    int decay;
    OK(lamp_trainer_param_options(r.t, i, &lr_mult, &decay));
    assert_true(lr_mult == 1.0);
    assert_int_equal(decay, want_decay[i]);
    assert_string_equal(lamp_model_param_at(r.model, i)->name, want_name[i]);
    off[i] = lamp_model_param_at(r.model, i)->offset;
  }
  off[4] = lamp_model_numel(r.model);
  assert_int_equal(lamp_trainer_set_param_options(r.t, 4, 1.0, 1), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: no parameter 4 (the model has 4)");
  assert_int_equal(lamp_trainer_set_param_options(r.t, 1, -1.0, 0), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: lr_mult of 0.bias must be a finite number >= 0, got -1");
  assert_int_equal(lamp_trainer_set_param_options(r.t, 1, INFINITY, 0), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: lr_mult of 0.bias must be a finite number >= 0, got inf");
  rig_close(&r);

  size_t n;
  float *p0 = initial_params(&n);
  assert_int_equal(n, off[4]);

  /* lr_mult 0 on the first layer: after 3 steps it is bit-identical to its initial value while
     the second layer moves. (Its gradient is not zero, with weight decay 0.1 on top: only the
     multiplier stops it.) */
  float *frozen = train_with_options(&d, 0.1, freeze_first_layer, 3);
  assert_memory_equal(frozen, p0, off[2] * sizeof(float));
  assert_true(max_abs_diff(frozen + off[2], p0 + off[2], n - off[2]) > 1e-3);

  /* Decay, one step from the same initialisation, so all runs see the same gradients. */
  float *plain = train_with_options(&d, 0.0, NULL, 1);
  float *defaults = train_with_options(&d, 0.1, NULL, 1);
  float *swapped = train_with_options(&d, 0.1, swap_decay, 1);
  assert_true(max_abs_diff(plain, p0, n) > 1e-3);
  check_decay(defaults, plain, p0, off[0], off[1], 1, "defaults: 0.weight");
  check_decay(defaults, plain, p0, off[1], off[2], 0, "defaults: 0.bias");
  check_decay(defaults, plain, p0, off[2], off[3], 1, "defaults: 2.weight");
  check_decay(defaults, plain, p0, off[3], off[4], 0, "defaults: 2.bias");
  check_decay(swapped, plain, p0, off[0], off[1], 1, "swapped: 0.weight");
  check_decay(swapped, plain, p0, off[1], off[2], 1, "swapped: 0.bias");
  check_decay(swapped, plain, p0, off[2], off[3], 0, "swapped: 2.weight");
  check_decay(swapped, plain, p0, off[3], off[4], 0, "swapped: 2.bias");
  free(frozen);
  free(plain);
  free(defaults);
  free(swapped);
  free(p0);
  batches_free(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accum4_of_quarters_equals_batch128),
      cmocka_unit_test(test_one_all_reduce_per_optimizer_step),
      cmocka_unit_test(test_two_rank_sum_then_average_equals_single_rank),
      cmocka_unit_test(test_fp16_scaler_updates_once_per_accumulation_group),
      cmocka_unit_test(test_param_options_lr_mult_and_decay),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
