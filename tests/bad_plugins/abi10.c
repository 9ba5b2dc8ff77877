/*
** Valid: a communicator as a plugin built against ABI 1.0 would be, the one before the host
** table gained its device services. It declares abi_minor 0 with the 1.0 table (the comm table
** did not change in 1.1), leaves hdr.devices 0 as 1.0 allowed (it counts as the CPU), and uses
** only the host members 1.0 had. Rank 0 of 1; all_reduce(SUM) of f32 adds 1 to every element,
** so a test sees the call arrive, with the device and a buffer it can write.
*/
#include <stdio.h>
#include <stdlib.h>

#include "lamp/plugin.h"

typedef struct abi10 {
  const lamp_host *host;
  lamp_ctx *ctx;
} abi10;

/* The host table as a 1.0 plugin knows it ends here. */
#define HOST_1_0_SIZE (offsetof(lamp_host, abort_flag) + sizeof(void *))

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test communicator built against ABI 1.0");
  return 0;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **comm) {
  (void)p;
  if (h->struct_size < HOST_1_0_SIZE)
    return h->set_error(ctx, LAMP_ERR_UNSUPPORTED, "host table of %u bytes",
                        (unsigned)h->struct_size);
  abi10 *c = calloc(1, sizeof *c);
  if (c == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  c->host = h;
  c->ctx = ctx;
  *comm = c;
  return LAMP_OK;
}

static void destroy(void *comm) { free(comm); }
static int rank(void *comm) { return (void)comm, 0; }
static int size(void *comm) { return (void)comm, 1; }

static lamp_status all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype,
                              lamp_reduce_op op, lamp_device device) {
  abi10 *c = comm;
  if (device != LAMP_CPU)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce on device %d", (int)device);
  if (dtype != LAMP_F32 || op != LAMP_REDUCE_SUM)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "all_reduce: f32 SUM only");
  float *x = buf;
  for (size_t i = 0; i < count; i++) x[i] += 1.0f;
  return LAMP_OK;
}

static lamp_status broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                             lamp_device device) {
  (void)comm, (void)buf, (void)count, (void)dtype, (void)root, (void)device;
  return LAMP_OK;
}

static lamp_status barrier(void *comm) { return (void)comm, LAMP_OK; }

static const lamp_comm_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC,
            .struct_size = 160, /* sizeof(lamp_comm_v1) in ABI 1.0 */
            .abi_major = 1,
            .abi_minor = 0,
            .kind = LAMP_KIND_COMM,
            .name = "abi10",
            .version = "0.1",
            .description = "a plugin built against ABI 1.0",
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
