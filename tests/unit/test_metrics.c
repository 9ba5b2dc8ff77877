/*
** The Trainer's metrics file (Trainer{metrics = FILE}, core/train/trainer_metrics.h): what its
** records say after a real run on the CPU (step numbering, losses, learning rates, loss scales,
** skipped steps, the epoch record with the evaluation that follows it, eval records), how a
** resumed run continues it and a fresh one starts it over, the errors of a path that cannot be
** written, and a file that stops taking records in the middle of a run (RLIMIT_FSIZE).
*/
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/log.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "tensor/ledger.h"
#include "test_support.h"
#include "train/trainer.h"

#define IN 16      /* [1, 4, 4] samples */
#define SAMPLES 160
#define BATCH 8    /* 20 batches per epoch */
#define LR 0.05

#define EXPECT_ERROR(expr, code, message)                \
  do {                                                   \
    assert_int_equal((expr), (code));                    \
    assert_string_equal(lamp_last_error(), (message));   \
  } while (0)

static char tmp_dir[512];

static const char *tmp_path(const char *name) {
  static char buf[4][1024];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", tmp_dir, name);
  return p;
}

typedef struct run {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_dataset *ds;
  lamp_loader *loader, *test_loader;
} run;

typedef struct run_spec {
  const char *precision; /* default fp32 */
  const lamp_option *prec_opts;
  size_t n_prec_opts;
  int accum;             /* default 1 */
  double clip;
  int cosine;            /* lr along a cosine over 2 epochs, else constant */
  const char *metrics;
} run_spec;

static lamp_dataset *dataset(void) { return patterned_dataset("metrics", SAMPLES); }

static lamp_trainer_config config_of(run *r, const run_spec *spec, lamp_layer *net) {
  lamp_trainer_config c = {.model = net, .loss = r->loss, .precision = r->prec, .comm = r->comm, .optim = r->optim,
                           .device = LAMP_CPU, .accum = spec->accum ? spec->accum : 1, .clip = spec->clip, .seed = 3,
                           .metrics = spec->metrics};
  if (spec->cosine) c.schedule = (lamp_schedule){.kind = LAMP_SCHEDULE_COSINE, .total = 2 * SAMPLES / BATCH / c.accum};
  return c;
}

/* The plugins and the data; the trainer itself is made by open_run (or a test, for its errors). */
static void open_parts(run *r, const run_spec *spec) {
  static const lamp_option sgd[] = {{"lr", LR}, {"momentum", 0.9}};
  memset(r, 0, sizeof *r);
  OK(lamp_precision_open(&r->prec, spec->precision ? spec->precision : "fp32", spec->prec_opts, spec->n_prec_opts));
  OK(lamp_comm_open(&r->comm, "single", NULL, 0));
  OK(lamp_optim_open(&r->optim, "sgd", sgd, 2));
  OK(lamp_cross_entropy_new(&r->loss));
  r->ds = dataset();
  lamp_loader_config lc = {.batch = BATCH, .shuffle = 1, .drop_last = 1, .seed = 5, .world = 1};
  OK(lamp_loader_new(&r->loader, r->ds, &lc));
  lamp_loader_config tc = {.batch = 40, .world = 1};
  OK(lamp_loader_new(&r->test_loader, r->ds, &tc));
}

static lamp_layer *mlp(void) { return seq(3, (lamp_layer *[]){linear(IN, 12), relu(), linear(12, 3)}); }

static lamp_status make_trainer(run *r, const run_spec *spec) {
  lamp_layer *net = mlp();
  lamp_trainer_config c = config_of(r, spec, net);
  lamp_status st = lamp_trainer_new(&r->t, &c);
  lamp_layer_release(net);
  return st;
}

static void open_run(run *r, const run_spec *spec) {
  open_parts(r, spec);
  OK(make_trainer(r, spec));
}

static void close_run(run *r) {
  lamp_loader_free(r->loader);
  lamp_loader_free(r->test_loader);
  lamp_dataset_release(r->ds);
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_comm_close(r->comm);
  lamp_precision_close(r->prec);
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return text;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Every line of the file, parsed: each must be a whole JSON object ending in a newline. */
static json_t *records_of(const char *path) {
  size_t len;
  char *text = read_text(path, &len);
  json_t *all = json_array();
  if (len > 0) assert_int_equal(text[len - 1], '\n');
  for (char *line = text; *line != '\0';) {
    char *end = strchr(line, '\n');
    json_error_t err;
    json_t *r = json_loadb(line, (size_t)(end - line), 0, &err);
    if (r == NULL) fail_msg("%s: line %d is not JSON: %s", path, (int)json_array_size(all) + 1, err.text);
    assert_true(json_is_object(r));
    json_array_append_new(all, r);
    line = end + 1;
  }
  free(text);
  return all;
}

static const char *type_of(const json_t *r) { return json_string_value(json_object_get(r, "type")); }
static json_int_t int_of(const json_t *r, const char *k) {
  const json_t *v = json_object_get(r, k);
  if (!json_is_integer(v)) fail_msg("field %s is not an integer", k);
  return json_integer_value(v);
}
static double num_of(const json_t *r, const char *k) {
  const json_t *v = json_object_get(r, k);
  if (!json_is_number(v)) fail_msg("field %s is not a number", k);
  return json_number_value(v);
}

/* Numbers are written with 9 significant digits. */
static void assert_close(double got, double want) {
  double tol = 1e-8 * (want < 0 ? -want : want) + 1e-12;
  if (!(got >= want - tol && got <= want + tol)) fail_msg("got %.17g, expected %.17g", got, want);
}

/* Records from..to-1 are step records numbered first, first + 1, ... in epoch `epoch`. */
static void assert_steps(const json_t *all, size_t from, size_t to, json_int_t first, json_int_t epoch) {
  for (size_t i = from; i < to; i++) {
    const json_t *r = json_array_get(all, i);
    assert_string_equal(type_of(r), "step");
    assert_int_equal(int_of(r, "step"), first + (json_int_t)(i - from));
    assert_int_equal(int_of(r, "epoch"), epoch);
  }
}

static void test_records_of_a_run(void **state) {
  (void)state;
  const char *path = tmp_path("run.jsonl");
  remove(path);
  run r;
  open_run(&r, &(run_spec){.accum = 2, .clip = 0.5, .cosine = 1, .metrics = path});
  lamp_epoch_result e1, e2;
  lamp_eval_result v1, v2;
  OK(lamp_trainer_epoch(r.t, r.loader, &e1));
  lamp_trainer_stats s1;
  OK(lamp_trainer_stats_get(r.t, &s1));
  OK(lamp_trainer_evaluate(r.t, r.test_loader, &v1));
  OK(lamp_trainer_train(r.t, r.loader, 3, &e2));
  OK(lamp_trainer_evaluate(r.t, r.test_loader, &v2));
  json_t *all = records_of(path);
  assert_int_equal(json_array_size(all), 10 + 1 + 3 + 1);
  assert_steps(all, 0, 10, 1, 1);
  assert_steps(all, 11, 14, 11, 2);

  /* The last step of epoch 1: what the trainer's stats say of it. */
  const json_t *last = json_array_get(all, 9);
  assert_close(num_of(last, "lr"), s1.lr);
  assert_close(num_of(last, "grad_norm"), s1.grad_norm);
  assert_close(num_of(last, "loss_scale"), 1.0);
  assert_true(json_is_false(json_object_get(last, "skipped")));
  assert_true(num_of(last, "samples_per_s") > 0.0);
  lamp_schedule cosine = {.kind = LAMP_SCHEDULE_COSINE, .total = 20};
  for (size_t i = 0; i < 14; i++) {
    const json_t *rec = json_array_get(all, i);
    if (i != 10) assert_close(num_of(rec, "lr"), lamp_schedule_lr(&cosine, LR, (uint64_t)int_of(rec, "step") - 1));
  }

  /* The epoch record: the mean of its steps' losses (each the mean of its 2 micro-batches), and
     the evaluation that followed it. */
  const json_t *epoch = json_array_get(all, 10);
  assert_string_equal(type_of(epoch), "epoch");
  assert_int_equal(int_of(epoch, "epoch"), 1);
  assert_int_equal(int_of(epoch, "step"), 10);
  double sum = 0.0;
  for (size_t i = 0; i < 10; i++) sum += num_of(json_array_get(all, i), "loss");
  assert_close(num_of(epoch, "train_loss"), e1.mean_loss);
  assert_true(fabs(sum / 10 - e1.mean_loss) < 1e-7);
  assert_int_equal(int_of(epoch, "samples"), SAMPLES);
  assert_int_equal(int_of(epoch, "steps"), 10);
  assert_int_equal(int_of(epoch, "skipped"), 0);
  assert_close(num_of(epoch, "test_loss"), v1.mean_loss);
  assert_close(num_of(epoch, "test_accuracy"), v1.accuracy);
  assert_int_equal(int_of(epoch, "test_samples"), SAMPLES);
  assert_string_equal(json_string_value(json_object_get(epoch, "device")), "cpu");
  const json_t *memory = json_object_get(epoch, "memory");
  for (int tag = 0; tag <= LAMP_MEM_TAG_COUNT; tag++) {
    const json_t *entry = json_object_get(memory, lamp_mem_tag_name((lamp_mem_tag)tag));
    assert_non_null(entry);
    assert_true(int_of(entry, "peak") >= int_of(entry, "current"));
  }
  assert_true(int_of(json_object_get(memory, "params"), "current") > 0);

  /* An evaluation in the middle of epoch 2 has a record of its own. */
  const json_t *eval = json_array_get(all, 14);
  assert_string_equal(type_of(eval), "eval");
  assert_int_equal(int_of(eval, "epoch"), 2);
  assert_int_equal(int_of(eval, "step"), 13);
  assert_close(num_of(eval, "test_accuracy"), v2.accuracy);
  json_decref(all);
  close_run(&r);
}

/* fp16 from a scale that overflows: the skipped steps are numbered with the others, each with the
   scale it ran at (halved by the next), and the learning rate a taken step would have used. */
static void test_skipped_steps(void **state) {
  (void)state;
  static const lamp_option overflowing[] = {{"init_scale", 1048576.0}, {"growth_interval", 2}};
  const char *path = tmp_path("skipped.jsonl");
  run r;
  open_run(&r, &(run_spec){.precision = "fp16", .prec_opts = overflowing, .n_prec_opts = 2, .metrics = path});
  lamp_epoch_result e;
  OK(lamp_trainer_train(r.t, r.loader, 12, &e));
  assert_true(e.skipped_steps > 0 && e.skipped_steps < 12);
  json_t *all = records_of(path);
  assert_int_equal(json_array_size(all), 12);
  assert_steps(all, 0, 12, 1, 1);
  size_t skipped = 0;
  for (size_t i = 0; i < 12; i++) {
    const json_t *rec = json_array_get(all, i);
    assert_null(json_object_get(rec, "grad_norm")); /* no clipping, no norm */
    assert_close(num_of(rec, "lr"), LR);
    if (!json_is_true(json_object_get(rec, "skipped"))) continue;
    skipped++;
    assert_close(num_of(json_array_get(all, i + 1), "loss_scale"), num_of(rec, "loss_scale") / 2);
  }
  assert_int_equal(skipped, e.skipped_steps);
  assert_close(num_of(json_array_get(all, 0), "loss_scale"), 1048576.0);
  json_decref(all);
  close_run(&r);
}

/* A run killed after its checkpoint at step 4 wrote steps 5..7 and half a line; resumed from
   the checkpoint, it cuts those and writes steps 5.. again, with the same losses. */
static void test_resume_continues_the_file(void **state) {
  (void)state;
  const char *path = tmp_path("resumed.jsonl"), *ckpt = tmp_path("resumed.lamp");
  remove(path);
  run a;
  open_run(&a, &(run_spec){.metrics = path});
  lamp_epoch_result e;
  OK(lamp_trainer_train(a.t, a.loader, 4, &e));
  OK(lamp_trainer_save(a.t, ckpt, NULL, 0));
  OK(lamp_trainer_train(a.t, a.loader, 3, &e));
  close_run(&a);
  json_t *before = records_of(path);
  assert_int_equal(json_array_size(before), 7);
  FILE *f = fopen(path, "ab");
  fputs("{\"type\":\"step\",\"st", f);
  fclose(f);

  run b;
  open_run(&b, &(run_spec){.metrics = path});
  int found;
  OK(lamp_trainer_resume(b.t, ckpt, NULL, 0, &found));
  assert_true(found);
  json_t *cut = records_of(path);
  assert_int_equal(json_array_size(cut), 4);
  json_decref(cut);
  OK(lamp_trainer_train(b.t, b.loader, 6, &e));
  close_run(&b);
  json_t *after = records_of(path);
  assert_int_equal(json_array_size(after), 10);
  assert_steps(after, 0, 10, 1, 1);
  for (size_t i = 4; i < 7; i++)
    assert_close(num_of(json_array_get(after, i), "loss"), num_of(json_array_get(before, i), "loss"));
  json_decref(before);
  json_decref(after);
}

/* A run that does not resume starts the file afresh at its first record, not before: a trainer
   that never steps leaves an old file as it was. */
static void test_fresh_run_starts_over(void **state) {
  (void)state;
  const char *path = tmp_path("fresh.jsonl");
  write_text(path, "{\"type\":\"step\",\"step\":40}\n");
  run r;
  open_run(&r, &(run_spec){.metrics = path});
  close_run(&r);
  size_t len;
  char *text = read_text(path, &len);
  assert_string_equal(text, "{\"type\":\"step\",\"step\":40}\n");
  free(text);
  open_run(&r, &(run_spec){.metrics = path});
  lamp_epoch_result e;
  OK(lamp_trainer_train(r.t, r.loader, 2, &e));
  close_run(&r);
  json_t *all = records_of(path);
  assert_int_equal(json_array_size(all), 2);
  assert_steps(all, 0, 2, 1, 1);
  json_decref(all);
}

/* A waiting epoch record goes out with the next training, a save, or the trainer's end. */
static void test_epoch_record_without_evaluation(void **state) {
  (void)state;
  const char *path = tmp_path("no_eval.jsonl"), *ckpt = tmp_path("no_eval.lamp");
  run r;
  open_run(&r, &(run_spec){.metrics = path});
  lamp_epoch_result e;
  OK(lamp_trainer_epoch(r.t, r.loader, &e));
  json_t *all = records_of(path);
  assert_int_equal(json_array_size(all), 20); /* the epoch record waits */
  json_decref(all);
  OK(lamp_trainer_save(r.t, ckpt, NULL, 0));
  all = records_of(path);
  assert_int_equal(json_array_size(all), 21);
  const json_t *epoch = json_array_get(all, 20);
  assert_string_equal(type_of(epoch), "epoch");
  assert_null(json_object_get(epoch, "test_loss"));
  json_decref(all);
  lamp_eval_result v;
  OK(lamp_trainer_evaluate(r.t, r.test_loader, &v)); /* the epoch record is gone: an eval record */
  OK(lamp_trainer_epoch(r.t, r.loader, &e));
  close_run(&r);
  all = records_of(path);
  assert_int_equal(json_array_size(all), 21 + 1 + 20 + 1);
  assert_string_equal(type_of(json_array_get(all, 21)), "eval");
  assert_int_equal(int_of(json_array_get(all, 21), "epoch"), 1);
  assert_steps(all, 22, 42, 21, 2);
  assert_string_equal(type_of(json_array_get(all, 42)), "epoch");
  assert_int_equal(int_of(json_array_get(all, 42), "epoch"), 2);
  json_decref(all);
}

static void test_paths_that_cannot_be_written(void **state) {
  (void)state;
  run r;
  open_parts(&r, &(run_spec){0});
  char expected[2048];
  snprintf(expected, sizeof expected, "Trainer: cannot open the metrics file %s for writing: Is a directory", tmp_dir);
  EXPECT_ERROR(make_trainer(&r, &(run_spec){.metrics = tmp_dir}), LAMP_ERR_INVALID_USAGE, expected);
  const char *file = tmp_path("plain"), *under = tmp_path("plain/run.jsonl");
  write_text(file, "");
  snprintf(expected, sizeof expected, "Trainer: cannot open the metrics file %s for writing: Not a directory", under);
  EXPECT_ERROR(make_trainer(&r, &(run_spec){.metrics = under}), LAMP_ERR_INVALID_USAGE, expected);
  const char *fifo = tmp_path("fifo");
  remove(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  snprintf(expected, sizeof expected, "Trainer: the metrics file %s is not a regular file", fifo);
  EXPECT_ERROR(make_trainer(&r, &(run_spec){.metrics = fifo}), LAMP_ERR_INVALID_USAGE, expected);
  EXPECT_ERROR(make_trainer(&r, &(run_spec){.metrics = ""}), LAMP_ERR_INVALID_ARG,
               "Trainer: 'metrics' must name a file, got an empty string");
  assert_null(r.t);
  close_run(&r);
}

static int warnings;
static char warning[1024];

static void warning_sink(lamp_log_level level, const char *line, void *ud) {
  (void)ud;
  if (level != LAMP_LOG_WARN) return;
  warnings++;
  snprintf(warning, sizeof warning, "%s", line);
}

/* A file that stops growing (the disk full; here a file size limit): one warning, training goes
   on, and the file keeps whole records only. */
static void test_file_that_stops_growing(void **state) {
  (void)state;
  const char *path = tmp_path("full.jsonl");
  remove(path);
  run r;
  open_run(&r, &(run_spec){.metrics = path});
  struct rlimit old, small;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small = old;
  small.rlim_cur = 1000; /* about 5 step records */
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  warnings = 0;
  lamp_log_set_sink(warning_sink, NULL);
  lamp_epoch_result e;
  lamp_status st = lamp_trainer_train(r.t, r.loader, 12, &e);
  lamp_log_set_sink(NULL, NULL);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, was);
  OK(st);
  assert_int_equal(e.steps, 12);
  assert_int_equal(warnings, 1);
  char expected[2048];
  snprintf(expected, sizeof expected,
           "warning: metrics: cannot write to the metrics file %s: File too large; recording stops here, training goes on",
           path);
  assert_string_equal(warning, expected);
  close_run(&r);
  json_t *all = records_of(path);
  assert_true(json_array_size(all) >= 3 && json_array_size(all) < 12);
  assert_steps(all, 0, json_array_size(all), 1, 1);
  json_decref(all);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmp_dir, sizeof tmp_dir, "%s/metrics", LAMP_TEST_TMP_DIR);
  make_dir(tmp_dir);
  lamp_log_set_level(LAMP_LOG_WARN);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_records_of_a_run),
      cmocka_unit_test(test_skipped_steps),
      cmocka_unit_test(test_resume_continues_the_file),
      cmocka_unit_test(test_fresh_run_starts_over),
      cmocka_unit_test(test_epoch_record_without_evaluation),
      cmocka_unit_test(test_paths_that_cannot_be_written),
      cmocka_unit_test(test_file_that_stops_growing),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
