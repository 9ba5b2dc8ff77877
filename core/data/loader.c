#include "data/loader.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "tensor/memory.h"
#include "tensor/rng.h"

struct lamp_loader {
  lamp_dataset *ds;
  lamp_loader_config cfg;
  size_t n;        /* samples in the data set */
  size_t per_rank; /* ceil(n / world) */
  size_t *perm;    /* n entries: the epoch's permutation (only with shuffle) */
  size_t *order;   /* per_rank entries: this rank's samples for the epoch */
  size_t pos;      /* next position in order */
  int started;
  uint64_t epoch;         /* the epoch last started */
  size_t batches_done;    /* of that epoch */
  lamp_image_transform *tf; /* batch entries: the current batch's transforms (only with augment) */
  int ndim;                       /* of a batch: 1 + the sample's */
  int64_t shape[LAMP_MAX_DIMS];   /* of a full batch */
  lamp_tensor *x, *y;
};

static lamp_status check_config(const lamp_dataset *ds, const lamp_loader_config *cfg) {
  const char *name = lamp_dataset_name(ds);
  if (lamp_dataset_size(ds) == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "loader for %s: the data set is empty", name);
  if (cfg->batch == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "loader for %s: batch must be > 0", name);
  if (cfg->world < 1) return lamp_error(LAMP_ERR_INVALID_ARG, "loader for %s: world must be >= 1, got %d", name, cfg->world);
  if (cfg->rank < 0 || cfg->rank >= cfg->world)
    return lamp_error(LAMP_ERR_INVALID_ARG, "loader for %s: rank %d is outside [0, %d)", name, cfg->rank, cfg->world);
  if (cfg->augment.crop_pad != 0 || cfg->augment.flip) {
    char what[512];
    snprintf(what, sizeof what, "loader for %s", name);
    return lamp_augment_check(&cfg->augment, what);
  }
  return LAMP_OK;
}

/* The index buffers, tracked as data memory. */
static lamp_status alloc_buffers(lamp_loader *l) {
  l->order = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, l->per_rank * sizeof *l->order);
  if (l->order == NULL) return LAMP_ERR_SYSTEM;
  if (l->cfg.shuffle) {
    l->perm = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, l->n * sizeof *l->perm);
    if (l->perm == NULL) return LAMP_ERR_SYSTEM;
  }
  if (lamp_augment_enabled(&l->cfg.augment)) {
    l->tf = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, l->cfg.batch * sizeof *l->tf);
    if (l->tf == NULL) return LAMP_ERR_SYSTEM;
  }
  return LAMP_OK;
}

lamp_status lamp_loader_new(lamp_loader **out, lamp_dataset *ds, const lamp_loader_config *cfg) {
  if (out == NULL || ds == NULL || cfg == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "loader: output, data set and config are required");
  *out = NULL;
  lamp_status st = check_config(ds, cfg);
  if (st != LAMP_OK) return st;
  lamp_loader *l = calloc(1, sizeof *l);
  if (l == NULL) return lamp_error(LAMP_ERR_SYSTEM, "loader: out of memory");
  l->ds = lamp_dataset_retain(ds);
  l->cfg = *cfg;
  l->n = lamp_dataset_size(ds);
  l->per_rank = l->n / (size_t)cfg->world + (l->n % (size_t)cfg->world != 0);
  l->shape[0] = (int64_t)cfg->batch;
  l->ndim = 1 + lamp_dataset_sample_shape(ds, l->shape + 1);
  st = alloc_buffers(l);
  if (st != LAMP_OK) {
    lamp_loader_free(l);
    return st;
  }
  *out = l;
  return LAMP_OK;
}

void lamp_loader_free(lamp_loader *l) {
  if (l == NULL) return;
  lamp_tensor_release(l->x);
  lamp_tensor_release(l->y);
  lamp_mem_free(l->perm);
  lamp_mem_free(l->order);
  lamp_mem_free(l->tf);
  lamp_dataset_release(l->ds);
  free(l);
}

/* Fisher-Yates over [0, n) from a generator every rank seeds identically. */
static void shuffle(size_t *perm, size_t n, uint64_t seed) {
  lamp_rng rng;
  lamp_rng_seed(&rng, seed);
  for (size_t i = 0; i < n; i++) perm[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)lamp_rng_below(&rng, i);
    size_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

lamp_status lamp_loader_start_epoch(lamp_loader *l, uint64_t epoch) {
  if (l == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "loader: start_epoch on NULL");
  if (l->cfg.shuffle) shuffle(l->perm, l->n, l->cfg.seed + epoch);
  /* Position p of the padded order wraps around to p mod n; rank r owns r, r + world, ... */
  size_t world = (size_t)l->cfg.world;
  for (size_t k = 0; k < l->per_rank; k++) {
    size_t p = ((size_t)l->cfg.rank + k * world) % l->n;
    l->order[k] = l->cfg.shuffle ? l->perm[p] : p;
  }
  l->pos = 0;
  l->started = 1;
  l->epoch = epoch;
  l->batches_done = 0;
  return LAMP_OK;
}

/* The transforms of order[pos .. pos + b), each keyed by its global position in the epoch. */
static void draw_transforms(lamp_loader *l, size_t b) {
  for (size_t i = 0; i < b; i++) {
    uint64_t global = (uint64_t)l->cfg.rank + (uint64_t)(l->pos + i) * (uint64_t)l->cfg.world;
    lamp_augment_draw(&l->cfg.augment, l->cfg.seed, l->epoch, global, &l->tf[i]);
  }
}

lamp_status lamp_loader_next(lamp_loader *l, lamp_tensor **x, lamp_tensor **y, int *has_batch) {
  if (l == NULL || x == NULL || y == NULL || has_batch == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "loader: next needs a loader and x, y, has_batch outputs");
  *x = NULL;
  *y = NULL;
  *has_batch = 0;
  if (!l->started)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "loader for %s: lamp_loader_next before lamp_loader_start_epoch",
                      lamp_dataset_name(l->ds));
  size_t left = l->per_rank - l->pos;
  if (left == 0 || (l->cfg.drop_last && left < l->cfg.batch)) return LAMP_OK;
  size_t b = left < l->cfg.batch ? left : l->cfg.batch;
  int64_t shape[LAMP_MAX_DIMS];
  for (int i = 0; i < l->ndim; i++) shape[i] = l->shape[i];
  shape[0] = (int64_t)b;
  lamp_status st = lamp_tensor_ensure(&l->x, LAMP_F32, LAMP_HOST, l->ndim, shape, LAMP_MEM_DATA);
  if (st == LAMP_OK) st = lamp_tensor_ensure(&l->y, LAMP_I32, LAMP_HOST, 1, shape, LAMP_MEM_DATA);
  if (st == LAMP_OK && l->tf != NULL) draw_transforms(l, b);
  if (st == LAMP_OK) st = lamp_dataset_gather_transformed(l->ds, l->order + l->pos, b, l->tf, l->x, l->y);
  if (st != LAMP_OK) return st;
  l->pos += b;
  l->batches_done++;
  *x = l->x;
  *y = l->y;
  *has_batch = 1;
  return LAMP_OK;
}

lamp_status lamp_loader_position(const lamp_loader *l, uint64_t *epoch, size_t *next_batch) {
  if (l == NULL || epoch == NULL || next_batch == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "loader: position needs a loader and epoch, next_batch outputs");
  *epoch = l->started ? l->epoch : 0;
  *next_batch = l->started ? l->batches_done : 0;
  return LAMP_OK;
}

lamp_status lamp_loader_seek(lamp_loader *l, uint64_t epoch, size_t next_batch) {
  if (l == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "loader: seek on NULL");
  size_t batches = lamp_loader_batches_per_epoch(l);
  if (next_batch > batches)
    return lamp_error(LAMP_ERR_INVALID_ARG, "loader for %s: cannot seek to batch %zu of epoch %llu: an epoch has %zu batches",
                      lamp_dataset_name(l->ds), next_batch, (unsigned long long)epoch, batches);
  lamp_status st = lamp_loader_start_epoch(l, epoch);
  if (st != LAMP_OK) return st;
  /* Every batch before next_batch is full (only the last may be short), so this is exact. */
  size_t skip = next_batch * l->cfg.batch;
  l->pos = skip < l->per_rank ? skip : l->per_rank;
  l->batches_done = next_batch;
  return LAMP_OK;
}

size_t lamp_loader_batches_per_epoch(const lamp_loader *l) {
  size_t b = l->cfg.batch;
  return l->cfg.drop_last ? l->per_rank / b : l->per_rank / b + (l->per_rank % b != 0);
}

size_t lamp_loader_samples_per_rank(const lamp_loader *l) { return l->per_rank; }

const lamp_loader_config *lamp_loader_get_config(const lamp_loader *l) { return &l->cfg; }

lamp_dataset *lamp_loader_dataset(const lamp_loader *l) { return l->ds; }
