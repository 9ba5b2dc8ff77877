/*
** The fake optimizer that the bad optimizer plugins are made of: do-nothing functions and,
** where the plugin defines FAKE_NAME, one table ("bad plugin", version 0.1) and the entry point
** that returns it. Before including this header a plugin may define:
**   FAKE_CREATE  create                      (default fake_create, which succeeds)
**   FAKE_PARAMS  hdr.params and hdr.n_params (an array; default none)
**   FAKE_SLOTS   slots                       (default fake_slots, which declares none)
**   FAKE_STEP    step                        (default fake_step, which does nothing)
**   FAKE_DEVICES hdr.devices                 (default 0)
**   FAKE_ABI_MINOR hdr.abi_minor             (default LAMP_ABI_MINOR)
**   FAKE_CAPS    caps                        (default 0)
** A plugin whose table is not a plain lamp_optim_v1 leaves FAKE_NAME undefined and writes its
** own table and entry point from the fake_* functions.
*/
#ifndef FAKE_OPTIM_H
#define FAKE_OPTIM_H

#include "lamp/plugin.h"

static int fake_probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}
#ifndef FAKE_CREATE
static lamp_status fake_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)h, (void)ctx, (void)p;
  *opt = 0;
  return LAMP_OK;
}
#define FAKE_CREATE fake_create
#endif
static void fake_destroy(void *opt) { (void)opt; }
#ifndef FAKE_SLOTS
static lamp_status fake_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0;
  return LAMP_OK;
}
#define FAKE_SLOTS fake_slots
#endif
#ifndef FAKE_STEP
static lamp_status fake_step(void *opt, const lamp_optim_step *s) {
  (void)opt, (void)s;
  return LAMP_OK;
}
#define FAKE_STEP fake_step
#endif
#ifndef FAKE_DEVICES
#define FAKE_DEVICES 0
#endif
#ifndef FAKE_ABI_MINOR
#define FAKE_ABI_MINOR LAMP_ABI_MINOR
#endif
#ifndef FAKE_CAPS
#define FAKE_CAPS 0
#endif

#ifdef FAKE_NAME
static const lamp_optim_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC,
            .struct_size = sizeof(lamp_optim_v1),
            .abi_major = LAMP_ABI_MAJOR,
            .abi_minor = FAKE_ABI_MINOR,
            .kind = LAMP_KIND_OPTIM,
            .name = FAKE_NAME,
            .version = "0.1",
            .description = "bad plugin",
            .devices = FAKE_DEVICES,
#ifdef FAKE_PARAMS
            .params = FAKE_PARAMS,
            .n_params = sizeof FAKE_PARAMS / sizeof FAKE_PARAMS[0],
#endif
            .probe = fake_probe},
    .create = FAKE_CREATE,
    .destroy = fake_destroy,
    .slots = FAKE_SLOTS,
    .step = FAKE_STEP,
    .caps = FAKE_CAPS,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
#endif

#endif
