/*
** Helpers for the multi-rank tests (tests/mpi/test_*.c), which run under
** `mpirun -n 2` with the real mpi communicator plugin. cmocka is not used: a failed
** assertion there jumps out of the test, and the ranks would then disagree on which
** collective comes next and hang. Here a failed CHECK is counted and execution goes on, so
** every rank reaches every collective; a failed lamp call (OK) is fatal: the rank exits 1 and
** mpirun ends the job.
**   - CHECK(cond, fmt, ...)    counted check, message with the rank on failure
**   - OK(expr)                 a lamp call that must succeed
**   - same_on_all_ranks        do the bytes agree across ranks? (every rank gets the verdict)
**   - all_gather_f32           all-gather through the communicator (broadcasts if it lacks one)
**   - mpi_check_finish         sums the failures over ranks, prints "N passed, N failed"
*/
#ifndef LAMP_TEST_MPI_CHECK_H
#define LAMP_TEST_MPI_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/instance.h"

static int check_rank;
static int checks_passed, checks_failed;

static inline void check_report(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    checks_passed++;
    return;
  }
  checks_failed++;
  fprintf(stderr, "rank %d: FAILED at %s:%d: ", check_rank, file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
}

#define CHECK(cond, ...) check_report((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

#define OK(expr)                                                                                      \
  do {                                                                                                \
    lamp_status st_ = (expr);                                                                         \
    if (st_ != LAMP_OK) {                                                                             \
      fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", check_rank, __FILE__, __LINE__, #expr,        \
              lamp_last_error());                                                                     \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", check_rank);
    exit(1);
  }
  return p;
}

/* recv[world * count] = every rank's send[count], in rank order. */
static inline void all_gather_f32(lamp_comm *c, const float *send, float *recv, size_t count) {
  int world = lamp_comm_size(c);
  if (lamp_comm_supports(c, "all_gather")) {
    OK(lamp_comm_all_gather(c, send, recv, count, LAMP_F32, LAMP_CPU));
    return;
  }
  for (int r = 0; r < world; r++) {
    float *slot = recv + (size_t)r * count;
    if (r == lamp_comm_rank(c)) memcpy(slot, send, count * sizeof *send);
    OK(lamp_comm_broadcast(c, slot, count, LAMP_F32, r, LAMP_CPU));
  }
}

/* 1 on every rank when `bytes` holds the same n bytes on every rank, else 0 on every rank. */
static inline int same_on_all_ranks(lamp_comm *c, const void *bytes, size_t n) {
  int world = lamp_comm_size(c);
  size_t words = (n + sizeof(float) - 1) / sizeof(float);
  float *mine = xmalloc(words * sizeof(float)), *all = xmalloc((size_t)world * words * sizeof(float));
  memset(mine, 0, words * sizeof(float));
  memcpy(mine, bytes, n);
  all_gather_f32(c, mine, all, words);
  int same = 1;
  for (int r = 1; r < world; r++) same &= memcmp(all, all + (size_t)r * words, words * sizeof(float)) == 0;
  free(mine);
  free(all);
  return same;
}

/* Prints the totals over all ranks (rank 0) and returns main's exit status, equal on all ranks. */
static inline int mpi_check_finish(lamp_comm *c, const char *name) {
  float counts[2] = {(float)checks_passed, (float)checks_failed};
  OK(lamp_comm_all_reduce(c, counts, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  if (check_rank == 0) {
    printf("%s: %d ranks: %.0f passed, %.0f failed\n", name, lamp_comm_size(c), counts[0], counts[1]);
    fflush(stdout);
  }
  return counts[1] == 0.0f && counts[0] > 0.0f ? 0 : 1;
}

#endif
