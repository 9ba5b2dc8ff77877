/*
** Valid, for the stream-ordered bucket tests (test_stream_buckets): a communicator with the ABI
** 1.3 stream operations, on the simulated device. The sim reaches plugins as the CPU with host
** views; its stream (core/backend/sim/sim_stream.h) queues host functions in order with its
** work, so this plugin's all_reduce_enqueue queues the reduction itself there, the way NCCL
** queues its kernel on a CUDA stream.
**
** Like fake_comm.h it says rank 0 of `size` (option, 1 or 2, default 2): a SUM over 2 doubles
** the buffer, as if an identical second rank had contributed the same values, so a run through
** it equals a single-rank run after the trainer's division by N. It logs at INFO through
** host->log, which a test reads through lamp_log_set_sink:
**   "enqueue N: COUNT elements at PTR"  on the caller's thread, when all_reduce_enqueue queues #N
**   "reduce N: COUNT elements at PTR"   on the device's worker, when #N runs (PTR: the host view)
**   "wait N"                            on the worker, where wait_stream's wait for #N runs
** Option fail_at = N (0: never) simulates a collective that times out: #N reduces nothing and
** marks the communicator broken, so poll, and every call after it, fail naming #N and the rank.
** Off a stream (the CPU) it has the blocking all_reduce only, logged "all_reduce: COUNT elements".
** It probes 0, so `comm = "auto"` never picks it.
*/
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/sim/sim_stream.h"
#include "lamp/plugin.h"

#define WHO "stream_comm"

typedef struct stream_comm {
  const lamp_host *host;
  lamp_ctx *ctx;
  int size;
  unsigned long fail_at;
  unsigned long enqueued; /* all_reduce_enqueue calls so far: #N is the N-th */
  atomic_ulong failed;    /* the collective that timed out, set on the worker; 0: none */
  atomic_int in_flight;   /* host functions queued and not yet run: destroy waits for them */
} stream_comm;

struct lamp_request {
  stream_comm *c;
  unsigned long seq;
  float *buf;
  size_t count;
  lamp_reduce_op op;
};

static const lamp_param params[] = {
    {"size", 2, 1, 2, "ranks this communicator says the run has"},
    {"fail_at", 0, 0, 1e9, "the enqueued all-reduce that times out (0: none)"},
};

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test communicator, never picked by auto");
  return 0;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  stream_comm *c = calloc(1, sizeof *c);
  if (c == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  c->host = h;
  c->ctx = ctx;
  c->size = (int)p[0];
  c->fail_at = (unsigned long)p[1];
  *comm = c;
  return LAMP_OK;
}

/* The queued functions still hold c: wait until the device has run them. */
static void destroy(void *comm) {
  stream_comm *c = comm;
  if (c == NULL) return;
  struct timespec nap = {0, 100000};
  while (atomic_load(&c->in_flight) > 0) nanosleep(&nap, NULL);
  free(c);
}

static int rank(void *comm) { return (void)comm, 0; }
static int size(void *comm) { return ((stream_comm *)comm)->size; }

/* SUM over two identical ranks doubles (exact: a power of two); MAX and MIN change nothing. */
static void reduce(const stream_comm *c, float *x, size_t count, lamp_reduce_op op) {
  if (c->size == 2 && op == LAMP_REDUCE_SUM)
    for (size_t i = 0; i < count; i++) x[i] *= 2.0f;
}

static lamp_status broken(stream_comm *c) {
  unsigned long n = atomic_load(&c->failed);
  if (n == 0) return LAMP_OK;
  return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "rank 0: all_reduce #%lu timed out (simulated: fail_at = %lu)",
                            n, c->fail_at);
}

static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                              lamp_device device) {
  stream_comm *c = comm;
  lamp_status st = broken(c);
  if (st != LAMP_OK) return st;
  if (dtype != LAMP_F32 || device != LAMP_CPU)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce: f32 on the cpu only");
  c->host->log(LAMP_LOG_INFO, WHO, "all_reduce: %zu elements", count);
  reduce(c, buf, count, op);
  return LAMP_OK;
}

static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root, lamp_device device) {
  (void)buf, (void)count, (void)dtype, (void)root, (void)device;
  return broken(comm);
}

static lamp_status barrier(void *comm) { return broken(comm); }

/* ---- on the device's worker ------------------------------------------------------------------ */

static void run_reduce(void *arg) {
  lamp_request *r = arg;
  stream_comm *c = r->c;
  if (r->seq == c->fail_at) {
    unsigned long none = 0;
    atomic_compare_exchange_strong(&c->failed, &none, r->seq);
  } else {
    reduce(c, r->buf, r->count, r->op);
    c->host->log(LAMP_LOG_INFO, WHO, "reduce %lu: %zu elements at %p", r->seq, r->count, (void *)r->buf);
  }
  atomic_fetch_sub(&c->in_flight, 1);
}

static void run_wait(void *arg) {
  lamp_request *r = arg;
  stream_comm *c = r->c;
  c->host->log(LAMP_LOG_INFO, WHO, "wait %lu", r->seq);
  free(r);
  atomic_fetch_sub(&c->in_flight, 1);
}

static lamp_status launch(stream_comm *c, const lamp_sim_stream *s, void (*fn)(void *), lamp_request *r) {
  atomic_fetch_add(&c->in_flight, 1);
  if (s->launch_host_func(fn, r) == LAMP_OK) return LAMP_OK;
  atomic_fetch_sub(&c->in_flight, 1);
  return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "the device's stream queued nothing");
}

static lamp_status check_stream(stream_comm *c, const char *op, const void *stream) {
  const lamp_sim_stream *s = stream;
  if (s != NULL && s->magic == LAMP_SIM_STREAM_MAGIC) return LAMP_OK;
  return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "%s: the stream %p is not the simulated device's", op,
                            stream);
}

static lamp_status all_reduce_enqueue(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                      lamp_device device, void *stream, lamp_request **req) {
  stream_comm *c = comm;
  lamp_status st = broken(c);
  if (st == LAMP_OK) st = check_stream(c, "all_reduce_enqueue", stream);
  if (st != LAMP_OK) return st;
  if (dtype != LAMP_F32 || device != LAMP_CPU)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce_enqueue: f32 through host views only");
  lamp_request *r = malloc(sizeof *r);
  if (r == NULL) return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "out of memory");
  *r = (lamp_request){.c = c, .seq = ++c->enqueued, .buf = buf, .count = count, .op = op};
  c->host->log(LAMP_LOG_INFO, WHO, "enqueue %lu: %zu elements at %p", r->seq, count, buf);
  st = launch(c, stream, run_reduce, r);
  if (st != LAMP_OK) {
    free(r);
    return st;
  }
  *req = r;
  return LAMP_OK;
}

/* The wait is queued even on a broken communicator: it releases the request after the queued
   reduction has let go of it. */
static lamp_status wait_stream(void *comm, lamp_request *req, void *stream) {
  stream_comm *c = comm;
  lamp_status st = check_stream(c, "wait_stream", stream);
  if (st == LAMP_OK) st = launch(c, stream, run_wait, req);
  return st != LAMP_OK ? st : broken(c);
}

static lamp_status poll_comm(void *comm) { return broken(comm); }

static const lamp_comm_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, WHO, "0.1",
                               "test communicator: rank 0 of size, SUM over 2 doubles, all-reduces queued on the "
                               "simulated device's stream"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .params = params,
            .n_params = sizeof params / sizeof params[0], .probe = probe},
    .create = create,
    .destroy = destroy,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .barrier = barrier,
    .all_reduce_enqueue = all_reduce_enqueue,
    .wait_stream = wait_stream,
    .poll = poll_comm,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
