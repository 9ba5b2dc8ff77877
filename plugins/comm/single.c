/*
** single: the communicator of a one-process run. Rank 0 of 1: every collective is already
** complete, so each operation only checks its arguments (a bug caught here is a bug caught
** before it meets a real communicator). The timeout is accepted like every communicator's,
** and never needed.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lamp/plugin.h"

typedef struct single {
  const lamp_host *host;
  lamp_ctx *ctx;
  double timeout; /* seconds */
} single;

static const lamp_param single_params[] = {
    {"timeout", 1800.0, 1.0, 604800.0, "seconds a collective may wait before failing"},
};

/* The one request a size-1 all_reduce_start hands out: it is complete at birth. */
static char completed_request;

static int single_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "always available");
  return 1;
}

static lamp_status single_create(const lamp_host *h, lamp_ctx *ctx, const double *params,
                                 void **comm) {
  single *s = calloc(1, sizeof *s);
  if (s == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->host = h;
  s->ctx = ctx;
  s->timeout = params[0];
  *comm = s;
  return LAMP_OK;
}

static void single_destroy(void *comm) { free(comm); }

static int single_rank(void *comm) {
  (void)comm;
  return 0;
}

static int single_size(void *comm) {
  (void)comm;
  return 1;
}

/* ---- argument checks ------------------------------------------------------------------------- */

static size_t dtype_size(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32:
  case LAMP_I32: return 4;
  case LAMP_F16:
  case LAMP_BF16: return 2;
  case LAMP_U8: return 1;
  default: return 0;
  }
}

static lamp_status check_buffer(single *s, const char *op, const void *buf, size_t count,
                                lamp_dtype dtype, lamp_device device) {
  if (dtype_size(dtype) == 0)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown dtype %d", op, (int)dtype);
  if ((unsigned)device >= LAMP_DEVICE_COUNT)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown device %d", op,
                              (int)device);
  if (buf == NULL && count > 0)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", op,
                              count);
  return LAMP_OK;
}

static lamp_status check_op(single *s, const char *op, lamp_reduce_op reduce) {
  if (reduce == LAMP_REDUCE_SUM || reduce == LAMP_REDUCE_MAX || reduce == LAMP_REDUCE_MIN)
    return LAMP_OK;
  return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown reduce op %d", op,
                            (int)reduce);
}

static lamp_status single_all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                     lamp_reduce_op op, lamp_device device) {
  single *s = comm;
  lamp_status st = check_buffer(s, "all_reduce", buf, count, dtype, device);
  return st != LAMP_OK ? st : check_op(s, "all_reduce", op);
}

static lamp_status single_broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                                    lamp_device device) {
  single *s = comm;
  lamp_status st = check_buffer(s, "broadcast", buf, count, dtype, device);
  if (st != LAMP_OK || root == 0) return st;
  return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG,
                            "broadcast: root %d out of range for 1 rank", root);
}

static lamp_status single_barrier(void *comm) {
  (void)comm;
  return LAMP_OK;
}

static lamp_status single_all_reduce_start(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                           lamp_reduce_op op, lamp_device device,
                                           lamp_request **req) {
  single *s = comm;
  lamp_status st = single_all_reduce(comm, buf, count, dtype, op, device);
  if (st == LAMP_OK && req == NULL)
    st = s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "all_reduce_start: NULL request");
  if (st == LAMP_OK) *req = (lamp_request *)(void *)&completed_request;
  return st;
}

static lamp_status single_wait(void *comm, lamp_request *req) {
  single *s = comm;
  if (req == (lamp_request *)(void *)&completed_request) return LAMP_OK;
  return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG,
                            "wait: not a request of this communicator");
}

/* With one rank the result is the input: in place nothing moves; otherwise a host copy. */
static lamp_status copy_block(single *s, const char *op, const void *sendbuf, void *recvbuf,
                              size_t count, lamp_dtype dtype, lamp_device device) {
  lamp_status st = check_buffer(s, op, sendbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_buffer(s, op, recvbuf, count, dtype, device);
  if (st != LAMP_OK || sendbuf == recvbuf || count == 0) return st;
  if (device != LAMP_CPU)
    return s->host->set_error(s->ctx, LAMP_ERR_UNSUPPORTED,
                              "%s: out-of-place copies are cpu only (use the same buffer)", op);
  memmove(recvbuf, sendbuf, count * dtype_size(dtype));
  return LAMP_OK;
}

static lamp_status single_all_gather(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                                     lamp_dtype dtype, lamp_device device) {
  return copy_block(comm, "all_gather", sendbuf, recvbuf, count, dtype, device);
}

static lamp_status single_reduce_scatter(void *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                         lamp_device device) {
  lamp_status st = check_op(comm, "reduce_scatter", op);
  return st != LAMP_OK ? st
                       : copy_block(comm, "reduce_scatter", sendbuf, recvbuf, count, dtype, device);
}

static const lamp_comm_v1 single_comm = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "single", "1.0",
                               "one process: rank 0 of 1, collectives are no-ops"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA),
            .dtypes = LAMP_BIT(LAMP_F32) | LAMP_BIT(LAMP_F16) | LAMP_BIT(LAMP_BF16) |
                      LAMP_BIT(LAMP_I32) | LAMP_BIT(LAMP_U8),
            .params = single_params, .n_params = sizeof single_params / sizeof single_params[0],
            .probe = single_probe},
    .create = single_create,
    .destroy = single_destroy,
    .rank = single_rank,
    .size = single_size,
    .all_reduce = single_all_reduce,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .all_reduce_start = single_all_reduce_start,
    .wait = single_wait,
    .all_gather = single_all_gather,
    .reduce_scatter = single_reduce_scatter,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &single_comm.hdr;
}
