/*
** Optimizer plugins (family LAMP_KIND_OPTIM): the math of one update, fused over flat slabs.
** The core owns every buffer: it allocates the state slots the plugin declares (so every
** optimizer gets checkpointing and sharding for free), folds loss-scale and clipping into
** grad_scale, and applies the learning-rate schedule.
*/
#ifndef LAMP_OPTIM_H
#define LAMP_OPTIM_H

#include "lamp/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
** The most state slots a plugin may declare, and the only dtype the core allocates them in:
** lamp_optim_open refuses a plugin whose slots() asks for more than this, or for a slot that
** is not LAMP_F32 ("adam: declares 9 state slots, this core allows at most 8").
*/
#define LAMP_OPTIM_MAX_SLOTS 8

/* One state slot: a slab the size of the parameters, zero-initialised by the core. */
typedef struct lamp_optim_slot {
  const char *name; /* "momentum_buffer", "exp_avg" */
  uint32_t dtype;   /* lamp_dtype; LAMP_F32 in every built-in optimizer */
} lamp_optim_slot;

/* A contiguous run of elements sharing per-parameter options (parameter groups). */
typedef struct lamp_optim_segment {
  size_t offset;
  size_t count;
  float lr_mult;       /* multiplies the step's lr */
  float decay_mult;    /* multiplies weight_decay: 0 for biases and norm parameters */
} lamp_optim_segment;

/*
** ABI 1.4. One parameter tensor of the model: where its elements lie in the slabs, and its shape
** (row-major: shape[0] rows of shape[1] .. for a 2-D weight, out_features x in_features for a
** Linear layer). The core hands an optimizer the whole table at every step, in slab order, one
** entry per segment; the same table at every step of a run, so a plugin may key its own per-tensor
** state by index.
*/
typedef struct lamp_optim_tensor {
  const char *name;      /* the model's name for it: "0.weight", "2.bias" */
  uint32_t ndim;
  const int64_t *shape;  /* ndim sizes whose product is count */
  size_t offset;         /* first element in params, grads and every state slot */
  size_t count;
  size_t segment;        /* the segment covering it: its lr_mult and decay_mult apply */
} lamp_optim_tensor;

/* Everything one step needs. */
typedef struct lamp_optim_step {
  uint32_t struct_size;
  uint32_t device;           /* lamp_device of params, grads and the slabs slots points to;
                                the slots array, segments and hparams are host memory */
  size_t n;                  /* elements in each slab */
  float *params;             /* fp32 parameters or fp32 master weights, updated in place */
  const float *grads;        /* fp32 gradients, averaged over ranks, not yet scaled */
  float *const *slots;       /* the declared state slots, each n elements */
  const lamp_optim_segment *segments; /* cover [0, n) in order */
  size_t n_segments;
  uint64_t step;             /* 1 for the first step taken (skipped steps do not count) */
  double lr;                 /* the scheduled learning rate for this step */
  double grad_scale;         /* multiply every gradient by this first (1/S, clipping) */
  const double *hparams;     /* hdr.n_params values in declaration order */

  /*
  ** ABI 1.1. The queue to enqueue the step on where the device queues work (a cudaStream_t on
  ** cuda), NULL where the step runs now (cpu). On such a device the step must not synchronise:
  ** it returns once its work is enqueued, and the core orders the rest after it. The core sets
  ** struct_size, so a plugin built against 1.0 never reads this member; one built against 1.1
  ** that may meet a 1.0 core checks struct_size first.
  */
  void *stream;

  /*
  ** ABI 1.2. Where not NULL, the 16-bit copy of the parameters the layers read (n elements of
  ** weights_out_dtype, LAMP_F16 or LAMP_BF16, memory of `device`): the step writes each updated
  ** parameter there too, rounded to nearest even exactly as the core's conversion rounds, in the
  ** same pass, and the core then skips its own. The core passes it only to a plugin that declares
  ** LAMP_OPTIM_CAP_WEIGHTS_OUT.
  */
  void *weights_out;
  uint32_t weights_out_dtype;

  /*
  ** ABI 1.4. The tensor table (host memory; see lamp_optim_tensor): n_tensors entries covering
  ** [0, n) in order, or NULL and 0 where the caller has no model (a step built by hand). The core
  ** sets struct_size to its own size: a plugin that may meet an older core reads these only when
  ** struct_size reaches them.
  */
  const lamp_optim_tensor *tensors;
  size_t n_tensors;
} lamp_optim_step;

/* Whether the step reaching the plugin has `member` (a core older than the plugin's headers
   passes a shorter step). */
#define LAMP_OPTIM_STEP_HAS(step, member)                                                          \
  (offsetof(lamp_optim_step, member) + sizeof((step)->member) <= (step)->struct_size)

/* lamp_optim_v1.caps bits (ABI 1.2). */
#define LAMP_OPTIM_CAP_WEIGHTS_OUT 0x1u /* the step writes lamp_optim_step.weights_out */
/*
** The step is elementwise: each element's update reads that element of params, grads and the
** slots and the step's scalars, nothing else, and the step keeps no state of its own. On the CPU
** the core may then cut [0, n) into runs of elements and pass each as a step of its own (slabs
** and weights_out at the run's first element, segments cut to it, no tensor table), several at
** once on different threads; host->set_error may be called from any of them. A core that does
** not know the bit steps the whole slab, as it does for a plugin without it.
*/
#define LAMP_OPTIM_CAP_PIECEWISE 0x2u

typedef struct lamp_optim_v1 {
  lamp_plugin hdr;

  /* Required. hparams as declared in hdr.params. */
  lamp_status (*create)(const lamp_host *host, lamp_ctx *ctx, const double *hparams,
                        void **opt);
  void (*destroy)(void *opt); /* required; NULL is a no-op */

  /*
  ** Required. The state slots this configuration needs (Adam with amsgrad needs three):
  ** writes up to `max` entries into `out` and the total into *n. At most LAMP_OPTIM_MAX_SLOTS,
  ** each LAMP_F32; the core asks once right after create and refuses the object otherwise.
  */
  lamp_status (*slots)(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n);

  lamp_status (*step)(void *opt, const lamp_optim_step *step); /* required */

  /* ABI 1.2: LAMP_OPTIM_CAP_* bits; 0 (or a table built before 1.2) declares none. */
  uint32_t caps;

  /* ABI 1.4: text options (abi.h, lamp_text_param), read in create with host->option_text. */
  const lamp_text_param *text_params;
  uint32_t n_text_params;
} lamp_optim_v1;

#ifdef __cplusplus
}
#endif
#endif
