/*
** shard_optimizer (ZeRO-1) without mpirun; its multi-rank behaviour is tested in
** tests/mpi/test_zero_sharding.c and tests/mpi/test_zero_resume.sh.
**
**   1. One rank (single): nothing to shard. The trainer says so once, keeps the whole optimizer
**      state, and trains bit for bit as without the option.
**   2. A communicator without reduce_scatter (tests/bad_plugins/counting_comm.so, a fake rank 0
**      of 2) is refused, naming the communicator and what it lacks.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "tensor/ledger.h"
#include "tensor/rng.h"
#include "test_support.h"
#include "trainer_rig.h"

#define IN 12
#define HIDDEN 16
#define CLASSES 5
#define ROWS 8
#define STEPS 5

static lamp_layer *mlp(void) { return seq(3, (lamp_layer *[]){linear(IN, HIDDEN), relu(), linear(HIDDEN, CLASSES)}); }

/* STEPS optimizer steps of sgd with momentum; the parameters and the optim_state bytes. */
static float *train(int shard, size_t *state_bytes) {
  static const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.optim_opts = sgd, .n_optim_opts = 2, .seed = 5, .shard_optimizer = shard};
  rig r;
  rig_open(&r, &spec, mlp());
  *state_bytes = lamp_ledger_get(LAMP_CPU, LAMP_MEM_OPTIM_STATE).current;
  lamp_rng rng;
  lamp_rng_seed(&rng, 9);
  int64_t xs[2] = {ROWS, IN}, ys[1] = {ROWS};
  lamp_tensor *x = new_tensor(LAMP_F32, 2, xs), *y = new_tensor(LAMP_I32, 1, ys);
  for (int s = 0; s < STEPS; s++) {
    fill_uniform(x, &rng, -1.0, 1.0);
    for (size_t i = 0; i < ROWS; i++) ((int32_t *)lamp_tensor_data(y))[i] = (int32_t)lamp_rng_below(&rng, CLASSES);
    OK(lamp_trainer_step(r.t, x, y));
  }
  assert_int_equal(rig_stats(&r).steps, STEPS);
  float *p = params_copy(&r);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  rig_close(&r);
  return p;
}

static void test_one_rank_trains_unsharded(void **state) {
  (void)state;
  size_t plain_state, sharded_state;
  float *plain = train(0, &plain_state);
  capture_start();
  float *sharded = train(1, &sharded_state);
  capture_stop();
  const char *line = "trainer: shard_optimizer with 1 rank: nothing to shard, the optimizer state stays whole\n";
  const char *first = strstr(captured.other, line);
  assert_non_null(first);
  assert_null(strstr(first + 1, line)); /* once */
  assert_null(strstr(captured.other, "sharded over"));
  size_t n = (size_t)(IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES);
  assert_int_equal(sharded_state, plain_state);
  assert_int_equal(plain_state, n * sizeof(float)); /* sgd's momentum buffer, whole */
  assert_memory_equal(plain, sharded, n * sizeof(float));
  free(plain);
  free(sharded);
}

static void test_comm_without_reduce_scatter_is_refused(void **state) {
  (void)state;
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  OK(lamp_precision_open(&prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&comm, COUNTING_COMM, NULL, 0));
  OK(lamp_optim_open(&optim, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = mlp();
  lamp_trainer_config cfg = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                             .device = LAMP_CPU, .accum = 1, .shard_optimizer = 1};
  lamp_trainer *t = NULL;
  assert_int_equal(lamp_trainer_new(&t, &cfg), LAMP_ERR_UNSUPPORTED);
  assert_null(t);
  assert_string_equal(lamp_last_error(),
                      "Trainer: shard_optimizer needs a communicator with reduce_scatter and all_gather; "
                      "'counting_comm' has no reduce_scatter");
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_rank_trains_unsharded),
      cmocka_unit_test(test_comm_without_reduce_scatter_is_refused),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
