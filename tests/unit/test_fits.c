/*
** Sizes larger than the machine are refused before anything is allocated:
**   1. a model whose slabs exceed the physical memory, naming its largest layer, the bytes
**      (which count the policy's slabs: f16 weights, f32 gradients and masters) and the memory;
**   2. a batch whose layer outputs exceed it, naming the layer with the largest output;
**   3. sizes that fit are not refused, and nothing was charged to the memory ledger.
** The sizes are astronomical (exabytes) so that no machine running the tests has that much.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "nn/fits.h"
#include "nn/model.h"
#include "tensor/ledger.h"
#include "test_support.h"

/* "... more than this machine's X GiB (N bytes) of physical memory" for this machine. */
static const char *memory_tail(char *buf, size_t size) {
  uint64_t physical = lamp_physical_memory();
  assert_true(physical > 0);
  snprintf(buf, size, ", more than this machine's %.1f GiB (%llu bytes) of physical memory", (double)physical / 1073741824.0,
           (unsigned long long)physical);
  return buf;
}

static lamp_model_config config_of(lamp_dtype weights, int masters) {
  return (lamp_model_config){.device = LAMP_CPU, .weight_dtype = weights, .compute_dtype = weights,
                             .activation_dtype = weights, .master_weights = masters, .seed = 1, .grad_dtype = LAMP_F32};
}

static void expect_build_refused(lamp_layer *root, const lamp_model_config *c, const char *expected_head) {
  size_t params_before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current;
  lamp_model *m;
  OK(lamp_model_new(&m, root));
  assert_int_equal(lamp_model_build(m, c), LAMP_ERR_INVALID_ARG);
  char tail[256], expected[1024];
  snprintf(expected, sizeof expected, "%s%s", expected_head, memory_tail(tail, sizeof tail));
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current, params_before);
  lamp_model_free(m);
}

static void test_a_model_larger_than_memory_is_refused(void **state) {
  (void)state;
  lamp_layer *big = linear(1000000000, 1000000000);
  lamp_model_config f32 = config_of(LAMP_F32, 0);
  expect_build_refused(big, &f32,
                       "model: a model of 1000000001000000000 parameters and 0 buffer values (its largest layer, "
                       "Linear(1000000000 -> 1000000000), has 1000000001000000000) needs 8000000008000000000 bytes");
  /* fp16 with masters: 2 + 4 + 4 bytes a parameter. */
  lamp_model_config f16 = config_of(LAMP_F16, 1);
  expect_build_refused(big, &f16,
                       "model: a model of 1000000001000000000 parameters and 0 buffer values (its largest layer, "
                       "Linear(1000000000 -> 1000000000), has 1000000001000000000) needs 10000000010000000000 bytes");
  lamp_layer_release(big);

  /* Inside a container, the layer holding the largest parameter is named. */
  lamp_layer *children[3] = {linear(4, 4), relu(), linear(1000000000000, 1000000)};
  lamp_layer *net = seq(3, children);
  expect_build_refused(net, &f32,
                       "model: a model of 1000000000001000020 parameters and 0 buffer values (its largest layer, "
                       "Linear(1000000000000 -> 1000000), has 1000000000001000000) needs 8000000000008000160 bytes");
  lamp_layer_release(net);

  /* Past 2^64 bytes the count saturates, and the message says so. */
  lamp_layer *huge = linear(2000000000, 2000000000);
  expect_build_refused(huge, &f32,
                       "model: a model of 4000000002000000000 parameters and 0 buffer values (its largest layer, "
                       "Linear(2000000000 -> 2000000000), has 4000000002000000000) needs more than 18446744073709551614 "
                       "bytes");
  lamp_layer_release(huge);
}

static void test_a_batch_larger_than_memory_is_refused(void **state) {
  (void)state;
  /* 2^20 channels of (1 + 2 * 4096)^2 pixels for a 1x1 image: 2.8e14 bytes, from 2^21 parameters. */
  lamp_conv2d_options o = {.padding = 4096};
  lamp_layer *conv;
  OK(lamp_conv2d_new(&conv, 1, 1 << 20, 1, &o));
  lamp_layer *children[2] = {relu(), conv};
  lamp_layer *net = seq(2, children);
  lamp_model *m;
  OK(lamp_model_new(&m, net));
  lamp_model_config c = config_of(LAMP_F32, 0);
  OK(lamp_model_build(m, &c));
  int64_t shape[4] = {1, 1, 1, 1};
  lamp_tensor *x = new_tensor(LAMP_F32, 4, shape);
  fp(x)[0] = 1.0f;
  size_t activations_before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current;
  const lamp_tensor *y;
  assert_int_equal(lamp_model_forward(m, x, 1, &y), LAMP_ERR_INVALID_ARG);
  char tail[256], expected[1024];
  snprintf(expected, sizeof expected,
           "model: a forward of f32[1, 1, 1, 1] (its largest layer output, 281543700381696 bytes, is Conv2d(1 -> "
           "1048576, 1x1, padding 4096)'s) needs 281543700381700 bytes%s; use a smaller batch",
           memory_tail(tail, sizeof tail));
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current, activations_before);
  lamp_tensor_release(x);
  lamp_model_free(m);
  lamp_layer_release(net);
}

static void test_what_fits_is_built_and_run(void **state) {
  (void)state;
  lamp_layer *children[3] = {linear(8, 16), relu(), linear(16, 4)};
  lamp_layer *net = seq(3, children);
  lamp_model *m;
  OK(lamp_model_new(&m, net));
  lamp_model_config c = config_of(LAMP_BF16, 1);
  OK(lamp_model_build(m, &c));
  int64_t shape[2] = {32, 8};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, shape);
  memset(lamp_tensor_data(x), 0, lamp_tensor_nbytes(x));
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 0, &y));
  assert_int_equal(y->shape[0], 32);
  lamp_tensor_release(x);
  lamp_model_free(m);
  lamp_layer_release(net);
  assert_true(lamp_size_mul_add(UINT64_MAX / 2, 3, 0) == UINT64_MAX);
  assert_true(lamp_size_mul_add(3, 4, UINT64_MAX - 5) == UINT64_MAX);
  assert_true(lamp_size_mul_add(3, 4, 5) == 17);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_model_larger_than_memory_is_refused),
      cmocka_unit_test(test_a_batch_larger_than_memory_is_refused),
      cmocka_unit_test(test_what_fits_is_built_and_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
