/*
** A lamp_bootstrap over MPI for the tests that hand one to a communicator directly
** (nccl_bootstrap_prog.c), standing in for the core's: every call is the non-blocking MPI call
** polled against its timeout, LAMP_ERR_REMOTE when the timeout passes. Local ranks come from
** MPI_COMM_TYPE_SHARED. It also records what the communicator asked of it.
*/
#ifndef LAMP_TEST_MPI_BOOTSTRAP_H
#define LAMP_TEST_MPI_BOOTSTRAP_H

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "lamp/comm.h"

typedef struct mpi_boot {
  MPI_Comm comm;
  int broadcasts, all_gathers, barriers;
  int last_root;
  size_t last_broadcast_bytes;
  unsigned char broadcast_seen[256]; /* the first 256 bytes of the latest broadcast, after it */
} mpi_boot;

static inline double mpi_boot_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline lamp_status mpi_boot_wait(MPI_Request *req, double timeout_s, const char *what) {
  double deadline = mpi_boot_now() + timeout_s;
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return LAMP_ERR_REMOTE;
    if (done) return LAMP_OK;
    if (mpi_boot_now() > deadline) {
      fprintf(stderr, "test bootstrap: %s timed out after %g s\n", what, timeout_s);
      return LAMP_ERR_REMOTE;
    }
    struct timespec nap = {0, 100000L};
    nanosleep(&nap, NULL);
  }
}

static inline lamp_status mpi_boot_broadcast(const lamp_bootstrap *b, void *buf, size_t bytes, int root,
                                             double timeout_s) {
  mpi_boot *m = b->impl;
  MPI_Request req;
  m->broadcasts++;
  m->last_root = root;
  m->last_broadcast_bytes = bytes;
  if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, m->comm, &req) != MPI_SUCCESS) return LAMP_ERR_REMOTE;
  lamp_status st = mpi_boot_wait(&req, timeout_s, "broadcast");
  if (st == LAMP_OK) memcpy(m->broadcast_seen, buf, bytes < sizeof m->broadcast_seen ? bytes : sizeof m->broadcast_seen);
  return st;
}

static inline lamp_status mpi_boot_all_gather(const lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                                              double timeout_s) {
  mpi_boot *m = b->impl;
  MPI_Request req;
  m->all_gathers++;
  if (MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, m->comm, &req) != MPI_SUCCESS)
    return LAMP_ERR_REMOTE;
  return mpi_boot_wait(&req, timeout_s, "all_gather");
}

static inline lamp_status mpi_boot_barrier(const lamp_bootstrap *b, double timeout_s) {
  mpi_boot *m = b->impl;
  MPI_Request req;
  m->barriers++;
  if (MPI_Ibarrier(m->comm, &req) != MPI_SUCCESS) return LAMP_ERR_REMOTE;
  return mpi_boot_wait(&req, timeout_s, "barrier");
}

/* MPI must be initialised. */
static inline lamp_bootstrap mpi_boot_make(mpi_boot *m) {
  memset(m, 0, sizeof *m);
  MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  lamp_bootstrap b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  MPI_Comm_rank(m->comm, &b.rank);
  MPI_Comm_size(m->comm, &b.size);
  MPI_Comm local;
  MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, b.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &b.local_rank);
  MPI_Comm_size(local, &b.local_size);
  MPI_Comm_free(&local);
  b.impl = m;
  b.broadcast = mpi_boot_broadcast;
  b.all_gather = mpi_boot_all_gather;
  b.barrier = mpi_boot_barrier;
  return b;
}

#endif
