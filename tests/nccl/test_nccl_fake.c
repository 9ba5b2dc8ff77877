/*
** The nccl communicator's own logic on the CPU, over a stand-in for the CUDA runtime and libnccl
** (fake_nccl.c): the plugin's sources built again, linked to the fake instead of the CUDA
** runtime (build/tests/nccl/plugin/nccl.so). Checked:
**   - create: NCCL's init polled while in progress; an init that never finishes is aborted at
**     the deadline with its message; more ranks on a host than GPUs; another rank's failure;
**   - host buffers through the staging buffers, in pieces (a fake of 2 ranks doubles a SUM, so a
**     misplaced piece shows), device buffers, barrier;
**   - all_reduce_enqueue waits for the caller's stream and returns at once; wait_stream makes
**     another stream wait for it; poll never blocks;
**   - the watchdog: a collective past its deadline, an asynchronous NCCL error, the run's abort
**     flag: poll names the operation, its number, the rank and the timeout; later calls fail the
**     same way; a blocking call ends at its deadline, also when the watchdog aborted first and
**     the waiter finds the ended collective complete; destroy aborts instead of destroying.
*/
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <nccl.h>

#include "base/error.h"
#include "plugin/loader.h"

/* The fake's controls and the cuda* calls the test itself makes, resolved from FAKE_LIB. */
static void (*fake_reset)(void);
static void (*fake_set_gpus)(int);
static void (*fake_set_hang)(int);
static void (*fake_set_async_error)(int);
static void (*fake_set_init_polls)(int);
static void (*fake_set_query_delay)(double);
static void (*fake_stall)(void *, int);
static void (*fake_progress)(void);
static void (*fake_counts)(int *, int *, int *, int *);
static int (*fake_stream_create)(void **, unsigned);
static int (*fake_memcpy_async)(void *, const void *, size_t, int, void *);

static const lamp_comm_v1 *t;

static void resolve(void *lib, const char *name, void *slot) {
  void *sym = dlsym(lib, name);
  assert_non_null(sym);
  memcpy(slot, &sym, sizeof sym);
}

static int setup(void **state) {
  (void)state;
  setenv("LAMP_NCCL_LIBRARY", FAKE_LIB, 1);
  unsetenv("LAMP_COMM_TIMEOUT");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  const lamp_plugin_handle *h = NULL;
  if (lamp_plugin_load(LAMP_KIND_COMM, FAKE_PLUGIN, &h) != LAMP_OK) {
    fprintf(stderr, "%s\n", lamp_last_error());
    return -1;
  }
  t = (const lamp_comm_v1 *)h->desc;
  void *lib = dlopen(FAKE_LIB, RTLD_NOW | RTLD_NOLOAD);
  if (lib == NULL) return -1;
  resolve(lib, "fake_reset", &fake_reset);
  resolve(lib, "fake_set_gpus", &fake_set_gpus);
  resolve(lib, "fake_set_hang", &fake_set_hang);
  resolve(lib, "fake_set_async_error", &fake_set_async_error);
  resolve(lib, "fake_set_init_polls", &fake_set_init_polls);
  resolve(lib, "fake_set_query_delay", &fake_set_query_delay);
  resolve(lib, "fake_stall", &fake_stall);
  resolve(lib, "fake_progress", &fake_progress);
  resolve(lib, "fake_counts", &fake_counts);
  resolve(lib, "cudaStreamCreateWithFlags", &fake_stream_create);
  resolve(lib, "cudaMemcpyAsync", &fake_memcpy_async);
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a bootstrap of one process -------------------------------------------------------------- */

typedef struct solo {
  int32_t peer_status;  /* what the other ranks contribute to the all-gather */
  unsigned char packet[136]; /* what a rank other than 0 receives */
} solo;

static lamp_status solo_broadcast(const lamp_bootstrap *b, void *buf, size_t bytes, int root, double timeout_s) {
  solo *s = b->impl;
  (void)timeout_s;
  if (b->rank != root) memcpy(buf, s->packet, bytes < sizeof s->packet ? bytes : sizeof s->packet);
  return LAMP_OK;
}

static lamp_status solo_all_gather(const lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  solo *s = b->impl;
  (void)timeout_s;
  for (int r = 0; r < b->size; r++) memcpy((char *)recv + (size_t)r * bytes, r == b->rank ? send : &s->peer_status, bytes);
  return LAMP_OK;
}

static lamp_status solo_barrier(const lamp_bootstrap *b, double timeout_s) {
  (void)b, (void)timeout_s;
  return LAMP_OK;
}

/* Rank `rank` of `size`, `local` ranks on this host. */
static lamp_status open_comm(solo *s, int rank, int size, int local, double timeout, lamp_ctx *ctx, void **comm) {
  lamp_bootstrap b = {sizeof b, rank, size, 0, local, s, solo_broadcast, solo_all_gather, solo_barrier};
  return t->create_with_bootstrap(lamp_host_get(), ctx, &timeout, &b, comm);
}

static void test_init_polled(void **state) {
  (void)state;
  fake_reset();
  fake_set_init_polls(5);
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 10.0, ctx, &comm), LAMP_OK);
  assert_int_equal(t->rank(comm), 0);
  assert_int_equal(t->size(comm), 2);
  assert_int_equal(t->poll(comm), LAMP_OK);
  t->destroy(comm);
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 0);
  assert_int_equal(destroys, 1);
  assert_int_equal(finalizes, 1);
  lamp_ctx_free(ctx);
}

static void test_init_deadline(void **state) {
  (void)state;
  fake_reset();
  fake_set_init_polls(1 << 30);
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  double start = now();
  assert_int_equal(open_comm(&s, 0, 2, 1, 0.3, ctx, &comm), LAMP_ERR_REMOTE);
  double took = now() - start;
  assert_true(took >= 0.3 && took < 2.0);
  assert_string_equal(lamp_ctx_message(ctx),
                      "initialising NCCL on rank 0 of 2 (cuda:0) did not finish within 0.3 s (the comm option "
                      "'timeout'): a rank did not join (exited, hung, or never created its communicator); the "
                      "communicator was aborted");
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 1);
  assert_int_equal(destroys, 0);
  assert_null(comm);
  lamp_ctx_free(ctx);
}

static void test_gpus_and_peers(void **state) {
  (void)state;
  fake_reset();
  fake_set_gpus(2);
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 3, 3, 10.0, ctx, &comm), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_ctx_message(ctx), "3 ranks on this host but 2 GPUs: NCCL needs one GPU per rank");
  /* Rank 1 got rank 0's id, but rank 0 (say) failed on its GPU: nobody initialises NCCL. */
  fake_reset();
  int32_t ready = 1, version = NCCL_VERSION_CODE;
  memcpy(s.packet, &ready, 4);
  memcpy(s.packet + 4, &version, 4);
  s.peer_status = 1;
  assert_int_equal(open_comm(&s, 1, 2, 1, 10.0, ctx, &comm), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "rank 0 could not set up NCCL (see its message); no rank initialises it");
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(collectives, 0);
  lamp_ctx_free(ctx);
}

/* A fake of 2 ranks: SUM doubles, all-gather repeats, reduce-scatter reduces rank 0's block. Host
   buffers larger than the 4 MiB staging buffer go in pieces. */
static void test_collectives(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 10.0, ctx, &comm), LAMP_OK);

  size_t n = ((size_t)3 << 20) + 7; /* 12 MiB of f32: three pieces */
  float *f = malloc(n * sizeof *f);
  for (size_t i = 0; i < n; i++) f[i] = (float)(i % 1000) - 500.0f;
  assert_int_equal(t->all_reduce(comm, f, n, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += f[i] != 2.0f * ((float)(i % 1000) - 500.0f);
  assert_int_equal(bad, 0);
  assert_int_equal(t->all_reduce(comm, f, n, LAMP_F32, LAMP_REDUCE_MAX, LAMP_CPU), LAMP_OK);
  for (size_t i = 0; i < n; i++) bad += f[i] != 2.0f * ((float)(i % 1000) - 500.0f);
  assert_int_equal(bad, 0);

  int32_t k[3] = {1, -2, 3};
  assert_int_equal(t->all_reduce(comm, k, 3, LAMP_I32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  assert_int_equal(k[0], 2);
  assert_int_equal(k[1], -4);

  size_t m = ((size_t)5 << 20) + 3; /* u8: every piece holds a third of the staging buffer's elements */
  unsigned char *send = malloc(m), *recv = malloc(2 * m);
  for (size_t i = 0; i < m; i++) send[i] = (unsigned char)(i * 7);
  assert_int_equal(t->all_gather(comm, send, recv, m, LAMP_U8, LAMP_CPU), LAMP_OK);
  assert_memory_equal(recv, send, m);
  assert_memory_equal(recv + m, send, m);
  assert_int_equal(t->broadcast(comm, send, m, LAMP_U8, 0, LAMP_CPU), LAMP_OK);
  for (size_t i = 0; i < m; i++) bad += send[i] != (unsigned char)(i * 7);
  assert_int_equal(bad, 0);
  assert_int_equal(t->barrier(comm), LAMP_OK);

  /* reduce_scatter: rank 0's block of a host buffer of 2 x q, summed (doubled), in three pieces. */
  size_t q = (size_t)800 << 10;
  float *blocks = malloc(2 * q * sizeof *blocks), *mine = malloc(q * sizeof *mine);
  for (size_t i = 0; i < 2 * q; i++) blocks[i] = (float)(i % 777) - (i < q ? 300.0f : 100.0f);
  assert_int_equal(t->reduce_scatter(comm, blocks, mine, q, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  for (size_t i = 0; i < q; i++) bad += mine[i] != 2.0f * blocks[i];
  assert_int_equal(bad, 0);
  free(blocks);
  free(mine);

  /* Device memory (the fake's is the host's). */
  float d[4] = {1, 2, 3, 4}, half[2] = {0, 0};
  assert_int_equal(t->reduce_scatter(comm, d, half, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA), LAMP_OK);
  assert_true(half[0] == 2.0f && half[1] == 4.0f);
  assert_int_equal(t->reduce_scatter(comm, d, half, 2, LAMP_F32, (lamp_reduce_op)9, LAMP_CUDA), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_ctx_message(ctx), "reduce_scatter: unknown reduce op 9");
  assert_int_equal(t->all_reduce(comm, d, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA), LAMP_OK);
  assert_true(d[0] == 2.0f && d[3] == 8.0f);
  assert_int_equal(t->broadcast(comm, d, 4, LAMP_F32, 2, LAMP_CUDA), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_ctx_message(ctx), "broadcast: root 2 out of range for 2 ranks");
  assert_int_equal(t->all_reduce_enqueue(comm, f, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, NULL, &(lamp_request *){NULL}),
                   LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_ctx_message(ctx), "all_reduce_enqueue: cuda buffers only (host buffers go through all_reduce)");

  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_true(collectives >= 3 + 3 + 1 + 2 + 2 + 1 + 3 + 1 + 1); /* pieces counted one by one */
  t->destroy(comm);
  free(f);
  free(send);
  free(recv);
  lamp_ctx_free(ctx);
}

/* all_reduce_enqueue runs after the caller's stream and before the stream made to wait on it. */
static void test_stream_order(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 10.0, ctx, &comm), LAMP_OK);
  void *caller = NULL, *after = NULL;
  assert_int_equal(fake_stream_create(&caller, 0), 0);
  assert_int_equal(fake_stream_create(&after, 0), 0);
  float src[3] = {1, 2, 3}, buf[3] = {0, 0, 0}, out[3] = {-1, -1, -1};
  fake_stall(caller, 1); /* the caller's "backward pass" is still running */
  fake_memcpy_async(buf, src, sizeof buf, 0, caller);
  lamp_request *req = NULL;
  double start = now();
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, caller, &req), LAMP_OK);
  assert_true(now() - start < 0.5);
  assert_true(buf[0] == 0.0f); /* nothing ran yet */
  assert_int_equal(t->wait_stream(comm, req, after), LAMP_OK);
  fake_memcpy_async(out, buf, sizeof out, 0, after);
  assert_true(out[0] == -1.0f); /* `after` waits for the all-reduce */
  assert_int_equal(t->poll(comm), LAMP_OK);
  fake_stall(caller, 0);
  fake_progress();
  assert_true(buf[0] == 2.0f && buf[2] == 6.0f);
  assert_true(out[0] == 2.0f && out[2] == 6.0f);
  t->destroy(comm);
  lamp_ctx_free(ctx);
}

static void test_watchdog_deadline(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 0.5, ctx, &comm), LAMP_OK);
  fake_set_hang(1); /* the peer never joins the all-reduce */
  float buf[4] = {1, 2, 3, 4};
  lamp_request *req = NULL;
  double start = now();
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, NULL, &req), LAMP_OK);
  lamp_status st = LAMP_OK;
  while (st == LAMP_OK && now() - start < 5.0) st = t->poll(comm);
  double took = now() - start;
  const char *want = "all_reduce #1 on rank 0 did not finish within 0.5 s (the comm option 'timeout'); the "
                     "communicator was aborted";
  assert_int_equal(st, LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), want);
  assert_true(took >= 0.5 && took < 1.5);
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 1);
  /* Every later call fails the same way, wait_stream included (and it releases the request). */
  lamp_ctx_clear(ctx);
  assert_int_equal(t->all_reduce(comm, buf, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), want);
  assert_int_equal(t->wait_stream(comm, req, NULL), LAMP_ERR_REMOTE);
  assert_int_equal(t->barrier(comm), LAMP_ERR_REMOTE);
  assert_int_equal(t->poll(comm), LAMP_ERR_REMOTE);
  t->destroy(comm);
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 1);
  assert_int_equal(destroys, 0);
  assert_int_equal(finalizes, 0);
  lamp_ctx_free(ctx);
}

/* A blocking call ends at its deadline too, with the collective's own number. */
static void test_blocking_deadline(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 0.4, ctx, &comm), LAMP_OK);
  assert_int_equal(t->barrier(comm), LAMP_OK); /* #1 */
  fake_set_hang(1);
  int32_t flag = 1;
  double start = now();
  assert_int_equal(t->broadcast(comm, &flag, 1, LAMP_I32, 0, LAMP_CPU), LAMP_ERR_REMOTE);
  double took = now() - start;
  assert_true(took >= 0.4 && took < 1.5);
  assert_string_equal(lamp_ctx_message(ctx), "broadcast #2 on rank 0 did not finish within 0.4 s (the comm option "
                                             "'timeout'); the communicator was aborted");
  t->destroy(comm);
  lamp_ctx_free(ctx);
}

/*
** The watchdog aborts at the deadline while the waiting thread is off its core. The abort ends
** the queued collective, so the waiter then finds its event complete: that is a failure, not a
** result (under a loaded test suite the wait used to return LAMP_OK here).
*/
static void test_wait_after_abort(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 0.3, ctx, &comm), LAMP_OK);
  fake_set_hang(1);
  fake_set_query_delay(1.0);
  int32_t flag = 1;
  assert_int_equal(t->broadcast(comm, &flag, 1, LAMP_I32, 0, LAMP_CPU), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "broadcast #1 on rank 0 did not finish within 0.3 s (the comm option "
                                             "'timeout'); the communicator was aborted");
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 1);
  t->destroy(comm);
  lamp_ctx_free(ctx);
}

static void test_async_error_and_abort_flag(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 30.0, ctx, &comm), LAMP_OK);
  fake_set_hang(1);
  float buf[4] = {0};
  lamp_request *req = NULL;
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, NULL, &req), LAMP_OK);
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, NULL, &req), LAMP_OK);
  fake_set_async_error(ncclRemoteError);
  double start = now();
  lamp_status st = LAMP_OK;
  while (st == LAMP_OK && now() - start < 5.0) st = t->poll(comm);
  assert_true(now() - start < 1.0); /* the watchdog looks every few milliseconds, not at the deadline */
  assert_int_equal(st, LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "all_reduce #1 on rank 0 failed: NCCL: remote process exited or there "
                                             "was a network error (peer 1 went away); the communicator was aborted");
  t->destroy(comm);

  /* The run is stopping (Ctrl-C, a failed rank): the collective in flight is given up. */
  fake_reset();
  assert_int_equal(open_comm(&s, 0, 2, 1, 30.0, ctx, &comm), LAMP_OK);
  fake_set_hang(1);
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, NULL, &req), LAMP_OK);
  lamp_host_set_abort(1);
  start = now();
  st = LAMP_OK;
  while (st == LAMP_OK && now() - start < 5.0) st = t->poll(comm);
  lamp_host_set_abort(0);
  assert_int_equal(st, LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "all_reduce #1 on rank 0 was interrupted: the run is stopping; the "
                                             "communicator was aborted");
  t->destroy(comm);
  lamp_ctx_free(ctx);
}

/* destroy waits for what is still queued, then finalizes and destroys. */
static void test_destroy_drains(void **state) {
  (void)state;
  fake_reset();
  solo s = {0};
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(open_comm(&s, 0, 2, 1, 10.0, ctx, &comm), LAMP_OK);
  void *caller = NULL;
  assert_int_equal(fake_stream_create(&caller, 0), 0);
  fake_stall(caller, 1);
  float buf[2] = {1, 2};
  lamp_request *req = NULL;
  assert_int_equal(t->all_reduce_enqueue(comm, buf, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, caller, &req), LAMP_OK);
  fake_stall(caller, 0);
  t->destroy(comm);
  assert_true(buf[0] == 2.0f && buf[1] == 4.0f);
  int aborts, destroys, finalizes, collectives;
  fake_counts(&aborts, &destroys, &finalizes, &collectives);
  assert_int_equal(aborts, 0);
  assert_int_equal(destroys, 1);
  lamp_ctx_free(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init_polled),         cmocka_unit_test(test_init_deadline),
      cmocka_unit_test(test_gpus_and_peers),      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_stream_order),        cmocka_unit_test(test_watchdog_deadline),
      cmocka_unit_test(test_blocking_deadline),   cmocka_unit_test(test_wait_after_abort),
      cmocka_unit_test(test_async_error_and_abort_flag),
      cmocka_unit_test(test_destroy_drains),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
