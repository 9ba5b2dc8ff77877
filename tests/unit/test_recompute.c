/*
** nn.Recompute (core/nn/recompute.c) in a ResNet-like network (convolutions, BatchNorm, ReLU,
** residual blocks, one with a projection, pooling, Dropout inside and outside the wrapped parts, a
** linear head): with some parts wrapped, the gradient slab is bit-identical to the plain network's
** after every step, on the CPU and on the simulated device, under fp32 and bf16; the running
** statistics are equal after several steps (they moved once per step, not again in the
** recompute); an evaluation forward gives the same bits and allocates nothing; the activation peak
** of a step is lower and the steady state allocates nothing (what graph replay needs); the names
** of parameters and buffers are the plain network's; and the layer's own messages.
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
#include "base/error.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "tensor/ledger.h"
#include "tensor/rng.h"
#include "test_support.h"

#define BATCH 6
#define SIDE 12
#define CLASSES 10
#define STEPS 3

/* ---- the network ------------------------------------------------------------------------------ */

static lamp_layer *conv(int64_t in, int64_t out, int64_t k) {
  lamp_layer *l;
  OK(lamp_conv2d_new(&l, in, out, k, &(lamp_conv2d_options){.padding = k / 2, .no_bias = 1}));
  return l;
}

static lamp_layer *bn(int64_t c) {
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, c, NULL));
  return l;
}

static lamp_layer *dropout(double p) {
  lamp_layer *l;
  OK(lamp_dropout_new(&l, p));
  return l;
}

static lamp_layer *wrapped(lamp_layer *module, int wrap) {
  if (!wrap) return module;
  lamp_layer *r;
  OK(lamp_recompute_new(&r, module));
  lamp_layer_release(module);
  return r;
}

/* relu(x + bn(conv(relu(bn(conv(x)))))), with a projection (conv 1x1, bn) when c_in != c_out. */
static lamp_layer *block(int64_t c_in, int64_t c_out) {
  lamp_layer *body = seq(5,
                         (lamp_layer *[]){conv(c_in, c_out, 3), bn(c_out), relu(), conv(c_out, c_out, 3), bn(c_out)});
  lamp_layer *proj = c_in != c_out ? seq(2, (lamp_layer *[]){conv(c_in, c_out, 1), bn(c_out)}) : NULL, *r;
  OK(lamp_residual_new(&r, body, proj));
  lamp_layer_release(body);
  lamp_layer_release(proj);
  return seq(2, (lamp_layer *[]){r, relu()});
}

/*
** Stem, a wrapped block with a Dropout after it, pooling, a wrapped stage (block with projection,
** Dropout inside), the head with a Dropout outside. The backward meets the stage first, the
** scratch still as its forward left it: it runs on its intermediates; the first block's are gone
** by then, and it repeats its forward.
*/
static lamp_layer *network(int wrap) {
  lamp_layer *pool, *gap, *flat;
  OK(lamp_maxpool2d_new(&pool, 2, 0, 0));
  OK(lamp_global_avgpool_new(&gap));
  OK(lamp_flatten_new(&flat));
  lamp_layer *stage = seq(3, (lamp_layer *[]){block(8, 16), dropout(0.25), block(16, 16)});
  lamp_layer *first = seq(2, (lamp_layer *[]){block(8, 8), dropout(0.1)});
  return seq(10, (lamp_layer *[]){conv(3, 8, 3), bn(8), relu(), wrapped(first, wrap), pool, wrapped(stage, wrap), gap,
                                  flat, dropout(0.2), linear(16, CLASSES)});
}

/* ---- a run: a model, a fixed input and output gradient on its device ---------------------------- */

typedef struct run {
  lamp_model *m;
  lamp_device device;
  lamp_tensor *x, *dy;
} run;

static lamp_tensor *on(lamp_device device, const lamp_tensor *host) {
  lamp_tensor *t;
  OK(lamp_tensor_new(&t, host->dtype, device, host->ndim, host->shape, LAMP_MEM_DATA));
  OK(lamp_copy(device, lamp_tensor_data(t), LAMP_HOST, lamp_tensor_data(host), lamp_tensor_nbytes(host)));
  return t;
}

static lamp_model_config config(lamp_device device, lamp_dtype dtype) {
  return (lamp_model_config){.device = device,
                             .weight_dtype = dtype,
                             .compute_dtype = dtype,
                             .activation_dtype = dtype,
                             .master_weights = dtype != LAMP_F32,
                             .seed = 11,
                             .grad_dtype = LAMP_F32};
}

static run open_run(int wrap, lamp_device device, lamp_dtype dtype) {
  run r = {.device = device};
  lamp_layer *net = network(wrap);
  OK(lamp_model_new(&r.m, net));
  lamp_layer_release(net);
  lamp_model_config c = config(device, dtype);
  OK(lamp_model_build(r.m, &c));
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){BATCH, 3, SIDE, SIDE});
  lamp_tensor *dy = new_tensor(dtype, 2, (int64_t[]){BATCH, CLASSES});
  lamp_rng g;
  lamp_rng_seed(&g, 5);
  fill_uniform(x, &g, -1, 1);
  for (size_t i = 0; i < BATCH * CLASSES; i++)
    store_f32_as(dtype, lamp_tensor_data(dy), i, (float)(lamp_rng_uniform(&g) - 0.5));
  if (dtype != LAMP_F32) { /* the model's input in the activation dtype, as the trainer hands it */
    lamp_tensor *x16 = new_tensor(dtype, 4, x->shape);
    for (size_t i = 0; i < lamp_tensor_numel(x); i++) store_f32_as(dtype, lamp_tensor_data(x16), i, fp(x)[i]);
    lamp_tensor_release(x);
    x = x16;
  }
  r.x = on(device, x);
  r.dy = on(device, dy);
  lamp_tensor_release(x);
  lamp_tensor_release(dy);
  return r;
}

static void close_run(run *r) {
  lamp_tensor_release(r->x);
  lamp_tensor_release(r->dy);
  lamp_model_free(r->m);
}

static void step(run *r) {
  const lamp_tensor *y;
  OK(lamp_model_forward(r->m, r->x, 1, &y));
  OK(lamp_model_backward_fresh(r->m, r->dy));
}

/* A host copy of a device tensor's bytes (malloc'd). */
static void *download(const lamp_tensor *t) {
  void *host = malloc(lamp_tensor_nbytes(t));
  assert_non_null(host);
  OK(lamp_copy(LAMP_HOST, host, t->device, lamp_tensor_data(t), lamp_tensor_nbytes(t)));
  return host;
}

static void assert_same_bytes(const lamp_tensor *a, const lamp_tensor *b, const char *what, int step) {
  assert_int_equal(lamp_tensor_nbytes(a), lamp_tensor_nbytes(b));
  void *ha = download(a), *hb = download(b);
  if (memcmp(ha, hb, lamp_tensor_nbytes(a)) != 0) fail_msg("%s differ after step %d", what, step);
  free(ha);
  free(hb);
}

/* ---- bit-identical training steps -------------------------------------------------------------- */

/* The plain network on the CPU against the wrapped one on `device`, step by step. */
static void compare_steps(lamp_device device, lamp_dtype dtype) {
  run plain = open_run(0, LAMP_CPU, dtype), rc = open_run(1, device, dtype);
  assert_int_equal(lamp_model_numel(plain.m), lamp_model_numel(rc.m));
  uint64_t changes = 0;
  for (int s = 1; s <= STEPS; s++) {
    step(&plain);
    step(&rc);
    /* From the second step on, nothing of the device's is allocated or freed: a recorded graph of
       the step would stay valid (train/step_graph.c). */
    if (s == 1) changes = lamp_ledger_changes(device);
    else if (device != LAMP_CPU) assert_int_equal(lamp_ledger_changes(device), changes);
    assert_same_bytes(lamp_model_grads(plain.m), lamp_model_grads(rc.m), "the gradient slabs", s);
    assert_same_bytes(lamp_model_buffers(plain.m), lamp_model_buffers(rc.m), "the running statistics", s);
  }
  assert_int_equal(lamp_model_forward_index(rc.m), STEPS); /* the recompute is not a training forward */
  /* Each BatchNorm counted STEPS batches: its running statistics moved once per step. */
  float *buffers = download(lamp_model_buffers(rc.m));
  size_t counted = 0;
  for (size_t i = 0; i < lamp_model_n_buffers(rc.m); i++) {
    const lamp_model_buffer *b = lamp_model_buffer_at(rc.m, i);
    if (strstr(b->name, "num_batches_tracked") == NULL) continue;
    assert_float_equal(buffers[b->offset], (float)STEPS, 0.0f);
    counted++;
  }
  assert_int_equal(counted, 8);
  free(buffers);
  /* Evaluation: the same output bits. */
  const lamp_tensor *yp, *yr;
  OK(lamp_model_forward(plain.m, plain.x, 0, &yp));
  OK(lamp_model_forward(rc.m, rc.x, 0, &yr));
  assert_same_bytes(yp, yr, "the evaluation outputs", STEPS);
  close_run(&plain);
  close_run(&rc);
}

static void test_cpu_fp32_bit_identical(void **state) {
  (void)state;
  compare_steps(LAMP_CPU, LAMP_F32);
}

static void test_cpu_bf16_bit_identical(void **state) {
  (void)state;
  compare_steps(LAMP_CPU, LAMP_BF16);
}

static void test_sim_fp32_bit_identical(void **state) {
  (void)state;
  compare_steps(LAMP_SIM, LAMP_F32);
}

static void test_sim_bf16_bit_identical(void **state) {
  (void)state;
  compare_steps(LAMP_SIM, LAMP_BF16);
}

/* ---- memory --------------------------------------------------------------------------------- */

/* The activation bytes a run's steps reach above what was charged before it was opened; after the
   first step, neither further steps nor an evaluation move the activations' current or peak bytes. */
static size_t activation_peak(int wrap) {
  size_t before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current;
  lamp_ledger_reset_peaks();
  run r = open_run(wrap, LAMP_CPU, LAMP_F32);
  step(&r);
  lamp_ledger_entry warm = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS);
  step(&r);
  step(&r);
  const lamp_tensor *y;
  OK(lamp_model_forward(r.m, r.x, 0, &y));
  lamp_ledger_entry now = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS);
  if (now.current != warm.current || now.peak != warm.peak)
    fail_msg("%s: activations moved after the first step: current %zu -> %zu, peak %zu -> %zu",
             wrap ? "Recompute" : "plain", warm.current, now.current, warm.peak, now.peak);
  close_run(&r);
  return now.peak - before;
}

static void test_activation_peak_drops(void **state) {
  (void)state;
  size_t plain = activation_peak(0), rc = activation_peak(1);
  if (!(rc * 10 < plain * 8))
    fail_msg("activation peak %zu bytes with Recompute, %zu without: not 20 %% lower", rc, plain);
}

/* ---- names, the tree, messages ------------------------------------------------------------------ */

static void test_names_are_the_modules(void **state) {
  (void)state;
  run plain = open_run(0, LAMP_CPU, LAMP_F32), rc = open_run(1, LAMP_CPU, LAMP_F32);
  assert_int_equal(lamp_model_n_params(plain.m), lamp_model_n_params(rc.m));
  for (size_t i = 0; i < lamp_model_n_params(rc.m); i++)
    assert_string_equal(lamp_model_param_at(plain.m, i)->name, lamp_model_param_at(rc.m, i)->name);
  assert_int_equal(lamp_model_n_buffers(plain.m), lamp_model_n_buffers(rc.m));
  for (size_t i = 0; i < lamp_model_n_buffers(rc.m); i++)
    assert_string_equal(lamp_model_buffer_at(plain.m, i)->name, lamp_model_buffer_at(rc.m, i)->name);
  assert_string_equal(lamp_model_param_at(rc.m, 3)->name, "3.0.0.block.0.weight");
  close_run(&plain);
  close_run(&rc);
}

static void test_describe_and_messages(void **state) {
  (void)state;
  lamp_layer *r;
  assert_int_equal(lamp_recompute_new(&r, NULL), LAMP_ERR_INVALID_ARG);
  assert_null(r);
  assert_string_equal(lamp_last_error(), "Recompute: the module is NULL");
  r = wrapped(seq(2, (lamp_layer *[]){linear(4, 3), relu()}), 1);
  char text[256];
  r->ops->describe(r, text, sizeof text);
  assert_string_equal(text,
                      "Recompute(Sequential {\n"
                      "    [input -> (1) -> (2) -> output]\n"
                      "    (1): Linear(4 -> 3)\n"
                      "    (2): ReLU\n"
                      "  })");
  lamp_exec ex = {.device = LAMP_CPU,
                  .compute_dtype = LAMP_F32,
                  .activation_dtype = LAMP_F32,
                  .training = 1,
                  .grad_dtype = LAMP_F32};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){2, 4}), *y = new_tensor(LAMP_F32, 2, (int64_t[]){2, 3});
  assert_int_equal(r->ops->backward(r, &ex, x, y, y, NULL, 0), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "Recompute: backward before forward");
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_layer_release(r);
}

/*
** Driven without a model (its own scratch) and through the split backward (backward_input, then
** accumulate_grads, which runs the forward again): Linear, Dropout, Linear, the same input gradient
** and parameter gradients as the plain layers, the mask reused, not drawn again.
*/
static void test_split_backward_without_a_model(void **state) {
  (void)state;
  lamp_tensor *g[2] = {NULL, NULL}, *dxs[2] = {NULL, NULL};
  lamp_rng rng;
  for (int wrap = 0; wrap <= 1; wrap++) {
    lamp_layer *net = wrapped(seq(3, (lamp_layer *[]){linear(5, 7), dropout(0.5), linear(7, 3)}), wrap);
    lamp_model *m;
    OK(lamp_model_new(&m, net));
    lamp_model_config c = config(LAMP_CPU, LAMP_F32);
    OK(lamp_model_build(m, &c));
    lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){4, 5}), *dy = new_tensor(LAMP_F32, 2, (int64_t[]){4, 3});
    lamp_rng_seed(&rng, 8);
    fill_uniform(x, &rng, -1, 1);
    fill_uniform(dy, &rng, -1, 1);
    dxs[wrap] = new_tensor(LAMP_F32, 2, (int64_t[]){4, 5});
    uint64_t streams = 0;
    lamp_exec ex = {.device = LAMP_CPU,
                    .compute_dtype = LAMP_F32,
                    .activation_dtype = LAMP_F32,
                    .training = 1,
                    .grad_dtype = LAMP_F32,
                    .overwrite_grads = 1,
                    .seed = 4,
                    .forward_index = 2,
                    .rng_streams = &streams};
    lamp_tensor *y = new_tensor(LAMP_F32, 2, (int64_t[]){4, 3});
    OK(net->ops->forward(net, &ex, x, y));
    assert_int_equal(streams, 1);
    OK(net->ops->backward_input(net, &ex, x, y, dy, dxs[wrap]));
    OK(net->ops->accumulate_grads(net, &ex, x, dy));
    assert_int_equal(streams, 1); /* the repeated forwards took no stream */
    g[wrap] = lamp_tensor_retain(lamp_model_grads(m));
    lamp_tensor_release(x);
    lamp_tensor_release(dy);
    lamp_tensor_release(y);
    lamp_model_free(m);
    lamp_layer_release(net);
  }
  assert_same_bytes(g[0], g[1], "the parameter gradients", 1);
  assert_same_bytes(dxs[0], dxs[1], "the input gradients", 1);
  for (int i = 0; i < 2; i++) {
    lamp_tensor_release(g[i]);
    lamp_tensor_release(dxs[i]);
  }
}

static int setup(void **state) {
  (void)state;
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpu_fp32_bit_identical), cmocka_unit_test(test_cpu_bf16_bit_identical),
      cmocka_unit_test(test_sim_fp32_bit_identical), cmocka_unit_test(test_sim_bf16_bit_identical),
      cmocka_unit_test(test_activation_peak_drops),  cmocka_unit_test(test_names_are_the_modules),
      cmocka_unit_test(test_describe_and_messages),  cmocka_unit_test(test_split_backward_without_a_model),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
