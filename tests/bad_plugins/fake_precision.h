/*
** The fake precision plugin that the bad precision plugins are made of: do-nothing functions,
** one table and the entry point that returns it. A bad plugin defines FAKE_NAME and then only
** what it breaks, before it includes this header:
**   FAKE_MAGIC        hdr.magic        (default LAMP_PLUGIN_MAGIC)
**   FAKE_STRUCT_SIZE  hdr.struct_size  (default sizeof(lamp_precision_v1))
**   FAKE_ABI_MAJOR    hdr.abi_major    (default LAMP_ABI_MAJOR)
**   FAKE_ABI_MINOR    hdr.abi_minor    (default LAMP_ABI_MINOR)
**   FAKE_SAVE_STATE   save_state       (default none)
** Everything else is valid, so the loader gets as far as the broken field and no further.
*/
#ifndef FAKE_PRECISION_H
#define FAKE_PRECISION_H

#include "lamp/plugin.h"

#ifndef FAKE_NAME
#error "define FAKE_NAME before including fake_precision.h"
#endif
#ifndef FAKE_MAGIC
#define FAKE_MAGIC LAMP_PLUGIN_MAGIC
#endif
#ifndef FAKE_STRUCT_SIZE
#define FAKE_STRUCT_SIZE sizeof(lamp_precision_v1)
#endif
#ifndef FAKE_ABI_MAJOR
#define FAKE_ABI_MAJOR LAMP_ABI_MAJOR
#endif
#ifndef FAKE_ABI_MINOR
#define FAKE_ABI_MINOR LAMP_ABI_MINOR
#endif
#ifndef FAKE_SAVE_STATE
#define FAKE_SAVE_STATE NULL
#endif

static int fake_probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}
static lamp_status fake_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  (void)h, (void)ctx, (void)p;
  *state = 0;
  return LAMP_OK;
}
static void fake_destroy(void *state) { (void)state; }
static lamp_status fake_policy(void *state, lamp_precision_policy *out) {
  (void)state;
  out->weight_dtype = out->compute_dtype = out->activation_dtype = LAMP_F32;
  out->grad_dtype = out->accum_dtype = LAMP_F32;
  return LAMP_OK;
}
static double fake_loss_scale(void *state) {
  (void)state;
  return 1.0;
}
static lamp_status fake_update(void *state, int found_inf, int *skip) {
  (void)state, (void)found_inf;
  *skip = 0;
  return LAMP_OK;
}
static lamp_status fake_stats(void *state, lamp_scaler_stats *out) {
  (void)state;
  out->scale = 1.0;
  return LAMP_OK;
}

static const lamp_precision_v1 table = {
    .hdr = {.magic = FAKE_MAGIC,
            .struct_size = FAKE_STRUCT_SIZE,
            .abi_major = FAKE_ABI_MAJOR,
            .abi_minor = FAKE_ABI_MINOR,
            .kind = LAMP_KIND_PRECISION,
            .name = FAKE_NAME,
            .version = "0.1",
            .probe = fake_probe},
    .create = fake_create,
    .destroy = fake_destroy,
    .policy = fake_policy,
    .loss_scale = fake_loss_scale,
    .update = fake_update,
    .stats = fake_stats,
    .save_state = FAKE_SAVE_STATE,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}

#endif
