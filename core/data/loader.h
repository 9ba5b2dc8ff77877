/*
** The loader: an epoch's sample order (shuffled or not), this rank's shard of it, and batches
** gathered into tensors the loader owns.
**
** Sharding follows PyTorch's DistributedSampler so runs compare one to one: the order is a
** permutation of [0, n) (the identity without shuffle) drawn from lamp_rng seeded with
** seed + epoch, the same on every rank; it is padded by wrapping around to
** ceil(n / world) * world positions, and rank r takes positions r, r + world, r + 2 world, ...
** Every rank therefore gets the same number of samples and the same number of batches, which
** the all-reduce in every step needs.
**
** Augmentation (cfg.augment, data/augment.h) transforms each sample as it is gathered, from a
** random stream keyed by (seed, epoch, global position): position rank + k * world of the
** padded order for this rank's k-th sample. Leave it zeroed for evaluation loaders.
**
** Resuming: lamp_loader_position says where an epoch stands; lamp_loader_seek in a fresh
** loader with the same data set and config continues with exactly the batches, the samples and
** the augmentation an uninterrupted run would have produced next.
*/
#ifndef LAMP_DATA_LOADER_H
#define LAMP_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "tensor/tensor.h"

typedef struct lamp_loader_config {
  size_t batch;  /* > 0 */
  int shuffle;   /* reshuffle every epoch from seed + epoch */
  int drop_last; /* drop the final partial batch */
  uint64_t seed;
  int rank, world; /* DistributedSampler: world 1 = everything; 0 <= rank < world */
  lamp_augment augment; /* zeroed: none */
} lamp_loader_config;

typedef struct lamp_loader lamp_loader;

/* Validates cfg and retains ds. No epoch is started yet. */
lamp_status lamp_loader_new(lamp_loader **out, lamp_dataset *ds, const lamp_loader_config *cfg);
void lamp_loader_free(lamp_loader *l); /* NULL is a no-op */

/* Starts epoch `epoch` (0-based): computes this rank's index order and rewinds. */
lamp_status lamp_loader_start_epoch(lamp_loader *l, uint64_t epoch);

/*
** The epoch's next batch: *x (f32 [b, sample shape...], e.g. [b, 1, 28, 28]) and *y (i32 [b])
** belong to the loader and stay valid until the next call (retain them to keep them longer).
** At the end of the epoch *has_batch = 0 and *x, *y are NULL. Calling it before
** lamp_loader_start_epoch is an error.
*/
lamp_status lamp_loader_next(lamp_loader *l, lamp_tensor **x, lamp_tensor **y, int *has_batch);

/*
** Where the loader stands: the epoch last started (0 before any) and how many of its batches
** have been handed out (0 .. batches_per_epoch). Save both in a checkpoint.
*/
lamp_status lamp_loader_position(const lamp_loader *l, uint64_t *epoch, size_t *next_batch);

/*
** Starts epoch `epoch` and skips its first next_batch batches without gathering them, so the
** next lamp_loader_next returns batch next_batch (0-based) exactly as an uninterrupted epoch
** would, augmentation included. next_batch == batches_per_epoch is allowed (the epoch is over);
** more is an error that changes nothing.
*/
lamp_status lamp_loader_seek(lamp_loader *l, uint64_t epoch, size_t next_batch);

size_t lamp_loader_batches_per_epoch(const lamp_loader *l);
/* ceil(n / world): the shard length of every rank, padding included. */
size_t lamp_loader_samples_per_rank(const lamp_loader *l);
const lamp_loader_config *lamp_loader_get_config(const lamp_loader *l);
lamp_dataset *lamp_loader_dataset(const lamp_loader *l);

#endif
