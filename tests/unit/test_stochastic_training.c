/*
** Stochastic rounding in training (LAMP_POLICY_STOCHASTIC_ROUNDING, the fp16 and bf16 plugins'
** stochastic_rounding option):
**   1. The model rounds the fp32 slab into the 16-bit weights with lamp_round_stochastic keyed by
**      (seed, step) after an update, to nearest at step 0 and without the flag; with masters the
**      layers then read those weights (not the masters rounded to nearest); it offers no fused
**      weights_out slab to the optimizer.
**   2. fp16 without masters, updates of 1e-4 to a weight of 1 (a tenth of the fp16 spacing, which
**      rounding to nearest loses every time: test_mixed_precision): the weight after 100 steps is
**      exactly the replay of sgd's fp32 update and the rounding with the words of (seed 7, step,
**      element 0), and it moved. The real sgd plugin writes weights_out when asked, so this also
**      shows the core did not ask.
**   3. With masters: the masters are unchanged by the rounding, the 16-bit weight is the last
**      step's stochastic rounding of the master.
**   4. A policy asking for it with f32 weights is refused, with why.
**   5. A resume continues the checkpoint's rounding, even under another seed: 3 steps, a save, a
**      trainer of seed 8 that resumes and takes 3 more ends with the bytes of 6 straight steps of
**      seed 7 (and a fresh trainer of seed 8 does not); its checkpoint says seed 7.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "nn/model.h"
#include "tensor/philox.h"
#include "tensor/stochastic_round.h"
#include "test_support.h"
#include "train/trainer.h"
#include "trainer_rig.h"

#define FAILS(expr, code, message)                                                    \
  do {                                                                                \
    assert_int_equal((expr), (code));                                                 \
    assert_string_equal(lamp_last_error(), (message));                                \
  } while (0)

/* ---- 1. the model ------------------------------------------------------------------------------ */

static lamp_model *fp16_model(int masters, int stochastic) {
  lamp_model *m;
  lamp_layer *root = linear(1, 1);
  OK(lamp_model_new(&m, root));
  lamp_layer_release(root); /* the model holds its own reference */
  lamp_model_config c = {.device = LAMP_CPU, .weight_dtype = LAMP_F16, .compute_dtype = LAMP_F16,
                         .activation_dtype = LAMP_F16, .master_weights = masters, .seed = 5,
                         .grad_dtype = LAMP_F32, .stochastic_rounding = stochastic};
  OK(lamp_model_build(m, &c));
  return m;
}

/* The forward of x = 1 through Linear(1 -> 1): the weight the layer read (its bias is 0). */
static uint16_t forward_one(lamp_model *m) {
  int64_t shape[2] = {1, 1};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, shape);
  fp(x)[0] = 1.0f;
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 0, &y));
  assert_int_equal(y->dtype, LAMP_F16);
  uint16_t out = ((const uint16_t *)lamp_tensor_data(y))[0];
  lamp_tensor_release(x);
  return out;
}

static void test_model_rounds_with_the_step_key(void **state) {
  (void)state;
  const float w = 1.0f + 0x1p-12f; /* a quarter of the way from 1 to the next fp16, 1 + 2^-10 */
  for (int masters = 0; masters < 2; masters++) {
    lamp_model *m = fp16_model(masters, 1);
    lamp_dtype dtype;
    assert_null(lamp_model_weights_out(m, &dtype)); /* the core rounds, not the optimizer */
    float *slab = lamp_model_trainable(m);
    slab[0] = w;
    slab[1] = 0.0f;
    OK(lamp_model_update_weights(m, 5, 0)); /* step 0: to nearest */
    const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(m));
    assert_int_equal(w16[0], 0x3c00);
    assert_int_equal(forward_one(m), 0x3c00);
    /* The first step whose word rounds up (one in four do), then one that rounds down. */
    uint64_t up = 1, down = 1;
    while (lamp_f32_to_f16_sr(w, lamp_philox_word(5, up, 0)) != 0x3c01) up++;
    while (lamp_f32_to_f16_sr(w, lamp_philox_word(5, down, 0)) != 0x3c00) down++;
    if (!masters) slab[0] = w; /* without masters the step's fp32 copy is reloaded before each update */
    OK(lamp_model_update_weights(m, 5, up));
    uint16_t want[2];
    OK(lamp_round_stochastic(LAMP_CPU, want, LAMP_F16, slab, 2, 5, up));
    assert_memory_equal(lamp_tensor_data(lamp_model_weights(m)), want, sizeof want);
    assert_int_equal(w16[0], 0x3c01);
    assert_int_equal(forward_one(m), 0x3c01); /* what the layer reads, masters or not */
    if (!masters) slab[0] = w;
    OK(lamp_model_update_weights(m, 5, down));
    assert_int_equal(w16[0], 0x3c00);
    assert_int_equal(forward_one(m), 0x3c00);
    lamp_model_free(m);
  }
  /* Without the flag: to nearest at any step, and the fused slab is offered (no masters). */
  lamp_model *m = fp16_model(0, 0);
  lamp_dtype dtype;
  assert_non_null(lamp_model_weights_out(m, &dtype));
  assert_int_equal(dtype, LAMP_F16);
  lamp_model_trainable(m)[0] = w;
  OK(lamp_model_update_weights(m, 5, 1));
  assert_int_equal(((const uint16_t *)lamp_tensor_data(lamp_model_weights(m)))[0], 0x3c00);
  lamp_model_free(m);
}

/* ---- 2, 3. small updates through the trainer ------------------------------------------------ */
/*
** test_mixed_precision's setting: Linear(1 -> 2), x = 1, labels 0, W = (1, 0), bias = (0, 30), a
** saturated softmax, so the unscaled gradient of W_0 is exactly -1 at every step, and sgd with
** lr 1e-4 adds (float)1e-4 to it in fp32 at every step.
*/
#define SR_B 4
#define SR_STEPS 100
#define SR_LR 1e-4
#define SR_SEED 7

static void small_update_rig(rig *r, int masters, lamp_tensor **x, lamp_tensor **y) {
  static const lamp_option sgd_opts[] = {{"lr", SR_LR}};
  lamp_option prec_opts[] = {{"master_weights", masters}, {"stochastic_rounding", 1}};
  rig_spec spec = {.seed = SR_SEED, .precision = "fp16", .prec_opts = prec_opts, .n_prec_opts = 2,
                   .optim_opts = sgd_opts, .n_optim_opts = 1, .accum = 1};
  rig_open(r, &spec, linear(1, 2));
  const float w[2] = {1.0f, 0.0f}, b[2] = {0.0f, 30.0f};
  set_param(r->model, 0, w);
  set_param(r->model, 1, b);
  int64_t xs[2] = {SR_B, 1}, ys[1] = {SR_B};
  *x = new_tensor(LAMP_F32, 2, xs);
  *y = new_tensor(LAMP_I32, 1, ys);
  for (size_t i = 0; i < SR_B; i++) {
    fp(*x)[i] = 1.0f;
    ((int32_t *)lamp_tensor_data(*y))[i] = 0;
  }
}

static void test_without_masters_small_updates_survive_on_average(void **state) {
  (void)state;
  rig r;
  lamp_tensor *x, *y;
  small_update_rig(&r, 0, &x, &y);
  assert_null(lamp_model_master(r.model));
  float replay = 1.0f, lr = (float)SR_LR;
  for (uint64_t s = 1; s <= SR_STEPS; s++) {
    OK(lamp_trainer_step(r.t, x, y));
    float updated = replay - lr * -1.0f; /* the fp32 copy after sgd's update */
    replay = lamp_f16_to_f32(lamp_f32_to_f16_sr(updated, lamp_philox_word(SR_SEED, s, 0)));
  }
  const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(r.model));
  assert_int_equal(w16[0], lamp_f32_to_f16(replay));
  /* Each step rounds up with p = 1e-4 / 2^-10 = 0.1024: about 10 of 100 steps, where rounding to
     nearest never moves (the weight would be 1.0, 0x3c00). */
  double moved = (lamp_f16_to_f32(w16[0]) - 1.0) / 0x1p-10;
  print_message("fp16 without masters, stochastic rounding: weight %.9g after %d steps of +1e-4 (%g steps of the "
                "fp16 spacing; the masters reach 1.01)\n",
                lamp_f16_to_f32(w16[0]), SR_STEPS, moved);
  assert_true(moved >= 1.0 && fabs(moved - 10.24) < 6 * sqrt(100 * 0.1024 * 0.8976));
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

static void test_with_masters_the_weight_is_the_masters_stochastic_rounding(void **state) {
  (void)state;
  rig r;
  lamp_tensor *x, *y;
  small_update_rig(&r, 1, &x, &y);
  for (int s = 0; s < SR_STEPS; s++) OK(lamp_trainer_step(r.t, x, y));
  float replay = 1.0f, lr = (float)SR_LR;
  for (int s = 0; s < SR_STEPS; s++) replay -= lr * -1.0f;
  float master = fp(lamp_model_master(r.model))[0];
  assert_true(master == replay);
  const uint16_t *w16 = lamp_tensor_data(lamp_model_weights(r.model));
  assert_int_equal(w16[0], lamp_f32_to_f16_sr(master, lamp_philox_word(SR_SEED, SR_STEPS, 0)));
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
}

/* ---- 4. f32 weights --------------------------------------------------------------------------- */

/* A Trainer with the precision plugin at `path` must be refused with `message`. */
static void expect_policy_refused(const char *path, const char *message) {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  OK(lamp_precision_open(&prec, path, NULL, 0));
  OK(lamp_comm_open(&comm, "single", NULL, 0));
  OK(lamp_optim_open(&optim, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = linear(2, 2);
  lamp_trainer_config cfg = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                             .device = LAMP_CPU, .accum = 1};
  lamp_trainer *t = NULL;
  FAILS(lamp_trainer_new(&t, &cfg), LAMP_ERR_UNSUPPORTED, message);
  assert_null(t);
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
}

static void test_f32_weights_are_refused(void **state) {
  (void)state;
  expect_policy_refused(LAMP_BAD_PLUGIN_DIR "/srf32.so",
                        "srf32: policy asks for stochastic rounding with f32 weights; it rounds fp32 values into f16 or "
                        "bf16 weights, and f32 weights have nothing to round");
}

/* The flag's bit from a plugin built before 1.4 meant nothing; a bit this core does not know is a
   request it cannot honour. Both are refused rather than guessed at. */
static void test_flags_the_plugin_or_core_cannot_mean_are_refused(void **state) {
  (void)state;
  expect_policy_refused(LAMP_BAD_PLUGIN_DIR "/sr13.so",
                        "sr13: policy sets flag 0x4, stochastic rounding since plugin ABI 1.4, but the plugin was built "
                        "for ABI 1.3");
  char want[256];
  snprintf(want, sizeof want, "unknownflag: policy flags 0x81 include 0x80, which this core (plugin ABI %d.%d) does not know",
           LAMP_ABI_MAJOR, LAMP_ABI_MINOR);
  expect_policy_refused(LAMP_BAD_PLUGIN_DIR "/unknownflag.so", want);
}

/* ---- 5. resume ------------------------------------------------------------------------------- */

#define RS_B 8

static lamp_tensor *rs_x, *rs_y;

static void rs_open(rig *r, uint64_t seed) {
  static const lamp_option sgd_opts[] = {{"lr", 0.05}, {"momentum", 0.9}};
  static const lamp_option prec_opts[] = {{"master_weights", 0}, {"stochastic_rounding", 1}};
  rig_spec spec = {.seed = seed, .precision = "bf16", .prec_opts = prec_opts, .n_prec_opts = 2,
                   .optim_opts = sgd_opts, .n_optim_opts = 2, .accum = 1};
  lamp_layer *children[3] = {linear(6, 16), relu(), linear(16, 3)};
  rig_open(r, &spec, seq(3, children));
  if (seed != SR_SEED) { /* the same starting weights, so that only the rounding's key differs */
    rig first;
    rs_open(&first, SR_SEED);
    const lamp_tensor *w = lamp_model_weights(first.model);
    memcpy(lamp_tensor_data(lamp_model_weights(r->model)), lamp_tensor_data(w), lamp_tensor_nbytes(w));
    rig_close(&first);
  }
}

static void rs_steps(rig *r, int n) {
  for (int s = 0; s < n; s++) OK(lamp_trainer_step(r->t, rs_x, rs_y));
}

static void *weights_copy(rig *r) {
  const lamp_tensor *w = lamp_model_weights(r->model);
  void *copy = malloc(lamp_tensor_nbytes(w));
  assert_non_null(copy);
  memcpy(copy, lamp_tensor_data(w), lamp_tensor_nbytes(w));
  return copy;
}

static void test_resume_continues_the_checkpoints_rounding(void **state) {
  (void)state;
  char dir[600], half[700], again[700];
  snprintf(dir, sizeof dir, "%s/stochastic_training", LAMP_TEST_TMP_DIR);
  make_dir(dir);
  snprintf(half, sizeof half, "%s/half.lamp", dir);
  snprintf(again, sizeof again, "%s/again.lamp", dir);
  lamp_rng rng;
  lamp_rng_seed(&rng, 11);
  int64_t xs[2] = {RS_B, 6}, ys[1] = {RS_B};
  rs_x = new_tensor(LAMP_F32, 2, xs);
  rs_y = new_tensor(LAMP_I32, 1, ys);
  fill_uniform(rs_x, &rng, -1.0, 1.0);
  for (int i = 0; i < RS_B; i++) ((int32_t *)lamp_tensor_data(rs_y))[i] = i % 3;

  rig a;
  rs_open(&a, SR_SEED);
  size_t bytes = lamp_tensor_nbytes(lamp_model_weights(a.model));
  rs_steps(&a, 6);
  void *straight = weights_copy(&a);
  rig_close(&a);

  rig b;
  rs_open(&b, SR_SEED);
  rs_steps(&b, 3);
  OK(lamp_trainer_save(b.t, half, NULL, 0));
  rig_close(&b);

  rig c;
  rs_open(&c, 8);
  int found = 0;
  OK(lamp_trainer_resume(c.t, half, NULL, 0, &found));
  assert_true(found);
  rs_steps(&c, 3);
  assert_memory_equal(lamp_tensor_data(lamp_model_weights(c.model)), straight, bytes);
  OK(lamp_trainer_save(c.t, again, NULL, 0));
  rig_close(&c);
  lamp_ckpt *ck;
  int64_t seed;
  OK(lamp_ckpt_open(&ck, again));
  OK(lamp_ckpt_meta_int(ck, "run.seed", &seed));
  assert_int_equal(seed, SR_SEED);
  lamp_ckpt_close(ck);

  rig d; /* seed 8 from the same weights, never resumed: other words, other weights */
  rs_open(&d, 8);
  rs_steps(&d, 6);
  assert_memory_not_equal(lamp_tensor_data(lamp_model_weights(d.model)), straight, bytes);
  rig_close(&d);

  free(straight);
  lamp_tensor_release(rs_x);
  lamp_tensor_release(rs_y);
}

int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_rounds_with_the_step_key),
      cmocka_unit_test(test_without_masters_small_updates_survive_on_average),
      cmocka_unit_test(test_with_masters_the_weight_is_the_masters_stochastic_rounding),
      cmocka_unit_test(test_f32_weights_are_refused),
      cmocka_unit_test(test_flags_the_plugin_or_core_cannot_mean_are_refused),
      cmocka_unit_test(test_resume_continues_the_checkpoints_rounding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
