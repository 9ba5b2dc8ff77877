/*
** Gradient buckets on a device whose work is queued: with a communicator that orders
** its collectives on the device's stream (all_reduce_enqueue, wait_stream, poll), each bucket's
** all-reduce is queued right after the backward kernels that produce its gradients, so it runs
** while the earlier layers' backward still computes; the waits are queued too, and the step's
** report copy stays its one host synchronisation.
**
** The device is the simulated one, whose queue runs in order on a worker thread, and the
** communicator tests/bad_plugins/stream_comm.c, which queues each reduction on the sim's stream
** and logs, from the worker, when it runs ("reduce N") and when its wait runs ("wait N"). The
** test's log sink runs right there, inside the queue, and looks at the device's memory through
** its host view at that moment: what the queue has done before the reduction and what not yet.
*/
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/log.h"
#include "nn/loss.h"
#include "test_support.h"
#include "train/trainer.h"

#define STREAM_COMM LAMP_BAD_PLUGIN_DIR "/stream_comm.so"
#define IN 20
#define HIDDEN 48
#define CLASSES 5
#define BATCH 32
#define STEPS 3
#define TINY_BUCKETS 1e-9 /* MiB: every parameter becomes a bucket of its own */
#define N_PARAMS ((size_t)(IN * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES))

/* Three Linear layers: parameters 0..5 = (0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias). */
static lamp_layer *mlp3(void) {
  return seq(5, (lamp_layer *[]){linear(IN, HIDDEN), relu(), linear(HIDDEN, HIDDEN), relu(), linear(HIDDEN, CLASSES)});
}

typedef struct run {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_model *model;
  lamp_device device;
} run;

static run open_run(const char *comm, const lamp_option *comm_opts, size_t n_comm_opts, lamp_device device,
                    double bucket_mb) {
  static const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  run r = {.device = device};
  OK(lamp_precision_open(&r.prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&r.comm, comm, comm_opts, n_comm_opts));
  OK(lamp_optim_open(&r.optim, "sgd", sgd, 2));
  OK(lamp_cross_entropy_new(&r.loss));
  lamp_layer *net = mlp3();
  lamp_trainer_config c = {.model = net, .loss = r.loss, .precision = r.prec, .comm = r.comm, .optim = r.optim,
                           .device = device, .accum = 1, .seed = 3, .bucket_mb = bucket_mb};
  OK(lamp_trainer_new(&r.t, &c));
  lamp_layer_release(net);
  r.model = lamp_trainer_model(r.t);
  return r;
}

static void close_run(run *r) {
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_comm_close(r->comm);
  lamp_precision_close(r->prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

static lamp_status step_on(run *r, uint64_t seed) {
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, IN}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  lamp_rng g;
  lamp_rng_seed(&g, seed);
  fill_uniform(x, &g, -1, 1);
  int32_t *labels = lamp_tensor_data(y);
  for (int i = 0; i < BATCH; i++) labels[i] = (int32_t)lamp_rng_below(&g, CLASSES);
  lamp_status st = lamp_trainer_step(r->t, x, y);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  return st;
}

/* The fp32 slab the optimizer updates, copied to the host. */
static float *params_of(const run *r) {
  float *p = malloc(N_PARAMS * sizeof *p);
  assert_non_null(p);
  assert_int_equal(lamp_model_numel(r->model), N_PARAMS);
  OK(lamp_copy(LAMP_HOST, p, r->device, lamp_model_trainable(r->model), N_PARAMS * sizeof *p));
  return p;
}

/* The parameters after STEPS steps on batches seeded 1..STEPS. */
static float *train(const char *comm, const lamp_option *opts, size_t n_opts, lamp_device device,
                    lamp_trainer_stats *stats) {
  run r = open_run(comm, opts, n_opts, device, TINY_BUCKETS);
  for (uint64_t s = 1; s <= STEPS; s++) OK(step_on(&r, s));
  if (stats != NULL) OK(lamp_trainer_stats_get(r.t, stats));
  float *p = params_of(&r);
  close_run(&r);
  return p;
}

/* ---- the communicator's log, read inside the queue ------------------------------------------ */

typedef struct tape {
  pthread_mutex_t lock;
  const float *grads;          /* the host view of the gradient slab */
  size_t first_layer_count;    /* 0.weight's elements: backward computes them last */
  const float *params;         /* the host view of the parameters the optimizer updates */
  const float *params_before;  /* and a copy of them from before the step */
  int enqueues, reduces, waits, blocking;
  unsigned long base;          /* the number of the first enqueue seen, less 1 */
  int numbering_ok;            /* enqueues numbered on from there; each reduction after its enqueue, in order */
  int reduced_final;           /* reductions that found their bucket's gradients all computed */
  int reduced_before_layer0;   /* ... while 0.weight's were still the poison */
  int reduced_before_update;   /* ... with the parameters not yet updated */
  int waits_after_reduces;     /* waits that ran after every reduction of the step */
} tape;

static tape seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int count_nan(const float *x, size_t n) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += isnan(x[i]) != 0;
  return k;
}

static void on_reduce(unsigned long n, size_t count, const float *at) {
  seen.numbering_ok &= n == seen.base + (unsigned long)seen.reduces + 1 && n <= seen.base + (unsigned long)seen.enqueues;
  seen.reduces++;
  if (seen.grads == NULL) return;
  seen.reduced_final += at >= seen.grads && at + count <= seen.grads + N_PARAMS && count_nan(at, count) == 0;
  seen.reduced_before_layer0 += count_nan(seen.grads, seen.first_layer_count) == (int)seen.first_layer_count;
  seen.reduced_before_update += memcmp(seen.params, seen.params_before, N_PARAMS * sizeof(float)) == 0;
}

static void tape_sink(lamp_log_level level, const char *line, void *ud) {
  (void)level, (void)ud;
  unsigned long n;
  size_t count;
  void *at;
  pthread_mutex_lock(&seen.lock);
  if (sscanf(line, "stream_comm: enqueue %lu: %zu elements at %p", &n, &count, &at) == 3) {
    if (seen.enqueues == 0) seen.base = n - 1;
    seen.numbering_ok &= n == seen.base + (unsigned long)seen.enqueues + 1;
    seen.enqueues++;
  } else if (sscanf(line, "stream_comm: reduce %lu: %zu elements at %p", &n, &count, &at) == 3) {
    on_reduce(n, count, at);
  } else if (sscanf(line, "stream_comm: wait %lu", &n) == 1) {
    seen.waits++;
    seen.waits_after_reduces += seen.reduces == seen.enqueues;
  } else if (sscanf(line, "stream_comm: all_reduce: %zu elements", &count) == 1) {
    seen.blocking++;
  }
  pthread_mutex_unlock(&seen.lock);
}

static void tape_start(void) {
  pthread_mutex_lock(&seen.lock);
  seen.grads = seen.params = seen.params_before = NULL;
  seen.enqueues = seen.reduces = seen.waits = seen.blocking = 0;
  seen.reduced_final = seen.reduced_before_layer0 = seen.reduced_before_update = seen.waits_after_reduces = 0;
  seen.base = 0;
  seen.numbering_ok = 1;
  pthread_mutex_unlock(&seen.lock);
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(tape_sink, NULL);
}

static void tape_stop(void) {
  lamp_log_set_sink(NULL, NULL);
  lamp_log_set_level(LAMP_LOG_WARN);
}

/* ---- order and overlap ---------------------------------------------------------------------- */

static void test_buckets_are_queued_during_backward(void **state) {
  (void)state;
  run r = open_run(STREAM_COMM, NULL, 0, LAMP_SIM, TINY_BUCKETS);
  OK(step_on(&r, 1)); /* buffers made on first use */
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(r.t, &s));
  assert_int_equal(s.buckets, 6);
  /* Poison the slab: a fresh backward overwrites every gradient, layer by layer from the end. */
  float *grads = lamp_tensor_data(lamp_model_grads(r.model));
  OK(lamp_fill(LAMP_SIM, grads, LAMP_F32, N_PARAMS, NAN));
  float *before = params_of(&r); /* waits for the fill too */
  tape_start();
  seen.grads = lamp_device_host_view(LAMP_SIM, grads);
  seen.first_layer_count = lamp_model_param_at(r.model, 0)->count;
  seen.params = lamp_device_host_view(LAMP_SIM, lamp_model_trainable(r.model));
  seen.params_before = before;
  uint64_t waits = lamp_sim_host_waits();
  lamp_status st = step_on(&r, 2);
  waits = lamp_sim_host_waits() - waits;
  tape_stop();
  OK(st);
  assert_int_equal(seen.enqueues, 6);
  assert_int_equal(seen.reduces, 6);
  assert_int_equal(seen.waits, 6);
  assert_int_equal(seen.blocking, 0);
  assert_true(seen.numbering_ok);
  /* Each reduction ran after the kernels of its bucket, before the optimizer step... */
  assert_int_equal(seen.reduced_final, 6);
  assert_int_equal(seen.reduced_before_update, 6);
  /* ... and 4 of the 6 (layers 4 and 2) before layer 0's backward kernels: queued ahead of them. */
  assert_int_equal(seen.reduced_before_layer0, 4);
  assert_int_equal(seen.waits_after_reduces, 6);
  /* The host waited once: for the step's report, not for the buckets. */
  assert_int_equal(waits, 1);
  OK(lamp_trainer_stats_get(r.t, &s));
  assert_int_equal(s.buckets_overlapped, 4);
  assert_int_equal(s.steps, 2);
  free(before);
  close_run(&r);
}

/* ---- the results ---------------------------------------------------------------------------- */

static void assert_same_params(const float *a, const float *b) { assert_memory_equal(a, b, N_PARAMS * sizeof(float)); }

/* "Two ranks" whose SUM doubles, divided by N = 2 again: single's bits, on the sim and the CPU. */
static void test_two_ranks_train_to_the_single_bits(void **state) {
  (void)state;
  lamp_trainer_stats stats;
  float *cpu = train("single", NULL, 0, LAMP_CPU, NULL);
  float *single = train("single", NULL, 0, LAMP_SIM, NULL);
  float *queued = train(STREAM_COMM, NULL, 0, LAMP_SIM, &stats);
  assert_int_equal(stats.world, 2);
  assert_int_equal(stats.buckets_overlapped, 4);
  assert_same_params(cpu, single);
  assert_same_params(single, queued);
  free(cpu);
  free(single);
  free(queued);
}

static void test_world_size_one_trains_to_the_single_bits(void **state) {
  (void)state;
  const lamp_option one[] = {{"size", 1}};
  lamp_trainer_stats stats;
  tape_start();
  float *alone = train(STREAM_COMM, one, 1, LAMP_SIM, &stats);
  tape_stop();
  assert_int_equal(stats.world, 1);
  assert_int_equal(seen.enqueues + seen.blocking, 0); /* one rank has nothing to reduce */
  float *single = train("single", NULL, 0, LAMP_SIM, NULL);
  assert_same_params(single, alone);
  free(single);
  free(alone);
}

/* The CPU has no stream: the same communicator is called as today, blocking, bucket by bucket. */
static void test_the_cpu_keeps_the_blocking_path(void **state) {
  (void)state;
  tape_start();
  float *blocking = train(STREAM_COMM, NULL, 0, LAMP_CPU, NULL);
  tape_stop();
  assert_int_equal(seen.enqueues, 0);
  assert_int_equal(seen.blocking, 1 + 6 * STEPS); /* the ranks' agreement check, then 6 buckets a step */
  float *single = train("single", NULL, 0, LAMP_CPU, NULL);
  assert_same_params(single, blocking);
  free(single);
  free(blocking);
}

/* ---- a collective that fails ---------------------------------------------------------------- */

static void test_a_failed_collective_stops_training(void **state) {
  (void)state;
  const lamp_option fail[] = {{"fail_at", 3}}; /* the first step's third bucket times out */
  run r = open_run(STREAM_COMM, fail, 1, LAMP_SIM, TINY_BUCKETS);
  float *before = params_of(&r);
  const char *expected = "stream_comm: rank 0: all_reduce #3 timed out (simulated: fail_at = 3)";
  assert_int_equal(step_on(&r, 1), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_last_error(), expected);
  /* No optimizer step was taken on the half-reduced gradients... */
  float *after = params_of(&r);
  assert_same_params(before, after);
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(r.t, &s));
  assert_int_equal(s.steps + s.skipped_steps, 0);
  /* ... and the communicator stays broken: the next step fails the same way, without waiting. */
  assert_int_equal(step_on(&r, 2), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_last_error(), expected);
  free(before);
  free(after);
  close_run(&r);
}

static int setup(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_WARN);
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buckets_are_queued_during_backward),
      cmocka_unit_test(test_two_ranks_train_to_the_single_bits),
      cmocka_unit_test(test_world_size_one_trains_to_the_single_bits),
      cmocka_unit_test(test_the_cpu_keeps_the_blocking_path),
      cmocka_unit_test(test_a_failed_collective_stops_training),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
