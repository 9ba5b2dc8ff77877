/*
** Gradient buckets: the all-reduce of the gradient slab is cut into buckets of whole parameters
** from the end of the slab, and each bucket's reduction starts as soon as backward has finished
** its parameters, while the earlier layers are still running backward.
**
** The fake communicators (tests/bad_plugins/fake_comm.h) say rank 0 of 2 and double on SUM, so a
** run through them must equal the single-rank run bit for bit after the division by N = 2.
** recording_comm also has all_reduce_start/wait and logs each start; the test's log sink runs
** inside that call, i.e. in the middle of backward, and looks at the gradient slab right then.
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
#include "test_support.h"
#include "trainer_rig.h"

#define IN 20
#define HIDDEN 48
#define CLASSES 5
#define BATCH 32
#define STEPS 3
#define TINY_BUCKETS 1e-9 /* MiB: every parameter becomes a bucket of its own */

/* Three Linear layers: parameters 0..5 = (0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias). */
static lamp_layer *mlp3(void) {
  return seq(5, (lamp_layer *[]){linear(IN, HIDDEN), relu(), linear(HIDDEN, HIDDEN), relu(), linear(HIDDEN, CLASSES)});
}

typedef struct batch {
  lamp_tensor *x, *y;
} batch;

static batch make_batch(uint64_t seed) {
  batch b;
  b.x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, IN});
  b.y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  lamp_rng r;
  lamp_rng_seed(&r, seed);
  fill_uniform(b.x, &r, -1, 1);
  int32_t *labels = lamp_tensor_data(b.y);
  for (int i = 0; i < BATCH; i++) labels[i] = (int32_t)lamp_rng_below(&r, CLASSES);
  return b;
}

static void free_batch(batch *b) {
  lamp_tensor_release(b->x);
  lamp_tensor_release(b->y);
}

/* The parameters after STEPS steps on batches seeded 1..STEPS. */
static float *train_compressed(const char *comm, double bucket_mb, lamp_dtype compress, lamp_trainer_stats *stats) {
  const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.comm = comm, .optim_opts = sgd, .n_optim_opts = 2, .seed = 3, .bucket_mb = bucket_mb,
                   .compress = compress};
  rig r;
  rig_open(&r, &spec, mlp3());
  for (uint64_t s = 1; s <= STEPS; s++) {
    batch b = make_batch(s);
    OK(lamp_trainer_step(r.t, b.x, b.y));
    free_batch(&b);
  }
  if (stats != NULL) *stats = rig_stats(&r);
  float *p = params_copy(&r);
  rig_close(&r);
  return p;
}

static float *train(const char *comm, double bucket_mb, lamp_trainer_stats *stats) {
  return train_compressed(comm, bucket_mb, LAMP_F32, stats);
}

static size_t numel_of_mlp3(void) {
  return (size_t)(IN * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES);
}

static void assert_same_params(const float *a, const float *b) {
  assert_memory_equal(a, b, numel_of_mlp3() * sizeof(float));
}

/* ---- overlap, seen from inside the communicator --------------------------------------------- */

typedef struct watch {
  const float *grads;       /* the trainer's gradient slab */
  size_t first_layer_count; /* 0.weight's elements: computed last in backward */
  int starts;
  int starts_before_first_layer; /* starts seen while 0.weight's gradients were still NaN */
  uintptr_t last_pointer;
  int descending;           /* buckets started from the end of the slab towards its start */
  int waits_before_last_start;
} watch;

static watch seen;

static int all_nan(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isnan(x[i])) return 0;
  return 1;
}

static void watch_sink(lamp_log_level level, const char *line, void *ud) {
  (void)level, (void)ud;
  unsigned long n;
  size_t count;
  void *ptr;
  if (sscanf(line, "recording_comm: start %lu: %zu elements at %p", &n, &count, &ptr) == 3) {
    seen.starts++;
    if (all_nan(seen.grads, seen.first_layer_count)) seen.starts_before_first_layer++;
    if (seen.last_pointer != 0 && (uintptr_t)ptr >= seen.last_pointer) seen.descending = 0;
    seen.last_pointer = (uintptr_t)ptr;
  } else if (strncmp(line, "recording_comm: wait", 20) == 0 && seen.starts < 6) {
    seen.waits_before_last_start++;
  }
}

static void test_bucket_reductions_start_during_backward(void **state) {
  (void)state;
  const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.comm = RECORDING_COMM, .optim_opts = sgd, .n_optim_opts = 2, .seed = 3,
                   .bucket_mb = TINY_BUCKETS};
  rig r;
  rig_open(&r, &spec, mlp3());
  assert_int_equal(rig_stats(&r).buckets, 6);
  /* Poison the slab: a fresh backward overwrites every gradient, layer by layer from the end. */
  float *grads = lamp_tensor_data(lamp_model_grads(r.model));
  for (size_t i = 0; i < numel_of_mlp3(); i++) grads[i] = NAN;
  memset(&seen, 0, sizeof seen);
  seen.grads = grads;
  seen.first_layer_count = lamp_model_param_at(r.model, 0)->count;
  seen.descending = 1;
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(watch_sink, NULL);
  batch b = make_batch(1);
  lamp_status st = lamp_trainer_step(r.t, b.x, b.y);
  lamp_log_set_sink(NULL, NULL);
  lamp_log_set_level(LAMP_LOG_WARN);
  OK(st);
  free_batch(&b);
  assert_int_equal(seen.starts, 6);
  assert_true(seen.descending);
  /* 4 of the 6 buckets (layers 4 and 2) started while layer 0's gradients did not exist yet. */
  assert_int_equal(seen.starts_before_first_layer, 4);
  assert_int_equal(seen.waits_before_last_start, 0);
  lamp_trainer_stats s = rig_stats(&r);
  assert_int_equal(s.buckets_overlapped, 4);
  assert_int_equal(s.steps, 1);
  rig_close(&r);
}

/* ---- the results do not depend on the cut --------------------------------------------------- */

static void test_buckets_give_the_single_rank_result(void **state) {
  (void)state;
  lamp_trainer_stats stats;
  float *single = train("single", 0, NULL);
  float *overlapped = train(RECORDING_COMM, TINY_BUCKETS, &stats);
  assert_int_equal(stats.buckets, 6);
  assert_same_params(single, overlapped);
  float *one_bucket = train(RECORDING_COMM, 0, &stats); /* 25 MiB: everything in one bucket */
  assert_int_equal(stats.buckets, 1);
  assert_int_equal(stats.buckets_overlapped, 0);
  assert_same_params(single, one_bucket);
  free(single);
  free(overlapped);
  free(one_bucket);
}

/* A communicator without all_reduce_start reduces each bucket at once, still layer by layer. */
static void test_blocking_communicator_reduces_each_bucket(void **state) {
  (void)state;
  capture_start();
  lamp_trainer_stats stats;
  float *blocking = train(COUNTING_COMM, TINY_BUCKETS, &stats);
  capture_stop();
  assert_int_equal(captured.all_reduces, 1 + 6 * STEPS); /* the ranks' agreement check, then 6 buckets a step */
  assert_true(captured.numbering_ok);
  assert_int_equal(stats.buckets_overlapped, 4);
  float *single = train("single", 0, NULL);
  assert_same_params(single, blocking);
  free(single);
  free(blocking);
}

/*
** Wire compression: each bucket crosses as 16-bit values through an all-gather and is summed in
** fp32. The gradients the optimizer sees are then bf16-rounded means, so the parameters differ
** from the uncompressed run by about a bf16 ulp of each update: bounded here by 1 % of the
** largest parameter movement (a bf16 ulp is 2^-8 relative), and not zero.
*/
static void test_bf16_compression_stays_close(void **state) {
  (void)state;
  lamp_trainer_stats stats;
  float *plain = train(RECORDING_COMM, TINY_BUCKETS, &stats);
  capture_start();
  float *packed = train_compressed(RECORDING_COMM, TINY_BUCKETS, LAMP_BF16, &stats);
  capture_stop();
  assert_non_null(strstr(captured.other, "recording_comm: all_gather: 5 elements of 2 bytes"));
  assert_null(strstr(captured.other, "recording_comm: start")); /* no fp32 all-reduce of buckets */
  const lamp_option sgd[] = {{"lr", 0.1}, {"momentum", 0.9}};
  rig_spec spec = {.comm = "single", .optim_opts = sgd, .n_optim_opts = 2, .seed = 3};
  rig r;
  rig_open(&r, &spec, mlp3());
  float *initial = params_copy(&r);
  rig_close(&r);
  double movement = 0, diff = 0;
  for (size_t i = 0; i < numel_of_mlp3(); i++) {
    movement = fmax(movement, fabs((double)plain[i] - initial[i]));
    diff = fmax(diff, fabs((double)plain[i] - packed[i]));
    assert_true(isfinite(packed[i]));
  }
  print_message("bf16 on the wire: max |diff| %.3g, %.3g of the largest movement %.3g\n", diff, diff / movement,
                movement);
  assert_true(diff > 0.0);
  assert_true(diff < 0.01 * movement);
  free(initial);
  free(plain);
  free(packed);
}

static void test_bucket_size_is_validated(void **state) {
  (void)state;
  lamp_precision *p;
  lamp_comm *c;
  lamp_optim *o;
  lamp_loss *loss;
  OK(lamp_precision_open(&p, "fp32", NULL, 0));
  OK(lamp_comm_open(&c, "single", NULL, 0));
  OK(lamp_optim_open(&o, "sgd", NULL, 0));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = mlp3();
  lamp_trainer_config cfg = {.model = net, .loss = loss, .precision = p, .comm = c, .optim = o,
                             .device = LAMP_CPU, .accum = 1, .bucket_mb = -1};
  lamp_trainer *t;
  assert_int_equal(lamp_trainer_new(&t, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: 'bucket_mb' must be a finite number >= 0 (0: 25), got -1");
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(o);
  lamp_comm_close(c);
  lamp_precision_close(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bucket_reductions_start_during_backward),
      cmocka_unit_test(test_buckets_give_the_single_rank_result),
      cmocka_unit_test(test_blocking_communicator_reduces_each_bucket),
      cmocka_unit_test(test_bf16_compression_stays_close),
      cmocka_unit_test(test_bucket_size_is_validated),
  };
  return cmocka_run_group_tests(tests, rig_group_setup, rig_group_teardown);
}
