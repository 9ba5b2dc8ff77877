/*
** The trainer's checkpoints, in one process with the real plugins: a resume continues to the
** same bits as an unbroken run, and every checkpoint that does not fit this trainer (another
** model, shape, precision, optimizer, kind; a damaged file) is refused with its own message and
** leaves the trainer exactly as it was, a precision state its plugin refuses included; a folder
** of damaged checkpoints is refused, not taken for an empty one; a run never saves into (or prunes)
** a folder of another run's checkpoints unless it starts over. (Fresh processes and two ranks:
** tests/cli/test_resume.sh, tests/cli/test_checkpoint_folders.sh and tests/mpi/test_resume.sh.)
*/
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "test_support.h"
#include "trainer_rig.h"

#define FAILS(expr, code, message)                                                    \
  do {                                                                                \
    assert_int_equal((expr), (code));                                                 \
    assert_string_equal(lamp_last_error(), (message));                                \
  } while (0)

static char tmp_dir[512];

#define PICKY LAMP_BAD_PLUGIN_DIR "/picky.so"
#define OVERREPORT LAMP_BAD_PLUGIN_DIR "/overreport.so"

static const char *tmp_path(const char *name) {
  static char buf[4][1024];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", tmp_dir, name);
  return p;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* tmp_dir/name, empty: what an earlier run of the test left there is removed first. */
static const char *fresh_dir(const char *name) {
  const char *dir = tmp_path(name);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  make_dir(dir);
  return dir;
}

static int file_exists(const char *dir, const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

static void *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *bytes = malloc(*len ? *len : 1);
  assert_non_null(bytes);
  assert_int_equal(fread(bytes, 1, *len, f), *len);
  fclose(f);
  return bytes;
}

static void assert_same_file(const char *a, const char *b) {
  size_t na, nb;
  void *x = read_file(a, &na), *y = read_file(b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(x, y, na);
  free(x);
  free(y);
}

typedef struct batch {
  lamp_tensor *x, *y;
} batch;

static batch make_batch(int64_t rows, int64_t features, int classes, uint64_t seed) {
  int64_t xs[2] = {rows, features}, ys[1] = {rows};
  batch b = {new_tensor(LAMP_F32, 2, xs), new_tensor(LAMP_I32, 1, ys)};
  lamp_rng rng;
  lamp_rng_seed(&rng, seed);
  fill_uniform(b.x, &rng, -1.0, 1.0);
  for (int64_t i = 0; i < rows; i++) ((int32_t *)lamp_tensor_data(b.y))[i] = (int32_t)(i % classes);
  return b;
}

static void free_batch(batch *b) {
  lamp_tensor_release(b->x);
  lamp_tensor_release(b->y);
}

static const lamp_option MOMENTUM[] = {{"lr", 0.1}, {"momentum", 0.9}};

static void open_mlp(rig *r, const char *precision, int64_t in, int64_t hidden, int64_t out) {
  rig_spec spec = {.seed = 5, .precision = precision, .optim_opts = MOMENTUM, .n_optim_opts = 2};
  rig_open(r, &spec, seq(3, (lamp_layer *[]){linear(in, hidden), relu(), linear(hidden, out)}));
}

static void steps(rig *r, const batch *b, int n) {
  for (int i = 0; i < n; i++) OK(lamp_trainer_step(r->t, b->x, b->y));
}

static void *copy_of(const void *p, size_t bytes) {
  void *c = malloc(bytes);
  assert_non_null(c);
  memcpy(c, p, bytes);
  return c;
}

/* ---- resume continues the run ------------------------------------------------------------------ */

static void resume_gives_the_same_bits(const char *precision) {
  batch b = make_batch(16, 6, 3, 1);
  rig a, c;
  open_mlp(&a, precision, 6, 8, 3);
  steps(&a, &b, 3);
  char written[1024];
  OK(lamp_trainer_save(a.t, tmp_path("mid.lamp"), written, sizeof written));
  assert_string_equal(written, tmp_path("mid.lamp"));
  steps(&a, &b, 4);

  open_mlp(&c, precision, 6, 8, 3);
  int found = 0;
  char used[1024];
  OK(lamp_trainer_resume(c.t, tmp_path("mid.lamp"), used, sizeof used, &found));
  assert_int_equal(found, 1);
  assert_string_equal(used, tmp_path("mid.lamp"));
  assert_int_equal(rig_stats(&c).steps, 3);
  steps(&c, &b, 4);
  size_t n = lamp_model_numel(a.model);
  assert_memory_equal(lamp_model_trainable(a.model), lamp_model_trainable(c.model), n * sizeof(float));
  lamp_trainer_stats sa = rig_stats(&a), sc = rig_stats(&c);
  assert_int_equal(sa.steps, sc.steps);
  assert_int_equal(sa.skipped_steps, sc.skipped_steps);
  assert_true(sa.loss_scale == sc.loss_scale);
  assert_true(sa.last_loss == sc.last_loss);
  rig_close(&a);
  rig_close(&c);
  free_batch(&b);
}

static void test_resume_fp32(void **state) {
  (void)state;
  resume_gives_the_same_bits("fp32");
}

static void test_resume_fp16(void **state) {
  (void)state;
  resume_gives_the_same_bits("fp16");
}

static void test_resume_bf16(void **state) {
  (void)state;
  resume_gives_the_same_bits("bf16");
}

/* ---- checkpoints that do not fit ----------------------------------------------------------------- */

/* A trainer refusing a checkpoint keeps its parameters, optimizer state and counters. */
typedef struct snapshot {
  float *params;
  lamp_trainer_stats stats;
} snapshot;

static snapshot take(rig *r) {
  return (snapshot){copy_of(lamp_model_trainable(r->model), lamp_model_numel(r->model) * sizeof(float)), rig_stats(r)};
}

static void expect_unchanged(rig *r, snapshot *s) {
  assert_memory_equal(lamp_model_trainable(r->model), s->params, lamp_model_numel(r->model) * sizeof(float));
  lamp_trainer_stats now = rig_stats(r);
  assert_int_equal(now.steps, s->stats.steps);
  assert_int_equal(now.micro_steps, s->stats.micro_steps);
  free(s->params);
}

static void save_mlp(const char *name, const char *precision, int64_t in, int64_t hidden, int64_t out) {
  batch b = make_batch(8, in, (int)out, 2);
  rig r;
  open_mlp(&r, precision, in, hidden, out);
  steps(&r, &b, 2);
  OK(lamp_trainer_save(r.t, tmp_path(name), NULL, 0));
  rig_close(&r);
  free_batch(&b);
}

static void test_another_model_is_refused(void **state) {
  (void)state;
  save_mlp("small.lamp", "fp32", 6, 8, 3);
  batch b = make_batch(8, 6, 3, 3);
  rig r;
  open_mlp(&r, "fp32", 6, 9, 3);
  steps(&r, &b, 1);
  snapshot s = take(&r);
  char want[2048];
  snprintf(want, sizeof want,
           "%s: the checkpoint's model has 83 parameters in 4 tensors, this one 93 in 4; it was saved from:\n"
           "Sequential {\n  [input -> (1) -> (2) -> (3) -> output]\n  (1): Linear(6 -> 8)\n  (2): ReLU\n"
           "  (3): Linear(8 -> 3)\n}",
           tmp_path("small.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("small.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  expect_unchanged(&r, &s);
  rig_close(&r);
  free_batch(&b);
}

/* Same size, other shapes: Linear(4 -> 6), Linear(6 -> 4) against Linear(6 -> 4), Linear(4 -> 6)
   both hold 58 values in 4 tensors; the first tensor that differs is named. */
static void test_another_shape_is_refused(void **state) {
  (void)state;
  save_mlp("shape.lamp", "fp32", 4, 6, 4);
  batch b = make_batch(8, 6, 6, 3);
  rig r;
  open_mlp(&r, "fp32", 6, 4, 6);
  steps(&r, &b, 1);
  snapshot s = take(&r);
  char want[1024];
  snprintf(want, sizeof want, "%s: tensor 'param.0.weight' is f32[6, 4], expected f32[4, 6]", tmp_path("shape.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("shape.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  expect_unchanged(&r, &s);
  rig_close(&r);
  free_batch(&b);
}

static void test_another_precision_is_refused(void **state) {
  (void)state;
  save_mlp("fp32.lamp", "fp32", 6, 8, 3);
  rig r;
  open_mlp(&r, "bf16", 6, 8, 3);
  snapshot s = take(&r);
  char want[1024];
  snprintf(want, sizeof want,
           "%s: written with precision 'fp32', this trainer uses 'bf16' (resume with the same precision)",
           tmp_path("fp32.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("fp32.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  expect_unchanged(&r, &s);
  rig_close(&r);
}

/* A flipped byte in the data: the container's CRC names the tensor; nothing is applied. */
static void test_damaged_file_is_refused(void **state) {
  (void)state;
  save_mlp("damaged.lamp", "fp32", 6, 8, 3);
  FILE *f = fopen(tmp_path("damaged.lamp"), "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, -8, SEEK_END), 0);
  int ch = fgetc(f);
  assert_int_equal(fseek(f, -8, SEEK_END), 0);
  fputc(ch ^ 0x10, f);
  fclose(f);
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  snapshot s = take(&r);
  assert_int_equal(lamp_trainer_resume(r.t, tmp_path("damaged.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE);
  assert_non_null(strstr(lamp_last_error(), "checksum mismatch in tensor 'optim.momentum_buffer'"));
  expect_unchanged(&r, &s);
  rig_close(&r);
}

static void test_other_checkpoint_kinds_are_refused(void **state) {
  (void)state;
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_meta_str(w, "lamp.kind", "dataset"));
  OK(lamp_ckpt_write_atomic(w, tmp_path("kind.lamp")));
  lamp_ckpt_writer_free(w);
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  char want[1024];
  snprintf(want, sizeof want, "%s: not a trainer checkpoint (lamp.kind is 'dataset')", tmp_path("kind.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("kind.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  rig_close(&r);
}

/* ---- where and when ---------------------------------------------------------------------------- */

static void test_folders_and_missing_paths(void **state) {
  (void)state;
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  assert_true(mkdir(tmp_path("empty"), 0755) == 0 || errno == EEXIST);
  int found = 1;
  char used[1024] = "x";
  OK(lamp_trainer_resume(r.t, tmp_path("empty"), used, sizeof used, &found));
  assert_int_equal(found, 0);
  assert_string_equal(used, "");
  char want[1024];
  snprintf(want, sizeof want, "cannot resume from %s: No such file or directory", tmp_path("none.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("none.lamp"), NULL, 0, &found), LAMP_ERR_INVALID_USAGE, want);
  /* a missing folder is a run not started yet: it starts afresh, as an empty one does */
  found = 1;
  snprintf(used, sizeof used, "x");
  OK(lamp_trainer_resume(r.t, tmp_path("no-such-folder"), used, sizeof used, &found));
  assert_int_equal(found, 0);
  assert_string_equal(used, "");

  /* save_dir names files by step and keeps the newest; resume from the folder takes the last */
  fresh_dir("series");
  batch b = make_batch(8, 6, 3, 4);
  for (int i = 0; i < 3; i++) {
    steps(&r, &b, 1);
    OK(lamp_trainer_save_dir(r.t, tmp_path("series"), 2, 0, used, sizeof used));
  }
  char newest[1024];
  snprintf(newest, sizeof newest, "%s/ckpt-00000003.lamp", tmp_path("series"));
  assert_string_equal(used, newest);
  char oldest[1024];
  snprintf(oldest, sizeof oldest, "%s/ckpt-00000001.lamp", tmp_path("series"));
  assert_int_equal(access(oldest, F_OK), -1);
  rig c;
  open_mlp(&c, "fp32", 6, 8, 3);
  OK(lamp_trainer_resume(c.t, tmp_path("series"), used, sizeof used, &found));
  assert_int_equal(found, 1);
  assert_string_equal(used, newest);
  assert_int_equal(rig_stats(&c).steps, 3);
  rig_close(&c);
  rig_close(&r);
  free_batch(&b);
}

static void test_no_save_inside_an_accumulation_group(void **state) {
  (void)state;
  rig_spec spec = {.seed = 5, .precision = "fp32", .optim_opts = MOMENTUM, .n_optim_opts = 2, .accum = 2};
  rig r;
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(6, 8), relu(), linear(8, 3)}));
  batch b = make_batch(8, 6, 3, 5);
  steps(&r, &b, 1);
  FAILS(lamp_trainer_save(r.t, tmp_path("group.lamp"), NULL, 0), LAMP_ERR_INVALID_USAGE,
        "Trainer: cannot save in the middle of an accumulation group (micro-step 1 of 2); save between optimizer steps");
  steps(&r, &b, 1);
  OK(lamp_trainer_save(r.t, tmp_path("group.lamp"), NULL, 0));
  rig_close(&r);
  free_batch(&b);
}

/* ---- folders of several runs ------------------------------------------------------------------- */

static void save_into(rig *r, const char *dir, int keep, int start_over) {
  char written[1024];
  OK(lamp_trainer_save_dir(r->t, dir, keep, start_over, written, sizeof written));
}

/* A fresh run's first save into a folder of another run's steps 8, 12 and 16 (keep 3) is refused
   and deletes nothing; before, it wrote steps 2 and 4 and deleted each at once, and a resume
   then took the old run's step 16. */
static void test_fresh_run_refused_in_another_runs_folder(void **state) {
  (void)state;
  const char *dir = fresh_dir("two_runs");
  batch b = make_batch(8, 6, 3, 6);
  rig old;
  open_mlp(&old, "fp32", 6, 8, 3);
  for (int i = 0; i < 3; i++) {
    steps(&old, &b, i == 0 ? 8 : 4);
    save_into(&old, dir, 3, 0);
  }
  rig fresh;
  open_mlp(&fresh, "fp32", 6, 8, 3);
  steps(&fresh, &b, 2);
  char want[2048];
  snprintf(want, sizeof want,
           "cannot save into %s: it holds checkpoints of another run (newest: step 16); resume from it, or start "
           "over (start_over: its checkpoints move into %s/previous-<n>)",
           dir, dir);
  FAILS(lamp_trainer_save_dir(fresh.t, dir, 3, 0, NULL, 0), LAMP_ERR_INVALID_USAGE, want);
  assert_false(file_exists(dir, "ckpt-00000002.lamp"));
  for (int step = 8; step <= 16; step += 4) {
    char name[64];
    snprintf(name, sizeof name, "ckpt-%08d.lamp", step);
    assert_true(file_exists(dir, name));
  }

  /* Starting over moves the old run aside, whole and resumable; the folder is the new run's. */
  save_into(&fresh, dir, 3, 1);
  steps(&fresh, &b, 2);
  save_into(&fresh, dir, 3, 1);
  assert_true(file_exists(dir, "ckpt-00000002.lamp"));
  assert_true(file_exists(dir, "ckpt-00000004.lamp"));
  assert_false(file_exists(dir, "ckpt-00000016.lamp"));
  assert_true(file_exists(dir, "previous-1/ckpt-00000008.lamp"));
  assert_true(file_exists(dir, "previous-1/ckpt-00000016.lamp"));
  assert_true(file_exists(dir, "previous-1/lamp.owner"));
  rig next;
  open_mlp(&next, "fp32", 6, 8, 3);
  int found;
  char used[1024], want_path[1024];
  OK(lamp_trainer_resume(next.t, dir, used, sizeof used, &found));
  snprintf(want_path, sizeof want_path, "%s/ckpt-00000004.lamp", dir);
  assert_string_equal(used, want_path);
  assert_int_equal(rig_stats(&next).steps, 4);

  /* The old run no longer owns the folder: its next save is refused, and prunes nothing. */
  steps(&old, &b, 4);
  snprintf(want, sizeof want,
           "cannot save into %s: it holds checkpoints of another run (newest: step 4); resume from it, or start "
           "over (start_over: its checkpoints move into %s/previous-<n>)",
           dir, dir);
  FAILS(lamp_trainer_save_dir(old.t, dir, 1, 0, NULL, 0), LAMP_ERR_INVALID_USAGE, want);
  assert_true(file_exists(dir, "ckpt-00000002.lamp"));

  /* A run resumed from the folder continues the run that wrote it: it prunes that run's files. */
  steps(&next, &b, 1);
  save_into(&next, dir, 1, 0);
  assert_true(file_exists(dir, "ckpt-00000005.lamp"));
  assert_false(file_exists(dir, "ckpt-00000004.lamp"));
  assert_false(file_exists(dir, "ckpt-00000002.lamp"));
  assert_true(file_exists(dir, "previous-1/ckpt-00000016.lamp"));
  rig_close(&next);
  rig_close(&fresh);
  rig_close(&old);
  free_batch(&b);
}

/* A folder written by an older lamp (no lamp.owner) belongs to whoever resumes from it. */
static void test_folder_without_owner_file(void **state) {
  (void)state;
  const char *dir = fresh_dir("no_owner");
  batch b = make_batch(8, 6, 3, 7);
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  steps(&r, &b, 3);
  save_into(&r, dir, 0, 0);
  char owner[1024];
  snprintf(owner, sizeof owner, "%s/lamp.owner", dir);
  assert_int_equal(unlink(owner), 0);
  rig_close(&r);
  rig fresh, resumed;
  open_mlp(&fresh, "fp32", 6, 8, 3);
  assert_int_equal(lamp_trainer_save_dir(fresh.t, dir, 0, 0, NULL, 0), LAMP_ERR_INVALID_USAGE);
  open_mlp(&resumed, "fp32", 6, 8, 3);
  OK(lamp_trainer_resume(resumed.t, dir, NULL, 0, NULL));
  steps(&resumed, &b, 1);
  save_into(&resumed, dir, 1, 0);
  assert_false(file_exists(dir, "ckpt-00000003.lamp"));
  assert_true(file_exists(dir, "ckpt-00000004.lamp"));
  assert_true(file_exists(dir, "lamp.owner"));
  rig_close(&resumed);
  rig_close(&fresh);
  free_batch(&b);
}

/* ---- refusals that change nothing ---------------------------------------------------------------- */

static void damage(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
  int ch = fgetc(f);
  assert_int_equal(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
  fputc(ch ^ 0x10, f);
  fclose(f);
}

/* Before, a folder of damaged checkpoints warned and started afresh, as an empty one does. */
static void test_folder_of_damaged_checkpoints_is_refused(void **state) {
  (void)state;
  const char *dir = fresh_dir("all_damaged");
  batch b = make_batch(8, 6, 3, 8);
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  for (int i = 0; i < 2; i++) {
    steps(&r, &b, 1);
    save_into(&r, dir, 0, 0);
  }
  rig_close(&r);
  char first[1024], second[1024];
  snprintf(first, sizeof first, "%s/ckpt-00000001.lamp", dir);
  snprintf(second, sizeof second, "%s/ckpt-00000002.lamp", dir);
  damage(first, -8);
  assert_int_equal(truncate(second, 40), 0);
  rig c;
  open_mlp(&c, "fp32", 6, 8, 3);
  snapshot s = take(&c);
  int found = 7;
  assert_int_equal(lamp_trainer_resume(c.t, dir, NULL, 0, &found), LAMP_ERR_INVALID_USAGE);
  char want[2048];
  snprintf(want, sizeof want,
           "cannot resume from %s: its 2 checkpoints are all damaged (move them away to start afresh):\n"
           "  %s: truncated: the checkpoint is ",
           dir, second);
  if (strncmp(lamp_last_error(), want, strlen(want)) != 0) fail_msg("got:\n%s\nexpected it to start with:\n%s", lamp_last_error(), want);
  snprintf(want, sizeof want, "\n  %s: checksum mismatch in tensor 'optim.momentum_buffer' (stored ", first);
  assert_non_null(strstr(lamp_last_error(), want));
  assert_int_equal(found, 0);
  expect_unchanged(&c, &s);
  rig_close(&c);
  free_batch(&b);
}

/* The plugin refuses the saved loss-scaler state after every checksum passed: before, the
   weights had been copied in by then. A checkpoint written after the refusal is byte-identical
   to one written before it. */
static void test_refused_precision_state_changes_nothing(void **state) {
  (void)state;
  batch b = make_batch(8, 6, 3, 9);
  rig r;
  open_mlp(&r, PICKY, 6, 8, 3);
  steps(&r, &b, 2);
  OK(lamp_trainer_save(r.t, tmp_path("picky.lamp"), NULL, 0));
  steps(&r, &b, 3);
  OK(lamp_trainer_save(r.t, tmp_path("picky_before.lamp"), NULL, 0));
  char want[2048];
  snprintf(want, sizeof want,
           "%s: precision.state: picky: refusing a saved state of 16 bytes (this fixture refuses every one)",
           tmp_path("picky.lamp"));
  FAILS(lamp_trainer_resume(r.t, tmp_path("picky.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  OK(lamp_trainer_save(r.t, tmp_path("picky_after.lamp"), NULL, 0));
  assert_same_file(tmp_path("picky_before.lamp"), tmp_path("picky_after.lamp"));
  rig_close(&r);
  free_batch(&b);
}

/* A save_state that claims more bytes than its buffer: refused, naming the plugin and both
   sizes, instead of the core reading past the buffer into the checkpoint. */
static void test_overreporting_save_state_is_refused(void **state) {
  (void)state;
  batch b = make_batch(8, 6, 3, 10);
  rig r;
  open_mlp(&r, OVERREPORT, 6, 8, 3);
  steps(&r, &b, 1);
  unlink(tmp_path("overreport.lamp"));
  FAILS(lamp_trainer_save(r.t, tmp_path("overreport.lamp"), NULL, 0), LAMP_ERR_INTERNAL,
        "overreport: save_state reported 4096 bytes, more than the 16-byte buffer it was given");
  assert_int_equal(access(tmp_path("overreport.lamp"), F_OK), -1);
  rig_close(&r);
  free_batch(&b);
}

/* A FIFO named as the checkpoint: refused at once (it used to wait forever for a writer). */
static void test_fifo_is_refused(void **state) {
  (void)state;
  unlink(tmp_path("fifo.lamp"));
  assert_int_equal(mkfifo(tmp_path("fifo.lamp"), 0644), 0);
  rig r;
  open_mlp(&r, "fp32", 6, 8, 3);
  char want[1024];
  snprintf(want, sizeof want, "%s is a FIFO, not a regular file", tmp_path("fifo.lamp"));
  alarm(20); /* a hang fails the test instead of holding up the suite */
  FAILS(lamp_trainer_resume(r.t, tmp_path("fifo.lamp"), NULL, 0, NULL), LAMP_ERR_INVALID_USAGE, want);
  alarm(0);
  rig_close(&r);
}

static int setup(void **state) {
  snprintf(tmp_dir, sizeof tmp_dir, "%s/trainer_checkpoint", LAMP_TEST_TMP_DIR);
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  mkdir(tmp_dir, 0755);
  return rig_group_setup(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resume_fp32),
      cmocka_unit_test(test_resume_fp16),
      cmocka_unit_test(test_resume_bf16),
      cmocka_unit_test(test_another_model_is_refused),
      cmocka_unit_test(test_another_shape_is_refused),
      cmocka_unit_test(test_another_precision_is_refused),
      cmocka_unit_test(test_damaged_file_is_refused),
      cmocka_unit_test(test_other_checkpoint_kinds_are_refused),
      cmocka_unit_test(test_folders_and_missing_paths),
      cmocka_unit_test(test_no_save_inside_an_accumulation_group),
      cmocka_unit_test(test_fresh_run_refused_in_another_runs_folder),
      cmocka_unit_test(test_folder_without_owner_file),
      cmocka_unit_test(test_folder_of_damaged_checkpoints_is_refused),
      cmocka_unit_test(test_refused_precision_state_changes_nothing),
      cmocka_unit_test(test_overreporting_save_state_is_refused),
      cmocka_unit_test(test_fifo_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, rig_group_teardown);
}
