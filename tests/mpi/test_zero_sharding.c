/*
** ZeRO-1 (the Trainer's shard_optimizer, docs/ddp.md): 2 sharded ranks take the steps of 2
** unsharded ones. Run as `mpirun -n 2 test_zero_sharding`, with the real mpi communicator and the
** real precision and optimizer plugins, on an MLP of 2250 parameters (one bucket, 1125 elements
** per rank).
**
**   1. SGD with momentum and AdamW (adam with weight decay), fp32 and bf16 (masters), 20 steps
**      of a cosine schedule: the weights (fp32, or bf16 and the checkpoint, which holds the fp32
**      masters and the optimizer state) are bit-identical to the unsharded run (2 ranks add the
**      same two numbers in either collective), and identical on both ranks.
**   2. The ledger: optim_state per rank is half the unsharded one, and so are the masters under
**      bf16, to the byte.
**   3. accum 2: bit-identical again. Clipping (global norm over both shards, summed in double
**      rank by rank): the norm agrees to 1e-12 and the parameters to 1e-6 of their movement.
**   4. fp16, accum 2, +inf poked into a gradient element on rank 1 only, which rank 0 owns: both
**      ranks skip the step, halve the scale, keep their parameters, and take the next one.
**   5. Refusals, with their messages: ranks disagreeing on shard_optimizer, compress with it, a
**      bf16 policy without masters, stochastic rounding, and optimizers that need whole tensors
**      (tests/bad_plugins/tensortable.so, the Muon example).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/log.h"
#include "mpi_check.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "tensor/dtype.h"
#include "tensor/ledger.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "train/trainer.h"

#define IN 24
#define HIDDEN 64
#define CLASSES 10
#define ROWS 32 /* per rank and step */
#define STEPS 20

static int rank;

/* ---- data and model ------------------------------------------------------------------------ */

static lamp_tensor *tensor(lamp_dtype dtype, int ndim, const int64_t *shape) {
  lamp_tensor *t;
  OK(lamp_tensor_new(&t, dtype, LAMP_CPU, ndim, shape, LAMP_MEM_DATA));
  return t;
}

/* This rank's batches: seeded by rank, so the ranks' gradients differ. */
typedef struct batches {
  lamp_tensor *x[STEPS], *y[STEPS];
} batches;

static void batches_make(batches *d) {
  lamp_rng rng;
  lamp_rng_seed(&rng, 2024 + (uint64_t)rank);
  int64_t xs[2] = {ROWS, IN}, ys[1] = {ROWS};
  for (int s = 0; s < STEPS; s++) {
    d->x[s] = tensor(LAMP_F32, 2, xs);
    d->y[s] = tensor(LAMP_I32, 1, ys);
    float *x = lamp_tensor_data(d->x[s]);
    int32_t *y = lamp_tensor_data(d->y[s]);
    for (size_t i = 0; i < (size_t)ROWS * IN; i++) x[i] = (float)lamp_rng_normal(&rng);
    for (size_t i = 0; i < ROWS; i++) y[i] = (int32_t)lamp_rng_below(&rng, CLASSES);
  }
}

static void batches_free(batches *d) {
  for (int s = 0; s < STEPS; s++) {
    lamp_tensor_release(d->x[s]);
    lamp_tensor_release(d->y[s]);
  }
}

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

/* ---- a trainer ------------------------------------------------------------------------------ */

typedef struct spec {
  const char *precision;
  const lamp_option *prec_opts;
  size_t n_prec_opts;
  const char *optim; /* a name or a plugin's path */
  const lamp_option *optim_opts;
  size_t n_optim_opts;
  int shard, accum;
  double clip;
  lamp_dtype compress;
} spec;

typedef struct run {
  lamp_precision *prec;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
} run;

/* Opens the plugins and the trainer; returns the trainer's status (its message in lamp_last_error). */
static lamp_status run_open(run *r, lamp_comm *comm, const spec *s) {
  memset(r, 0, sizeof *r);
  OK(lamp_precision_open(&r->prec, s->precision, s->prec_opts, s->n_prec_opts));
  OK(lamp_optim_open(&r->optim, s->optim, s->optim_opts, s->n_optim_opts));
  OK(lamp_cross_entropy_new(&r->loss));
  lamp_layer *net = mlp();
  lamp_trainer_config cfg = {.model = net, .loss = r->loss, .precision = r->prec, .comm = comm, .optim = r->optim,
                             .device = LAMP_CPU, .accum = s->accum ? s->accum : 1, .clip = s->clip,
                             .schedule = {.kind = LAMP_SCHEDULE_COSINE, .total = STEPS + 5}, .seed = 11,
                             .compress = s->compress, .shard_optimizer = s->shard};
  lamp_status st = lamp_trainer_new(&r->t, &cfg);
  lamp_layer_release(net);
  return st;
}

static void run_close(run *r) {
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_precision_close(r->prec);
  memset(r, 0, sizeof *r);
}

static lamp_trainer_stats stats_of(run *r) {
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(r->t, &s));
  return s;
}

/* The weights the layers read, as bytes (fp32 or bf16). */
static void *weights_copy(run *r, size_t *bytes) {
  lamp_tensor *w = lamp_model_weights(lamp_trainer_model(r->t));
  *bytes = lamp_model_numel(lamp_trainer_model(r->t)) * lamp_dtype_size(w->dtype);
  void *p = xmalloc(*bytes);
  memcpy(p, lamp_tensor_data(w), *bytes);
  return p;
}

static float *fp32_weights(run *r) {
  size_t bytes;
  return weights_copy(r, &bytes);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

/* A whole file's bytes (rank 0 reads what it wrote). */
static void *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL, "cannot open %s", path);
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = xmalloc(*size);
  size_t got = fread(p, 1, *size, f);
  fclose(f);
  CHECK(got == *size, "short read of %s", path);
  return p;
}

/* What a finished run leaves: its weights and, through a checkpoint, its masters and state. */
typedef struct outcome {
  void *weights;
  size_t bytes;
  lamp_trainer_stats stats;
  char ckpt[512];
} outcome;

static void train(lamp_comm *comm, const spec *s, const batches *d, const char *ckpt, outcome *out) {
  run r;
  OK(run_open(&r, comm, s));
  for (int i = 0; i < STEPS; i++) OK(lamp_trainer_step(r.t, d->x[i], d->y[i]));
  out->stats = stats_of(&r);
  out->weights = weights_copy(&r, &out->bytes);
  snprintf(out->ckpt, sizeof out->ckpt, "%s/%s", LAMP_TEST_TMP_DIR, ckpt);
  OK(lamp_trainer_save(r.t, out->ckpt, NULL, 0));
  run_close(&r);
}

/* Rank 0: are the two checkpoint files the same bytes? (every rank gets the verdict) */
static int same_files(lamp_comm *comm, const char *a, const char *b) {
  float same = 0.0f;
  if (rank == 0) {
    size_t na = 0, nb = 0;
    void *fa = slurp(a, &na), *fb = slurp(b, &nb);
    same = fa != NULL && fb != NULL && na == nb && memcmp(fa, fb, na) == 0 ? 1.0f : 0.0f;
    free(fa);
    free(fb);
  }
  OK(lamp_comm_broadcast(comm, &same, 1, LAMP_F32, 0, LAMP_CPU));
  return same == 1.0f;
}

/* ---- 1. and 3. sharded == unsharded --------------------------------------------------------- */

static const lamp_option SGD[] = {{"lr", 0.1}, {"momentum", 0.9}};
static const lamp_option ADAMW[] = {{"lr", 1e-3}, {"weight_decay", 0.01}};

static void check_bit_identical(lamp_comm *mpi, const batches *d, const char *label, spec s) {
  outcome plain, sharded;
  char a[96], b[96];
  snprintf(a, sizeof a, "zero-%s-plain.lamp", label);
  snprintf(b, sizeof b, "zero-%s-sharded.lamp", label);
  s.shard = 0;
  train(mpi, &s, d, a, &plain);
  s.shard = 1;
  train(mpi, &s, d, b, &sharded);
  CHECK(sharded.stats.steps == (uint64_t)(STEPS / (s.accum ? s.accum : 1)), "%s: %llu steps", label,
        (unsigned long long)sharded.stats.steps);
  int weights = plain.bytes == sharded.bytes && memcmp(plain.weights, sharded.weights, plain.bytes) == 0;
  CHECK(weights, "%s: the sharded weights differ from the unsharded ones", label);
  int files = same_files(mpi, plain.ckpt, sharded.ckpt);
  CHECK(files, "%s: the sharded checkpoint (masters, optimizer state) differs from the unsharded one", label);
  int ranks = same_on_all_ranks(mpi, sharded.weights, sharded.bytes);
  CHECK(ranks, "%s: the sharded weights differ across ranks", label);
  if (rank == 0 && weights && files && ranks)
    printf("%s: sharded == unsharded bit for bit (weights and checkpoint) after %llu steps; ranks identical\n", label,
           (unsigned long long)sharded.stats.steps);
  free(plain.weights);
  free(sharded.weights);
}

static void check_clipping(lamp_comm *mpi, const batches *d) {
  spec s = {.precision = "fp32", .optim = "sgd", .optim_opts = SGD, .n_optim_opts = 2, .clip = 0.05};
  outcome plain, sharded, start;
  s.shard = 0;
  train(mpi, &s, d, "zero-clip-plain.lamp", &plain);
  s.shard = 1;
  train(mpi, &s, d, "zero-clip-sharded.lamp", &sharded);
  run r; /* the initial weights, to measure the movement */
  OK(run_open(&r, mpi, &s));
  start.weights = fp32_weights(&r);
  run_close(&r);
  size_t n = plain.bytes / sizeof(float);
  double moved = max_abs_diff(plain.weights, start.weights, n), diff = max_abs_diff(plain.weights, sharded.weights, n);
  double norm_diff = fabs(plain.stats.grad_norm - sharded.stats.grad_norm);
  CHECK(plain.stats.grad_norm > 0.05, "clip: the last norm %g does not exceed clip 0.05: nothing was clipped",
        plain.stats.grad_norm);
  CHECK(norm_diff <= 1e-12 * plain.stats.grad_norm, "clip: grad norm %.17g sharded, %.17g unsharded",
        sharded.stats.grad_norm, plain.stats.grad_norm);
  CHECK(moved > 1e-3 && diff <= 1e-6 * moved, "clip: sharded vs unsharded max |diff| %.3g, movement %.3g", diff, moved);
  CHECK(same_on_all_ranks(mpi, sharded.weights, sharded.bytes), "clip: the sharded weights differ across ranks");
  if (rank == 0)
    printf("clip 0.05: grad norm %.17g (sharded) vs %.17g; parameters within %.3g of a movement of %.3g (%s)\n",
           sharded.stats.grad_norm, plain.stats.grad_norm, diff, moved, diff == 0.0 ? "bit-identical" : "not bit-identical");
  free(plain.weights);
  free(sharded.weights);
  free(start.weights);
}

/* ---- 2. the ledger -------------------------------------------------------------------------- */

static void ledger_of(lamp_comm *mpi, int shard, size_t *state, size_t *master) {
  spec s = {.precision = "bf16", .optim = "adam", .optim_opts = ADAMW, .n_optim_opts = 2, .shard = shard};
  run r;
  OK(run_open(&r, mpi, &s));
  *state = lamp_ledger_get(LAMP_CPU, LAMP_MEM_OPTIM_STATE).current;
  *master = lamp_ledger_get(LAMP_CPU, LAMP_MEM_MASTER).current;
  run_close(&r);
}

static void check_ledger(lamp_comm *mpi) {
  size_t state, master, state_z, master_z;
  ledger_of(mpi, 0, &state, &master);
  ledger_of(mpi, 1, &state_z, &master_z);
  /* adam: two fp32 slots of 2250 elements; sharded, 1125 each */
  CHECK(state == 2 * 2250 * sizeof(float) && state_z * 2 == state, "optim_state %zu bytes sharded, %zu unsharded",
        state_z, state);
  CHECK(master == 2250 * sizeof(float) && master_z * 2 == master, "master %zu bytes sharded, %zu unsharded", master_z,
        master);
  if (rank == 0)
    printf("ledger, bf16 adamw: optim_state %zu -> %zu bytes per rank, master %zu -> %zu\n", state, state_z, master,
           master_z);
}

/* ---- 4. an inf on one rank skips the step on both --------------------------------------------- */

static void group(run *r, const batches *d, int s, long poke) {
  for (int k = 0; k < 2; k++) {
    OK(lamp_trainer_step(r->t, d->x[2 * s + k], d->y[2 * s + k]));
    if (k == 0 && poke >= 0) ((float *)lamp_tensor_data(lamp_model_grads(lamp_trainer_model(r->t))))[poke] = INFINITY;
  }
}

static void check_skip(lamp_comm *mpi, const batches *d) {
  spec s = {.precision = "fp16", .optim = "sgd", .optim_opts = SGD, .n_optim_opts = 2, .shard = 1, .accum = 2};
  run r;
  OK(run_open(&r, mpi, &s));
  group(&r, d, 0, -1);
  lamp_trainer_stats st = stats_of(&r);
  double scale0 = st.loss_scale;
  CHECK(st.steps == 1 && st.skipped_steps == 0, "clean group: steps %llu, skipped %llu", (unsigned long long)st.steps,
        (unsigned long long)st.skipped_steps);
  size_t bytes;
  void *before = weights_copy(&r, &bytes);
  group(&r, d, 1, rank == 1 ? 5 : -1); /* element 5 is in rank 0's piece */
  st = stats_of(&r);
  CHECK(st.steps == 1 && st.skipped_steps == 1, "after the inf on rank 1: steps %llu, skipped %llu on rank %d",
        (unsigned long long)st.steps, (unsigned long long)st.skipped_steps, rank);
  CHECK(st.loss_scale == scale0 / 2, "after the inf: scale %g on rank %d, expected %g", st.loss_scale, rank, scale0 / 2);
  void *after = weights_copy(&r, &bytes);
  CHECK(memcmp(before, after, bytes) == 0, "the skipped step changed the weights on rank %d", rank);
  free(after);
  group(&r, d, 2, -1);
  st = stats_of(&r);
  CHECK(st.steps == 2 && st.skipped_steps == 1, "after a clean group: steps %llu, skipped %llu",
        (unsigned long long)st.steps, (unsigned long long)st.skipped_steps);
  after = weights_copy(&r, &bytes);
  CHECK(memcmp(before, after, bytes) != 0, "the step after the skip did not move the weights");
  CHECK(same_on_all_ranks(mpi, after, bytes), "fp16 weights differ across ranks after the skip and the next step");
  if (rank == 0)
    printf("fp16 sharded: +inf on rank 1 in rank 0's piece: both ranks skipped, scale %g -> %g, the next step ran\n",
           scale0, st.loss_scale);
  free(before);
  free(after);
  run_close(&r);
}

/* ---- 5. refusals ------------------------------------------------------------------------------ */

/* The trainer must refuse with exactly `want` (or, with prefix, a message starting with it). */
static void expect_refusal(lamp_comm *mpi, const spec *s, const char *want, int prefix) {
  run r;
  lamp_status st = run_open(&r, mpi, s);
  const char *got = lamp_last_error();
  int ok = st != LAMP_OK && (prefix ? strncmp(got, want, strlen(want)) == 0 : strcmp(got, want) == 0);
  CHECK(ok, "expected the refusal\n  %s\ngot status %d:\n  %s", want, (int)st, st == LAMP_OK ? "(none)" : got);
  run_close(&r);
}

/* An optimizer that needs whole tensors: the trainer is made, its first step is refused. */
static void expect_step_refusal(lamp_comm *mpi, const char *plugin, const batches *d, const char *want) {
  spec s = {.precision = "fp32", .optim = plugin, .shard = 1};
  run r;
  OK(run_open(&r, mpi, &s));
  lamp_status st = lamp_trainer_step(r.t, d->x[0], d->y[0]);
  const char *got = lamp_last_error();
  CHECK(st != LAMP_OK && strncmp(got, want, strlen(want)) == 0, "%s: expected a message starting\n  %s\ngot:\n  %s",
        plugin, want, st == LAMP_OK ? "(none)" : got);
  run_close(&r);
}

static void check_refusals(lamp_comm *mpi, const batches *d) {
  spec s = {.precision = "fp32", .optim = "sgd", .optim_opts = SGD, .n_optim_opts = 2, .shard = rank == 0};
  expect_refusal(mpi, &s,
                 "Trainer: the ranks disagree on shard_optimizer: rank 0 has true, rank 1 has false; every rank must "
                 "build the same Trainer",
                 0);
  s.shard = 1;
  s.compress = LAMP_BF16;
  expect_refusal(mpi, &s,
                 "Trainer: compress = bf16 cannot be combined with shard_optimizer: sharding reduce-scatters the fp32 "
                 "gradients; use one or the other",
                 0);
  s.compress = LAMP_F32;
  static const lamp_option no_masters[] = {{"master_weights", 0}};
  s.precision = "bf16", s.prec_opts = no_masters, s.n_prec_opts = 1;
  expect_refusal(mpi, &s,
                 "Trainer: shard_optimizer shards fp32 weights or fp32 master weights; precision 'bf16' keeps bf16 "
                 "weights without masters (set master_weights = 1)",
                 0);
  static const lamp_option rounding[] = {{"stochastic_rounding", 1}};
  s.prec_opts = rounding;
  expect_refusal(mpi, &s,
                 "Trainer: shard_optimizer does not support stochastic rounding (precision 'bf16'): its random words "
                 "follow whole-slab element order",
                 0);
  const char *why = "Trainer: shard_optimizer steps optimizer '%s' over this rank's pieces of the slab, without whole "
                    "tensors: ";
  char want[256];
  snprintf(want, sizeof want, why, "tensortable");
  expect_step_refusal(mpi, LAMP_BAD_PLUGIN_DIR "/tensortable.so", d, want);
  snprintf(want, sizeof want, why, "muon");
  expect_step_refusal(mpi, LAMP_BAD_PLUGIN_DIR "/muon.so", d, want);
  if (rank == 0) printf("refusals: disagreement, compress, no masters, stochastic rounding, whole tensors\n");
}

int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  lamp_comm *mpi;
  OK(lamp_comm_open(&mpi, "mpi", NULL, 0));
  rank = check_rank = lamp_comm_rank(mpi);
  if (lamp_comm_size(mpi) != 2) {
    fprintf(stderr, "rank %d: test_zero_sharding needs exactly 2 ranks (mpirun -n 2), got %d\n", rank,
            lamp_comm_size(mpi));
    lamp_comm_close(mpi);
    return 1;
  }
  if (rank == 0) (void)mkdir(LAMP_TEST_TMP_DIR, 0755); /* the checkpoints' folder; it may exist */
  OK(lamp_comm_barrier(mpi));
  batches d;
  batches_make(&d);
  const spec cases[] = {
      {.precision = "fp32", .optim = "sgd", .optim_opts = SGD, .n_optim_opts = 2},
      {.precision = "fp32", .optim = "adam", .optim_opts = ADAMW, .n_optim_opts = 2},
      {.precision = "bf16", .optim = "sgd", .optim_opts = SGD, .n_optim_opts = 2},
      {.precision = "bf16", .optim = "adam", .optim_opts = ADAMW, .n_optim_opts = 2},
      {.precision = "bf16", .optim = "adam", .optim_opts = ADAMW, .n_optim_opts = 2, .accum = 2},
  };
  const char *labels[] = {"fp32-sgd", "fp32-adamw", "bf16-sgd", "bf16-adamw", "bf16-adamw-accum2"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_bit_identical(mpi, &d, labels[i], cases[i]);
  check_clipping(mpi, &d);
  check_ledger(mpi);
  check_skip(mpi, &d);
  check_refusals(mpi, &d);
  batches_free(&d);
  int status = mpi_check_finish(mpi, "test_zero_sharding");
  lamp_backend_release_workspace();
  lamp_comm_close(mpi);
  return status;
}
