/*
** Element types: lamp/abi.h's inline helpers (the names and the float test plugins use too) and
** the core's size and parse, on every dtype and on values outside the enum.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lamp/abi.h"
#include "tensor/dtype.h"

static void test_names(void **state) {
  (void)state;
  assert_string_equal(lamp_dtype_name(LAMP_F32), "f32");
  assert_string_equal(lamp_dtype_name(LAMP_F16), "f16");
  assert_string_equal(lamp_dtype_name(LAMP_BF16), "bf16");
  assert_string_equal(lamp_dtype_name(LAMP_I32), "i32");
  assert_string_equal(lamp_dtype_name(LAMP_U8), "u8");
  assert_string_equal(lamp_dtype_name(LAMP_DTYPE_COUNT), "?");
  assert_string_equal(lamp_dtype_name((lamp_dtype)42), "?");
}

static void test_is_float(void **state) {
  (void)state;
  assert_int_equal(lamp_dtype_is_float(LAMP_F32), 1);
  assert_int_equal(lamp_dtype_is_float(LAMP_F16), 1);
  assert_int_equal(lamp_dtype_is_float(LAMP_BF16), 1);
  assert_int_equal(lamp_dtype_is_float(LAMP_I32), 0);
  assert_int_equal(lamp_dtype_is_float(LAMP_U8), 0);
  assert_int_equal(lamp_dtype_is_float(LAMP_DTYPE_COUNT), 0);
  /* a policy's uint32_t field, cast as the core and plugins cast it */
  uint32_t from_plugin = 0xffffffffu;
  assert_int_equal(lamp_dtype_is_float((lamp_dtype)from_plugin), 0);
}

/* Every name the helper prints parses back to its dtype. */
static void test_names_parse_back(void **state) {
  (void)state;
  for (int d = 0; d < LAMP_DTYPE_COUNT; d++) {
    lamp_dtype back = LAMP_DTYPE_COUNT;
    assert_int_equal(lamp_dtype_parse(lamp_dtype_name((lamp_dtype)d), &back), 0);
    assert_int_equal(back, d);
  }
}

static void test_parse_spellings(void **state) {
  (void)state;
  static const struct {
    const char *name;
    lamp_dtype dtype;
  } cases[] = {{"fp32", LAMP_F32},      {"float32", LAMP_F32}, {"fp16", LAMP_F16}, {"float16", LAMP_F16},
               {"bfloat16", LAMP_BF16}, {"int32", LAMP_I32},   {"uint8", LAMP_U8}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lamp_dtype d = LAMP_DTYPE_COUNT;
    assert_int_equal(lamp_dtype_parse(cases[i].name, &d), 0);
    assert_int_equal(d, cases[i].dtype);
  }
  static const char *const refused[] = {"none", "int8", "F16", "", "?"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    lamp_dtype d = LAMP_U8;
    assert_int_equal(lamp_dtype_parse(refused[i], &d), -1);
    assert_int_equal(d, LAMP_U8); /* untouched on failure */
  }
}

static void test_sizes(void **state) {
  (void)state;
  assert_int_equal(lamp_dtype_size(LAMP_F32), 4);
  assert_int_equal(lamp_dtype_size(LAMP_F16), 2);
  assert_int_equal(lamp_dtype_size(LAMP_BF16), 2);
  assert_int_equal(lamp_dtype_size(LAMP_I32), 4);
  assert_int_equal(lamp_dtype_size(LAMP_U8), 1);
  assert_int_equal(lamp_dtype_size(LAMP_DTYPE_COUNT), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),           cmocka_unit_test(test_is_float), cmocka_unit_test(test_names_parse_back),
      cmocka_unit_test(test_parse_spellings), cmocka_unit_test(test_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
