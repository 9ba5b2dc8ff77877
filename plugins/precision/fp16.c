/*
** fp16: IEEE half precision for weights, GEMM inputs, activations and gradients; fp32 master
** weights and an fp32 gradient accumulation buffer; and a dynamic loss scaler, because fp16's
** smallest subnormal (5.96e-8) is far above many true gradients.
**
** The scaler is PyTorch's GradScaler state machine with its defaults (scale 2^16, x2 after
** 2000 consecutive clean steps, x0.5 on inf/NaN, the step skipped, never grown to inf; the
** scale kept as an fp32 value), plus what users of DeepSpeed and Megatron expect:
**   hysteresis  - back off only after this many overflows since the scale last grew (1: at once)
**   min_scale   - an overflow at the minimum scale stops training with an error (0: no floor)
**   dynamic = 0 - a static scale: overflowing steps are still skipped, the scale never moves
** and, as bf16, master_weights and stochastic_rounding (the core rounds updates into the fp16
** weights stochastically, LAMP_POLICY_STOCHASTIC_ROUNDING, ABI 1.4).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lamp/plugin.h"

enum { P_INIT_SCALE, P_GROWTH_FACTOR, P_BACKOFF_FACTOR, P_GROWTH_INTERVAL, P_HYSTERESIS, P_MIN_SCALE, P_DYNAMIC,
       P_MASTER_WEIGHTS, P_STOCHASTIC_ROUNDING, P_COUNT };

static const lamp_param params[P_COUNT] = {
    [P_INIT_SCALE] = {"init_scale", 65536.0, 0.0, 3.4028234663852886e38, "initial loss scale (2^16)"},
    [P_GROWTH_FACTOR] = {"growth_factor", 2.0, 1.0, 65536.0, "scale multiplier after growth_interval clean steps, > 1"},
    [P_BACKOFF_FACTOR] = {"backoff_factor", 0.5, 0.0, 1.0, "scale multiplier on overflow, in (0, 1)"},
    [P_GROWTH_INTERVAL] = {"growth_interval", 2000.0, 1.0, 1e9, "consecutive clean steps before the scale grows"},
    [P_HYSTERESIS] = {"hysteresis", 1.0, 1.0, 1e6, "overflows tolerated before backing off (DeepSpeed style)"},
    [P_MIN_SCALE] = {"min_scale", 1.0, 0.0, 3.4028234663852886e38, "an overflow at this scale stops training; 0: no floor"},
    [P_DYNAMIC] = {"dynamic", 1.0, 0.0, 1.0, "0: a static scale of init_scale"},
    [P_MASTER_WEIGHTS] = {"master_weights", 1.0, 0.0, 1.0, "keep fp32 master weights (0 rounds every update to fp16)"},
    [P_STOCHASTIC_ROUNDING] = {"stochastic_rounding", 0.0, 0.0, 1.0,
                               "round updates into the fp16 weights stochastically (unbiased) instead of to nearest"},
};

typedef struct scaler {
  const lamp_host *host;
  lamp_ctx *ctx;
  double growth_factor, backoff_factor; /* doubles, as torch._amp_update_scale_ takes them */
  float min_scale;
  uint64_t growth_interval, hysteresis;
  int dynamic, master_weights, stochastic_rounding;
  /* The state a checkpoint keeps. */
  float scale;
  uint64_t growth_tracker;  /* consecutive clean steps */
  uint64_t hysteresis_left; /* overflows still tolerated before the next backoff */
  uint64_t skipped;
} scaler;

static int fp16_probe(const lamp_host *h, char *reason, size_t reason_size) {
  (void)h;
  snprintf(reason, reason_size, "runs everywhere (16-bit storage, fp32 accumulation)");
  return 1;
}

static int is_integer(double v) { return v == floor(v); }

/* The bounds the declared (inclusive) ranges cannot say. */
static lamp_status check_values(const lamp_host *h, lamp_ctx *ctx, const double *p) {
  if (!((float)p[P_INIT_SCALE] > 0.0f) || !isfinite((float)p[P_INIT_SCALE])) /* as the fp32 scale */
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'init_scale' must be in (0, 3.40282e+38], got %g",
                        p[P_INIT_SCALE]);
  if (!(p[P_GROWTH_FACTOR] > 1.0))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'growth_factor' must be in (1, 65536], got %g",
                        p[P_GROWTH_FACTOR]);
  if (!(p[P_BACKOFF_FACTOR] > 0.0 && p[P_BACKOFF_FACTOR] < 1.0))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'backoff_factor' must be in (0, 1), got %g",
                        p[P_BACKOFF_FACTOR]);
  if (!is_integer(p[P_GROWTH_INTERVAL]))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'growth_interval' must be an integer in [1, 1e+09], got %g",
                        p[P_GROWTH_INTERVAL]);
  if (!is_integer(p[P_HYSTERESIS]))
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'hysteresis' must be an integer in [1, 1e+06], got %g",
                        p[P_HYSTERESIS]);
  if (p[P_DYNAMIC] != 0.0 && p[P_DYNAMIC] != 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'dynamic' must be a boolean (0 or 1), got %g", p[P_DYNAMIC]);
  if (p[P_MASTER_WEIGHTS] != 0.0 && p[P_MASTER_WEIGHTS] != 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'master_weights' must be a boolean (0 or 1), got %g",
                        p[P_MASTER_WEIGHTS]);
  if (p[P_STOCHASTIC_ROUNDING] != 0.0 && p[P_STOCHASTIC_ROUNDING] != 1.0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'stochastic_rounding' must be a boolean (0 or 1), got %g",
                        p[P_STOCHASTIC_ROUNDING]);
  if (p[P_MIN_SCALE] > p[P_INIT_SCALE])
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "option 'min_scale' (%g) must not exceed init_scale (%g)",
                        p[P_MIN_SCALE], p[P_INIT_SCALE]);
  return LAMP_OK;
}

static lamp_status fp16_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  *state = NULL;
  lamp_status st = check_values(h, ctx, p);
  if (st != LAMP_OK) return st;
  scaler *s = calloc(1, sizeof *s);
  if (s == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->host = h;
  s->ctx = ctx;
  s->scale = (float)p[P_INIT_SCALE];
  s->growth_factor = p[P_GROWTH_FACTOR];
  s->backoff_factor = p[P_BACKOFF_FACTOR];
  s->growth_interval = (uint64_t)p[P_GROWTH_INTERVAL];
  s->hysteresis = s->hysteresis_left = (uint64_t)p[P_HYSTERESIS];
  s->min_scale = (float)p[P_MIN_SCALE];
  s->dynamic = p[P_DYNAMIC] != 0.0;
  s->master_weights = p[P_MASTER_WEIGHTS] != 0.0;
  s->stochastic_rounding = p[P_STOCHASTIC_ROUNDING] != 0.0;
  *state = s;
  return LAMP_OK;
}

static void fp16_destroy(void *state) { free(state); }

static lamp_status fp16_policy(void *state, lamp_precision_policy *out) {
  const scaler *s = state;
  const lamp_precision_policy policy = {
      .struct_size = sizeof policy,
      .weight_dtype = LAMP_F16,
      .compute_dtype = LAMP_F16,
      .activation_dtype = LAMP_F16,
      .grad_dtype = LAMP_F32, /* the weight-gradient GEMM accumulates in fp32 straight into the buffer */
      .accum_dtype = LAMP_F32,
      .flags = LAMP_POLICY_LOSS_SCALING | (s->master_weights ? LAMP_POLICY_MASTER_WEIGHTS : 0u) |
               (s->stochastic_rounding ? LAMP_POLICY_STOCHASTIC_ROUNDING : 0u),
  };
  lamp_struct_copy_out(out, &policy, sizeof policy);
  return LAMP_OK;
}

static double fp16_loss_scale(void *state) { return ((const scaler *)state)->scale; }

/* An overflow: back off once the hysteresis is used up, unless the floor is reached. */
static lamp_status on_overflow(scaler *s) {
  s->growth_tracker = 0;
  if (s->hysteresis_left > 1) {
    s->hysteresis_left--;
    return LAMP_OK;
  }
  if (s->min_scale > 0.0f && s->scale <= s->min_scale)
    return s->host->set_error(s->ctx, LAMP_ERR_NUMERIC,
                              "gradients overflow at the minimum loss scale %g (min_scale); training cannot continue "
                              "(%llu steps skipped; lower the learning rate, or lower min_scale)",
                              (double)s->scale, (unsigned long long)s->skipped);
  float next = (float)(s->scale * s->backoff_factor); /* formed in double, rounded once, as PyTorch */
  /* Without a floor PyTorch's scale can reach 0, where it can never grow back: stop instead. */
  if (next == 0.0f)
    return s->host->set_error(s->ctx, LAMP_ERR_NUMERIC,
                              "gradients still overflow after the loss scale fell to %g; training cannot continue "
                              "(%llu steps skipped; lower the learning rate)",
                              (double)s->scale, (unsigned long long)s->skipped);
  s->scale = next < s->min_scale ? s->min_scale : next;
  return LAMP_OK;
}

/* A clean step: grow after growth_interval of them in a row, never to inf. */
static void on_clean_step(scaler *s) {
  if (++s->growth_tracker < s->growth_interval) return;
  float next = (float)(s->scale * s->growth_factor);
  if (isfinite(next)) s->scale = next;
  s->growth_tracker = 0;
  s->hysteresis_left = s->hysteresis;
}

static lamp_status fp16_update(void *state, int found_inf, int *skip_step) {
  scaler *s = state;
  *skip_step = found_inf != 0;
  if (!found_inf) {
    if (s->dynamic) on_clean_step(s);
    return LAMP_OK;
  }
  s->skipped++;
  return s->dynamic ? on_overflow(s) : LAMP_OK;
}

static lamp_status fp16_stats(void *state, lamp_scaler_stats *out) {
  const scaler *s = state;
  const lamp_scaler_stats stats = {
      .struct_size = sizeof stats, .scale = s->scale, .skipped_steps = s->skipped, .growth_tracker = s->growth_tracker};
  lamp_struct_copy_out(out, &stats, sizeof stats);
  return LAMP_OK;
}

/* Checkpoint layout: a tag, then the four counters, all little-endian as this process has them. */
typedef struct saved_state {
  char tag[8]; /* "fp16sc1" */
  double scale;
  uint64_t growth_tracker, hysteresis_left, skipped;
} saved_state;

static lamp_status fp16_save_state(void *state, void *buf, size_t *size) {
  const scaler *s = state;
  if (buf == NULL || *size < sizeof(saved_state)) {
    if (buf != NULL)
      return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "scaler state needs %zu bytes, got %zu",
                                sizeof(saved_state), *size);
    *size = sizeof(saved_state);
    return LAMP_OK;
  }
  saved_state saved = {"fp16sc1", s->scale, s->growth_tracker, s->hysteresis_left, s->skipped};
  memcpy(buf, &saved, sizeof saved);
  *size = sizeof saved;
  return LAMP_OK;
}

static lamp_status fp16_load_state(void *state, const void *buf, size_t size) {
  scaler *s = state;
  saved_state saved;
  if (size != sizeof saved)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "scaler state is %zu bytes, expected %zu", size,
                              sizeof saved);
  memcpy(&saved, buf, sizeof saved);
  if (memcmp(saved.tag, "fp16sc1", 8) != 0)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "scaler state was not written by fp16");
  if (!(saved.scale > 0.0) || !isfinite((float)saved.scale))
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "saved loss scale %g is not a positive fp32 value",
                              saved.scale);
  s->scale = (float)saved.scale;
  s->growth_tracker = saved.growth_tracker;
  s->hysteresis_left = saved.hysteresis_left;
  s->skipped = saved.skipped;
  return LAMP_OK;
}

static const lamp_precision_v1 fp16 = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "fp16", "1.0",
                               "fp16 storage and GEMM inputs, fp32 masters and accumulation, dynamic loss scaling"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA),
            .dtypes = LAMP_BIT(LAMP_F16) | LAMP_BIT(LAMP_F32),
            .params = params,
            .n_params = P_COUNT,
            .probe = fp16_probe},
    .create = fp16_create,
    .destroy = fp16_destroy,
    .policy = fp16_policy,
    .loss_scale = fp16_loss_scale,
    .update = fp16_update,
    .stats = fp16_stats,
    .save_state = fp16_save_state,
    .load_state = fp16_load_state,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &fp16.hdr;
}
