/*
** A precision policy whose flags are the test: srf32.c, sr13.c and unknownflag.c define FLAG_NAME,
** FLAG_DESCRIPTION, FLAG_WEIGHTS (the weight dtype), FLAG_FLAGS and FLAG_ABI_MINOR (the minor the
** plugin says it was built for), then include this. Compute, activations and gradients are f32.
*/
#ifndef FLAG_POLICY_H
#define FLAG_POLICY_H

#include <stdio.h>

#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test plugin");
  return 1;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  (void)h, (void)ctx, (void)p;
  *state = NULL;
  return LAMP_OK;
}

static void destroy(void *state) { (void)state; }

static lamp_status policy(void *state, lamp_precision_policy *out) {
  (void)state;
  const lamp_precision_policy p = {.struct_size = sizeof p, .weight_dtype = FLAG_WEIGHTS, .compute_dtype = LAMP_F32,
                                   .activation_dtype = LAMP_F32, .grad_dtype = LAMP_F32, .accum_dtype = LAMP_F32,
                                   .flags = FLAG_FLAGS};
  lamp_struct_copy_out(out, &p, sizeof p);
  return LAMP_OK;
}

static double loss_scale(void *state) {
  (void)state;
  return 1.0;
}

static lamp_status update(void *state, int found_inf, int *skip) {
  (void)state, (void)found_inf;
  *skip = 0;
  return LAMP_OK;
}

static lamp_status stats(void *state, lamp_scaler_stats *out) {
  (void)state;
  const lamp_scaler_stats s = {.struct_size = sizeof s, .scale = 1.0};
  lamp_struct_copy_out(out, &s, sizeof s);
  return LAMP_OK;
}

static const lamp_precision_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC, .struct_size = sizeof(lamp_precision_v1), .abi_major = LAMP_ABI_MAJOR,
            .abi_minor = FLAG_ABI_MINOR, .kind = LAMP_KIND_PRECISION, .name = FLAG_NAME, .version = "0.1",
            .description = FLAG_DESCRIPTION,
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .probe = probe},
    .create = create,
    .destroy = destroy,
    .policy = policy,
    .loss_scale = loss_scale,
    .update = update,
    .stats = stats,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &table.hdr;
}

#endif
