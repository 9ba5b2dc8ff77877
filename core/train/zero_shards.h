/*
** ZeRO-1: the optimizer's state and the fp32 master weights sharded over the ranks
** (lamp_trainer_config.shard_optimizer). The gradient buckets (grad_buckets.h) define the shard
** layout: every bucket is cut into one equal piece per rank, rank r owns piece r of each, and its
** shard is those pieces one after another. A step then runs, per rank:
**
**   reduce-scatter of each bucket (during backward) -> inf/NaN check and squared norm over the
**   own shard, combined over the ranks (lamp_zero_combine_report: every rank decides the same
**   skip and clip) -> the optimizer over each own piece (its segments cut to the piece) -> the
**   piece in the weights' storage dtype -> an all-gather per bucket: every rank holds the same
**   weights bit for bit.
**
** Checkpoints hold the whole state, as unsharded runs write it: saving all-gathers the shards
** into whole-slab buffers for the time of the save, resuming reads whole slabs and keeps the own
** pieces; so a checkpoint moves between sharded and unsharded runs of any world size.
*/
#ifndef LAMP_TRAIN_ZERO_SHARDS_H
#define LAMP_TRAIN_ZERO_SHARDS_H

#include <stddef.h>

#include "plugin/instance.h"

typedef struct lamp_trainer lamp_trainer;

typedef struct lamp_zero_state {
  int on;                      /* several ranks and shard_optimizer */
  int rank, world;
  float *master;               /* this rank's fp32 masters [shard], NULL where the fp32 weights are updated in place */
  lamp_optim_segment *cut;     /* scratch: the segments cut to one piece */
  unsigned char *kept_buckets; /* 16-bit weights: which buckets hold parameters read in fp32 (gathered in fp32) */
  float *wide;                 /* the fp32 all-gather of such a bucket [its count], or NULL */
  /* While a checkpoint is saved or resumed: the whole slabs (workspace), NULL otherwise. */
  float *full_master;
  float *full_slots[LAMP_OPTIM_MAX_SLOTS];
} lamp_zero_state;

/* Why this run cannot shard (after the ranks agreed on their settings), or LAMP_OK. */
lamp_status lamp_zero_check(lamp_trainer *t);

/* Once the buckets and the state slots exist: the own masters taken from the model's whole slab,
   which the model then frees. */
lamp_status lamp_zero_init(lamp_trainer *t);
void lamp_zero_free(lamp_zero_state *z);

/* The elements this rank owns (its shard, padding included): what each state slot holds. */
size_t lamp_zero_shard_numel(const lamp_trainer *t);

/* After each rank's report reached its host: found_inf or-ed and sumsq summed (in rank order)
   over the ranks, so every rank holds the whole slab's. */
lamp_status lamp_zero_combine_report(lamp_trainer *t);

/* The optimizer step over the own pieces and the all-gather of the updated weights. */
lamp_status lamp_zero_step(lamp_trainer *t, lamp_optim_step *step);

/* Checkpoints: the whole fp32 parameters and slot k as the checkpoint reads and writes them. */
float *lamp_zero_params(lamp_trainer *t);
float *lamp_zero_slot(lamp_trainer *t, uint32_t k);

/* open: whole-slab buffers (zeroed); gather: the shards into them (every rank); scatter: the own
   pieces back from them and the weights rounded from the whole masters; close: freed. */
lamp_status lamp_zero_open_full(lamp_trainer *t);
lamp_status lamp_zero_gather_full(lamp_trainer *t);
lamp_status lamp_zero_scatter_full(lamp_trainer *t);
void lamp_zero_close_full(lamp_trainer *t);

#endif
