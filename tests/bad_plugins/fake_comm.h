/*
** Shared by counting_comm.c and recording_comm.c (valid test communicators, not malformed ones):
** define FAKE_COMM_NAME and FAKE_COMM_NONBLOCKING (0 or 1), then include this file.
** The trainer takes its data-parallel path (size() > 1): all_reduce(SUM) multiplies an fp32
** buffer by 2, as if an identical second rank had contributed the same values, so a run
** through it must equal a single-rank run after the trainer's division by N = 2. Each
** all_reduce logs "all_reduce N: COUNT elements" (N counts this object's calls from 1) at
** INFO through host->log, which a test reads through lamp_log_set_sink. MAX and MIN of two
** identical copies change nothing; broadcast from rank 0 and barrier have nothing to do.
** It probes 0 ("test communicator"), so `comm = "auto"` never picks it.
** With FAKE_COMM_NONBLOCKING it also has all_reduce_start/wait, logged as "start N: COUNT
** elements at PTR" and "wait PTR", so a test sees when each bucket's reduction began.
*/
#ifndef FAKE_COMM_H
#define FAKE_COMM_H
#include <stdio.h>
#include <stdlib.h>

#include "lamp/plugin.h"

typedef struct counting {
  const lamp_host *host;
  lamp_ctx *ctx;
  unsigned long calls;
} counting;

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test communicator, never picked by auto");
  return 0;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  (void)p;
  counting *c = calloc(1, sizeof *c);
  if (c == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  c->host = h;
  c->ctx = ctx;
  *comm = c;
  return LAMP_OK;
}

static void destroy(void *comm) { free(comm); }
static int rank(void *comm) { return (void)comm, 0; }
static int size(void *comm) { return (void)comm, 2; }

static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype,
                              lamp_reduce_op op, lamp_device device) {
  counting *c = comm;
  if (dtype != LAMP_F32 || device != LAMP_CPU)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce: f32 on the cpu only");
  c->calls++;
  c->host->log(LAMP_LOG_INFO, FAKE_COMM_NAME, "all_reduce %lu: %zu elements", c->calls, count);
  if (op == LAMP_REDUCE_SUM) {
    float *x = buf;
    for (size_t i = 0; i < count; i++) x[i] *= 2.0f; /* exact: a power of two */
  }
  return LAMP_OK;
}

static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                             lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)root, (void)device;
  return LAMP_OK;
}

static lamp_status barrier(void *comm) { return (void)comm, LAMP_OK; }

/* Both "ranks" hold the same values: rank 0's block and rank 1's block are copies. */
static lamp_status all_gather(void *comm, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype,
                              lamp_device device) {
  counting *c = comm;
  size_t bytes = count * (dtype == LAMP_F16 || dtype == LAMP_BF16 ? 2u : 4u);
  if (device != LAMP_CPU) return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_gather: cpu only");
  c->host->log(LAMP_LOG_INFO, FAKE_COMM_NAME, "all_gather: %zu elements of %zu bytes", count, bytes / count);
  for (int r = 0; r < 2; r++)
    for (size_t i = 0; i < bytes; i++) ((unsigned char *)recvbuf)[(size_t)r * bytes + i] = ((const unsigned char *)sendbuf)[i];
  return LAMP_OK;
}

#if FAKE_COMM_NONBLOCKING
/* Non-blocking: start does the reduction at once and logs it; wait logs the completion. The
   request is the buffer itself (the trainer only hands it back to wait). */
static lamp_status all_reduce_start(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                    lamp_device device, lamp_request **req) {
  counting *c = comm;
  c->host->log(LAMP_LOG_INFO, FAKE_COMM_NAME, "start %lu: %zu elements at %p", c->calls + 1, count, buf);
  lamp_status st = all_reduce(comm, buf, count, dtype, op, device);
  *req = (lamp_request *)buf;
  return st;
}

static lamp_status wait_request(void *comm, lamp_request *req) {
  counting *c = comm;
  c->host->log(LAMP_LOG_INFO, FAKE_COMM_NAME, "wait %p", (void *)req);
  return LAMP_OK;
}
#endif

static const lamp_comm_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, FAKE_COMM_NAME, "0.1",
                               "test communicator: rank 0 of 2, SUM doubles, calls logged"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .probe = probe},
    .create = create,
    .destroy = destroy,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .barrier = barrier,
    .all_gather = all_gather,
#if FAKE_COMM_NONBLOCKING
    .all_reduce_start = all_reduce_start,
    .wait = wait_request,
#endif
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}

#endif
