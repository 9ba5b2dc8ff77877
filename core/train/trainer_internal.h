/*
** The trainer's state, shared by the files of core/train that need it (the step in trainer.c,
** checkpoints in trainer_checkpoint.c). Nothing outside core/train includes this.
*/
#ifndef LAMP_TRAIN_TRAINER_INTERNAL_H
#define LAMP_TRAIN_TRAINER_INTERNAL_H

#include "backend/backend.h"
#include "train/grad_buckets.h"
#include "train/step_graph.h"
#include "train/trainer.h"
#include "train/trainer_metrics.h"
#include "train/zero_shards.h"

/* What a step tells the host: written on the device, read back in one copy (the step's one
   synchronisation; evaluate reads its first part after every batch). */
typedef struct lamp_step_report {
  double sumsq;      /* squared norm of the summed gradients, when clipping */
  double eval_loss;  /* evaluate: the batch's mean loss */
  size_t correct;    /* evaluate: rows whose prediction is the label */
  int32_t found_inf; /* a gradient is inf or NaN (checked under a loss scaler) */
  int32_t unused;
  double loss[];     /* the mean loss of each micro-step of the group, accum of them */
} lamp_step_report;

/* A host batch copied for its upload to the run device (trainer.c, on_device). */
typedef struct lamp_staged_batch {
  lamp_tensor *x, *y;   /* host copies of the caller's batch */
  lamp_event *uploaded; /* recorded after their upload: they may be refilled */
} lamp_staged_batch;

struct lamp_trainer {
  lamp_trainer_config config;
  lamp_model *model;
  lamp_precision_policy policy;
  double base_lr;
  /* The key of stochastic rounding's random words (lamp_model_update_weights): the config's seed,
     rank 0's under several ranks, the checkpoint's after a resume. */
  uint64_t rounding_seed;

  lamp_optim_slot slot_decls[LAMP_OPTIM_MAX_SLOTS];
  float *slots[LAMP_OPTIM_MAX_SLOTS]; /* [numel], or sharded [the shard's elements] */
  uint32_t n_slots;
  lamp_optim_segment *segments;
  size_t n_segments;
  lamp_optim_tensor *tensors; /* one per segment: the optimizer's view of the model (ABI 1.4) */

  lamp_tensor *dlogits;       /* gradient of the loss w.r.t. the model output */
  void *report;               /* lamp_step_report on the device, report_bytes */
  lamp_step_report *report_host;
  size_t report_bytes;
  int losses_counted;         /* micro-steps of the open group whose loss an epoch has counted */
  lamp_tensor *x_dev, *y_dev; /* the batch, copied to the run device when it is not there */
  lamp_staged_batch *staged;  /* one per micro-step of a group (accum): what it is uploaded from */
  lamp_grad_buckets buckets;  /* the all-reduce of the gradient slab, cut to overlap backward */
  lamp_zero_state zero;       /* the optimizer's state sharded over the ranks (shard_optimizer) */
  lamp_step_graphs graphs;    /* the micro-steps recorded as device graphs, where the run uses them */
  int micro;                  /* micro-steps done in the current accumulation group */
  uint64_t epochs_done;
  /* An epoch stopped early (max_steps) or restored from a checkpoint: the next call to
     lamp_trainer_train continues it at batch epoch_batches instead of starting a new one. */
  int epoch_open;
  uint64_t epoch_batches;     /* per-rank batches of the open epoch already trained on */
  uint64_t epoch_global_batch; /* samples per batch over all ranks when they were counted */
  lamp_trainer_stats stats;
  /* The run its checkpoint folders belong to (lamp_ckpt_run in core/checkpoint): 0 until its
     first save into a folder or its resume, which adopts the id of the folder resumed from. */
  uint64_t ckpt_run_id;
  lamp_run_metrics *metrics;  /* rank 0's record of the run, when the config names a file */
};

#endif
