/*
** The ranks agree before they step. Run as `mpirun -n 2 test_rank_agreement`
** with the real mpi communicator. Each case makes rank 1 differ from rank 0 in one thing and
** checks that both ranks fail, at once and with the same message naming the field and each
** rank's value, instead of averaging unrelated gradients or hanging:
**   at Trainer creation: accum, the optimizer's lr, a text option of the optimizer (ABI 1.4), the
**   model, the precision plugin;
**   when training starts: the loader's batch, the data set's size, max_steps.
** Finally the same trainer with agreeing loaders trains, and its parameters are the same bits
** on both ranks (a refused epoch changed nothing).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/log.h"
#include "data/loader.h"
#include "mpi_check.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "tensor/memory.h"
#include "train/trainer.h"

#define WORLD 2
#define IN 4

static int rank;

typedef struct setup {
  const char *precision;
  const char *optim;
  double lr;
  int64_t hidden;
  int accum;
  const char *sign; /* textopts' text option 'sign'; NULL for other optimizers */
} setup;

static const setup agreed = {"fp32", "sgd", 0.1, 8, 1, NULL};

typedef struct built {
  lamp_precision *prec;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
} built;

/* Opens the plugins and the trainer of s; returns lamp_trainer_new's status (t NULL on failure). */
static lamp_status build(built *b, lamp_comm *comm, const setup *s) {
  memset(b, 0, sizeof *b);
  const lamp_option lr = {"lr", s->lr};
  const lamp_text_option sign = {"sign", s->sign};
  const lamp_options given = {&lr, 1, &sign, s->sign != NULL};
  OK(lamp_precision_open(&b->prec, s->precision, NULL, 0));
  OK(lamp_optim_open_options(&b->optim, s->optim, &given));
  OK(lamp_cross_entropy_new(&b->loss));
  lamp_layer *layers[3];
  OK(lamp_linear_new(&layers[0], IN, s->hidden, 1));
  OK(lamp_relu_new(&layers[1]));
  OK(lamp_linear_new(&layers[2], s->hidden, 2, 1));
  lamp_layer *net;
  OK(lamp_sequential_new(&net, layers, 3));
  for (int i = 0; i < 3; i++) lamp_layer_release(layers[i]);
  lamp_trainer_config cfg = {.model = net, .loss = b->loss, .precision = b->prec, .comm = comm, .optim = b->optim,
                             .device = LAMP_CPU, .accum = s->accum, .seed = 9};
  lamp_status st = lamp_trainer_new(&b->t, &cfg);
  lamp_layer_release(net);
  return st;
}

static void unbuild(built *b) {
  lamp_trainer_free(b->t);
  lamp_loss_release(b->loss);
  lamp_optim_close(b->optim);
  lamp_precision_close(b->prec);
}

/* Rank 1 builds `other`, rank 0 `base`: both must fail with `expected`. */
static void check_refused_between(lamp_comm *comm, const setup *base, const setup *other, const char *expected) {
  built b;
  lamp_status st = build(&b, comm, rank == 1 ? other : base);
  CHECK(st == LAMP_ERR_INVALID_USAGE, "creation returned %d, expected a refusal: %s", (int)st, lamp_last_error());
  CHECK(strcmp(lamp_last_error(), expected) == 0, "message\n  got:      %s\n  expected: %s", lamp_last_error(), expected);
  CHECK(b.t == NULL, "a refused trainer was returned");
  unbuild(&b);
}

/* Rank 1 builds `other`, rank 0 the agreed setup. */
static void check_creation_refused(lamp_comm *comm, const setup *other, const char *expected) {
  check_refused_between(comm, &agreed, other, expected);
}

/* A data set of n samples of [1, 2, 2] bytes over 2 classes, the same bytes on every rank. */
static lamp_dataset *dataset(size_t n) {
  lamp_dataset_bytes bytes = {.name = "tiny", .n = n, .channels = 1, .rows = 2, .cols = 2, .classes = 2};
  bytes.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n * IN);
  bytes.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n);
  if (bytes.pixels == NULL || bytes.labels == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    exit(1);
  }
  for (size_t i = 0; i < n * IN; i++) bytes.pixels[i] = (uint8_t)(i * 53u);
  for (size_t i = 0; i < n; i++) bytes.labels[i] = (uint8_t)(i % 2);
  lamp_dataset *ds;
  OK(lamp_dataset_adopt(&ds, &bytes));
  return ds;
}

static lamp_loader *loader(lamp_comm *comm, size_t samples, size_t batch) {
  lamp_dataset *ds = dataset(samples);
  lamp_loader_config cfg = {.batch = batch, .shuffle = 1, .seed = 4, .rank = rank, .world = lamp_comm_size(comm)};
  lamp_loader *l;
  OK(lamp_loader_new(&l, ds, &cfg));
  lamp_dataset_release(ds); /* the loader holds it */
  return l;
}

static void check_training_refused(lamp_trainer *t, lamp_loader *l, uint64_t max_steps, const char *expected) {
  lamp_epoch_result r;
  lamp_status st = lamp_trainer_train(t, l, max_steps, &r);
  CHECK(st == LAMP_ERR_INVALID_USAGE, "training returned %d, expected a refusal: %s", (int)st, lamp_last_error());
  CHECK(strcmp(lamp_last_error(), expected) == 0, "message\n  got:      %s\n  expected: %s", lamp_last_error(), expected);
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(t, &s));
  CHECK(s.micro_steps == 0, "a refused epoch took %llu micro-steps", (unsigned long long)s.micro_steps);
}

static void check_creation(lamp_comm *comm) {
  setup s = agreed;
  s.accum = 2;
  check_creation_refused(comm, &s,
                         "Trainer: the ranks disagree on accum: rank 0 has 1, rank 1 has 2; every rank must build the same Trainer");
  s = agreed;
  s.lr = 0.05;
  check_creation_refused(comm, &s,
                         "Trainer: the ranks disagree on the optimizer's 'lr': rank 0 has 0.1, rank 1 has 0.05; every rank "
                         "must build the same Trainer");
  setup text = agreed;
  text.optim = LAMP_BAD_PLUGIN_DIR "/textopts.so";
  text.sign = "exact";
  s = text;
  s.sign = "smooth";
  check_refused_between(comm, &text, &s,
                        "Trainer: the ranks disagree on the optimizer's 'sign': rank 0 has exact, rank 1 has smooth; every "
                        "rank must build the same Trainer");
  s = agreed;
  s.hidden = 16;
  check_creation_refused(comm, &s,
                         "Trainer: the ranks disagree on the model: rank 0 has 58 parameters in 4 tensors, rank 1 has 114 "
                         "parameters in 4 tensors; every rank must build the same Trainer");
  s = agreed;
  s.precision = "bf16";
  check_creation_refused(comm, &s,
                         "Trainer: the ranks disagree on the precision plugin: rank 0 has fp32, rank 1 has bf16; every rank "
                         "must build the same Trainer");
}

static void check_training(lamp_comm *comm) {
  built b;
  OK(build(&b, comm, &agreed));
  static const char advice[] = "every rank must train with the same loader settings and max_steps";
  char expected[512];

  lamp_loader *l = loader(comm, 16, rank == 1 ? 2 : 4);
  snprintf(expected, sizeof expected, "Trainer: the ranks disagree on the batch size: rank 0 has 4, rank 1 has 2; %s", advice);
  check_training_refused(b.t, l, 0, expected);
  lamp_loader_free(l);

  l = loader(comm, rank == 1 ? 12 : 16, 4);
  snprintf(expected, sizeof expected, "Trainer: the ranks disagree on the data set size: rank 0 has 16, rank 1 has 12; %s",
           advice);
  check_training_refused(b.t, l, 0, expected);
  lamp_loader_free(l);

  l = loader(comm, 16, 4);
  snprintf(expected, sizeof expected, "Trainer: the ranks disagree on max_steps: rank 0 has 1, rank 1 has 2; %s", advice);
  check_training_refused(b.t, l, rank == 1 ? 2 : 1, expected);

  /* Agreeing: the epoch runs (16 samples over 2 ranks in batches of 4: 2 steps) and the ranks
     end with the same parameters. */
  lamp_epoch_result r;
  OK(lamp_trainer_epoch(b.t, l, &r));
  CHECK(r.epoch_done && r.steps == 2, "epoch done %d after %llu steps, expected 2", r.epoch_done, (unsigned long long)r.steps);
  lamp_model *m = lamp_trainer_model(b.t);
  CHECK(same_on_all_ranks(comm, lamp_model_trainable(m), lamp_model_numel(m) * sizeof(float)),
        "the parameters differ between the ranks after an agreed epoch");
  lamp_loader_free(l);
  unbuild(&b);
}

int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  lamp_comm *mpi;
  OK(lamp_comm_open(&mpi, "mpi", NULL, 0));
  rank = check_rank = lamp_comm_rank(mpi);
  if (lamp_comm_size(mpi) != WORLD) {
    fprintf(stderr, "rank %d: test_rank_agreement needs exactly %d ranks (mpirun -n %d), got %d\n", rank, WORLD, WORLD,
            lamp_comm_size(mpi));
    lamp_comm_close(mpi);
    return 1;
  }
  check_creation(mpi);
  check_training(mpi);
  int status = mpi_check_finish(mpi, "test_rank_agreement");
  lamp_backend_release_workspace();
  lamp_comm_close(mpi);
  return status;
}
