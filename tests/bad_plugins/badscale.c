/*
** A precision plugin whose loss_scale breaks its contract (a finite number > 0): option `mode`
** picks what it returns, 0: 0, 1: -1, 2: +inf, 3: NaN. Otherwise it is fp32 (no skipping), so
** the trainer's own check of the scale is the only thing that can stop the run.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "lamp/plugin.h"

static const lamp_param params[] = {{"mode", 0.0, 0.0, 3.0, "0: scale 0, 1: -1, 2: +inf, 3: NaN"}};

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  snprintf(reason, size, "test plugin");
  return 1;
}

/* The state is the mode itself, carried in the pointer. */
static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  (void)h, (void)ctx;
  *state = (void *)(uintptr_t)p[0];
  return LAMP_OK;
}

static void destroy(void *state) { (void)state; }

static lamp_status policy(void *state, lamp_precision_policy *out) {
  (void)state;
  const lamp_precision_policy p = {.struct_size = sizeof p, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32,
                                   .activation_dtype = LAMP_F32, .grad_dtype = LAMP_F32, .accum_dtype = LAMP_F32};
  lamp_struct_copy_out(out, &p, sizeof p);
  return LAMP_OK;
}

static double loss_scale(void *state) {
  static const double scales[4] = {0.0, -1.0, INFINITY, NAN};
  return scales[(uintptr_t)state & 3u];
}

static lamp_status update(void *state, int found_inf, int *skip) {
  (void)state, (void)found_inf;
  *skip = 0;
  return LAMP_OK;
}

static lamp_status stats(void *state, lamp_scaler_stats *out) {
  const lamp_scaler_stats s = {.struct_size = sizeof s, .scale = loss_scale(state)};
  lamp_struct_copy_out(out, &s, sizeof s);
  return LAMP_OK;
}

static const lamp_precision_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "badscale", "0.1",
                               "test: a loss scale of 0, -1, inf or NaN"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .params = params, .n_params = 1,
            .probe = probe},
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
