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

#include "optim_step.h"
#include "sgd_update.h"

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
#if LAMP_OPTIM_CUDA
  lamp_optim_cuda *cuda; /* the device table of the CUDA step */
#endif
  float momentum;
  float damp_keep; /* 1 - dampening, rounded once as PyTorch's alpha is */
  int nesterov;
  double weight_decay;
} sgd;

static int sgd_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, LAMP_OPTIM_CUDA ? "cpu and cuda kernels" : "cpu kernel");
  return 1;
}

/* ---- configuration --------------------------------------------------------------------------- */

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
#if LAMP_OPTIM_CUDA
  st = lamp_optim_cuda_new(h, ctx, &s->cuda);
  if (st != LAMP_OK) {
    free(s);
    return st;
  }
#endif
  *opt = s;
  return LAMP_OK;
}

static void sgd_destroy(void *opt) {
#if LAMP_OPTIM_CUDA
  if (opt != NULL) lamp_optim_cuda_free(((sgd *)opt)->cuda);
#endif
  free(opt);
}

static lamp_status sgd_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  const sgd *s = opt;
  *n = s->momentum != 0.0f ? 1 : 0;
  if (*n == 1 && max >= 1) out[0] = (lamp_optim_slot){"momentum_buffer", LAMP_F32};
  return LAMP_OK;
}

/* ---- the step -------------------------------------------------------------------------------- */

#define INLINE static inline __attribute__((always_inline))

/*
** Each call site passes literal flags, so every configuration compiles to its own loop free of
** control flow; fixed-size blocks let the compiler vectorise it even at -O2.
*/
#define BLOCK 8
INLINE void kernel(float *restrict p, const float *restrict grad, float *restrict buf, size_t n,
                   const lamp_sgd_coeffs c, const unsigned flags) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = i; j < i + BLOCK; j++) lamp_sgd_update(p, grad, buf, j, c, flags);
  for (; i < n; i++) lamp_sgd_update(p, grad, buf, i, c, flags);
}

#define KERNEL_CASE(flags)                                                                         \
  case flags: kernel(p, grad, buf, n, c, flags); return

/* Not inlined: its restrict parameters are what allow vectorising the kernels. */
__attribute__((noinline)) static void run_segment(float *restrict p, const float *restrict grad,
                                                  float *restrict buf, size_t n,
                                                  const lamp_sgd_coeffs c, unsigned flags) {
  switch (flags) {
    KERNEL_CASE(0);
    KERNEL_CASE(LAMP_SGD_DECAY);
    KERNEL_CASE(LAMP_SGD_MOMENTUM);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_DECAY);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_FIRST);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_FIRST | LAMP_SGD_DECAY);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_NESTEROV);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_NESTEROV | LAMP_SGD_DECAY);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_NESTEROV | LAMP_SGD_FIRST);
    KERNEL_CASE(LAMP_SGD_MOMENTUM | LAMP_SGD_NESTEROV | LAMP_SGD_FIRST | LAMP_SGD_DECAY);
  }
}

/* With weights_out, the segment goes in chunks that stay in cache between the update and the
   rounding of its result: one pass over memory, as the device step makes. */
#define OUT_CHUNK 2048
static void cpu_segment(float *p, const float *grad, float *buf, uint16_t *out, int out_bf16,
                        size_t n, const lamp_sgd_coeffs c, unsigned flags) {
  if (out == NULL) {
    run_segment(p, grad, buf, n, c, flags);
    return;
  }
  for (size_t i = 0; i < n; i += OUT_CHUNK) {
    const size_t m = n - i < OUT_CHUNK ? n - i : OUT_CHUNK;
    run_segment(p + i, grad + i, buf != NULL ? buf + i : NULL, m, c, flags);
    lamp_optim_cpu_round_out(out + i, p + i, m, out_bf16);
  }
}

static lamp_status check_step(sgd *s, const lamp_optim_step *st) {
  lamp_status status = lamp_optim_check_step(s->host, s->ctx, st);
  if (status != LAMP_OK) return status;
  if (s->momentum != 0.0f && (st->slots == NULL || st->slots[0] == NULL))
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "momentum_buffer slot is missing");
  return LAMP_OK;
}

static lamp_status sgd_step(void *opt, const lamp_optim_step *st) {
  sgd *s = opt;
  lamp_status status = check_step(s, st);
  if (status != LAMP_OK) return status;
  const unsigned flags = lamp_sgd_step_flags(s->momentum, s->nesterov, st->step);
  const lamp_sgd_scalars sc = {.lr = st->lr, .grad_scale = st->grad_scale,
                               .weight_decay = s->weight_decay, .momentum = s->momentum,
                               .damp_keep = s->damp_keep};
#if LAMP_OPTIM_CUDA
  if (st->device == LAMP_CUDA) return lamp_sgd_cuda_step(s->cuda, s->host, s->ctx, st, &sc, flags);
#endif
  uint16_t *out = lamp_optim_weights_out(st);
  const int out_bf16 = out != NULL && st->weights_out_dtype == LAMP_BF16;
  for (size_t k = 0; k < st->n_segments; k++) {
    const lamp_optim_segment *seg = &st->segments[k];
    unsigned seg_flags = flags;
    const lamp_sgd_coeffs c = lamp_sgd_segment(&sc, seg->lr_mult, seg->decay_mult, &seg_flags);
    float *buf = (flags & LAMP_SGD_MOMENTUM) ? st->slots[0] + seg->offset : NULL;
    cpu_segment(st->params + seg->offset, st->grads + seg->offset, buf,
                out != NULL ? out + seg->offset : NULL, out_bf16, seg->count, c, seg_flags);
  }
  return LAMP_OK;
}

static const lamp_optim_v1 sgd_optim = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "sgd", "1.0",
                               "SGD with momentum, dampening, Nesterov and weight decay "
                               "(torch.optim.SGD)"),
            .devices = LAMP_OPTIM_DEVICES, .dtypes = LAMP_BIT(LAMP_F32), .params = sgd_params,
            .n_params = P_COUNT, .probe = sgd_probe},
    .create = sgd_create,
    .destroy = sgd_destroy,
    .slots = sgd_slots,
    .step = sgd_step,
    .caps = LAMP_OPTIM_CAP_WEIGHTS_OUT | LAMP_OPTIM_CAP_PIECEWISE,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &sgd_optim.hdr;
}
