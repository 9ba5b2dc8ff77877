/*
** Valid: an optimizer as a plugin built against ABI 1.3 would be, before text options and the
** tensor table: abi_minor 3 and the 1.3 table size (112 bytes). The bytes after its table look
** like 1.4's text_params (a text option 'sign'), which a 1.3 table does not have: the core must
** not read them. Plain SGD (params -= lr * grad_scale * grads) over the members 1.3 had.
*/
#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)h, (void)ctx, (void)p;
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
  const float rate = (float)(s->lr * s->grad_scale);
  for (size_t i = 0; i < s->n; i++) s->params[i] -= rate * s->grads[i];
  return LAMP_OK;
}

static const lamp_param params[] = {{"lr", 0.1, 0.0, 10.0, "learning rate"}};
static const char *const signs[] = {"exact", "smooth", NULL};
static const lamp_text_param texts[] = {{"sign", "exact", signs, "not part of a 1.3 table"}};

static const lamp_optim_v1 table = {
    .hdr = {.magic = LAMP_PLUGIN_MAGIC,
            .struct_size = 112, /* sizeof(lamp_optim_v1) in ABI 1.2 and 1.3 */
            .abi_major = 1,
            .abi_minor = 3,
            .kind = LAMP_KIND_OPTIM,
            .name = "optim13",
            .version = "0.1",
            .description = "an optimizer built against ABI 1.3",
            .devices = LAMP_BIT(LAMP_CPU),
            .params = params,
            .n_params = 1,
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .slots = slots,
    .step = step,
    .text_params = texts, /* past struct_size: not part of a 1.3 table */
    .n_text_params = 1,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &table.hdr;
}
