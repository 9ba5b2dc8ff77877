#include "data/idx.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "data/stream.h"
#include "tensor/memory.h"

/* The payload buffer starts this small and doubles, so a header that promises far more data
** than the file holds costs at most twice what the file really contains, not the promise. */
#define FIRST_CHUNK ((size_t)1 << 20)
/* Counting trailing garbage stops here: a gzip bomb must not keep us busy. */
#define TRAILING_COUNT_CAP ((size_t)1 << 20)

static const char *type_name(unsigned code) {
  switch (code) {
  case LAMP_IDX_U8: return "unsigned byte";
  case LAMP_IDX_I8: return "signed byte";
  case LAMP_IDX_I16: return "16-bit integer";
  case LAMP_IDX_I32: return "32-bit integer";
  case LAMP_IDX_F32: return "32-bit float";
  case LAMP_IDX_F64: return "64-bit float";
  }
  return NULL;
}

static lamp_status check_magic(const char *path, const unsigned char m[4]) {
  if (m[0] != 0 || m[1] != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: not an IDX file (magic 0x%02x%02x%02x%02x, expected 0x0000TTNN: two zero "
                      "bytes, then the type code TT and the number of dimensions NN)",
                      path, m[0], m[1], m[2], m[3]);
  const char *name = type_name(m[2]);
  if (name == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: unknown IDX type code 0x%02x (known: 0x08 unsigned byte, 0x09 signed byte, "
                      "0x0b 16-bit integer, 0x0c 32-bit integer, 0x0d 32-bit float, 0x0e 64-bit float)",
                      path, m[2]);
  if (m[2] != LAMP_IDX_U8)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: IDX type 0x%02x (%s) is not supported; lamp reads 0x08 (unsigned byte)",
                      path, m[2], name);
  if (m[3] < 1 || m[3] > LAMP_IDX_MAX_DIMS)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: IDX header declares %u dimensions, expected 1 to %d", path,
                      m[3], LAMP_IDX_MAX_DIMS);
  return LAMP_OK;
}

/* "60000 x 28 x 28" */
static const char *format_dims(char *buf, size_t size, const uint32_t *dims, int ndim) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? " x %u" : "%u", (unsigned)dims[i]);
  return buf;
}

/* The payload size, refusing zero dimensions and anything over the limit without overflowing. */
static lamp_status check_dims(const char *path, const uint32_t *dims, int ndim, size_t *nbytes) {
  char shown[64];
  uint64_t total = 1;
  int overflow = 0;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] == 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: IDX dimension %d of %d is 0 (dimensions %s)", path, i + 1, ndim,
                        format_dims(shown, sizeof shown, dims, ndim));
    if (total > UINT64_MAX / dims[i]) overflow = 1;
    else total *= dims[i];
  }
  format_dims(shown, sizeof shown, dims, ndim);
  if (overflow)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: IDX dimensions %s need more than 2^64 bytes, more than the 1 GiB limit",
                      path, shown);
  if (total > LAMP_IDX_MAX_BYTES)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: IDX dimensions %s need %llu bytes, more than the 1 GiB limit", path,
                      shown, (unsigned long long)total);
  *nbytes = (size_t)total;
  return LAMP_OK;
}

static lamp_status read_header(const char *path, lamp_data_stream *f, lamp_idx *out) {
  unsigned char head[4 + 4 * LAMP_IDX_MAX_DIMS];
  size_t got;
  lamp_status st = lamp_data_stream_read(f, head, 4, &got);
  if (st != LAMP_OK) return st;
  if (got == 0) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: empty file, not an IDX file", path);
  if (got < 4) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated: expected 4 header bytes, found %zu", path, got);
  if ((st = check_magic(path, head)) != LAMP_OK) return st;
  int ndim = head[3];
  size_t want = 4 * (size_t)ndim;
  if ((st = lamp_data_stream_read(f, head + 4, want, &got)) != LAMP_OK) return st;
  if (got < want)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated: expected %zu header bytes, found %zu", path, 4 + want,
                      4 + got);
  for (int i = 0; i < ndim; i++) {
    const unsigned char *b = head + 4 + 4 * i;
    out->dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  }
  out->type = head[2];
  out->ndim = ndim;
  return check_dims(path, out->dims, ndim, &out->nbytes);
}

/* Replaces *buf (holding `used` bytes) with a zero-filled block of `cap` bytes. */
static lamp_status grow(uint8_t **buf, size_t used, size_t cap) {
  uint8_t *bigger = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, cap);
  if (bigger == NULL) return LAMP_ERR_SYSTEM;
  if (used) memcpy(bigger, *buf, used);
  lamp_mem_free(*buf);
  *buf = bigger;
  return LAMP_OK;
}

/* Reads exactly out->nbytes into a fresh block, growing it only as the data really arrives. */
static lamp_status read_payload(const char *path, lamp_data_stream *f, lamp_idx *out) {
  uint8_t *buf = NULL;
  size_t used = 0, cap = 0;
  lamp_status st = LAMP_OK;
  while (st == LAMP_OK && used < out->nbytes) {
    size_t next = cap == 0 ? FIRST_CHUNK : cap * 2;
    if (next > out->nbytes) next = out->nbytes;
    if ((st = grow(&buf, used, next)) != LAMP_OK) break;
    cap = next;
    size_t got;
    if ((st = lamp_data_stream_read(f, buf + used, cap - used, &got)) != LAMP_OK) break;
    used += got;
    if (used < cap)
      st = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated: expected %zu data bytes, found %zu", path, out->nbytes,
                      used);
  }
  if (st != LAMP_OK) {
    lamp_mem_free(buf);
    return st;
  }
  out->data = buf;
  return LAMP_OK;
}

/*
** The data must end exactly where the IDX header says. Reading on to the end of the stream is
** also what makes the gzip reader check the last member's CRC-32 and length.
*/
static lamp_status check_end(const char *path, lamp_data_stream *f) {
  unsigned char scratch[4096];
  size_t extra = 0, got;
  do {
    lamp_status st = lamp_data_stream_read(f, scratch, sizeof scratch, &got);
    if (st != LAMP_OK) return st;
    extra += got;
  } while (got == sizeof scratch && extra < TRAILING_COUNT_CAP);
  if (extra >= TRAILING_COUNT_CAP)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: more than %zu unexpected bytes after the data", path, extra);
  if (extra > 0) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %zu unexpected bytes after the data", path, extra);
  return LAMP_OK;
}

lamp_status lamp_idx_read(const char *path, lamp_idx *out) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "idx: output is NULL");
  memset(out, 0, sizeof *out);
  if (path == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "idx: path is NULL");
  lamp_data_stream *f;
  lamp_status st = lamp_data_stream_open(&f, path);
  if (st != LAMP_OK) return st;
  st = read_header(path, f, out);
  if (st == LAMP_OK) st = read_payload(path, f, out);
  if (st == LAMP_OK) st = check_end(path, f);
  lamp_data_stream_close(f);
  if (st != LAMP_OK) lamp_idx_free(out);
  return st;
}

void lamp_idx_free(lamp_idx *idx) {
  if (idx == NULL) return;
  lamp_mem_free(idx->data);
  memset(idx, 0, sizeof *idx);
}
