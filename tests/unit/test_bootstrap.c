/*
** The bootstrap (core/plugin/bootstrap*.c, comm ABI 1.3) and the comm wrappers of ABI 1.3.
**   - the file store with 2 to 4 ranks as threads: all_gather, broadcast and barrier move the
**     right bytes, local ranks on one host, the run's folder gone once every rank closed;
**   - failures, each with its exact message: a missing peer at its deadline (named, or listed
**     when several), at open (rank 0 absent, or a peer absent), the abort flag ending a wait,
**     mismatched sizes, a leftover or untrusted folder, a bad run id;
**   - the choice from the environment: one rank without a launcher, the variables' errors;
**   - a communicator with create_with_bootstrap (tests/bad_plugins/bootcomm.c): created with the
**     bootstrap at world size 1, and as 2 forked ranks over the file store (its all_reduce goes
**     through the bootstrap), a peer missing in its create named through the core;
**   - all_reduce_enqueue / wait_stream / poll: passed through with the stream, refused by a 1.0
**     plugin and on a device the plugin does not declare.
*/
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/bootstrap.h"
#include "plugin/instance.h"
#include "test_support.h"
#include "trainer_rig.h"

#define TMP LAMP_TEST_TMP_DIR "/bootstrap"
#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"
#define MAX_RANKS 4

/* ---- helpers --------------------------------------------------------------------------------- */

static void assert_error(lamp_status st, lamp_status code, const char *fmt, ...) {
  char expected[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* An empty folder at path, mode 0755 (the store's folder: not writable by others). */
static void fresh_dir(const char *path) {
  nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  mkdir(TMP, 0755);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(chmod(path, 0755), 0);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void clear_launch_env(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "LAMP_WORLD_SIZE", "WORLD_SIZE",
                                     "LAMP_RANK", "RANK", "LAMP_STORE_DIR", "LAMP_RUN_ID", "TORCHELASTIC_RUN_ID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

/* ---- ranks as threads ------------------------------------------------------------------------ */

typedef struct rank_job rank_job;
typedef lamp_status (*rank_body)(rank_job *j, const lamp_bootstrap *b);

struct rank_job {
  const char *dir, *tag;
  int rank, size;
  double open_timeout; /* the opening exchange: generous where a test times a later call */
  double timeout;      /* the body's calls */
  rank_body body; /* NULL: open and close only */
  /* results */
  lamp_status st;
  char message[LAMP_ERROR_MAX];
  int local_rank, local_size;
  int ok; /* the body's own checks passed */
  double seconds;
};

static void *run_rank(void *arg) {
  rank_job *j = arg;
  lamp_bootstrap *b = NULL;
  double start = now_seconds();
  j->st = lamp_bootstrap_open_file(&b, j->dir, j->tag, j->rank, j->size, j->open_timeout);
  if (j->st == LAMP_OK) {
    j->local_rank = b->local_rank;
    j->local_size = b->local_size;
    if (j->body != NULL) j->st = j->body(j, b);
  }
  j->seconds = now_seconds() - start;
  snprintf(j->message, sizeof j->message, "%s", j->st == LAMP_OK ? "" : lamp_last_error());
  lamp_bootstrap_close(b);
  return NULL;
}

/* Runs ranks [0, size) as threads, except those whose bit is set in `absent`. Without a body the
   timeout is the opening's; with one, the body's calls' (the opening then gets 30 s). */
static void run_ranks(rank_job *jobs, int size, unsigned absent, const char *dir, const char *tag, double timeout,
                      rank_body body) {
  double open_timeout = body == NULL ? timeout : 30.0;
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    jobs[r] = (rank_job){.dir = dir, .tag = tag, .rank = r, .size = size, .open_timeout = open_timeout,
                          .timeout = timeout, .body = body};
    if (!(absent & (1u << r))) assert_int_equal(pthread_create(&threads[r], NULL, run_rank, &jobs[r]), 0);
  }
  for (int r = 0; r < size; r++)
    if (!(absent & (1u << r))) assert_int_equal(pthread_join(threads[r], NULL), 0);
}

/* ---- the file store -------------------------------------------------------------------------- */

/* all_gather of 8 bytes per rank, broadcast of 5 bytes from the last rank, a barrier. */
static lamp_status collectives(rank_job *j, const lamp_bootstrap *b) {
  uint32_t mine[2] = {(uint32_t)j->rank, (uint32_t)(j->rank * j->rank + 3)}, all[2 * MAX_RANKS];
  memset(all, 0xee, sizeof all);
  lamp_status st = b->all_gather(b, mine, all, sizeof mine, j->timeout);
  j->ok = st == LAMP_OK;
  for (int r = 0; st == LAMP_OK && r < j->size; r++)
    j->ok &= all[2 * r] == (uint32_t)r && all[2 * r + 1] == (uint32_t)(r * r + 3);
  char word[5] = {0};
  if (j->rank == j->size - 1) memcpy(word, "root!", 5);
  if (st == LAMP_OK) st = b->broadcast(b, word, sizeof word, j->size - 1, j->timeout);
  j->ok &= st == LAMP_OK && memcmp(word, "root!", 5) == 0;
  if (st == LAMP_OK) st = b->barrier(b, j->timeout);
  return st;
}

static void test_file_store_collectives(void **state) {
  (void)state;
  for (int size = 2; size <= MAX_RANKS; size++) {
    char dir[256], tag[32], run[300];
    snprintf(dir, sizeof dir, TMP "/store%d", size);
    snprintf(tag, sizeof tag, "run%d", size);
    snprintf(run, sizeof run, "%s/%s", dir, tag);
    fresh_dir(dir);
    rank_job jobs[MAX_RANKS];
    run_ranks(jobs, size, 0, dir, tag, 30.0, collectives);
    for (int r = 0; r < size; r++) {
      assert_string_equal(jobs[r].message, "");
      assert_int_equal(jobs[r].st, LAMP_OK);
      assert_true(jobs[r].ok);
      assert_int_equal(jobs[r].local_rank, r); /* one host: rank order */
      assert_int_equal(jobs[r].local_size, size);
    }
    assert_false(exists(run)); /* the last rank out removed the run's folder */
  }
}

/* Rank 1 (and 3) open, then leave; the others wait in all_gather 1 until the deadline. */
static lamp_status gather_once(rank_job *j, const lamp_bootstrap *b) {
  char send = (char)j->rank, recv[MAX_RANKS];
  return b->all_gather(b, &send, recv, 1, j->timeout);
}

static lamp_status only_some_gather(rank_job *j, const lamp_bootstrap *b) {
  if (j->rank % 2 == 1) return LAMP_OK;
  return gather_once(j, b);
}

static void test_missing_peer_named_at_deadline(void **state) {
  (void)state;
  const char *dir = TMP "/missing";
  fresh_dir(dir);
  rank_job jobs[MAX_RANKS];
  run_ranks(jobs, 3, 0, dir, "m3", 0.3, only_some_gather);
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[0].message,
                      "bootstrap: all_gather 1 timed out after 0.3 s waiting for rank 1 (file store " TMP "/missing/m3)");
  assert_true(jobs[0].seconds >= 0.3 && jobs[0].seconds < 3.0);
  assert_string_equal(jobs[2].message,
                      "bootstrap: all_gather 1 timed out after 0.3 s waiting for rank 1 (file store " TMP "/missing/m3)");
  assert_int_equal(jobs[1].st, LAMP_OK);

  run_ranks(jobs, 4, 0, dir, "m4", 0.3, only_some_gather);
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[0].message,
                      "bootstrap: all_gather 1 timed out after 0.3 s waiting for ranks 1, 3 (file store " TMP "/missing/m4)");
}

static void test_missing_peer_at_open(void **state) {
  (void)state;
  const char *dir = TMP "/open";
  fresh_dir(dir);
  rank_job jobs[MAX_RANKS];
  run_ranks(jobs, 2, 1u << 1, dir, "no1", 0.2, NULL); /* rank 1 never starts */
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[0].message,
                      "bootstrap: all_gather 0 timed out after 0.2 s waiting for rank 1 (file store " TMP "/open/no1)");
  run_ranks(jobs, 2, 1u << 0, dir, "no0", 0.2, NULL); /* rank 0 never starts */
  assert_int_equal(jobs[1].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[1].message, "bootstrap: open timed out after 0.2 s waiting for rank 0 to create the file "
                                       "store " TMP "/open/no0");
}

static void *abort_soon(void *arg) {
  (void)arg;
  struct timespec t = {0, 200 * 1000000L};
  nanosleep(&t, NULL);
  lamp_host_set_abort(1);
  return NULL;
}

static void test_abort_ends_a_wait(void **state) {
  (void)state;
  const char *dir = TMP "/abort";
  fresh_dir(dir);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_soon, NULL), 0);
  rank_job jobs[MAX_RANKS];
  run_ranks(jobs, 2, 1u << 1, dir, "a", 60.0, NULL);
  pthread_join(t, NULL);
  lamp_host_set_abort(0);
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_true(jobs[0].seconds < 5.0);
  const char *m = jobs[0].message;
  const char *head = "bootstrap: all_gather 0 interrupted after ";
  const char *tail = " s, the run is stopping, while waiting for rank 1 (file store " TMP "/abort/a)";
  assert_true(strncmp(m, head, strlen(head)) == 0);
  assert_true(strlen(m) > strlen(tail) && strcmp(m + strlen(m) - strlen(tail), tail) == 0);
}

/* Rank 0 gathers 8 bytes, rank 1 gathers 4. */
static lamp_status mismatched(rank_job *j, const lamp_bootstrap *b) {
  char send[8] = {0}, recv[16];
  return b->all_gather(b, send, recv, j->rank == 0 ? 8 : 4, j->timeout);
}

static void test_mismatched_sizes(void **state) {
  (void)state;
  const char *dir = TMP "/sizes";
  fresh_dir(dir);
  rank_job jobs[MAX_RANKS];
  run_ranks(jobs, 2, 0, dir, "s", 10.0, mismatched);
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[0].message,
                      "bootstrap: all_gather 1: rank 1 sent 4 bytes, rank 0 expected 8 (file store " TMP "/sizes/s)");
  assert_string_equal(jobs[1].message,
                      "bootstrap: all_gather 1: rank 0 sent 8 bytes, rank 1 expected 4 (file store " TMP "/sizes/s)");
}

/* A failed call leaves the store unusable: the next call says so at once. */
static lamp_status fail_then_call(rank_job *j, const lamp_bootstrap *b) {
  char send = 0, recv[2];
  lamp_status st = b->all_gather(b, &send, recv, 1, j->timeout);
  if (st == LAMP_OK) return LAMP_ERR_INTERNAL;
  return b->barrier(b, j->timeout);
}

static lamp_status only_rank0_fails_then_calls(rank_job *j, const lamp_bootstrap *b) {
  return j->rank == 0 ? fail_then_call(j, b) : LAMP_OK;
}

static void test_unusable_after_failure(void **state) {
  (void)state;
  const char *dir = TMP "/after";
  fresh_dir(dir);
  rank_job jobs[MAX_RANKS];
  /* rank 1 opens and leaves at once: rank 0's all_gather 1 fails, then its barrier 2 */
  run_ranks(jobs, 2, 0, dir, "f", 0.2, only_rank0_fails_then_calls);
  assert_int_equal(jobs[0].st, LAMP_ERR_REMOTE);
  assert_string_equal(jobs[0].message,
                      "bootstrap: barrier 2: the file store " TMP "/after/f failed earlier and cannot be used again");
}

static void test_folder_checks(void **state) {
  (void)state;
  const char *dir = TMP "/trust";
  fresh_dir(dir);
  lamp_bootstrap *b = NULL;
  /* a leftover run folder: rank 0 cannot tell its files from fresh ones */
  assert_int_equal(mkdir(TMP "/trust/old", 0700), 0);
  assert_error(lamp_bootstrap_open_file(&b, dir, "old", 0, 2, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: the file store folder " TMP "/trust/old exists already: a run with the same run id failed "
               "or is running; remove the folder, or give each run its own LAMP_RUN_ID");
  /* a run folder others may write */
  assert_int_equal(mkdir(TMP "/trust/open", 0700), 0);
  assert_int_equal(chmod(TMP "/trust/open", 0775), 0);
  assert_error(lamp_bootstrap_open_file(&b, dir, "open", 1, 2, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: refusing the file store folder " TMP "/trust/open: writable by others (mode 0775)");
  /* a store anyone may change */
  assert_int_equal(chmod(dir, 0777), 0);
  assert_error(lamp_bootstrap_open_file(&b, dir, "x", 0, 1, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: refusing the file store folder " TMP "/trust: writable by others without the sticky bit "
               "(mode 0777), so anyone could replace a rank's files; fix with chmod o-w " TMP "/trust");
  /* sticky, as /tmp: allowed; one rank opens, gathers itself and removes its folder on close */
  assert_int_equal(chmod(dir, 01777), 0);
  assert_int_equal(lamp_bootstrap_open_file(&b, dir, "x", 0, 1, 1.0), LAMP_OK);
  assert_string_equal(lamp_bootstrap_transport(b), "file store " TMP "/trust/x");
  assert_true(exists(TMP "/trust/x"));
  lamp_bootstrap_close(b);
  assert_false(exists(TMP "/trust/x"));
  assert_int_equal(chmod(dir, 0755), 0);
  assert_error(lamp_bootstrap_open_file(&b, dir, "../x", 0, 1, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: run id '../x' must be 1 to 120 letters, digits, '.', '_' or '-', not starting with '.'");
  assert_error(lamp_bootstrap_open_file(&b, TMP "/none", "x", 0, 1, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: file store folder " TMP "/none: No such file or directory");
}

/* ---- host identities ------------------------------------------------------------------------- */

static void test_local_ranks(void **state) {
  (void)state;
  char ids[5 * LAMP_HOST_ID_BYTES] = {0};
  const char *hosts[5] = {"a/1", "b/1", "a/1", "a/1", "b/1"};
  for (int r = 0; r < 5; r++) snprintf(ids + r * LAMP_HOST_ID_BYTES, LAMP_HOST_ID_BYTES, "%s", hosts[r]);
  const int expect_rank[5] = {0, 0, 1, 2, 1}, expect_size[5] = {3, 2, 3, 3, 2};
  for (int r = 0; r < 5; r++) {
    int lr = -1, ls = -1;
    lamp_host_local_rank(ids, 5, r, &lr, &ls);
    assert_int_equal(lr, expect_rank[r]);
    assert_int_equal(ls, expect_size[r]);
  }
  char mine[LAMP_HOST_ID_BYTES];
  lamp_host_identity(mine);
  char name[80] = "";
  gethostname(name, sizeof name - 1);
  assert_true(strncmp(mine, name, strlen(name)) == 0 && mine[strlen(name)] == '/');
}

/* ---- the choice from the environment --------------------------------------------------------- */

static void test_single_rank_without_launcher(void **state) {
  (void)state;
  clear_launch_env();
  lamp_bootstrap *b = NULL;
  assert_int_equal(lamp_bootstrap_open(&b, 5.0), LAMP_OK);
  assert_string_equal(lamp_bootstrap_transport(b), "single rank");
  assert_int_equal(b->struct_size, sizeof(lamp_bootstrap));
  assert_true(b->rank == 0 && b->size == 1 && b->local_rank == 0 && b->local_size == 1);
  char send[3] = {1, 2, 3}, recv[3] = {0};
  assert_int_equal(b->all_gather(b, send, recv, 3, 1.0), LAMP_OK);
  assert_memory_equal(send, recv, 3);
  assert_int_equal(b->broadcast(b, recv, 3, 0, 1.0), LAMP_OK);
  assert_int_equal(b->barrier(b, 1.0), LAMP_OK);
  assert_error(b->broadcast(b, recv, 3, 1, 1.0), LAMP_ERR_INVALID_ARG, "bootstrap: broadcast 4: root 1 is not a rank of 1");
  assert_string_equal(lamp_bootstrap_failure(b), "bootstrap: broadcast 4: root 1 is not a rank of 1");
  assert_error(b->barrier(b, 0.0), LAMP_ERR_INVALID_ARG,
               "bootstrap: barrier 4: timeout must be a positive number of seconds, got 0");
  assert_error(b->all_gather(b, NULL, recv, 3, 1.0), LAMP_ERR_INVALID_ARG, "bootstrap: all_gather 4: NULL send buffer for 3 bytes");
  lamp_bootstrap_close(b);

  setenv("LAMP_WORLD_SIZE", "1", 1);
  assert_int_equal(lamp_bootstrap_open(&b, 5.0), LAMP_OK);
  assert_string_equal(lamp_bootstrap_transport(b), "single rank");
  lamp_bootstrap_close(b);
  clear_launch_env();
}

static void test_environment_errors(void **state) {
  (void)state;
  clear_launch_env();
  lamp_bootstrap *b = NULL;
  setenv("LAMP_WORLD_SIZE", "2", 1);
  assert_error(lamp_bootstrap_open(&b, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: LAMP_WORLD_SIZE=2 but neither LAMP_RANK nor RANK is set");
  clear_launch_env();
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "5", 1);
  assert_error(lamp_bootstrap_open(&b, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: RANK must be an integer in [0, 1], got '5'");
  setenv("RANK", "1", 1);
  assert_error(lamp_bootstrap_open(&b, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: WORLD_SIZE=2 without mpirun needs LAMP_STORE_DIR, a folder every rank can reach");
  setenv("WORLD_SIZE", "two", 1);
  assert_error(lamp_bootstrap_open(&b, 1.0), LAMP_ERR_INVALID_USAGE,
               "bootstrap: WORLD_SIZE must be an integer in [1, 1048576], got 'two'");
  assert_null(b);
  clear_launch_env();
}

/* ---- a communicator created with the bootstrap ----------------------------------------------- */

static char logged[4096];

static void log_sink(lamp_log_level level, const char *line, void *userdata) {
  (void)level, (void)userdata;
  size_t used = strlen(logged);
  snprintf(logged + used, sizeof logged - used, "%s\n", line);
}

static void test_comm_with_bootstrap_alone(void **state) {
  (void)state;
  clear_launch_env();
  lamp_comm *c = NULL;
  static const lamp_option opts[] = {{"expect_one_host", 1}};
  /* bootcomm's create refuses: opening proves the core called create_with_bootstrap */
  assert_int_equal(lamp_comm_open(&c, BAD("bootcomm"), opts, 1), LAMP_OK);
  assert_int_equal(lamp_comm_rank(c), 0);
  assert_int_equal(lamp_comm_size(c), 1);
  float x[3] = {1, -2, 0.5f};
  assert_int_equal(lamp_comm_all_reduce(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  assert_true(x[0] == 1.0f && x[1] == -2.0f && x[2] == 0.5f);

  /* the stream-ordered calls pass the stream through */
  assert_true(lamp_comm_supports(c, "all_reduce_enqueue"));
  logged[0] = '\0';
  lamp_log_set_sink(log_sink, NULL);
  lamp_request *req = NULL;
  void *stream = (void *)(uintptr_t)0x1234;
  assert_int_equal(lamp_comm_all_reduce_enqueue(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, stream, &req), LAMP_OK);
  assert_non_null(req);
  assert_int_equal(lamp_comm_wait_stream(c, req, stream), LAMP_OK);
  assert_int_equal(lamp_comm_poll(c), LAMP_OK);
  lamp_log_set_sink(NULL, NULL);
  char expect[256];
  snprintf(expect, sizeof expect, "bootcomm: enqueue 1: 3 elements on stream %p\nbootcomm: wait_stream 1 on stream %p\n",
           stream, stream);
  assert_non_null(strstr(logged, expect));
  assert_error(lamp_comm_all_reduce_enqueue(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, stream, &req),
               LAMP_ERR_UNSUPPORTED,
               "bootcomm: all_reduce_enqueue on cuda needs a plugin that declares cuda (its devices: cpu)");
  lamp_comm_close(c);
}

/* A 1.0 communicator has none of 1.3's members: it is created with create, and refuses them. */
static void test_abi_1_0_comm_lacks_1_3(void **state) {
  (void)state;
  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, BAD("abi10"), NULL, 0), LAMP_OK);
  assert_false(lamp_comm_supports(c, "all_reduce_enqueue"));
  float x[1] = {1};
  lamp_request *req = NULL;
  assert_error(lamp_comm_all_reduce_enqueue(c, x, 1, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, NULL, &req),
               LAMP_ERR_UNSUPPORTED, "abi10: all_reduce_enqueue is not supported by this comm plugin");
  assert_error(lamp_comm_wait_stream(c, req, NULL), LAMP_ERR_UNSUPPORTED,
               "abi10: wait_stream is not supported by this comm plugin");
  assert_error(lamp_comm_poll(c), LAMP_ERR_UNSUPPORTED, "abi10: poll is not supported by this comm plugin");
  lamp_comm_close(c);
}

static void test_comm_bootstrap_env_error_named(void **state) {
  (void)state;
  clear_launch_env();
  setenv("LAMP_WORLD_SIZE", "2", 1);
  lamp_comm *c = NULL;
  assert_error(lamp_comm_open(&c, BAD("bootcomm"), NULL, 0), LAMP_ERR_INVALID_USAGE,
               "bootcomm: bootstrap: LAMP_WORLD_SIZE=2 but neither LAMP_RANK nor RANK is set");
  assert_null(c);
  clear_launch_env();
}

/* Three steps of a small MLP through `comm`; the final parameters. */
static float *train_through(const char *comm, size_t *n) {
  rig r;
  rig_spec spec = {.comm = comm, .seed = 3};
  rig_open(&r, &spec, seq(3, (lamp_layer *[]){linear(6, 8), relu(), linear(8, 3)}));
  lamp_rng rng;
  lamp_rng_seed(&rng, 9);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){5, 6}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){5});
  for (int s = 0; s < 3; s++) {
    fill_uniform(x, &rng, -1.0, 1.0);
    for (int i = 0; i < 5; i++) ((int32_t *)lamp_tensor_data(y))[i] = (int32_t)lamp_rng_below(&rng, 3);
    OK(lamp_trainer_step(r.t, x, y));
  }
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  *n = lamp_model_numel(r.model);
  float *p = params_copy(&r);
  rig_close(&r);
  return p;
}

/* A communicator built against ABI 1.0, and one created with the bootstrap, train as single. */
static void test_old_and_bootstrapped_comms_train(void **state) {
  (void)state;
  clear_launch_env();
  lamp_log_set_level(LAMP_LOG_WARN);
  size_t n_single, n_old, n_boot;
  float *single = train_through("single", &n_single);
  float *old = train_through(BAD("abi10"), &n_old);
  float *boot = train_through(BAD("bootcomm"), &n_boot);
  assert_int_equal(n_single, n_old);
  assert_int_equal(n_single, n_boot);
  assert_memory_equal(single, old, n_single * sizeof(float));
  assert_memory_equal(single, boot, n_single * sizeof(float));
  free(single);
  free(old);
  free(boot);
  lamp_log_set_level(LAMP_LOG_INFO);
}

/*
** Rank r of 2 as a forked process over the file store: opens bootcomm with opts, all-reduces
** {r + 1, 10 r} unless `quiet` and closes. Writes its status and message to <dir>/result.<r>.
*/
static void forked_rank(const char *dir, int r, const lamp_option *opts, size_t n_opts, int quiet) {
  char rank[8], path[512];
  snprintf(rank, sizeof rank, "%d", r);
  clear_launch_env();
  setenv("LAMP_WORLD_SIZE", "2", 1);
  setenv("LAMP_RANK", rank, 1);
  setenv("LAMP_STORE_DIR", dir, 1);
  setenv("LAMP_RUN_ID", "forked", 1);
  lamp_comm *c = NULL;
  lamp_status st = lamp_comm_open(&c, BAD("bootcomm"), opts, n_opts);
  float x[2] = {(float)r + 1.0f, 10.0f * (float)r};
  if (st == LAMP_OK && !quiet) {
    st = lamp_comm_all_reduce(c, x, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU);
    if (st == LAMP_OK && !(x[0] == 3.0f && x[1] == 10.0f)) st = lamp_error(LAMP_ERR_INTERNAL, "sum %g %g", x[0], x[1]);
    if (st == LAMP_OK && lamp_comm_size(c) != 2) st = lamp_error(LAMP_ERR_INTERNAL, "size %d", lamp_comm_size(c));
  }
  snprintf(path, sizeof path, "%s/result.%d", dir, r);
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fprintf(f, "%d %s", (int)st, st == LAMP_OK ? "" : lamp_last_error());
    fclose(f);
  }
  lamp_comm_close(c);
  _exit(0);
}

/* quiet: bit r keeps rank r from all-reducing. */
static void run_forked(const char *dir, const lamp_option *opts, size_t n_opts, unsigned quiet,
                       char results[2][LAMP_ERROR_MAX]) {
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) forked_rank(dir, r, opts, n_opts, (quiet >> r) & 1u);
  }
  for (int r = 0; r < 2; r++) {
    int status = 0;
    assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/result.%d", dir, r);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(results[r], 1, LAMP_ERROR_MAX - 1, f);
    results[r][n] = '\0';
    fclose(f);
  }
}

static void test_comm_over_file_store(void **state) {
  (void)state;
  const char *dir = TMP "/forked";
  fresh_dir(dir);
  static const lamp_option opts[] = {{"timeout", 30}, {"expect_one_host", 1}};
  char results[2][LAMP_ERROR_MAX];
  run_forked(dir, opts, 2, 0, results);
  assert_string_equal(results[0], "0 ");
  assert_string_equal(results[1], "0 ");
  assert_false(exists(TMP "/forked/forked.0"));
}

/* Rank 1 leaves out bootcomm's exchange: rank 0's create fails at its deadline, and the core
   names the bootstrap's message, which the plugin passed on without one of its own. */
static void test_comm_create_names_missing_peer(void **state) {
  (void)state;
  const char *dir = TMP "/forkfail";
  fresh_dir(dir);
  static const lamp_option opts[] = {{"timeout", 30}, {"call_timeout", 0.5}, {"skip_rank", 1}};
  char results[2][LAMP_ERROR_MAX];
  run_forked(dir, opts, 3, 1u << 1, results);
  assert_string_equal(results[0], "6 bootcomm: bootstrap: all_gather 1 timed out after 0.5 s waiting for rank 1 "
                                  "(file store " TMP "/forkfail/forked.0)");
  assert_string_equal(results[1], "0 "); /* its create left the exchange out */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_store_collectives),
      cmocka_unit_test(test_missing_peer_named_at_deadline),
      cmocka_unit_test(test_missing_peer_at_open),
      cmocka_unit_test(test_abort_ends_a_wait),
      cmocka_unit_test(test_mismatched_sizes),
      cmocka_unit_test(test_unusable_after_failure),
      cmocka_unit_test(test_folder_checks),
      cmocka_unit_test(test_local_ranks),
      cmocka_unit_test(test_single_rank_without_launcher),
      cmocka_unit_test(test_environment_errors),
      cmocka_unit_test(test_comm_with_bootstrap_alone),
      cmocka_unit_test(test_abi_1_0_comm_lacks_1_3),
      cmocka_unit_test(test_comm_bootstrap_env_error_named),
      cmocka_unit_test(test_old_and_bootstrapped_comms_train),
      cmocka_unit_test(test_comm_over_file_store),
      cmocka_unit_test(test_comm_create_names_missing_peer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
