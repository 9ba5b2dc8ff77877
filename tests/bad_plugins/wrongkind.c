/* Wrong kind, a comm plugin scoring 0: "<path>: is a comm plugin, expected precision". */
#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 0;
}
static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  (void)h, (void)ctx, (void)p;
  *comm = 0;
  return LAMP_OK;
}
static void destroy(void *comm) { (void)comm; }
static int rank(void *comm) { return (void)comm, 0; }
static int size(void *comm) { return (void)comm, 1; }
static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype,
                              lamp_reduce_op op, lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)op, (void)device;
  return LAMP_OK;
}
static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                             lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)root, (void)device;
  return LAMP_OK;
}
static lamp_status barrier(void *comm) { return (void)comm, LAMP_OK; }

static const lamp_comm_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "wrongkind", "0.1", "bad plugin"),
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .barrier = barrier,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
