/*
** fp32: the reference precision policy. Everything is stored and computed in fp32, there are
** no master weights (the weights already are fp32) and no loss scaling: the scale is 1 and no
** step is ever skipped.
*/
#include <stdio.h>

#include "lamp/plugin.h"

static int fp32_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "runs everywhere");
  return 1;
}

/* Stateless: every object is the same, so create hands back no state at all. */
static lamp_status fp32_create(const lamp_host *h, lamp_ctx *ctx, const double *params,
                               void **state) {
  (void)h;
  (void)ctx;
  (void)params;
  *state = NULL;
  return LAMP_OK;
}

static void fp32_destroy(void *state) { (void)state; }

static lamp_status fp32_policy(void *state, lamp_precision_policy *out) {
  (void)state;
  const lamp_precision_policy policy = {
      .struct_size = sizeof policy,
      .weight_dtype = LAMP_F32,
      .compute_dtype = LAMP_F32,
      .activation_dtype = LAMP_F32,
      .grad_dtype = LAMP_F32,
      .accum_dtype = LAMP_F32,
      .flags = 0,
  };
  lamp_struct_copy_out(out, &policy, sizeof policy);
  return LAMP_OK;
}

static double fp32_loss_scale(void *state) {
  (void)state;
  return 1.0;
}

static lamp_status fp32_update(void *state, int found_inf, int *skip_step) {
  (void)state;
  (void)found_inf; /* without scaling there is nothing to adjust; the trainer decides on NaN */
  *skip_step = 0;
  return LAMP_OK;
}

static lamp_status fp32_stats(void *state, lamp_scaler_stats *out) {
  (void)state;
  const lamp_scaler_stats stats = {.struct_size = sizeof stats, .scale = 1.0};
  lamp_struct_copy_out(out, &stats, sizeof stats);
  return LAMP_OK;
}

static const lamp_precision_v1 fp32 = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "fp32", "1.0",
                               "fp32 everywhere: no master weights, no loss scaling"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA), .dtypes = LAMP_BIT(LAMP_F32),
            .params = NULL, .n_params = 0, .probe = fp32_probe},
    .create = fp32_create,
    .destroy = fp32_destroy,
    .policy = fp32_policy,
    .loss_scale = fp32_loss_scale,
    .update = fp32_update,
    .stats = fp32_stats,
    .save_state = NULL, /* stateless */
    .load_state = NULL,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &fp32.hdr;
}
