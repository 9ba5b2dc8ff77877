/*
** The 16-bit GEMM operand path, which a CUDA device takes (cuBLAS reads fp16/bf16), run on the
** simulated device's native-16 table (lamp_sim_native16_backend: LAMP_CAP_NATIVE_16BIT_GEMM). The
** layers then hand the device 16-bit operands: the weights as their 16-bit copies of the fp32
** masters, inputs and output gradients as stored. The device widens them exactly inside the
** operation, so:
**   - a convolution with 16-bit weight and bias operands gives the bytes the CPU gives for the
**     same values as fp32 operands (with and without bias, grouped, fp16 and bf16);
**   - a Trainer trains to the CPU's bits under bf16 and fp16 (from a scale that overflows: the
**     same skipped steps and the same scale afterwards);
**   - the ledger shows no widened copy: after a step, the only operand the layers made is the
**     fp32 input batch rounded to the compute dtype, in 16 bits (on a device without the
**     capability they hold fp32 copies of the weights, biases, activations and gradients).
*/
#include <math.h>
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
#include "tensor/dtype.h"
#include "tensor/ledger.h"
#include "test_support.h"
#include "train/trainer.h"

#define BATCH 16
#define IN 12

static void test_the_table_advertises_native_16bit_gemm(void **state) {
  (void)state;
  assert_true(lamp_device_has(LAMP_SIM, LAMP_CAP_NATIVE_16BIT_GEMM | LAMP_CAP_HOST_VIEW));
  assert_false(lamp_device_has(LAMP_CPU, LAMP_CAP_NATIVE_16BIT_GEMM));
}

/* ---- one convolution ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(float lo, float hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)(rng_state >> 40) / 16777216.0f;
}

/* n values in [lo, hi) stored as dtype, on the host. */
static void *random_values(lamp_dtype dtype, size_t n, float lo, float hi) {
  float *v = malloc(n * sizeof *v);
  void *stored = malloc(n * lamp_dtype_size(dtype));
  assert_non_null(v);
  assert_non_null(stored);
  for (size_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
  OK(lamp_convert(LAMP_CPU, stored, dtype, v, LAMP_F32, n));
  free(v);
  return stored;
}

/* src (n values of dtype) widened to fp32, on the host. */
static float *widened(const void *src, lamp_dtype dtype, size_t n) {
  float *w = malloc(n * sizeof *w);
  assert_non_null(w);
  OK(lamp_convert(LAMP_CPU, w, LAMP_F32, src, dtype, n));
  return w;
}

static void *on_sim(const void *host, size_t bytes) {
  void *dev = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, bytes);
  assert_non_null(dev);
  OK(lamp_copy(LAMP_SIM, dev, LAMP_HOST, host, bytes));
  return dev;
}

/* The device's bytes are the host's. */
static void expect_same(const void *dev, const void *host, size_t bytes) {
  void *got = malloc(bytes);
  assert_non_null(got);
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, dev, bytes));
  assert_memory_equal(got, host, bytes);
  free(got);
}

/*
** Forward and backward of one convolution in dtype: on the CPU with fp32 operands, on the sim
** with the same values as 16-bit operands. y, dx and the parameter gradients: the same bytes.
*/
static void conv_widens_exactly(lamp_conv2d_shape s, lamp_dtype dtype, int with_bias) {
  size_t in_n = s.batch * s.in_channels * s.height * s.width, out_n = s.batch * s.out_channels * s.out_h * s.out_w;
  size_t w_n = s.out_channels * (s.in_channels / s.groups) * s.kernel * s.kernel, es = lamp_dtype_size(dtype);
  void *x = random_values(dtype, in_n, -1, 1), *dy = random_values(dtype, out_n, -1, 1);
  void *w16 = random_values(dtype, w_n, -0.5f, 0.5f), *b16 = random_values(dtype, s.out_channels, -1, 1);
  float *w32 = widened(w16, dtype, w_n), *b32 = widened(b16, dtype, s.out_channels);
  size_t bytes[4] = {out_n * es, in_n * es, w_n * sizeof(float), s.out_channels * sizeof(float)};
  void *host[4], *dev[4]; /* y, dx, grad_weight, grad_bias */
  for (int i = 0; i < 4; i++) {
    host[i] = malloc(bytes[i]);
    assert_non_null(host[i]);
    dev[i] = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, bytes[i]);
    assert_non_null(dev[i]);
  }
  lamp_conv2d_args a = {.shape = s, .compute = dtype, .x = x, .x_dtype = dtype, .weight = w32,
                        .bias = with_bias ? b32 : NULL, .operand_dtype = LAMP_F32, .y = host[0], .y_dtype = dtype,
                        .dy = dy, .dy_dtype = dtype, .dx = host[1], .dx_dtype = dtype, .grad_weight = host[2],
                        .grad_bias = with_bias ? host[3] : NULL, .grad_dtype = dtype, .overwrite_grads = 1};
  void *plan = NULL;
  OK(lamp_conv2d_forward(LAMP_CPU, &plan, &a));
  OK(lamp_conv2d_backward(LAMP_CPU, &plan, &a));
  lamp_conv2d_plan_free(LAMP_CPU, plan);

  void *x_dev = on_sim(x, in_n * es), *dy_dev = on_sim(dy, out_n * es);
  void *w_dev = on_sim(w16, w_n * es), *b_dev = on_sim(b16, s.out_channels * es);
  lamp_conv2d_args d = a;
  d.x = x_dev, d.dy = dy_dev, d.weight = w_dev, d.bias = with_bias ? b_dev : NULL, d.operand_dtype = dtype;
  d.y = dev[0], d.dx = dev[1], d.grad_weight = dev[2], d.grad_bias = with_bias ? dev[3] : NULL;
  plan = NULL;
  OK(lamp_conv2d_forward(LAMP_SIM, &plan, &d));
  OK(lamp_conv2d_backward(LAMP_SIM, &plan, &d));
  lamp_conv2d_plan_free(LAMP_SIM, plan);
  for (int i = 0; i < (with_bias ? 4 : 3); i++) expect_same(dev[i], host[i], bytes[i]);

  void *sim_blocks[] = {x_dev, dy_dev, w_dev, b_dev, dev[0], dev[1], dev[2], dev[3]};
  for (size_t i = 0; i < sizeof sim_blocks / sizeof *sim_blocks; i++) lamp_mem_free(sim_blocks[i]);
  void *host_blocks[] = {x, dy, w16, b16, w32, b32, host[0], host[1], host[2], host[3]};
  for (size_t i = 0; i < sizeof host_blocks / sizeof *host_blocks; i++) free(host_blocks[i]);
  OK(lamp_synchronize(LAMP_SIM));
}

static void test_conv2d_widens_16bit_operands_exactly(void **state) {
  (void)state;
  lamp_conv2d_shape grouped = {.batch = 3, .in_channels = 4, .out_channels = 6, .groups = 2, .height = 7,
                               .width = 7, .kernel = 3, .stride = 2, .padding = 1, .dilation = 1, .out_h = 4,
                               .out_w = 4};
  lamp_conv2d_shape same = {.batch = 2, .in_channels = 3, .out_channels = 4, .groups = 1, .height = 6, .width = 6,
                            .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .out_h = 6, .out_w = 6};
  conv_widens_exactly(grouped, LAMP_BF16, 1);
  conv_widens_exactly(grouped, LAMP_F16, 0);
  conv_widens_exactly(same, LAMP_F16, 1);
  conv_widens_exactly(same, LAMP_BF16, 0);
}

/* ---- a Trainer ------------------------------------------------------------------------------- */

typedef struct plugins {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
} plugins;

/* fp16 from a scale that overflows at once (2^20) and grows back every 2 clean steps: the skip,
   the backoff and the growth all run on the device. */
static plugins open_plugins(const char *precision) {
  plugins p;
  static const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  static const lamp_option scaler[] = {{"init_scale", 1048576.0}, {"growth_interval", 2}};
  int fp16 = strcmp(precision, "fp16") == 0;
  OK(lamp_precision_open(&p.prec, precision, fp16 ? scaler : NULL, fp16 ? 2 : 0));
  OK(lamp_comm_open(&p.comm, "single", NULL, 0));
  OK(lamp_optim_open(&p.optim, "sgd", sgd, 2));
  OK(lamp_cross_entropy_new(&p.loss));
  return p;
}

static void close_plugins(plugins *p) {
  lamp_loss_release(p->loss);
  lamp_optim_close(p->optim);
  lamp_comm_close(p->comm);
  lamp_precision_close(p->prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

static lamp_trainer *new_trainer(const plugins *p, lamp_device device) {
  lamp_layer *net = seq(3, (lamp_layer *[]){linear(IN, 16), relu(), linear(16, 5)});
  lamp_trainer_config c = {.model = net, .loss = p->loss, .precision = p->prec, .comm = p->comm, .optim = p->optim,
                           .device = device, .accum = 2, .clip = 0.5, .seed = 3};
  lamp_trainer *t;
  OK(lamp_trainer_new(&t, &c));
  lamp_layer_release(net);
  return t;
}

/* Host batch `index`, the same every call. */
static void fill_batch(lamp_tensor *x, lamp_tensor *y, int index) {
  lamp_rng g;
  lamp_rng_seed(&g, 100 + (uint64_t)index);
  fill_uniform(x, &g, -1, 1);
  for (int i = 0; i < BATCH; i++) ((int32_t *)lamp_tensor_data(y))[i] = (i + index) % 5;
}

typedef struct outcome {
  float *params; /* the fp32 masters, on the host */
  lamp_trainer_stats stats;
} outcome;

/* Sixteen micro-steps (eight optimizer steps) on `device`. */
static outcome train_on(lamp_device device, const char *precision) {
  plugins p = open_plugins(precision);
  lamp_trainer *t = new_trainer(&p, device);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, IN}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  for (int i = 0; i < 16; i++) {
    fill_batch(x, y, i);
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
  close_plugins(&p);
  return o;
}

static void check_same_run(const char *precision, int skips) {
  outcome cpu = train_on(LAMP_CPU, precision), sim = train_on(LAMP_SIM, precision);
  assert_int_equal(sim.stats.steps + sim.stats.skipped_steps, 8);
  assert_int_equal(sim.stats.skipped_steps > 0, skips);
  assert_int_equal(cpu.stats.steps, sim.stats.steps);
  assert_int_equal(cpu.stats.skipped_steps, sim.stats.skipped_steps);
  assert_memory_equal(&cpu.stats.loss_scale, &sim.stats.loss_scale, sizeof cpu.stats.loss_scale);
  assert_memory_equal(&cpu.stats.last_loss, &sim.stats.last_loss, sizeof cpu.stats.last_loss);
  assert_memory_equal(&cpu.stats.grad_norm, &sim.stats.grad_norm, sizeof cpu.stats.grad_norm);
  assert_true(sim.stats.steps > 0 && sim.stats.grad_norm > 0.0);
  assert_memory_equal(cpu.params, sim.params, ((IN * 16 + 16) + (16 * 5 + 5)) * sizeof(float));
  free(cpu.params);
  free(sim.params);
}

static void test_trains_to_the_cpu_bits_bf16(void **state) {
  (void)state;
  check_same_run("bf16", 0);
}

static void test_trains_to_the_cpu_bits_fp16(void **state) {
  (void)state;
  check_same_run("fp16", 1);
}

/*
** The model holds its weights as 16-bit copies of the fp32 masters, and a step adds to the
** device's workspace only the input batch rounded to bf16: no fp32 weight, bias, activation or
** gradient operand (on the CPU the same step holds all of those, widened).
*/
static void test_the_layers_read_16bit_weights_without_fp32_copies(void **state) {
  (void)state;
  plugins p = open_plugins("bf16");
  size_t params0 = lamp_ledger_get(LAMP_SIM, LAMP_MEM_PARAMS).current;
  lamp_trainer *t = new_trainer(&p, LAMP_SIM);
  lamp_model *m = lamp_trainer_model(t);
  size_t n = lamp_model_numel(m);
  assert_int_equal(lamp_model_weights(m)->dtype, LAMP_BF16);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_PARAMS).current - params0, n * 2);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_MASTER).current, n * 4);
  size_t workspace0 = lamp_ledger_get(LAMP_SIM, LAMP_MEM_WORKSPACE).current;
  lamp_ledger_reset_peaks();
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, IN}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  for (int i = 0; i < 2; i++) { /* one optimizer step: forward, backward, update, refresh */
    fill_batch(x, y, i);
    OK(lamp_trainer_step(t, x, y));
  }
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_WORKSPACE).current - workspace0, BATCH * IN * 2);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_WORKSPACE).peak - workspace0, BATCH * IN * 2);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_trainer_free(t);
  close_plugins(&p);
}

static int setup(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_WARN);
  return lamp_backend_register(LAMP_SIM, &lamp_sim_native16_backend) == LAMP_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_table_advertises_native_16bit_gemm),
      cmocka_unit_test(test_conv2d_widens_16bit_operands_exactly),
      cmocka_unit_test(test_trains_to_the_cpu_bits_bf16),
      cmocka_unit_test(test_trains_to_the_cpu_bits_fp16),
      cmocka_unit_test(test_the_layers_read_16bit_weights_without_fp32_copies),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
