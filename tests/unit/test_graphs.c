/*
** Device graphs (backend.h's lamp_graph_*, train/step_graph.h) on the simulated device, whose
** recording follows CUDA's rules: work recorded is not run until launched, and each launch runs it
** again with the recorded arguments; what a replay could not repeat is refused with a message
** naming it, the first refusal failing the recording; frees asked for while recording happen
** once, after it. Then the Trainer: a network without host work per step trains to the same
** bytes with graphs as without, replays most micro-steps, keeps one host wait per optimizer step,
** records again when the loss scale moves, and gives graphs up, saying why, for Dropout.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/error.h"
#include "base/log.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "tensor/ledger.h"
#include "test_support.h"
#include "train/trainer.h"

/* ---- the backend's recording ----------------------------------------------------------------- */

static float *sim_floats(size_t n, float value) {
  float *p = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof *p);
  assert_non_null(p);
  OK(lamp_fill(LAMP_SIM, p, LAMP_F32, n, value));
  return p;
}

static float read_first(const float *dev) {
  float v;
  OK(lamp_copy(LAMP_HOST, &v, LAMP_SIM, dev, sizeof v));
  return v;
}

static void test_recorded_work_runs_only_when_launched(void **state) {
  (void)state;
  float *y = sim_floats(64, 1.0f), *x = sim_floats(64, 2.0f);
  OK(lamp_graph_begin(LAMP_SIM));
  OK(lamp_axpy(LAMP_SIM, y, x, 64, 0.5f)); /* y += 0.5 x */
  OK(lamp_scale(LAMP_SIM, y, 64, 3.0f));   /* y *= 3 */
  lamp_graph *g;
  OK(lamp_graph_end(LAMP_SIM, &g));
  assert_non_null(g);
  assert_true(read_first(y) == 1.0f); /* recorded, not run */
  OK(lamp_graph_launch(g));
  assert_true(read_first(y) == 6.0f); /* (1 + 1) * 3 */
  OK(lamp_graph_launch(g));
  OK(lamp_graph_launch(g));
  assert_true(read_first(y) == 66.0f); /* (6 + 1) * 3 = 21, then (21 + 1) * 3 */
  lamp_graph_free(g);
  lamp_mem_free(x);
  lamp_mem_free(y);
}

/* Each refused call fails at once with its message, and graph_end with the first one. */
static void expect_refused(lamp_status st, const char *what) {
  char want[256];
  snprintf(want, sizeof want, "sim: %s while a graph is being captured (a replay would not repeat it)", what);
  assert_int_equal(st, LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), want);
}

static void test_what_a_replay_cannot_repeat_is_refused(void **state) {
  (void)state;
  float *y = sim_floats(16, 1.0f), host[16] = {0};
  lamp_event *e;
  OK(lamp_event_new(LAMP_SIM, &e));
  OK(lamp_graph_begin(LAMP_SIM));
  OK(lamp_scale(LAMP_SIM, y, 16, 5.0f));
  assert_null(lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, 64));
  assert_string_equal(lamp_last_error(), "memory: 64 bytes for activations on sim: sim: allocating device memory while "
                                         "a graph is being captured (a replay would not repeat it)");
  expect_refused(lamp_synchronize(LAMP_SIM), "synchronize");
  expect_refused(lamp_copy(LAMP_HOST, host, LAMP_SIM, y, sizeof host), "a blocking copy");
  expect_refused(lamp_copy(LAMP_SIM, y, LAMP_HOST, host, sizeof host), "a blocking copy");
  expect_refused(lamp_upload_async(LAMP_SIM, y, host, sizeof host), "upload_async");
  expect_refused(lamp_event_record(e), "event_record");
  expect_refused(lamp_event_wait(e), "event_wait");
  lamp_graph *g = (lamp_graph *)(void *)y; /* must come back NULL */
  assert_int_equal(lamp_graph_end(LAMP_SIM, &g), LAMP_ERR_INVALID_USAGE);
  assert_null(g);
  assert_string_equal(lamp_last_error(),
                      "sim: allocating device memory while a graph is being captured (a replay would not repeat it)");
  assert_true(read_first(y) == 1.0f); /* the scale recorded before the refusals never ran */
  /* The queue works as before once the recording has ended. */
  OK(lamp_scale(LAMP_SIM, y, 16, 5.0f));
  assert_true(read_first(y) == 5.0f);
  OK(lamp_event_record(e));
  OK(lamp_event_wait(e));
  lamp_event_free(e);
  lamp_mem_free(y);
}

/* A free while recording happens once, when the recording ends: replays do not free it again (a
   second free would be reported by the next wait as "freed twice"). */
static void test_a_free_while_recording_happens_once(void **state) {
  (void)state;
  float *y = sim_floats(16, 2.0f), *gone = sim_floats(16, 0.0f);
  uint64_t changes = lamp_ledger_changes(LAMP_SIM);
  OK(lamp_graph_begin(LAMP_SIM));
  OK(lamp_scale(LAMP_SIM, y, 16, 2.0f));
  lamp_mem_free(gone);
  lamp_graph *g;
  OK(lamp_graph_end(LAMP_SIM, &g));
  assert_true(lamp_ledger_changes(LAMP_SIM) == changes + 1); /* the ledger saw the free */
  OK(lamp_graph_launch(g));
  OK(lamp_graph_launch(g));
  OK(lamp_synchronize(LAMP_SIM));
  assert_true(read_first(y) == 8.0f);
  lamp_graph_free(g);
  lamp_mem_free(y);
}

static void test_graphs_need_a_device_that_records_them(void **state) {
  (void)state;
  assert_true(lamp_device_has(LAMP_SIM, LAMP_CAP_GRAPHS));
  assert_false(lamp_device_has(LAMP_CPU, LAMP_CAP_GRAPHS));
  assert_int_equal(lamp_graph_begin(LAMP_CPU), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "graph_begin: device cpu does not record graphs");
  lamp_graph *g;
  assert_int_equal(lamp_graph_end(LAMP_SIM, &g), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "sim: graph_end without graph_begin");
  OK(lamp_graph_begin(LAMP_SIM));
  assert_int_equal(lamp_graph_begin(LAMP_SIM), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "sim: graph_begin: a graph is being captured already");
  OK(lamp_graph_end(LAMP_SIM, &g)); /* an empty recording is a graph that does nothing */
  OK(lamp_graph_launch(g));
  lamp_graph_free(g);
  lamp_graph_free(NULL);
}

/* ---- the Trainer ------------------------------------------------------------------------------- */

#define IN 16
#define SAMPLES 256
#define BATCH 8

typedef struct run {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_dataset *ds;
  lamp_loader *loader;
} run;

static lamp_dataset *dataset(void) { return patterned_dataset("graphs", SAMPLES); }

static lamp_layer *network(int dropout) {
  if (!dropout) return seq(4, (lamp_layer *[]){linear(IN, 12), relu(), linear(12, 12), linear(12, 3)});
  lamp_layer *drop;
  OK(lamp_dropout_new(&drop, 0.25));
  return seq(4, (lamp_layer *[]){linear(IN, 12), relu(), drop, linear(12, 3)});
}

/* fp16 with a scale that overflows at first and grows every 2 clean steps: it moves both ways, and
   each move records the micro-steps again. */
static run open_run(const char *precision, lamp_graphs_mode graphs, int accum, int dropout) {
  run r;
  static const lamp_option scaler[] = {{"init_scale", 1048576.0}, {"growth_interval", 2}};
  static const lamp_option sgd[] = {{"lr", 0.05}, {"momentum", 0.9}};
  int fp16 = strcmp(precision, "fp16") == 0;
  OK(lamp_precision_open(&r.prec, precision, fp16 ? scaler : NULL, fp16 ? 2 : 0));
  OK(lamp_comm_open(&r.comm, "single", NULL, 0));
  OK(lamp_optim_open(&r.optim, "sgd", sgd, 2));
  OK(lamp_cross_entropy_new(&r.loss));
  lamp_layer *net = network(dropout);
  lamp_trainer_config c = {.model = net, .loss = r.loss, .precision = r.prec, .comm = r.comm, .optim = r.optim,
                           .device = LAMP_SIM, .accum = accum, .clip = 0.5, .seed = 3, .graphs = graphs};
  OK(lamp_trainer_new(&r.t, &c));
  lamp_layer_release(net);
  r.ds = dataset();
  lamp_loader_config lc = {.batch = BATCH, .shuffle = 1, .drop_last = 1, .seed = 5, .world = 1};
  OK(lamp_loader_new(&r.loader, r.ds, &lc));
  return r;
}

static void close_run(run *r) {
  lamp_loader_free(r->loader);
  lamp_dataset_release(r->ds);
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_comm_close(r->comm);
  lamp_precision_close(r->prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

/* The trained parameters (fp32 masters) on the host. */
static float *parameters(run *r) {
  lamp_model *m = lamp_trainer_model(r->t);
  size_t n = lamp_model_numel(m);
  float *host = malloc(n * sizeof *host);
  assert_non_null(host);
  OK(lamp_copy(LAMP_HOST, host, LAMP_SIM, lamp_model_trainable(m), n * sizeof *host));
  return host;
}

static lamp_trainer_stats stats_of(run *r) {
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(r->t, &s));
  return s;
}

/* An epoch (32 batches), an evaluation in batches of another size and 8 more optimizer steps,
   with and without graphs. */
static void check_same_bytes(const char *precision, int accum) {
  run with = open_run(precision, LAMP_GRAPHS_AUTO, accum, 0);
  run without = open_run(precision, LAMP_GRAPHS_OFF, accum, 0);
  run *both[2] = {&with, &without};
  uint64_t waits[2];
  for (int i = 0; i < 2; i++) {
    lamp_epoch_result e;
    lamp_eval_result ev;
    OK(lamp_trainer_epoch(both[i]->t, both[i]->loader, &e));
    /* Batches larger than training's: the activations are made again, and the recordings are stale. */
    lamp_loader *eval;
    lamp_loader_config lc = {.batch = 24, .world = 1};
    OK(lamp_loader_new(&eval, both[i]->ds, &lc));
    OK(lamp_trainer_evaluate(both[i]->t, eval, &ev));
    lamp_loader_free(eval);
    OK(lamp_trainer_train(both[i]->t, both[i]->loader, 2, &e)); /* memory settles again after evaluate */
    uint64_t before = lamp_sim_host_waits();
    OK(lamp_trainer_train(both[i]->t, both[i]->loader, 6, &e));
    waits[i] = lamp_sim_host_waits() - before;
    assert_int_equal(e.steps, 6);
  }
  lamp_trainer_stats s = stats_of(&with), s0 = stats_of(&without);
  assert_true(s.graphs);
  assert_false(s0.graphs);
  assert_true(s0.graph_records == 0 && s0.graph_replays == 0);
  assert_true(s.skipped_steps == s0.skipped_steps && s.loss_scale == s0.loss_scale);
  if (strcmp(precision, "fp16") == 0) { /* the scale moved: recorded again each time, replayed between */
    assert_true(s.skipped_steps > 0);
    assert_true(s.graph_records > 10 && s.graph_replays > 10);
  } else { /* recorded once per micro-step, and again after the evaluation changed the memory */
    assert_int_equal(s.graph_records, 2 * accum);
    assert_true(s.graph_replays > s.micro_steps * 3 / 4);
  }
  assert_int_equal(waits[0], 6); /* one wait per optimizer step, replayed or not */
  assert_int_equal(waits[1], 6);
  float *a = parameters(&with), *b = parameters(&without);
  assert_memory_equal(a, b, lamp_model_numel(lamp_trainer_model(with.t)) * sizeof *a);
  free(a);
  free(b);
  close_run(&with);
  close_run(&without);
}

static void test_trainer_replays_to_the_same_bytes(void **state) {
  (void)state;
  check_same_bytes("bf16", 1);
  check_same_bytes("fp16", 1);
}

static void test_trainer_replays_to_the_same_bytes_accumulating(void **state) {
  (void)state;
  check_same_bytes("fp32", 3);
  check_same_bytes("fp16", 3);
}

/* Dropout draws its masks on the host: the first recording is refused, and training goes on. */
static void test_dropout_gives_graphs_up(void **state) {
  (void)state;
  run with = open_run("fp16", LAMP_GRAPHS_ON, 2, 1);
  run without = open_run("fp16", LAMP_GRAPHS_OFF, 2, 1);
  lamp_epoch_result e;
  OK(lamp_trainer_train(with.t, with.loader, 5, &e));
  OK(lamp_trainer_train(without.t, without.loader, 5, &e));
  lamp_trainer_stats s = stats_of(&with);
  assert_false(s.graphs);
  assert_true(s.graph_records == 0 && s.graph_replays == 0);
  float *a = parameters(&with), *b = parameters(&without);
  assert_memory_equal(a, b, lamp_model_numel(lamp_trainer_model(with.t)) * sizeof *a);
  free(a);
  free(b);
  close_run(&with);
  close_run(&without);
}

static void expect_refused_config(lamp_device device, const char *message) {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  static const lamp_option sgd[] = {{"lr", 0.05}};
  OK(lamp_precision_open(&prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&comm, "single", NULL, 0));
  OK(lamp_optim_open(&optim, "sgd", sgd, 1));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = network(0);
  lamp_trainer *t = NULL;
  lamp_trainer_config c = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                           .device = device, .accum = 1, .graphs = LAMP_GRAPHS_ON};
  assert_int_not_equal(lamp_trainer_new(&t, &c), LAMP_OK);
  assert_null(t);
  assert_string_equal(lamp_last_error(), message);
  c.graphs = (lamp_graphs_mode)7;
  assert_int_equal(lamp_trainer_new(&t, &c), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "Trainer: 'graphs' must be auto (0), on (1) or off (2), got 7");
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

static void test_graphs_on_where_they_cannot_be(void **state) {
  (void)state;
  expect_refused_config(LAMP_CPU, "Trainer: graphs = true needs a device that records graphs (cuda); cpu does not");
}

static int setup(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_ERROR);
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_recorded_work_runs_only_when_launched),
      cmocka_unit_test(test_what_a_replay_cannot_repeat_is_refused),
      cmocka_unit_test(test_a_free_while_recording_happens_once),
      cmocka_unit_test(test_graphs_need_a_device_that_records_them),
      cmocka_unit_test(test_trainer_replays_to_the_same_bytes),
      cmocka_unit_test(test_trainer_replays_to_the_same_bytes_accumulating),
      cmocka_unit_test(test_dropout_gives_graphs_up),
      cmocka_unit_test(test_graphs_on_where_they_cannot_be),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
