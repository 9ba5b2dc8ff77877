/*
** The checkpoint container: every dtype, meta type and blob survives a round trip bit for bit;
** hostile files (truncated at every sixteenth, a flipped byte anywhere, a huge dimension,
** wrong magic, a future version, malformed header records) are refused with their exact
** message, allocate no more than the file's size plus a small index, and leak nothing.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "tensor/ledger.h"
#include "tensor/memory.h"
#include "test_support.h"

#define TMP LAMP_TEST_TMP_DIR "/checkpoint"

static size_t workspace_bytes(void) { return lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current; }

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* The header CRC as the format defines it, computed independently with zlib. */
static uint32_t header_crc(const uint8_t *file, uint32_t header_len) {
  uLong crc = crc32(0, file, 24);
  return (uint32_t)crc32(crc, file + 32, header_len);
}

/*
** A file made by hand: the preamble (with a correct length and header CRC), the header text,
** zero padding to 64, then data_len bytes of data (copied from data, or zeros).
*/
static uint8_t *craft(const char *header, const void *data, size_t data_len, size_t *len) {
  size_t h = strlen(header);
  size_t start = (32 + h + 63) / 64 * 64;
  *len = start + data_len;
  uint8_t *buf = calloc(1, *len);
  assert_non_null(buf);
  memcpy(buf, "LAMPCKPT", 8);
  put_u32(buf + 8, 1);
  put_u32(buf + 12, (uint32_t)h);
  put_u64(buf + 16, *len);
  memcpy(buf + 32, header, h);
  put_u32(buf + 24, header_crc(buf, (uint32_t)h));
  if (data) memcpy(buf + start, data, data_len);
  return buf;
}

/* Opens bytes expecting failure with exactly `message` ("<name>: " is prepended); checks that
   the output stays NULL and nothing leaks. */
static void expect_refused(const void *bytes, size_t len, lamp_status code, const char *message) {
  size_t before = workspace_bytes();
  lamp_ckpt *c = (lamp_ckpt *)1;
  char expected[4096];
  snprintf(expected, sizeof expected, "mem: %s", message);
  lamp_status st = lamp_ckpt_open_memory(&c, bytes, len, "mem");
  if (st == LAMP_OK) fail_msg("accepted; expected: %s", expected);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
  assert_null(c);
  assert_int_equal(workspace_bytes(), before);
}

/* Crafts a file from header text and expects it refused with message. */
static void expect_header_refused(const char *header, size_t data_len, const char *message) {
  size_t len;
  uint8_t *buf = craft(header, NULL, data_len, &len);
  expect_refused(buf, len, LAMP_ERR_INVALID_USAGE, message);
  free(buf);
}

static void write_file(const char *path, const void *bytes, size_t len) { write_bytes(path, bytes, len, 0); }

static int setup(void **state) {
  (void)state;
  make_dir(TMP);
  return 0;
}

/* ---- a sample checkpoint -------------------------------------------------------------------- */

static float sample_w[3 * 5];
static uint16_t sample_h[7];
static uint64_t sample_rng[4] = {0x0123456789abcdefull, 0xfedcba9876543210ull, 1, UINT64_MAX};

/* metas step=1200, precision="fp16", lr=0.001; tensors w f32[3,5], h bf16[7], rng u64[4];
   blob scaler of 24 bytes. */
static void sample_bytes(void **bytes, size_t *len) {
  for (int i = 0; i < 15; i++) sample_w[i] = (float)i * 0.25f - 1.0f;
  for (int i = 0; i < 7; i++) sample_h[i] = (uint16_t)(0x3f80 + i);
  uint8_t scaler[24];
  for (int i = 0; i < 24; i++) scaler[i] = (uint8_t)(i * 11);
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_meta_int(w, "step", 1200));
  OK(lamp_ckpt_add_meta_str(w, "precision", "fp16"));
  OK(lamp_ckpt_add_meta_double(w, "lr", 0.001));
  OK(lamp_ckpt_add_tensor(w, "w", LAMP_CKPT_F32, 2, (int64_t[]){3, 5}, sample_w));
  OK(lamp_ckpt_add_tensor(w, "h", LAMP_CKPT_BF16, 1, (int64_t[]){7}, sample_h));
  OK(lamp_ckpt_add_tensor(w, "rng", LAMP_CKPT_U64, 1, (int64_t[]){4}, sample_rng));
  OK(lamp_ckpt_add_blob(w, "scaler", scaler, sizeof scaler));
  OK(lamp_ckpt_write_memory(w, bytes, len));
  lamp_ckpt_writer_free(w);
}

/* The sample's exact layout, pinned: a format change must be deliberate. */
static void test_sample_layout(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  const uint8_t *b = bytes;
  assert_memory_equal(b, "LAMPCKPT", 8);
  assert_int_equal(get_u32(b + 8), 1);
  uint32_t h = get_u32(b + 12);
  const char *expected_header = "int step 1200\n"
                                "str precision fp16\n"
                                "f64 lr 0.001\n"
                                "tensor w f32 [3,5] 0 %08x\n"
                                "tensor h bf16 [7] 64 %08x\n"
                                "tensor rng u64 [4] 128 %08x\n"
                                "blob scaler 24 192 %08x\n";
  size_t start = (32 + h + 63) / 64 * 64;
  char header[1024];
  snprintf(header, sizeof header, expected_header, (unsigned)crc32(0, b + start, 60),
           (unsigned)crc32(0, b + start + 64, 14), (unsigned)crc32(0, b + start + 128, 32),
           (unsigned)crc32(0, b + start + 192, 24));
  assert_int_equal(h, strlen(header));
  assert_memory_equal(b + 32, header, h);
  assert_int_equal(len, start + 192 + 24);
  assert_int_equal(get_u32(b + 24), header_crc(b, h));
  assert_memory_equal(b + start, sample_w, sizeof sample_w);
  assert_memory_equal(b + start + 128, sample_rng, sizeof sample_rng);
  lamp_mem_free(bytes);
}

/* ---- round trip ----------------------------------------------------------------------------- */

static void check_round_trip(lamp_ckpt *c, void *const *data, const int64_t (*shapes)[3], const int *ndims) {
  assert_int_equal(lamp_ckpt_entry_count(c), LAMP_CKPT_DTYPE_COUNT + 3);
  for (int d = 0; d < LAMP_CKPT_DTYPE_COUNT; d++) {
    const lamp_ckpt_entry *e = lamp_ckpt_entry_at(c, (size_t)d);
    char name[32];
    snprintf(name, sizeof name, "t.%s", lamp_ckpt_dtype_name((lamp_ckpt_dtype)d));
    assert_string_equal(e->name, name);
    assert_int_equal(e->kind, LAMP_CKPT_TENSOR);
    assert_int_equal(e->dtype, d);
    assert_int_equal(e->ndim, ndims[d]);
    size_t n = lamp_ckpt_dtype_size((lamp_ckpt_dtype)d);
    for (int i = 0; i < ndims[d]; i++) {
      assert_int_equal(e->shape[i], shapes[d][i]);
      n *= (size_t)shapes[d][i];
    }
    assert_int_equal(e->nbytes, n);
    assert_int_equal((uintptr_t)e->data % 64, 0);
    assert_int_equal(e->offset % 64, 0);
    if (n) assert_memory_equal(e->data, data[d], n);
    const lamp_ckpt_entry *found;
    OK(lamp_ckpt_find(c, name, &found));
    assert_ptr_equal(found, e);
    /* A typed copy with the right dtype and shape. */
    void *copy = malloc(n + 1);
    OK(lamp_ckpt_read_tensor(c, name, (lamp_ckpt_dtype)d, ndims[d], shapes[d], copy));
    if (n) assert_memory_equal(copy, data[d], n);
    free(copy);
  }
  const void *blob;
  size_t nbytes;
  OK(lamp_ckpt_blob(c, "blob.empty", &blob, &nbytes));
  assert_int_equal(nbytes, 0);
  OK(lamp_ckpt_blob(c, "blob/scaler", &blob, &nbytes));
  assert_int_equal(nbytes, 5);
  assert_memory_equal(blob, "\x00\x01\xff\n ", 5);
  OK(lamp_ckpt_blob(c, "blob:big", &blob, &nbytes));
  assert_int_equal(nbytes, 1000);
  for (size_t i = 0; i < nbytes; i++) assert_int_equal(((const uint8_t *)blob)[i], (uint8_t)(i * 31));
  const lamp_ckpt_entry *e = lamp_ckpt_entry_at(c, LAMP_CKPT_DTYPE_COUNT + 2);
  assert_int_equal(e->kind, LAMP_CKPT_BLOB);
  assert_int_equal(e->dtype, LAMP_CKPT_U8);
  assert_int_equal(e->ndim, 1);
  assert_int_equal(e->shape[0], 1000);
  assert_null(lamp_ckpt_entry_at(c, LAMP_CKPT_DTYPE_COUNT + 3));
}

static const char *const strings[] = {"", "plain", " spaces at both ends ", "tab\there\nnewline\rcr",
                                      "back\\slash \\n not an escape", "\x01\x1f\x7f controls", "utf-8: \xc3\xa9\xe2\x82\xac"};
static const int64_t ints[] = {0, 1, -1, INT64_MAX, INT64_MIN, 1200};
static const double doubles[] = {0.0, -0.0, 0.1, 1.0 / 3.0, DBL_MAX, -DBL_MIN, 4.9406564584124654e-324, 1e300};

static void check_metas(lamp_ckpt *c) {
  size_t n_str = sizeof strings / sizeof strings[0], n_int = sizeof ints / sizeof ints[0],
         n_dbl = sizeof doubles / sizeof doubles[0];
  assert_int_equal(lamp_ckpt_meta_count(c), n_str + n_int + n_dbl + 3);
  char key[32];
  for (size_t i = 0; i < n_str; i++) {
    const char *s;
    snprintf(key, sizeof key, "s%zu", i);
    OK(lamp_ckpt_meta_str(c, key, &s));
    assert_string_equal(s, strings[i]);
  }
  for (size_t i = 0; i < n_int; i++) {
    int64_t v;
    snprintf(key, sizeof key, "i%zu", i);
    OK(lamp_ckpt_meta_int(c, key, &v));
    assert_true(v == ints[i]);
  }
  for (size_t i = 0; i < n_dbl; i++) {
    double v;
    snprintf(key, sizeof key, "d%zu", i);
    OK(lamp_ckpt_meta_double(c, key, &v));
    assert_memory_equal(&v, &doubles[i], sizeof v); /* bit for bit, the sign of -0.0 included */
  }
  double v;
  OK(lamp_ckpt_meta_double(c, "inf", &v));
  assert_true(isinf(v) && v > 0);
  OK(lamp_ckpt_meta_double(c, "-inf", &v));
  assert_true(isinf(v) && v < 0);
  OK(lamp_ckpt_meta_double(c, "nan", &v));
  assert_true(isnan(v));
  assert_true(lamp_ckpt_has_meta(c, "s0"));
  assert_false(lamp_ckpt_has_meta(c, "nope"));
  const lamp_ckpt_meta *m = lamp_ckpt_meta_at(c, 0);
  assert_string_equal(m->key, "s0");
  assert_int_equal(m->type, LAMP_CKPT_META_STR);
  assert_null(lamp_ckpt_meta_at(c, lamp_ckpt_meta_count(c)));
}

static void fill_writer(lamp_ckpt_writer *w, void **data, int64_t (*shapes)[3], int *ndims) {
  char key[32];
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    snprintf(key, sizeof key, "s%zu", i);
    OK(lamp_ckpt_add_meta_str(w, key, strings[i]));
  }
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(key, sizeof key, "i%zu", i);
    OK(lamp_ckpt_add_meta_int(w, key, ints[i]));
  }
  for (size_t i = 0; i < sizeof doubles / sizeof doubles[0]; i++) {
    snprintf(key, sizeof key, "d%zu", i);
    OK(lamp_ckpt_add_meta_double(w, key, doubles[i]));
  }
  OK(lamp_ckpt_add_meta_double(w, "inf", INFINITY));
  OK(lamp_ckpt_add_meta_double(w, "-inf", -INFINITY));
  OK(lamp_ckpt_add_meta_double(w, "nan", NAN));
  /* Every dtype, with a scalar, an empty tensor and ranks up to the maximum among them. */
  for (int d = 0; d < LAMP_CKPT_DTYPE_COUNT; d++) {
    ndims[d] = d % 4; /* 0 (scalar), 1, 2, 3 */
    size_t n = 1;
    for (int i = 0; i < ndims[d]; i++) {
      shapes[d][i] = d == 5 && i == 0 ? 0 : 2 + i + d; /* f64 is empty: a zero dimension */
      n *= (size_t)shapes[d][i];
    }
    size_t bytes = n * lamp_ckpt_dtype_size((lamp_ckpt_dtype)d);
    data[d] = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)data[d])[i] = (uint8_t)(i * 13 + (size_t)d);
    char name[32];
    snprintf(name, sizeof name, "t.%s", lamp_ckpt_dtype_name((lamp_ckpt_dtype)d));
    OK(lamp_ckpt_add_tensor(w, name, (lamp_ckpt_dtype)d, ndims[d], shapes[d], data[d]));
  }
  OK(lamp_ckpt_add_blob(w, "blob.empty", NULL, 0));
  OK(lamp_ckpt_add_blob(w, "blob/scaler", "\x00\x01\xff\n ", 5));
  uint8_t big[1000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 31);
  OK(lamp_ckpt_add_blob(w, "blob:big", big, sizeof big));
  memset(big, 0, sizeof big); /* blobs are copied */
}

static void test_round_trip(void **state) {
  (void)state;
  size_t before = workspace_bytes();
  void *data[LAMP_CKPT_DTYPE_COUNT];
  int64_t shapes[LAMP_CKPT_DTYPE_COUNT][3];
  int ndims[LAMP_CKPT_DTYPE_COUNT];
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  fill_writer(w, data, shapes, ndims);
  /* In memory ... */
  void *bytes;
  size_t len;
  OK(lamp_ckpt_write_memory(w, &bytes, &len));
  lamp_ckpt *c;
  OK(lamp_ckpt_open_memory(&c, bytes, len, "memory"));
  assert_string_equal(lamp_ckpt_name(c), "memory");
  assert_int_equal(lamp_ckpt_file_size(c), len);
  check_metas(c);
  check_round_trip(c, data, (const int64_t(*)[3])shapes, ndims);
  lamp_ckpt_close(c);
  /* ... and through a file, which must hold the same bytes. */
  OK(lamp_ckpt_write_atomic(w, TMP "/all.lamp"));
  OK(lamp_ckpt_open(&c, TMP "/all.lamp"));
  check_metas(c);
  check_round_trip(c, data, (const int64_t(*)[3])shapes, ndims);
  lamp_ckpt_close(c);
  FILE *f = fopen(TMP "/all.lamp", "rb");
  uint8_t *disk = malloc(len + 1);
  assert_int_equal(fread(disk, 1, len + 1, f), len);
  fclose(f);
  assert_memory_equal(disk, bytes, len);
  free(disk);
  lamp_mem_free(bytes);
  lamp_ckpt_writer_free(w);
  for (int d = 0; d < LAMP_CKPT_DTYPE_COUNT; d++) free(data[d]);
  assert_int_equal(workspace_bytes(), before);
}

static void test_empty_checkpoint(void **state) {
  (void)state;
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  void *bytes;
  size_t len;
  OK(lamp_ckpt_write_memory(w, &bytes, &len));
  assert_int_equal(len, 64);
  lamp_ckpt *c;
  OK(lamp_ckpt_open_memory(&c, bytes, len, "empty"));
  assert_int_equal(lamp_ckpt_meta_count(c), 0);
  assert_int_equal(lamp_ckpt_entry_count(c), 0);
  lamp_ckpt_close(c);
  lamp_mem_free(bytes);
  lamp_ckpt_writer_free(w);
}

/* ---- lookups --------------------------------------------------------------------------------- */

static void test_lookup_errors(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  lamp_ckpt *c;
  OK(lamp_ckpt_open_memory(&c, bytes, len, "ck"));
  int64_t i;
  double d;
  const char *s;
  assert_int_equal(lamp_ckpt_meta_int(c, "epoch", &i), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: no meta 'epoch' in this checkpoint");
  assert_int_equal(lamp_ckpt_meta_int(c, "precision", &i), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: meta 'precision' is a string, expected an integer");
  assert_int_equal(lamp_ckpt_meta_double(c, "step", &d), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: meta 'step' is an integer, expected a double");
  assert_int_equal(lamp_ckpt_meta_str(c, "lr", &s), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: meta 'lr' is a double, expected a string");
  const lamp_ckpt_entry *e;
  assert_int_equal(lamp_ckpt_find(c, "0.weight", &e), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: no tensor or blob '0.weight' in this checkpoint");
  float w[15];
  assert_int_equal(lamp_ckpt_read_tensor(c, "w", LAMP_CKPT_F32, 2, (int64_t[]){5, 3}, w), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: tensor 'w' is f32[3, 5], expected f32[5, 3]");
  assert_int_equal(lamp_ckpt_read_tensor(c, "w", LAMP_CKPT_F16, 2, (int64_t[]){3, 5}, w), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: tensor 'w' is f32[3, 5], expected f16[3, 5]");
  assert_int_equal(lamp_ckpt_read_tensor(c, "scaler", LAMP_CKPT_U8, 1, (int64_t[]){24}, w), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: 'scaler' is a blob, expected a tensor");
  const void *data;
  size_t n;
  assert_int_equal(lamp_ckpt_blob(c, "w", &data, &n), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: 'w' is a tensor, expected a blob");
  assert_int_equal(lamp_ckpt_check_tensor(c, "w", LAMP_CKPT_F32, 1, (int64_t[]){15}), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: tensor 'w' is f32[3, 5], expected f32[15]");
  assert_int_equal(lamp_ckpt_check_tensor(c, "nope", LAMP_CKPT_F32, 0, NULL), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "ck: no tensor or blob 'nope' in this checkpoint");
  OK(lamp_ckpt_check_tensor(c, "w", LAMP_CKPT_F32, 2, (int64_t[]){3, 5}));
  OK(lamp_ckpt_read_tensor(c, "w", LAMP_CKPT_F32, 2, (int64_t[]){3, 5}, w));
  assert_memory_equal(w, sample_w, sizeof w);
  lamp_ckpt_close(c);
  lamp_mem_free(bytes);
}

static void test_writer_errors(void **state) {
  (void)state;
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  float x = 1;
  assert_int_equal(lamp_ckpt_add_meta_int(w, "has space", 1), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: invalid meta name 'has space' (expected 1 to 255 characters from "
                                         "A-Z a-z 0-9 _ . : / - + @)");
  assert_int_equal(lamp_ckpt_add_meta_int(w, "", 1), LAMP_ERR_INVALID_ARG);
  OK(lamp_ckpt_add_meta_int(w, "step", 1));
  assert_int_equal(lamp_ckpt_add_meta_str(w, "step", "x"), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: meta 'step' added twice");
  OK(lamp_ckpt_add_tensor(w, "x", LAMP_CKPT_F32, 0, NULL, &x));
  assert_int_equal(lamp_ckpt_add_blob(w, "x", "a", 1), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: entry 'x' added twice");
  assert_int_equal(lamp_ckpt_add_tensor(w, "y", LAMP_CKPT_F32, 1, (int64_t[]){-2}, &x), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: tensor 'y' dimension 0 is negative (-2)");
  assert_int_equal(lamp_ckpt_add_tensor(w, "y", LAMP_CKPT_F32, 9, (int64_t[9]){1}, &x), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: tensor 'y' has 9 dimensions, expected 0 to 8");
  assert_int_equal(lamp_ckpt_add_tensor(w, "y", (lamp_ckpt_dtype)42, 0, NULL, &x), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: tensor 'y' has unknown dtype 42");
  assert_int_equal(lamp_ckpt_add_tensor(w, "y", LAMP_CKPT_F32, 1, (int64_t[]){4}, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "checkpoint: tensor 'y' of 16 bytes has NULL data");
  assert_int_equal(lamp_ckpt_write_atomic(w, TMP "/no/such/folder/x.lamp"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "cannot create " TMP "/no/such/folder/x.lamp.tmp: No such file or directory");
  lamp_ckpt_writer_free(w);
  lamp_ckpt_writer_free(NULL);
}

/* Only regular files are checkpoints: a FIFO is refused at once instead of waiting forever for a
   writer, and the writer refuses a FIFO in place of its .tmp the same way. */
static void test_not_regular_files(void **state) {
  (void)state;
  unlink(TMP "/fifo.lamp");
  unlink(TMP "/out.lamp.tmp");
  assert_int_equal(mkfifo(TMP "/fifo.lamp", 0644), 0);
  assert_int_equal(mkfifo(TMP "/out.lamp.tmp", 0644), 0);
  alarm(20); /* a hang fails the test instead of holding up the suite */
  lamp_ckpt *c = (lamp_ckpt *)1;
  assert_int_equal(lamp_ckpt_open(&c, TMP "/fifo.lamp"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/fifo.lamp is a FIFO, not a regular file");
  assert_null(c);
  char *text;
  assert_int_equal(lamp_ckpt_info(TMP "/fifo.lamp", &text), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/fifo.lamp is a FIFO, not a regular file");
  assert_int_equal(lamp_ckpt_open(&c, TMP), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP " is a directory, not a regular file");
  assert_int_equal(lamp_ckpt_open(&c, "/dev/null"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), "/dev/null is a character device, not a regular file");
  lamp_ckpt_writer *w;
  OK(lamp_ckpt_writer_new(&w));
  OK(lamp_ckpt_add_meta_int(w, "step", 1));
  assert_int_equal(lamp_ckpt_write_atomic(w, TMP "/out.lamp"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/out.lamp.tmp is a FIFO, not a regular file");
  alarm(0);
  unlink(TMP "/out.lamp.tmp");
  OK(lamp_ckpt_write_atomic(w, TMP "/out.lamp"));
  lamp_ckpt_writer_free(w);
  unlink(TMP "/fifo.lamp");
}

static void test_info(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  write_file(TMP "/info.lamp", bytes, len);
  char *text;
  OK(lamp_ckpt_info(TMP "/info.lamp", &text));
  const uint8_t *b = bytes;
  char expected[4096];
  snprintf(expected, sizeof expected,
           TMP "/info.lamp: lamp checkpoint format 1, %zu bytes (header %u bytes, crc32 %08x; data from byte 256)\n"
               "metas (3):\n"
               "  int  step       1200\n"
               "  str  precision  \"fp16\"\n"
               "  f64  lr         0.001\n"
               "entries (4, 130 bytes of data):\n"
               "  kind    name    dtype[shape]                     bytes        offset  crc32\n"
               "  tensor  w       f32[3, 5]                           60             0  %08x\n"
               "  tensor  h       bf16[7]                             14            64  %08x\n"
               "  tensor  rng     u64[4]                              32           128  %08x\n"
               "  blob    scaler  u8[24]                              24           192  %08x\n",
           len, get_u32(b + 12), get_u32(b + 24), (unsigned)crc32(0, b + 256, 60), (unsigned)crc32(0, b + 320, 14),
           (unsigned)crc32(0, b + 384, 32), (unsigned)crc32(0, b + 448, 24));
  assert_string_equal(text, expected);
  free(text);
  assert_int_equal(lamp_ckpt_info(TMP "/missing.lamp", &text), LAMP_ERR_INVALID_USAGE);
  assert_null(text);
  assert_string_equal(lamp_last_error(), "cannot open " TMP "/missing.lamp: No such file or directory");
  lamp_mem_free(bytes);
}

/* ---- hostile files: the list --------------------------------------------------------- */

/* Truncated at every sixteenth of its length, through the file reader. */
static void test_truncated(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  for (size_t k = 0; k < 16; k++) {
    size_t cut = len * k / 16;
    write_file(TMP "/cut.lamp", bytes, cut);
    char expected[1024];
    if (cut == 0) snprintf(expected, sizeof expected, TMP "/cut.lamp: empty file, not a lamp checkpoint");
    else if (cut < 32)
      snprintf(expected, sizeof expected,
               TMP "/cut.lamp: truncated: %zu bytes, shorter than the 32-byte checkpoint preamble", cut);
    else
      snprintf(expected, sizeof expected, TMP "/cut.lamp: truncated: the checkpoint is %zu bytes long, the file has %zu",
               len, cut);
    size_t before = workspace_bytes();
    lamp_ckpt *c;
    assert_int_equal(lamp_ckpt_open(&c, TMP "/cut.lamp"), LAMP_ERR_INVALID_USAGE);
    assert_string_equal(lamp_last_error(), expected);
    assert_null(c);
    assert_int_equal(workspace_bytes(), before);
  }
  /* Truncated inside the magic, in memory. */
  expect_refused(bytes, 5, LAMP_ERR_INVALID_USAGE, "truncated: 5 bytes, shorter than the 32-byte checkpoint preamble");
  lamp_mem_free(bytes);
}

static void test_flipped_header_byte(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  b[32 + 10] ^= 0x01; /* "int step 1200" -> "int step 1300" */
  char expected[256];
  snprintf(expected, sizeof expected, "header checksum mismatch (stored %08x, computed %08x): the header is corrupt",
           get_u32(b + 24), header_crc(b, get_u32(b + 12)));
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, expected);
  lamp_mem_free(bytes);
}

static void test_flipped_data_byte(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  b[256 + 128 + 9] ^= 0x80; /* inside tensor 'rng' */
  char expected[256];
  snprintf(expected, sizeof expected,
           "checksum mismatch in tensor 'rng' (stored %08x, computed %08x): its data is corrupt",
           (unsigned)crc32(0, (const Bytef *)sample_rng, 32), (unsigned)crc32(0, b + 256 + 128, 32));
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, expected);
  b[256 + 128 + 9] ^= 0x80;
  b[256 + 192] ^= 0x04; /* inside blob 'scaler' */
  uint8_t scaler[24];
  for (int i = 0; i < 24; i++) scaler[i] = (uint8_t)(i * 11);
  snprintf(expected, sizeof expected, "checksum mismatch in blob 'scaler' (stored %08x, computed %08x): its data is corrupt",
           (unsigned)crc32(0, scaler, 24), (unsigned)crc32(0, b + 256 + 192, 24));
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, expected);
  b[256 + 192] ^= 0x04;
  b[256 + 100] = 0x5a; /* padding between 'w' (ends at 60) and 'h' (starts at 64)? no: 100 is after h */
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, "padding byte 356 is 0x5a, expected 0: the file is corrupt");
  lamp_mem_free(bytes);
}

/* Every single flipped byte anywhere in the file is refused: nothing goes unchecked. */
static void test_every_byte_flip_refused(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  size_t before = workspace_bytes();
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit += 3) {
      b[i] ^= (uint8_t)(1u << bit);
      lamp_ckpt *c;
      if (lamp_ckpt_open_memory(&c, b, len, "flip") == LAMP_OK) fail_msg("flipping bit %d of byte %zu went unnoticed", bit, i);
      b[i] ^= (uint8_t)(1u << bit);
    }
  }
  assert_int_equal(workspace_bytes(), before);
  lamp_mem_free(bytes);
}

static void test_huge_dimension(void **state) {
  (void)state;
  /* Overflows 64 bits. */
  expect_header_refused("tensor big f32 [4611686018427387904,4] 0 00000000\n", 64,
                        "header line 1: tensor 'big' f32[4611686018427387904, 4] needs more than 2^64 bytes (size overflow)");
  /* Fits 64 bits, but not in the file: refused before anything is allocated from it. */
  size_t len;
  uint8_t *buf = craft("int step 3\ntensor big f32 [1000000,1000000] 0 00000000\n", NULL, 64, &len);
  lamp_ledger_reset_peaks();
  size_t before = workspace_bytes();
  expect_refused(buf, len, LAMP_ERR_INVALID_USAGE,
                 "header line 2: tensor 'big' f32[1000000, 1000000] needs 4000000000000 bytes, more than the whole data "
                 "section (64 bytes)");
  assert_true(lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).peak - before <= len + 4096);
  free(buf);
  expect_header_refused("blob big 18446744073709551615 0 00000000\n", 0,
                        "header line 1: blob 'big' of 18446744073709551615 bytes is larger than the whole data section (0 "
                        "bytes)");
  expect_header_refused("tensor d f32 [18446744073709551616] 0 00000000\n", 0,
                        "header line 1: dimension 18446744073709551616 is out of range (at most 9223372036854775807)");
}

static void test_wrong_magic(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  memcpy(b, "PK\x03\x04zzzz", 8);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE,
                 "not a lamp checkpoint (it starts with bytes 50 4b 03 04 7a 7a 7a 7a, expected the magic \"LAMPCKPT\")");
  expect_refused("LAMX", 4, LAMP_ERR_INVALID_USAGE,
                 "not a lamp checkpoint (it starts with bytes 4c 41 4d 58, expected the magic \"LAMPCKPT\")");
  expect_refused("", 0, LAMP_ERR_INVALID_USAGE, "empty file, not a lamp checkpoint");
  lamp_mem_free(bytes);
}

static void test_future_version(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  put_u32(b + 8, 2);
  write_file(TMP "/future.lamp", b, len);
  lamp_ckpt *c;
  assert_int_equal(lamp_ckpt_open(&c, TMP "/future.lamp"), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), TMP "/future.lamp: checkpoint format version 2 is newer than this lamp supports (1)");
  put_u32(b + 8, 0);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, "checkpoint format version 0 is invalid (this lamp reads version 1)");
  lamp_mem_free(bytes);
}

/* ---- hostile files: the preamble and the header, field by field ------------------------------ */

static void test_bad_preamble(void **state) {
  (void)state;
  void *bytes;
  size_t len;
  sample_bytes(&bytes, &len);
  uint8_t *b = bytes;
  uint8_t *longer = calloc(1, len + 3);
  memcpy(longer, b, len);
  assert_int_equal(len, 472);
  expect_refused(longer, len + 3, LAMP_ERR_INVALID_USAGE, "3 unexpected bytes after the end of the checkpoint (472 bytes)");
  free(longer);
  put_u32(b + 28, 7);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, "corrupt preamble: the reserved field is 0x00000007, expected 0");
  put_u32(b + 28, 0);
  uint32_t h = get_u32(b + 12);
  put_u32(b + 12, 0xffffffffu);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE, "corrupt preamble: header length 4294967295 is over the limit of 67108864 bytes");
  put_u32(b + 12, 441);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE,
                 "corrupt preamble: the 441-byte header runs past the end of the checkpoint (472 bytes)");
  put_u32(b + 12, 430);
  expect_refused(b, len, LAMP_ERR_INVALID_USAGE,
                 "corrupt preamble: the checkpoint ends at byte 472, inside the padding after the header (the data "
                 "starts at 512)");
  put_u32(b + 12, h);
  lamp_mem_free(bytes);
}

static void test_bad_records(void **state) {
  (void)state;
  static const struct {
    const char *header;
    const char *message;
  } cases[] = {
      {"int step 1", "header line 1: does not end with a newline (the header must end with one)"},
      {"int step 1\nint x\0 2\n", "header line 2: contains a NUL byte"},
      {"\n", "header line 1: empty record"},
      {"json {}\n", "header line 1: unknown record 'json' (known: str, int, f64, tensor, blob)"},
      {"int step\n", "header line 1: 'int' needs 2 fields (int NAME INTEGER), found 1"},
      {"int step 1 2\n", "header line 1: 'int' needs 2 fields (int NAME INTEGER), found 3"},
      {"int step  1\n", "header line 1: 'int' needs 2 fields (int NAME INTEGER), found 3"},
      {"int step \n", "header line 1: field 3 of 'int' is empty (fields are separated by one space)"},
      {"int st\xffp 1\n", "header line 1: invalid meta name 'st\\xffp' (expected 1 to 255 characters from A-Z a-z 0-9 _ . : / - + @)"},
      {"int step 12a\n", "header line 1: integer '12a' is not a decimal number"},
      {"int step 9223372036854775808\n", "header line 1: integer 9223372036854775808 is out of range (at most 9223372036854775807)"},
      {"int step -9223372036854775809\n", "header line 1: integer 9223372036854775809 is out of range (at most 9223372036854775808)"},
      {"f64 lr 0.1x\n", "header line 1: f64 value '0.1x' is not a number"},
      {"f64 lr \x0b" "1\n", "header line 1: f64 value '\\x0b1' is not a number"},
      {"str name\n", "header line 1: 'str' needs a name and a value (str NAME VALUE)"},
      {"str s a\\qb\n", "header line 1: bad escape in a string (known: \\\\ \\n \\t \\r \\xHH with lowercase hex)"},
      {"str s a\\x00b\n", "header line 1: string contains \\x00 (strings cannot hold NUL)"},
      {"str s a\tb\n", "header line 1: raw control byte 0x09 in a string (it must be escaped)"},
      {"int a 1\nint a 2\n", "meta 'a' appears twice in the header"},
      {"tensor w f32 [2] 0\n", "header line 1: 'tensor' needs 5 fields (tensor NAME DTYPE [SHAPE] OFFSET CRC32), found 4"},
      {"blob b 4 0\n", "header line 1: 'blob' needs 4 fields (blob NAME NBYTES OFFSET CRC32), found 3"},
      {"tensor w f128 [2] 0 00000000\n", "header line 1: tensor 'w' has unknown dtype 'f128' (known: f32, f16, bf16, i32, u8, f64, i64, u32, u64)"},
      {"tensor w f32 2 0 00000000\n", "header line 1: shape '2' is not [D0,D1,...]"},
      {"tensor w f32 [2,] 0 00000000\n", "header line 1: shape '[2,]' ends with a comma"},
      {"tensor w f32 [2,,3] 0 00000000\n", "header line 1: dimension is empty"},
      {"tensor w f32 [-2] 0 00000000\n", "header line 1: dimension '-2' is not a decimal number"},
      {"tensor w u8 [1,1,1,1,1,1,1,1,1] 0 00000000\n", "header line 1: shape '[1,1,1,1,1,1,1,1,1]' has more than 8 dimensions"},
      {"tensor w f32 [2] 0 0000000g\n", "header line 1: CRC32 '0000000g' is not 8 lowercase hex digits"},
      {"tensor w f32 [2] 0 ABCDEF01\n", "header line 1: CRC32 'ABCDEF01' is not 8 lowercase hex digits"},
      {"tensor w f32 [2] 0 123\n", "header line 1: CRC32 '123' is not 8 lowercase hex digits"},
      {"tensor w f32 [2] 32 00000000\n", "header line 1: tensor 'w' offset 32 is not a multiple of 64"},
      {"tensor w f32 [20] 64 00000000\n", "header line 1: tensor 'w' (bytes 64 to 144 of the data section) runs past its end (128 bytes)"},
      {"tensor w f32 [2] 18446744073709551552 00000000\n",
       "header line 1: tensor 'w' (bytes 18446744073709551552 to 18446744073709551560 of the data section) runs past its end (128 bytes)"},
      {"tensor w f32 [20] 0 00000000\ntensor v f32 [2] 64 00000000\n",
       "header line 2: tensor 'v' at offset 64 overlaps the previous entry 'w' (which ends at 80)"},
      {"tensor w f32 [2] 64 00000000\ntensor v f32 [2] 0 00000000\n",
       "header line 2: tensor 'v' at offset 0 overlaps the previous entry 'w' (which ends at 72)"},
      {"blob w 0 0 00000000\nblob w 0 64 00000000\n", "entry 'w' appears twice in the tensor table"},
      {"tensor a+b f32 [] 0 00000000\ntensor a:b f32 [] 64 00000000\ntensor a=b f32 [] 0 00000000\n",
       "header line 3: invalid entry name 'a=b' (expected 1 to 255 characters from A-Z a-z 0-9 _ . : / - + @)"},
      {"tensor a f32 [] 0 00000000 x\n", "header line 1: 'tensor' needs 5 fields (tensor NAME DTYPE [SHAPE] OFFSET CRC32), found 6"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* Headers holding a NUL are given with their length through the NUL-free prefix trick:
       craft() uses strlen, so build that one by hand. */
    if (strstr(cases[i].message, "NUL byte") != NULL) {
      static const char text[] = "int step 1\nint x\0 2\n";
      char header[sizeof text];
      memcpy(header, text, sizeof text);
      size_t h = sizeof text - 1;
      size_t start = (32 + h + 63) / 64 * 64, len = start;
      uint8_t *buf = calloc(1, len);
      memcpy(buf, "LAMPCKPT", 8);
      put_u32(buf + 8, 1);
      put_u32(buf + 12, (uint32_t)h);
      put_u64(buf + 16, len);
      memcpy(buf + 32, header, h);
      put_u32(buf + 24, header_crc(buf, (uint32_t)h));
      expect_refused(buf, len, LAMP_ERR_INVALID_USAGE, cases[i].message);
      free(buf);
      continue;
    }
    expect_header_refused(cases[i].header, 128, cases[i].message);
  }
}

/* The checks above guard real layouts too: a hand-made file that follows the rules is read. */
static void test_crafted_file_accepted(void **state) {
  (void)state;
  uint8_t data[128] = {0};
  float two[2] = {1.5f, -2.0f};
  memcpy(data + 64, two, sizeof two);
  char header[256];
  snprintf(header, sizeof header, "str note a\\\\b\\x41 \\t\ntensor a+b f32 [] 0 %08x\ntensor v f32 [2] 64 %08x\n",
           (unsigned)crc32(0, data, 4), (unsigned)crc32(0, data + 64, 8));
  size_t len;
  uint8_t *buf = craft(header, data, 72, &len);
  lamp_ckpt *c;
  OK(lamp_ckpt_open_memory(&c, buf, len, "crafted"));
  const char *note;
  OK(lamp_ckpt_meta_str(c, "note", &note));
  assert_string_equal(note, "a\\bA \t");
  const lamp_ckpt_entry *e;
  OK(lamp_ckpt_find(c, "v", &e));
  assert_memory_equal(e->data, two, sizeof two);
  lamp_ckpt_close(c);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sample_layout),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_empty_checkpoint),
      cmocka_unit_test(test_lookup_errors),
      cmocka_unit_test(test_writer_errors),
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_not_regular_files),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_flipped_header_byte),
      cmocka_unit_test(test_flipped_data_byte),
      cmocka_unit_test(test_every_byte_flip_refused),
      cmocka_unit_test(test_huge_dimension),
      cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_future_version),
      cmocka_unit_test(test_bad_preamble),
      cmocka_unit_test(test_bad_records),
      cmocka_unit_test(test_crafted_file_accepted),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
