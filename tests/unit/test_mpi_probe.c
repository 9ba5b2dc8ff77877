/*
** The mpi communicator outside mpirun (one plain process): its probe says why it cannot run
** and scores 0, so "auto" picks single; under a launcher's variables it scores 2 without
** touching MPI. Skipped where mpi.so was not built (no MPI found).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"
#include "plugin/loader.h"

#define MPI_SO LAMP_PLUGIN_BUILD_DIR "/comm/mpi.so"

static void clear_launcher_env(void) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  unsetenv("LAMP_PLUGIN_PATH");
}

static void test_auto_picks_single(void **state) {
  (void)state;
  clear_launcher_env();
  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, "auto", NULL, 0), LAMP_OK);
  assert_string_equal(lamp_comm_handle(c)->desc->name, "single");
  assert_int_equal(lamp_comm_size(c), 1);
  lamp_comm_close(c);
}

static void test_probe_reason(void **state) {
  (void)state;
  if (access(MPI_SO, F_OK) != 0) skip(); /* built without MPI */
  clear_launcher_env();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "mpi", &h), LAMP_OK);
  char reason[256];
  assert_int_equal(h->desc->probe(lamp_host_get(), reason, sizeof reason), 0);
  assert_non_null(strstr(reason, "not launched under mpirun"));

  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  assert_int_equal(h->desc->probe(lamp_host_get(), reason, sizeof reason), 2);
  assert_string_equal(reason, "launched under mpirun (OMPI_COMM_WORLD_SIZE=4)");
  clear_launcher_env();
  setenv("PMIX_RANK", "0", 1);
  assert_int_equal(h->desc->probe(lamp_host_get(), reason, sizeof reason), 2);
  clear_launcher_env();
}

static void test_declares_timeout(void **state) {
  (void)state;
  if (access(MPI_SO, F_OK) != 0) skip();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "mpi", &h), LAMP_OK);
  assert_int_equal(h->desc->n_params, 1);
  assert_string_equal(h->desc->params[0].name, "timeout");
  assert_true(h->desc->params[0].default_value == 300.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auto_picks_single),
      cmocka_unit_test(test_probe_reason),
      cmocka_unit_test(test_declares_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
