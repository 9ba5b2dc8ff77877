/*
** Valid (ABI 1.3): a communicator that lives entirely on the core's bootstrap, as the nccl plugin
** starts from it. Its create refuses ("bootcomm: created without the bootstrap"), so a test
** sees that the core calls create_with_bootstrap instead. There it checks what the bootstrap
** says (0 <= local_rank < local_size <= size; with option expect_one_host, local_rank == rank and
** local_size == size), then proves the channel: an all_gather of 4 bytes per rank (rank r sends
** 7r + 1), a broadcast of "token from rank S-1" from the last rank, and a barrier; a wrong byte
** fails create with a message naming it. Option skip_rank makes that rank leave out the
** exchange, so the others wait for it until their deadline (option call_timeout, else timeout:
** seconds; timeout also bounds the core's opening exchange).
**
** Afterwards it is a slow but real communicator for host memory: all_reduce is an all_gather
** through the bootstrap and a reduction in rank order (f32 and i32; SUM, MAX, MIN), so every
** rank gets the same bits; broadcast, barrier and all_gather are the bootstrap's. It also has the
** stream-ordered calls for the wrappers' tests: all_reduce_enqueue reduces at once and logs
** "enqueue N: COUNT elements on stream PTR", wait_stream logs "wait_stream N on stream PTR"
** and poll is LAMP_OK until a bootstrap call failed. A failed bootstrap call is returned as it
** is, without set_error, as comm.h asks.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lamp/plugin.h"

#define WHO "bootcomm"

enum { P_TIMEOUT, P_CALL_TIMEOUT, P_SKIP_RANK, P_EXPECT_ONE_HOST };

static const lamp_param params[] = {
    {"timeout", 300.0, 0.01, 604800.0, "seconds the core's opening exchange and each call may wait"},
    {"call_timeout", 0.0, 0.0, 604800.0, "seconds each of its own bootstrap calls may wait (0: timeout)"},
    {"skip_rank", -1.0, -1.0, 1e6, "this rank leaves out create's exchange (-1: none)"},
    {"expect_one_host", 0.0, 0.0, 1.0, "every rank is on this host"},
};

typedef struct bootcomm {
  const lamp_host *host;
  lamp_ctx *ctx;
  const lamp_bootstrap *boot;
  double timeout;
  unsigned long enqueued;
  int broken;
} bootcomm;

struct lamp_request {
  unsigned long n;
  void *stream;
};

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test communicator over the bootstrap, never picked by auto");
  return 0;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  (void)p, (void)comm;
  return h->set_error(ctx, LAMP_ERR_INTERNAL, "created without the bootstrap");
}

/* A bootstrap call that failed: the core has its message; the communicator is unusable now. */
static lamp_status boot_status(bootcomm *c, lamp_status st) {
  if (st != LAMP_OK) c->broken = 1;
  return st;
}

static lamp_status check_places(bootcomm *c, int expect_one_host) {
  const lamp_bootstrap *b = c->boot;
  if (b->struct_size < sizeof *b)
    return c->host->set_error(c->ctx, LAMP_ERR_INTERNAL, "bootstrap of %u bytes, expected %zu",
                              (unsigned)b->struct_size, sizeof *b);
  if (!(b->size >= 1 && b->rank >= 0 && b->rank < b->size && b->local_rank >= 0 && b->local_rank < b->local_size &&
        b->local_size <= b->size))
    return c->host->set_error(c->ctx, LAMP_ERR_INTERNAL, "bootstrap says rank %d of %d, local %d of %d", b->rank,
                              b->size, b->local_rank, b->local_size);
  if (expect_one_host && (b->local_rank != b->rank || b->local_size != b->size))
    return c->host->set_error(c->ctx, LAMP_ERR_INTERNAL,
                              "one host: expected local rank %d of %d, the bootstrap says %d of %d", b->rank, b->size,
                              b->local_rank, b->local_size);
  return LAMP_OK;
}

/* all_gather, broadcast and barrier, each checked byte for byte. */
static lamp_status exchange(bootcomm *c) {
  const lamp_bootstrap *b = c->boot;
  uint32_t mine = 7u * (uint32_t)b->rank + 1u;
  uint32_t *all = calloc((size_t)b->size, sizeof *all);
  if (all == NULL) return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "out of memory");
  lamp_status st = boot_status(c, b->all_gather(b, &mine, all, sizeof mine, c->timeout));
  for (int r = 0; st == LAMP_OK && r < b->size; r++)
    if (all[r] != 7u * (uint32_t)r + 1u)
      st = c->host->set_error(c->ctx, LAMP_ERR_INTERNAL, "bootstrap all_gather gave %u from rank %d, expected %u",
                              (unsigned)all[r], r, 7u * (unsigned)r + 1u);
  free(all);
  char token[32] = "", expected[32] = ""; /* all 32 bytes travel and are compared */
  snprintf(expected, sizeof expected, "token from rank %d", b->size - 1);
  if (b->rank == b->size - 1) memcpy(token, expected, sizeof token);
  if (st == LAMP_OK) st = boot_status(c, b->broadcast(b, token, sizeof token, b->size - 1, c->timeout));
  if (st == LAMP_OK && memcmp(token, expected, sizeof token) != 0)
    st = c->host->set_error(c->ctx, LAMP_ERR_INTERNAL, "bootstrap broadcast gave '%.31s', expected '%s'", token,
                            expected);
  if (st == LAMP_OK) st = boot_status(c, b->barrier(b, c->timeout));
  return st;
}

static lamp_status create_with_bootstrap(const lamp_host *h, lamp_ctx *ctx, const double *p,
                                         const lamp_bootstrap *boot, void **comm) {
  bootcomm *c = calloc(1, sizeof *c);
  if (c == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  c->host = h;
  c->ctx = ctx;
  c->boot = boot;
  c->timeout = p[P_CALL_TIMEOUT] > 0.0 ? p[P_CALL_TIMEOUT] : p[P_TIMEOUT];
  lamp_status st = check_places(c, p[P_EXPECT_ONE_HOST] != 0.0);
  if (st == LAMP_OK && (int)p[P_SKIP_RANK] != boot->rank) st = exchange(c);
  if (st != LAMP_OK) {
    free(c);
    return st;
  }
  h->log(LAMP_LOG_INFO, WHO, "rank %d of %d, local %d of %d", boot->rank, boot->size, boot->local_rank,
         boot->local_size);
  *comm = c;
  return LAMP_OK;
}

static void destroy(void *comm) { free(comm); }
static int rank(void *comm) { return ((bootcomm *)comm)->boot->rank; }
static int size(void *comm) { return ((bootcomm *)comm)->boot->size; }

static size_t elem_size(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32: case LAMP_I32: return 4;
  case LAMP_F16: case LAMP_BF16: return 2;
  case LAMP_U8: return 1;
  default: return 0;
  }
}

static void reduce_into(void *out, const void *in, size_t count, lamp_dtype dtype, lamp_reduce_op op) {
  for (size_t i = 0; i < count; i++) {
    if (dtype == LAMP_F32) {
      float *o = out, v = ((const float *)in)[i];
      o[i] = op == LAMP_REDUCE_SUM ? o[i] + v : op == LAMP_REDUCE_MAX ? (v > o[i] ? v : o[i]) : (v < o[i] ? v : o[i]);
    } else {
      int32_t *o = out, v = ((const int32_t *)in)[i];
      o[i] = op == LAMP_REDUCE_SUM ? o[i] + v : op == LAMP_REDUCE_MAX ? (v > o[i] ? v : o[i]) : (v < o[i] ? v : o[i]);
    }
  }
}

static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                              lamp_device device) {
  bootcomm *c = comm;
  const lamp_bootstrap *b = c->boot;
  if (device != LAMP_CPU || (dtype != LAMP_F32 && dtype != LAMP_I32))
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce: f32 or i32 in host memory only");
  size_t bytes = count * 4;
  char *all = malloc(bytes * (size_t)b->size + 1);
  if (all == NULL) return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "out of memory");
  lamp_status st = boot_status(c, b->all_gather(b, buf, all, bytes, c->timeout));
  if (st == LAMP_OK) {
    memcpy(buf, all, bytes);
    for (int r = 1; r < b->size; r++) reduce_into(buf, all + (size_t)r * bytes, count, dtype, op);
  }
  free(all);
  return st;
}

static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root, lamp_device device) {
  bootcomm *c = comm;
  if (device != LAMP_CPU) return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "broadcast: host memory only");
  return boot_status(c, c->boot->broadcast(c->boot, buf, count * elem_size(dtype), root, c->timeout));
}

static lamp_status barrier(void *comm) {
  bootcomm *c = comm;
  return boot_status(c, c->boot->barrier(c->boot, c->timeout));
}

static lamp_status all_gather(void *comm, const void *send, void *recv, size_t count, lamp_dtype dtype,
                              lamp_device device) {
  bootcomm *c = comm;
  if (device != LAMP_CPU) return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_gather: host memory only");
  return boot_status(c, c->boot->all_gather(c->boot, send, recv, count * elem_size(dtype), c->timeout));
}

static lamp_status all_reduce_enqueue(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                      lamp_device device, void *stream, lamp_request **req) {
  bootcomm *c = comm;
  *req = malloc(sizeof **req);
  if (*req == NULL) return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "out of memory");
  (*req)->n = ++c->enqueued;
  (*req)->stream = stream;
  c->host->log(LAMP_LOG_INFO, WHO, "enqueue %lu: %zu elements on stream %p", (*req)->n, count, stream);
  lamp_status st = all_reduce(comm, buf, count, dtype, op, device);
  if (st != LAMP_OK) {
    free(*req);
    *req = NULL;
  }
  return st;
}

static lamp_status wait_stream(void *comm, lamp_request *req, void *stream) {
  bootcomm *c = comm;
  c->host->log(LAMP_LOG_INFO, WHO, "wait_stream %lu on stream %p", req->n, stream);
  free(req);
  return LAMP_OK;
}

static lamp_status poll_comm(void *comm) {
  bootcomm *c = comm;
  if (!c->broken) return LAMP_OK;
  return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "a bootstrap call failed earlier");
}

static const lamp_comm_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "bootcomm", "0.1",
                               "test communicator over the core's bootstrap"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32) | LAMP_BIT(LAMP_I32),
            .params = params, .n_params = sizeof params / sizeof params[0], .probe = probe},
    .create = create,
    .destroy = destroy,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .barrier = barrier,
    .all_gather = all_gather,
    .create_with_bootstrap = create_with_bootstrap,
    .all_reduce_enqueue = all_reduce_enqueue,
    .wait_stream = wait_stream,
    .poll = poll_comm,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
