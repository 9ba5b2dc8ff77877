/*
** A backend module loaded end to end (core/backend/load.c): the fake cuda module of
** tests/backend_modules (host memory under the cuda name, two devices) is found through
** LAMP_BACKEND_DIR on the first question about the cuda device, opened once, and from then on is
** the device: its count, selection and description reach lamp's calls, its memory is charged to
** the cuda ledger, and the path it came from is known. The failures of the loader are asserted, one
** process per case, by tests/cli/test_backend_modules.sh.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend_impl.h"
#include "backend/load.h"
#include "base/error.h"
#include "tensor/ledger.h"

#define OK(call) assert_int_equal((call), LAMP_OK)
#define FAKE LAMP_BACKEND_FIXTURE_DIR "/fake"

static void test_the_first_question_loads_the_module(void **state) {
  (void)state;
  assert_string_equal(lamp_backend_module_path(LAMP_CUDA), ""); /* nothing asked yet */
  assert_true(lamp_backend_is_module(LAMP_CUDA));
  assert_false(lamp_backend_is_module(LAMP_CPU));
  assert_int_equal(lamp_device_count(LAMP_CUDA), 2);
  assert_string_equal(lamp_backend_module_path(LAMP_CUDA), FAKE "/cuda.so");
  OK(lamp_device_check(LAMP_CUDA));
  OK(lamp_backend_load(LAMP_CUDA)); /* once loaded, loaded */
  assert_string_equal(lamp_device_name(LAMP_CUDA), "cuda");
  assert_int_equal(lamp_device_ordinal(LAMP_CUDA), 0);
}

static void test_devices_are_described(void **state) {
  (void)state;
  lamp_device_info info;
  OK(lamp_device_describe(LAMP_CUDA, 1, &info));
  assert_string_equal(info.name, "Fake GPU 1");
  assert_true(info.memory == (size_t)2 << 30);
  assert_int_equal(info.cc_major, 9);
  assert_int_equal(info.cc_minor, 1);
  assert_int_equal(lamp_device_describe(LAMP_CUDA, 2, &info), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "device cuda:2 does not exist (this process sees 2 cuda devices)");
  OK(lamp_device_describe(LAMP_CPU, 0, &info)); /* the CPU: its model name and the host's memory */
  assert_true(info.name[0] != '\0' && info.memory > 0 && info.cc_major == 0);
}

/* The backend's select decides too: once memory lives on one device, the fake (as CUDA's) refuses
   another, and the registry keeps the ordinal it had. */
static void test_selection_reaches_the_backend(void **state) {
  (void)state;
  OK(lamp_device_select(LAMP_CUDA, 1));
  assert_int_equal(lamp_device_ordinal(LAMP_CUDA), 1);
  size_t before = lamp_ledger_get(LAMP_CUDA, LAMP_MEM_PARAMS).current;
  float *x = lamp_mem_alloc(LAMP_CUDA, LAMP_MEM_PARAMS, 4 * sizeof(float));
  assert_non_null(x);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_PARAMS).current - before, 4 * sizeof(float));
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {0};
  OK(lamp_copy(LAMP_CUDA, x, LAMP_HOST, in, sizeof in));
  OK(lamp_copy(LAMP_HOST, out, LAMP_CUDA, x, sizeof out));
  assert_memory_equal(in, out, sizeof in);
  assert_int_equal(lamp_device_select(LAMP_CUDA, 0), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "cuda: cannot switch to cuda:0: cuda:1 is in use already");
  assert_int_equal(lamp_device_ordinal(LAMP_CUDA), 1);
  OK(lamp_device_select(LAMP_CUDA, 1));
  lamp_mem_free(x);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_PARAMS).current, before);
}

/* What the fake table leaves out is refused by name, as for any backend. */
static void test_missing_operations_say_so(void **state) {
  (void)state;
  float c = 0;
  assert_int_equal(lamp_gemm(LAMP_CUDA, 0, 0, 1, 1, 1, 1.0f, &c, LAMP_F32, 1, &c, LAMP_F32, 1, 0.0f, &c, LAMP_F32, 1),
                   LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: not implemented for device cuda");
  OK(lamp_set_run_device(LAMP_CUDA));
  assert_int_equal(lamp_run_device(), LAMP_CUDA);
  OK(lamp_set_run_device(LAMP_CPU));
}

int main(void) {
  setenv("LAMP_BACKEND_DIR", FAKE, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_first_question_loads_the_module),
      cmocka_unit_test(test_devices_are_described),
      cmocka_unit_test(test_selection_reaches_the_backend),
      cmocka_unit_test(test_missing_operations_say_so),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
