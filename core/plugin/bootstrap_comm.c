/*
** The bootstrap over a communicator the core opened itself (the mpi plugin, under mpirun or
** lamp-run): bytes travel as LAMP_U8 elements in host memory through its broadcast, all_gather
** and barrier. That communicator's own deadline bounds each call (for mpi, its timeout option,
** else LAMP_COMM_TIMEOUT, else 300 s), not the timeout_s of the call: it is fixed when the
** communicator is created. A failure is LAMP_ERR_REMOTE naming the call and the communicator's
** own report, which names the ranks it knows to be missing.
*/
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "plugin/bootstrap.h"
#include "plugin/instance.h"

/* The communicator's counts are elements; the mpi plugin takes at most INT_MAX per call. */
#define MAX_BYTES ((size_t)INT_MAX)

static lamp_status too_big(lamp_comm *c, const char *op, unsigned long seq, size_t bytes) {
  return lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: %s %lu over %s: %zu bytes, at most %zu per call", op, seq,
                    lamp_comm_handle(c)->desc->name, bytes, MAX_BYTES);
}

/* The communicator recorded its message: "bootstrap: broadcast 3 over mpi failed: mpi: ...". */
static lamp_status failed(lamp_comm *c, const char *op, unsigned long seq, lamp_status st) {
  if (st == LAMP_OK) return LAMP_OK;
  return lamp_error_context(LAMP_ERR_REMOTE, "bootstrap: %s %lu over %s failed (rank %d of %d)", op, seq,
                            lamp_comm_handle(c)->desc->name, lamp_comm_rank(c), lamp_comm_size(c));
}

static lamp_status comm_broadcast(void *state, unsigned long seq, void *buf, size_t bytes, int root,
                                  double timeout_s) {
  lamp_comm *c = state;
  (void)timeout_s;
  if (bytes > MAX_BYTES) return too_big(c, "broadcast", seq, bytes);
  if (bytes == 0) return LAMP_OK;
  return failed(c, "broadcast", seq, lamp_comm_broadcast(c, buf, bytes, LAMP_U8, root, LAMP_CPU));
}

static lamp_status comm_all_gather(void *state, unsigned long seq, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  lamp_comm *c = state;
  (void)timeout_s;
  if (bytes > MAX_BYTES) return too_big(c, "all_gather", seq, bytes);
  if (bytes == 0) return LAMP_OK;
  return failed(c, "all_gather", seq, lamp_comm_all_gather(c, send, recv, bytes, LAMP_U8, LAMP_CPU));
}

static lamp_status comm_barrier(void *state, unsigned long seq, double timeout_s) {
  (void)timeout_s;
  return failed(state, "barrier", seq, lamp_comm_barrier(state));
}

static void comm_close(void *state) { lamp_comm_close(state); }

lamp_status lamp_boot_comm_open(lamp_boot_transport *t, lamp_comm *comm) {
  const char *name = lamp_comm_handle(comm)->desc->name;
  if (!lamp_comm_supports(comm, "all_gather")) {
    lamp_comm_close(comm);
    return lamp_error(LAMP_ERR_UNSUPPORTED, "bootstrap: the %s communicator has no all_gather", name);
  }
  snprintf(t->name, sizeof t->name, "%s", name);
  t->rank = lamp_comm_rank(comm);
  t->size = lamp_comm_size(comm);
  t->close_waits = 1; /* the mpi plugin finalises MPI when its last communicator goes */
  t->state = comm;
  t->broadcast = comm_broadcast;
  t->all_gather = comm_all_gather;
  t->barrier = comm_barrier;
  t->close = comm_close;
  return LAMP_OK;
}
