/*
** The on-disk layout of format version 1 and the small helpers writer and reader share, so
** the two cannot disagree. docs/checkpoint.md is the prose version of this file.
**
**   offset  size  field
**   0       8     magic "LAMPCKPT"
**   8       4     format version (little-endian u32)
**   12      4     header length H in bytes
**   16      8     file length L in bytes (u64): a truncated copy is caught before any parsing
**   24      4     CRC-32 of bytes 0..23 followed by the H header bytes
**   28      4     reserved, 0
**   32      H     header text: one record per line, each ending in '\n'
**   then zero padding to D = align64(32 + H), the start of the data section; every entry's
**   offset is relative to D and a multiple of 64; bytes between entries are zero; L = D + the
**   end of the last entry.
*/
#ifndef LAMP_CHECKPOINT_FORMAT_H
#define LAMP_CHECKPOINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store raw little-endian data; this host is not little-endian"
#endif

#define CKPT_MAGIC "LAMPCKPT"
#define CKPT_MAGIC_LEN 8
#define CKPT_PREAMBLE 32
#define CKPT_CRC_AT 24
#define CKPT_ALIGN 64
/* No real header comes near this: 64 MiB of text would describe a million tensors. */
#define CKPT_MAX_HEADER ((uint32_t)64 << 20)

static inline uint64_t ckpt_align(uint64_t n) { return (n + (CKPT_ALIGN - 1)) & ~(uint64_t)(CKPT_ALIGN - 1); }

static inline void ckpt_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ckpt_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t ckpt_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ckpt_get_u64(const uint8_t *p) {
  return (uint64_t)ckpt_get_u32(p) | (uint64_t)ckpt_get_u32(p + 4) << 32;
}

/* zlib's CRC-32 over any length (crc32 itself takes an unsigned int count). */
uint32_t ckpt_crc32(uint32_t crc, const void *data, size_t len);

/* The header CRC: preamble bytes 0..23, then the header text. */
uint32_t ckpt_header_crc(const uint8_t *preamble, const void *header, size_t len);

/* 1 when s (len bytes) is a valid key or entry name. */
int ckpt_name_ok(const char *s, size_t len);
#define CKPT_NAME_RULE "1 to 255 characters from A-Z a-z 0-9 _ . : / - + @"

/* The dtype called name (len bytes); -1 when none. */
int ckpt_dtype_parse(const char *name, size_t len);
/* "f32, f16, bf16, ..." */
#define CKPT_DTYPE_LIST "f32, f16, bf16, i32, u8, f64, i64, u32, u64"

/*
** Bytes a shape of this dtype needs; 0 on overflow of 64 bits (with *overflow set), so a
** huge declared dimension is a message, never a wrapped size.
*/
uint64_t ckpt_shape_bytes(lamp_ckpt_dtype dtype, int ndim, const int64_t *shape, int *overflow);

/* "f32[1024, 784]" into buf. */
const char *ckpt_format_shape(char *buf, size_t size, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape);

/*
** A hostile token made safe for a message: printable ASCII kept, other bytes as \xHH, cut
** after 48 characters with "...".
*/
const char *ckpt_show(char *buf, size_t size, const char *s, size_t len);

#endif
