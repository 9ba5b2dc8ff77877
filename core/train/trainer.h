/*
** The training step, usable from C without Lua. One optimizer step runs, in order:
**
**   forward -> loss (scaled by the precision policy's S, divided by the accumulation count)
**   -> backward (gradients accumulate in the fp32 slab) -> [last micro-step only]
**   all-reduce (sum, in buckets started as backward completes them) -> inf/NaN check (one read-only
**   pass, under a loss scaler; without one a NaN shows in the next loss, on every rank alike)
**   -> scaler update decides skip -> clip -> optimizer step on the fp32 slab, whose fused
**   pass also unscales (grad_scale = clip / (S*N)) -> refresh 16-bit weights.
** With shard_optimizer, the all-reduce is a reduce-scatter and the step runs over each rank's
** shard, followed by an all-gather of the weights (zero_shards.h).
**
** Gradients are all-reduced before the check, so every rank sees the same inf/NaN and makes
** the same skip decision without extra communication.
*/
#ifndef LAMP_TRAIN_TRAINER_H
#define LAMP_TRAIN_TRAINER_H

#include <stdint.h>

#include "data/loader.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "plugin/instance.h"
#include "train/schedule.h"

typedef struct lamp_trainer lamp_trainer;

/* The most micro-batches one optimizer step may accumulate. */
#define LAMP_TRAINER_MAX_ACCUM 65536
/* Whether micro-steps are recorded as device graphs and replayed (train/step_graph.h). */
typedef enum lamp_graphs_mode {
  LAMP_GRAPHS_AUTO = 0, /* where the device records graphs (cuda) and one rank trains */
  LAMP_GRAPHS_ON = 1,   /* the same, but a device or a run that cannot is an error */
  LAMP_GRAPHS_OFF = 2
} lamp_graphs_mode;

/* Optimizer steps skipped in a row that stop training when the config leaves max_skipped 0. */
#define LAMP_TRAINER_DEFAULT_MAX_SKIPPED 1000

typedef struct lamp_trainer_config {
  lamp_layer *model;          /* root layer; the trainer builds the model from it */
  lamp_loss *loss;
  lamp_precision *precision;  /* borrowed: must outlive the trainer */
  lamp_comm *comm;            /* borrowed */
  lamp_optim *optim;          /* borrowed */
  lamp_device device;
  int accum;                  /* micro-batches per optimizer step, in [1, LAMP_TRAINER_MAX_ACCUM] */
  double clip;                /* global-norm clipping threshold; 0 disables */
  lamp_schedule schedule;
  uint64_t seed;              /* parameter initialisation (rank 0's is broadcast) */
  double bucket_mb;           /* gradient bucket size for the all-reduce, MiB (0: 25, DDP's default) */
  lamp_dtype compress;        /* gradients on the wire: LAMP_F32 (default, none), LAMP_BF16 or LAMP_F16 */
  int64_t max_skipped;        /* this many optimizer steps skipped in a row (inf/NaN gradients) stop
                                 training with an error: 0 means LAMP_TRAINER_DEFAULT_MAX_SKIPPED,
                                 < 0 no limit */
  lamp_graphs_mode graphs;
  const char *metrics;        /* a JSON Lines file rank 0 records the run in (trainer_metrics.h,
                                 docs/metrics.md); NULL: none. Read by lamp_trainer_new only */
  int shard_optimizer;        /* ZeRO-1 over several ranks (zero_shards.h): each keeps 1/N of the
                                 optimizer state and fp32 masters; one rank trains unsharded */
} lamp_trainer_config;

typedef struct lamp_trainer_stats {
  uint64_t steps;             /* optimizer steps taken */
  uint64_t skipped_steps;     /* optimizer steps skipped on inf/NaN */
  uint64_t skipped_in_a_row;  /* of those, how many came last without a step taken in between */
  uint64_t micro_steps;       /* forward/backward passes */
  uint64_t samples;           /* samples seen by this rank */
  double last_loss;           /* mean loss of the last micro-batch (unscaled) */
  double grad_norm;           /* global norm of the last step's averaged, unscaled gradients
                                 (computed when clipping is on, else 0) */
  double lr;                  /* learning rate of the last step */
  double loss_scale;          /* current S */
  int world;                  /* ranks */
  size_t batch;               /* per-rank micro-batch size of the last step */
  size_t effective_batch;     /* B_eff = batch x ranks x accum */
  size_t buckets;             /* gradient buckets the all-reduce is cut into */
  size_t buckets_overlapped;  /* of the last step's, how many started before backward ended */
  int graphs;                 /* micro-steps are recorded as device graphs (may turn off: step_graph.h) */
  uint64_t graph_records;     /* micro-steps recorded (and launched) */
  uint64_t graph_replays;     /* micro-steps that replayed a recording */
} lamp_trainer_stats;

/* What one epoch measured. */
typedef struct lamp_epoch_result {
  double mean_loss;           /* over the epoch's micro-batches on this rank */
  uint64_t samples;           /* this rank */
  double seconds;
  double samples_per_second;  /* all ranks together */
  int epoch_done;             /* the epoch ended (lamp_trainer_train may stop before) */
  uint64_t steps;             /* optimizer steps this call finished, taken or skipped */
  uint64_t skipped_steps;     /* of those, skipped on inf/NaN gradients */
} lamp_epoch_result;

typedef struct lamp_eval_result {
  double mean_loss;
  double accuracy;            /* in [0, 1] */
  uint64_t samples;
} lamp_eval_result;

/*
** Collective when the communicator has several ranks: every rank must create its trainer, and the
** ranks must agree on what makes their steps one step: the precision plugin and its initial loss
** scale, the optimizer and each of its hyper-parameters, the model (parameter count, tensors and
** their names and shapes), accum, clip, the schedule, bucket_mb, compress and shard_optimizer. A mismatch is an
** error on every rank, naming the field and each rank's value ("Trainer: the ranks disagree on
** accum: rank 0 has 2, rank 1 has 4"). The seed is not compared: rank 0's initialisation is
** broadcast. The loader's side (batch, data set size, batches per epoch, shuffle, drop_last, its
** seed, max_steps) is compared when lamp_trainer_train starts, before its first step.
*/
lamp_status lamp_trainer_new(lamp_trainer **out, const lamp_trainer_config *config);
void lamp_trainer_free(lamp_trainer *t);

/* One micro-batch; takes an optimizer step when it completes an accumulation group. */
lamp_status lamp_trainer_step(lamp_trainer *t, const lamp_tensor *x, const lamp_tensor *y);

/*
** Trains on the loader until the epoch ends or, when max_steps > 0, until max_steps optimizer
** steps (taken or skipped) are done, whichever comes first; it stops only between optimizer
** steps. An epoch left open continues at its next batch on the next call (the epoch number is
** how many epochs this trainer has finished, so the loader's shuffle and augmentation match an
** uninterrupted run). With several ranks, the ranks first agree on the loader and max_steps (see
** lamp_trainer_new). A loader whose epoch has no batch is an error, not an epoch of loss 0.
*/
lamp_status lamp_trainer_train(lamp_trainer *t, lamp_loader *loader, uint64_t max_steps, lamp_epoch_result *result);

/* The rest of the current epoch: lamp_trainer_train without a step limit. */
lamp_status lamp_trainer_epoch(lamp_trainer *t, lamp_loader *loader, lamp_epoch_result *result);

/* Accuracy and loss without touching gradients or optimizer state. */
lamp_status lamp_trainer_evaluate(lamp_trainer *t, lamp_loader *loader, lamp_eval_result *result);

lamp_status lamp_trainer_stats_get(lamp_trainer *t, lamp_trainer_stats *out);

/*
** Parameter groups: per parameter tensor i (i < lamp_model_n_params), a learning-rate
** multiplier (>= 0) and whether weight decay applies. Defaults: 1, and the layer's own flag
** (weights decay, biases and norm parameters do not).
*/
lamp_status lamp_trainer_set_param_options(lamp_trainer *t, size_t i, double lr_mult, int decay);
lamp_status lamp_trainer_param_options(const lamp_trainer *t, size_t i, double *lr_mult, int *decay);
/*
** Checkpoints (core/train/trainer_checkpoint.c; format and folders in docs/checkpoint.md).
** Collective: every rank calls them; rank 0 alone touches files, the others wait for its verdict.
** Only between optimizer steps. The path written (or read) goes to `written` / `used` on every rank.
**   save      one file, written atomically (path.tmp, fsync, rename, fsync of the folder)
**   save_dir  <dir>/ckpt-<step>.lamp as this run (lamp_ckpt_save_run), keeping its `keep` newest
**             (keep <= 0: all), under the folder's lock (a second writer is refused naming its
**             pid). A run owns the folder it resumed from (or from a file in it) and the folders
**             it filled from empty, and never deletes another run's checkpoint: a folder holding
**             another run's complete checkpoints is refused, naming the folder and their newest
**             step, unless start_over, which moves them into <dir>/previous-<n> first.
**   resume    a file, or a folder's newest complete checkpoint; *found = 0 (and nothing
**             changed) for a missing folder or one without a checkpoint; a folder whose
**             checkpoints are all damaged is refused, naming each file and why. A checkpoint of
**             another model, precision or optimizer, or a precision state the plugin refuses,
**             is refused with its reason before anything is applied: on failure the trainer is
**             unchanged.
*/
lamp_status lamp_trainer_save(lamp_trainer *t, const char *path, char *written, size_t written_size);
lamp_status lamp_trainer_save_dir(lamp_trainer *t, const char *dir, int keep, int start_over, char *written,
                                  size_t written_size);
lamp_status lamp_trainer_resume(lamp_trainer *t, const char *path_or_dir, char *used, size_t used_size, int *found);

lamp_model *lamp_trainer_model(lamp_trainer *t);
uint64_t lamp_trainer_epochs_done(const lamp_trainer *t);

#endif
