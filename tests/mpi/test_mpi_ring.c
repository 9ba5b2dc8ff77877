/*
** The mpi communicator's large buffers, which go through its ring collectives
** (plugins/comm/mpi/ring.c) from 256 KiB on: run under mpirun with 2 ranks and with 3 (chunks of
** unequal length, partial sums passed on through the scratch). For counts on both sides of the
** threshold and uneven ones:
**   - all_reduce SUM, MAX, MIN on f32 and i32, exact;
**   - an f32 SUM of non-integral values: the same bits on every rank, within rounding of the
**     sum in double;
**   - reduce_scatter and all_gather, out of place and in place;
**   - all_reduce_start/wait with three requests in flight, waited in a different order on
**     every rank (a ring moves on while its rank waits for another).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpi_check.h"

static const size_t counts[] = {1000, 32769, 65535, 65536, 65537, (1u << 20) + 3};
#define N_COUNTS (sizeof counts / sizeof counts[0])

static int world;

/* A value in [-1, 1) that depends on rank and index only. */
static float noise(int rank, size_t i) {
  uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 17u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (float)((double)(h & 0xffffffu) / 8388608.0 - 1.0);
}

static float small_int(int rank, size_t i) { return (float)((i * 7 + (size_t)rank * 13) % 101); }

static void test_all_reduce(lamp_comm *c, int rank, size_t n) {
  float *f = xmalloc(n * sizeof *f);
  int32_t *k = xmalloc(n * sizeof *k);
  int bad = 0;
  for (size_t i = 0; i < n; i++) f[i] = (float)(rank + 1) * (float)(i % 1000);
  OK(lamp_comm_all_reduce(c, f, n, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  for (size_t i = 0; i < n; i++) bad += f[i] != (float)(world * (world + 1) / 2) * (float)(i % 1000);
  CHECK(bad == 0, "f32 SUM of %zu: %d wrong", n, bad);

  static const lamp_reduce_op ops[] = {LAMP_REDUCE_MAX, LAMP_REDUCE_MIN};
  for (int o = 0; o < 2; o++) {
    for (size_t i = 0; i < n; i++) f[i] = small_int(rank, i);
    OK(lamp_comm_all_reduce(c, f, n, LAMP_F32, ops[o], LAMP_CPU));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
      float want = small_int(0, i);
      for (int r = 1; r < world; r++) want = o == 0 ? fmaxf(want, small_int(r, i)) : fminf(want, small_int(r, i));
      bad += f[i] != want;
    }
    CHECK(bad == 0, "f32 %s of %zu: %d wrong", o == 0 ? "MAX" : "MIN", n, bad);
  }

  for (size_t i = 0; i < n; i++) k[i] = (int32_t)i - 1000003 * rank;
  OK(lamp_comm_all_reduce(c, k, n, LAMP_I32, LAMP_REDUCE_SUM, LAMP_CPU));
  bad = 0;
  for (size_t i = 0; i < n; i++) bad += k[i] != world * (int32_t)i - 1000003 * (world * (world - 1) / 2);
  CHECK(bad == 0, "i32 SUM of %zu: %d wrong", n, bad);

  for (size_t i = 0; i < n; i++) f[i] = noise(rank, i);
  OK(lamp_comm_all_reduce(c, f, n, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  CHECK(same_on_all_ranks(c, f, n * sizeof *f), "f32 SUM of %zu noisy values: the ranks disagree", n);
  bad = 0;
  for (size_t i = 0; i < n; i++) {
    double want = 0;
    for (int r = 0; r < world; r++) want += noise(r, i);
    bad += fabs((double)f[i] - want) > 4e-7 * world;
  }
  CHECK(bad == 0, "f32 SUM of %zu noisy values: %d off the double sum", n, bad);
  free(f);
  free(k);
}

static void test_reduce_scatter(lamp_comm *c, int rank, size_t n) {
  size_t all = n * (size_t)world;
  float *send = xmalloc(all * sizeof *send), *recv = xmalloc(n * sizeof *recv);
  for (size_t j = 0; j < all; j++) send[j] = (float)(rank + 1) * (float)(j % 4099);
  OK(lamp_comm_reduce_scatter(c, send, recv, n, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad += recv[i] != (float)(world * (world + 1) / 2) * (float)((rank * n + i) % 4099);
  CHECK(bad == 0, "reduce_scatter of %zu: %d wrong", n, bad);

  for (size_t j = 0; j < all; j++) send[j] = small_int(rank, j);
  OK(lamp_comm_reduce_scatter(c, send, send, n, LAMP_F32, LAMP_REDUCE_MAX, LAMP_CPU));
  bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int r = 0; r < world; r++) want = fmaxf(want, small_int(r, (size_t)rank * n + i));
    bad += send[i] != want;
  }
  CHECK(bad == 0, "reduce_scatter MAX in place of %zu: %d wrong", n, bad);
  free(send);
  free(recv);
}

static void test_all_gather(lamp_comm *c, int rank, size_t n) {
  size_t all = n * (size_t)world;
  int32_t *mine = xmalloc(n * sizeof *mine), *recv = xmalloc(all * sizeof *recv);
  for (size_t i = 0; i < n; i++) mine[i] = (int32_t)(i * 3) + 7919 * rank;
  for (size_t j = 0; j < all; j++) recv[j] = -1;
  OK(lamp_comm_all_gather(c, mine, recv, n, LAMP_I32, LAMP_CPU));
  int bad = 0;
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != (int32_t)(i * 3) + 7919 * r;
  CHECK(bad == 0, "all_gather of %zu: %d wrong", n, bad);

  for (size_t j = 0; j < all; j++) recv[j] = -1;
  for (size_t i = 0; i < n; i++) recv[(size_t)rank * n + i] = (int32_t)i - 5 * rank;
  OK(lamp_comm_all_gather(c, recv + (size_t)rank * n, recv, n, LAMP_I32, LAMP_CPU));
  bad = 0;
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != (int32_t)i - 5 * r;
  CHECK(bad == 0, "all_gather in place of %zu: %d wrong", n, bad);
  free(mine);
  free(recv);
}

/* Three requests, two of them rings, each rank waiting for them in its own order. */
static void test_start_wait(lamp_comm *c, int rank) {
  enum { REQS = 3 };
  const size_t sizes[REQS] = {(1u << 18) + 1, 100, 70001};
  float *buf[REQS];
  lamp_request *req[REQS];
  for (int q = 0; q < REQS; q++) {
    buf[q] = xmalloc(sizes[q] * sizeof *buf[q]);
    for (size_t i = 0; i < sizes[q]; i++) buf[q][i] = (float)((q + 1) * (rank + 1)) + (float)(i % 77);
    OK(lamp_comm_all_reduce_start(c, buf[q], sizes[q], LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, &req[q]));
  }
  for (int w = 0; w < REQS; w++) OK(lamp_comm_wait(c, req[(rank + REQS - w) % REQS]));
  int bad = 0;
  for (int q = 0; q < REQS; q++) {
    for (size_t i = 0; i < sizes[q]; i++)
      bad += buf[q][i] != (float)((q + 1) * world * (world + 1) / 2) + (float)world * (float)(i % 77);
    free(buf[q]);
  }
  CHECK(bad == 0, "three requests waited in rank %d's order: %d wrong", rank, bad);
}

int main(void) {
  lamp_comm *c = NULL;
  OK(lamp_comm_open(&c, "mpi", NULL, 0));
  int rank = lamp_comm_rank(c);
  check_rank = rank;
  world = lamp_comm_size(c);
  for (size_t t = 0; t < N_COUNTS; t++) {
    test_all_reduce(c, rank, counts[t]);
    test_reduce_scatter(c, rank, counts[t]);
    test_all_gather(c, rank, counts[t]);
  }
  test_start_wait(c, rank);
  int status = mpi_check_finish(c, "test_mpi_ring");
  lamp_comm_close(c);
  return status;
}
