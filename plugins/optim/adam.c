/*
** adam and adamw: Adam with L2 weight decay (torch.optim.Adam) and with decoupled weight decay
** (torch.optim.AdamW), one source built twice; LAMP_ADAMW=1 makes adamw.so. Per element, fused
** into one pass over the slabs, in fp32 and in the order PyTorch 1.13's single-tensor path
** rounds (the scalars are computed in double once per segment and rounded to fp32 as PyTorch
** rounds its Python numbers):
**
**     g = grad * grad_scale
**     adam:  g = g + weight_decay * decay_mult * p          (L2 into the gradient)
**     adamw: p = p * (1 - lr * lr_mult * weight_decay * decay_mult)   (decoupled)
**     m = beta1 * m + (1 - beta1) * g
**     v = beta2 * v + ((1 - beta2) * g) * g
**     amsgrad: v_max = max(v_max, v), and v_max replaces v below
**     p = p + (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)
**
** with t = step->step, bc1 = 1 - beta1^t, bc2 = 1 - beta2^t and step_size = lr * lr_mult / bc1.
** Slots: exp_avg (m), exp_avg_sq (v) and, with amsgrad, max_exp_avg_sq (v_max).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lamp/plugin.h"

#include "adam_update.h"
#include "optim_step.h"

#ifndef LAMP_ADAMW
#define LAMP_ADAMW 0
#endif

#if LAMP_ADAMW
#define NAME "adamw"
#define DEFAULT_WEIGHT_DECAY 0.01
#define DESCRIPTION "Adam with decoupled weight decay and AMSGrad (torch.optim.AdamW)"
#define DECAY_HELP "decoupled weight decay: p *= 1 - lr * weight_decay each step"
#else
#define NAME "adam"
#define DEFAULT_WEIGHT_DECAY 0.0
#define DESCRIPTION "Adam with L2 weight decay and AMSGrad (torch.optim.Adam)"
#define DECAY_HELP "L2 penalty added to the gradient"
#endif

enum { P_LR, P_BETA1, P_BETA2, P_EPS, P_WEIGHT_DECAY, P_AMSGRAD, P_COUNT };

/* Inclusive ranges; create refuses the ends a closed range cannot exclude (beta 1, eps 0). */
static const lamp_param adam_params[P_COUNT] = {
    [P_LR] = {"lr", 1e-3, 0.0, 1e6, "learning rate (the schedule's base value)"},
    [P_BETA1] = {"beta1", 0.9, 0.0, 1.0, "decay of the gradient's running average, in [0, 1)"},
    [P_BETA2] = {"beta2", 0.999, 0.0, 1.0,
                 "decay of the squared gradient's running average, in [0, 1)"},
    [P_EPS] = {"eps", 1e-8, 0.0, 1.0, "added to the denominator, above 0"},
    [P_WEIGHT_DECAY] = {"weight_decay", DEFAULT_WEIGHT_DECAY, 0.0, 100.0, DECAY_HELP},
    [P_AMSGRAD] = {"amsgrad", 0.0, 0.0, 1.0, "1: divide by the running maximum of exp_avg_sq"},
};

typedef struct adam {
  const lamp_host *host;
  lamp_ctx *ctx;
#if LAMP_OPTIM_CUDA
  lamp_optim_cuda *cuda; /* the device table of the CUDA step */
#endif
  double beta1, beta2, eps, weight_decay;
  int amsgrad;
} adam;

static int adam_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, LAMP_OPTIM_CUDA ? "cpu and cuda kernels" : "cpu kernel");
  return 1;
}

/* ---- configuration --------------------------------------------------------------------------- */

static lamp_status check_config(const lamp_host *h, lamp_ctx *ctx, const double *p) {
  static const int betas[] = {P_BETA1, P_BETA2};
  for (size_t i = 0; i < 2; i++)
    if (!(p[betas[i]] >= 0.0 && p[betas[i]] < 1.0))
      return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option '%s' must be in [0, 1), got %g",
                          adam_params[betas[i]].name, p[betas[i]]);
  if (!(p[P_EPS] > 0.0))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'eps' must be in (0, 1], got %g",
                        p[P_EPS]);
  if (!(p[P_LR] >= 0.0))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'lr' must be at least 0, got %g",
                        p[P_LR]);
  if (p[P_AMSGRAD] != 0.0 && p[P_AMSGRAD] != 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "amsgrad must be 0 or 1, got %g", p[P_AMSGRAD]);
  return LAMP_OK;
}

static lamp_status adam_create(const lamp_host *h, lamp_ctx *ctx, const double *params,
                               void **opt) {
  lamp_status st = check_config(h, ctx, params);
  if (st != LAMP_OK) return st;
  adam *a = calloc(1, sizeof *a);
  if (a == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  a->host = h;
  a->ctx = ctx;
  a->beta1 = params[P_BETA1];
  a->beta2 = params[P_BETA2];
  a->eps = params[P_EPS];
  a->weight_decay = params[P_WEIGHT_DECAY];
  a->amsgrad = params[P_AMSGRAD] == 1.0;
#if LAMP_OPTIM_CUDA
  st = lamp_optim_cuda_new(h, ctx, &a->cuda);
  if (st != LAMP_OK) {
    free(a);
    return st;
  }
#endif
  *opt = a;
  return LAMP_OK;
}

static void adam_destroy(void *opt) {
#if LAMP_OPTIM_CUDA
  if (opt != NULL) lamp_optim_cuda_free(((adam *)opt)->cuda);
#endif
  free(opt);
}

enum { SLOT_M, SLOT_V, SLOT_VMAX };

static const lamp_optim_slot slot_decls[] = {
    [SLOT_M] = {"exp_avg", LAMP_F32},
    [SLOT_V] = {"exp_avg_sq", LAMP_F32},
    [SLOT_VMAX] = {"max_exp_avg_sq", LAMP_F32},
};

static lamp_status adam_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  const adam *a = opt;
  *n = a->amsgrad ? 3 : 2;
  for (uint32_t i = 0; i < *n && i < max; i++) out[i] = slot_decls[i];
  return LAMP_OK;
}

/* ---- the step -------------------------------------------------------------------------------- */

#define INLINE static inline __attribute__((always_inline))

/*
** Each call site passes literal flags, so every configuration compiles to its own loop free of
** control flow; fixed-size blocks let the compiler vectorise it even at -O2 (sqrtf vectorises
** because the plugin is built with -fno-math-errno: v is never negative).
*/
#define BLOCK 8
INLINE void kernel(float *restrict p, const float *restrict grad, float *restrict m,
                   float *restrict v, float *restrict vmax, size_t n, const lamp_adam_coeffs c,
                   const unsigned flags) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = i; j < i + BLOCK; j++)
      lamp_adam_update(p, grad, m, v, vmax, j, c, flags, LAMP_ADAMW);
  for (; i < n; i++) lamp_adam_update(p, grad, m, v, vmax, i, c, flags, LAMP_ADAMW);
}

#define KERNEL_CASE(flags)                                                                         \
  case flags: kernel(p, grad, m, v, vmax, n, c, flags); return

/* Not inlined: its restrict parameters are what allow vectorising the kernels. */
__attribute__((noinline)) static void run_segment(float *restrict p, const float *restrict grad,
                                                  float *restrict m, float *restrict v,
                                                  float *restrict vmax, size_t n,
                                                  const lamp_adam_coeffs c, unsigned flags) {
  switch (flags) {
    KERNEL_CASE(0);
    KERNEL_CASE(LAMP_ADAM_DECAY);
    KERNEL_CASE(LAMP_ADAM_AMSGRAD);
    KERNEL_CASE(LAMP_ADAM_AMSGRAD | LAMP_ADAM_DECAY);
    KERNEL_CASE(LAMP_ADAM_UNIT_BC2);
    KERNEL_CASE(LAMP_ADAM_UNIT_BC2 | LAMP_ADAM_DECAY);
    KERNEL_CASE(LAMP_ADAM_UNIT_BC2 | LAMP_ADAM_AMSGRAD);
    KERNEL_CASE(LAMP_ADAM_UNIT_BC2 | LAMP_ADAM_AMSGRAD | LAMP_ADAM_DECAY);
  }
}

/* With weights_out, the segment goes in chunks that stay in cache between the update and the
   rounding of its result: one pass over memory, as the device step makes. */
#define OUT_CHUNK 2048
static void cpu_segment(float *p, const float *grad, float *m, float *v, float *vmax,
                        uint16_t *out, int out_bf16, size_t n, const lamp_adam_coeffs c,
                        unsigned flags) {
  if (out == NULL) {
    run_segment(p, grad, m, v, vmax, n, c, flags);
    return;
  }
  for (size_t i = 0; i < n; i += OUT_CHUNK) {
    const size_t k = n - i < OUT_CHUNK ? n - i : OUT_CHUNK;
    run_segment(p + i, grad + i, m + i, v + i, vmax != NULL ? vmax + i : NULL, k, c, flags);
    lamp_optim_cpu_round_out(out + i, p + i, k, out_bf16);
  }
}

static lamp_status check_step(adam *a, const lamp_optim_step *st) {
  lamp_status status = lamp_optim_check_step(a->host, a->ctx, st);
  if (status != LAMP_OK) return status;
  const size_t n_slots = a->amsgrad ? 3 : 2;
  for (size_t i = 0; i < n_slots; i++)
    if (st->n > 0 && (st->slots == NULL || st->slots[i] == NULL))
      return a->host->set_error(a->ctx, LAMP_ERR_INVALID_ARG, "%s slot is missing",
                                slot_decls[i].name);
  return LAMP_OK;
}

static lamp_status adam_step(void *opt, const lamp_optim_step *st) {
  adam *a = opt;
  lamp_status status = check_step(a, st);
  if (status != LAMP_OK) return status;
  const lamp_adam_scalars sc = lamp_adam_step_scalars(a->beta1, a->beta2, a->eps, a->weight_decay,
                                                      LAMP_ADAMW, st->step, st->lr, st->grad_scale);
  const unsigned flags = lamp_adam_step_flags(&sc, a->amsgrad);
#if LAMP_OPTIM_CUDA
  if (st->device == LAMP_CUDA) return lamp_adam_cuda_step(a->cuda, a->host, a->ctx, st, &sc, flags);
#endif
  uint16_t *out = lamp_optim_weights_out(st);
  const int out_bf16 = out != NULL && st->weights_out_dtype == LAMP_BF16;
  for (size_t k = 0; k < st->n_segments; k++) {
    const lamp_optim_segment *seg = &st->segments[k];
    unsigned seg_flags = flags;
    const lamp_adam_coeffs c = lamp_adam_segment(&sc, seg->lr_mult, seg->decay_mult, &seg_flags);
    const size_t o = seg->offset;
    float *vmax = (flags & LAMP_ADAM_AMSGRAD) ? st->slots[SLOT_VMAX] + o : NULL;
    cpu_segment(st->params + o, st->grads + o, st->slots[SLOT_M] + o, st->slots[SLOT_V] + o, vmax,
                out != NULL ? out + o : NULL, out_bf16, seg->count, c, seg_flags);
  }
  return LAMP_OK;
}

static const lamp_optim_v1 adam_optim = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, NAME, "1.0", DESCRIPTION),
            .devices = LAMP_OPTIM_DEVICES, .dtypes = LAMP_BIT(LAMP_F32), .params = adam_params,
            .n_params = P_COUNT, .probe = adam_probe},
    .create = adam_create,
    .destroy = adam_destroy,
    .slots = adam_slots,
    .step = adam_step,
    .caps = LAMP_OPTIM_CAP_WEIGHTS_OUT | LAMP_OPTIM_CAP_PIECEWISE,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &adam_optim.hdr;
}
