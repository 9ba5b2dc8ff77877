/*
** A communicator with all_reduce_enqueue but neither wait_stream nor poll (ABI 1.3 says all three
** or none): "<path>: has some of the stream-ordered calls but not 'wait_stream', 'poll':
** all_reduce_enqueue, wait_stream and poll come together".
*/
#include <stdio.h>

#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "malformed test communicator");
  return 0;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  (void)p, (void)comm;
  return h->set_error(ctx, LAMP_ERR_INTERNAL, "never created");
}

static void destroy(void *comm) { (void)comm; }
static int rank(void *comm) { return (void)comm, 0; }
static int size(void *comm) { return (void)comm, 1; }

static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                              lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)op, (void)device;
  return LAMP_OK;
}

static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root, lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)root, (void)device;
  return LAMP_OK;
}

static lamp_status barrier(void *comm) { return (void)comm, LAMP_OK; }

static lamp_status all_reduce_enqueue(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                      lamp_device device, void *stream, lamp_request **req) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)op, (void)device, (void)stream;
  *req = NULL;
  return LAMP_OK;
}

static const lamp_comm_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "halfstream", "0.1", "enqueue without wait_stream"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .probe = probe},
    .create = create,
    .destroy = destroy,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .barrier = barrier,
    .all_reduce_enqueue = all_reduce_enqueue,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
