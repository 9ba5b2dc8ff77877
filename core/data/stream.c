#include "data/stream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/error.h"
#include "data/file.h"

/* Compressed input is read in blocks of this size. */
#define IN_SIZE ((size_t)1 << 17)
/* inflate counts in unsigned int: hand it output in pieces that fit. */
#define MAX_OUT ((size_t)1 << 30)

/* Gzip header flags (RFC 1952, 2.3.1). */
#define FHCRC 0x02
#define FEXTRA 0x04
#define FNAME 0x08
#define FCOMMENT 0x10
#define FRESERVED 0xe0

enum mode {
  RAW,     /* not gzip: the file's bytes are the data */
  MEMBER,  /* gzip: a member header, or the end of the file, comes next */
  INFLATE, /* gzip: inside a member's compressed data */
  END,     /* all data delivered and checked */
  FAILED   /* an error was reported; only close remains */
};

struct lamp_data_stream {
  char *path;
  int fd;
  enum mode mode;
  int eof;             /* the file holds nothing beyond what in[] held */
  int inflate_ready;   /* inflateInit2 succeeded: inflateEnd is owed */
  unsigned members;    /* gzip members started */
  uint64_t read_total; /* bytes read from the file so far */
  uint32_t crc;        /* CRC-32 of the current member's data so far */
  uint32_t length;     /* its length so far, modulo 2^32 as the trailer stores it */
  z_stream z;          /* next_in/avail_in: the unread part of in[] */
  unsigned char in[IN_SIZE];
};

/* ---- input ------------------------------------------------------------------------------- */

/* Refills in[] once it is used up; at the end of the file avail_in stays 0. */
static lamp_status fill(lamp_data_stream *s) {
  if (s->z.avail_in > 0 || s->eof) return LAMP_OK;
  size_t got;
  lamp_status st = lamp_data_read(s->path, s->fd, s->in, IN_SIZE, &got);
  if (st != LAMP_OK) return st;
  s->z.next_in = s->in;
  s->z.avail_in = (uInt)got;
  s->read_total += got;
  if (got < IN_SIZE) s->eof = 1;
  return LAMP_OK;
}

/* The file offset of the next unread byte. */
static uint64_t position(const lamp_data_stream *s) { return s->read_total - s->z.avail_in; }

/* The next byte of the file into *b, or -1 at its end. */
static lamp_status next_byte(lamp_data_stream *s, int *b) {
  lamp_status st = fill(s);
  if (st != LAMP_OK) return st;
  if (s->z.avail_in == 0) {
    *b = -1;
    return LAMP_OK;
  }
  *b = *s->z.next_in++;
  s->z.avail_in--;
  return LAMP_OK;
}

/* ---- raw files ----------------------------------------------------------------------------- */

/* What in[] still holds first, then straight from the file into buf. */
static lamp_status raw_read(lamp_data_stream *s, uint8_t *buf, size_t len, size_t *got) {
  *got = 0;
  if (s->z.avail_in > 0) {
    *got = len < s->z.avail_in ? len : s->z.avail_in;
    memcpy(buf, s->z.next_in, *got);
    s->z.next_in += *got;
    s->z.avail_in -= (uInt)*got;
    return LAMP_OK;
  }
  if (!s->eof) {
    lamp_status st = lamp_data_read(s->path, s->fd, buf, len, got);
    if (st != LAMP_OK) return st;
    s->read_total += *got;
    if (*got < len) s->eof = 1;
  }
  if (*got == 0) s->mode = END;
  return LAMP_OK;
}

/* ---- gzip members ---------------------------------------------------------------------------- */

static lamp_status truncated(const lamp_data_stream *s, const char *where) {
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is truncated: the gzip stream ends %s", s->path, where);
}

/* n header bytes into buf (NULL: skipped), each added to the header's CRC. */
static lamp_status header_bytes(lamp_data_stream *s, uint8_t *buf, size_t n, uLong *hcrc) {
  for (size_t i = 0; i < n; i++) {
    int b;
    lamp_status st = next_byte(s, &b);
    if (st != LAMP_OK) return st;
    if (b < 0) return truncated(s, "inside a member's header");
    uint8_t c = (uint8_t)b;
    *hcrc = crc32(*hcrc, &c, 1);
    if (buf != NULL) buf[i] = c;
  }
  return LAMP_OK;
}

/* A zero-terminated field (the original file name, a comment): skipped. */
static lamp_status header_string(lamp_data_stream *s, uLong *hcrc) {
  uint8_t c;
  do {
    lamp_status st = header_bytes(s, &c, 1, hcrc);
    if (st != LAMP_OK) return st;
  } while (c != 0);
  return LAMP_OK;
}

/* The optional fields the flags announce; the header's own CRC last, when present. */
static lamp_status header_options(lamp_data_stream *s, unsigned flags, uLong *hcrc) {
  lamp_status st = LAMP_OK;
  if (flags & FEXTRA) {
    uint8_t n[2];
    if ((st = header_bytes(s, n, 2, hcrc)) == LAMP_OK) st = header_bytes(s, NULL, (size_t)n[0] | (size_t)n[1] << 8, hcrc);
  }
  if (st == LAMP_OK && (flags & FNAME)) st = header_string(s, hcrc);
  if (st == LAMP_OK && (flags & FCOMMENT)) st = header_string(s, hcrc);
  if (st != LAMP_OK || !(flags & FHCRC)) return st;
  uint8_t stored[2];
  uLong ignored = 0;
  if ((st = header_bytes(s, stored, 2, &ignored)) != LAMP_OK) return st;
  unsigned want = (unsigned)(*hcrc & 0xffff), got = (unsigned)stored[0] | (unsigned)stored[1] << 8;
  if (want != got)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is damaged: gzip header CRC mismatch (stored 0x%04x, computed 0x%04x)",
                      s->path, got, want);
  return LAMP_OK;
}

/* A fresh raw inflate for the member whose header was just read. */
static lamp_status start_inflate(lamp_data_stream *s) {
  int ret = s->inflate_ready ? inflateReset(&s->z) : inflateInit2(&s->z, -MAX_WBITS);
  if (ret != Z_OK) return lamp_error(LAMP_ERR_SYSTEM, "%s: cannot start decompressing (zlib error %d)", s->path, ret);
  s->inflate_ready = 1;
  s->crc = (uint32_t)crc32(0, NULL, 0);
  s->length = 0;
  s->members++;
  s->mode = INFLATE;
  return LAMP_OK;
}

/* The next member's header, or the clean end of the file after a complete member. */
static lamp_status start_member(lamp_data_stream *s) {
  uint64_t at = position(s);
  int b0, b1 = -1;
  lamp_status st = next_byte(s, &b0);
  if (st == LAMP_OK && b0 >= 0) st = next_byte(s, &b1);
  if (st != LAMP_OK) return st;
  if (b0 < 0 && s->members > 0) {
    s->mode = END;
    return LAMP_OK;
  }
  if (b0 != 0x1f || b1 != 0x8b)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s is damaged: the gzip stream ends at byte %llu and is followed by bytes that are not gzip data", s->path,
                      (unsigned long long)at);
  uint8_t h[8];
  uLong hcrc = crc32(0, (const Bytef *)"\x1f\x8b", 2);
  if ((st = header_bytes(s, h, sizeof h, &hcrc)) != LAMP_OK) return st;
  if (h[0] != Z_DEFLATED)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is damaged: gzip compression method %u, expected 8 (deflate)",
                      s->path, (unsigned)h[0]);
  if (h[1] & FRESERVED)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is damaged: reserved gzip header flags 0x%02x are set", s->path,
                      (unsigned)(h[1] & FRESERVED));
  if ((st = header_options(s, h[1], &hcrc)) != LAMP_OK) return st;
  return start_inflate(s);
}

static uint32_t le32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The member's 8-byte trailer, CRC-32 then length, against the data it delivered. */
static lamp_status check_trailer(lamp_data_stream *s) {
  uint8_t t[8];
  size_t got = 0;
  while (got < sizeof t) {
    int b;
    lamp_status st = next_byte(s, &b);
    if (st != LAMP_OK) return st;
    if (b < 0) break;
    t[got++] = (uint8_t)b;
  }
  if (got == 0) return truncated(s, "without its CRC-32 and length");
  if (got < sizeof t) {
    char where[96];
    snprintf(where, sizeof where, "inside its CRC-32 and length (%zu of their 8 bytes are present)", got);
    return truncated(s, where);
  }
  if (le32(t) != s->crc)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s is damaged: CRC-32 mismatch (the gzip trailer says 0x%08x, the data gives 0x%08x)", s->path,
                      (unsigned)le32(t), (unsigned)s->crc);
  if (le32(t + 4) != s->length)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s is damaged: length mismatch (the gzip trailer says %u bytes, the data has %u, modulo 2^32)",
                      s->path, (unsigned)le32(t + 4), (unsigned)s->length);
  s->mode = MEMBER;
  return LAMP_OK;
}

/* One inflate step into buf; the member's trailer is checked the moment its data ends. */
static lamp_status inflate_step(lamp_data_stream *s, uint8_t *buf, size_t len, size_t *got) {
  *got = 0;
  lamp_status st = fill(s);
  if (st != LAMP_OK) return st;
  uInt room = (uInt)(len < MAX_OUT ? len : MAX_OUT);
  s->z.next_out = buf;
  s->z.avail_out = room;
  int ret = inflate(&s->z, Z_NO_FLUSH);
  *got = room - s->z.avail_out;
  s->crc = (uint32_t)crc32(s->crc, buf, (uInt)*got);
  s->length += (uint32_t)*got;
  if (ret == Z_STREAM_END) return check_trailer(s);
  if (ret == Z_OK) return LAMP_OK;
  if (ret == Z_BUF_ERROR && s->z.avail_in == 0 && s->eof) return truncated(s, "inside its compressed data");
  if (ret == Z_BUF_ERROR) return LAMP_OK; /* no progress this time; more input is on its way */
  if (ret == Z_MEM_ERROR) return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory while decompressing", s->path);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is damaged: invalid compressed data (zlib: %s)", s->path,
                    s->z.msg != NULL ? s->z.msg : "unknown error");
}

/* ---- the stream ------------------------------------------------------------------------------ */

lamp_status lamp_data_stream_open(lamp_data_stream **out, const char *path) {
  *out = NULL;
  lamp_data_stream *s = calloc(1, sizeof *s);
  size_t len = strlen(path) + 1;
  char *copy = malloc(len);
  if (s == NULL || copy == NULL) {
    free(s);
    free(copy);
    return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory", path);
  }
  memcpy(copy, path, len);
  s->path = copy;
  uint64_t size;
  lamp_status st = lamp_data_open(path, NULL, &s->fd, &size);
  if (st == LAMP_OK) st = fill(s);
  if (st != LAMP_OK) {
    lamp_data_stream_close(s);
    return st;
  }
  int gzip = s->z.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
  s->mode = gzip ? MEMBER : RAW;
  *out = s;
  return LAMP_OK;
}

/* One step of whatever comes next; *got bytes of data were delivered into buf. */
static lamp_status step(lamp_data_stream *s, uint8_t *buf, size_t len, size_t *got) {
  *got = 0;
  switch (s->mode) {
  case RAW: return raw_read(s, buf, len, got);
  case MEMBER: return start_member(s);
  case INFLATE: return inflate_step(s, buf, len, got);
  case END: return LAMP_OK;
  case FAILED: break;
  }
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: read after a failed read", s->path);
}

lamp_status lamp_data_stream_read(lamp_data_stream *s, void *buf, size_t len, size_t *got) {
  *got = 0;
  while (*got < len && s->mode != END) {
    size_t n;
    lamp_status st = step(s, (uint8_t *)buf + *got, len - *got, &n);
    if (st != LAMP_OK) {
      s->mode = FAILED;
      return st;
    }
    *got += n;
  }
  return LAMP_OK;
}

void lamp_data_stream_close(lamp_data_stream *s) {
  if (s == NULL) return;
  if (s->inflate_ready) inflateEnd(&s->z);
  if (s->fd >= 0) close(s->fd);
  free(s->path);
  free(s);
}
