/* A precision table whose struct_size (40) is below what ABI 1.0 requires. */
#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}
static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  (void)h, (void)ctx, (void)p;
  *state = 0;
  return LAMP_OK;
}
static void destroy(void *state) { (void)state; }
static lamp_status policy(void *state, lamp_precision_policy *out) {
  (void)state;
  out->weight_dtype = out->compute_dtype = out->activation_dtype = LAMP_F32;
  out->grad_dtype = out->accum_dtype = LAMP_F32;
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
  out->scale = 1.0;
  return LAMP_OK;
}

static const lamp_precision_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC,
            .struct_size = 40,
            .abi_major = LAMP_ABI_MAJOR,
            .abi_minor = LAMP_ABI_MINOR,
            .kind = LAMP_KIND_PRECISION,
            .name = "small",
            .version = "0.1",
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .policy = policy,
    .loss_scale = loss_scale,
    .update = update,
    .stats = stats,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
