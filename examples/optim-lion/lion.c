/*
** lion: the Lion optimizer (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023),
** an example of an optimizer plugin written against the installed headers alone. Per element,
** with g the gradient:
**
**     c = beta1 * m + (1 - beta1) * g        interpolate the momentum with the gradient
**     p = p * (1 - lr * weight_decay) - lr * sign(c)   (decoupled weight decay, as AdamW's)
**     m = beta2 * m + (1 - beta2) * g        then update the momentum
**
** Every update has the same size (lr) in every coordinate, so Lion wants a learning rate 3-10x
** smaller than AdamW's and a weight decay 3-10x larger. One state slot (the momentum m), which
** the core allocates, zeroes, checkpoints and restores. CPU only: it declares only the CPU, so
** the core refuses it on another device with a message naming it.
*/
#include <stdio.h>
#include <stdlib.h>

#include <lamp/plugin.h>

enum { P_LR, P_BETA1, P_BETA2, P_WEIGHT_DECAY, P_COUNT };

static const lamp_param lion_params[P_COUNT] = {
    [P_LR] = {"lr", 1e-4, 0.0, 1.0, "learning rate: the size of every step (3-10x below AdamW's)"},
    [P_BETA1] = {"beta1", 0.9, 0.0, 1.0, "weight of the momentum in the update's direction"},
    [P_BETA2] = {"beta2", 0.99, 0.0, 1.0, "decay of the momentum itself"},
    [P_WEIGHT_DECAY] = {"weight_decay", 0.0, 0.0, 10.0, "decoupled weight decay, multiplied by lr"},
};

typedef struct lion {
  const lamp_host *host;
  lamp_ctx *ctx;
  float beta1, beta2;
  double weight_decay;
} lion;

static int lion_probe(const lamp_host *host, char *reason, size_t reason_size) {
  (void)host;
  snprintf(reason, reason_size, "cpu kernel");
  return 1;
}

static lamp_status lion_create(const lamp_host *host, lamp_ctx *ctx, const double *p, void **opt) {
  /* The core has checked the declared ranges; what they cannot say is checked here. */
  if (p[P_BETA1] >= 1.0 || p[P_BETA2] >= 1.0)
    return host->set_error(ctx, LAMP_ERR_INVALID_ARG, "beta1 and beta2 must be below 1, got %g and %g", p[P_BETA1],
                           p[P_BETA2]);
  lion *o = calloc(1, sizeof *o);
  if (o == NULL) return host->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  o->host = host;
  o->ctx = ctx;
  o->beta1 = (float)p[P_BETA1];
  o->beta2 = (float)p[P_BETA2];
  o->weight_decay = p[P_WEIGHT_DECAY];
  *opt = o;
  return LAMP_OK;
}

static void lion_destroy(void *opt) { free(opt); }

static lamp_status lion_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  *n = 1;
  if (max >= 1) out[0] = (lamp_optim_slot){"exp_avg", LAMP_F32};
  return LAMP_OK;
}

/* One segment: its elements share lr and weight decay (biases get decay_mult 0). */
static void lion_segment(const lion *o, float *restrict p, const float *restrict grad, float *restrict m, size_t n,
                         float lr, float decay_keep, float grad_scale) {
  const float b1 = o->beta1, keep1 = 1.0f - o->beta1;
  const float b2 = o->beta2, keep2 = 1.0f - o->beta2;
  for (size_t i = 0; i < n; i++) {
    const float g = grad[i] * grad_scale;
    const float c = b1 * m[i] + keep1 * g;
    const float sign = (float)((c > 0.0f) - (c < 0.0f)); /* sign(0) = 0, as torch.sign */
    p[i] = p[i] * decay_keep - lr * sign;
    m[i] = b2 * m[i] + keep2 * g;
  }
}

static lamp_status lion_step(void *opt, const lamp_optim_step *s) {
  lion *o = opt;
  if (s->device != LAMP_CPU) /* the core never asks (hdr.devices says cpu); a core bug would */
    return o->host->set_error(o->ctx, LAMP_ERR_UNSUPPORTED, "step on device %u: lion runs on the cpu only",
                              (unsigned)s->device);
  if (s->slots == NULL || s->slots[0] == NULL)
    return o->host->set_error(o->ctx, LAMP_ERR_INVALID_ARG, "the exp_avg slot is missing");
  const float grad_scale = (float)s->grad_scale; /* 1/loss scale and clipping, folded by the core */
  for (size_t k = 0; k < s->n_segments; k++) {
    const lamp_optim_segment *seg = &s->segments[k];
    const double lr = s->lr * seg->lr_mult;
    const float decay_keep = (float)(1.0 - lr * o->weight_decay * seg->decay_mult);
    lion_segment(o, s->params + seg->offset, s->grads + seg->offset, s->slots[0] + seg->offset, seg->count,
                 (float)lr, decay_keep, grad_scale);
  }
  return LAMP_OK;
}

static const lamp_optim_v1 lion_optim = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "lion", "1.0",
                               "Lion: sign of the interpolated momentum, decoupled weight decay"),
            .devices = LAMP_BIT(LAMP_CPU),
            .dtypes = LAMP_BIT(LAMP_F32),
            .params = lion_params,
            .n_params = P_COUNT,
            .probe = lion_probe},
    .create = lion_create,
    .destroy = lion_destroy,
    .slots = lion_slots,
    .step = lion_step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &lion_optim.hdr;
}
