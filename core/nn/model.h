/*
** A model: a root layer plus the flat slabs its parameters live in. Building enumerates the
** parameter declarations, allocates one slab per role at identical element offsets —
** weights (storage dtype), fp32 master weights (only when the policy keeps them), fp32
** gradients — initialises the weights from a seed, and binds views into the layers.
** Forward/backward keep the activation buffers (charged to the ledger as activations).
*/
#ifndef LAMP_NN_MODEL_H
#define LAMP_NN_MODEL_H

#include "nn/layer.h"

typedef struct lamp_model lamp_model;

typedef struct lamp_model_config {
  lamp_device device;
  lamp_dtype weight_dtype;     /* storage of the weights forward reads */
  lamp_dtype compute_dtype;
  lamp_dtype activation_dtype;
  int master_weights;          /* keep an fp32 master slab the optimizer updates */
  uint64_t seed;               /* parameter initialisation */
  lamp_dtype grad_dtype;       /* parameter gradients are produced in this dtype (f32 default) */
  int stochastic_rounding;     /* 16-bit weights: updates are rounded in stochastically (see
                                  lamp_model_update_weights); the layers then always read them */
  /* The optimizer's fp32 values are kept sharded outside the model (the trainer's ZeRO-1): the
     slabs hold a multiple of slab_multiple elements (the tail past numel zero), the layers read
     the weights slab (keep_f32 parameters a packed fp32 slab: lamp_model_kept), and
     lamp_model_release_master drops the master slab once it has served the initialisation.
     0 or 1: unsharded. */
  int slab_multiple;
} lamp_model_config;

/* One parameter tensor's place in the slabs. */
typedef struct lamp_model_param {
  char name[96];               /* "0.weight" */
  size_t offset;               /* elements */
  size_t count;
  int ndim;
  int64_t shape[LAMP_MAX_DIMS];
  int decay;
  int keep_f32;                /* read in fp32 under every policy (see lamp_param_decl) */
} lamp_model_param;

/* One buffer's place in the fp32 buffer slab (running statistics and the like). */
typedef struct lamp_model_buffer {
  char name[96];               /* "1.running_mean" */
  size_t offset;               /* elements */
  size_t count;
  int ndim;
  int64_t shape[LAMP_MAX_DIMS];
} lamp_model_buffer;

/* Retains root. The model is unusable until built. */
lamp_status lamp_model_new(lamp_model **out, lamp_layer *root);
void lamp_model_free(lamp_model *model);

lamp_status lamp_model_build(lamp_model *model, const lamp_model_config *config);
int lamp_model_is_built(const lamp_model *model);
const lamp_model_config *lamp_model_get_config(const lamp_model *model); /* NULL until built */
lamp_layer *lamp_model_root(const lamp_model *model);

size_t lamp_model_numel(const lamp_model *model);       /* parameters, in elements */
size_t lamp_model_n_params(const lamp_model *model);    /* parameter tensors */
const lamp_model_param *lamp_model_param_at(const lamp_model *model, size_t i);

/*
** Buffers: one fp32 slab [n] holding every buffer the layers declare, packed in declaration
** order (charged to the ledger as params); NULL when the model has none. Forward in training
** mode updates it (BatchNorm's running statistics); a data-parallel trainer broadcasts it from
** rank 0 and a checkpoint saves it.
*/
lamp_tensor *lamp_model_buffers(const lamp_model *model);
size_t lamp_model_n_buffers(const lamp_model *model);
const lamp_model_buffer *lamp_model_buffer_at(const lamp_model *model, size_t i);

/* Training forwards so far, which stochastic layers (Dropout) derive their masks from: a
   checkpoint saves it and a resume sets it back, so masks continue as in an unbroken run. */
uint64_t lamp_model_forward_index(const lamp_model *model);
void lamp_model_set_forward_index(lamp_model *model, uint64_t index);
/* The exec.host_slot of the next forwards (layer.h): the trainer's micro-step in its group. */
void lamp_model_set_host_slot(lamp_model *model, unsigned slot);

/* The weight_dtype slab [numel], brought up to date with the masters first if it lags them;
   its data is current until the next optimizer step. */
lamp_tensor *lamp_model_weights(lamp_model *model);
lamp_tensor *lamp_model_master(const lamp_model *model);  /* f32 slab, NULL without masters */

/* Elements each slab holds: numel, rounded up to the config's slab_multiple. */
size_t lamp_model_slab_numel(const lamp_model *model);

/*
** Sharded training (slab_multiple > 1) only: frees the master slab, whose values the caller has
** taken. Afterwards lamp_model_trainable is NULL under a 16-bit policy, and the caller writes the
** weights slab itself (sync_weights and update_weights have nothing to round from).
*/
lamp_status lamp_model_release_master(lamp_model *model);

/*
** Sharded with 16-bit weights, the keep_f32 parameters (BatchNorm's) are read from a packed fp32
** slab of their own, whole on every rank. lamp_model_kept: parameter i's values there (NULL for
** any other parameter or model); lamp_model_load_kept: all of them from a whole fp32 slab laid
** out as the masters (sync_weights does it from the masters while they exist).
*/
float *lamp_model_kept(const lamp_model *model, size_t i);
lamp_status lamp_model_load_kept(lamp_model *model, const float *fp32);
lamp_tensor *lamp_model_grads(const lamp_model *model);   /* f32 slab [numel] */

/*
** The fp32 slab the optimizer updates: the master slab when present, else the fp32 weights;
** for 16-bit weights without masters, a staging slab that lamp_model_begin_update fills from
** the (rounded) weights before each update.
*/
float *lamp_model_trainable(const lamp_model *model);

/* Before an optimizer step: loads the staging slab from the 16-bit weights (no-op otherwise). */
lamp_status lamp_model_begin_update(lamp_model *model);

/* Rounds the masters (or the staging slab) to nearest into the 16-bit weights: the initial
   weights, and after an update without stochastic rounding. */
lamp_status lamp_model_sync_weights(lamp_model *model);

/*
** After optimizer step `step` (1, 2, ...): the 16-bit weights from the fp32 slab the optimizer
** updated. Under stochastic rounding (the config's flag) with the random words of
** lamp_round_stochastic(seed, stream = step) by element of the slab, so that the same seed and
** step give the same weights on every device; step 0 (no update yet) and every step without the
** flag round to nearest, as lamp_model_sync_weights.
*/
lamp_status lamp_model_update_weights(lamp_model *model, uint64_t seed, uint64_t step);

/*
** The 16-bit slab an optimizer step may write in the same pass as its update (its weights_out,
** ABI 1.2) with *dtype set to its dtype: the conversion sync_weights would make next, over the
** whole slab. NULL where sync_weights converts nothing (fp32 weights, or layers that read the
** masters) and under stochastic rounding, which the core does itself (update_weights). A caller
** whose step wrote it skips the update's rounding for that step.
*/
void *lamp_model_weights_out(const lamp_model *model, lamp_dtype *dtype);

lamp_status lamp_model_zero_grads(lamp_model *model);

/*
** Runs forward; *y is owned by the model and valid until the next forward. The model keeps
** the pointer x (borrowed, not retained) for backward: x must stay alive and unchanged until
** lamp_model_backward has run.
*/
lamp_status lamp_model_forward(lamp_model *model, const lamp_tensor *x, int training,
                               const lamp_tensor **y);

/*
** Backward from dy = dL/dy of the last forward (dy shaped like *y, any float dtype);
** accumulates into the gradient slab, so two calls without lamp_model_zero_grads add up.
*/
lamp_status lamp_model_backward(lamp_model *model, const lamp_tensor *dy);

/* The same, but the gradient slab receives this backward's gradients instead of adding them:
   the first micro-step of an accumulation group needs no zeroing pass before it. */
lamp_status lamp_model_backward_fresh(lamp_model *model, const lamp_tensor *dy);

/*
** The general form: `fresh` as lamp_model_backward_fresh; grads_ready (may be NULL) is called
** with ctx as the gradients of parameters first_param.. become final, last layer first, and
** once more with 0 at the end whatever the layers did.
*/
lamp_status lamp_model_backward_ex(lamp_model *model, const lamp_tensor *dy, int fresh,
                                   void (*grads_ready)(void *ctx, size_t first_param), void *ctx);

#endif
