/*
** The IDX reader and the data sets built on it: good files (raw and gzip) parse to the exact
** bytes; truncated, corrupt, hostile and mismatched files fail with exact messages, leave the
** output zeroed and leak nothing; a gzip file loads only with its CRC-32 and length intact; what
** is not a regular file is refused without blocking; labels are checked against the class
** count. The files are written here, in LAMP_TEST_TMP_DIR.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "tensor/ledger.h"
#include "tensor/memory.h"
#include "tensor/rng.h"
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
  uint32_t crc = (uint32_t)buf[n - 8] | (uint32_t)buf[n - 7] << 8 | (uint32_t)buf[n - 6] << 16 | (uint32_t)buf[n - 5] << 24;
  buf[n - 8] ^= 0xff;
  write_bytes(tmp_path("crc.gz"), buf, n, 0);
  char want[512];
  snprintf(want, sizeof want,
           TMP "/crc.gz is damaged: CRC-32 mismatch (the gzip trailer says 0x%08x, the data gives 0x%08x)",
           (unsigned)(crc ^ 0xff), (unsigned)crc);
  expect_read_error(tmp_path("crc.gz"), LAMP_ERR_INVALID_USAGE, want);
  /* Cut inside the trailer: all data arrives but the checksum cannot be verified. */
  buf[n - 8] ^= 0xff;
  write_bytes(tmp_path("cut.gz"), buf, n - 3, 0);
  expect_read_error(tmp_path("cut.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/cut.gz is truncated: the gzip stream ends inside its CRC-32 and length (5 of their 8 bytes "
                        "are present)");
  /* The length (the trailer's last 4 bytes) off by one. */
  buf[n - 4] ^= 1;
  write_bytes(tmp_path("isize.gz"), buf, n, 0);
  expect_read_error(tmp_path("isize.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/isize.gz is damaged: length mismatch (the gzip trailer says 413 bytes, the data has 412, "
                        "modulo 2^32)");
  /* A gzip header followed by bytes that are not a deflate stream. */
  uint8_t bad[32] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  memset(bad + 10, 0xff, sizeof bad - 10);
  write_bytes(tmp_path("deflate.gz"), bad, sizeof bad, 0);
  expect_read_error(tmp_path("deflate.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/deflate.gz is damaged: invalid compressed data (zlib: invalid block type)");
}

/* ---- the reader: the gzip trailer ----------------------------------- */

/*
** A gzip IDX file of `samples` x 28 x 28 bytes into buf; returns its length. Like images, they
** compress (dark margins, few grey levels), and the last row is noise: its bytes are literals, so
** the compressed data ends right after them, as it does in Fashion-MNIST's files.
*/
static size_t gzip_images(const char *path, uint8_t *buf, size_t size, uint32_t samples) {
  uint32_t dims[3] = {samples, 28, 28};
  size_t payload = (size_t)samples * 784, len = 16 + payload;
  uint8_t *raw = malloc(len);
  assert_non_null(raw);
  idx_header(raw, 0x08, 3, dims);
  lamp_rng rng;
  lamp_rng_seed(&rng, 14);
  for (size_t i = 0; i < payload; i++) {
    uint8_t noise = (uint8_t)lamp_rng_next(&rng);
    raw[16 + i] = i >= payload - 28 ? noise : (i % 28) < 8 ? 0 : (uint8_t)(noise & 0xf0);
  }
  write_bytes(path, raw, len, 1);
  free(raw);
  return slurp(path, buf, size);
}

/* The whole trailer gone: all the data decompresses, but nothing proves it. */
static void test_gzip_without_trailer(void **state) {
  (void)state;
  static uint8_t buf[1 << 20];
  size_t n = gzip_images(tmp_path("notrailer.gz"), buf, sizeof buf, 1000);
  assert_true(n > 8 && n < sizeof buf);
  write_bytes(tmp_path("notrailer.gz"), buf, n - 8, 0);
  expect_read_error(tmp_path("notrailer.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/notrailer.gz is truncated: the gzip stream ends without its CRC-32 and length");
  /* Cut inside the compressed data: the stream cannot even finish. */
  write_bytes(tmp_path("cutdata.gz"), buf, n / 2, 0);
  expect_read_error(tmp_path("cutdata.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/cutdata.gz is truncated: the gzip stream ends inside its compressed data");
  /* Cut inside the header. */
  write_bytes(tmp_path("cuthead.gz"), buf, 6, 0);
  expect_read_error(tmp_path("cuthead.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/cuthead.gz is truncated: the gzip stream ends inside a member's header");
}

/* Without the trailer and with one bit flipped: no file may load altered pixels (gzip -t
   rejects every one of them). */
static void test_gzip_flipped_bit_without_trailer(void **state) {
  (void)state;
  static uint8_t buf[1 << 20];
  size_t n = gzip_images(tmp_path("flip-src.gz"), buf, sizeof buf, 1000) - 8;
  lamp_rng rng;
  lamp_rng_seed(&rng, 8);
  size_t before = data_bytes();
  int loaded = 0;
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s ", tmp_path("flip.gz"));
  for (int k = 0; k < 40; k++) {
    size_t at = 10 + (size_t)(lamp_rng_next(&rng) % (n - 10)); /* past the 10-byte gzip header */
    uint8_t bit = (uint8_t)(1u << (lamp_rng_next(&rng) % 8));
    buf[at] ^= bit;
    write_bytes(tmp_path("flip.gz"), buf, n, 0);
    buf[at] ^= bit;
    lamp_idx idx;
    if (lamp_idx_read(tmp_path("flip.gz"), &idx) == LAMP_OK) {
      loaded++;
      lamp_idx_free(&idx);
      continue;
    }
    assert_null(idx.data);
    /* The file is named: either the gzip check or an IDX check that the damage tripped first. */
    assert_memory_equal(lamp_last_error(), prefix, strlen(prefix) - 1);
  }
  assert_int_equal(loaded, 0);
  assert_int_equal(data_bytes(), before);
}

/* Bytes after the last member that are not another member are refused (zlib ignored them). */
static void test_gzip_trailing_garbage(void **state) {
  (void)state;
  uint8_t buf[4096];
  uint32_t dims[1] = {10};
  write_idx(tmp_path("garbage-after.gz"), 1, dims, 10, 1);
  size_t n = slurp(tmp_path("garbage-after.gz"), buf, sizeof buf);
  memcpy(buf + n, "\0\0\0", 3);
  write_bytes(tmp_path("garbage-after.gz"), buf, n + 3, 0);
  char want[512];
  snprintf(want, sizeof want,
           TMP "/garbage-after.gz is damaged: the gzip stream ends at byte %zu and is followed by bytes that are not "
               "gzip data",
           n);
  expect_read_error(tmp_path("garbage-after.gz"), LAMP_ERR_INVALID_USAGE, want);
}

/* Members one after another (cat a.gz b.gz) are one stream, as gzip reads them. */
static void test_gzip_members(void **state) {
  (void)state;
  uint8_t head[16], body[60], a[4096], b[4096];
  uint32_t dims[3] = {3, 4, 5};
  size_t hn = idx_header(head, 0x08, 3, dims);
  for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)(i * 5 + 1);
  write_bytes(tmp_path("m1.gz"), head, hn, 1);
  write_bytes(tmp_path("m2.gz"), body, sizeof body, 1);
  size_t na = slurp(tmp_path("m1.gz"), a, sizeof a), nb = slurp(tmp_path("m2.gz"), b, sizeof b);
  memcpy(a + na, b, nb);
  write_bytes(tmp_path("members.gz"), a, na + nb, 0);
  lamp_idx idx;
  assert_int_equal(lamp_idx_read(tmp_path("members.gz"), &idx), LAMP_OK);
  assert_int_equal(idx.nbytes, 60);
  assert_memory_equal(idx.data, body, 60);
  lamp_idx_free(&idx);
  /* The second member damaged: its own CRC is checked too. */
  a[na + nb - 5] ^= 0x10;
  write_bytes(tmp_path("members.gz"), a, na + nb, 0);
  lamp_idx out;
  assert_int_equal(lamp_idx_read(tmp_path("members.gz"), &out), LAMP_ERR_INVALID_USAGE);
  assert_non_null(strstr(lamp_last_error(), "members.gz is damaged: CRC-32 mismatch"));
}

/* The optional header fields (extra, name, comment, header CRC) are read past; a wrong header CRC is refused. */
static void test_gzip_header_fields(void **state) {
  (void)state;
  uint8_t data[24], out[4096];
  uint32_t dims[1] = {16};
  size_t dn = idx_bytes(data, 0x08, 1, dims, 16);
  z_stream z = {0};
  assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  /* 0x1f 0x8b, deflate, FHCRC | FEXTRA | FNAME | FCOMMENT, mtime, xfl, os, then the fields. */
  const uint8_t head[] = {0x1f, 0x8b, 8, 0x1e, 0, 0, 0, 0, 0, 3, 3, 0, 'x', 'y', 'z', 'f', '.', 'i', 'd', 'x', 0,
                          'h', 'i', 0};
  size_t n = sizeof head;
  memcpy(out, head, n);
  uLong hcrc = crc32(0, out, (uInt)n);
  out[n++] = (uint8_t)hcrc;
  out[n++] = (uint8_t)(hcrc >> 8);
  z.next_in = data;
  z.avail_in = (uInt)dn;
  z.next_out = out + n;
  z.avail_out = (uInt)(sizeof out - n - 8);
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  n += z.total_out;
  deflateEnd(&z);
  uLong crc = crc32(0, data, (uInt)dn);
  for (int i = 0; i < 4; i++) out[n++] = (uint8_t)(crc >> (8 * i));
  for (int i = 0; i < 4; i++) out[n++] = (uint8_t)(dn >> (8 * i));
  write_bytes(tmp_path("fields.gz"), out, n, 0);
  lamp_idx idx;
  assert_int_equal(lamp_idx_read(tmp_path("fields.gz"), &idx), LAMP_OK);
  assert_int_equal(idx.nbytes, 16);
  assert_memory_equal(idx.data, data + 8, 16);
  lamp_idx_free(&idx);
  out[sizeof head] ^= 1;
  write_bytes(tmp_path("fields.gz"), out, n, 0);
  char want[512];
  snprintf(want, sizeof want, TMP "/fields.gz is damaged: gzip header CRC mismatch (stored 0x%04x, computed 0x%04x)",
           (unsigned)((hcrc & 0xffff) ^ 1), (unsigned)(hcrc & 0xffff));
  expect_read_error(tmp_path("fields.gz"), LAMP_ERR_INVALID_USAGE, want);
  /* A reserved flag bit. */
  out[sizeof head] ^= 1;
  out[3] |= 0x80;
  write_bytes(tmp_path("fields.gz"), out, n, 0);
  expect_read_error(tmp_path("fields.gz"), LAMP_ERR_INVALID_USAGE,
                    TMP "/fields.gz is damaged: reserved gzip header flags 0x80 are set");
}

/* ---- the reader: what is not a regular file ------------------------- */

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_idx: a read blocked for 10 s (a FIFO must be refused, not read)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* A FIFO with no writer would block an ordinary open and read forever: a regression fails here
   after 10 s instead of hanging the suite. */
static void test_fifo(void **state) {
  (void)state;
  signal(SIGALRM, on_alarm);
  alarm(10);
  const char *path = tmp_path("fifo");
  remove(path);
  assert_int_equal(mkfifo(path, 0644), 0);
  char want[512];
  snprintf(want, sizeof want, "%s is a FIFO, not a regular file", path);
  expect_read_error(path, LAMP_ERR_INVALID_USAGE, want);
  /* The same inside a data set: the .gz name that find_file picks is the FIFO. */
  make_dir(TMP "/fifodir");
  remove(TMP "/fifodir/train-images-idx3-ubyte.gz");
  assert_int_equal(mkfifo(TMP "/fifodir/train-images-idx3-ubyte.gz", 0644), 0);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/fifodir", "train"), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(), TMP "/fifodir/train-images-idx3-ubyte.gz is a FIFO, not a regular file");
  alarm(0);
  signal(SIGALRM, SIG_DFL);
}

static void test_not_regular(void **state) {
  (void)state;
  make_dir(TMP "/adir");
  expect_read_error(TMP "/adir", LAMP_ERR_INVALID_USAGE, TMP "/adir is a directory, not a regular file");
  expect_read_error("/dev/null", LAMP_ERR_INVALID_USAGE, "/dev/null is a character device, not a regular file");
  /* A socket cannot even be opened; it is still named for what it is. (In /tmp: a socket's
     path must fit sun_path, which a deep build folder may not.) */
  char path[64];
  snprintf(path, sizeof path, "/tmp/lamp_test_idx_%d.sock", (int)getpid());
  remove(path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  assert_true(strlen(path) < sizeof addr.sun_path);
  strcpy(addr.sun_path, path);
  assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  char want[512];
  snprintf(want, sizeof want, "%s is a socket, not a regular file", path);
  expect_read_error(path, LAMP_ERR_INVALID_USAGE, want);
  close(fd);
  remove(path);
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

/* Writes <dir>/<split>-labels-idx1-ubyte[.gz] holding the m labels given. */
static void write_labels(const char *dir, const char *split, const uint8_t *labels, uint32_t m, int gz) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, split, gz ? ".gz" : "");
  write_idx_file(path, 1, &m, labels, m, gz);
}

/* Writes <dir>/<split>-images-idx3-ubyte[.gz] (n x 2 x 3) and -labels-idx1-ubyte[.gz] (m labels
   i % 4: 0, 1, 2, 3, 0, ...). */
static const char *write_pair(const char *name, const char *split, uint32_t n, uint32_t m, int gz) {
  static char dir[1024];
  char path[1200];
  snprintf(dir, sizeof dir, "%s/%s", TMP, name);
  make_dir(dir);
  uint32_t image_dims[3] = {n, 2, 3};
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
  write_idx(path, 3, image_dims, (size_t)n * 6, gz);
  uint8_t labels[256];
  assert_true(m <= sizeof labels);
  for (uint32_t i = 0; i < m; i++) labels[i] = (uint8_t)(i % 4);
  write_labels(dir, split, labels, m, gz);
  return dir;
}

static void test_dataset_dir(void **state) {
  (void)state;
  size_t before = data_bytes();
  write_pair("pair", "t10k", 4, 4, 1);
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/pair", "t10k"), LAMP_OK);
  assert_int_equal(lamp_dataset_size(ds), 4);
  /* Labels 0, 1, 2, 3: four classes, inferred. */
  assert_int_equal(lamp_dataset_classes(ds), 4);
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

/* ---- data sets: labels and classes --------------------------------- */

/* A label outside Fashion-MNIST's 10 classes is refused naming its index and value; it used
   to make classes() 201 and train a 201-way model. */
static void test_named_label_out_of_range(void **state) {
  (void)state;
  size_t before = data_bytes();
  const char *dir = write_pair("badlabel", "train", 4, 4, 1);
  const uint8_t labels[4] = {9, 0, 200, 3};
  write_labels(dir, "train", labels, 4, 1);
  setenv("LAMP_DATA_DIR", dir, 1);
  lamp_dataset *ds = (lamp_dataset *)1;
  lamp_status st = lamp_dataset_idx(&ds, "fashion-mnist", "train");
  unsetenv("LAMP_DATA_DIR");
  assert_int_equal(st, LAMP_ERR_INVALID_USAGE);
  assert_null(ds);
  assert_string_equal(lamp_last_error(), "fashion-mnist/train: label 200 at index 2 of " TMP
                                         "/badlabel/train-labels-idx1-ubyte.gz is outside [0, 10) (fashion-mnist "
                                         "has 10 classes)");
  assert_int_equal(data_bytes(), before);
  /* Fashion-MNIST has 10 classes even when a file (a small subset) lacks some. */
  const uint8_t few[4] = {0, 7, 7, 2};
  write_labels(dir, "train", few, 4, 1);
  setenv("LAMP_DATA_DIR", dir, 1);
  st = lamp_dataset_idx(&ds, "fashion-mnist", "train");
  unsetenv("LAMP_DATA_DIR");
  assert_int_equal(st, LAMP_OK);
  assert_int_equal(lamp_dataset_classes(ds), 10);
  lamp_dataset_release(ds);
}

/* A directory's labels with a gap: the count is not guessed. */
static void test_dir_labels_not_contiguous(void **state) {
  (void)state;
  size_t before = data_bytes();
  const char *dir = write_pair("gap", "train", 5, 5, 0);
  const uint8_t labels[5] = {0, 1, 3, 1, 0};
  write_labels(dir, "train", labels, 5, 0);
  lamp_dataset *ds = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/gap", "train"), LAMP_ERR_INVALID_USAGE);
  assert_null(ds);
  assert_string_equal(lamp_last_error(), TMP "/gap/train: cannot infer the number of classes: the labels in " TMP
                                             "/gap/train-labels-idx1-ubyte go up to 3 but label 2 never occurs, so "
                                             "they are not 0 to K-1; give the count with lamp.data.idx(dir, split, "
                                             "{classes = N})");
  assert_int_equal(data_bytes(), before);
  /* Labels that do not start at 0 are no class indices either. */
  const uint8_t shifted[5] = {1, 2, 3, 2, 1};
  write_labels(dir, "train", shifted, 5, 0);
  assert_int_equal(lamp_dataset_idx(&ds, TMP "/gap", "train"), LAMP_ERR_INVALID_USAGE);
  assert_non_null(strstr(lamp_last_error(), "go up to 3 but label 0 never occurs"));
  /* Given, the count wins: 5 classes, labels 1..3 in range. */
  assert_int_equal(lamp_dataset_idx_classes(&ds, TMP "/gap", "train", 5), LAMP_OK);
  assert_int_equal(lamp_dataset_classes(ds), 5);
  lamp_dataset_release(ds);
  assert_int_equal(data_bytes(), before);
}

/* A count given by the caller bounds every label; the first outside is named. */
static void test_dir_classes_given(void **state) {
  (void)state;
  size_t before = data_bytes();
  write_pair("given", "t10k", 6, 6, 1); /* labels 0 1 2 3 0 1 */
  lamp_dataset *ds = (lamp_dataset *)1;
  assert_int_equal(lamp_dataset_idx_classes(&ds, TMP "/given", "t10k", 3), LAMP_ERR_INVALID_USAGE);
  assert_null(ds);
  assert_string_equal(lamp_last_error(), TMP "/given/t10k: label 3 at index 3 of " TMP
                                             "/given/t10k-labels-idx1-ubyte.gz is outside [0, 3) (classes = 3)");
  assert_int_equal(data_bytes(), before);
  assert_int_equal(lamp_dataset_idx_classes(&ds, TMP "/given", "t10k", 4), LAMP_OK);
  assert_int_equal(lamp_dataset_classes(ds), 4);
  lamp_dataset_release(ds);
  assert_int_equal(lamp_dataset_idx_classes(&ds, TMP "/given", "t10k", 256), LAMP_OK);
  assert_int_equal(lamp_dataset_classes(ds), 256);
  lamp_dataset_release(ds);
  assert_int_equal(lamp_dataset_idx_classes(&ds, TMP "/given", "t10k", 257), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), TMP "/given: classes must be 1 to 256 (IDX labels are single bytes), got 257");
  assert_int_equal(data_bytes(), before);
}

/* A reader handing over labels with a class count gets them checked too. */
static void test_adopt_label_range(void **state) {
  (void)state;
  size_t before = data_bytes();
  lamp_dataset_bytes bytes = {.name = "mine", .pixels = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, 3),
                              .labels = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, 3), .n = 3, .channels = 1,
                              .rows = 1, .cols = 1, .classes = 2};
  assert_true(bytes.pixels != NULL && bytes.labels != NULL);
  bytes.labels[0] = 1, bytes.labels[1] = 0, bytes.labels[2] = 2;
  lamp_dataset *ds;
  assert_int_equal(lamp_dataset_adopt(&ds, &bytes), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "mine: label 2 at index 2 is outside [0, 2)");
  assert_null(bytes.pixels);
  assert_int_equal(data_bytes(), before);
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
      cmocka_unit_test(test_gzip_without_trailer),
      cmocka_unit_test(test_gzip_flipped_bit_without_trailer),
      cmocka_unit_test(test_gzip_trailing_garbage),
      cmocka_unit_test(test_gzip_members),
      cmocka_unit_test(test_gzip_header_fields),
      cmocka_unit_test(test_fifo),
      cmocka_unit_test(test_not_regular),
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
      cmocka_unit_test(test_named_label_out_of_range),
      cmocka_unit_test(test_dir_labels_not_contiguous),
      cmocka_unit_test(test_dir_classes_given),
      cmocka_unit_test(test_adopt_label_range),
      cmocka_unit_test(test_real_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
