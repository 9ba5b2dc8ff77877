/*
** The nccl communicator on a machine without a GPU driver (CI): its probe names what is missing
** (the run device, libnccl, the driver) and scores 0; create fails with CUDA's own words, after
** the unique-id exchange over the bootstrap, and every rank makes the same bootstrap calls
** whatever fails locally. A fake bootstrap (one process playing rank 0 or rank 1) records them.
** Skipped where nccl.so was not built (no CUDA toolkit or no nccl.h).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"
#include "plugin/loader.h"

#define NCCL_SO LAMP_PLUGIN_BUILD_DIR "/comm/nccl.so"
#define NO_DRIVER "CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"
/* What rank 0 broadcasts: ready flag, NCCL version, the 128-byte unique id. */
#define PACKET_BYTES (4 + 4 + 128)

static const lamp_comm_v1 *table(void) {
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "nccl", &h), LAMP_OK);
  return (const lamp_comm_v1 *)h->desc;
}

static void clear_env(void) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  unsetenv("LAMP_COMM_TIMEOUT");
  unsetenv("LAMP_NCCL_LIBRARY");
}

/* The core's host, but training on cuda. */
static lamp_host cuda_host;
static lamp_device run_on_cuda(void) { return LAMP_CUDA; }
static const lamp_host *host_on_cuda(void) {
  cuda_host = *lamp_host_get();
  cuda_host.run_device = run_on_cuda;
  return &cuda_host;
}

/* ---- a fake bootstrap ------------------------------------------------------------------------ */

typedef struct fake {
  int broadcasts, all_gathers, barriers;
  size_t broadcast_bytes, gather_bytes;
  int root;
  unsigned char packet[PACKET_BYTES]; /* what rank 0 sent, or what a rank other than 0 receives */
  lamp_status fail_broadcast;
  int32_t peer_status; /* what the other rank contributes to the all-gather */
} fake;

static lamp_status fake_broadcast(const lamp_bootstrap *b, void *buf, size_t bytes, int root, double timeout_s) {
  fake *f = b->impl;
  (void)timeout_s;
  f->broadcasts++;
  f->broadcast_bytes = bytes;
  f->root = root;
  if (f->fail_broadcast != LAMP_OK) return f->fail_broadcast;
  if (bytes != PACKET_BYTES) return LAMP_ERR_INTERNAL;
  if (b->rank == root) memcpy(f->packet, buf, bytes);
  else memcpy(buf, f->packet, bytes);
  return LAMP_OK;
}

static lamp_status fake_all_gather(const lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  fake *f = b->impl;
  (void)timeout_s;
  f->all_gathers++;
  f->gather_bytes = bytes;
  if (bytes != sizeof(int32_t)) return LAMP_ERR_INTERNAL;
  for (int r = 0; r < b->size; r++)
    memcpy((char *)recv + (size_t)r * bytes, r == b->rank ? send : &f->peer_status, bytes);
  return LAMP_OK;
}

static lamp_status fake_barrier(const lamp_bootstrap *b, double timeout_s) {
  (void)timeout_s;
  ((fake *)b->impl)->barriers++;
  return LAMP_OK;
}

static lamp_bootstrap bootstrap(fake *f, int rank, int size) {
  lamp_bootstrap b = {sizeof b, rank, size, rank, size, f, fake_broadcast, fake_all_gather, fake_barrier};
  return b;
}

static lamp_status create_with(const lamp_bootstrap *b, lamp_ctx *ctx, void **comm) {
  const lamp_comm_v1 *t = table();
  double timeout = 300.0;
  return t->create_with_bootstrap(lamp_host_get(), ctx, &timeout, b, comm);
}

/* First: the library is opened at most once per process, and this test wants it missing. */
static void test_probe_without_libnccl(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  setenv("LAMP_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  char reason[512];
  assert_int_equal(table()->hdr.probe(host_on_cuda(), reason, sizeof reason), 0);
  assert_string_equal(reason, "cannot load /nonexistent/libnccl.so.2 (/nonexistent/libnccl.so.2: cannot open "
                              "shared object file: No such file or directory)");
  /* create says the same (rank 0 of 1: no bootstrap call is needed). */
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  double timeout = 300.0;
  assert_int_equal(table()->create(lamp_host_get(), ctx, &timeout, &comm), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_ctx_message(ctx), "cannot load /nonexistent/libnccl.so.2 (/nonexistent/libnccl.so.2: "
                                              "cannot open shared object file: No such file or directory)");
  lamp_ctx_free(ctx);
  clear_env();
}

static void test_probe_reasons(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  char reason[512];
  /* `lamp plugins` and every CPU run: the run device is the CPU. */
  assert_int_equal(table()->hdr.probe(lamp_host_get(), reason, sizeof reason), 0);
  assert_string_equal(reason, "the run device is cpu: nccl moves cuda buffers (train with --device=cuda)");
  /* A cuda run on this machine: libnccl opens, the driver is missing. */
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  assert_int_equal(table()->hdr.probe(host_on_cuda(), reason, sizeof reason), 0);
  assert_string_equal(reason, "no usable CUDA driver: " NO_DRIVER);
  clear_env();
}

static void test_declares(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  const lamp_comm_v1 *t = table();
  assert_int_equal(t->hdr.n_params, 1);
  assert_string_equal(t->hdr.params[0].name, "timeout");
  assert_true(t->hdr.params[0].default_value == 300.0);
  assert_int_equal(t->hdr.devices, LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA));
  assert_true(LAMP_COMM_HAS(t, create_with_bootstrap));
  assert_true(LAMP_COMM_HAS(t, poll));
  assert_non_null(t->all_reduce_enqueue);
  assert_non_null(t->wait_stream);
  assert_non_null(t->poll);
  assert_non_null(t->all_gather);
}

/* One process: the core's own path (create, no bootstrap) fails with CUDA's message. */
static void test_create_one_process(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, "nccl", NULL, 0), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "nccl: cannot use the GPU: " NO_DRIVER);
  assert_null(c);
}

/* The plugin's own refusals, called directly (the core may check the same things first). */
static void test_create_refusals(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  const lamp_comm_v1 *t = table();
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  double timeout = 300.0;
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  assert_int_equal(t->create(lamp_host_get(), ctx, &timeout, &comm), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_ctx_message(ctx),
                      "created without a bootstrap, which serves one process, but OMPI_COMM_WORLD_SIZE=2: this core "
                      "(ABI 1.4) cannot hand NCCL's unique id to the other ranks");
  clear_env();
  setenv("LAMP_COMM_TIMEOUT", "soon", 1);
  assert_int_equal(t->create(lamp_host_get(), ctx, &timeout, &comm), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_ctx_message(ctx), "LAMP_COMM_TIMEOUT must be seconds in [0.1, 604800], got 'soon'");
  assert_null(comm);
  lamp_ctx_free(ctx);
  clear_env();
}

/* Rank 0 of 2: it makes the id, broadcasts it, then fails on the GPU, and still joins the
   all-gather that tells rank 1. */
static void test_bootstrap_rank0(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  fake f;
  memset(&f, 0, sizeof f);
  lamp_bootstrap b = bootstrap(&f, 0, 2);
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_ctx_message(ctx), "cannot use the GPU: " NO_DRIVER);
  assert_int_equal(f.broadcasts, 1);
  assert_int_equal(f.root, 0);
  assert_int_equal(f.broadcast_bytes, PACKET_BYTES);
  int32_t ready, version;
  memcpy(&ready, f.packet, 4);
  memcpy(&version, f.packet + 4, 4);
  assert_int_equal(ready, 1);
  assert_true(version >= 21400); /* NCCL 2.14 or later */
  int id_bytes = 0;
  for (int i = 8; i < PACKET_BYTES; i++) id_bytes += f.packet[i] != 0;
  assert_true(id_bytes > 0);
  assert_int_equal(f.all_gathers, 1);
  assert_int_equal(f.gather_bytes, 4);
  assert_null(comm);
  lamp_ctx_free(ctx);
}

/* Rank 1 of 2: what rank 0's packet says decides before its own GPU is tried. */
static void test_bootstrap_rank1(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  fake f;
  memset(&f, 0, sizeof f);
  lamp_bootstrap b = bootstrap(&f, 1, 2);
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  /* Rank 0 failed before it had an id (ready 0): said, and the all-gather still happens. */
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "rank 0 could not create the NCCL unique id (its own message says why)");
  assert_int_equal(f.broadcasts, 1);
  assert_int_equal(f.all_gathers, 1);

  /* Rank 0 has another NCCL. */
  int32_t ready = 1, version = 21403;
  memcpy(f.packet, &ready, 4);
  memcpy(f.packet + 4, &version, 4);
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_INVALID_USAGE);
  assert_non_null(strstr(lamp_ctx_message(ctx), "rank 0 has NCCL 2.14.3, this rank "));
  assert_non_null(strstr(lamp_ctx_message(ctx), ": every rank needs the same NCCL"));

  /* Rank 0 is ready with this rank's NCCL: the GPU is tried, and CUDA answers. */
  const lamp_comm_v1 *t = table();
  f.all_gathers = 0;
  lamp_bootstrap b0 = bootstrap(&f, 0, 2);
  assert_int_equal(t->create_with_bootstrap(lamp_host_get(), ctx, &(double){300.0}, &b0, &comm), LAMP_ERR_UNSUPPORTED);
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_ctx_message(ctx), "cannot use the GPU: " NO_DRIVER);
  assert_int_equal(f.all_gathers, 2);
  assert_null(comm);
  lamp_ctx_free(ctx);
}

/* A bootstrap that fails (a peer is missing) ends create with its status, and no message of the
   plugin's own: the core has recorded the bootstrap's. */
static void test_bootstrap_failure(void **state) {
  (void)state;
  if (access(NCCL_SO, F_OK) != 0) skip();
  clear_env();
  fake f;
  memset(&f, 0, sizeof f);
  f.fail_broadcast = LAMP_ERR_REMOTE;
  lamp_bootstrap b = bootstrap(&f, 1, 2);
  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_REMOTE);
  assert_string_equal(lamp_ctx_message(ctx), "");
  assert_int_equal(f.all_gathers, 0);
  /* An impossible bootstrap is the core's bug. */
  b = bootstrap(&f, 2, 2);
  assert_int_equal(create_with(&b, ctx, &comm), LAMP_ERR_INTERNAL);
  assert_string_equal(lamp_ctx_message(ctx), "the bootstrap says rank 2 of 2, local rank 2 of 2");
  lamp_ctx_free(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_probe_without_libnccl),
      cmocka_unit_test(test_probe_reasons),
      cmocka_unit_test(test_declares),
      cmocka_unit_test(test_create_one_process),
      cmocka_unit_test(test_create_refusals),
      cmocka_unit_test(test_bootstrap_rank0),
      cmocka_unit_test(test_bootstrap_rank1),
      cmocka_unit_test(test_bootstrap_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
