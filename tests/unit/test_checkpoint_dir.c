/*
** Checkpoints on disk: a save killed halfway (SIGKILL while the .tmp is being written) or
** failing for want of space (RLIMIT_FSIZE: EFBIG) leaves the previous checkpoint intact, the
** .tmp is never picked, and "newest complete" selection returns the previous one; keep=N
** retention; damaged files are skipped with a logged reason, and a folder of nothing else is
** refused; a second writer of a folder (or of one file) is refused while the first one writes;
** a run saves and prunes only in a folder it owns, or starts over by moving the other run aside.
*/
#define _XOPEN_SOURCE 700 /* nftw */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/checkpoint_dir"

/* ---- helpers ------------------------------------------------------------------------------------ */

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* A fresh, empty folder TMP/name (what an earlier run left there is removed, subfolders too). */
static const char *fresh_dir(const char *name) {
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", TMP, name);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  make_dir(dir);
  return dir;
}

static const char *ckpt_path(const char *dir, uint64_t step, const char *suffix) {
  static char buf[4][2048];
  static int next;
  char *p = buf[next++ % 4];
  char base[2048];
  OK(lamp_ckpt_dir_path(base, sizeof base, dir, step));
  snprintf(p, sizeof buf[0], "%s%s", base, suffix);
  return p;
}

/* n floats of a pattern that depends on the step, so a mix-up between checkpoints shows. */
static float *pattern(size_t n, uint64_t step) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = (float)(i % 1000) + (float)step * 0.5f;
  return v;
}

/* Saves a checkpoint of `step` holding meta step and tensor w of n floats; returns the status. */
static lamp_status save(const char *dir, uint64_t step, size_t n, int keep, lamp_ckpt_progress_fn progress) {
  float *v = pattern(n, step);
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_meta_int(w, "step", (int64_t)step));
  OK(lamp_ckpt_add_tensor(w, "w", LAMP_CKPT_F32, 1, (int64_t[]){(int64_t)n}, v));
  lamp_ckpt_writer_set_progress(w, progress, NULL);
  lamp_status st = lamp_ckpt_save_dir(w, dir, step, keep, NULL, 0);
  lamp_ckpt_writer_free(w);
  free(v);
  return st;
}

/* The checkpoint at path holds exactly what save(step, n) wrote. */
static void check_intact(const char *path, uint64_t step, size_t n) {
  lamp_ckpt *c;
  OK(lamp_ckpt_open(&c, path));
  int64_t s;
  OK(lamp_ckpt_meta_int(c, "step", &s));
  assert_int_equal(s, step);
  float *expected = pattern(n, step);
  float *got = malloc(n * sizeof *got);
  OK(lamp_ckpt_read_tensor(c, "w", LAMP_CKPT_F32, 1, (int64_t[]){(int64_t)n}, got));
  assert_memory_equal(got, expected, n * sizeof *got);
  free(got);
  free(expected);
  lamp_ckpt_close(c);
}

/* The newest complete checkpoint of dir must be `step`. */
static void expect_latest(const char *dir, uint64_t step) {
  char path[2048];
  uint64_t found_step = 0;
  int found;
  OK(lamp_ckpt_latest(dir, path, sizeof path, &found_step, &found));
  assert_true(found);
  assert_int_equal(found_step, step);
  assert_string_equal(path, ckpt_path(dir, step, ""));
}

/* Log lines captured while a test runs. */
static char captured[16384];
static void capture(lamp_log_level level, const char *line, void *userdata) {
  (void)level;
  (void)userdata;
  size_t used = strlen(captured);
  snprintf(captured + used, sizeof captured - used, "%s\n", line);
}

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  return 0;
}

/* ---- killed mid-save ---------------------------------------------------------------------------- */

#define BIG_FLOATS ((size_t)10 << 20) /* 40 MB */

/* In the child: stop (for the parent to kill us) once the first chunk is on disk. */
static void stop_after_first_chunk(uint64_t written, uint64_t total, void *userdata) {
  (void)userdata;
  if (written < total) raise(SIGSTOP);
}

static void test_killed_mid_save(void **state) {
  (void)state;
  const char *dir = fresh_dir("killed");
  OK(save(dir, 1, 1000, 0, NULL));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    save(dir, 2, BIG_FLOATS, 0, stop_after_first_chunk);
    _exit(3); /* not reached: killed while stopped */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
  assert_true(WIFSTOPPED(status));
  /* Mid-save: the .tmp is there, partly written; the final name is not. */
  struct stat sb;
  assert_int_equal(stat(ckpt_path(dir, 2, ".tmp"), &sb), 0);
  assert_true(sb.st_size > 0 && (size_t)sb.st_size < BIG_FLOATS * 4);
  assert_false(exists(ckpt_path(dir, 2, "")));
  kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  /* The previous checkpoint is untouched and is the one selected; the .tmp is ignored. */
  check_intact(ckpt_path(dir, 1, ""), 1, 1000);
  captured[0] = '\0';
  lamp_log_set_sink(capture, NULL);
  lamp_log_set_level(LAMP_LOG_INFO);
  expect_latest(dir, 1);
  lamp_log_set_sink(NULL, NULL);
  char line[4096];
  snprintf(line, sizeof line, "checkpoint: ignoring %s: an unfinished save (never renamed into place)\n",
           ckpt_path(dir, 2, ".tmp"));
  assert_string_equal(captured, line);
  /* Retention neither counts nor removes the .tmp; the next save of that step replaces it. */
  OK(lamp_ckpt_prune(dir, 1));
  assert_true(exists(ckpt_path(dir, 2, ".tmp")));
  OK(save(dir, 2, 1000, 1, NULL));
  assert_false(exists(ckpt_path(dir, 2, ".tmp")));
  assert_false(exists(ckpt_path(dir, 1, "")));
  expect_latest(dir, 2);
  check_intact(ckpt_path(dir, 2, ""), 2, 1000);
}

/* SIGKILL at arbitrary moments: whatever moment it lands, the newest complete checkpoint is
   one of the two, intact, and never the .tmp. */
static void test_killed_at_random_moments(void **state) {
  (void)state;
  const char *dir = fresh_dir("random_kill");
  size_t n = (size_t)4 << 20; /* 16 MB */
  OK(save(dir, 1, n, 0, NULL));
  uint64_t newest = 1;
  srand(1234);
  for (uint64_t step = 2; step <= 7; step++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(save(dir, step, n, 2, NULL) == LAMP_OK ? 0 : 1);
    usleep((useconds_t)(rand() % 40000));
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) assert_int_equal(WEXITSTATUS(status), 0);
    char path[2048];
    uint64_t got = 0;
    int found;
    OK(lamp_ckpt_latest(dir, path, sizeof path, &got, &found));
    assert_true(found);
    assert_true(got == step || got == newest);
    assert_null(strstr(path, ".tmp"));
    check_intact(path, got, n);
    newest = got;
  }
}

/* ---- write failure (EFBIG under RLIMIT_FSIZE) ------------------------------------------------------ */

static void test_file_size_limit(void **state) {
  (void)state;
  const char *dir = fresh_dir("fsize");
  OK(save(dir, 1, 1000, 0, NULL));
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead of killing us */
    struct rlimit lim = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
    lamp_status st = save(dir, 2, (size_t)2 << 20, 1, NULL);
    const char *msg = lamp_last_error();
    if (write(fds[1], msg, strlen(msg)) < 0) _exit(4);
    _exit(st == LAMP_ERR_SYSTEM ? 0 : 1);
  }
  close(fds[1]);
  char msg[4096] = "";
  size_t used = 0;
  ssize_t got;
  while ((got = read(fds[0], msg + used, sizeof msg - 1 - used)) > 0) used += (size_t)got;
  msg[used] = '\0';
  close(fds[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  char expected[4096];
  snprintf(expected, sizeof expected, "%s: write failed: File too large (the partial file was removed; %s is untouched)",
           ckpt_path(dir, 2, ".tmp"), ckpt_path(dir, 2, ""));
  assert_string_equal(msg, expected);
  assert_false(exists(ckpt_path(dir, 2, ".tmp")));
  assert_false(exists(ckpt_path(dir, 2, "")));
  check_intact(ckpt_path(dir, 1, ""), 1, 1000);
  expect_latest(dir, 1);
}

/* A failing save over an existing file of the same name leaves that file as it was. */
static void test_failed_overwrite_keeps_old(void **state) {
  (void)state;
  const char *dir = fresh_dir("overwrite");
  OK(save(dir, 5, 1000, 0, NULL));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {.rlim_cur = 4096, .rlim_max = 4096};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
    _exit(save(dir, 5, 100000, 0, NULL) == LAMP_ERR_SYSTEM ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  check_intact(ckpt_path(dir, 5, ""), 5, 1000);
  assert_false(exists(ckpt_path(dir, 5, ".tmp")));
}

/* ---- retention and selection -------------------------------------------------------------------- */

static void test_keep(void **state) {
  (void)state;
  const char *dir = fresh_dir("keep");
  /* Not checkpoints of ours, or not complete: never counted, never removed. */
  write_bytes(ckpt_path(dir, 0, ""), "garbage", 7, 0);
  write_bytes(ckpt_path(dir, 9, ".tmp"), "partial", 7, 0);
  char other[2048];
  snprintf(other, sizeof other, "%s/notes.txt", dir);
  write_bytes(other, "x", 1, 0);
  captured[0] = '\0';
  lamp_log_set_sink(capture, NULL);
  for (uint64_t step = 1; step <= 5; step++) {
    OK(save(dir, step, 100, 3, NULL));
    for (uint64_t s = 1; s <= step; s++) assert_int_equal(exists(ckpt_path(dir, s, "")), s + 3 > step);
  }
  lamp_log_set_sink(NULL, NULL);
  assert_non_null(strstr(captured, "not counting or removing"));
  assert_true(exists(ckpt_path(dir, 0, "")));
  assert_true(exists(ckpt_path(dir, 9, ".tmp")));
  assert_true(exists(other));
  /* keep <= 0 keeps everything. */
  OK(save(dir, 6, 100, 0, NULL));
  assert_true(exists(ckpt_path(dir, 3, "")));
  OK(lamp_ckpt_prune(dir, 1));
  assert_false(exists(ckpt_path(dir, 5, "")));
  assert_true(exists(ckpt_path(dir, 6, "")));
  expect_latest(dir, 6);
}

static void test_latest_skips_damaged(void **state) {
  (void)state;
  const char *dir = fresh_dir("damaged");
  for (uint64_t step = 1; step <= 4; step++) OK(save(dir, step, 100, 0, NULL));
  /* 4: truncated; 3: a flipped data byte; 5: only a .tmp. */
  assert_int_equal(truncate(ckpt_path(dir, 4, ""), 100), 0);
  FILE *f = fopen(ckpt_path(dir, 3, ""), "r+b");
  assert_non_null(f);
  fseek(f, -7, SEEK_END);
  int byte = fgetc(f);
  fseek(f, -7, SEEK_END);
  fputc(byte ^ 0x10, f);
  fclose(f);
  write_bytes(ckpt_path(dir, 5, ".tmp"), "LAMPCKPT", 8, 0);
  captured[0] = '\0';
  lamp_log_set_sink(capture, NULL);
  lamp_log_set_level(LAMP_LOG_INFO);
  expect_latest(dir, 2);
  lamp_log_set_sink(NULL, NULL);
  const char *lines[] = {"checkpoint: ignoring %s: an unfinished save (never renamed into place)\n",
                         "warning: checkpoint: skipping %s: truncated: the checkpoint is 528 bytes long, the file has 100\n",
                         "warning: checkpoint: skipping %s: checksum mismatch in tensor 'w' (stored "};
  char expected[4096];
  snprintf(expected, sizeof expected, lines[0], ckpt_path(dir, 5, ".tmp"));
  size_t n = strlen(expected);
  snprintf(expected + n, sizeof expected - n, lines[1], ckpt_path(dir, 4, ""));
  n = strlen(expected);
  snprintf(expected + n, sizeof expected - n, lines[2], ckpt_path(dir, 3, ""));
  if (strncmp(captured, expected, strlen(expected)) != 0) fail_msg("log was:\n%s\nexpected it to start with:\n%s", captured, expected);
  /* Nothing complete at all: refused, naming each damaged file and why (starting afresh would
     bury them under a new run). The unfinished .tmp is no checkpoint and is not listed. */
  unlink(ckpt_path(dir, 1, ""));
  unlink(ckpt_path(dir, 2, ""));
  lamp_log_set_sink(capture, NULL);
  int found = 1;
  assert_int_equal(lamp_ckpt_latest(dir, NULL, 0, NULL, &found), LAMP_ERR_INVALID_USAGE);
  lamp_log_set_sink(NULL, NULL);
  assert_false(found);
  snprintf(expected, sizeof expected,
           "cannot resume from %s: its 2 checkpoints are all damaged (move them away to start afresh):\n"
           "  %s: truncated: the checkpoint is 528 bytes long, the file has 100\n"
           "  %s: checksum mismatch in tensor 'w' (stored ",
           dir, ckpt_path(dir, 4, ""), ckpt_path(dir, 3, ""));
  if (strncmp(lamp_last_error(), expected, strlen(expected)) != 0)
    fail_msg("got:\n%s\nexpected it to start with:\n%s", lamp_last_error(), expected);
  /* One damaged file, and something that is no file at all. */
  unlink(ckpt_path(dir, 3, ""));
  assert_int_equal(mkfifo(ckpt_path(dir, 6, ""), 0644), 0);
  alarm(20); /* a FIFO must not block the reader: a hang fails the test */
  assert_int_equal(lamp_ckpt_latest(dir, NULL, 0, NULL, &found), LAMP_ERR_INVALID_USAGE);
  alarm(0);
  snprintf(expected, sizeof expected,
           "cannot resume from %s: its 2 checkpoints are all damaged (move them away to start afresh):\n"
           "  %s is a FIFO, not a regular file\n"
           "  %s: truncated: the checkpoint is 528 bytes long, the file has 100",
           dir, ckpt_path(dir, 6, ""), ckpt_path(dir, 4, ""));
  assert_string_equal(lamp_last_error(), expected);
  unlink(ckpt_path(dir, 6, ""));
  assert_int_equal(lamp_ckpt_latest(dir, NULL, 0, NULL, &found), LAMP_ERR_INVALID_USAGE);
  snprintf(expected, sizeof expected,
           "cannot resume from %s: its 1 checkpoint is damaged (move it away to start afresh):\n"
           "  %s: truncated: the checkpoint is 528 bytes long, the file has 100",
           dir, ckpt_path(dir, 4, ""));
  assert_string_equal(lamp_last_error(), expected);
  /* Only an unfinished save left: nothing to resume, and nothing lost by starting afresh. */
  unlink(ckpt_path(dir, 4, ""));
  found = 1;
  OK(lamp_ckpt_latest(dir, NULL, 0, NULL, &found));
  assert_false(found);
}

/* ---- two writers --------------------------------------------------------------------------------- */

/* A child stopped in the middle of a save holds the folder's lock: the parent's save is refused,
   naming the child's pid, and writes nothing. Once the child is killed, the lock is gone. */
static void test_second_writer_is_refused(void **state) {
  (void)state;
  const char *dir = fresh_dir("two_writers");
  OK(save(dir, 1, 1000, 0, NULL));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    save(dir, 3, BIG_FLOATS, 1, stop_after_first_chunk);
    _exit(3); /* not reached: killed while stopped */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
  assert_true(WIFSTOPPED(status));
  assert_int_equal(save(dir, 3, 1000, 1, NULL), LAMP_ERR_INVALID_USAGE);
  char expected[4096];
  snprintf(expected, sizeof expected, "cannot write checkpoints into %s: process %ld is writing there (it holds %s/lamp.lock)",
           dir, (long)pid, dir);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(lamp_ckpt_prune(dir, 1), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), expected);
  assert_false(exists(ckpt_path(dir, 3, "")));
  check_intact(ckpt_path(dir, 1, ""), 1, 1000);
  kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  OK(save(dir, 3, 1000, 1, NULL));
  check_intact(ckpt_path(dir, 3, ""), 3, 1000);
  assert_false(exists(ckpt_path(dir, 1, "")));
}

/* One file written by two processes at once: the second is refused instead of emptying the
   first one's .tmp (whose rename would then put a truncated file under the final name). */
static void test_second_writer_of_one_file_is_refused(void **state) {
  (void)state;
  const char *dir = fresh_dir("one_file");
  char path[2048];
  snprintf(path, sizeof path, "%s/model.lamp", dir);
  size_t n = BIG_FLOATS;
  float *v = pattern(n, 4);
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_tensor(w, "w", LAMP_CKPT_F32, 1, (int64_t[]){(int64_t)n}, v));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    lamp_ckpt_writer_set_progress(w, stop_after_first_chunk, NULL);
    lamp_ckpt_write_atomic(w, path);
    _exit(3);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
  assert_true(WIFSTOPPED(status));
  struct stat before;
  char tmp[2100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(stat(tmp, &before), 0);
  assert_int_equal(lamp_ckpt_write_atomic(w, path), LAMP_ERR_INVALID_USAGE);
  char expected[4400];
  snprintf(expected, sizeof expected, "cannot write %s: another writer is writing it now (it holds %s)", path, tmp);
  assert_string_equal(lamp_last_error(), expected);
  struct stat after;
  assert_int_equal(stat(tmp, &after), 0);
  assert_int_equal(after.st_size, before.st_size); /* the first writer's bytes are untouched */
  assert_false(exists(path));
  kill(pid, SIGKILL);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  OK(lamp_ckpt_write_atomic(w, path)); /* the dead writer's .tmp is taken over */
  assert_false(exists(tmp));
  lamp_ckpt *c;
  OK(lamp_ckpt_open(&c, path));
  lamp_ckpt_close(c);
  lamp_ckpt_writer_free(w);
  free(v);
}

/* ---- runs and their folders ----------------------------------------------------------------------- */

static lamp_status save_as(const char *dir, uint64_t step, lamp_ckpt_run *run) {
  float *v = pattern(100, step);
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_meta_int(w, "step", (int64_t)step));
  OK(lamp_ckpt_add_tensor(w, "w", LAMP_CKPT_F32, 1, (int64_t[]){100}, v));
  lamp_status st = lamp_ckpt_save_run(w, dir, step, run, NULL, 0);
  lamp_ckpt_writer_free(w);
  free(v);
  return st;
}

static void test_runs_own_their_folders(void **state) {
  (void)state;
  const char *dir = fresh_dir("runs");
  char aside[2048];
  snprintf(aside, sizeof aside, "%s/previous-1", dir);
  lamp_ckpt_run old = {.keep = 3};
  for (uint64_t step = 8; step <= 16; step += 4) OK(save_as(dir, step, &old));
  assert_true(old.id != 0);
  uint64_t owner;
  OK(lamp_ckpt_dir_owner(dir, &owner));
  assert_true(owner == old.id);

  /* Another run: refused, nothing written, nothing removed. */
  lamp_ckpt_run other = {.keep = 3};
  assert_int_equal(save_as(dir, 2, &other), LAMP_ERR_INVALID_USAGE);
  char expected[4096];
  snprintf(expected, sizeof expected,
           "cannot save into %s: it holds checkpoints of another run (newest: step 16); resume from it, or start over "
           "(start_over: its checkpoints move into %s/previous-<n>)",
           dir, dir);
  assert_string_equal(lamp_last_error(), expected);
  assert_false(exists(ckpt_path(dir, 2, "")));
  for (uint64_t step = 8; step <= 16; step += 4) check_intact(ckpt_path(dir, step, ""), step, 100);

  /* Starting over: the old run moves aside whole (a damaged file too) and stays resumable. */
  write_bytes(ckpt_path(dir, 20, ""), "garbage", 7, 0);
  other.start_over = 1;
  OK(save_as(dir, 2, &other));
  OK(save_as(dir, 4, &other));
  expect_latest(dir, 4);
  assert_false(exists(ckpt_path(dir, 20, "")));
  expect_latest(aside, 16);
  assert_true(exists(ckpt_path(aside, 20, "")));
  OK(lamp_ckpt_dir_owner(aside, &owner));
  assert_true(owner == old.id);
  OK(lamp_ckpt_dir_owner(dir, &owner));
  assert_true(owner == other.id);

  /* The old run cannot come back into the folder: it would prune the new run's checkpoints. */
  assert_int_equal(save_as(dir, 24, &old), LAMP_ERR_INVALID_USAGE);
  assert_true(exists(ckpt_path(dir, 2, "")));

  /* A run that resumed from the folder (it adopts the owner's id) prunes that run's files. */
  lamp_ckpt_run resumed = {.id = owner, .keep = 1};
  OK(save_as(dir, 5, &resumed));
  assert_false(exists(ckpt_path(dir, 2, "")));
  assert_false(exists(ckpt_path(dir, 4, "")));
  expect_latest(dir, 5);

  /* A folder without lamp.owner (an older lamp's) belongs to the id derived from it. */
  const char *legacy = fresh_dir("legacy");
  OK(save(legacy, 1, 100, 0, NULL));
  OK(save(legacy, 2, 100, 0, NULL));
  char owner_file[2048];
  snprintf(owner_file, sizeof owner_file, "%s/lamp.owner", legacy);
  assert_false(exists(owner_file));
  lamp_ckpt_run fresh = {.keep = 1};
  assert_int_equal(save_as(legacy, 3, &fresh), LAMP_ERR_INVALID_USAGE);
  lamp_ckpt_run adopted = {.keep = 1};
  OK(lamp_ckpt_dir_owner(legacy, &adopted.id));
  assert_true(adopted.id != 0);
  OK(save_as(legacy, 3, &adopted));
  assert_false(exists(ckpt_path(legacy, 2, "")));
  assert_true(exists(owner_file));

  /* A missing folder has no owner. */
  OK(lamp_ckpt_dir_owner(TMP "/does-not-exist", &owner));
  assert_true(owner == 0);
}

static void test_latest_missing_or_empty(void **state) {
  (void)state;
  int found = 1;
  OK(lamp_ckpt_latest(TMP "/does-not-exist", NULL, 0, NULL, &found));
  assert_false(found);
  const char *dir = fresh_dir("empty");
  found = 1;
  OK(lamp_ckpt_latest(dir, NULL, 0, NULL, &found));
  assert_false(found);
  char path[64];
  assert_int_equal(lamp_ckpt_dir_path(path, sizeof path, "/a/very/long/folder/name/that/does/not/fit/in/64/bytes", 1),
                   LAMP_ERR_INVALID_ARG);
  OK(lamp_ckpt_dir_path(path, sizeof path, "d", 1200));
  assert_string_equal(path, "d/ckpt-00001200.lamp");
}

static uint64_t progress_calls, progress_last, progress_total;
static void count_progress(uint64_t written, uint64_t total, void *userdata) {
  (void)userdata;
  assert_true(written > progress_last);
  progress_calls++;
  progress_last = written;
  progress_total = total;
}

static void test_progress(void **state) {
  (void)state;
  const char *dir = fresh_dir("progress");
  progress_calls = progress_last = 0;
  OK(save(dir, 1, (size_t)3 << 20, 0, count_progress)); /* 12 MB: several 4 MiB chunks */
  struct stat sb;
  assert_int_equal(stat(ckpt_path(dir, 1, ""), &sb), 0);
  assert_int_equal(progress_last, sb.st_size);
  assert_int_equal(progress_total, sb.st_size);
  assert_true(progress_calls >= 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_killed_mid_save),
      cmocka_unit_test(test_killed_at_random_moments),
      cmocka_unit_test(test_file_size_limit),
      cmocka_unit_test(test_failed_overwrite_keeps_old),
      cmocka_unit_test(test_keep),
      cmocka_unit_test(test_latest_skips_damaged),
      cmocka_unit_test(test_latest_missing_or_empty),
      cmocka_unit_test(test_second_writer_is_refused),
      cmocka_unit_test(test_second_writer_of_one_file_is_refused),
      cmocka_unit_test(test_runs_own_their_folders),
      cmocka_unit_test(test_progress),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
