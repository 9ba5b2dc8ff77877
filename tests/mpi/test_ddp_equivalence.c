/*
** DDP is exact: N ranks of B rows take the step of 1 rank of N*B rows (docs/ddp.md).
** Run as `mpirun -n 2 test_ddp_equivalence`, with the real mpi communicator plugin and the real
** precision and optimizer plugins.
**
**   1. Every rank draws the same STEPS global batches of GLOBAL rows from one seed and takes its
**      own half (rank r: rows [HALF r, HALF r + HALF)). 2 ranks x HALF must equal, within 1e-5
**      of the largest parameter movement, two references each rank computes by itself with the
**      single communicator: 1 rank x GLOBAL, and 1 rank x HALF with accum 2 (the halves as
**      micro-batches). For SGD with momentum and for Adam, fp32, under a cosine schedule.
**      Afterwards the parameters are bit-identical on every rank.
**   2. Skip agreement under fp16: accum 2, and +inf poked into one gradient element between the
**      micro-steps on rank 1 only. The all-reduce carries it to rank 0, so both ranks skip the
**      step (skipped_steps 1, steps unchanged, parameters unchanged), both scales halve to the
**      same value, and the next step runs on both with parameters still identical.
**   3. Stochastic rounding (bf16 without masters) with a different seed on each rank: the ranks
**      round with rank 0's, so after STEPS steps their 16-bit weights are identical, and equal
**      to a single-rank run of rank 0's seed over the whole batches.
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

#define IN 24
#define HIDDEN 64
#define CLASSES 10
#define GLOBAL 128
#define WORLD 2
#define HALF (GLOBAL / WORLD)
#define STEPS 20

static int rank;

/* ---- data and model ------------------------------------------------------------------------ */

static lamp_tensor *tensor(lamp_dtype dtype, int ndim, const int64_t *shape) {
  lamp_tensor *t;
  OK(lamp_tensor_new(&t, dtype, LAMP_CPU, ndim, shape, LAMP_MEM_DATA));
  return t;
}

/* STEPS global batches of GLOBAL rows and each one's halves [HALF k, HALF k + HALF) as tensors. */
typedef struct batches {
  lamp_tensor *x[STEPS], *y[STEPS];
  lamp_tensor *hx[STEPS][WORLD], *hy[STEPS][WORLD];
} batches;

static void batches_make(batches *d) {
  lamp_rng rng;
  lamp_rng_seed(&rng, 2024); /* the same seed on every rank: the same global batches */
  int64_t xs[2] = {GLOBAL, IN}, ys[1] = {GLOBAL}, hxs[2] = {HALF, IN}, hys[1] = {HALF};
  for (int s = 0; s < STEPS; s++) {
    d->x[s] = tensor(LAMP_F32, 2, xs);
    d->y[s] = tensor(LAMP_I32, 1, ys);
    float *x = lamp_tensor_data(d->x[s]);
    int32_t *y = lamp_tensor_data(d->y[s]);
    for (size_t i = 0; i < (size_t)GLOBAL * IN; i++) x[i] = (float)lamp_rng_normal(&rng);
    for (size_t i = 0; i < GLOBAL; i++) y[i] = (int32_t)lamp_rng_below(&rng, CLASSES);
    for (int k = 0; k < WORLD; k++) {
      d->hx[s][k] = tensor(LAMP_F32, 2, hxs);
      d->hy[s][k] = tensor(LAMP_I32, 1, hys);
      memcpy(lamp_tensor_data(d->hx[s][k]), x + (size_t)k * HALF * IN, (size_t)HALF * IN * sizeof(float));
      memcpy(lamp_tensor_data(d->hy[s][k]), y + (size_t)k * HALF, HALF * sizeof(int32_t));
    }
  }
}

static void batches_free(batches *d) {
  for (int s = 0; s < STEPS; s++) {
    lamp_tensor_release(d->x[s]);
    lamp_tensor_release(d->y[s]);
    for (int k = 0; k < WORLD; k++) {
      lamp_tensor_release(d->hx[s][k]);
      lamp_tensor_release(d->hy[s][k]);
    }
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

/* ---- a trainer on given plugins ------------------------------------------------------------- */

typedef struct run {
  lamp_precision *prec;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_model *model;
} run;

typedef struct run_spec {
  const char *precision;
  const lamp_option *prec_opts;
  size_t n_prec_opts;
  uint64_t seed; /* 0: 11 */
  const char *optim;
  const lamp_option *optim_opts;
  size_t n_optim_opts;
  lamp_comm *comm; /* borrowed */
  int accum;
} run_spec;

static void run_open(run *r, const run_spec *spec) {
  memset(r, 0, sizeof *r);
  OK(lamp_precision_open(&r->prec, spec->precision, spec->prec_opts, spec->n_prec_opts));
  OK(lamp_optim_open(&r->optim, spec->optim, spec->optim_opts, spec->n_optim_opts));
  OK(lamp_cross_entropy_new(&r->loss));
  lamp_layer *net = mlp();
  lamp_trainer_config cfg = {.model = net, .loss = r->loss, .precision = r->prec, .comm = spec->comm,
                             .optim = r->optim, .device = LAMP_CPU, .accum = spec->accum, .clip = 0.0,
                             .schedule = {.kind = LAMP_SCHEDULE_COSINE, .total = STEPS + 5},
                             .seed = spec->seed ? spec->seed : 11};
  OK(lamp_trainer_new(&r->t, &cfg));
  lamp_layer_release(net);
  r->model = lamp_trainer_model(r->t);
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

static float *params_copy(const run *r) {
  size_t n = lamp_model_numel(r->model);
  float *p = xmalloc(n * sizeof *p);
  memcpy(p, lamp_model_trainable(r->model), n * sizeof *p);
  return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

/* ---- 1. 2 ranks x 64 == 1 rank x 128 == 1 rank x 64 with accum 2 ---------------------------- */

typedef enum feed { WHOLE, HALVES, MINE } feed;

/*
** STEPS optimizer steps; returns the final fp32 parameters. WHOLE: the GLOBAL-row batch, accum
** 1 (single comm). HALVES: both halves as micro-batches, accum 2 (single comm). MINE: this
** rank's half, accum 1, through the mpi communicator.
*/
static float *train(const batches *d, const char *optim, const lamp_option *opts, size_t n_opts, lamp_comm *comm,
                    feed how, size_t *numel, lamp_trainer_stats *stats) {
  run_spec spec = {.precision = "fp32", .optim = optim, .optim_opts = opts, .n_optim_opts = n_opts,
                   .comm = comm, .accum = how == HALVES ? 2 : 1};
  run r;
  run_open(&r, &spec);
  for (int s = 0; s < STEPS; s++) {
    if (how == WHOLE) OK(lamp_trainer_step(r.t, d->x[s], d->y[s]));
    else if (how == MINE) OK(lamp_trainer_step(r.t, d->hx[s][rank], d->hy[s][rank]));
    else
      for (int k = 0; k < WORLD; k++) OK(lamp_trainer_step(r.t, d->hx[s][k], d->hy[s][k]));
  }
  *stats = stats_of(&r);
  *numel = lamp_model_numel(r.model);
  float *p = params_copy(&r);
  run_close(&r);
  return p;
}

/* The parameters before any step (seed 11), to measure how far training moved them. */
static float *initial_params(lamp_comm *single) {
  static const lamp_option opts[] = {{"lr", 0.1}};
  run_spec spec = {.precision = "fp32", .optim = "sgd", .optim_opts = opts, .n_optim_opts = 1, .comm = single,
                   .accum = 1};
  run r;
  run_open(&r, &spec);
  float *p = params_copy(&r);
  run_close(&r);
  return p;
}

static void check_equivalence(const batches *d, lamp_comm *mpi, lamp_comm *single, const char *optim,
                              const lamp_option *opts, size_t n_opts) {
  size_t n, n1, n2;
  lamp_trainer_stats s_ddp, s_whole, s_halves;
  float *p0 = initial_params(single);
  float *ddp = train(d, optim, opts, n_opts, mpi, MINE, &n, &s_ddp);
  float *whole = train(d, optim, opts, n_opts, single, WHOLE, &n1, &s_whole);
  float *halves = train(d, optim, opts, n_opts, single, HALVES, &n2, &s_halves);
  lamp_trainer_stats s_alone;
  size_t n3;
  float *alone = train(d, optim, opts, n_opts, single, MINE, &n3, &s_alone); /* no all-reduce */
  CHECK(n == n1 && n == n2 && n == n3, "%s: parameter counts %zu, %zu, %zu, %zu", optim, n, n1, n2, n3);

  CHECK(s_ddp.world == WORLD, "%s: ddp world %d", optim, s_ddp.world);
  CHECK(s_ddp.steps == STEPS && s_whole.steps == STEPS && s_halves.steps == STEPS,
        "%s: steps %llu (ddp), %llu (whole), %llu (halves), expected %d", optim, (unsigned long long)s_ddp.steps,
        (unsigned long long)s_whole.steps, (unsigned long long)s_halves.steps, STEPS);
  CHECK(s_ddp.batch == HALF && s_ddp.effective_batch == GLOBAL, "%s: ddp batch %zu, B_eff %zu", optim,
        s_ddp.batch, s_ddp.effective_batch);
  CHECK(s_whole.effective_batch == GLOBAL && s_halves.effective_batch == GLOBAL,
        "%s: B_eff %zu (whole), %zu (halves)", optim, s_whole.effective_batch, s_halves.effective_batch);
  CHECK(s_ddp.samples == (uint64_t)STEPS * HALF, "%s: ddp samples on this rank %llu", optim,
        (unsigned long long)s_ddp.samples);

  double moved = max_abs_diff(whole, p0, n);
  double d_whole = max_abs_diff(ddp, whole, n), d_halves = max_abs_diff(ddp, halves, n);
  double d_ref = max_abs_diff(whole, halves, n);
  int bits_halves = memcmp(ddp, halves, n * sizeof *ddp) == 0;
  if (rank == 0)
    printf("%s: largest parameter movement %.4g; 2 ranks x %d vs 1 x %d: max |diff| %.3g (%.3g of it); "
           "vs 1 x %d accum 2: %.3g (%.3g, %s); the two references: %.3g\n",
           optim, moved, HALF, GLOBAL, d_whole, d_whole / moved, HALF, d_halves, d_halves / moved,
           bits_halves ? "bit-identical" : "not bit-identical", d_ref / moved);
  if (rank == 0) printf("%s: control, rank 0 alone on its half (no all-reduce): %.3g of the movement\n", optim,
                        max_abs_diff(alone, whole, n) / moved);
  CHECK(moved > 0.005, "%s: training hardly moved the parameters (%.3g)", optim, moved);
  CHECK(d_whole <= 1e-5 * moved, "%s: 2 ranks vs 1 rank x %d: max |diff| %.3g > 1e-5 x %.3g", optim, GLOBAL,
        d_whole, moved);
  CHECK(d_halves <= 1e-5 * moved, "%s: 2 ranks vs 1 rank x %d accum 2: max |diff| %.3g > 1e-5 x %.3g", optim,
        HALF, d_halves, moved);
  /* The same check element by element, with the element's own scale as a floor. */
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)ddp[i] - whole[i]) <= 1e-5 * fmax(moved, fabs((double)whole[i])))) bad++;
  CHECK(bad == 0, "%s: %zu of %zu parameters differ from 1 rank x %d by more than 1e-5", optim, bad, n, GLOBAL);
  /* The control: a rank training on its half alone (no all-reduce) lands far away. */
  double d_alone = max_abs_diff(alone, whole, n);
  CHECK(d_alone >= 0.05 * moved, "%s: a rank alone on its half is only %.3g of the movement from the reference: "
        "the comparison cannot tell", optim, d_alone / moved);

  int same = same_on_all_ranks(mpi, ddp, n * sizeof *ddp);
  CHECK(same, "%s: parameters differ across ranks after %d steps", optim, STEPS);
  if (rank == 0 && same) printf("%s: parameters bit-identical on all %d ranks after %d steps\n", optim, WORLD, STEPS);
  free(p0);
  free(ddp);
  free(whole);
  free(halves);
  free(alone);
}

/* ---- 2. an inf on one rank skips the step on all ------------------------------------------ */

#define QUARTER (HALF / 2)

/* This rank's half of global batch s, split into two QUARTER-row micro-batches. */
static void quarter(const batches *d, int s, int k, lamp_tensor **x, lamp_tensor **y) {
  int64_t xs[2] = {QUARTER, IN}, ys[1] = {QUARTER};
  *x = tensor(LAMP_F32, 2, xs);
  *y = tensor(LAMP_I32, 1, ys);
  memcpy(lamp_tensor_data(*x), (float *)lamp_tensor_data(d->hx[s][rank]) + (size_t)k * QUARTER * IN,
         (size_t)QUARTER * IN * sizeof(float));
  memcpy(lamp_tensor_data(*y), (int32_t *)lamp_tensor_data(d->hy[s][rank]) + (size_t)k * QUARTER,
         QUARTER * sizeof(int32_t));
}

/* One accumulation group; poke >= 0 puts +inf into that gradient element between the micro-steps. */
static void group(run *r, const batches *d, int s, long poke) {
  for (int k = 0; k < 2; k++) {
    lamp_tensor *x, *y;
    quarter(d, s, k, &x, &y);
    OK(lamp_trainer_step(r->t, x, y));
    if (k == 0 && poke >= 0) ((float *)lamp_tensor_data(lamp_model_grads(r->model)))[poke] = INFINITY;
    lamp_tensor_release(x);
    lamp_tensor_release(y);
  }
}

/* Master weights and 16-bit weights identical on every rank? */
static int weights_agree(lamp_comm *c, run *r) {
  const lamp_tensor *w = lamp_model_weights(r->model);
  int a = same_on_all_ranks(c, lamp_model_trainable(r->model), lamp_model_numel(r->model) * sizeof(float));
  int b = same_on_all_ranks(c, lamp_tensor_data(w), lamp_tensor_nbytes(w));
  return a && b;
}

static void check_skip_agreement(const batches *d, lamp_comm *mpi) {
  static const lamp_option opts[] = {{"lr", 0.05}, {"momentum", 0.9}};
  run_spec spec = {.precision = "fp16", .optim = "sgd", .optim_opts = opts, .n_optim_opts = 2, .comm = mpi,
                   .accum = 2};
  run r;
  run_open(&r, &spec);
  size_t n = lamp_model_numel(r.model);

  group(&r, d, 0, -1);
  lamp_trainer_stats st = stats_of(&r);
  CHECK(st.steps == 1 && st.skipped_steps == 0, "clean group: steps %llu, skipped %llu",
        (unsigned long long)st.steps, (unsigned long long)st.skipped_steps);
  double scale0 = st.loss_scale;
  CHECK(scale0 == 65536.0, "initial fp16 scale %g", scale0);
  float *before = params_copy(&r);

  group(&r, d, 1, rank == 1 ? 5 : -1); /* +inf into gradient element 5, on rank 1 only */
  st = stats_of(&r);
  CHECK(st.steps == 1, "after the inf on rank 1: steps %llu, expected 1 (the step is skipped on rank %d too)",
        (unsigned long long)st.steps, rank);
  CHECK(st.skipped_steps == 1, "after the inf on rank 1: skipped_steps %llu on rank %d, expected 1",
        (unsigned long long)st.skipped_steps, rank);
  CHECK(st.loss_scale == scale0 / 2, "after the inf: scale %g on rank %d, expected %g", st.loss_scale, rank,
        scale0 / 2);
  float scale = (float)st.loss_scale;
  CHECK(same_on_all_ranks(mpi, &scale, sizeof scale), "the loss scales differ across ranks after the skip");
  CHECK(memcmp(before, lamp_model_trainable(r.model), n * sizeof(float)) == 0,
        "the skipped step changed the parameters on rank %d", rank);
  CHECK(weights_agree(mpi, &r), "parameters differ across ranks after the skipped step");
  double skipped_scale = st.loss_scale;

  group(&r, d, 2, -1); /* the next group writes the slab afresh: the step runs on every rank */
  st = stats_of(&r);
  CHECK(st.steps == 2 && st.skipped_steps == 1, "after a clean group: steps %llu, skipped %llu",
        (unsigned long long)st.steps, (unsigned long long)st.skipped_steps);
  CHECK(st.loss_scale == skipped_scale, "scale %g after a clean step, expected %g", st.loss_scale, skipped_scale);
  CHECK(memcmp(before, lamp_model_trainable(r.model), n * sizeof(float)) != 0, "the step after the skip did not move");
  CHECK(weights_agree(mpi, &r), "parameters differ across ranks after the step following the skip");
  if (rank == 0)
    printf("fp16: +inf on rank 1 only: both ranks skipped (steps 1, skipped 1), scale %g -> %g on both; "
           "parameters identical across ranks before and after the next step\n",
           scale0, skipped_scale);
  free(before);
  run_close(&r);
}

/* ---- 3. stochastic rounding rounds with rank 0's seed ------------------------------------------ */

static void *weights_bytes(run *r, size_t *bytes) {
  const lamp_tensor *w = lamp_model_weights(r->model);
  *bytes = lamp_tensor_nbytes(w);
  void *copy = xmalloc(*bytes);
  memcpy(copy, lamp_tensor_data(w), *bytes);
  return copy;
}

static void check_stochastic_rounding_seed(const batches *d, lamp_comm *mpi, lamp_comm *single) {
  static const lamp_option opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  static const lamp_option prec[] = {{"master_weights", 0}, {"stochastic_rounding", 1}};
  run_spec spec = {.precision = "bf16", .prec_opts = prec, .n_prec_opts = 2, .seed = 21 + (uint64_t)rank,
                   .optim = "sgd", .optim_opts = opts, .n_optim_opts = 2, .comm = mpi, .accum = 1};
  run r;
  run_open(&r, &spec);
  for (int s = 0; s < STEPS; s++) OK(lamp_trainer_step(r.t, d->hx[s][rank], d->hy[s][rank]));
  size_t bytes, ref_bytes;
  void *mine = weights_bytes(&r, &bytes);
  CHECK(weights_agree(mpi, &r), "bf16 weights differ across ranks under stochastic rounding (seeds 21 and 22)");
  run_close(&r);
  spec.seed = 21, spec.comm = single, spec.accum = 2; /* rank 0's seed, both halves on one rank */
  run_open(&r, &spec);
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < WORLD; k++) OK(lamp_trainer_step(r.t, d->hx[s][k], d->hy[s][k]));
  void *ref = weights_bytes(&r, &ref_bytes);
  size_t differ = 0;
  for (size_t i = 0; i < bytes / 2; i++) differ += ((uint16_t *)mine)[i] != ((uint16_t *)ref)[i];
  /* The same steps up to the order of the gradient sums: a few weights may round differently. */
  CHECK(ref_bytes == bytes && differ * 100 < bytes / 2, "%zu of %zu bf16 weights differ from rank 0's seed on one rank",
        differ, bytes / 2);
  if (rank == 0)
    printf("bf16 stochastic rounding, seeds 21 and 22: 16-bit weights identical on both ranks after %d steps; %zu of "
           "%zu differ from one rank of seed 21\n",
           STEPS, differ, bytes / 2);
  free(mine);
  free(ref);
  run_close(&r);
}

int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  lamp_comm *mpi, *single;
  OK(lamp_comm_open(&mpi, "mpi", NULL, 0));
  rank = check_rank = lamp_comm_rank(mpi);
  if (lamp_comm_size(mpi) != WORLD) {
    fprintf(stderr, "rank %d: test_ddp_equivalence needs exactly %d ranks (mpirun -n %d), got %d\n", rank, WORLD,
            WORLD, lamp_comm_size(mpi));
    lamp_comm_close(mpi);
    return 1;
  }
  OK(lamp_comm_open(&single, "single", NULL, 0));

  batches d;
  batches_make(&d);
  static const lamp_option sgd_opts[] = {{"lr", 0.1}, {"momentum", 0.9}};
  static const lamp_option adam_opts[] = {{"lr", 1e-3}};
  check_equivalence(&d, mpi, single, "sgd", sgd_opts, 2);
  check_equivalence(&d, mpi, single, "adam", adam_opts, 1);
  check_skip_agreement(&d, mpi);
  check_stochastic_rounding_seed(&d, mpi, single);
  batches_free(&d);

  int status = mpi_check_finish(mpi, "test_ddp_equivalence");
  lamp_backend_release_workspace();
  lamp_comm_close(single);
  lamp_comm_close(mpi);
  return status;
}
