/*
** The backend registry and the uniform dispatch. A device without a backend fails every entry
** point with one message naming the device; a device whose table lacks an operation fails it with
** one message naming both. Adding a device is a table and one registration line: a minimal table
** (memory, copies and one kernel) is registered in the cuda slot, left empty here by pointing
** LAMP_BACKEND_DIR at a folder without a cuda module, and then allocates, copies, fills and is
** charged to its own ledger, while the operations it lacks say so.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "backend/backend_impl.h"
#include "base/error.h"
#include "tensor/ledger.h"

#define OK(call) assert_int_equal((call), LAMP_OK)

static lamp_status tiny_move(void *dst, const void *src, size_t bytes) {
  memmove(dst, src, bytes);
  return LAMP_OK;
}

static lamp_status tiny_fill(void *x, lamp_dtype dtype, size_t n, float value) {
  if (dtype != LAMP_F32) return lamp_error(LAMP_ERR_UNSUPPORTED, "fill: tiny fills f32 only");
  for (size_t i = 0; i < n; i++) ((float *)x)[i] = value;
  return LAMP_OK;
}

static int tiny_count(void) { return 1; }

/* A device in a few lines: host memory under another name, work done on return. */
static const lamp_backend tiny = {
    .memory = {"tiny", lamp_host_alloc, lamp_host_free, lamp_host_zero},
    .count = tiny_count,
    .upload = tiny_move,
    .download = tiny_move,
    .copy = tiny_move,
    .fill = tiny_fill,
};

#define NO_BACKENDS LAMP_TEST_TMP_DIR "/no_backends"
#define NO_MODULE "device cuda: no backend module " NO_BACKENDS "/cuda.so (LAMP_BACKEND_DIR is " NO_BACKENDS ")"

/* The module's failure is kept: every entry point gives the same reason, after its own name. */
static void test_a_device_without_backend(void **state) {
  (void)state;
  float c = 0;
  assert_int_equal(lamp_gemm(LAMP_CUDA, 0, 0, 1, 1, 1, 1.0f, &c, LAMP_F32, 1, &c, LAMP_F32, 1, 0.0f, &c, LAMP_F32, 1),
                   LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: " NO_MODULE);
  assert_int_equal(lamp_synchronize(LAMP_CUDA), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "synchronize: " NO_MODULE);
  assert_int_equal(lamp_device_check(LAMP_CUDA), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), NO_MODULE);
  lamp_device_info info;
  assert_int_equal(lamp_device_describe(LAMP_CUDA, 0, &info), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), NO_MODULE);
  /* a device that is no module keeps the registry's own message */
  assert_int_equal(lamp_device_check((lamp_device)2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "device device 2 is not supported by this build");
  assert_int_equal(lamp_device_count(LAMP_CUDA), 0);
  assert_int_equal(lamp_device_ordinal(LAMP_CUDA), -1);
  assert_false(lamp_device_has(LAMP_CUDA, 0));
  assert_int_equal(lamp_set_run_device(LAMP_CUDA), LAMP_ERR_UNSUPPORTED);
  assert_int_equal(lamp_run_device(), LAMP_CPU);
  lamp_device d;
  assert_int_equal(lamp_device_parse("tpu", &d), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "device 'tpu' is not known (expected one of: cpu, cuda)");
}

static void test_adding_a_device(void **state) {
  (void)state;
  OK(lamp_backend_register(LAMP_CUDA, &tiny)); /* the one line */
  assert_string_equal(lamp_device_name(LAMP_CUDA), "tiny");
  lamp_device d;
  OK(lamp_device_parse("tiny", &d));
  assert_int_equal(d, LAMP_CUDA);
  OK(lamp_device_check(LAMP_CUDA));
  assert_int_equal(lamp_device_ordinal(LAMP_CUDA), 0);
  lamp_device_info info;
  OK(lamp_device_describe(LAMP_CUDA, 0, &info)); /* no describe slot: the backend's name */
  assert_string_equal(info.name, "tiny");
  assert_true(info.memory == 0 && info.cc_major == 0);
  assert_int_equal(lamp_device_describe(LAMP_CUDA, 1, &info), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "device tiny:1 does not exist (this process sees 1 tiny device)");
  assert_int_equal(lamp_device_select(LAMP_CUDA, 3), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "device tiny:3 does not exist (this process sees 1 tiny device)");

  size_t before = lamp_ledger_get(LAMP_CUDA, LAMP_MEM_ACTIVATIONS).current;
  float *x = lamp_mem_alloc(LAMP_CUDA, LAMP_MEM_ACTIVATIONS, 8 * sizeof(float));
  assert_non_null(x);
  assert_int_equal(lamp_mem_device(x), LAMP_CUDA);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_ACTIVATIONS).current - before, 8 * sizeof(float));
  OK(lamp_fill(LAMP_CUDA, x, LAMP_F32, 8, 2.5f));
  float back[8];
  OK(lamp_copy(LAMP_HOST, back, LAMP_CUDA, x, sizeof back));
  for (int i = 0; i < 8; i++) assert_true(back[i] == 2.5f);
  OK(lamp_synchronize(LAMP_CUDA)); /* no queue: nothing to wait for */
  lamp_event *e;
  OK(lamp_event_new(LAMP_CUDA, &e));
  OK(lamp_event_record(e));
  OK(lamp_event_wait(e));
  lamp_event_free(e);
  OK(lamp_upload_async(LAMP_CUDA, x, back, sizeof back)); /* falls back to the blocking upload */

  /* what the table lacks fails with one message naming operation and device */
  assert_int_equal(lamp_gemm(LAMP_CUDA, 0, 0, 1, 1, 1, 1.0f, x, LAMP_F32, 1, x, LAMP_F32, 1, 0.0f, x, LAMP_F32, 1),
                   LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: not implemented for device tiny");
  lamp_batchnorm_args bn = {0};
  assert_int_equal(lamp_batchnorm_forward(LAMP_CUDA, &bn), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "batchnorm_forward: not implemented for device tiny");
  assert_null(lamp_device_host_view(LAMP_CUDA, x)); /* no LAMP_CAP_HOST_VIEW */
  assert_null(lamp_device_stream(LAMP_CUDA));
  lamp_mem_free(x);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_ACTIVATIONS).current, before);

  assert_int_equal(lamp_backend_register(LAMP_CUDA, &tiny), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "backend: device tiny already has its backend (tiny)");
  OK(lamp_set_run_device(LAMP_CUDA));
  assert_int_equal(lamp_run_device(), LAMP_CUDA);
  OK(lamp_set_run_device(LAMP_CPU));
}

int main(void) {
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  mkdir(NO_BACKENDS, 0755);
  setenv("LAMP_BACKEND_DIR", NO_BACKENDS, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_device_without_backend),
      cmocka_unit_test(test_adding_a_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
