/*
** A third-party optimizer plugin, written the way docs/plugins.md tells a stranger to: it includes
** only the public headers, links nothing of lamp, and exports one function. The CLI test builds
** it with a bare `cc` and trains with it by path.
*/
#include <stdio.h>
#include <stdlib.h>

#include <lamp/plugin.h>

static const lamp_param params[] = {
    {"lr", 0.01, 0.0, 1e6, "learning rate"},
};

typedef struct plain_sgd {
  const lamp_host *host;
  lamp_ctx *ctx;
} plain_sgd;

static int probe(const lamp_host *host, char *reason, size_t size) {
  (void)host;
  snprintf(reason, size, "always available");
  return 1;
}

static lamp_status create(const lamp_host *host, lamp_ctx *ctx, const double *hparams, void **out) {
  (void)hparams;
  plain_sgd *o = malloc(sizeof *o);
  if (o == NULL) return host->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  o->host = host;
  o->ctx = ctx;
  *out = o;
  return LAMP_OK;
}

static void destroy(void *opt) { free(opt); }

static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0; /* plain SGD keeps no state */
  return LAMP_OK;
}

static lamp_status step(void *opt, const lamp_optim_step *s) {
  plain_sgd *o = opt;
  if (s->device != LAMP_CPU) return o->host->set_error(o->ctx, LAMP_ERR_UNSUPPORTED, "cpu only");
  for (size_t k = 0; k < s->n_segments; k++) {
    const lamp_optim_segment *seg = &s->segments[k];
    float lr = (float)(s->lr * seg->lr_mult), scale = (float)s->grad_scale;
    for (size_t i = seg->offset; i < seg->offset + seg->count; i++) s->params[i] -= lr * scale * s->grads[i];
  }
  return LAMP_OK;
}

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "plain_sgd", "0.1", "SGD without momentum"),
            .devices = LAMP_BIT(LAMP_CPU),
            .dtypes = LAMP_BIT(LAMP_F32),
            .params = params,
            .n_params = 1,
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .slots = slots,
    .step = step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
