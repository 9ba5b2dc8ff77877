/*
** The stream-ordered collectives (comm_stream.h). Interim: see the header. Until these wrappers
** join instance.c, this file mirrors the layout of instance.c's private struct lamp_comm (the
** same members in the same order, which C allows across translation units) to reach the plugin's
** table and object, and repeats its error convention.
*/
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "plugin/comm_stream.h"
#include "tensor/memory.h"

typedef struct instance {
  const lamp_plugin_handle *handle;
  lamp_ctx *ctx;
  double *params;
  void *state;
} instance;

struct lamp_comm {
  instance in;
  const lamp_comm_v1 *t;
};

static const char *name_of(const lamp_comm *c) { return c->in.handle->desc->name; }

/* A plugin call returned st: "<plugin>: <its message>" (instance.c's finish). */
static lamp_status finish(const lamp_comm *c, const char *what, lamp_status st) {
  if (st == LAMP_OK) return LAMP_OK;
  const char *msg = lamp_ctx_message(c->in.ctx);
  if ((int)st < LAMP_OK || (int)st > LAMP_ERR_NUMERIC)
    return lamp_error(LAMP_ERR_INTERNAL, "%s: %s returned unknown status %d%s%s", name_of(c), what, (int)st,
                      msg[0] ? ": " : "", msg);
  if (msg[0] != '\0') return lamp_error(st, "%s: %s", name_of(c), msg);
  return lamp_error(st, "%s: %s failed (%s) without a message", name_of(c), what, lamp_status_name(st));
}

#define PLUGIN_CALL(c, what, call) (lamp_ctx_clear((c)->in.ctx), finish((c), (what), (call)))

int lamp_comm_supports_enqueue(const lamp_comm *c) {
  if (c == NULL) return 0;
  const lamp_comm_v1 *t = c->t;
  return LAMP_COMM_HAS(t, all_reduce_enqueue) && LAMP_COMM_HAS(t, wait_stream) && LAMP_COMM_HAS(t, poll) &&
         t->all_reduce_enqueue != NULL && t->wait_stream != NULL && t->poll != NULL;
}

static lamp_status unsupported(const lamp_comm *c, const char *what) {
  return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: %s is not supported by this comm plugin", name_of(c), what);
}

/* The device the plugin is told, and buf as it sees it: as they are on a device it declares,
   LAMP_CPU and the host view where it reaches the device's memory through one. No
   synchronisation either way: the stream orders the plugin's accesses. */
static lamp_status place(const lamp_comm *c, lamp_device device, void **buf, lamp_device *told) {
  const lamp_plugin_handle *h = c->in.handle;
  *told = device;
  if ((unsigned)device < LAMP_DEVICE_COUNT && (h->desc->devices & LAMP_BIT(device)) != 0) return LAMP_OK;
  lamp_status st = lamp_plugin_check_device(h, device);
  if (st != LAMP_OK || *buf == NULL) return st;
  void *view = lamp_device_host_view(device, *buf);
  if (view == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: all_reduce_enqueue buffer (%p) is not memory of device %s",
                      name_of(c), *buf, lamp_device_name(device));
  *buf = view;
  *told = LAMP_CPU;
  return LAMP_OK;
}

lamp_status lamp_comm_all_reduce_enqueue(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                         lamp_device device, void *stream, lamp_request **req) {
  if (!lamp_comm_supports_enqueue(c)) return unsupported(c, "all_reduce_enqueue");
  lamp_device told;
  lamp_status st = place(c, device, &buf, &told);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(c, "all_reduce_enqueue",
                     c->t->all_reduce_enqueue(c->in.state, buf, count, dtype, op, told, stream, req));
}

lamp_status lamp_comm_wait_stream(lamp_comm *c, lamp_request *req, void *stream) {
  if (!lamp_comm_supports_enqueue(c)) return unsupported(c, "wait_stream");
  return PLUGIN_CALL(c, "wait_stream", c->t->wait_stream(c->in.state, req, stream));
}

lamp_status lamp_comm_poll(lamp_comm *c) {
  if (!lamp_comm_supports_enqueue(c)) return unsupported(c, "poll");
  return PLUGIN_CALL(c, "poll", c->t->poll(c->in.state));
}
