/*
** One host synchronisation per optimizer step: on the simulated device, which counts
** the host's waits for its queue (lamp_sim_host_waits: synchronize, blocking copies to the host,
** event waits, each counted only when it waits for work not waited for already), a Trainer in
** the steady state waits exactly once per optimizer step, taken or skipped: for the step's report
** (losses, the found-inf flag, the squared gradient norm). Not counted here: building the Trainer
** (parameters copied in), the first step (buffers made on first use), saves and evaluation, which
** copy to the host by design.
**
** The run: an MLP with Dropout (its mask is drawn on the host and uploaded every forward), fp16
** with the dynamic scaler from a scale that overflows and grows back every 2 clean steps (so the
** window holds skipped and taken steps), clipping, accumulation 1, 2 and 4, from a loader on the host
** (every micro-batch uploaded) and from host tensors through lamp_trainer_step; and again with a
** metrics file, whose records use only what the report brought back.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/log.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "test_support.h"
#include "train/trainer.h"

#define IN 16      /* [1, 4, 4] samples */
#define SAMPLES 960
#define BATCH 8    /* 120 batches per epoch: the window stays inside the first */
#define WINDOW 12  /* optimizer steps counted */

typedef struct run {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_dataset *ds;
  lamp_loader *loader;
} run;

static lamp_dataset *dataset(void) { return patterned_dataset("waits", SAMPLES); }

static lamp_layer *mlp(void) {
  lamp_layer *drop;
  OK(lamp_dropout_new(&drop, 0.25));
  return seq(4, (lamp_layer *[]){linear(IN, 12), relu(), drop, linear(12, 3)});
}

/* The metrics file of the runs (Trainer{metrics = ...}), or NULL. */
static const char *metrics_file;

static run open_run(int accum) {
  run r;
  static const lamp_option scaler[] = {{"init_scale", 1048576.0}, {"growth_interval", 2}};
  static const lamp_option sgd[] = {{"lr", 0.05}, {"momentum", 0.9}};
  OK(lamp_precision_open(&r.prec, "fp16", scaler, 2));
  OK(lamp_comm_open(&r.comm, "single", NULL, 0));
  OK(lamp_optim_open(&r.optim, "sgd", sgd, 2));
  OK(lamp_cross_entropy_new(&r.loss));
  lamp_layer *net = mlp();
  lamp_trainer_config c = {.model = net, .loss = r.loss, .precision = r.prec, .comm = r.comm, .optim = r.optim,
                           .device = LAMP_SIM, .accum = accum, .clip = 0.5, .seed = 3, .metrics = metrics_file};
  OK(lamp_trainer_new(&r.t, &c));
  lamp_layer_release(net);
  r.ds = dataset();
  lamp_loader_config lc = {.batch = BATCH, .shuffle = 1, .drop_last = 1, .seed = 5, .world = 1};
  OK(lamp_loader_new(&r.loader, r.ds, &lc));
  return r;
}

static void close_run(run *r) {
  lamp_loader_free(r->loader);
  lamp_dataset_release(r->ds);
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_comm_close(r->comm);
  lamp_precision_close(r->prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

/* WINDOW optimizer steps from the loader after one to warm up: one wait each. */
static void check_loader_steps(int accum) {
  run r = open_run(accum);
  lamp_epoch_result e;
  OK(lamp_trainer_train(r.t, r.loader, 1, &e));
  uint64_t before = lamp_sim_host_waits();
  OK(lamp_trainer_train(r.t, r.loader, WINDOW, &e));
  uint64_t waits = lamp_sim_host_waits() - before;
  assert_int_equal(e.steps, WINDOW);
  assert_int_equal(e.epoch_done, 0);
  assert_true(e.skipped_steps > 0 && e.skipped_steps < WINDOW); /* both kinds of step were counted */
  assert_int_equal(waits, WINDOW);
  close_run(&r);
}

static void test_one_wait_per_step_from_a_loader(void **state) {
  (void)state;
  check_loader_steps(1);
}

static void test_one_wait_per_step_from_a_loader_accumulating(void **state) {
  (void)state;
  check_loader_steps(2);
  check_loader_steps(4);
}

/* lamp_trainer_step with host tensors the caller refills after every call. */
static void check_host_batches(int accum) {
  run r = open_run(accum);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, IN}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  lamp_rng g;
  lamp_rng_seed(&g, 11);
  uint64_t before = 0;
  for (int i = 0; i < (WINDOW + 1) * accum; i++) {
    if (i == accum) before = lamp_sim_host_waits(); /* after the first optimizer step */
    fill_uniform(x, &g, -1, 1);
    for (int k = 0; k < BATCH; k++) ((int32_t *)lamp_tensor_data(y))[k] = (i + k) % 3;
    OK(lamp_trainer_step(r.t, x, y));
  }
  assert_int_equal(lamp_sim_host_waits() - before, WINDOW);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  close_run(&r);
}

static void test_one_wait_per_step_from_host_tensors(void **state) {
  (void)state;
  check_host_batches(1);
}

static void test_one_wait_per_step_from_host_tensors_accumulating(void **state) {
  (void)state;
  check_host_batches(2);
}

/* Recording every step (loss, scale, gradient norm, samples/s) adds no wait. */
static void test_one_wait_per_step_with_a_metrics_file(void **state) {
  (void)state;
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  metrics_file = LAMP_TEST_TMP_DIR "/host_waits.jsonl";
  check_loader_steps(2);
  check_host_batches(1);
  struct stat st;
  assert_int_equal(stat(metrics_file, &st), 0);
  assert_true(st.st_size > 0);
  metrics_file = NULL;
}

static int setup(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_WARN);
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_wait_per_step_from_a_loader),
      cmocka_unit_test(test_one_wait_per_step_from_a_loader_accumulating),
      cmocka_unit_test(test_one_wait_per_step_from_host_tensors),
      cmocka_unit_test(test_one_wait_per_step_from_host_tensors_accumulating),
      cmocka_unit_test(test_one_wait_per_step_with_a_metrics_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
