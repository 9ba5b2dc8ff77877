/*
** What the step refuses to do quietly:
**   1. A precision plugin's loss scale of 0, -1, +inf or NaN stops training at the first step,
**      naming the plugin and the value, before the weights are touched.
**   2. Skipped steps (a static fp16 scale that always overflows) are warnings at the first and
**      every 100th; max_skipped in a row (default 1000) is an error; a negative limit has none.
**      The epoch's result and summary line count them.
**   3. An epoch with no batch is an error naming the loader's size and batch, not a loss of 0;
**      accum is range-checked as given.
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
#include "data/loader.h"
#include "test_support.h"
#include "train/trainer.h"
#include "trainer_rig.h"

#define BADSCALE LAMP_BAD_PLUGIN_DIR "/badscale.so"
#define IN 4
#define B 2

typedef struct batch {
  lamp_tensor *x, *y;
} batch;

static void batch_make(batch *b) {
  int64_t xs[2] = {B, IN}, ys[1] = {B};
  b->x = new_tensor(LAMP_F32, 2, xs);
  b->y = new_tensor(LAMP_I32, 1, ys);
  lamp_rng rng;
  lamp_rng_seed(&rng, 5);
  fill_uniform(b->x, &rng, -1.0, 1.0);
  for (int i = 0; i < B; i++) ((int32_t *)lamp_tensor_data(b->y))[i] = i % 2;
}

static void batch_free(batch *b) {
  lamp_tensor_release(b->x);
  lamp_tensor_release(b->y);
}

/* A trainer over Linear(IN -> 2) with the precision plugin `precision` and its options. */
static lamp_trainer *open_trainer(rig *r, const char *precision, const lamp_option *opts, size_t n_opts,
                                  int64_t max_skipped) {
  memset(r, 0, sizeof *r);
  OK(lamp_precision_open(&r->prec, precision, opts, n_opts));
  OK(lamp_comm_open(&r->comm, "single", NULL, 0));
  OK(lamp_optim_open(&r->optim, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&r->loss));
  lamp_layer *net = linear(IN, 2);
  lamp_trainer_config cfg = {.model = net, .loss = r->loss, .precision = r->prec, .comm = r->comm, .optim = r->optim,
                             .device = LAMP_CPU, .accum = 1, .seed = 3, .max_skipped = max_skipped};
  OK(lamp_trainer_new(&r->t, &cfg));
  lamp_layer_release(net);
  r->model = lamp_trainer_model(r->t);
  return r->t;
}

/* ---- 1. the loss scale is checked every step ------------------------------------------------- */

static void test_bad_loss_scale_stops_at_the_first_step(void **state) {
  (void)state;
  static const char *const shown[4] = {"0", "-1", "inf", "nan"};
  batch b;
  batch_make(&b);
  for (int mode = 0; mode < 4; mode++) {
    const lamp_option opt = {"mode", mode};
    rig r;
    open_trainer(&r, BADSCALE, &opt, 1, 0);
    float *before = params_copy(&r);
    assert_int_equal(lamp_trainer_step(r.t, b.x, b.y), LAMP_ERR_NUMERIC);
    char expected[256];
    snprintf(expected, sizeof expected,
             "Trainer: precision plugin 'badscale' returned loss scale %s at step 1; a loss scale must be a finite number > 0",
             shown[mode]);
    assert_string_equal(lamp_last_error(), expected);
    /* Refused before the forward: nothing was computed, nothing changed. */
    assert_memory_equal(before, lamp_model_trainable(r.model), lamp_model_numel(r.model) * sizeof(float));
    lamp_trainer_stats st = rig_stats(&r);
    assert_int_equal(st.steps + st.skipped_steps + st.micro_steps, 0);
    free(before);
    rig_close(&r);
  }
  batch_free(&b);
}

/* ---- 2. skipped steps --------------------------------------------------------------------------- */

/* fp16 with a static scale of 1e30: every loss gradient overflows fp16, every step is skipped. */
static const lamp_option overflowing[] = {{"dynamic", 0}, {"init_scale", 1e30}};

static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

/* WARN lines only, each on its own line. */
static char warnings[8192];
static void warn_sink(lamp_log_level level, const char *line, void *ud) {
  (void)ud;
  if (level != LAMP_LOG_WARN) return;
  size_t used = strlen(warnings);
  snprintf(warnings + used, sizeof warnings - used, "%s\n", line);
}

static void test_skips_warn_at_the_first_and_every_100th(void **state) {
  (void)state;
  batch b;
  batch_make(&b);
  rig r;
  open_trainer(&r, "fp16", overflowing, 2, 0);
  warnings[0] = '\0';
  lamp_log_set_sink(warn_sink, NULL);
  for (int s = 0; s < 250; s++) OK(lamp_trainer_step(r.t, b.x, b.y));
  lamp_log_set_sink(NULL, NULL);
  lamp_trainer_stats st = rig_stats(&r);
  assert_int_equal(st.steps, 0);
  assert_int_equal(st.skipped_steps, 250);
  assert_int_equal(st.skipped_in_a_row, 250);
  assert_int_equal(count_lines(warnings, "warning: fp16: step "), 3);
  assert_non_null(strstr(warnings,
                         "warning: fp16: step 1 skipped: inf/NaN in the gradients at loss scale 1e+30, now 1e+30 (1 skipped "
                         "so far, 1 in a row); this warning repeats every 100 skipped steps\n"));
  assert_non_null(strstr(warnings, "warning: fp16: step 100 skipped: inf/NaN in the gradients at loss scale 1e+30, now "
                                   "1e+30 (100 skipped so far, 100 in a row)"));
  assert_non_null(strstr(warnings, "warning: fp16: step 200 skipped:"));
  rig_close(&r);
  batch_free(&b);
}

static void test_max_skipped_in_a_row_is_an_error(void **state) {
  (void)state;
  batch b;
  batch_make(&b);
  rig r;
  lamp_log_set_level(LAMP_LOG_ERROR); /* the warnings are test_skips_warn_at_the_first_and_every_100th's */
  open_trainer(&r, "fp16", overflowing, 2, 5);
  for (int s = 0; s < 4; s++) OK(lamp_trainer_step(r.t, b.x, b.y));
  assert_int_equal(lamp_trainer_step(r.t, b.x, b.y), LAMP_ERR_NUMERIC);
  assert_string_equal(lamp_last_error(),
                      "Trainer: 5 optimizer steps in a row skipped for inf/NaN gradients (precision 'fp16', loss scale "
                      "1e+30); training makes no progress: use a smaller or dynamic loss scale, lower the learning rate, "
                      "or raise the Trainer's max_skipped");
  rig_close(&r);

  /* The count goes on across a save and resume: 3 skipped, saved; resumed, the 2nd more is the 5th. */
  open_trainer(&r, "fp16", overflowing, 2, 5);
  for (int s = 0; s < 3; s++) OK(lamp_trainer_step(r.t, b.x, b.y));
  char path[512];
  snprintf(path, sizeof path, "%s/in-a-row.lamp", LAMP_TEST_TMP_DIR);
  make_dir(LAMP_TEST_TMP_DIR);
  OK(lamp_trainer_save(r.t, path, NULL, 0));
  rig_close(&r);
  open_trainer(&r, "fp16", overflowing, 2, 5);
  int found = 0;
  OK(lamp_trainer_resume(r.t, path, NULL, 0, &found));
  assert_true(found);
  assert_int_equal(rig_stats(&r).skipped_in_a_row, 3);
  OK(lamp_trainer_step(r.t, b.x, b.y));
  assert_int_equal(lamp_trainer_step(r.t, b.x, b.y), LAMP_ERR_NUMERIC);
  assert_non_null(strstr(lamp_last_error(), "Trainer: 5 optimizer steps in a row skipped"));
  rig_close(&r);
  remove(path);

  /* The default limit is 1000. */
  open_trainer(&r, "fp16", overflowing, 2, 0);
  for (int s = 0; s < 999; s++) OK(lamp_trainer_step(r.t, b.x, b.y));
  assert_int_equal(lamp_trainer_step(r.t, b.x, b.y), LAMP_ERR_NUMERIC);
  assert_non_null(strstr(lamp_last_error(), "Trainer: 1000 optimizer steps in a row skipped"));
  rig_close(&r);

  /* A negative limit is none. */
  open_trainer(&r, "fp16", overflowing, 2, -1);
  for (int s = 0; s < 1001; s++) OK(lamp_trainer_step(r.t, b.x, b.y));
  assert_int_equal(rig_stats(&r).skipped_in_a_row, 1001);
  lamp_log_set_level(LAMP_LOG_WARN);
  rig_close(&r);
  batch_free(&b);
}

/* A data set of n samples of [1, 2, 2] bytes, labels alternating over 2 classes. */
static lamp_dataset *tiny_dataset(size_t n) {
  lamp_dataset_bytes bytes = {.name = "tiny", .n = n, .channels = 1, .rows = 2, .cols = 2, .classes = 2};
  bytes.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n * IN);
  bytes.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n);
  assert_non_null(bytes.pixels);
  assert_non_null(bytes.labels);
  for (size_t i = 0; i < n * IN; i++) bytes.pixels[i] = (uint8_t)(i * 37u);
  for (size_t i = 0; i < n; i++) bytes.labels[i] = (uint8_t)(i % 2);
  lamp_dataset *ds;
  OK(lamp_dataset_adopt(&ds, &bytes));
  return ds;
}

static lamp_loader *tiny_loader(lamp_dataset *ds, size_t batch, int drop_last) {
  lamp_loader_config cfg = {.batch = batch, .drop_last = drop_last, .world = 1};
  lamp_loader *l;
  OK(lamp_loader_new(&l, ds, &cfg));
  return l;
}

/* INFO and WARN lines, for the epoch summary. */
static char lines[16384];
static void line_sink(lamp_log_level level, const char *line, void *ud) {
  (void)level, (void)ud;
  size_t used = strlen(lines);
  snprintf(lines + used, sizeof lines - used, "%s\n", line);
}

static void test_epoch_counts_its_skipped_steps(void **state) {
  (void)state;
  lamp_dataset *ds = tiny_dataset(8);
  lamp_loader *l = tiny_loader(ds, 2, 0);
  rig r;
  open_trainer(&r, "fp16", overflowing, 2, 0);
  lines[0] = '\0';
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(line_sink, NULL);
  lamp_epoch_result res;
  lamp_status st = lamp_trainer_epoch(r.t, l, &res);
  lamp_log_set_sink(NULL, NULL);
  lamp_log_set_level(LAMP_LOG_WARN);
  assert_int_equal(st, LAMP_OK);
  assert_int_equal(res.steps, 4);
  assert_int_equal(res.skipped_steps, 4);
  assert_non_null(strstr(lines, "  scale 1e+30  skipped 4 of 4 steps\n"));
  rig_close(&r);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

/* ---- 3. numbers and empty epochs ------------------------------------------------------------------ */

static void test_an_empty_epoch_is_an_error(void **state) {
  (void)state;
  lamp_dataset *ds = tiny_dataset(3);
  lamp_loader *l = tiny_loader(ds, 4, 1);
  rig r;
  open_trainer(&r, "fp32", NULL, 0, 0);
  lamp_epoch_result res;
  assert_int_equal(lamp_trainer_epoch(r.t, l, &res), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      "Trainer: the loader for tiny has no batch in an epoch: 3 samples per rank (3 in the data set, 1 "
                      "rank) and batch 4 with drop_last; use a batch of at most 3 or more samples");
  assert_int_equal(lamp_trainer_epochs_done(r.t), 0);
  rig_close(&r);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

static void test_accum_is_range_checked(void **state) {
  (void)state;
  rig r;
  memset(&r, 0, sizeof r);
  OK(lamp_precision_open(&r.prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&r.comm, "single", NULL, 0));
  OK(lamp_optim_open(&r.optim, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&r.loss));
  lamp_layer *net = linear(IN, 2);
  lamp_trainer_config cfg = {.model = net, .loss = r.loss, .precision = r.prec, .comm = r.comm, .optim = r.optim,
                             .device = LAMP_CPU, .accum = LAMP_TRAINER_MAX_ACCUM + 1};
  assert_int_equal(lamp_trainer_new(&r.t, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: 'accum' must be an integer in [1, 65536], got 65537");
  cfg.accum = 0;
  assert_int_equal(lamp_trainer_new(&r.t, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: 'accum' must be an integer in [1, 65536], got 0");
  lamp_layer_release(net);
  rig_close(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_loss_scale_stops_at_the_first_step),
      cmocka_unit_test(test_skips_warn_at_the_first_and_every_100th),
      cmocka_unit_test(test_max_skipped_in_a_row_is_an_error),
      cmocka_unit_test(test_epoch_counts_its_skipped_steps),
      cmocka_unit_test(test_an_empty_epoch_is_an_error),
      cmocka_unit_test(test_accum_is_range_checked),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
