/* An optimizer whose create fails with a message: "failcreate: cannot create: ...". */
#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}
static void destroy(void *opt) { (void)opt; }
static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0;
  return LAMP_OK;
}
static lamp_status step(void *opt, const lamp_optim_step *s) {
  (void)opt, (void)s;
  return LAMP_OK;
}
static lamp_status create_fails(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  *opt = 0;
  return h->set_error(ctx, LAMP_ERR_INVALID_USAGE, "cannot create: lr is %g", p[0]);
}

static const lamp_param params[] = {{"lr", 0.5, 0.0, 1.0, "unused"}};

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "failcreate", "0.1", "bad plugin"),
            .params = params, .n_params = 1, .probe = probe},
    .create = create_fails,
    .destroy = destroy,
    .slots = slots,
    .step = step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
