/*
** The IDX reader and the data sets built on it: good files (raw and gzip) parse to the exact
** bytes; truncated, corrupt, hostile and mismatched files fail with exact messages, leave the
** output zeroed and leak nothing. The files are written here, in LAMP_TEST_TMP_DIR.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/idx"

/* ---- fixtures --------------------------------------------------------------------------- */

static const char *tmp_path(const char *name) {
  static char buf[8][1024];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", TMP, name);
  return p;
}

/* An IDX image: header for (type, dims) followed by `payload` bytes of pattern (i * 7 + 3). */
static size_t idx_bytes(uint8_t *buf, uint8_t type, int ndim, const uint32_t *dims, size_t payload) {
  size_t n = idx_header(buf, type, ndim, dims);
  for (size_t i = 0; i < payload; i++) buf[n++] = (uint8_t)(i * 7 + 3);
  return n;
}

static void write_idx(const char *path, int ndim, const uint32_t *dims, size_t payload, int gz) {
  static uint8_t buf[1 << 16];
  write_bytes(path, buf, idx_bytes(buf, 0x08, ndim, dims, payload), gz);
}

/* Reads path expecting failure with exactly `message`; checks the output is zeroed and no data leaked. */
static void expect_read_error(const char *path, lamp_status code, const char *message) {
  size_t before = data_bytes();
  lamp_idx idx;
  memset(&idx, 0xa5, sizeof idx);
  assert_int_equal(lamp_idx_read(path, &idx), code);
  assert_string_equal(lamp_last_error(), message);
  assert_null(idx.data);
  assert_int_equal(idx.nbytes, 0);
  assert_int_equal(idx.ndim, 0);
  assert_int_equal(data_bytes(), before);
}

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  return 0;
}

/* ---- the reader: good files ------------------------------------------------------------- */

static void check_good(int gz) {
  const char *path = tmp_path(gz ? "good.gz" : "good");
  uint32_t dims[3] = {3, 4, 5};
  write_idx(path, 3, dims, 60, gz);
  size_t before = data_bytes();
  lamp_idx idx;
  assert_int_equal(lamp_idx_read(path, &idx), LAMP_OK);
  assert_int_equal(idx.type, 0x08);
  assert_int_equal(idx.ndim, 3);
  assert_int_equal(idx.dims[0], 3);
  assert_int_equal(idx.dims[1], 4);
  assert_int_equal(idx.dims[2], 5);
  assert_int_equal(idx.dims[3], 0);
  assert_int_equal(idx.nbytes, 60);
  for (size_t i = 0; i < 60; i++) assert_int_equal(idx.data[i], (uint8_t)(i * 7 + 3));
  assert_true(data_bytes() >= before + 60);
  lamp_idx_free(&idx);
  assert_null(idx.data);
  assert_int_equal(data_bytes(), before);
  lamp_idx_free(&idx); /* idempotent */
}

static void test_good_raw(void **state) {
  (void)state;
  check_good(0);
}

static void test_good_gzip(void **state) {
  (void)state;
  check_good(1);
}

/* A payload bigger than the first read chunk exercises the buffer growth. */
static void test_good_large(void **state) {
  (void)state;
  const char *path = tmp_path("large.gz");
  uint32_t n = 3 * 1024 * 1024 + 17;
  uint8_t *buf = malloc(8 + (size_t)n);
  assert_non_null(buf);
  size_t len = idx_bytes(buf, 0x08, 1, &n, n);
  write_bytes(path, buf, len, 1);
  lamp_idx idx;
  assert_int_equal(lamp_idx_read(path, &idx), LAMP_OK);
  assert_int_equal(idx.nbytes, n);
  assert_memory_equal(idx.data, buf + 8, n);
  lamp_idx_free(&idx);
  free(buf);
}

/* ---- the reader: bad files -------------------------------------------------------------- */

static void test_missing(void **state) {
  (void)state;
  expect_read_error(TMP "/no-such-file", LAMP_ERR_INVALID_USAGE,
                    "cannot open " TMP "/no-such-file: No such file or directory");
}

static void test_truncated_data(void **state) {
  (void)state;
  uint32_t dims[3] = {3, 4, 5};
  write_idx(tmp_path("short"), 3, dims, 50, 0);
  expect_read_error(tmp_path("short"), LAMP_ERR_INVALID_USAGE,
                    TMP "/short: truncated: expected 60 data bytes, found 50");
  write_idx(tmp_path("short.gz"), 3, dims, 59, 1);
  expect_read_error(tmp_path("short.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/short.gz: truncated: expected 60 data bytes, found 59");
}

/* A header promising almost 1 GiB over a few bytes must not cost 1 GiB of memory. */
static void test_truncated_huge_promise(void **state) {
  (void)state;
  uint32_t dims[3] = {1000, 1000, 1000};
  write_idx(tmp_path("promise"), 3, dims, 10, 0);
  lamp_ledger_reset_peaks();
  size_t before = data_bytes();
  expect_read_error(tmp_path("promise"), LAMP_ERR_INVALID_USAGE,
                    TMP "/promise: truncated: expected 1000000000 data bytes, found 10");
  assert_true(lamp_ledger_get(LAMP_HOST, LAMP_MEM_DATA).peak - before <= ((size_t)1 << 20));
}

static void test_truncated_header(void **state) {
  (void)state;
  write_bytes(tmp_path("empty"), "", 0, 0);
  expect_read_error(tmp_path("empty"), LAMP_ERR_INVALID_USAGE, TMP "/empty: empty file, not an IDX file");
  write_bytes(tmp_path("head2"), "\0\0", 2, 0);
  expect_read_error(tmp_path("head2"), LAMP_ERR_INVALID_USAGE,
                    TMP "/head2: truncated: expected 4 header bytes, found 2");
  const uint8_t head[] = {0, 0, 8, 3, 0, 0, 0, 9, 0, 0};
  write_bytes(tmp_path("head10.gz"), head, sizeof head, 1);
  expect_read_error(tmp_path("head10.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/head10.gz: truncated: expected 16 header bytes, found 10");
}

static void test_bad_magic(void **state) {
  (void)state;
  const uint8_t head[] = {1, 2, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 42};
  write_bytes(tmp_path("magic"), head, sizeof head, 0);
  expect_read_error(tmp_path("magic"), LAMP_ERR_INVALID_USAGE,
                    TMP "/magic: not an IDX file (magic 0x01020803, expected 0x0000TTNN: two zero bytes, then the "
                        "type code TT and the number of dimensions NN)");
}

static void test_bad_type(void **state) {
  (void)state;
  const uint8_t f32[] = {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0};
  write_bytes(tmp_path("f32"), f32, sizeof f32, 0);
  expect_read_error(tmp_path("f32"), LAMP_ERR_UNSUPPORTED,
                    TMP "/f32: IDX type 0x0d (32-bit float) is not supported; lamp reads 0x08 (unsigned byte)");
  const uint8_t unknown[] = {0, 0, 0x07, 1, 0, 0, 0, 1, 0};
  write_bytes(tmp_path("type7"), unknown, sizeof unknown, 0);
  expect_read_error(tmp_path("type7"), LAMP_ERR_INVALID_USAGE,
                    TMP "/type7: unknown IDX type code 0x07 (known: 0x08 unsigned byte, 0x09 signed byte, 0x0b "
                        "16-bit integer, 0x0c 32-bit integer, 0x0d 32-bit float, 0x0e 64-bit float)");
}

static void test_bad_ndim(void **state) {
  (void)state;
  const uint8_t zero[] = {0, 0, 8, 0, 1, 2, 3};
  write_bytes(tmp_path("ndim0"), zero, sizeof zero, 0);
  expect_read_error(tmp_path("ndim0"), LAMP_ERR_INVALID_USAGE,
                    TMP "/ndim0: IDX header declares 0 dimensions, expected 1 to 4");
  uint8_t five[4 + 20] = {0, 0, 8, 5};
  write_bytes(tmp_path("ndim5"), five, sizeof five, 0);
  expect_read_error(tmp_path("ndim5"), LAMP_ERR_INVALID_USAGE,
                    TMP "/ndim5: IDX header declares 5 dimensions, expected 1 to 4");
}

static void test_zero_dimension(void **state) {
  (void)state;
  uint32_t dims[3] = {5, 0, 28};
  write_idx(tmp_path("dim0"), 3, dims, 0, 0);
  expect_read_error(tmp_path("dim0"), LAMP_ERR_INVALID_USAGE,
                    TMP "/dim0: IDX dimension 2 of 3 is 0 (dimensions 5 x 0 x 28)");
}

static void test_oversized(void **state) {
  (void)state;
  uint32_t dims[3] = {60000, 28, 4294967295u};
  write_idx(tmp_path("huge"), 3, dims, 100, 0);
  expect_read_error(tmp_path("huge"), LAMP_ERR_INVALID_USAGE,
                    TMP "/huge: IDX dimensions 60000 x 28 x 4294967295 need 7215545055600000 bytes, more than the "
                        "1 GiB limit");
  /* Just over the limit: 2^30 + 2^15 bytes. */
  uint32_t over[2] = {32769, 32768};
  write_idx(tmp_path("over"), 2, over, 0, 0);
  expect_read_error(tmp_path("over"), LAMP_ERR_INVALID_USAGE,
                    TMP "/over: IDX dimensions 32769 x 32768 need 1073774592 bytes, more than the 1 GiB limit");
  /* The product of four maximal dimensions overflows 64 bits; it must still be refused cleanly. */
  uint32_t max4[4] = {4294967295u, 4294967295u, 4294967295u, 4294967295u};
  write_idx(tmp_path("overflow"), 4, max4, 0, 0);
  expect_read_error(tmp_path("overflow"), LAMP_ERR_INVALID_USAGE,
                    TMP "/overflow: IDX dimensions 4294967295 x 4294967295 x 4294967295 x 4294967295 need more than "
                        "2^64 bytes, more than the 1 GiB limit");
}

static void test_trailing_bytes(void **state) {
  (void)state;
  uint8_t buf[64];
  uint32_t dims[1] = {10};
  size_t n = idx_bytes(buf, 0x08, 1, dims, 10);
  memcpy(buf + n, "garbage", 7);
  write_bytes(tmp_path("trailing"), buf, n + 7, 0);
  expect_read_error(tmp_path("trailing"), LAMP_ERR_INVALID_USAGE, TMP "/trailing: 7 unexpected bytes after the data");
  write_bytes(tmp_path("trailing.gz"), buf, n + 1, 1);
  expect_read_error(tmp_path("trailing.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/trailing.gz: 1 unexpected bytes after the data");
}

static void test_garbage(void **state) {
  (void)state;
  const char text[] = "this is not an IDX file at all\n";
  write_bytes(tmp_path("garbage"), text, sizeof text - 1, 0);
  expect_read_error(tmp_path("garbage"), LAMP_ERR_INVALID_USAGE,
                    TMP "/garbage: not an IDX file (magic 0x74686973, expected 0x0000TTNN: two zero bytes, then the "
                        "type code TT and the number of dimensions NN)");
  /* A valid gzip stream of garbage decompresses fine and then fails as an IDX file. */
  write_bytes(tmp_path("garbage.gz"), text, sizeof text - 1, 1);
  expect_read_error(tmp_path("garbage.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/garbage.gz: not an IDX file (magic 0x74686973, expected 0x0000TTNN: two zero bytes, then "
                        "the type code TT and the number of dimensions NN)");
}

/* Reads a whole small file into buf; returns its length. */
static size_t slurp(const char *path, uint8_t *buf, size_t size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, size, f);
  fclose(f);
  return n;
}

static void test_corrupt_gzip(void **state) {
  (void)state;
  uint32_t dims[2] = {20, 20};
  write_idx(tmp_path("crc.gz"), 2, dims, 400, 1);
  uint8_t buf[4096];
  size_t n = slurp(tmp_path("crc.gz"), buf, sizeof buf);
  assert_true(n > 20);
  /* The gzip trailer is CRC-32 then length: flipping the CRC leaves the data decodable but wrong. */
  buf[n - 8] ^= 0xff;
  write_bytes(tmp_path("crc.gz"), buf, n, 0);
  expect_read_error(tmp_path("crc.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/crc.gz: corrupt gzip data (zlib: incorrect data check)");
  /* Cut inside the trailer: all data arrives but the checksum cannot be verified. */
  buf[n - 8] ^= 0xff;
  write_bytes(tmp_path("cut.gz"), buf, n - 3, 0);
  expect_read_error(tmp_path("cut.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/cut.gz: corrupt gzip data (zlib: unexpected end of file)");
  /* A gzip header followed by bytes that are not a deflate stream. */
  uint8_t bad[32] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  memset(bad + 10, 0xff, sizeof bad - 10);
  write_bytes(tmp_path("deflate.gz"), bad, sizeof bad, 0);
  expect_read_error(tmp_path("deflate.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/deflate.gz: corrupt gzip data (zlib: invalid block type)");
}

static void test_null_arguments(void **state) {
  (void)state;
  lamp_idx idx;
  assert_int_equal(lamp_idx_read(NULL, &idx), LAMP_ERR_INVALID_ARG);
  assert_null(idx.data);
  assert_int_equal(lamp_idx_read(TMP "/good", NULL), LAMP_ERR_INVALID_ARG);
  lamp_idx_free(NULL);
}

/* ---- data sets from files --------------------------------------------------------------- */

/* Writes <dir>/<split>-images-idx3-ubyte[.gz] (n x 2 x 3) and -labels-idx1-ubyte[.gz] (m). */
static const char *write_pair(const char *name, const char *split, uint32_t n, uint32_t m, int gz) {
  static char dir[1024];
  char path[1200];
  snprintf(dir, sizeof dir, "%s/%s", TMP, name);
  make_dir(dir);
  uint32_t image_dims[3] = {n, 2, 3};
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
  write_idx(path, 3, image_dims, (size_t)n * 6, gz);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, split, gz ? ".gz" : "");
  write_idx(path, 1, &m, m, gz);
  return dir;
}

static void test_dataset_dir(void **state) {
  (void)state;
  size_t before = data_bytes();
  write_pair("pair", "t10k", 4, 4, 1);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/pair", "t10k"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 4);
  /* Labels are the pattern i * 7 + 3: 3, 10, 17, 24. */
  assert_int_equal(lamp_dataset_classes(ds), 25);
  int64_t shape[LAMP_MAX_DIMS];
  assert_int_equal(lamp_dataset_sample_shape(ds, shape), 3);
  assert_int_equal(shape[0], 1);
  assert_int_equal(shape[1], 2);
  assert_int_equal(shape[2], 3);
  assert_int_equal(lamp_dataset_sample_numel(ds), 6);
  assert_string_equal(lamp_dataset_name(ds), TMP "/pair/t10k");
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
}

/* Raw files are the fallback when no .gz exists. */
static void test_dataset_raw_fallback(void **state) {
  (void)state;
  write_pair("raw", "train", 3, 3, 0);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/raw/", "train"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 3);
  assert_string_equal(lamp_dataset_name(ds), TMP "/raw/train");
  lamp_dataset_release(ds);
}

static void test_dataset_count_mismatch(void **state) {
  (void)state;
  size_t before = data_bytes();
  write_pair("mismatch", "train", 5, 4, 0);
  lamp_dataset *ds = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/mismatch", "train"), LAMP_ERR_INVALID_USAGE);
  assert_null(ds);
  assert_string_equal(lamp_last_error(), TMP "/mismatch/train: " TMP "/mismatch/train-images-idx3-ubyte holds 5 "
                                             "images but " TMP "/mismatch/train-labels-idx1-ubyte holds 4 labels");
  assert_int_equal(data_bytes(), before);
}

static void test_dataset_wrong_ranks(void **state) {
  (void)state;
  size_t before = data_bytes();
  make_dir(TMP "/ranks");
  uint32_t flat[2] = {4, 6}, labels[1] = {4};
  write_idx(TMP "/ranks/train-images-idx3-ubyte", 2, flat, 24, 0);
  write_idx(TMP "/ranks/train-labels-idx1-ubyte", 1, labels, 4, 0);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/ranks", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/ranks/train: " TMP "/ranks/train-images-idx3-ubyte has 2 dimensions, "
                                             "expected 3 (images, rows, columns)");
  uint32_t images[3] = {4, 2, 3}, label_grid[2] = {4, 1};
  write_idx(TMP "/ranks/train-images-idx3-ubyte", 3, images, 24, 0);
  write_idx(TMP "/ranks/train-labels-idx1-ubyte", 2, label_grid, 4, 0);
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/ranks", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/ranks/train: " TMP "/ranks/train-labels-idx1-ubyte has 2 dimensions, "
                                             "expected 1 (one label per image)");
  assert_int_equal(data_bytes(), before);
}

/* A corrupt file inside a data set reports the reader's message unchanged. */
static void test_dataset_bad_file(void **state) {
  (void)state;
  size_t before = data_bytes();
  write_pair("badlabels", "train", 2, 2, 1);
  write_bytes(TMP "/badlabels/train-labels-idx1-ubyte.gz", "nonsense", 8, 0);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/badlabels", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(),
                      TMP "/badlabels/train-labels-idx1-ubyte.gz: not an IDX file (magic 0x6e6f6e73, expected "
                          "0x0000TTNN: two zero bytes, then the type code TT and the number of dimensions NN)");
  assert_int_equal(data_bytes(), before);
}

static void test_dataset_missing(void **state) {
  (void)state;
  make_dir(TMP "/nothing");
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/nothing", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/nothing: cannot open " TMP
                                             "/nothing/train-images-idx3-ubyte.gz: No such file or directory");
  /* Images present, labels missing: the labels file is named. */
  write_pair("nolabels", "train", 2, 2, 1);
  remove(TMP "/nolabels/train-labels-idx1-ubyte.gz");
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/nolabels", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/nolabels: cannot open " TMP
                                             "/nolabels/train-labels-idx1-ubyte.gz: No such file or directory");
}

static void test_named_missing(void **state) {
  (void)state;
  make_dir(TMP "/empty-data");
  setenv("LAMP_DATA_DIR", TMP "/empty-data", 1);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "train"), LAMP_ERR_INVALID_USAGE);
  unsetenv("LAMP_DATA_DIR");
  assert_string_equal(lamp_last_error(), "fashion-mnist: cannot open " TMP "/empty-data/train-images-idx3-ubyte.gz: "
                                         "No such file or directory (install the Debian package "
                                         "dataset-fashion-mnist, or set LAMP_DATA_DIR)");
  struct stat sb;
  if (stat(LAMP_FASHION_MNIST_DIR, &sb) == 0) return; /* installed: the default cannot be missing */
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(),
                      "fashion-mnist: cannot open /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz: No "
                      "such file or directory (install the Debian package dataset-fashion-mnist, or set "
                      "LAMP_DATA_DIR)");
}

/* LAMP_DATA_DIR replaces the directory "fashion-mnist" stands for. */
static void test_named_env(void **state) {
  (void)state;
  write_pair("envdata", "t10k", 3, 3, 1);
  setenv("LAMP_DATA_DIR", TMP "/envdata", 1);
  lamp_dataset *ds;
  lamp_status st = lamp_dataset_idx(&ds, "fashion-mnist", "t10k");
  unsetenv("LAMP_DATA_DIR");
  assert_int_equal(st, LAMP_OK);
  assert_string_equal(lamp_dataset_name(ds), "fashion-mnist/t10k");
  assert_int_equal(lamp_dataset_size(ds), 3);
  float mean, std;
  lamp_dataset_get_normalization(ds, &mean, &std);
  assert_true(mean == 0.2860f && std == 0.3530f);
  lamp_dataset_release(ds);
}

static void test_unknown_split(void **state) {
  (void)state;
  lamp_dataset *ds = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "val"), LAMP_ERR_INVALID_ARG);
  assert_null(ds);
  assert_string_equal(lamp_last_error(), "fashion-mnist: unknown split \"val\" (valid: train, t10k)");
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/pair", "test"), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/pair: unknown split \"test\" (valid: train, t10k)");
}

/* The real thing, where the Debian package is installed. */
static void test_real_fashion_mnist(void **state) {
  (void)state;
  require_fashion_mnist();
  size_t before = data_bytes();
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "train"), LAMP_OK);
  assert_string_equal(lamp_dataset_name(ds), "fashion-mnist/train");
  assert_int_equal(lamp_dataset_size(ds), 60000);
  assert_int_equal(lamp_dataset_classes(ds), 10);
  int64_t shape[LAMP_MAX_DIMS];
  assert_int_equal(lamp_dataset_sample_shape(ds, shape), 3);
  assert_int_equal(shape[0], 1);
  assert_int_equal(shape[1], 28);
  assert_int_equal(shape[2], 28);
  assert_int_equal(lamp_dataset_sample_numel(ds), 784);
  /* Sample 0 is an ankle boot (label 9); its pixel 406 is 217. */
  lamp_tensor *x, *y;
  int64_t xs[2] = {2, 784}, ys[1] = {2};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  size_t idx[2] = {0, 3};
  assert_int_equal(lamp_dataset_gather(ds, idx, 2, x, y), LAMP_OK);
  const int32_t *labels = lamp_tensor_data(y);
  const float *pixels = lamp_tensor_data(x);
  assert_int_equal(labels[0], 9);
  assert_int_equal(labels[1], 3);
  assert_true(pixels[406] == (217.0f / 255.0f - 0.2860f) / 0.3530f);
  assert_true(pixels[0] == (0.0f - 0.2860f) / 0.3530f);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_dataset_release(ds);
  assert_int_equal(lamp_dataset_idx(&ds, "fashion-mnist", "t10k"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 10000);
  assert_int_equal(lamp_dataset_classes(ds), 10);
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_raw),
      cmocka_unit_test(test_good_gzip),
      cmocka_unit_test(test_good_large),
      cmocka_unit_test(test_missing),
      cmocka_unit_test(test_truncated_data),
      cmocka_unit_test(test_truncated_huge_promise),
      cmocka_unit_test(test_truncated_header),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_bad_type),
      cmocka_unit_test(test_bad_ndim),
      cmocka_unit_test(test_zero_dimension),
      cmocka_unit_test(test_oversized),
      cmocka_unit_test(test_trailing_bytes),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_corrupt_gzip),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_dataset_dir),
      cmocka_unit_test(test_dataset_raw_fallback),
      cmocka_unit_test(test_dataset_count_mismatch),
      cmocka_unit_test(test_dataset_wrong_ranks),
      cmocka_unit_test(test_dataset_bad_file),
      cmocka_unit_test(test_dataset_missing),
      cmocka_unit_test(test_named_missing),
      cmocka_unit_test(test_named_env),
      cmocka_unit_test(test_unknown_split),
      cmocka_unit_test(test_real_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
