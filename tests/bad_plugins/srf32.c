/*
** A precision policy asking for stochastic rounding (ABI 1.4) with f32 weights: there is nothing to
** round, and the Trainer refuses it. Otherwise fp32, runnable on the CPU.
*/
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
  const lamp_precision_policy p = {.struct_size = sizeof p, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32,
                                   .activation_dtype = LAMP_F32, .grad_dtype = LAMP_F32, .accum_dtype = LAMP_F32,
                                   .flags = LAMP_POLICY_STOCHASTIC_ROUNDING};
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
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "srf32", "0.1",
                               "test: stochastic rounding asked for with f32 weights"),
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
