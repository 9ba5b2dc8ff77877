#include "checkpoint/format.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

static const struct {
  const char *name;
  size_t size;
} dtypes[LAMP_CKPT_DTYPE_COUNT] = {
    [LAMP_CKPT_F32] = {"f32", 4}, [LAMP_CKPT_F16] = {"f16", 2}, [LAMP_CKPT_BF16] = {"bf16", 2},
    [LAMP_CKPT_I32] = {"i32", 4}, [LAMP_CKPT_U8] = {"u8", 1},   [LAMP_CKPT_F64] = {"f64", 8},
    [LAMP_CKPT_I64] = {"i64", 8}, [LAMP_CKPT_U32] = {"u32", 4}, [LAMP_CKPT_U64] = {"u64", 8}};

const char *lamp_ckpt_dtype_name(lamp_ckpt_dtype dtype) {
  return (unsigned)dtype < LAMP_CKPT_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

size_t lamp_ckpt_dtype_size(lamp_ckpt_dtype dtype) {
  return (unsigned)dtype < LAMP_CKPT_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

int ckpt_dtype_parse(const char *name, size_t len) {
  for (int i = 0; i < LAMP_CKPT_DTYPE_COUNT; i++)
    if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0) return i;
  return -1;
}

uint32_t ckpt_crc32(uint32_t crc, const void *data, size_t len) {
  const unsigned char *p = data;
  while (len > 0) {
    unsigned n = len > (1u << 30) ? (1u << 30) : (unsigned)len;
    crc = (uint32_t)crc32(crc, p, n);
    p += n;
    len -= n;
  }
  return crc;
}

uint32_t ckpt_header_crc(const uint8_t *preamble, const void *header, size_t len) {
  return ckpt_crc32(ckpt_crc32(0, preamble, CKPT_CRC_AT), header, len);
}

int ckpt_name_ok(const char *s, size_t len) {
  if (len == 0 || len > LAMP_CKPT_MAX_NAME) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
             c == ':' || c == '/' || c == '-' || c == '+' || c == '@';
    if (!ok) return 0;
  }
  return 1;
}

uint64_t ckpt_shape_bytes(lamp_ckpt_dtype dtype, int ndim, const int64_t *shape, int *overflow) {
  uint64_t n = lamp_ckpt_dtype_size(dtype);
  *overflow = 0;
  for (int i = 0; i < ndim; i++) {
    uint64_t d = (uint64_t)shape[i];
    if (d != 0 && n > UINT64_MAX / d) {
      *overflow = 1;
      return 0;
    }
    n *= d;
  }
  return n;
}

const char *ckpt_format_shape(char *buf, size_t size, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape) {
  size_t used = (size_t)snprintf(buf, size, "%s[", lamp_ckpt_dtype_name(dtype));
  for (int i = 0; i < ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char *ckpt_show(char *buf, size_t size, const char *s, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < len && used + 8 < size; i++) {
    if (i == 48) {
      snprintf(buf + used, size - used, "...");
      return buf;
    }
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') buf[used++] = (char)c;
    else used += (size_t)snprintf(buf + used, size - used, "\\x%02x", c);
    buf[used] = '\0';
  }
  return buf;
}
