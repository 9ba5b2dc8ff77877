/*
** What the optimizer plugins' steps share on the host side: the checks every step makes, the
** members of lamp_optim_step a core older than these headers does not pass, and, in a build with
** the CUDA steps (LAMP_OPTIM_CUDA=1, where the toolkit was found), their entry points.
*/
#ifndef LAMP_OPTIM_STEP_H
#define LAMP_OPTIM_STEP_H

#include <stdint.h>

#include "lamp/plugin.h"

#ifndef LAMP_OPTIM_CUDA
#define LAMP_OPTIM_CUDA 0
#endif

/* The devices whose memory the step takes: the CUDA step exists only where it was built. */
#if LAMP_OPTIM_CUDA
#define LAMP_OPTIM_DEVICES (LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA))
#define LAMP_OPTIM_DEVICE_NAMES "cpu and cuda"
#else
#define LAMP_OPTIM_DEVICES LAMP_BIT(LAMP_CPU)
#define LAMP_OPTIM_DEVICE_NAMES "cpu only"
#endif

/* Whether the core's step struct has `member`: a 1.0 core's ends at hparams, a 1.1 core's at
   stream. */
#define LAMP_STEP_HAS(st, member)                                                                  \
  (offsetof(lamp_optim_step, member) + sizeof((st)->member) <= (st)->struct_size)

/* The 16-bit weights to write in the same pass, or NULL (absent before ABI 1.2). */
static inline uint16_t *lamp_optim_weights_out(const lamp_optim_step *st) {
  return LAMP_STEP_HAS(st, weights_out_dtype) ? (uint16_t *)st->weights_out : NULL;
}

/* The core's queue for a queued device (NULL: the default stream; absent before ABI 1.1). */
static inline void *lamp_optim_stream(const lamp_optim_step *st) {
  return LAMP_STEP_HAS(st, stream) ? st->stream : NULL;
}

/* The checks every optimizer's step makes before touching memory. */
static inline lamp_status lamp_optim_check_step(const lamp_host *h, lamp_ctx *ctx,
                                                const lamp_optim_step *st) {
  const size_t need = offsetof(lamp_optim_step, hparams) + sizeof st->hparams;
  if (st->struct_size < need)
    return h->set_error(ctx, LAMP_ERR_INTERNAL, "step struct is %u bytes, need at least %zu",
                        (unsigned)st->struct_size, need);
  if (st->device >= LAMP_DEVICE_COUNT || (LAMP_OPTIM_DEVICES & LAMP_BIT(st->device)) == 0)
    return h->set_error(ctx, LAMP_ERR_UNSUPPORTED, "device %u is not supported (%s)",
                        (unsigned)st->device, LAMP_OPTIM_DEVICE_NAMES);
  if (st->step == 0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "step counter is 0; the first step is 1");
  if (lamp_optim_weights_out(st) != NULL && st->weights_out_dtype != LAMP_F16 &&
      st->weights_out_dtype != LAMP_BF16)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG,
                        "weights_out dtype must be f16 (1) or bf16 (2), got %u",
                        (unsigned)st->weights_out_dtype);
  return LAMP_OK;
}

#if LAMP_OPTIM_CUDA
#include "adam_update.h"
#include "sgd_update.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A plugin object's device side: the device table of its segments, as last uploaded. */
typedef struct lamp_optim_cuda lamp_optim_cuda;

/* At create: an empty device side, bound to the run's GPU when the run trains on one (no CUDA
   call otherwise, so a machine without a driver creates the CPU step as before). */
lamp_status lamp_optim_cuda_new(const lamp_host *h, lamp_ctx *ctx, lamp_optim_cuda **out);
void lamp_optim_cuda_free(lamp_optim_cuda *cu); /* NULL is a no-op */

/* The steps on device memory, enqueued on the step's stream; the scalars are the host's. */
lamp_status lamp_sgd_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                               const lamp_optim_step *st, const lamp_sgd_scalars *s,
                               unsigned flags);
lamp_status lamp_adam_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                const lamp_optim_step *st, const lamp_adam_scalars *s,
                                unsigned flags);

#ifdef __cplusplus
}
#endif
#endif

#endif
