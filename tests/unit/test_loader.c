/*
** Data sets in memory and the loader: gather and its normalisation, subsets, and the
** DistributedSampler semantics (coverage, padding by wrap-around, equal shards, the same
** permutation on every rank, reshuffling per epoch). The fixture data set has label i for
** sample i, so a batch's y says exactly which samples it holds.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/loader"
#define ROWS 2
#define COLS 3
#define NUMEL (ROWS * COLS)

/* ---- fixtures --------------------------------------------------------------------------- */

static uint8_t pixel(size_t sample, size_t j) { return (uint8_t)(sample * 37 + j * 11 + 5); }

/* Raw IDX files for n samples of ROWS x COLS; sample i has label i and pixels pixel(i, j). */
static const char *write_dataset(uint32_t n) {
  static char dir[512];
  char path[600];
  snprintf(dir, sizeof dir, "%s/n%u", TMP, (unsigned)n);
  make_dir(dir);
  uint8_t *pixels = malloc((size_t)n * NUMEL), *labels = malloc(n);
  assert_true(pixels != NULL && labels != NULL);
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < NUMEL; j++) pixels[i * NUMEL + j] = pixel(i, j);
    labels[i] = (uint8_t)i;
  }
  const uint32_t image_dims[3] = {n, ROWS, COLS};
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
  write_idx_file(path, 3, image_dims, pixels, (size_t)n * NUMEL, 0);
  snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
  write_idx_file(path, 1, &n, labels, n, 0);
  free(pixels);
  free(labels);
  return dir;
}

static lamp_dataset *open_dataset(uint32_t n) {
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, write_dataset(n), "train"), LAMP_OK);
  return ds;
}

static lamp_loader *new_loader(lamp_dataset *ds, size_t batch, int shuffle, int drop_last, uint64_t seed, int rank,
                               int world) {
  lamp_loader_config cfg = {.batch = batch, .shuffle = shuffle, .drop_last = drop_last, .seed = seed, .rank = rank,
                            .world = world};
  lamp_loader *l;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_OK);
  return l;
}

static float expected_value(uint8_t p, float mean, float std) { return ((float)p / 255.0f - mean) / std; }

/*
** Runs one epoch and writes the sample order into order[] (at most cap); returns the count.
** Checks every batch: shape [b, 1, ROWS, COLS], b == batch except a final partial one, and
** x holding exactly the normalised pixels of the samples y names.
*/
static size_t run_epoch(lamp_loader *l, uint64_t epoch, size_t *order, size_t cap, size_t *batches) {
  const lamp_loader_config *cfg = lamp_loader_get_config(l);
  float mean, std;
  lamp_dataset_get_normalization(lamp_loader_dataset(l), &mean, &std);
  assert_int_equal(lamp_loader_start_epoch(l, epoch), LAMP_OK);
  size_t count = 0, nb = 0;
  int partial_seen = 0;
  for (;;) {
    lamp_tensor *x, *y;
    int has;
    assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
    if (!has) {
      assert_null(x);
      assert_null(y);
      break;
    }
    assert_false(partial_seen); /* only the last batch may be short */
    size_t b = (size_t)y->shape[0];
    assert_true(b >= 1 && b <= cfg->batch);
    if (b < cfg->batch) partial_seen = 1;
    assert_int_equal(x->dtype, LAMP_F32);
    assert_int_equal(y->dtype, LAMP_I32);
    assert_int_equal(x->ndim, 4);
    assert_int_equal(y->ndim, 1);
    assert_int_equal(x->shape[0], b);
    assert_int_equal(x->shape[1], 1);
    assert_int_equal(x->shape[2], ROWS);
    assert_int_equal(x->shape[3], COLS);
    const float *xd = lamp_tensor_data(x);
    const int32_t *yd = lamp_tensor_data(y);
    for (size_t i = 0; i < b; i++) {
      for (size_t j = 0; j < NUMEL; j++) assert_true(xd[i * NUMEL + j] == expected_value(pixel((size_t)yd[i], j), mean, std));
      assert_true(count < cap);
      order[count++] = (size_t)yd[i];
    }
    nb++;
  }
  /* The end is sticky. */
  lamp_tensor *x, *y;
  int has = 1;
  assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
  assert_int_equal(has, 0);
  assert_int_equal(nb, lamp_loader_batches_per_epoch(l));
  if (batches != NULL) *batches = nb;
  return count;
}

static size_t baseline;

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  baseline = data_bytes();
  return 0;
}

/* Every test frees everything it made. */
static int teardown_check(void **state) {
  (void)state;
  return data_bytes() == baseline ? 0 : -1;
}

/* ---- gather and normalisation ----------------------------------------------------------- */

static void test_gather_exact(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  lamp_tensor *x, *y;
  int64_t xs[2] = {3, NUMEL}, ys[1] = {3};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  size_t idx[3] = {7, 0, 7};
  const float *xd = lamp_tensor_data(x);
  const int32_t *yd = lamp_tensor_data(y);

  /* A plain directory defaults to mean 0, std 1: x = pixel / 255. */
  assert_int_equal(lamp_dataset_gather(ds, idx, 3, x, y), LAMP_OK);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(yd[i], (int32_t)idx[i]);
    for (size_t j = 0; j < NUMEL; j++) assert_true(xd[i * NUMEL + j] == (float)pixel(idx[i], j) / 255.0f);
  }
  /* Spelled out once: pixel(7, 0) = 7 * 37 + 5 = 264, which wraps to 8. */
  assert_int_equal(pixel(7, 0), 8);
  assert_true(xd[0] == 8.0f / 255.0f);

  assert_int_equal(lamp_dataset_set_normalization(ds, 0.2860f, 0.3530f), LAMP_OK);
  assert_int_equal(lamp_dataset_gather(ds, idx, 3, x, y), LAMP_OK);
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < NUMEL; j++)
      assert_true(xd[i * NUMEL + j] == ((float)pixel(idx[i], j) / 255.0f - 0.2860f) / 0.3530f);
  /* Pixel 0 of sample 0 is 5: (5/255 - 0.286) / 0.353, about -0.754652. */
  assert_true(fabsf(xd[NUMEL] - (-0.754652f)) < 1e-6f);

  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_dataset_release(ds);
}

static void test_normalization_invalid(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(4);
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.5f, 0.0f), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/n4/train: normalisation std must be finite and > 0, got 0");
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.5f, -1.0f), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.5f, NAN), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.5f, INFINITY), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_set_normalization(ds, NAN, 1.0f), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/n4/train: normalisation mean must be finite, got nan");
  float mean, std;
  lamp_dataset_get_normalization(ds, &mean, &std);
  assert_true(mean == 0.0f && std == 1.0f); /* failures change nothing */
  lamp_dataset_release(ds);
}

static void test_gather_checks(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(4);
  lamp_tensor *x, *y, *bad;
  int64_t xs[2] = {2, NUMEL}, ys[1] = {2}, wrong[2] = {2, NUMEL + 1};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  size_t idx[2] = {1, 4};
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, x, y), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/n4/train: gather index 4 (at position 1) is out of range for 4 samples");
  idx[1] = 3;
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, y, y), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/n4/train: gather needs x as a contiguous cpu f32 tensor [2, ...] of 12 "
                                             "elements, got cpu i32[2]");
  assert_int_equal(lamp_tensor_new(&bad, LAMP_F32, LAMP_CPU, 2, wrong, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, bad, y), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, x, x), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      TMP "/n4/train: gather needs y as a contiguous cpu i32 tensor [2], got cpu f32[2, 6]");
  /* Right total but the wrong leading dimension: [1, 12] is not 2 samples. */
  int64_t flat[2] = {1, 2 * NUMEL};
  lamp_tensor *one;
  assert_int_equal(lamp_tensor_new(&one, LAMP_F32, LAMP_CPU, 2, flat, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, one, y), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, x, y), LAMP_OK);
  lamp_tensor_release(one);
  lamp_tensor_release(bad);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_dataset_release(ds);
}

/* ---- subsets ---------------------------------------------------------------------------- */

static void test_subset(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  size_t before = data_bytes();
  lamp_dataset *sub, *subsub;
  assert_int_equal(lamp_dataset_subset(&sub, ds, 2, 5), LAMP_OK);
  assert_int_equal(data_bytes(), before); /* a view: no copy of the pixels */
  assert_int_equal(lamp_dataset_size(sub), 5);
  assert_int_equal(lamp_dataset_classes(sub), 10);
  assert_int_equal(lamp_dataset_sample_numel(sub), NUMEL);
  assert_string_equal(lamp_dataset_name(sub), TMP "/n10/train[2:7]");
  assert_int_equal(lamp_dataset_subset(&subsub, sub, 1, 3), LAMP_OK);
  assert_string_equal(lamp_dataset_name(subsub), TMP "/n10/train[3:6]");
  lamp_dataset_release(ds); /* the views keep the storage alive */
  lamp_dataset_release(sub);

  lamp_tensor *x, *y;
  int64_t xs[2] = {3, NUMEL}, ys[1] = {3};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  size_t idx[3] = {0, 1, 2};
  assert_int_equal(lamp_dataset_gather(subsub, idx, 3, x, y), LAMP_OK);
  const int32_t *yd = lamp_tensor_data(y);
  assert_int_equal(yd[0], 3);
  assert_int_equal(yd[1], 4);
  assert_int_equal(yd[2], 5);
  idx[2] = 3;
  assert_int_equal(lamp_dataset_gather(subsub, idx, 3, x, y), LAMP_ERR_INVALID_ARG);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_dataset_release(subsub);
}

static void test_subset_bounds(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  lamp_dataset *sub = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_subset(&sub, ds, 8, 3), LAMP_ERR_INVALID_ARG);
  assert_null(sub);
  assert_string_equal(lamp_last_error(), TMP "/n10/train: subset [8, 8 + 3) is outside its 10 samples");
  assert_int_equal(lamp_dataset_subset(&sub, ds, 11, 0), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_subset(&sub, ds, SIZE_MAX, 2), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_subset(&sub, ds, 2, SIZE_MAX), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_subset(&sub, ds, 10, 0), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/n10/train: subset of 0 samples at 10");
  assert_int_equal(lamp_dataset_subset(&sub, ds, 0, 10), LAMP_OK);
  assert_string_equal(lamp_dataset_name(sub), TMP "/n10/train");
  lamp_dataset_release(sub);
  lamp_dataset_release(ds);
}

/* ---- the loader, one rank --------------------------------------------------------------- */

/* counts[s] = how often sample s occurs in order[0..n). */
static void tally(const size_t *order, size_t n, size_t *counts, size_t size) {
  memset(counts, 0, size * sizeof *counts);
  for (size_t i = 0; i < n; i++) {
    assert_true(order[i] < size);
    counts[order[i]]++;
  }
}

static void test_sequential(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  lamp_loader *l = new_loader(ds, 4, 0, 0, 0, 0, 1);
  lamp_dataset_release(ds); /* the loader holds its own reference */
  assert_int_equal(lamp_loader_samples_per_rank(l), 10);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 3);
  size_t order[16], batches;
  assert_int_equal(run_epoch(l, 0, order, 16, &batches), 10);
  assert_int_equal(batches, 3); /* 4 + 4 + 2 */
  for (size_t i = 0; i < 10; i++) assert_int_equal(order[i], i);
  /* Without shuffle every epoch is the same. */
  assert_int_equal(run_epoch(l, 5, order, 16, NULL), 10);
  for (size_t i = 0; i < 10; i++) assert_int_equal(order[i], i);
  lamp_loader_free(l);
}

static void test_shuffle_covers_everything(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  lamp_loader *l = new_loader(ds, 4, 1, 0, 42, 0, 1);
  size_t order[16], counts[10];
  for (uint64_t epoch = 0; epoch < 5; epoch++) {
    assert_int_equal(run_epoch(l, epoch, order, 16, NULL), 10);
    tally(order, 10, counts, 10);
    for (size_t s = 0; s < 10; s++) assert_int_equal(counts[s], 1);
  }
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

static void test_drop_last(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  lamp_loader *l = new_loader(ds, 4, 1, 1, 7, 0, 1);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 2);
  size_t order[16], counts[10], batches;
  assert_int_equal(run_epoch(l, 0, order, 16, &batches), 8);
  assert_int_equal(batches, 2);
  tally(order, 8, counts, 10);
  for (size_t s = 0; s < 10; s++) assert_true(counts[s] <= 1);
  lamp_loader_free(l);
  /* An exact multiple drops nothing. */
  l = new_loader(ds, 5, 0, 1, 0, 0, 1);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 2);
  assert_int_equal(run_epoch(l, 0, order, 16, NULL), 10);
  lamp_loader_free(l);
  /* A batch larger than the data set: nothing at all with drop_last, one short batch without. */
  l = new_loader(ds, 11, 0, 1, 0, 0, 1);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 0);
  assert_int_equal(run_epoch(l, 0, order, 16, NULL), 0);
  lamp_loader_free(l);
  l = new_loader(ds, 11, 0, 0, 0, 0, 1);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 1);
  assert_int_equal(run_epoch(l, 0, order, 16, NULL), 10);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

static int same_order(const size_t *a, const size_t *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

static void test_reproducible(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(50);
  lamp_loader *a = new_loader(ds, 8, 1, 0, 1234, 0, 1);
  lamp_loader *b = new_loader(ds, 8, 1, 0, 1234, 0, 1);
  lamp_loader *other_seed = new_loader(ds, 8, 1, 0, 99, 0, 1);
  size_t oa[50], ob[50], oc[50], identity[50];
  for (size_t i = 0; i < 50; i++) identity[i] = i;
  assert_int_equal(run_epoch(a, 3, oa, 50, NULL), 50);
  assert_int_equal(run_epoch(b, 3, ob, 50, NULL), 50);
  assert_true(same_order(oa, ob, 50)); /* same seed and epoch: same order, from any loader */
  assert_false(same_order(oa, identity, 50));
  assert_int_equal(run_epoch(b, 4, ob, 50, NULL), 50);
  assert_false(same_order(oa, ob, 50)); /* the next epoch reshuffles */
  assert_int_equal(run_epoch(a, 3, oc, 50, NULL), 50);
  assert_true(same_order(oa, oc, 50)); /* restarting an epoch repeats it */
  assert_int_equal(run_epoch(other_seed, 3, oc, 50, NULL), 50);
  assert_false(same_order(oa, oc, 50));
  /* Starting over in the middle of an epoch rewinds it. */
  lamp_tensor *x, *y;
  int has;
  assert_int_equal(lamp_loader_start_epoch(b, 3), LAMP_OK);
  assert_int_equal(lamp_loader_next(b, &x, &y, &has), LAMP_OK);
  assert_int_equal(run_epoch(b, 3, ob, 50, NULL), 50);
  assert_true(same_order(oa, ob, 50));
  lamp_loader_free(a);
  lamp_loader_free(b);
  lamp_loader_free(other_seed);
  lamp_dataset_release(ds);
}

/* ---- the loader, several ranks ---------------------------------------------------------- */

static void test_world3_sequential(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  /* PyTorch's DistributedSampler(shuffle=False) on 10 samples and 3 ranks. */
  const size_t expected[3][4] = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (int r = 0; r < 3; r++) {
    lamp_loader *l = new_loader(ds, 3, 0, 0, 0, r, 3);
    assert_int_equal(lamp_loader_samples_per_rank(l), 4);
    assert_int_equal(lamp_loader_batches_per_epoch(l), 2);
    size_t order[8];
    assert_int_equal(run_epoch(l, 0, order, 8, NULL), 4);
    for (size_t k = 0; k < 4; k++) assert_int_equal(order[k], expected[r][k]);
    lamp_loader_free(l);
  }
  lamp_dataset_release(ds);
}

static void test_world3_shuffled(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(10);
  for (uint64_t epoch = 0; epoch < 3; epoch++) {
    /* The permutation every rank shares is what one rank sees with the same seed and epoch. */
    lamp_loader *single = new_loader(ds, 10, 1, 0, 5, 0, 1);
    size_t perm[10];
    assert_int_equal(run_epoch(single, epoch, perm, 10, NULL), 10);
    lamp_loader_free(single);

    size_t all[12], n_all = 0;
    for (int r = 0; r < 3; r++) {
      lamp_loader *l = new_loader(ds, 3, 1, 0, 5, r, 3);
      size_t order[8];
      assert_int_equal(run_epoch(l, epoch, order, 8, NULL), 4); /* equal shards */
      for (size_t k = 0; k < 4; k++) {
        assert_int_equal(order[k], perm[((size_t)r + 3 * k) % 10]);
        all[n_all++] = order[k];
      }
      lamp_loader_free(l);
    }
    /* The union is everything; only the two wrap-around positions repeat perm[0] and perm[1]. */
    size_t counts[10];
    tally(all, 12, counts, 10);
    for (size_t s = 0; s < 10; s++)
      assert_int_equal(counts[s], (s == perm[0] || s == perm[1]) ? 2 : 1);
  }
  lamp_dataset_release(ds);
}

/* More ranks than samples: the order wraps around more than once. */
static void test_world_larger_than_data(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(2);
  size_t seen[5];
  for (int r = 0; r < 5; r++) {
    lamp_loader *l = new_loader(ds, 4, 0, 0, 0, r, 5);
    assert_int_equal(lamp_loader_samples_per_rank(l), 1);
    size_t order[4];
    assert_int_equal(run_epoch(l, 0, order, 4, NULL), 1);
    seen[r] = order[0];
    lamp_loader_free(l);
  }
  const size_t expected[5] = {0, 1, 0, 1, 0};
  for (int r = 0; r < 5; r++) assert_int_equal(seen[r], expected[r]);
  lamp_dataset_release(ds);
}

/* ---- the loader's contract -------------------------------------------------------------- */

static void test_config_errors(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(4);
  lamp_loader *l = (lamp_loader *)1;
  lamp_loader_config cfg = {.batch = 0, .world = 1};
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_null(l);
  assert_string_equal(lamp_last_error(), "loader for " TMP "/n4/train: batch must be > 0");
  cfg.batch = 2;
  cfg.world = 0;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "loader for " TMP "/n4/train: world must be >= 1, got 0");
  cfg.world = 3;
  cfg.rank = 3;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "loader for " TMP "/n4/train: rank 3 is outside [0, 3)");
  cfg.rank = -1;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_loader_new(&l, ds, NULL), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_loader_new(&l, NULL, &cfg), LAMP_ERR_INVALID_ARG);
  lamp_loader_free(NULL);
  lamp_dataset_release(ds);
}

static void test_next_before_start(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(4);
  lamp_loader *l = new_loader(ds, 2, 1, 0, 0, 0, 1);
  assert_ptr_equal(lamp_loader_dataset(l), ds);
  assert_int_equal(lamp_loader_get_config(l)->batch, 2);
  lamp_tensor *x, *y;
  int has = 1;
  assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_ERR_INVALID_USAGE);
  assert_int_equal(has, 0);
  assert_string_equal(lamp_last_error(),
                      "loader for " TMP "/n4/train: lamp_loader_next before lamp_loader_start_epoch");
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

/* A batch the caller retains survives the next call; the loader moves on to fresh storage. */
static void test_retained_batch(void **state) {
  (void)state;
  lamp_dataset *ds = open_dataset(6);
  lamp_loader *l = new_loader(ds, 4, 0, 0, 0, 0, 1);
  lamp_tensor *x, *y, *x2, *y2;
  int has;
  assert_int_equal(lamp_loader_start_epoch(l, 0), LAMP_OK);
  assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
  lamp_tensor_retain(y);
  assert_int_equal(lamp_loader_next(l, &x2, &y2, &has), LAMP_OK);
  assert_int_equal(has, 1);
  assert_int_equal(y2->shape[0], 2);
  assert_true(y != y2);
  const int32_t *kept = lamp_tensor_data(y);
  for (int i = 0; i < 4; i++) assert_int_equal(kept[i], i);
  lamp_tensor_release(y);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

/* The real data set through the loader: two ranks split 60000 samples evenly. */
static void test_real_loader(void **state) {
  (void)state;
  require_fashion_mnist();
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "train"), LAMP_OK);
  lamp_loader *l = new_loader(ds, 128, 1, 0, 0, 1, 2);
  assert_int_equal(lamp_loader_samples_per_rank(l), 30000);
  assert_int_equal(lamp_loader_batches_per_epoch(l), 235);
  assert_int_equal(lamp_loader_start_epoch(l, 0), LAMP_OK);
  lamp_tensor *x, *y;
  int has;
  size_t samples = 0, class_counts[10] = {0};
  for (;;) {
    assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
    if (!has) break;
    const int32_t *yd = lamp_tensor_data(y);
    for (int64_t i = 0; i < y->shape[0]; i++) {
      assert_true(yd[i] >= 0 && yd[i] < 10);
      class_counts[yd[i]]++;
    }
    samples += (size_t)y->shape[0];
  }
  assert_int_equal(samples, 30000);
  for (int c = 0; c < 10; c++) assert_true(class_counts[c] > 2500 && class_counts[c] < 3500);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

#define TEST(f) cmocka_unit_test_teardown(f, teardown_check)

int main(void) {
  const struct CMUnitTest tests[] = {
      TEST(test_gather_exact),
      TEST(test_normalization_invalid),
      TEST(test_gather_checks),
      TEST(test_subset),
      TEST(test_subset_bounds),
      TEST(test_sequential),
      TEST(test_shuffle_covers_everything),
      TEST(test_drop_last),
      TEST(test_reproducible),
      TEST(test_world3_sequential),
      TEST(test_world3_shuffled),
      TEST(test_world_larger_than_data),
      TEST(test_config_errors),
      TEST(test_next_before_start),
      TEST(test_retained_batch),
      TEST(test_real_loader),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
