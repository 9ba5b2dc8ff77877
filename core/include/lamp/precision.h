/*
** Precision plugins (family LAMP_KIND_PRECISION): a policy saying which dtype each part of
** training uses, plus the loss-scaler state machine. The core executes the policy; the
** plugin only decides.
*/
#ifndef LAMP_PRECISION_H
#define LAMP_PRECISION_H

#include "lamp/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Policy flags. */
#define LAMP_POLICY_MASTER_WEIGHTS 0x1u /* keep fp32 master weights; the optimizer updates them */
#define LAMP_POLICY_LOSS_SCALING 0x2u   /* the plugin scales the loss; see loss_scale/update */
/*
** ABI 1.4. After every optimizer step the core rounds the fp32 values the optimizer updated (the
** masters, or without them the step's fp32 copy) into the 16-bit weights stochastically instead of
** to nearest: up with the probability of the fraction of the way to the next 16-bit value, so
** updates smaller than half the 16-bit spacing survive on average. The random bits come from a
** counter-based generator keyed by the Trainer's seed, the optimizer step and the element, so they
** are the same on every device and thread count, and a resumed run continues them bit for bit
** (the checkpoint's seed and step are all it needs). The initial weights are rounded to nearest.
** Needs 16-bit weights: with fp32 weights there is nothing to round and the Trainer refuses the
** policy. Cores before 1.4 ignore the flag and round to nearest.
*/
#define LAMP_POLICY_STOCHASTIC_ROUNDING 0x4u

typedef struct lamp_precision_policy {
  uint32_t struct_size;     /* set by the core before calling policy() */
  uint32_t weight_dtype;    /* storage dtype of the weights the forward pass reads */
  uint32_t compute_dtype;   /* dtype of GEMM/convolution inputs (accumulation is fp32) */
  uint32_t activation_dtype;/* dtype activations are stored in between layers */
  uint32_t grad_dtype;      /* dtype parameter gradients are produced in */
  uint32_t accum_dtype;     /* dtype of the gradient accumulation buffer */
  uint32_t flags;           /* LAMP_POLICY_* */
} lamp_precision_policy;

/* What the scaler reports to logs and trainer:stats(). */
typedef struct lamp_scaler_stats {
  uint32_t struct_size;
  double scale;             /* the current loss scale S (1 without scaling) */
  uint64_t skipped_steps;   /* steps skipped because of inf/NaN since creation */
  uint64_t growth_tracker;  /* consecutive clean steps since the last change of scale */
} lamp_scaler_stats;

typedef struct lamp_precision_v1 {
  lamp_plugin hdr;

  /* Required. `params` holds hdr.n_params validated values in declaration order. */
  lamp_status (*create)(const lamp_host *host, lamp_ctx *ctx, const double *params,
                        void **state);
  void (*destroy)(void *state); /* required; NULL state is a no-op */

  lamp_status (*policy)(void *state, lamp_precision_policy *out); /* required */

  /* The factor S the loss is multiplied by before backward; 1.0 without scaling. Required. */
  double (*loss_scale)(void *state);

  /*
  ** Called once per optimizer step, after the gradients were all-reduced and checked.
  ** found_inf says whether any gradient was inf/NaN on any rank; the plugin sets *skip_step
  ** when the optimizer must not step. Returns LAMP_ERR_NUMERIC (with a message) when training
  ** cannot continue, e.g. the scale fell below its minimum. Required.
  */
  lamp_status (*update)(void *state, int found_inf, int *skip_step);

  lamp_status (*stats)(void *state, lamp_scaler_stats *out); /* required */

  /*
  ** Optional (NULL: stateless). Serialise the scaler state for a checkpoint: with buf NULL,
  ** report the size needed in *size; otherwise write at most *size bytes.
  */
  lamp_status (*save_state)(void *state, void *buf, size_t *size);
  lamp_status (*load_state)(void *state, const void *buf, size_t size);

  /* ABI 1.4: text options (abi.h, lamp_text_param), read in create with host->option_text. */
  const lamp_text_param *text_params;
  uint32_t n_text_params;
} lamp_precision_v1;

#ifdef __cplusplus
}
#endif
#endif
