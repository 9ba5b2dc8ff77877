/*
** Training-time augmentation and the loader's position: the crop moves content by exactly its
** offset, the flip mirrors, padding is the raw byte 0 normalised per channel (torchvision's
** order), draws are a function of (seed, epoch, global position) only, so they repeat for the
** same seed and epoch, change across epochs, and agree between 1 rank and N; loaders without
** augmentation are untouched; and seeking a fresh loader resumes an epoch batch for batch,
** augmentation included. The fixture is a small CIFAR-10 file written to LAMP_TEST_TMP_DIR.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "data/augment.h"
#include "data/cifar.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/augment"
#define RECORD LAMP_CIFAR10_RECORD_BYTES
#define NUMEL 3072
#define N 18

/* ---- fixtures --------------------------------------------------------------------------- */

/* Pixel (c, r, col) of record i: never 0, so a 0 in the output can only be padding. */
static uint8_t pix(size_t i, int c, int r, int col) {
  return (uint8_t)(1 + (i * 13 + (size_t)c * 80 + (size_t)r * 5 + (size_t)col * 3) % 255);
}

/* TMP/<name>/test_batch.bin with N records; record i has label i % 10. */
static lamp_dataset *open_cifar(void) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/n%d", TMP, N);
  make_dir(dir);
  snprintf(path, sizeof path, "%s/test_batch.bin", dir);
  uint8_t *b = malloc((size_t)N * RECORD);
  assert_non_null(b);
  for (size_t i = 0; i < N; i++) {
    b[i * RECORD] = (uint8_t)(i % 10);
    for (int c = 0; c < 3; c++)
      for (int r = 0; r < 32; r++)
        for (int col = 0; col < 32; col++)
          b[i * RECORD + 1 + (size_t)c * 1024 + (size_t)r * 32 + (size_t)col] = pix(i, c, r, col);
  }
  write_bytes(path, b, (size_t)N * RECORD, 0);
  free(b);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, "test"), LAMP_OK);
  return ds;
}

static lamp_loader *new_loader(lamp_dataset *ds, size_t batch, int shuffle, uint64_t seed, int rank, int world,
                               int crop_pad, int flip) {
  lamp_loader_config cfg = {.batch = batch, .shuffle = shuffle, .seed = seed, .rank = rank, .world = world,
                            .augment = {.crop_pad = crop_pad, .flip = flip}};
  lamp_loader *l;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_OK);
  return l;
}

/* One epoch's batches, concatenated: x into xs (NUMEL floats per sample), y into ys; returns samples. */
static size_t collect(lamp_loader *l, float *xs, int32_t *ys, size_t cap) {
  size_t count = 0;
  for (;;) {
    lamp_tensor *x, *y;
    int has;
    assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
    if (!has) break;
    size_t b = (size_t)y->shape[0];
    assert_true(count + b <= cap);
    memcpy(xs + count * NUMEL, lamp_tensor_data(x), b * NUMEL * sizeof *xs);
    memcpy(ys + count, lamp_tensor_data(y), b * sizeof *ys);
    count += b;
  }
  return count;
}

static size_t run_epoch(lamp_loader *l, uint64_t epoch, float *xs, int32_t *ys, size_t cap) {
  assert_int_equal(lamp_loader_start_epoch(l, epoch), LAMP_OK);
  return collect(l, xs, ys, cap);
}

/* Room for one epoch of the fixture, padding included. */
typedef struct epoch_buf {
  float x[(N + 4) * NUMEL];
  int32_t y[N + 4];
} epoch_buf;

static epoch_buf *new_buf(void) {
  epoch_buf *b = calloc(1, sizeof *b);
  assert_non_null(b);
  return b;
}

/* The sample as lamp_dataset_gather_transformed makes it, for comparison. */
static void gather_one(const lamp_dataset *ds, size_t sample, const lamp_image_transform *t, float *dst) {
  lamp_tensor *x, *y;
  int64_t xs[4] = {1, 3, 32, 32}, ys[1] = {1};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 4, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_dataset_gather_transformed(ds, &sample, 1, t, x, y), LAMP_OK);
  memcpy(dst, lamp_tensor_data(x), NUMEL * sizeof *dst);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
}

static size_t baseline;

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  baseline = data_bytes();
  return 0;
}

static int teardown_check(void **state) {
  (void)state;
  return data_bytes() == baseline ? 0 : -1;
}

/* ---- one sample's transform ------------------------------------------------------------- */

/* lut[c][b] = 1000 c + b: the output names the byte and channel it came from. */
static float lut[3][256];

static void identity_lut(void) {
  for (int c = 0; c < 3; c++)
    for (int b = 0; b < 256; b++) lut[c][b] = (float)(1000 * c + b);
}

/* A 2-channel 4 x 5 image whose byte at (c, r, col) is 1 + 20 c + 5 r + col. */
static void small_image(uint8_t *img) {
  for (int c = 0; c < 2; c++)
    for (int r = 0; r < 4; r++)
      for (int col = 0; col < 5; col++) img[c * 20 + r * 5 + col] = (uint8_t)(1 + 20 * c + 5 * r + col);
}

static void test_apply_identity(void **state) {
  (void)state;
  identity_lut();
  uint8_t img[40];
  float out[40], again[40];
  small_image(img);
  lamp_augment_apply(img, 2, 4, 5, (const float(*)[256])lut, NULL, out);
  for (int k = 0; k < 40; k++) assert_true(out[k] == (float)(1000 * (k / 20) + img[k]));
  lamp_image_transform none = {0, 0, 0};
  lamp_augment_apply(img, 2, 4, 5, (const float(*)[256])lut, &none, again);
  assert_memory_equal(out, again, sizeof out);
}

/* A crop with offset (dy, dx) moves input pixel (r, col) to output (r - dy, col - dx). */
static void test_apply_crop_shifts(void **state) {
  (void)state;
  identity_lut();
  uint8_t img[40];
  float out[40];
  small_image(img);
  lamp_image_transform t = {.dy = 1, .dx = -2, .flip = 0};
  lamp_augment_apply(img, 2, 4, 5, (const float(*)[256])lut, &t, out);
  /* The known pixel: input (c 1, r 2, col 0) = 1 + 20 + 10 + 0 = 31 lands at output (1, 1, 2). */
  assert_true(out[20 + 1 * 5 + 2] == 1031.0f);
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 5; j++) {
        int r = i + 1, s = j - 2;
        float want = r < 4 && s >= 0 ? (float)(1000 * c + img[c * 20 + r * 5 + s]) : (float)(1000 * c);
        assert_true(out[c * 20 + i * 5 + j] == want);
      }
  /* The bottom row and the two left columns are padding: byte 0 of each channel. */
  assert_true(out[3 * 5 + 4] == 0.0f && out[20 + 0] == 1000.0f);
}

static void test_apply_flip(void **state) {
  (void)state;
  identity_lut();
  uint8_t img[40];
  float out[40];
  small_image(img);
  lamp_image_transform t = {.dy = 0, .dx = 0, .flip = 1};
  lamp_augment_apply(img, 2, 4, 5, (const float(*)[256])lut, &t, out);
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 5; j++) assert_true(out[c * 20 + i * 5 + j] == (float)(1000 * c + img[c * 20 + i * 5 + 4 - j]));
  /* Crop, then flip (torchvision's order): output (i, j) reads crop column 4 - j, i.e. input 4 - j + dx. */
  t.dx = 1;
  lamp_augment_apply(img, 2, 4, 5, (const float(*)[256])lut, &t, out);
  assert_true(out[0] == 0.0f); /* column 5 is outside: padding */
  assert_true(out[1] == (float)img[4]);
  assert_true(out[4] == (float)img[1]);
}

/* Padding is the raw byte 0 normalised per channel: (0 - mean_c) / std_c, as torchvision pads first. */
static void test_padding_value(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  float out[NUMEL];
  lamp_image_transform t = {.dy = -4, .dx = 4, .flip = 0};
  gather_one(ds, 3, &t, out);
  const float mean[3] = {LAMP_CIFAR10_MEAN_R, LAMP_CIFAR10_MEAN_G, LAMP_CIFAR10_MEAN_B};
  const float std[3] = {LAMP_CIFAR10_STD_R, LAMP_CIFAR10_STD_G, LAMP_CIFAR10_STD_B};
  for (int c = 0; c < 3; c++) {
    float pad = (0.0f / 255.0f - mean[c]) / std[c];
    for (int r = 0; r < 32; r++)
      for (int col = 0; col < 32; col++) {
        float v = out[c * 1024 + r * 32 + col];
        if (r < 4 || col >= 28) assert_true(v == pad);
        else assert_true(v == ((float)pix(3, c, r - 4, col + 4) / 255.0f - mean[c]) / std[c]);
      }
  }
  lamp_dataset_release(ds);
}

/* ---- the draws -------------------------------------------------------------------------- */

static int same_tf(const lamp_image_transform *a, const lamp_image_transform *b) {
  return a->dy == b->dy && a->dx == b->dx && a->flip == b->flip;
}

static void test_draw(void **state) {
  (void)state;
  lamp_augment crop_flip = {.crop_pad = 1, .flip = 1};
  int seen[3][3][2] = {{{0}}};
  size_t same_next_epoch = 0;
  for (uint64_t p = 0; p < 400; p++) {
    lamp_image_transform a, b, c;
    lamp_augment_draw(&crop_flip, 7, 2, p, &a);
    lamp_augment_draw(&crop_flip, 7, 2, p, &b);
    assert_true(same_tf(&a, &b)); /* a function of its arguments */
    assert_true(a.dy >= -1 && a.dy <= 1 && a.dx >= -1 && a.dx <= 1 && (a.flip == 0 || a.flip == 1));
    seen[a.dy + 1][a.dx + 1][a.flip]++;
    lamp_augment_draw(&crop_flip, 7, 3, p, &c);
    same_next_epoch += same_tf(&a, &c);
  }
  /* All 18 outcomes occur, roughly 400 / 18 = 22 times each. */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int f = 0; f < 2; f++) assert_true(seen[i][j][f] > 5);
  assert_true(same_next_epoch < 60); /* epochs draw afresh: about 1 in 18 agree by chance */

  /* A disabled part stays 0; flip alone draws only the flip. */
  lamp_augment flip_only = {.crop_pad = 0, .flip = 1}, none = {0, 0};
  int flips = 0;
  for (uint64_t p = 0; p < 100; p++) {
    lamp_image_transform t;
    lamp_augment_draw(&flip_only, 1, 0, p, &t);
    assert_true(t.dy == 0 && t.dx == 0);
    flips += t.flip;
    lamp_augment_draw(&none, 1, 0, p, &t);
    assert_true(t.dy == 0 && t.dx == 0 && t.flip == 0);
  }
  assert_true(flips > 25 && flips < 75);
  assert_false(lamp_augment_enabled(&none));
  assert_true(lamp_augment_enabled(&flip_only));
}

/* ---- the loader ------------------------------------------------------------------------- */

/* Without augmentation a loader's batches are plain gathers, whatever else it does. */
static void test_eval_loader_untouched(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_loader *l = new_loader(ds, 5, 1, 3, 0, 1, 0, 0);
  epoch_buf *b = new_buf();
  size_t n = run_epoch(l, 1, b->x, b->y, N + 4);
  assert_int_equal(n, N);
  float plain[NUMEL];
  for (size_t k = 0; k < n; k++) {
    /* Labels are sample % 10, so find the sample by content: compare with every candidate. */
    int found = 0;
    for (size_t s = (size_t)b->y[k]; s < N && !found; s += 10) {
      gather_one(ds, s, NULL, plain);
      found = memcmp(plain, b->x + k * NUMEL, sizeof plain) == 0;
    }
    assert_true(found);
  }
  free(b);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

/* Each batch entry is the gather of its sample under the draw for (seed, epoch, global position). */
static void test_loader_applies_draws(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_augment aug = {.crop_pad = 4, .flip = 1};
  for (int world = 1; world <= 3; world += 2)
    for (int rank = 0; rank < world; rank++) {
      lamp_loader *l = new_loader(ds, 4, 0, 11, rank, world, 4, 1);
      epoch_buf *b = new_buf();
      size_t n = run_epoch(l, 5, b->x, b->y, N + 4);
      assert_int_equal(n, lamp_loader_samples_per_rank(l));
      float want[NUMEL];
      for (size_t k = 0; k < n; k++) {
        uint64_t global = (uint64_t)rank + k * (uint64_t)world; /* no shuffle: sample = global mod N */
        lamp_image_transform t;
        lamp_augment_draw(&aug, 11, 5, global, &t);
        gather_one(ds, (size_t)(global % N), &t, want);
        assert_memory_equal(b->x + k * NUMEL, want, sizeof want);
      }
      free(b);
      lamp_loader_free(l);
    }
  lamp_dataset_release(ds);
}

/* The same global position gets the same crop and flip on 1 rank and on 3. */
static void test_ranks_agree(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_loader *one = new_loader(ds, 6, 1, 21, 0, 1, 4, 1);
  epoch_buf *all = new_buf(), *part = new_buf();
  assert_int_equal(run_epoch(one, 2, all->x, all->y, N + 4), N);
  for (int rank = 0; rank < 3; rank++) {
    lamp_loader *l = new_loader(ds, 6, 1, 21, rank, 3, 4, 1);
    size_t n = run_epoch(l, 2, part->x, part->y, N + 4);
    assert_int_equal(n, 6);
    for (size_t k = 0; k < n; k++) {
      size_t global = (size_t)rank + 3 * k;
      assert_int_equal(part->y[k], all->y[global]);
      assert_memory_equal(part->x + k * NUMEL, all->x + global * NUMEL, NUMEL * sizeof(float));
    }
    lamp_loader_free(l);
  }
  free(all);
  free(part);
  lamp_loader_free(one);
  lamp_dataset_release(ds);
}

static void test_reproducible_across_epochs(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_loader *a = new_loader(ds, 4, 0, 5, 0, 1, 4, 1);
  lamp_loader *b = new_loader(ds, 4, 0, 5, 0, 1, 4, 1);
  lamp_loader *other_seed = new_loader(ds, 4, 0, 6, 0, 1, 4, 1);
  epoch_buf *e0 = new_buf(), *again = new_buf(), *e1 = new_buf();
  assert_int_equal(run_epoch(a, 0, e0->x, e0->y, N + 4), N);
  assert_int_equal(run_epoch(b, 0, again->x, again->y, N + 4), N);
  assert_memory_equal(e0->x, again->x, N * NUMEL * sizeof(float)); /* same seed and epoch: identical */
  assert_int_equal(run_epoch(a, 0, again->x, again->y, N + 4), N);
  assert_memory_equal(e0->x, again->x, N * NUMEL * sizeof(float)); /* restarting repeats it */
  assert_int_equal(run_epoch(b, 1, e1->x, e1->y, N + 4), N);
  assert_memory_equal(e0->y, e1->y, N * sizeof(int32_t)); /* no shuffle: same samples ... */
  size_t differ = 0;
  for (size_t k = 0; k < N; k++) differ += memcmp(e0->x + k * NUMEL, e1->x + k * NUMEL, NUMEL * sizeof(float)) != 0;
  assert_true(differ >= N / 2); /* ... augmented afresh (1 in 162 draws repeats by chance) */
  assert_int_equal(run_epoch(other_seed, 0, e1->x, e1->y, N + 4), N);
  assert_true(memcmp(e0->x, e1->x, N * NUMEL * sizeof(float)) != 0);
  free(e0);
  free(again);
  free(e1);
  lamp_loader_free(a);
  lamp_loader_free(b);
  lamp_loader_free(other_seed);
  lamp_dataset_release(ds);
}

static void test_augment_config(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_loader_config cfg = {.batch = 4, .world = 1, .augment = {.crop_pad = -1}};
  lamp_loader *l = (lamp_loader *)1;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_null(l);
  assert_string_equal(lamp_last_error(), "loader for " TMP "/n18/test: augment crop_pad must be in [0, 1024], got -1");
  cfg.augment.crop_pad = 1025;
  assert_int_equal(lamp_loader_new(&l, ds, &cfg), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "loader for " TMP "/n18/test: augment crop_pad must be in [0, 1024], got 1025");
  lamp_dataset_release(ds);
}

/* ---- position and seek ------------------------------------------------------------------ */

/* An epoch straight through equals k batches, then a fresh loader seeking to batch k. */
static void check_resume(int shuffle, int drop_last, size_t batch, int rank, int world) {
  lamp_dataset *ds = open_cifar();
  lamp_loader_config cfg = {.batch = batch, .shuffle = shuffle, .drop_last = drop_last, .seed = 99, .rank = rank,
                            .world = world, .augment = {.crop_pad = 4, .flip = 1}};
  lamp_loader *straight;
  assert_int_equal(lamp_loader_new(&straight, ds, &cfg), LAMP_OK);
  epoch_buf *want = new_buf(), *got = new_buf();
  size_t total = run_epoch(straight, 3, want->x, want->y, N + 4);
  size_t batches = lamp_loader_batches_per_epoch(straight);
  for (size_t k = 0; k <= batches; k++) {
    lamp_loader *first, *resumed;
    assert_int_equal(lamp_loader_new(&first, ds, &cfg), LAMP_OK);
    assert_int_equal(lamp_loader_start_epoch(first, 3), LAMP_OK);
    for (size_t i = 0; i < k; i++) {
      lamp_tensor *x, *y;
      int has;
      assert_int_equal(lamp_loader_next(first, &x, &y, &has), LAMP_OK);
      assert_int_equal(has, 1);
    }
    uint64_t epoch;
    size_t next;
    assert_int_equal(lamp_loader_position(first, &epoch, &next), LAMP_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(next, k);
    lamp_loader_free(first);

    assert_int_equal(lamp_loader_new(&resumed, ds, &cfg), LAMP_OK);
    assert_int_equal(lamp_loader_seek(resumed, epoch, next), LAMP_OK);
    size_t skipped = k * batch < total ? k * batch : total; /* the last batch may be short */
    size_t rest = collect(resumed, got->x, got->y, N + 4);
    assert_int_equal(skipped + rest, total);
    assert_memory_equal(got->y, want->y + skipped, rest * sizeof(int32_t));
    assert_memory_equal(got->x, want->x + skipped * NUMEL, rest * NUMEL * sizeof(float));
    assert_int_equal(lamp_loader_position(resumed, &epoch, &next), LAMP_OK);
    assert_int_equal(next, batches);
    lamp_loader_free(resumed);
  }
  free(want);
  free(got);
  lamp_loader_free(straight);
  lamp_dataset_release(ds);
}

static void test_seek_resumes(void **state) {
  (void)state;
  check_resume(1, 0, 4, 0, 1); /* 18 samples: 4 + 4 + 4 + 4 + 2 */
  check_resume(1, 1, 4, 0, 1); /* the short batch dropped */
  check_resume(0, 0, 5, 0, 1);
  check_resume(1, 0, 2, 1, 3); /* rank 1 of 3: 6 samples, 3 batches */
}

static void test_position_and_seek_errors(void **state) {
  (void)state;
  lamp_dataset *ds = open_cifar();
  lamp_loader *l = new_loader(ds, 4, 1, 0, 0, 1, 0, 1);
  uint64_t epoch = 9;
  size_t next = 9;
  assert_int_equal(lamp_loader_position(l, &epoch, &next), LAMP_OK); /* never started: the start of epoch 0 */
  assert_int_equal(epoch, 0);
  assert_int_equal(next, 0);
  assert_int_equal(lamp_loader_seek(l, 2, 6), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(),
                      "loader for " TMP "/n18/test: cannot seek to batch 6 of epoch 2: an epoch has 5 batches");
  assert_int_equal(lamp_loader_position(l, &epoch, &next), LAMP_OK); /* a failed seek changes nothing */
  assert_int_equal(epoch, 0);
  assert_int_equal(lamp_loader_position(l, NULL, &next), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_loader_seek(NULL, 0, 0), LAMP_ERR_INVALID_ARG);
  /* Seeking to the end is allowed: the epoch is over. */
  assert_int_equal(lamp_loader_seek(l, 4, 5), LAMP_OK);
  lamp_tensor *x, *y;
  int has = 1;
  assert_int_equal(lamp_loader_next(l, &x, &y, &has), LAMP_OK);
  assert_int_equal(has, 0);
  assert_int_equal(lamp_loader_position(l, &epoch, &next), LAMP_OK);
  assert_int_equal(epoch, 4);
  assert_int_equal(next, 5);
  /* Starting an epoch rewinds the position. */
  assert_int_equal(lamp_loader_start_epoch(l, 5), LAMP_OK);
  assert_int_equal(lamp_loader_position(l, &epoch, &next), LAMP_OK);
  assert_int_equal(epoch, 5);
  assert_int_equal(next, 0);
  lamp_loader_free(l);
  lamp_dataset_release(ds);
}

#define TEST(f) cmocka_unit_test_teardown(f, teardown_check)

int main(void) {
  const struct CMUnitTest tests[] = {
      TEST(test_apply_identity),
      TEST(test_apply_crop_shifts),
      TEST(test_apply_flip),
      TEST(test_padding_value),
      TEST(test_draw),
      TEST(test_eval_loader_untouched),
      TEST(test_loader_applies_draws),
      TEST(test_ranks_agree),
      TEST(test_reproducible_across_epochs),
      TEST(test_augment_config),
      TEST(test_seek_resumes),
      TEST(test_position_and_seek_errors),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
