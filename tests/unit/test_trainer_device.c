/*
** A Trainer and its device. It refuses a device without a backend and a plugin that does not run
** on its device, naming both, before it allocates anything. On the simulated device (memory the
** host cannot read, work run later) it trains from host batches to the CPU's bits: the batches are
** uploaded, the loss and the gradient checks come back in the step's report, the parameters are
** drawn on the host and copied in. The run device follows the Trainer's.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/log.h"
#include "nn/loss.h"
#include "tensor/ledger.h"
#include "test_support.h"
#include "train/trainer.h"

#define BATCH 16

typedef struct plugins {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
} plugins;

static plugins open_plugins(const char *precision, const char *optim) {
  plugins p;
  static const lamp_option lr[] = {{"lr", 0.1}, {"momentum", 0.9}};
  OK(lamp_precision_open(&p.prec, precision, NULL, 0));
  OK(lamp_comm_open(&p.comm, "single", NULL, 0));
  OK(lamp_optim_open(&p.optim, optim, strstr(optim, "/") ? NULL : lr, strstr(optim, "/") ? 0 : 2));
  OK(lamp_cross_entropy_new(&p.loss));
  return p;
}

static void close_plugins(plugins *p) {
  lamp_loss_release(p->loss);
  lamp_optim_close(p->optim);
  lamp_comm_close(p->comm);
  lamp_precision_close(p->prec);
}

static lamp_layer *mlp(void) { return seq(3, (lamp_layer *[]){linear(12, 16), relu(), linear(16, 5)}); }

static lamp_trainer_config config(const plugins *p, lamp_layer *net, lamp_device device) {
  return (lamp_trainer_config){.model = net, .loss = p->loss, .precision = p->prec, .comm = p->comm,
                               .optim = p->optim, .device = device, .accum = 2, .clip = 0.5, .seed = 3};
}

static void test_a_device_without_backend_is_refused(void **state) {
  (void)state;
  plugins p = open_plugins("fp32", "sgd");
  lamp_layer *net = mlp();
  lamp_trainer_config c = config(&p, net, LAMP_CUDA);
  lamp_trainer *t = NULL;
  assert_int_equal(lamp_trainer_new(&t, &c), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "Trainer: " LAMP_TEST_CUDA_UNAVAILABLE);
  assert_null(t);
  assert_int_equal(lamp_run_device(), LAMP_CPU);
  lamp_layer_release(net);
  close_plugins(&p);
}

/* devcuda declares cuda only: on the CPU it is refused by name, with the devices it has. */
static void test_a_plugin_off_its_devices_is_refused(void **state) {
  (void)state;
  plugins p = open_plugins("fp32", LAMP_BAD_PLUGIN_DIR "/devcuda.so");
  lamp_layer *net = mlp();
  size_t params = lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current;
  lamp_trainer_config c = config(&p, net, LAMP_CPU);
  lamp_trainer *t = NULL;
  assert_int_equal(lamp_trainer_new(&t, &c), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "Trainer: devcuda: does not run on cpu (its devices: cuda)");
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current, params); /* nothing was built */
  lamp_layer_release(net);
  close_plugins(&p);
}

/* A batch of host tensors, the same every call for a given index. */
static void fill_batch(lamp_tensor *x, lamp_tensor *y, int index) {
  lamp_rng g;
  lamp_rng_seed(&g, 100 + (uint64_t)index);
  fill_uniform(x, &g, -1, 1);
  for (int i = 0; i < BATCH; i++) ((int32_t *)lamp_tensor_data(y))[i] = (i + index) % 5;
}

typedef struct outcome {
  float *params; /* the fp32 slab the optimizer updates, on the host */
  lamp_trainer_stats stats;
} outcome;

/* Six micro-steps (three optimizer steps) from host batches on `device`. */
static outcome train_on(lamp_device device, const char *precision) {
  plugins p = open_plugins(precision, "sgd");
  lamp_layer *net = mlp();
  lamp_trainer_config c = config(&p, net, device);
  lamp_trainer *t;
  OK(lamp_trainer_new(&t, &c));
  assert_int_equal(lamp_run_device(), device);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, 12}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  for (int i = 0; i < 6; i++) {
    fill_batch(x, y, i); /* the step has consumed the last batch: the buffers may be refilled */
    OK(lamp_trainer_step(t, x, y));
  }
  lamp_model *m = lamp_trainer_model(t);
  size_t n = lamp_model_numel(m);
  outcome o = {.params = malloc(n * sizeof(float))};
  assert_non_null(o.params);
  OK(lamp_copy(LAMP_HOST, o.params, device, lamp_model_trainable(m), n * sizeof(float)));
  OK(lamp_trainer_stats_get(t, &o.stats));
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_trainer_free(t);
  lamp_layer_release(net);
  close_plugins(&p);
  return o;
}

static void check_same_run(const char *precision) {
  outcome cpu = train_on(LAMP_CPU, precision), sim = train_on(LAMP_SIM, precision);
  assert_int_equal(sim.stats.steps + sim.stats.skipped_steps, 3);
  assert_int_equal(cpu.stats.steps, sim.stats.steps);
  assert_memory_equal(&cpu.stats.last_loss, &sim.stats.last_loss, sizeof cpu.stats.last_loss);
  assert_memory_equal(&cpu.stats.grad_norm, &sim.stats.grad_norm, sizeof cpu.stats.grad_norm);
  assert_true(sim.stats.grad_norm > 0.0);
  size_t n = (12 * 16 + 16) + (16 * 5 + 5);
  assert_memory_equal(cpu.params, sim.params, n * sizeof(float));
  free(cpu.params);
  free(sim.params);
  OK(lamp_set_run_device(LAMP_CPU));
}

static void test_sim_trains_to_the_cpu_bits_fp32(void **state) {
  (void)state;
  check_same_run("fp32");
}

static void test_sim_trains_to_the_cpu_bits_fp16(void **state) {
  (void)state;
  check_same_run("fp16");
}

/* Tensors of the model live on the Trainer's device, charged to its ledger. */
static void test_the_model_lives_on_the_device(void **state) {
  (void)state;
  plugins p = open_plugins("bf16", "sgd");
  lamp_layer *net = mlp();
  size_t host_params = lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current;
  size_t sim_params = lamp_ledger_get(LAMP_SIM, LAMP_MEM_PARAMS).current;
  lamp_trainer_config c = config(&p, net, LAMP_SIM);
  lamp_trainer *t;
  OK(lamp_trainer_new(&t, &c));
  size_t n = lamp_model_numel(lamp_trainer_model(t));
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_PARAMS).current - sim_params, n * 2); /* bf16 weights */
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_MASTER).current, n * 4);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current, host_params);
  assert_int_equal(lamp_mem_device(lamp_model_trainable(lamp_trainer_model(t))), LAMP_SIM);
  lamp_trainer_free(t);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_MASTER).current, 0);
  lamp_layer_release(net);
  close_plugins(&p);
  OK(lamp_set_run_device(LAMP_CPU));
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
      cmocka_unit_test(test_a_device_without_backend_is_refused),
      cmocka_unit_test(test_a_plugin_off_its_devices_is_refused),
      cmocka_unit_test(test_sim_trains_to_the_cpu_bits_fp32),
      cmocka_unit_test(test_sim_trains_to_the_cpu_bits_fp16),
      cmocka_unit_test(test_the_model_lives_on_the_device),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
