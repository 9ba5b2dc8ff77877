/*
** lamp_params_resolve: options against a plugin's declared parameters. Defaults, names,
** ranges, and the messages a user sees when an option is wrong.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

static const lamp_param declared[] = {
    {"lr", 0.01, 0.0, 1e6, "learning rate"},
    {"momentum", 0.0, 0.0, 1.0, "momentum"},
    {"eps", 1e-8, 1e-12, 1e-3, "epsilon"},
};

static const lamp_plugin toy = {.magic = LAMP_PLUGIN_MAGIC,
                                .kind = LAMP_KIND_OPTIM,
                                .name = "toy",
                                .version = "1.0",
                                .params = declared,
                                .n_params = 3};

static const lamp_plugin bare = {
    .magic = LAMP_PLUGIN_MAGIC, .kind = LAMP_KIND_PRECISION, .name = "bare", .version = "1.0"};

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static void test_defaults(void **state) {
  (void)state;
  double v[3] = {-1, -1, -1};
  assert_int_equal(lamp_params_resolve(&toy, NULL, 0, v), LAMP_OK);
  assert_true(v[0] == 0.01 && v[1] == 0.0 && v[2] == 1e-8);
  assert_int_equal(lamp_params_resolve(&bare, NULL, 0, NULL), LAMP_OK);
}

static void test_options_by_name_in_any_order(void **state) {
  (void)state;
  const lamp_option opts[] = {{"eps", 1e-6}, {"lr", 0.5}};
  double v[3];
  assert_int_equal(lamp_params_resolve(&toy, opts, 2, v), LAMP_OK);
  assert_true(v[0] == 0.5 && v[1] == 0.0 && v[2] == 1e-6);
  const lamp_option edges[] = {{"lr", 0}, {"momentum", 1}, {"eps", 1e-12}}; /* inclusive */
  assert_int_equal(lamp_params_resolve(&toy, edges, 3, v), LAMP_OK);
}

static void test_unknown_option(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 0.1}, {"mom", 0.9}};
  double v[3];
  assert_error(lamp_params_resolve(&toy, opts, 2, v), LAMP_ERR_INVALID_ARG,
               "toy: unknown option 'mom'; valid options: lr, momentum, eps");
  assert_error(lamp_params_resolve(&bare, opts, 1, v), LAMP_ERR_INVALID_ARG,
               "bare: unknown option 'lr'; this plugin takes no options");
}

static void test_out_of_range(void **state) {
  (void)state;
  double v[3];
  const lamp_option neg = {"lr", -1};
  assert_error(lamp_params_resolve(&toy, &neg, 1, v), LAMP_ERR_INVALID_ARG,
               "toy: option 'lr' must be in [0, 1e+06], got -1");
  const lamp_option big = {"momentum", 1.5};
  assert_error(lamp_params_resolve(&toy, &big, 1, v), LAMP_ERR_INVALID_ARG,
               "toy: option 'momentum' must be in [0, 1], got 1.5");
  const lamp_option nan_ = {"eps", NAN};
  assert_error(lamp_params_resolve(&toy, &nan_, 1, v), LAMP_ERR_INVALID_ARG,
               "toy: option 'eps' must be in [1e-12, 0.001], got nan");
  const lamp_option inf = {"lr", INFINITY};
  assert_error(lamp_params_resolve(&toy, &inf, 1, v), LAMP_ERR_INVALID_ARG,
               "toy: option 'lr' must be in [0, 1e+06], got inf");
}

static void test_given_twice_or_unnamed(void **state) {
  (void)state;
  double v[3];
  const lamp_option twice[] = {{"lr", 0.1}, {"lr", 0.2}};
  assert_error(lamp_params_resolve(&toy, twice, 2, v), LAMP_ERR_INVALID_ARG,
               "toy: option 'lr' given twice");
  const lamp_option unnamed[] = {{"lr", 0.1}, {NULL, 0.2}};
  assert_error(lamp_params_resolve(&toy, unnamed, 2, v), LAMP_ERR_INVALID_ARG,
               "toy: option 2 has no name");
}

/* The same messages reach the user through the real plugins. */
static void test_through_sgd(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  const lamp_option mom = {"mom", 0.9};
  assert_error(lamp_optim_open(&o, "sgd", &mom, 1), LAMP_ERR_INVALID_ARG,
               "sgd: unknown option 'mom'; valid options: lr, momentum, dampening, nesterov, "
               "weight_decay");
  const lamp_option lr = {"lr", -1};
  assert_error(lamp_optim_open(&o, "sgd", &lr, 1), LAMP_ERR_INVALID_ARG,
               "sgd: option 'lr' must be in [0, 1e+06], got -1");
  assert_null(o);

  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, "sgd", &h), LAMP_OK);
  double v[5];
  assert_int_equal(lamp_params_resolve(h->desc, NULL, 0, v), LAMP_OK);
  assert_true(v[0] == 0.01 && v[1] == 0 && v[2] == 0 && v[3] == 0 && v[4] == 0);
}

int main(void) {
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_options_by_name_in_any_order),
      cmocka_unit_test(test_unknown_option),
      cmocka_unit_test(test_out_of_range),
      cmocka_unit_test(test_given_twice_or_unnamed),
      cmocka_unit_test(test_through_sgd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
