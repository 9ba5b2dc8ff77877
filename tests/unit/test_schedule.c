/*
** Learning-rate schedules (core/train/schedule.c) in closed form, their validation messages,
** the linear scaling rule, and the trainer's use of them:
**   - constant; cosine base (1 + cos(pi s / T)) / 2 and its min_lr form; linear warm-up
**     base (s + 1) / W for s < W, then the cosine over T - W; s >= T gives min_lr; step
**     base gamma^floor(s / S);
**   - every validation message, exactly, and the trainer refusing a bad schedule with it;
**   - lamp_linear_scaling: base_lr * B_eff / base_batch;
**   - a skipped fp16 step does not advance the schedule: the lr sequence of the steps taken
**     has no gap; stats.effective_batch = batch x world x accum.
** Values are compared with 1e-15 relative tolerance where cos() is involved (a correctly
** rounded cos and the closed form below differ by a few double roundings), exactly otherwise.
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

#define PI 3.14159265358979323846

/* Relative comparison at double precision: a handful of roundings in cos, products, sums. */
#define assert_lr(got, want) assert_near((got), (want), 1e-15 * fmax(1.0, fabs(want)) + 1e-300)

/* ---- closed forms ------------------------------------------------------------------------------- */

static void test_constant(void **state) {
  (void)state;
  lamp_schedule s = {.kind = LAMP_SCHEDULE_CONSTANT};
  const uint64_t steps[] = {0, 1, 7, 1000000, UINT64_MAX};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) assert_true(lamp_schedule_lr(&s, 0.05, steps[i]) == 0.05);
  assert_string_equal(lamp_schedule_name(LAMP_SCHEDULE_CONSTANT), "constant");
}

static void test_cosine_without_warmup(void **state) {
  (void)state;
  const double base = 0.2;
  lamp_schedule s = {.kind = LAMP_SCHEDULE_COSINE, .total = 12};
  /* Landmarks: the start is base exactly; a third of the way cos = 1/2, so 3/4 base; half way
     base / 2; two thirds 1/4 base; from T on, min_lr (0). */
  assert_true(lamp_schedule_lr(&s, base, 0) == base);
  assert_lr(lamp_schedule_lr(&s, base, 4), 0.75 * base);
  assert_lr(lamp_schedule_lr(&s, base, 6), 0.5 * base);
  assert_lr(lamp_schedule_lr(&s, base, 8), 0.25 * base);
  assert_true(lamp_schedule_lr(&s, base, 12) == 0.0);
  assert_true(lamp_schedule_lr(&s, base, 13) == 0.0);
  assert_true(lamp_schedule_lr(&s, base, UINT64_MAX) == 0.0);
  for (uint64_t k = 0; k < 12; k++) {
    assert_lr(lamp_schedule_lr(&s, base, k), base * (1.0 + cos(PI * (double)k / 12.0)) / 2.0);
    assert_true(lamp_schedule_lr(&s, base, k) > lamp_schedule_lr(&s, base, k + 1)); /* strictly falling */
  }
  assert_true(lamp_schedule_lr(&s, base, 11) > 0.0); /* the last step before T still learns */

  /* min_lr: min + (base - min) (1 + cos(pi s / T)) / 2, and min_lr from T on. */
  s.min_lr = 0.02;
  assert_true(lamp_schedule_lr(&s, base, 0) == base);
  assert_lr(lamp_schedule_lr(&s, base, 6), 0.02 + 0.18 * 0.5);
  assert_lr(lamp_schedule_lr(&s, base, 4), 0.02 + 0.18 * 0.75);
  for (uint64_t k = 0; k < 12; k++)
    assert_lr(lamp_schedule_lr(&s, base, k), 0.02 + (base - 0.02) * (1.0 + cos(PI * (double)k / 12.0)) / 2.0);
  assert_true(lamp_schedule_lr(&s, base, 12) == 0.02);
  assert_true(lamp_schedule_lr(&s, base, 500) == 0.02);
  assert_string_equal(lamp_schedule_name(LAMP_SCHEDULE_COSINE), "cosine");
}

static void test_cosine_with_warmup(void **state) {
  (void)state;
  const double base = 0.4;
  lamp_schedule s = {.kind = LAMP_SCHEDULE_COSINE, .total = 12, .warmup = 4, .min_lr = 0.04};
  /* Warm-up: base (s + 1) / W, so the first step is base / W (not 0) and step W - 1 reaches base. */
  assert_true(lamp_schedule_lr(&s, base, 0) == 0.1);
  assert_true(lamp_schedule_lr(&s, base, 1) == 0.2);
  assert_lr(lamp_schedule_lr(&s, base, 2), 0.3);
  assert_true(lamp_schedule_lr(&s, base, 3) == base);
  /* Then the cosine over T - W = 8 steps, from base at step W. */
  assert_true(lamp_schedule_lr(&s, base, 4) == base);
  assert_lr(lamp_schedule_lr(&s, base, 8), 0.04 + 0.36 * 0.5);
  for (uint64_t k = 4; k < 12; k++)
    assert_lr(lamp_schedule_lr(&s, base, k), 0.04 + 0.36 * (1.0 + cos(PI * (double)(k - 4) / 8.0)) / 2.0);
  assert_true(lamp_schedule_lr(&s, base, 12) == 0.04);
  assert_true(lamp_schedule_lr(&s, base, 99) == 0.04);
  /* warmup = 1: a one-step warm-up is base at once. */
  lamp_schedule one = {.kind = LAMP_SCHEDULE_COSINE, .total = 3, .warmup = 1};
  assert_true(lamp_schedule_lr(&one, base, 0) == base);
  assert_true(lamp_schedule_lr(&one, base, 1) == base);
  assert_lr(lamp_schedule_lr(&one, base, 2), base * 0.5);
}

static void test_step(void **state) {
  (void)state;
  lamp_schedule s = {.kind = LAMP_SCHEDULE_STEP, .step_size = 3, .gamma = 0.5};
  /* Powers of 1/2 are exact: base gamma^floor(s / 3). */
  const double want[] = {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125};
  for (uint64_t k = 0; k < 10; k++) assert_true(lamp_schedule_lr(&s, 1.0, k) == want[k]);
  s.gamma = 0.1;
  s.step_size = 5;
  assert_true(lamp_schedule_lr(&s, 0.3, 4) == 0.3);
  assert_lr(lamp_schedule_lr(&s, 0.3, 5), 0.3 * 0.1);
  assert_lr(lamp_schedule_lr(&s, 0.3, 14), 0.3 * 0.1 * 0.1);
  s.gamma = 1.0; /* allowed: a constant */
  assert_true(lamp_schedule_lr(&s, 0.3, 1000) == 0.3);
  assert_string_equal(lamp_schedule_name(LAMP_SCHEDULE_STEP), "step");
}

/* ---- validation ------------------------------------------------------------------------------ */

static void expect_invalid(lamp_schedule s, const char *message) {
  assert_int_equal(lamp_schedule_validate(&s), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), message);
}

static void test_validation_messages(void **state) {
  (void)state;
  assert_int_equal(lamp_schedule_validate(&(lamp_schedule){.kind = LAMP_SCHEDULE_CONSTANT}), LAMP_OK);
  assert_int_equal(lamp_schedule_validate(&(lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 1}), LAMP_OK);
  assert_int_equal(lamp_schedule_validate(&(lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .warmup = 9}),
                   LAMP_OK);
  assert_int_equal(lamp_schedule_validate(&(lamp_schedule){.kind = LAMP_SCHEDULE_STEP, .step_size = 1, .gamma = 1}),
                   LAMP_OK);
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE}, "schedule: cosine needs total > 0 steps");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .warmup = 10},
                 "schedule: warmup (10 steps) must be shorter than total (10)");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .warmup = 25},
                 "schedule: warmup (25 steps) must be shorter than total (10)");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .min_lr = -0.5},
                 "schedule: min_lr must be a finite number >= 0, got -0.5");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .min_lr = NAN},
                 "schedule: min_lr must be a finite number >= 0, got nan");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 10, .min_lr = INFINITY},
                 "schedule: min_lr must be a finite number >= 0, got inf");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_STEP, .gamma = 0.5}, "schedule: step needs step_size > 0 steps");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_STEP, .step_size = 2, .gamma = 0},
                 "schedule: gamma must be in (0, 1], got 0");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_STEP, .step_size = 2, .gamma = 1.5},
                 "schedule: gamma must be in (0, 1], got 1.5");
  expect_invalid((lamp_schedule){.kind = LAMP_SCHEDULE_STEP, .step_size = 2, .gamma = NAN},
                 "schedule: gamma must be in (0, 1], got nan");
  expect_invalid((lamp_schedule){.kind = (lamp_schedule_kind)7}, "schedule: unknown kind 7");
}

static void test_trainer_refuses_a_bad_schedule(void **state) {
  (void)state;
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  OK(lamp_precision_open(&prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&comm, "single", NULL, 0));
  OK(lamp_optim_open(&optim, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = linear(2, 2);
  lamp_trainer_config cfg = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                             .device = LAMP_CPU, .accum = 1,
                             .schedule = {.kind = LAMP_SCHEDULE_COSINE, .total = 5, .warmup = 5}};
  lamp_trainer *t = NULL;
  assert_int_equal(lamp_trainer_new(&t, &cfg), LAMP_ERR_INVALID_ARG);
  assert_null(t);
  assert_string_equal(lamp_last_error(), "schedule: warmup (5 steps) must be shorter than total (5)");
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
}

/* ---- linear scaling ----------------------------------------------------------------------------- */

static void test_linear_scaling(void **state) {
  (void)state;
  /* 0.1 * 1024 / 256: scaling by powers of two is exact, and 4 * 0.1 rounds to the double 0.4. */
  assert_true(lamp_linear_scaling(0.1, 256, 1024) == 0.4);
  assert_true(lamp_linear_scaling(0.1, 256, 256) == 0.1);
  assert_true(lamp_linear_scaling(0.1, 256, 128) == 0.05);
  assert_lr(lamp_linear_scaling(0.05, 128, 384), 0.15);
  /* B_eff = 32 per rank x 4 ranks x 2 accumulation steps = 256: twice the base batch 128. */
  assert_lr(lamp_linear_scaling(0.05, 128, 32 * 4 * 2), 0.1);
}

/* ---- through the trainer ------------------------------------------------------------------------- */

#define T_IN 6
#define T_C 3
#define T_B 4

typedef struct micro_batches {
  lamp_tensor *x[2], *y[2];
} micro_batches;

static void micro_batches_make(micro_batches *d, int64_t rows) {
  lamp_rng rng;
  lamp_rng_seed(&rng, 4);
  int64_t xs[2] = {rows, T_IN}, ys[1] = {rows};
  for (int k = 0; k < 2; k++) {
    d->x[k] = new_tensor(LAMP_F32, 2, xs);
    d->y[k] = new_tensor(LAMP_I32, 1, ys);
    fill_uniform(d->x[k], &rng, -1.0, 1.0);
    for (int64_t i = 0; i < rows; i++) ((int32_t *)lamp_tensor_data(d->y[k]))[i] = (int32_t)lamp_rng_below(&rng, T_C);
  }
}

static void micro_batches_free(micro_batches *d) {
  for (int k = 0; k < 2; k++) {
    lamp_tensor_release(d->x[k]);
    lamp_tensor_release(d->y[k]);
  }
}

/*
** fp16, accum 2, sgd lr 0.3 under a warm-up cosine (W = 2, T = 6, min_lr 0.03). Eight groups;
** into group 3 an inf is poked between its micro-steps (as an overflow in the first backward
** would leave it), so that group is skipped. The seven steps taken must then use lr(0), lr(1),
** ..., lr(6) in order, with no index lost to the skip; the last one is lr(6) = min_lr.
*/
static void test_skipped_step_does_not_advance_the_schedule(void **state) {
  (void)state;
  const lamp_schedule sched = {.kind = LAMP_SCHEDULE_COSINE, .total = 6, .warmup = 2, .min_lr = 0.03};
  static const lamp_option sgd_opts[] = {{"lr", 0.3}, {"momentum", 0.9}};
  rig_spec spec = {.precision = "fp16", .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = 2,
                   .schedule = sched, .seed = 5};
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(T_IN, 8), relu(), linear(8, T_C)}));
  micro_batches d;
  micro_batches_make(&d, T_B);
  double lrs[8];
  int taken = 0;
  for (int g = 1; g <= 8; g++) {
    OK(lamp_trainer_step(r.t, d.x[0], d.y[0]));
    if (g == 3) fp(lamp_model_grads(r.model))[2] = INFINITY;
    OK(lamp_trainer_step(r.t, d.x[1], d.y[1]));
    lamp_trainer_stats st = rig_stats(&r);
    assert_int_equal(st.micro_steps, 2 * g);
    assert_int_equal(st.skipped_steps, g >= 3 ? 1 : 0);
    assert_int_equal(st.steps, g >= 3 ? g - 1 : g);
    if (g == 3) {
      assert_true(st.lr == lrs[taken - 1]); /* the skipped step took no lr */
      assert_true(st.loss_scale == 32768.0);
      continue;
    }
    lrs[taken] = st.lr;
    /* Step index = steps taken before this one: exactly the schedule's value, same arithmetic. */
    if (st.lr != lamp_schedule_lr(&sched, 0.3, (uint64_t)taken))
      fail_msg("group %d (step %d taken): lr %.17g, schedule says %.17g for index %d", g, taken + 1, st.lr,
               lamp_schedule_lr(&sched, 0.3, (uint64_t)taken), taken);
    taken++;
  }
  assert_int_equal(taken, 7);
  /* The sequence itself, in closed form: 0.15, 0.3 (warm-up), then the cosine from 0.3 over
     4 steps, then min_lr. A gap would show as lr(3) = 0.165 right after lr(1). */
  assert_lr(lrs[0], 0.15);
  assert_lr(lrs[1], 0.3);
  assert_lr(lrs[2], 0.3);
  assert_lr(lrs[3], 0.03 + 0.27 * (1.0 + cos(PI / 4)) / 2);
  assert_lr(lrs[4], 0.03 + 0.27 * 0.5);
  assert_lr(lrs[5], 0.03 + 0.27 * (1.0 + cos(3 * PI / 4)) / 2);
  assert_true(lrs[6] == 0.03);
  print_message("lr per step taken (group 3 skipped): %.4g %.4g %.4g %.4g %.4g %.4g %.4g\n", lrs[0], lrs[1], lrs[2],
                lrs[3], lrs[4], lrs[5], lrs[6]);
  micro_batches_free(&d);
  rig_close(&r);
}

/* B_eff = batch x world x accum, in the stats and in the trainer's first info line. */
static void check_effective_batch(const char *comm, int accum, int64_t rows, size_t want, const char *line) {
  static const lamp_option sgd_opts[] = {{"lr", 0.1}};
  rig_spec spec = {.comm = comm, .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = accum};
  micro_batches d;
  micro_batches_make(&d, rows);
  capture_start();
  rig r;
  rig_open(&r, &spec, linear(T_IN, T_C));
  for (int k = 0; k < accum; k++) OK(lamp_trainer_step(r.t, d.x[k % 2], d.y[k % 2]));
  capture_stop();
  lamp_trainer_stats st = rig_stats(&r);
  assert_int_equal(st.batch, (size_t)rows);
  assert_int_equal(st.effective_batch, want);
  assert_int_equal(st.steps, 1);
  if (strstr(captured.other, line) == NULL) fail_msg("no line '%s' in the log:\n%s", line, captured.other);
  rig_close(&r);
  micro_batches_free(&d);
}

static void test_effective_batch(void **state) {
  (void)state;
  check_effective_batch("single", 1, 4, 4, "trainer: B_eff = 4 (batch 4 x 1 rank x accum 1), lr 0.1 at the first step\n");
  check_effective_batch("single", 3, 5, 15, "trainer: B_eff = 15 (batch 5 x 1 rank x accum 3), lr 0.1 at the first step\n");
  check_effective_batch(COUNTING_COMM, 3, 5, 30,
                        "trainer: B_eff = 30 (batch 5 x 2 ranks x accum 3), lr 0.1 at the first step\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_constant),
      cmocka_unit_test(test_cosine_without_warmup),
      cmocka_unit_test(test_cosine_with_warmup),
      cmocka_unit_test(test_step),
      cmocka_unit_test(test_validation_messages),
      cmocka_unit_test(test_trainer_refuses_a_bad_schedule),
      cmocka_unit_test(test_linear_scaling),
      cmocka_unit_test(test_skipped_step_does_not_advance_the_schedule),
      cmocka_unit_test(test_effective_batch),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
