/*
** sgd: stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight
** decay, exactly as torch.optim.SGD computes it, fused into one pass over the slabs:
**
**     g = grad * grad_scale + weight_decay * decay_mult * p
**     buf = g                                   on the first step
**     buf = momentum * buf + (1 - dampening) * g  afterwards        (only when momentum != 0)
**     g = nesterov ? g + momentum * buf : buf
**     p = p - lr * lr_mult * g
**
** Arithmetic is fp32, as PyTorch's is for fp32 parameters.
*/
#include <stdio.h>
#include <stdlib.h>

#include "lamp/plugin.h"

enum { P_LR, P_MOMENTUM, P_DAMPENING, P_NESTEROV, P_WEIGHT_DECAY, P_COUNT };

static const lamp_param sgd_params[P_COUNT] = {
    [P_LR] = {"lr", 0.01, 0.0, 1e6, "learning rate (the schedule's base value)"},
    [P_MOMENTUM] = {"momentum", 0.0, 0.0, 1.0, "momentum factor, below 1"},
    [P_DAMPENING] = {"dampening", 0.0, 0.0, 1.0, "dampening of the momentum's gradient term"},
    [P_NESTEROV] = {"nesterov", 0.0, 0.0, 1.0, "1: Nesterov momentum"},
    [P_WEIGHT_DECAY] = {"weight_decay", 0.0, 0.0, 100.0, "L2 penalty added to the gradient"},
};

typedef struct sgd {
  const lamp_host *host;
  lamp_ctx *ctx;
  float momentum;
  float damp_keep; /* 1 - dampening, rounded once as PyTorch's alpha is */
  int nesterov;
  double weight_decay;
} sgd;

static int sgd_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "cpu kernel");
  return 1;
}

/* {====================================================== configuration */

static lamp_status check_config(const lamp_host *h, lamp_ctx *ctx, const double *p) {
  if (p[P_MOMENTUM] >= 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "momentum must be below 1, got %g",
                        p[P_MOMENTUM]);
  if (p[P_NESTEROV] != 0.0 && p[P_NESTEROV] != 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "nesterov must be 0 or 1, got %g",
                        p[P_NESTEROV]);
  if (p[P_NESTEROV] == 1.0 && (p[P_MOMENTUM] <= 0.0 || p[P_DAMPENING] != 0.0))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG,
                        "nesterov requires momentum > 0 and dampening 0, got momentum %g and "
                        "dampening %g",
                        p[P_MOMENTUM], p[P_DAMPENING]);
  return LAMP_OK;
}

static lamp_status sgd_create(const lamp_host *h, lamp_ctx *ctx, const double *params, void **opt) {
  lamp_status st = check_config(h, ctx, params);
  if (st != LAMP_OK) return st;
  sgd *s = calloc(1, sizeof *s);
  if (s == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->host = h;
  s->ctx = ctx;
  s->momentum = (float)params[P_MOMENTUM];
  s->damp_keep = (float)(1.0 - params[P_DAMPENING]);
  s->nesterov = params[P_NESTEROV] == 1.0;
  s->weight_decay = params[P_WEIGHT_DECAY];
  *opt = s;
  return LAMP_OK;
}

static void sgd_destroy(void *opt) { free(opt); }

static lamp_status sgd_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  const sgd *s = opt;
  *n = s->momentum != 0.0f ? 1 : 0;
  if (*n == 1 && max >= 1) out[0] = (lamp_optim_slot){"momentum_buffer", LAMP_F32};
  return LAMP_OK;
}

/* }====================================================== */

/* {====================================================== the step */

/* The scalars of one segment's update. */
typedef struct coeffs {
  float grad_scale, weight_decay, lr, momentum, damp_keep; /* damp_keep = 1 - dampening */
} coeffs;

enum { DECAY = 1, MOMENTUM = 2, FIRST = 4, NESTEROV = 8 };

#define INLINE static inline __attribute__((always_inline))

/* Element j, branching on constant flags only. */
INLINE void update(float *restrict p, const float *restrict grad, float *restrict buf, size_t j,
                   const coeffs c, const unsigned flags) {
  float g = grad[j] * c.grad_scale;
  if (flags & DECAY) g += c.weight_decay * p[j];
  if (flags & MOMENTUM) {
    const float b = (flags & FIRST) ? g : c.momentum * buf[j] + c.damp_keep * g;
    buf[j] = b;
    g = (flags & NESTEROV) ? g + c.momentum * b : b;
  }
  p[j] -= c.lr * g;
}

#define BLOCK 8

/*
** Each call site passes literal flags, so every configuration compiles to its own loop free of
** control flow; fixed-size blocks let the compiler vectorise it even at -O2.
*/
INLINE void kernel(float *restrict p, const float *restrict grad, float *restrict buf, size_t n,
                   const coeffs c, const unsigned flags) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = i; j < i + BLOCK; j++) update(p, grad, buf, j, c, flags);
  for (; i < n; i++) update(p, grad, buf, i, c, flags);
}

#define KERNEL_CASE(flags)                                                                         \
  case flags: kernel(p, grad, buf, n, c, flags); return

/* Not inlined: its restrict parameters are what allow vectorising the kernels. */
__attribute__((noinline)) static void run_segment(float *restrict p, const float *restrict grad,
                                                  float *restrict buf, size_t n, const coeffs c,
                                                  unsigned flags) {
  switch (flags) {
    KERNEL_CASE(0);
    KERNEL_CASE(DECAY);
    KERNEL_CASE(MOMENTUM);
    KERNEL_CASE(MOMENTUM | DECAY);
    KERNEL_CASE(MOMENTUM | FIRST);
    KERNEL_CASE(MOMENTUM | FIRST | DECAY);
    KERNEL_CASE(MOMENTUM | NESTEROV);
    KERNEL_CASE(MOMENTUM | NESTEROV | DECAY);
    KERNEL_CASE(MOMENTUM | NESTEROV | FIRST);
    KERNEL_CASE(MOMENTUM | NESTEROV | FIRST | DECAY);
  }
}

static lamp_status check_step(sgd *s, const lamp_optim_step *st) {
  if (st->struct_size < sizeof *st)
    return s->host->set_error(s->ctx, LAMP_ERR_INTERNAL, "step struct is %u bytes, need %zu",
                              (unsigned)st->struct_size, sizeof *st);
  if (st->device != LAMP_CPU)
    return s->host->set_error(s->ctx, LAMP_ERR_UNSUPPORTED, "device %u is not supported (cpu only)",
                              (unsigned)st->device);
  if (st->step == 0)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG,
                              "step counter is 0; the first step is 1");
  if (s->momentum != 0.0f && (st->slots == NULL || st->slots[0] == NULL))
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "momentum_buffer slot is missing");
  return LAMP_OK;
}

static unsigned step_flags(const sgd *s, const lamp_optim_step *st) {
  if (s->momentum == 0.0f) return 0;
  return MOMENTUM | (st->step == 1 ? FIRST : 0) | (s->nesterov ? NESTEROV : 0);
}

static lamp_status sgd_step(void *opt, const lamp_optim_step *st) {
  sgd *s = opt;
  lamp_status status = check_step(s, st);
  if (status != LAMP_OK) return status;
  const unsigned flags = step_flags(s, st);
  for (size_t k = 0; k < st->n_segments; k++) {
    const lamp_optim_segment *seg = &st->segments[k];
    const coeffs c = {
        .grad_scale = (float)st->grad_scale,
        .weight_decay = (float)(s->weight_decay * seg->decay_mult),
        .lr = (float)(st->lr * seg->lr_mult),
        .momentum = s->momentum,
        .damp_keep = s->damp_keep,
    };
    float *buf = (flags & MOMENTUM) ? st->slots[0] + seg->offset : NULL;
    run_segment(st->params + seg->offset, st->grads + seg->offset, buf, seg->count, c,
                flags | (c.weight_decay != 0.0f ? DECAY : 0));
  }
  return LAMP_OK;
}

/* }====================================================== */

static const lamp_optim_v1 sgd_optim = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "sgd", "1.0",
                               "SGD with momentum, dampening, Nesterov and weight decay "
                               "(torch.optim.SGD)"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .params = sgd_params,
            .n_params = P_COUNT, .probe = sgd_probe},
    .create = sgd_create,
    .destroy = sgd_destroy,
    .slots = sgd_slots,
    .step = sgd_step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &sgd_optim.hdr;
}
