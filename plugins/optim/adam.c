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
  double beta1, beta2, eps, weight_decay;
  int amsgrad;
} adam;

static int adam_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "cpu kernel");
  return 1;
}

/* {====================================================== configuration */

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
  *opt = a;
  return LAMP_OK;
}

static void adam_destroy(void *opt) { free(opt); }

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

/* }====================================================== */

/* {====================================================== the step */

/* The scalars of one segment's update, each rounded to fp32 as PyTorch rounds it. */
typedef struct coeffs {
  float grad_scale;
  float decay;           /* adam: weight_decay; adamw: 1 - lr * weight_decay */
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bc2_sqrt;        /* sqrt(1 - beta2^t) */
  float eps;
  float neg_step_size;   /* -lr / (1 - beta1^t) */
} coeffs;

enum { DECAY = 1, AMSGRAD = 2, UNIT_BC2 = 4 };

#define INLINE static inline __attribute__((always_inline))

/* torch.maximum: NaN in either operand gives NaN. */
INLINE float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

/* Element j, branching on constant flags only. */
INLINE void update(float *restrict p, const float *restrict grad, float *restrict m,
                   float *restrict v, float *restrict vmax, size_t j, const coeffs c,
                   const unsigned flags) {
  float g = grad[j] * c.grad_scale;
  float pj = p[j];
  if (flags & DECAY) {
    if (LAMP_ADAMW)
      pj = pj * c.decay;
    else
      g = g + c.decay * pj;
  }
  const float mj = m[j] * c.beta1 + c.one_minus_beta1 * g;
  const float vj = v[j] * c.beta2 + c.one_minus_beta2 * g * g;
  m[j] = mj;
  v[j] = vj;
  float vhat = vj;
  if (flags & AMSGRAD) vmax[j] = vhat = nan_max(vmax[j], vj);
  /* x / 1 == x exactly: late in training bc2 rounds to 1 and the division goes away. */
  const float root = (flags & UNIT_BC2) ? sqrtf(vhat) : sqrtf(vhat) / c.bc2_sqrt;
  p[j] = pj + c.neg_step_size * mj / (root + c.eps);
}

#define BLOCK 8

/*
** Each call site passes literal flags, so every configuration compiles to its own loop free of
** control flow; fixed-size blocks let the compiler vectorise it even at -O2 (sqrtf vectorises
** because the plugin is built with -fno-math-errno: v is never negative).
*/
INLINE void kernel(float *restrict p, const float *restrict grad, float *restrict m,
                   float *restrict v, float *restrict vmax, size_t n, const coeffs c,
                   const unsigned flags) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = i; j < i + BLOCK; j++) update(p, grad, m, v, vmax, j, c, flags);
  for (; i < n; i++) update(p, grad, m, v, vmax, i, c, flags);
}

#define KERNEL_CASE(flags)                                                                         \
  case flags: kernel(p, grad, m, v, vmax, n, c, flags); return

/* Not inlined: its restrict parameters are what allow vectorising the kernels. */
__attribute__((noinline)) static void run_segment(float *restrict p, const float *restrict grad,
                                                  float *restrict m, float *restrict v,
                                                  float *restrict vmax, size_t n, const coeffs c,
                                                  unsigned flags) {
  switch (flags) {
    KERNEL_CASE(0);
    KERNEL_CASE(DECAY);
    KERNEL_CASE(AMSGRAD);
    KERNEL_CASE(AMSGRAD | DECAY);
    KERNEL_CASE(UNIT_BC2);
    KERNEL_CASE(UNIT_BC2 | DECAY);
    KERNEL_CASE(UNIT_BC2 | AMSGRAD);
    KERNEL_CASE(UNIT_BC2 | AMSGRAD | DECAY);
  }
}

static lamp_status check_step(adam *a, const lamp_optim_step *st) {
  if (st->struct_size < sizeof *st)
    return a->host->set_error(a->ctx, LAMP_ERR_INTERNAL, "step struct is %u bytes, need %zu",
                              (unsigned)st->struct_size, sizeof *st);
  if (st->device != LAMP_CPU)
    return a->host->set_error(a->ctx, LAMP_ERR_UNSUPPORTED, "device %u is not supported (cpu only)",
                              (unsigned)st->device);
  if (st->step == 0)
    return a->host->set_error(a->ctx, LAMP_ERR_INVALID_ARG,
                              "step counter is 0; the first step is 1");
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
  /* Once per step, in double, as PyTorch's Python-side scalars are. */
  const double t = (double)st->step;
  const double bc1 = 1.0 - pow(a->beta1, t);
  const float bc2_sqrt = (float)sqrt(1.0 - pow(a->beta2, t));
  const unsigned flags = (a->amsgrad ? AMSGRAD : 0) | (bc2_sqrt == 1.0f ? UNIT_BC2 : 0);
  for (size_t k = 0; k < st->n_segments; k++) {
    const lamp_optim_segment *seg = &st->segments[k];
    const double lr = st->lr * seg->lr_mult;
    const double wd = a->weight_decay * seg->decay_mult;
    const coeffs c = {
        .grad_scale = (float)st->grad_scale,
        .decay = LAMP_ADAMW ? (float)(1.0 - lr * wd) : (float)wd,
        .beta1 = (float)a->beta1,
        .one_minus_beta1 = (float)(1.0 - a->beta1),
        .beta2 = (float)a->beta2,
        .one_minus_beta2 = (float)(1.0 - a->beta2),
        .bc2_sqrt = bc2_sqrt,
        .eps = (float)a->eps,
        .neg_step_size = (float)-(lr / bc1),
    };
    const size_t o = seg->offset;
    float *vmax = (flags & AMSGRAD) ? st->slots[SLOT_VMAX] + o : NULL;
    run_segment(st->params + o, st->grads + o, st->slots[SLOT_M] + o, st->slots[SLOT_V] + o, vmax,
                seg->count, c, flags | (wd != 0.0 ? DECAY : 0));
  }
  return LAMP_OK;
}

/* }====================================================== */

static const lamp_optim_v1 adam_optim = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, NAME, "1.0", DESCRIPTION),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .params = adam_params,
            .n_params = P_COUNT, .probe = adam_probe},
    .create = adam_create,
    .destroy = adam_destroy,
    .slots = adam_slots,
    .step = adam_step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &adam_optim.hdr;
}
