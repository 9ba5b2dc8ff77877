/*
** The DistributedSampler across real ranks: run as `mpirun -n 2 test_sampler_mpi`. Each rank
** builds a loader with its rank and world from the mpi communicator over a tiny IDX data set
** whose samples spell their own index (pixel 0 = index % 256, pixel 1 = index / 256, label =
** index % 7), decodes the indices its batches hold and all-gathers them. Checked:
**   - every rank runs the same number of batches and samples (padding included);
**   - the shards are disjoint and cover the data set; with an odd size the padded tail wraps
**     around to the start of the permutation (PyTorch's rule) and nothing else repeats;
**   - the interleaved shards are exactly the seed + epoch permutation that a 1-rank loader
**     draws, which is the same on every rank; a different epoch gives a different one, and a
**     repeated epoch the same one;
**   - without shuffle, rank r gets r, r + world, ...; with drop_last, equal batch counts still.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "mpi_check.h"
#include "tensor/tensor.h"

#define BATCH 16
#define SEED 5
#define EPOCHS 3

static int rank, world;
static lamp_comm *comm;

/* ---- the data set --------------------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void write_file(const char *path, const uint8_t *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
    exit(1);
  }
}

/* <dir>/train-images-idx3-ubyte (n, 1, 2) and train-labels-idx1-ubyte (n): sample i spells i. */
static void write_index_dataset(const char *dir, uint32_t n) {
  mkdir(dir, 0755); /* each rank writes its own directory: no race */
  uint8_t *img = xmalloc(16 + 2 * (size_t)n), *lab = xmalloc(8 + (size_t)n);
  img[0] = img[1] = 0, img[2] = 0x08, img[3] = 3;
  put_be32(img + 4, n), put_be32(img + 8, 1), put_be32(img + 12, 2);
  lab[0] = lab[1] = 0, lab[2] = 0x08, lab[3] = 1;
  put_be32(lab + 4, n);
  for (uint32_t i = 0; i < n; i++) {
    img[16 + 2 * i] = (uint8_t)(i % 256);
    img[16 + 2 * i + 1] = (uint8_t)(i / 256);
    lab[8 + i] = (uint8_t)(i % 7);
  }
  char path[1100];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
  write_file(path, img, 16 + 2 * (size_t)n);
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
  write_file(path, lab, 8 + (size_t)n);
  free(img);
  free(lab);
}

static lamp_dataset *open_dataset(uint32_t n) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/sampler_mpi_n%u_rank%d", LAMP_TEST_TMP_DIR, n, rank);
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  write_index_dataset(dir, n);
  lamp_dataset *ds;
  OK(lamp_dataset_idx(&ds, dir, "train"));
  CHECK(lamp_dataset_size(ds) == n, "data set of %zu samples, expected %u", lamp_dataset_size(ds), n);
  return ds;
}

/* ---- one epoch's indices ---------------------------------------------------------------------- */

/*
** Runs the epoch and writes the decoded indices of this rank's samples, in order, to out
** (room for the shard length). Returns the number of samples; *batches counts the batches.
*/
static size_t epoch_indices(lamp_loader *l, uint64_t epoch, float *out, size_t room, size_t *batches) {
  OK(lamp_loader_start_epoch(l, epoch));
  size_t got = 0, bad_labels = 0;
  *batches = 0;
  for (;;) {
    lamp_tensor *x, *y;
    int has;
    OK(lamp_loader_next(l, &x, &y, &has));
    if (!has) break;
    (*batches)++;
    size_t b = (size_t)x->shape[0];
    const float *px = lamp_tensor_data(x);
    const int32_t *py = lamp_tensor_data(y);
    for (size_t i = 0; i < b; i++) {
      long idx = lrintf(px[2 * i] * 255.0f) + 256 * lrintf(px[2 * i + 1] * 255.0f);
      bad_labels += py[i] != idx % 7;
      if (got < room) out[got] = (float)idx;
      got++;
    }
  }
  CHECK(bad_labels == 0, "epoch %llu: %zu samples carry another sample's label", (unsigned long long)epoch, bad_labels);
  return got;
}

static lamp_loader *loader(lamp_dataset *ds, int shuffle, int drop_last, int r, int w) {
  lamp_loader *l;
  lamp_loader_config cfg = {.batch = BATCH, .shuffle = shuffle, .drop_last = drop_last, .seed = SEED,
                            .rank = r, .world = w};
  OK(lamp_loader_new(&l, ds, &cfg));
  return l;
}

/* The 1-rank order of an epoch (n entries), which the sharded ones must interleave to. */
static float *reference_order(lamp_dataset *ds, int shuffle, uint64_t epoch) {
  size_t n = lamp_dataset_size(ds), batches;
  lamp_loader *l = loader(ds, shuffle, 0, 0, 1);
  float *order = xmalloc(n * sizeof *order);
  CHECK(epoch_indices(l, epoch, order, n, &batches) == n, "the 1-rank loader did not yield %zu samples", n);
  lamp_loader_free(l);
  return order;
}

/*
** One data set size, shuffled or not: for each epoch, gathers every rank's shard and checks the
** partition, the padding and the agreement with the 1-rank permutation, then compares epochs.
*/
static void check_size(uint32_t n, int shuffle) {
  lamp_dataset *ds = open_dataset(n);
  lamp_loader *l = loader(ds, shuffle, 0, rank, world);
  size_t per_rank = lamp_loader_samples_per_rank(l), padded = per_rank * (size_t)world;
  CHECK(per_rank == (n + (size_t)world - 1) / (size_t)world, "n %u: shard length %zu", n, per_rank);
  float *mine = xmalloc(per_rank * sizeof *mine), *all = xmalloc(padded * sizeof *all);
  float *orders[EPOCHS];
  for (uint64_t e = 0; e < EPOCHS; e++) {
    size_t batches;
    size_t got = epoch_indices(l, e, mine, per_rank, &batches);
    CHECK(got == per_rank, "n %u epoch %llu: rank %d saw %zu samples, expected %zu", n, (unsigned long long)e, rank,
          got, per_rank);
    CHECK(batches == lamp_loader_batches_per_epoch(l), "n %u: %zu batches, the loader announced %zu", n, batches,
          lamp_loader_batches_per_epoch(l));
    float counts[2] = {(float)got, (float)batches};
    CHECK(same_on_all_ranks(comm, counts, sizeof counts),
          "n %u epoch %llu: ranks ran different numbers of samples or batches", n, (unsigned long long)e);
    all_gather_f32(comm, mine, all, per_rank);

    /* Interleave: padded position p = r + k world is rank r's k-th sample. */
    float *order = xmalloc(padded * sizeof *order);
    for (int r = 0; r < world; r++)
      for (size_t k = 0; k < per_rank; k++) order[(size_t)r + k * (size_t)world] = all[(size_t)r * per_rank + k];
    orders[e] = order;

    /* Disjoint and covering: positions [0, n) hold every index once... */
    int *seen = calloc(n, sizeof *seen);
    size_t out_of_range = 0, repeats = 0;
    for (size_t p = 0; p < n; p++) {
      long i = lrintf(order[p]);
      if (i < 0 || i >= (long)n) out_of_range++;
      else if (seen[i]++) repeats++;
    }
    CHECK(out_of_range == 0 && repeats == 0, "n %u epoch %llu: %zu indices out of range, %zu repeated in the first n",
          n, (unsigned long long)e, out_of_range, repeats);
    /* ... and the padding wraps around to the start: position p >= n repeats position p - n. */
    size_t bad_pad = 0;
    for (size_t p = n; p < padded; p++) bad_pad += order[p] != order[p - n];
    CHECK(bad_pad == 0, "n %u epoch %llu: %zu padded positions do not wrap around", n, (unsigned long long)e, bad_pad);
    /* Per rank: no index twice within a shard. */
    size_t dup_in_shard = 0;
    memset(seen, 0, n * sizeof *seen);
    for (size_t k = 0; k < per_rank; k++) {
      long i = lrintf(mine[k]);
      if (i >= 0 && i < (long)n && seen[i]++) dup_in_shard++;
    }
    CHECK(dup_in_shard == 0, "n %u: rank %d holds %zu indices twice", n, rank, dup_in_shard);
    free(seen);

    /* The same permutation as one rank's loader with the same seed and epoch ... */
    float *ref = reference_order(ds, shuffle, e);
    CHECK(memcmp(ref, order, n * sizeof *ref) == 0, "n %u epoch %llu: the shards do not interleave to the "
          "1-rank permutation of seed + epoch", n, (unsigned long long)e);
    /* ... which every rank draws identically. */
    CHECK(same_on_all_ranks(comm, ref, n * sizeof *ref), "n %u epoch %llu: ranks drew different permutations",
          n, (unsigned long long)e);
    free(ref);
    if (!shuffle) {
      size_t wrong = 0;
      for (size_t p = 0; p < padded; p++) wrong += lrintf(order[p]) != (long)(p % n);
      CHECK(wrong == 0, "n %u without shuffle: %zu positions out of order", n, wrong);
    }
  }
  /* Epochs: a new epoch reshuffles; the same epoch again gives the same order. */
  if (shuffle) {
    CHECK(memcmp(orders[0], orders[1], n * sizeof(float)) != 0 && memcmp(orders[1], orders[2], n * sizeof(float)) != 0,
          "n %u: consecutive epochs have the same permutation", n);
    size_t batches;
    epoch_indices(l, 1, mine, per_rank, &batches);
    int same = 1;
    for (size_t k = 0; k < per_rank; k++) same &= mine[k] == orders[1][(size_t)rank + k * (size_t)world];
    CHECK(same, "n %u: epoch 1 run twice gave rank %d different samples", n, rank);
  } else {
    CHECK(memcmp(orders[0], orders[1], n * sizeof(float)) == 0, "n %u: without shuffle the order changed", n);
  }
  if (rank == 0)
    printf("n %u, %s: %d ranks x %zu samples (%zu padded), %zu batches (batch %d); disjoint, covering, = the "
           "1-rank permutation of seed + epoch\n",
           n, shuffle ? "shuffled" : "in order", world, per_rank, padded - n, lamp_loader_batches_per_epoch(l), BATCH);
  for (int e = 0; e < EPOCHS; e++) free(orders[e]);
  free(mine);
  free(all);
  lamp_loader_free(l);

  /* drop_last: every rank still runs the same number of (full) batches. */
  lamp_loader *ld = loader(ds, shuffle, 1, rank, world);
  size_t batches;
  float *buf = xmalloc(per_rank * sizeof *buf);
  size_t got = epoch_indices(ld, 0, buf, per_rank, &batches);
  CHECK(batches == per_rank / BATCH && got == batches * BATCH, "n %u drop_last: %zu batches, %zu samples", n, batches,
        got);
  float counts[2] = {(float)got, (float)batches};
  CHECK(same_on_all_ranks(comm, counts, sizeof counts), "n %u drop_last: ranks ran different batch counts", n);
  free(buf);
  lamp_loader_free(ld);
  lamp_dataset_release(ds);
}



int main(void) {
  lamp_log_set_level(LAMP_LOG_WARN);
  OK(lamp_comm_open(&comm, "mpi", NULL, 0));
  rank = check_rank = lamp_comm_rank(comm);
  world = lamp_comm_size(comm);
  if (world < 2) {
    fprintf(stderr, "test_sampler_mpi needs at least 2 ranks (mpirun -n 2), got %d\n", world);
    lamp_comm_close(comm);
    return 1;
  }
  check_size(101, 1); /* odd: one padded sample with 2 ranks */
  check_size(600, 1); /* indices past 255 use the second pixel */
  check_size(601, 1);
  check_size(37, 0);
  int status = mpi_check_finish(comm, "test_sampler_mpi");
  lamp_comm_close(comm);
  return status;
}
