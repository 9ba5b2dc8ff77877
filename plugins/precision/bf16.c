/*
** bf16: bfloat16 for weights, GEMM inputs, activations and gradients; fp32 master weights and
** an fp32 gradient accumulation buffer. bf16 has fp32's exponent range, so gradients do not
** underflow and no loss scaling is needed: the scale is 1 and a step with inf/NaN gradients is
** not skipped silently (the trainer stops with an error instead).
**
** master_weights = 0 keeps no masters: every update is rounded into the bf16 weights, and one
** smaller than half their spacing is lost. stochastic_rounding = 1 asks the core to round
** stochastically instead (LAMP_POLICY_STOCHASTIC_ROUNDING, ABI 1.4): such updates then survive on
** average, which is what makes training without masters work.
*/
#include <stdio.h>
#include <stdlib.h>

#include "lamp/plugin.h"

enum { P_MASTER_WEIGHTS, P_STOCHASTIC_ROUNDING, P_COUNT };

static const lamp_param params[P_COUNT] = {
    [P_MASTER_WEIGHTS] = {"master_weights", 1.0, 0.0, 1.0, "keep fp32 master weights (0 rounds every update to bf16)"},
    [P_STOCHASTIC_ROUNDING] = {"stochastic_rounding", 0.0, 0.0, 1.0,
                               "round updates into the bf16 weights stochastically (unbiased) instead of to nearest"},
};

typedef struct policy_state {
  int master_weights, stochastic_rounding;
} policy_state;

static int bf16_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "runs everywhere (16-bit storage, fp32 accumulation)");
  return 1;
}

static lamp_status bf16_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  static const int booleans[] = {P_MASTER_WEIGHTS, P_STOCHASTIC_ROUNDING};
  for (size_t i = 0; i < sizeof booleans / sizeof booleans[0]; i++)
    if (p[booleans[i]] != 0.0 && p[booleans[i]] != 1.0)
      return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option '%s' must be a boolean (0 or 1), got %g",
                          params[booleans[i]].name, p[booleans[i]]);
  policy_state *s = malloc(sizeof *s);
  if (s == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->master_weights = p[P_MASTER_WEIGHTS] != 0.0;
  s->stochastic_rounding = p[P_STOCHASTIC_ROUNDING] != 0.0;
  *state = s;
  return LAMP_OK;
}

static void bf16_destroy(void *state) { free(state); }

static lamp_status bf16_policy(void *state, lamp_precision_policy *out) {
  const policy_state *s = state;
  const lamp_precision_policy policy = {
      .struct_size = sizeof policy,
      .weight_dtype = LAMP_BF16,
      .compute_dtype = LAMP_BF16,
      .activation_dtype = LAMP_BF16,
      .grad_dtype = LAMP_F32, /* the weight-gradient GEMM accumulates in fp32 straight into the buffer */
      .accum_dtype = LAMP_F32,
      .flags = (s->master_weights ? LAMP_POLICY_MASTER_WEIGHTS : 0u) |
               (s->stochastic_rounding ? LAMP_POLICY_STOCHASTIC_ROUNDING : 0u),
  };
  lamp_struct_copy_out(out, &policy, sizeof policy);
  return LAMP_OK;
}

static double bf16_loss_scale(void *state) {
  (void)state;
  return 1.0;
}

static lamp_status bf16_update(void *state, int found_inf, int *skip_step) {
  (void)state;
  (void)found_inf; /* no scaler to adjust: the trainer refuses to step on inf/NaN */
  *skip_step = 0;
  return LAMP_OK;
}

static lamp_status bf16_stats(void *state, lamp_scaler_stats *out) {
  (void)state;
  const lamp_scaler_stats stats = {.struct_size = sizeof stats, .scale = 1.0};
  lamp_struct_copy_out(out, &stats, sizeof stats);
  return LAMP_OK;
}

static const lamp_precision_v1 bf16 = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "bf16", "1.0",
                               "bf16 storage and GEMM inputs, fp32 masters and accumulation, no loss scaling"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA),
            .dtypes = LAMP_BIT(LAMP_BF16) | LAMP_BIT(LAMP_F32),
            .params = params,
            .n_params = P_COUNT,
            .probe = bf16_probe},
    .create = bf16_create,
    .destroy = bf16_destroy,
    .policy = bf16_policy,
    .loss_scale = bf16_loss_scale,
    .update = bf16_update,
    .stats = bf16_stats,
    .save_state = NULL, /* stateless beyond its options */
    .load_state = NULL,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &bf16.hdr;
}
