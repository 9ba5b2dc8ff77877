/*
** Valid: an optimizer as a plugin built against ABI 1.1 would be, before lamp_optim_v1.caps and
** lamp_optim_step.weights_out: abi_minor 1 and the 1.1 table size (104 bytes). The bytes after
** its table say LAMP_OPTIM_CAP_WEIGHTS_OUT, which a 1.1 table does not have: the core must not
** read them. Plain SGD (params -= lr * grad_scale * grads), no slots; a step handed weights_out
** fails, so a test sees the core keep 1.2 members from a 1.1 plugin.
*/
#include "lamp/plugin.h"

static const lamp_host *host;
static lamp_ctx *context;

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)p;
  host = h;
  context = ctx;
  *opt = 0;
  return LAMP_OK;
}

static void destroy(void *opt) { (void)opt; }

static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0;
  return LAMP_OK;
}

static lamp_status step(void *opt, const lamp_optim_step *s) {
  (void)opt;
  if (s->struct_size >= offsetof(lamp_optim_step, weights_out) + sizeof s->weights_out &&
      s->weights_out != NULL)
    return host->set_error(context, LAMP_ERR_INTERNAL, "a 1.1 plugin was handed weights_out");
  const float rate = (float)(s->lr * s->grad_scale);
  for (size_t i = 0; i < s->n; i++) s->params[i] -= rate * s->grads[i];
  return LAMP_OK;
}

static const lamp_param params[] = {{"lr", 0.1, 0.0, 10.0, "learning rate"}};

static const lamp_optim_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC,
            .struct_size = 104, /* sizeof(lamp_optim_v1) in ABI 1.1 */
            .abi_major = 1,
            .abi_minor = 1,
            .kind = LAMP_KIND_OPTIM,
            .name = "optim11",
            .version = "0.1",
            .description = "an optimizer built against ABI 1.1",
            .devices = LAMP_BIT(LAMP_CPU),
            .params = params,
            .n_params = 1,
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .slots = slots,
    .step = step,
    .caps = LAMP_OPTIM_CAP_WEIGHTS_OUT, /* past struct_size: not part of a 1.1 table */
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &table.hdr;
}
