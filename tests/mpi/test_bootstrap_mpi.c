/*
** The bootstrap under mpirun (comm ABI 1.3). Run as `mpirun -n 2 test_bootstrap_mpi`.
**
** tests/bad_plugins/bootcomm.c is a communicator that lives on the bootstrap alone; opening it
** here makes the core build the bootstrap over the mpi plugin. Its create checks, and fails
** with a message otherwise, that the bootstrap says rank r of 2, local rank r of 2 (one host),
** and that an all_gather of bytes, a broadcast from rank 1 and a barrier through it move the
** right bytes. Then:
**   1. its rank and size are MPI's;
**   2. an all_gather of bytes and an all_reduce through it, checked on every rank;
**   3. STEPS steps of an MLP on each rank's half of the batch through it, and the same through
**      the mpi communicator: for two ranks a sum has one order, so the parameters must be equal
**      bit for bit, and equal on both ranks.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/log.h"
#include "mpi_check.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "train/trainer.h"

#define BOOTCOMM LAMP_BAD_PLUGIN_DIR "/bootcomm.so"
#define WORLD 2
#define IN 12
#define HIDDEN 16
#define CLASSES 4
#define HALF 16
#define STEPS 4

static int rank;

/* ---- 1 and 2: what the bootstrap gave the communicator ---------------------------------------- */

static void check_channel(lamp_comm *boot, lamp_comm *mpi) {
  CHECK(lamp_comm_rank(boot) == lamp_comm_rank(mpi), "bootcomm rank %d, mpi rank %d", lamp_comm_rank(boot),
        lamp_comm_rank(mpi));
  CHECK(lamp_comm_size(boot) == WORLD, "bootcomm size %d", lamp_comm_size(boot));

  uint8_t mine[3] = {(uint8_t)(rank + 1), (uint8_t)(2 * rank), 0xa5}, all[3 * WORLD];
  OK(lamp_comm_all_gather(boot, mine, all, 3, LAMP_U8, LAMP_CPU));
  for (int r = 0; r < WORLD; r++)
    CHECK(all[3 * r] == r + 1 && all[3 * r + 1] == 2 * r && all[3 * r + 2] == 0xa5, "all_gather: rank %d's bytes %u %u %u",
          r, all[3 * r], all[3 * r + 1], all[3 * r + 2]);

  float x[2] = {(float)rank + 0.5f, -4.0f * (float)rank};
  OK(lamp_comm_all_reduce(boot, x, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  CHECK(x[0] == 2.0f && x[1] == -4.0f, "all_reduce: %g %g, expected 2 -4", x[0], x[1]);
}

/* ---- 3: training through it ------------------------------------------------------------------ */

static lamp_layer *mlp(void) {
  lamp_layer *l1, *r, *l2, *net;
  OK(lamp_linear_new(&l1, IN, HIDDEN, 1));
  OK(lamp_relu_new(&r));
  OK(lamp_linear_new(&l2, HIDDEN, CLASSES, 1));
  lamp_layer *children[3] = {l1, r, l2};
  OK(lamp_sequential_new(&net, children, 3));
  for (int i = 0; i < 3; i++) lamp_layer_release(children[i]);
  return net;
}

/* STEPS steps on this rank's half of batches drawn from one seed; the final parameters. */
static float *train(lamp_comm *comm, size_t *numel) {
  lamp_precision *prec;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  static const lamp_option opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  OK(lamp_precision_open(&prec, "fp32", NULL, 0));
  OK(lamp_optim_open(&optim, "sgd", opts, 2));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = mlp();
  lamp_trainer_config cfg = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                             .device = LAMP_CPU, .accum = 1, .clip = 0.0,
                             .schedule = {.kind = LAMP_SCHEDULE_CONSTANT, .total = STEPS}, .seed = 5};
  OK(lamp_trainer_new(&t, &cfg));
  lamp_layer_release(net);

  lamp_rng rng;
  lamp_rng_seed(&rng, 77);
  int64_t xs[2] = {HALF, IN}, ys[1] = {HALF};
  lamp_tensor *x, *y;
  OK(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA));
  OK(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA));
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < WORLD; k++) { /* every rank draws both halves, keeps its own */
      float xb[HALF * IN];
      int32_t yb[HALF];
      for (int i = 0; i < HALF * IN; i++) xb[i] = (float)lamp_rng_normal(&rng);
      for (int i = 0; i < HALF; i++) yb[i] = (int32_t)lamp_rng_below(&rng, CLASSES);
      if (k != rank) continue;
      memcpy(lamp_tensor_data(x), xb, sizeof xb);
      memcpy(lamp_tensor_data(y), yb, sizeof yb);
    }
    OK(lamp_trainer_step(t, x, y));
  }
  lamp_tensor_release(x);
  lamp_tensor_release(y);

  lamp_model *model = lamp_trainer_model(t);
  *numel = lamp_model_numel(model);
  float *p = xmalloc(*numel * sizeof *p);
  memcpy(p, lamp_model_trainable(model), *numel * sizeof *p);
  lamp_trainer_free(t);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_precision_close(prec);
  return p;
}

static void check_training(lamp_comm *boot, lamp_comm *mpi) {
  size_t n_boot = 0, n_mpi = 0;
  float *via_boot = train(boot, &n_boot);
  float *via_mpi = train(mpi, &n_mpi);
  CHECK(n_boot == n_mpi && n_boot > 0, "parameter counts %zu and %zu", n_boot, n_mpi);
  size_t differ = 0;
  for (size_t i = 0; i < n_boot && i < n_mpi; i++) differ += memcmp(&via_boot[i], &via_mpi[i], sizeof(float)) != 0;
  CHECK(differ == 0, "%zu of %zu parameters differ between bootcomm and mpi", differ, n_boot);
  CHECK(same_on_all_ranks(mpi, via_boot, n_boot * sizeof(float)), "bootcomm's parameters differ between ranks");
  free(via_boot);
  free(via_mpi);
}

int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  lamp_comm *boot, *mpi;
  static const lamp_option opts[] = {{"expect_one_host", 1}, {"timeout", 120}};
  OK(lamp_comm_open(&boot, BOOTCOMM, opts, 2)); /* the core opens mpi for the bootstrap first */
  OK(lamp_comm_open(&mpi, "mpi", NULL, 0));
  rank = check_rank = lamp_comm_rank(mpi);
  if (lamp_comm_size(mpi) != WORLD) {
    fprintf(stderr, "rank %d: test_bootstrap_mpi needs exactly %d ranks (mpirun -n %d), got %d\n", rank, WORLD, WORLD,
            lamp_comm_size(mpi));
    return 1;
  }
  check_channel(boot, mpi);
  check_training(boot, mpi);
  int status = mpi_check_finish(mpi, "test_bootstrap_mpi");
  lamp_backend_release_workspace();
  lamp_comm_close(mpi);
  lamp_comm_close(boot); /* the bootstrap's mpi communicator goes last: MPI is finalised then */
  return status;
}
