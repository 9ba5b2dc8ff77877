/*
** The mpi communicator across two real ranks: run as `mpirun -n 2 test_mpi_comm`. Opened
** through the real loader (lamp_comm_open), like the trainer does. Checked:
**   - "auto" picks mpi under mpirun; LAMP_COMM_TIMEOUT sets the timeout, an option wins;
**   - rank and size; all_reduce SUM, MAX, MIN on f32 and i32, exact;
**   - 16-bit reductions are refused (LAMP_ERR_UNSUPPORTED), bad roots are invalid arguments;
**   - broadcast from rank 0 and from rank 1, any dtype (f16 bytes too);
**   - all_gather out of place and in place; reduce_scatter out of place and in place;
**   - barrier; all_reduce_start/wait with two requests in flight, waited in reverse order.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "mpi_check.h"

#define N 1000

static char logged[4096];

static void capture(lamp_log_level level, const char *line, void *ud) {
  (void)level;
  (void)ud;
  size_t used = strlen(logged);
  snprintf(logged + used, sizeof logged - used, "%s\n", line);
}

static const char *plugin_name(lamp_comm *c) { return lamp_comm_handle(c)->desc->name; }

static void test_all_reduce(lamp_comm *c, int rank) {
  static float f[N];
  static int32_t k[N];
  for (int i = 0; i < N; i++) f[i] = (float)(rank + 1) + 0.5f * (float)i;
  OK(lamp_comm_all_reduce(c, f, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += f[i] != 3.0f + (float)i;
  CHECK(bad == 0, "f32 SUM: %d wrong, f[1] = %g", bad, (double)f[1]);

  for (int i = 0; i < N; i++) f[i] = rank == 0 ? (float)i : -(float)i + 0.25f;
  OK(lamp_comm_all_reduce(c, f, N, LAMP_F32, LAMP_REDUCE_MAX, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < N; i++) bad += f[i] != (i == 0 ? 0.25f : (float)i);
  CHECK(bad == 0, "f32 MAX: %d wrong", bad);

  for (int i = 0; i < N; i++) f[i] = rank == 0 ? (float)i : -(float)i + 0.25f;
  OK(lamp_comm_all_reduce(c, f, N, LAMP_F32, LAMP_REDUCE_MIN, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < N; i++) bad += f[i] != (i == 0 ? 0.0f : -(float)i + 0.25f);
  CHECK(bad == 0, "f32 MIN: %d wrong", bad);

  for (int i = 0; i < N; i++) k[i] = rank == 0 ? i : 1000000 - 3 * i;
  OK(lamp_comm_all_reduce(c, k, N, LAMP_I32, LAMP_REDUCE_SUM, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < N; i++) bad += k[i] != 1000000 - 2 * i;
  CHECK(bad == 0, "i32 SUM: %d wrong", bad);

  for (int i = 0; i < N; i++) k[i] = rank == 0 ? i : 500 - i;
  OK(lamp_comm_all_reduce(c, k, N, LAMP_I32, LAMP_REDUCE_MAX, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < N; i++) bad += k[i] != (i > 500 - i ? i : 500 - i);
  CHECK(bad == 0, "i32 MAX: %d wrong", bad);

  for (int i = 0; i < N; i++) k[i] = rank == 0 ? i : 500 - i;
  OK(lamp_comm_all_reduce(c, k, N, LAMP_I32, LAMP_REDUCE_MIN, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < N; i++) bad += k[i] != (i < 500 - i ? i : 500 - i);
  CHECK(bad == 0, "i32 MIN: %d wrong", bad);

  /* Refusals happen before any message moves, on every rank alike. */
  uint16_t h[4] = {0};
  lamp_status st = lamp_comm_all_reduce(c, h, 4, LAMP_F16, LAMP_REDUCE_SUM, LAMP_CPU);
  CHECK(st == LAMP_ERR_UNSUPPORTED && strstr(lamp_last_error(), "f16") != NULL,
        "f16 all_reduce: status %d, '%s'", (int)st, lamp_last_error());
  st = lamp_comm_all_reduce(c, f, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA);
  CHECK(st == LAMP_ERR_UNSUPPORTED, "cuda buffer: status %d", (int)st);
  st = lamp_comm_broadcast(c, f, 4, LAMP_F32, 2, LAMP_CPU);
  CHECK(st == LAMP_ERR_INVALID_ARG && strstr(lamp_last_error(), "root 2") != NULL,
        "root 2 of 2: status %d, '%s'", (int)st, lamp_last_error());
}

static void test_broadcast(lamp_comm *c, int rank) {
  for (int root = 0; root < 2; root++) {
    float f[N];
    for (int i = 0; i < N; i++) f[i] = rank == root ? (float)(root * 10000 + i) : -1.0f;
    OK(lamp_comm_broadcast(c, f, N, LAMP_F32, root, LAMP_CPU));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += f[i] != (float)(root * 10000 + i);
    CHECK(bad == 0, "broadcast f32 from rank %d: %d wrong", root, bad);

    uint16_t h[7];
    for (int i = 0; i < 7; i++) h[i] = rank == root ? (uint16_t)(0x3c00 + i + root) : 0;
    OK(lamp_comm_broadcast(c, h, 7, LAMP_F16, root, LAMP_CPU));
    bad = 0;
    for (int i = 0; i < 7; i++) bad += h[i] != (uint16_t)(0x3c00 + i + root);
    CHECK(bad == 0, "broadcast f16 from rank %d: %d wrong", root, bad);
  }
}

static void test_all_gather(lamp_comm *c, int rank) {
  enum { K = 5 };
  float send[K], recv[2 * K];
  for (int i = 0; i < K; i++) send[i] = (float)(100 * rank + i);
  OK(lamp_comm_all_gather(c, send, recv, K, LAMP_F32, LAMP_CPU));
  int bad = 0;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < K; i++) bad += recv[r * K + i] != (float)(100 * r + i);
  CHECK(bad == 0, "all_gather: %d wrong", bad);

  int32_t inplace[2 * K];
  for (int i = 0; i < 2 * K; i++) inplace[i] = -7;
  for (int i = 0; i < K; i++) inplace[rank * K + i] = 1000 * (rank + 1) + i;
  OK(lamp_comm_all_gather(c, inplace + rank * K, inplace, K, LAMP_I32, LAMP_CPU));
  bad = 0;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < K; i++) bad += inplace[r * K + i] != 1000 * (r + 1) + i;
  CHECK(bad == 0, "all_gather in place: %d wrong", bad);
}

static void test_reduce_scatter(lamp_comm *c, int rank) {
  enum { K = 6 };
  float send[2 * K], recv[K];
  for (int j = 0; j < 2 * K; j++) send[j] = (float)(rank * 100 + j);
  OK(lamp_comm_reduce_scatter(c, send, recv, K, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  int bad = 0;
  for (int i = 0; i < K; i++) bad += recv[i] != (float)(100 + 2 * (rank * K + i));
  CHECK(bad == 0, "reduce_scatter SUM: %d wrong, recv[0] = %g", bad, (double)recv[0]);

  int32_t both[2 * K];
  for (int j = 0; j < 2 * K; j++) both[j] = rank == 0 ? j : 2 * K - j;
  OK(lamp_comm_reduce_scatter(c, both, both, K, LAMP_I32, LAMP_REDUCE_MAX, LAMP_CPU));
  bad = 0;
  for (int i = 0; i < K; i++) {
    int j = rank * K + i;
    bad += both[i] != (j > 2 * K - j ? j : 2 * K - j);
  }
  CHECK(bad == 0, "reduce_scatter MAX in place: %d wrong", bad);
}

static void test_start_wait(lamp_comm *c, int rank) {
  CHECK(lamp_comm_supports(c, "all_reduce_start"), "mpi supports all_reduce_start");
  float a[N], b[3];
  for (int i = 0; i < N; i++) a[i] = (float)(rank + 1) * (float)i;
  for (int i = 0; i < 3; i++) b[i] = (float)(rank * 3 + i);
  lamp_request *ra = NULL, *rb = NULL;
  OK(lamp_comm_all_reduce_start(c, a, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, &ra));
  OK(lamp_comm_all_reduce_start(c, b, 3, LAMP_F32, LAMP_REDUCE_MIN, LAMP_CPU, &rb));
  OK(lamp_comm_wait(c, rb));
  OK(lamp_comm_wait(c, ra));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += a[i] != 3.0f * (float)i;
  for (int i = 0; i < 3; i++) bad += b[i] != (float)i;
  CHECK(bad == 0, "start/wait: %d wrong", bad);
}

int main(void) {
  /* An environment timeout, overridden by an option; both visible in the create log line. */
  setenv("LAMP_COMM_TIMEOUT", "77", 1);
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(capture, NULL);
  lamp_comm *autoc = NULL, *c = NULL;
  OK(lamp_comm_open(&autoc, "auto", NULL, 0));
  lamp_option timeout = {"timeout", 60.0};
  OK(lamp_comm_open(&c, "mpi", &timeout, 1));
  lamp_log_set_sink(NULL, NULL);
  int rank = lamp_comm_rank(c);
  check_rank = rank;
  CHECK(strcmp(plugin_name(autoc), "mpi") == 0, "auto picked '%s' under mpirun", plugin_name(autoc));
  CHECK(strcmp(plugin_name(c), "mpi") == 0, "opened '%s'", plugin_name(c));
  if (rank == 0) {
    CHECK(strstr(logged, "launched under mpirun") != NULL, "auto's reason in the log:\n%s", logged);
    CHECK(strstr(logged, "timeout 77 s") != NULL, "LAMP_COMM_TIMEOUT=77 used:\n%s", logged);
    CHECK(strstr(logged, "timeout 60 s") != NULL, "option timeout=60 wins:\n%s", logged);
  }
  CHECK(lamp_comm_size(c) == 2 && lamp_comm_size(autoc) == 2, "size %d", lamp_comm_size(c));
  CHECK(lamp_comm_rank(autoc) == rank, "same rank in both communicators");
  int32_t ranks[2] = {-1, -1}, mine = rank;
  OK(lamp_comm_all_gather(c, &mine, ranks, 1, LAMP_I32, LAMP_CPU));
  CHECK(ranks[0] == 0 && ranks[1] == 1, "ranks %d %d", ranks[0], ranks[1]);

  test_all_reduce(c, rank);
  test_broadcast(c, rank);
  OK(lamp_comm_barrier(c));
  test_all_gather(c, rank);
  test_reduce_scatter(c, rank);
  test_start_wait(c, rank);
  OK(lamp_comm_barrier(autoc)); /* the two communicators are independent */

  int status = mpi_check_finish(c, "test_mpi_comm");
  lamp_comm_close(c);
  lamp_comm_close(autoc); /* the last one: finalises MPI */
  return status;
}
