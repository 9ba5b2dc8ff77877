/*
** The CIFAR-10 binary reader and the data sets built on it: good files parse to the exact
** labels and pixels in NCHW order and normalise per channel; an empty, short, truncated or
** mislabelled file, a missing file and a directory lacking one batch fail with exact messages,
** leave the output zeroed and leak nothing; arbitrary bytes never crash the parser nor make it
** allocate more than its input. Files are written here, in LAMP_TEST_TMP_DIR.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "data/cifar.h"
#include "data/dataset.h"
#include "tensor/ledger.h"
#include "tensor/memory.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/cifar"
#define RECORD LAMP_CIFAR10_RECORD_BYTES
#define PLANE 1024

/* ---- fixtures --------------------------------------------------------------------------- */

/* Pixel (c, r, col) of record i of file f: distinct across files, records, channels and places. */
static uint8_t pix(int f, size_t i, int c, int r, int col) {
  return (uint8_t)(f * 53 + i * 29 + (size_t)c * 101 + (size_t)r * 7 + (size_t)col * 3 + 1);
}

static uint8_t label_of(int f, size_t i) { return (uint8_t)((f * 3 + i) % 10); }

/* n records of file f in the CIFAR-10 layout: label, then the R, G and B planes row-major. */
static uint8_t *cifar_bytes(int f, size_t n) {
  uint8_t *b = malloc(n * RECORD);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++) {
    uint8_t *rec = b + i * RECORD;
    rec[0] = label_of(f, i);
    for (int c = 0; c < 3; c++)
      for (int r = 0; r < 32; r++)
        for (int col = 0; col < 32; col++) rec[1 + c * PLANE + r * 32 + col] = pix(f, i, c, r, col);
  }
  return b;
}

static void write_cifar(const char *dir, const char *file, int f, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  rmdir(path); /* test_bad_file_in_directory leaves a directory in one file's place */
  uint8_t *b = cifar_bytes(f, n);
  write_bytes(path, b, n * RECORD, 0);
  free(b);
}

/* A fresh directory TMP/<name>, holding the train files 1..5 except `skip` (0: none), with
   f + 1 records in data_batch_<f>.bin, and test_batch.bin with 4 records (file number 0). */
static const char *make_cifar_dir(const char *name, int skip) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", TMP, name);
  make_dir(dir);
  for (int f = 1; f <= 5; f++) {
    char file[32];
    snprintf(file, sizeof file, "data_batch_%d.bin", f);
    if (f != skip) write_cifar(dir, file, f, (size_t)f + 1);
  }
  write_cifar(dir, "test_batch.bin", 0, 4);
  return dir;
}

/* Parses len bytes expecting failure with exactly `message`; the output stays zeroed and no data leaks. */
static void expect_parse_error(const uint8_t *bytes, size_t len, const char *message) {
  size_t before = data_bytes();
  lamp_cifar10 c;
  memset(&c, 0xa5, sizeof c);
  assert_int_equal(lamp_cifar10_parse(bytes, len, "mem.bin", &c), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), message);
  assert_null(c.pixels);
  assert_null(c.labels);
  assert_int_equal(c.n, 0);
  assert_int_equal(data_bytes(), before);
}

static void expect_dataset_error(const char *dir, const char *split, lamp_status code, const char *message) {
  size_t before = data_bytes();
  lamp_dataset *ds = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, split), code);
  assert_string_equal(lamp_last_error(), message);
  assert_null(ds);
  assert_int_equal(data_bytes(), before);
}

static float norm(uint8_t p, float mean, float std) { return ((float)p / 255.0f - mean) / std; }

static const float cifar_mean[3] = {0.4914f, 0.4822f, 0.4465f};
static const float cifar_std[3] = {0.2470f, 0.2435f, 0.2616f};

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  return 0;
}

/* ---- the parser ------------------------------------------------------------------------- */

static void test_parse_good(void **state) {
  (void)state;
  uint8_t *b = cifar_bytes(2, 3);
  size_t before = data_bytes();
  lamp_cifar10 c;
  assert_int_equal(lamp_cifar10_parse(b, 3 * RECORD, "mem.bin", &c), LAMP_OK);
  assert_int_equal(c.n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(c.labels[i], label_of(2, i));
    /* CHW as stored: pixel (c, r, col) of image i at i * 3072 + c * 1024 + r * 32 + col. */
    for (int ch = 0; ch < 3; ch++)
      for (int r = 0; r < 32; r++)
        for (int col = 0; col < 32; col++)
          assert_int_equal(c.pixels[i * 3072 + (size_t)ch * PLANE + (size_t)r * 32 + (size_t)col], pix(2, i, ch, r, col));
  }
  /* Spelled out once: record 1 starts at byte 3073; its green pixel (row 2, col 5) is byte 3073 + 1 + 1024 + 69. */
  assert_int_equal(c.pixels[3072 + 1024 + 2 * 32 + 5], b[3073 + 1 + 1024 + 69]);
  assert_int_equal(data_bytes(), before + 3 * 3072 + 3);
  lamp_cifar10_free(&c);
  assert_null(c.pixels);
  assert_int_equal(data_bytes(), before);
  lamp_cifar10_free(&c); /* idempotent */
  lamp_cifar10_free(NULL);
  free(b);
}

static void test_parse_wrong_size(void **state) {
  (void)state;
  uint8_t *b = cifar_bytes(1, 10);
  expect_parse_error(b, 0, "mem.bin: empty file; CIFAR-10 records are 3073 bytes (1 label byte, then 3072 pixel bytes)");
  expect_parse_error(NULL, 0,
                     "mem.bin: empty file; CIFAR-10 records are 3073 bytes (1 label byte, then 3072 pixel bytes)");
  expect_parse_error(b, 100,
                     "mem.bin: size 100 is smaller than one CIFAR-10 record (3073 bytes: 1 label byte, then 3072 "
                     "pixel bytes)");
  free(b);
}

static void test_parse_truncated_record(void **state) {
  (void)state;
  uint8_t *b = cifar_bytes(1, 10);
  /* Ten records less five bytes: record 9 starts at 9 * 3073 = 27657 and has 3068 bytes. */
  expect_parse_error(b, 30725,
                     "mem.bin: size 30725 is not a multiple of the CIFAR-10 record size 3073: record 9 (at byte "
                     "27657) is truncated, 3068 of its 3073 bytes are present");
  /* One byte past a whole record: a second record holding only its label. */
  expect_parse_error(b, 3074,
                     "mem.bin: size 3074 is not a multiple of the CIFAR-10 record size 3073: record 1 (at byte "
                     "3073) is truncated, 1 of its 3073 bytes are present");
  free(b);
}

static void test_parse_bad_label(void **state) {
  (void)state;
  uint8_t *b = cifar_bytes(1, 10);
  b[4 * RECORD] = 10;
  expect_parse_error(b, 10 * RECORD, "mem.bin: record 4 (at byte 12292) has label 10; CIFAR-10 labels are 0 to 9");
  b[4 * RECORD] = 9;
  b[0] = 255; /* the first bad record is the one named */
  b[7 * RECORD] = 200;
  expect_parse_error(b, 10 * RECORD, "mem.bin: record 0 (at byte 0) has label 255; CIFAR-10 labels are 0 to 9");
  free(b);
}

static void test_parse_too_large(void **state) {
  (void)state;
  /* The size alone condemns it: nothing is read, so the bytes need not exist. */
  static const uint8_t one = 0;
  size_t len = (size_t)(LAMP_CIFAR10_MAX_RECORDS + 1) * RECORD;
  expect_parse_error(&one, len,
                     "mem.bin: size 184383073 is more than 60000 CIFAR-10 records (184380000 bytes), the most one "
                     "file may hold");
}

static void test_parse_arguments(void **state) {
  (void)state;
  lamp_cifar10 c;
  uint8_t b[RECORD] = {0};
  assert_int_equal(lamp_cifar10_parse(b, RECORD, "x", NULL), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_cifar10_parse(NULL, 5, "x", &c), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "x: 5 bytes at NULL");
  assert_int_equal(lamp_cifar10_parse(b, RECORD, NULL, &c), LAMP_OK); /* a NULL name is allowed */
  assert_int_equal(c.n, 1);
  lamp_cifar10_free(&c);
}

/*
** Arbitrary inputs: random lengths around record boundaries and random bytes with labels that
** are valid more often than not. Each either parses, with blocks no larger than the input, or
** fails leaving nothing allocated. (The same entry point a fuzz harness drives.)
*/
static void test_parse_fuzz(void **state) {
  (void)state;
  lamp_rng rng;
  lamp_rng_seed(&rng, 2024);
  size_t cap = 4 * RECORD + 8;
  uint8_t *b = malloc(cap);
  assert_non_null(b);
  size_t before = data_bytes(), ok = 0;
  for (int iter = 0; iter < 400; iter++) {
    size_t len = iter % 3 == 0 ? (size_t)lamp_rng_below(&rng, cap + 1)
                               : (size_t)(1 + lamp_rng_below(&rng, 4)) * RECORD + (iter % 3 == 1 ? 0 : 1);
    for (size_t i = 0; i < len; i++) b[i] = (uint8_t)lamp_rng_next(&rng);
    for (size_t r = 0; r * RECORD < len; r++)
      if (lamp_rng_below(&rng, 8) != 0) b[r * RECORD] %= 10;
    lamp_cifar10 c;
    lamp_status st = lamp_cifar10_parse(b, len, "fuzz", &c);
    if (st == LAMP_OK) {
      ok++;
      assert_int_equal(c.n * RECORD, len);
      assert_true(data_bytes() - before <= len);
      for (size_t r = 0; r < c.n; r++) {
        assert_int_equal(c.labels[r], b[r * RECORD]);
        assert_memory_equal(c.pixels + r * 3072, b + r * RECORD + 1, 3072);
      }
      lamp_cifar10_free(&c);
    } else {
      assert_int_equal(st, LAMP_ERR_INVALID_USAGE);
      assert_null(c.pixels);
    }
    assert_int_equal(data_bytes(), before);
  }
  assert_true(ok > 20 && ok < 400); /* both outcomes were exercised */
  free(b);
}

/* ---- data sets from a directory --------------------------------------------------------- */

/* Checks every sample of ds against file f's records in order, through a gather. */
static void check_samples(lamp_dataset *ds, const int *files, const size_t *counts, size_t nfiles, const float *mean,
                          const float *std) {
  size_t n = lamp_dataset_size(ds);
  size_t *idx = malloc(n * sizeof *idx);
  assert_non_null(idx);
  for (size_t i = 0; i < n; i++) idx[i] = i;
  lamp_tensor *x, *y;
  int64_t xs[4] = {(int64_t)n, 3, 32, 32}, ys[1] = {(int64_t)n};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 4, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_dataset_gather(ds, idx, n, x, y), LAMP_OK);
  const float *xd = lamp_tensor_data(x);
  const int32_t *yd = lamp_tensor_data(y);
  size_t s = 0;
  for (size_t k = 0; k < nfiles; k++)
    for (size_t i = 0; i < counts[k]; i++, s++) {
      assert_int_equal(yd[s], label_of(files[k], i));
      for (int c = 0; c < 3; c++)
        for (int r = 0; r < 32; r++)
          for (int col = 0; col < 32; col++)
            assert_true(xd[s * 3072 + (size_t)c * PLANE + (size_t)r * 32 + (size_t)col] ==
                        norm(pix(files[k], i, c, r, col), mean[c], std[c]));
    }
  assert_int_equal(s, n);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  free(idx);
}

static void test_train_split(void **state) {
  (void)state;
  const char *dir = make_cifar_dir("good", 0);
  size_t before = data_bytes();
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, "train"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 2 + 3 + 4 + 5 + 6);
  assert_int_equal(lamp_dataset_classes(ds), 10);
  assert_int_equal(lamp_dataset_channels(ds), 3);
  int64_t shape[3];
  assert_int_equal(lamp_dataset_sample_shape(ds, shape), 3);
  assert_int_equal(shape[0], 3);
  assert_int_equal(shape[1], 32);
  assert_int_equal(shape[2], 32);
  assert_int_equal(lamp_dataset_sample_numel(ds), 3072);
  assert_string_equal(lamp_dataset_name(ds), TMP "/good/train");
  /* Only the pixels and labels stay: the file buffers are gone. */
  assert_int_equal(data_bytes(), before + 20 * 3072 + 20);

  float mean[3], std[3];
  lamp_dataset_get_channel_normalization(ds, mean, std);
  for (int c = 0; c < 3; c++) {
    assert_true(mean[c] == cifar_mean[c]);
    assert_true(std[c] == cifar_std[c]);
  }
  const int files[5] = {1, 2, 3, 4, 5};
  const size_t counts[5] = {2, 3, 4, 5, 6};
  check_samples(ds, files, counts, 5, cifar_mean, cifar_std);

  /* Spelled out once: sample 0 is file 1's record 0; its blue pixel (0, 0) is 1*53 + 202 + 1 = 256 -> 0. */
  assert_int_equal(pix(1, 0, 2, 0, 0), 0);
  assert_true(fabsf(norm(0, cifar_mean[2], cifar_std[2]) - (-0.4465f / 0.2616f)) < 1e-6f);
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
}

static void test_test_split_in_subfolder(void **state) {
  (void)state;
  char dir[512], sub[600];
  snprintf(dir, sizeof dir, "%s/archive", TMP);
  snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", dir);
  make_dir(sub);
  write_cifar(sub, "test_batch.bin", 7, 5);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, "test"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 5);
  assert_string_equal(lamp_dataset_name(ds), TMP "/archive/test");
  const int files[1] = {7};
  const size_t counts[1] = {5};
  check_samples(ds, files, counts, 1, cifar_mean, cifar_std);
  lamp_dataset_release(ds);
  /* A trailing slash is not doubled. */
  char slashed[600];
  snprintf(slashed, sizeof slashed, "%s/", dir);
  assert_int_equal(lamp_dataset_cifar10(&ds, slashed, "test"), LAMP_OK);
  assert_string_equal(lamp_dataset_name(ds), TMP "/archive/test");
  lamp_dataset_release(ds);
}

static void test_missing_batch(void **state) {
  (void)state;
  const char *dir = make_cifar_dir("no3", 3);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       "cannot open " TMP "/no3/data_batch_3.bin: No such file or directory (CIFAR-10 train needs "
                       "data_batch_1.bin to data_batch_5.bin in " TMP "/no3 or in " TMP "/no3/cifar-10-batches-bin)");
  /* The test split is whole. */
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, "test"), LAMP_OK);
  lamp_dataset_release(ds);
}

static void test_missing_directory(void **state) {
  (void)state;
  expect_dataset_error(TMP "/nowhere", "test", LAMP_ERR_INVALID_USAGE,
                       "cannot open " TMP "/nowhere/test_batch.bin: No such file or directory (CIFAR-10 test needs "
                       "test_batch.bin in " TMP "/nowhere or in " TMP "/nowhere/cifar-10-batches-bin)");
  expect_dataset_error(TMP "/nowhere", "valid", LAMP_ERR_INVALID_ARG,
                       TMP "/nowhere: unknown CIFAR-10 split \"valid\" (valid: train, test)");
}

/* A bad file among good ones is named by its path, and nothing read before it is kept. */
static void test_bad_file_in_directory(void **state) {
  (void)state;
  const char *dir = make_cifar_dir("bad", 0);
  char path[1024];
  uint8_t *b = cifar_bytes(4, 5);
  snprintf(path, sizeof path, "%s/data_batch_4.bin", dir);
  write_bytes(path, b, 5 * RECORD - 5, 0);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       TMP "/bad/data_batch_4.bin: size 15360 is not a multiple of the CIFAR-10 record size 3073: "
                           "record 4 (at byte 12292) is truncated, 3068 of its 3073 bytes are present");
  b[2 * RECORD] = 12;
  write_bytes(path, b, 5 * RECORD, 0);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       TMP "/bad/data_batch_4.bin: record 2 (at byte 6146) has label 12; CIFAR-10 labels are 0 to 9");
  write_bytes(path, b, 0, 0);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       TMP "/bad/data_batch_4.bin: empty file; CIFAR-10 records are 3073 bytes (1 label byte, then "
                           "3072 pixel bytes)");
  write_bytes(path, b, 3000, 0);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       TMP "/bad/data_batch_4.bin: size 3000 is smaller than one CIFAR-10 record (3073 bytes: 1 label "
                           "byte, then 3072 pixel bytes)");
  /* A directory where a file should be. */
  remove(path);
  make_dir(path);
  expect_dataset_error(dir, "train", LAMP_ERR_INVALID_USAGE,
                       TMP "/bad/data_batch_4.bin is a directory, not a regular file");
  free(b);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_cifar: a read blocked for 10 s (a FIFO must be refused, not read)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* A FIFO in a file's place is refused, named for what it is, without waiting for a writer (a
   regression fails after 10 s instead of hanging the suite). */
static void test_fifo_in_directory(void **state) {
  (void)state;
  signal(SIGALRM, on_alarm);
  alarm(10);
  remove(TMP "/fifo/test_batch.bin"); /* an earlier run's FIFO would block writing the files */
  const char *dir = make_cifar_dir("fifo", 0);
  char path[600];
  snprintf(path, sizeof path, "%s/test_batch.bin", dir);
  remove(path);
  assert_int_equal(mkfifo(path, 0644), 0);
  expect_dataset_error(dir, "test", LAMP_ERR_INVALID_USAGE, TMP "/fifo/test_batch.bin is a FIFO, not a regular file");
  alarm(0);
  signal(SIGALRM, SIG_DFL);
}

/* ---- per-channel normalisation ---------------------------------------------------------- */

static void test_channel_normalization(void **state) {
  (void)state;
  const char *dir = make_cifar_dir("norm", 0);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_cifar10(&ds, dir, "test"), LAMP_OK);
  const int files[1] = {0};
  const size_t counts[1] = {4};

  /* The scalar form sets every channel. */
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.5f, 0.25f), LAMP_OK);
  const float half[3] = {0.5f, 0.5f, 0.5f}, quarter[3] = {0.25f, 0.25f, 0.25f};
  check_samples(ds, files, counts, 1, half, quarter);
  float m0, s0;
  lamp_dataset_get_normalization(ds, &m0, &s0);
  assert_true(m0 == 0.5f && s0 == 0.25f);

  const float mean[3] = {0.1f, 0.2f, 0.3f}, std[3] = {0.5f, 1.0f, 2.0f};
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 3, mean, std), LAMP_OK);
  check_samples(ds, files, counts, 1, mean, std);

  /* A subset inherits the channels' values; changing it later leaves the source alone. */
  lamp_dataset *sub;
  assert_int_equal(lamp_dataset_subset(&sub, ds, 1, 2), LAMP_OK);
  float got_mean[3], got_std[3];
  lamp_dataset_get_channel_normalization(sub, got_mean, got_std);
  assert_memory_equal(got_mean, mean, sizeof mean);
  assert_memory_equal(got_std, std, sizeof std);
  assert_int_equal(lamp_dataset_set_normalization(sub, 0.0f, 1.0f), LAMP_OK);
  lamp_dataset_get_channel_normalization(ds, got_mean, got_std);
  assert_memory_equal(got_mean, mean, sizeof mean);
  lamp_dataset_release(sub);

  /* Errors name the channel, and change nothing. */
  const float bad_std[3] = {0.5f, 0.0f, 1.0f}, bad_mean[3] = {0.0f, 0.0f, INFINITY};
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 3, mean, bad_std), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/norm/test: normalisation std of channel 1 must be finite and > 0, got 0");
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 3, bad_mean, std), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/norm/test: normalisation mean of channel 2 must be finite, got inf");
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 2, mean, std), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/norm/test: normalisation gives 2 channels, the data set has 3");
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 1, mean, std), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/norm/test: normalisation gives 1 channel, the data set has 3");
  assert_int_equal(lamp_dataset_set_channel_normalization(ds, 3, NULL, std), LAMP_ERR_INVALID_ARG);
  assert_int_equal(lamp_dataset_set_normalization(ds, 0.0f, -1.0f), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/norm/test: normalisation std must be finite and > 0, got -1");
  check_samples(ds, files, counts, 1, mean, std);
  lamp_dataset_release(ds);
}

/* Fashion-MNIST's samples are single-channel images already: [1, 28, 28], one channel's values. */
static void test_fashion_mnist_is_nchw(void **state) {
  (void)state;
  require_fashion_mnist();
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "t10k"), LAMP_OK);
  int64_t shape[3];
  assert_int_equal(lamp_dataset_sample_shape(ds, shape), 3);
  assert_int_equal(shape[0], 1);
  assert_int_equal(shape[1], 28);
  assert_int_equal(shape[2], 28);
  assert_int_equal(lamp_dataset_channels(ds), 1);
  float mean, std;
  lamp_dataset_get_channel_normalization(ds, &mean, &std);
  assert_true(mean == LAMP_FASHION_MNIST_MEAN && std == LAMP_FASHION_MNIST_STD);
  lamp_dataset_release(ds);
}

/* ---- handing bytes over ----------------------------------------------------------------- */

static void test_adopt(void **state) {
  (void)state;
  size_t before = data_bytes();
  lamp_dataset *ds;
  lamp_dataset_bytes b = {.name = "mem", .n = 2, .channels = 2, .rows = 1, .cols = 3};
  b.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 12);
  b.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 2);
  b.labels[1] = 4;
  assert_int_equal(lamp_dataset_adopt(&ds, &b), LAMP_OK);
  assert_null(b.pixels);
  assert_int_equal(lamp_dataset_classes(ds), 5);
  assert_int_equal(lamp_dataset_sample_numel(ds), 6);
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
  /* Refused bytes are freed all the same. */
  b.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 12);
  b.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 2);
  b.channels = 5;
  assert_int_equal(lamp_dataset_adopt(&ds, &b), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "mem: sample shape [5, 1, 3] is invalid (1 to 4 channels, rows and columns >= 1)");
  assert_null(ds);
  assert_null(b.pixels);
  b.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 11);
  b.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 2);
  b.channels = 2;
  assert_int_equal(lamp_dataset_adopt(&ds, &b), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "mem: the pixel or label block is smaller than 2 samples of 6 bytes");
  static const float half[2] = {0.5f, 0.5f};
  b.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 12);
  b.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 2);
  b.mean = half;
  assert_int_equal(lamp_dataset_adopt(&ds, &b), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "mem: default normalisation needs both mean and std, or neither");
  b.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 12);
  b.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, 2);
  b.std = half;
  assert_int_equal(lamp_dataset_adopt(&ds, &b), LAMP_OK);
  float mean[2], std[2];
  lamp_dataset_get_channel_normalization(ds, mean, std);
  assert_true(mean[1] == 0.5f && std[1] == 0.5f);
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_good),
      cmocka_unit_test(test_parse_wrong_size),
      cmocka_unit_test(test_parse_truncated_record),
      cmocka_unit_test(test_parse_bad_label),
      cmocka_unit_test(test_parse_too_large),
      cmocka_unit_test(test_parse_arguments),
      cmocka_unit_test(test_parse_fuzz),
      cmocka_unit_test(test_train_split),
      cmocka_unit_test(test_test_split_in_subfolder),
      cmocka_unit_test(test_missing_batch),
      cmocka_unit_test(test_missing_directory),
      cmocka_unit_test(test_bad_file_in_directory),
      cmocka_unit_test(test_fifo_in_directory),
      cmocka_unit_test(test_channel_normalization),
      cmocka_unit_test(test_fashion_mnist_is_nchw),
      cmocka_unit_test(test_adopt),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
