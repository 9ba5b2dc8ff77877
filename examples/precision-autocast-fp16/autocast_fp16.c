/*
** autocast-fp16: a precision policy plugin in the manner of PyTorch's torch.autocast(float16)
** with a fixed loss scale, an example written against the installed headers alone.
**
** The weights stay fp32 and are what the optimizer updates: there is no second, master copy
** (the built-in fp16 keeps fp16 weights plus fp32 masters, 6 bytes a parameter; this keeps 4).
** GEMM inputs are rounded to fp16 (accumulation stays fp32) and activations are stored in fp16,
** which halves their memory. Weight gradients are fp32.
**
** fp16's smallest subnormal (6e-8) is above many true gradients, so the loss is multiplied by a
** fixed scale S (option `scale`) before the backward pass; the core divides it out inside the
** optimizer's pass. A step whose gradients overflowed (inf or NaN on any rank) is skipped and
** counted; the count is in trainer:stats().skipped_steps and is saved in checkpoints. The scale
** never moves: choose it so that skips are rare (the trainer stops after max_skipped skips in a
** row, 1000 by default, which says the scale is too large).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lamp/plugin.h>

enum { P_SCALE, P_COUNT };

static const lamp_param params[P_COUNT] = {
    [P_SCALE] = {"scale", 1024.0, 1.0, 16777216.0, "the fixed loss scale (2^10); overflowing steps are skipped"},
};

typedef struct autocast {
  const lamp_host *host;
  lamp_ctx *ctx;
  float scale;      /* an fp32 value, as the core multiplies the loss in fp32 */
  uint64_t skipped; /* steps skipped since the run began: the state a checkpoint keeps */
} autocast;

static int autocast_probe(const lamp_host *host, char *reason, size_t reason_size) {
  (void)host;
  snprintf(reason, reason_size, "runs everywhere (fp16 GEMM inputs and activations, fp32 weights)");
  return 1;
}

static lamp_status autocast_create(const lamp_host *host, lamp_ctx *ctx, const double *p, void **state) {
  autocast *s = calloc(1, sizeof *s);
  if (s == NULL) return host->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->host = host;
  s->ctx = ctx;
  s->scale = (float)p[P_SCALE]; /* the declared range [1, 2^24] is exact in fp32 for powers of 2 */
  *state = s;
  return LAMP_OK;
}

static void autocast_destroy(void *state) { free(state); }

static lamp_status autocast_policy(void *state, lamp_precision_policy *out) {
  (void)state;
  const lamp_precision_policy policy = {
      .struct_size = sizeof policy,
      .weight_dtype = LAMP_F32,     /* the optimizer updates these directly: no master copy */
      .compute_dtype = LAMP_F16,    /* GEMM inputs rounded to fp16, accumulated in fp32 */
      .activation_dtype = LAMP_F16,
      .grad_dtype = LAMP_F32,
      .accum_dtype = LAMP_F32,
      .flags = LAMP_POLICY_LOSS_SCALING,
  };
  /* Copies only what the core's (possibly older, shorter) struct holds. */
  lamp_struct_copy_out(out, &policy, sizeof policy);
  return LAMP_OK;
}

static double autocast_loss_scale(void *state) { return ((const autocast *)state)->scale; }

static lamp_status autocast_update(void *state, int found_inf, int *skip_step) {
  autocast *s = state;
  *skip_step = found_inf != 0;
  if (found_inf) s->skipped++;
  return LAMP_OK;
}

static lamp_status autocast_stats(void *state, lamp_scaler_stats *out) {
  const autocast *s = state;
  const lamp_scaler_stats stats = {
      .struct_size = sizeof stats, .scale = s->scale, .skipped_steps = s->skipped, .growth_tracker = 0};
  lamp_struct_copy_out(out, &stats, sizeof stats);
  return LAMP_OK;
}

/* Checkpoint layout: a tag naming the plugin and the layout's version, then the skip count. The
   scale is an option, not state: a resumed run takes the one it is given. */
typedef struct saved_state {
  char tag[8]; /* "acfp16", a NUL, and the layout version 1 */
  uint64_t skipped;
} saved_state;

static const char TAG[8] = "acfp16\0\1";

static lamp_status autocast_save_state(void *state, void *buf, size_t *size) {
  const autocast *s = state;
  if (buf == NULL) { /* the size query */
    *size = sizeof(saved_state);
    return LAMP_OK;
  }
  if (*size < sizeof(saved_state))
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "state needs %zu bytes, got %zu", sizeof(saved_state),
                              *size);
  saved_state saved;
  memcpy(saved.tag, TAG, sizeof saved.tag);
  saved.skipped = s->skipped;
  memcpy(buf, &saved, sizeof saved);
  *size = sizeof saved;
  return LAMP_OK;
}

static lamp_status autocast_load_state(void *state, const void *buf, size_t size) {
  autocast *s = state;
  saved_state saved;
  if (size != sizeof saved)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "saved state is %zu bytes, expected %zu", size,
                              sizeof saved);
  memcpy(&saved, buf, sizeof saved);
  if (memcmp(saved.tag, TAG, sizeof saved.tag) != 0)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "saved state was not written by autocast-fp16 1.0");
  s->skipped = saved.skipped;
  return LAMP_OK;
}

static const lamp_precision_v1 autocast_fp16 = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, "autocast-fp16", "1.0",
                               "fp32 weights without masters, fp16 GEMM inputs and activations, fixed loss scale"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA), /* a policy only decides: the core executes */
            .dtypes = LAMP_BIT(LAMP_F16) | LAMP_BIT(LAMP_F32),
            .params = params,
            .n_params = P_COUNT,
            .probe = autocast_probe},
    .create = autocast_create,
    .destroy = autocast_destroy,
    .policy = autocast_policy,
    .loss_scale = autocast_loss_scale,
    .update = autocast_update,
    .stats = autocast_stats,
    .save_state = autocast_save_state,
    .load_state = autocast_load_state,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &autocast_fp16.hdr;
}
