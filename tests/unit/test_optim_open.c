/*
** lamp_optim_open asks a new optimizer for its state slots right away and refuses, closing the
** object, one the core could not serve: more than LAMP_OPTIM_MAX_SLOTS slots, or a slot that is
** not f32 (tests/bad_plugins/manyslots.c and f16slot.c).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static void test_too_many_slots(void **state) {
  (void)state;
  lamp_optim *o = (lamp_optim *)&o; /* overwritten with NULL on failure */
  assert_error(lamp_optim_open(&o, BAD("manyslots"), NULL, 0), LAMP_ERR_UNSUPPORTED,
               "manyslots: declares 9 state slots, this core allows at most 8");
  assert_null(o);
}

static void test_f16_slot(void **state) {
  (void)state;
  lamp_optim *o = (lamp_optim *)&o;
  assert_error(lamp_optim_open(&o, BAD("f16slot"), NULL, 0), LAMP_ERR_UNSUPPORTED,
               "f16slot: state slot 'm' has dtype f16; this core allocates f32 slots only");
  assert_null(o);
}

/* The limit is the one documented in optim.h, and real optimizers stay within it. */
static void test_builtin_optimizers_open(void **state) {
  (void)state;
  assert_int_equal(LAMP_OPTIM_MAX_SLOTS, 8);
  const char *names[] = {"sgd", "adam", "adamw"};
  for (size_t i = 0; i < 3; i++) {
    lamp_optim *o = NULL;
    assert_int_equal(lamp_optim_open(&o, names[i], NULL, 0), LAMP_OK);
    assert_non_null(o);
    lamp_optim_close(o);
  }
  /* A refusal leaves nothing behind: the next open of a good plugin works. */
  lamp_optim *o = NULL;
  assert_int_not_equal(lamp_optim_open(&o, BAD("manyslots"), NULL, 0), LAMP_OK);
  assert_int_equal(lamp_optim_open(&o, "sgd", NULL, 0), LAMP_OK);
  lamp_optim_close(o);
}

int main(void) {
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_too_many_slots),
      cmocka_unit_test(test_f16_slot),
      cmocka_unit_test(test_builtin_optimizers_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
