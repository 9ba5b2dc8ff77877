/*
** The header text of a checkpoint, one record per line, fields separated by one space:
**
**   str NAME VALUE                       VALUE runs to the end of the line; \\ \n \t \r \xHH escapes
**   int NAME -123                        a signed 64-bit decimal
**   f64 NAME 0.001                       as printf's %.17g writes it (inf, nan too)
**   tensor NAME DTYPE [D0,D1,...] OFFSET CRC32
**   blob NAME NBYTES OFFSET CRC32
**
** OFFSET is from the start of the data section, a multiple of 64; entries come in increasing
** offset order without overlap; CRC32 is 8 lowercase hex digits. Nothing here trusts a number
** from the file: every size is checked for overflow and against the data section's real length.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoint/format.h"
#include "checkpoint/reader_internal.h"
#include "tensor/memory.h"

typedef struct cursor {
  const lamp_ckpt *c;
  unsigned line;
  char *p;   /* next unread byte of the current line */
  char *end; /* the line's end (its '\n' replaced by NUL) */
} cursor;

/* "<file>: header line N: <message>" */
__attribute__((format(printf, 2, 3))) static lamp_status bad(const cursor *cur, const char *fmt, ...) {
  char msg[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: header line %u: %s", cur->c->name, cur->line, msg);
}

/*
** The next space-separated field, NUL-terminated in place; NULL once the line is used up. Two
** spaces in a row, or a space at either end of the line, yield an empty field (refused later).
*/
static char *field(cursor *cur, size_t *len) {
  if (cur->p > cur->end) return NULL;
  char *start = cur->p;
  char *space = memchr(start, ' ', (size_t)(cur->end - start));
  char *stop = space ? space : cur->end;
  *len = (size_t)(stop - start);
  *stop = '\0';
  cur->p = stop + 1;
  return start;
}

/* Reads exactly the `want` remaining fields of the line; `usage` names them for the message. */
static lamp_status fields(cursor *cur, const char *kind, const char *usage, int want, char **f, size_t *len) {
  int n = 0;
  char *tok;
  size_t tlen;
  while ((tok = field(cur, &tlen)) != NULL) {
    if (n < want) {
      f[n] = tok;
      len[n] = tlen;
    }
    n++;
  }
  if (n != want) return bad(cur, "'%s' needs %d fields (%s %s), found %d", kind, want, kind, usage, n);
  for (int i = 0; i < want; i++)
    if (len[i] == 0) return bad(cur, "field %d of '%s' is empty (fields are separated by one space)", i + 2, kind);
  return LAMP_OK;
}

static lamp_status check_name(const cursor *cur, const char *what, const char *s, size_t len) {
  if (ckpt_name_ok(s, len)) return LAMP_OK;
  char shown[256];
  return bad(cur, "invalid %s '%s' (expected " CKPT_NAME_RULE ")", what, ckpt_show(shown, sizeof shown, s, len));
}

/* An unsigned decimal of at most `max`. */
static lamp_status parse_u64(const cursor *cur, const char *what, const char *s, size_t len, uint64_t max,
                             uint64_t *out) {
  char shown[256];
  uint64_t v = 0;
  if (len == 0) return bad(cur, "%s is empty", what);
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return bad(cur, "%s '%s' is not a decimal number", what, ckpt_show(shown, sizeof shown, s, len));
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (max - d) / 10)
      return bad(cur, "%s %s is out of range (at most %llu)", what, ckpt_show(shown, sizeof shown, s, len),
                 (unsigned long long)max);
    v = v * 10 + d;
  }
  *out = v;
  return LAMP_OK;
}

static lamp_status parse_i64(const cursor *cur, const char *s, size_t len, int64_t *out) {
  int neg = len > 0 && s[0] == '-';
  uint64_t mag;
  lamp_status st = parse_u64(cur, "integer", s + neg, len - (size_t)neg, neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX, &mag);
  if (st != LAMP_OK) return st;
  *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
  return LAMP_OK;
}

static lamp_status parse_f64(const cursor *cur, const char *s, size_t len, double *out) {
  char shown[256];
  char *end;
  /* strtod skips leading blanks and also reads hex and "infinity": any complete number without
     blanks is accepted, though the writer only writes %.17g. The field is NUL-terminated in place. */
  double v = 0;
  if (len > 0 && !(s[0] >= '\t' && s[0] <= '\r')) v = strtod(s, &end);
  else end = (char *)s;
  if (end != s + len) return bad(cur, "f64 value '%s' is not a number", ckpt_show(shown, sizeof shown, s, len));
  *out = v; /* ERANGE: strtod already returned the nearest (inf or 0), which is what was meant */
  return LAMP_OK;
}

static int hex_value(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

static lamp_status parse_crc(const cursor *cur, const char *s, size_t len, uint32_t *out) {
  char shown[256];
  uint32_t v = 0;
  int ok = len == 8;
  for (size_t i = 0; ok && i < len; i++) {
    int h = hex_value(s[i]);
    ok = h >= 0;
    v = v << 4 | (uint32_t)(ok ? h : 0);
  }
  if (!ok) return bad(cur, "CRC32 '%s' is not 8 lowercase hex digits", ckpt_show(shown, sizeof shown, s, len));
  *out = v;
  return LAMP_OK;
}

/* Undoes the writer's escapes in place; the result is NUL-terminated and never longer. */
static lamp_status unescape(const cursor *cur, char *s, size_t len) {
  char *out = s;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch == 0x7f) return bad(cur, "raw control byte 0x%02x in a string (it must be escaped)", ch);
    if (ch != '\\') {
      *out++ = (char)ch;
      continue;
    }
    char e = i + 1 < len ? s[++i] : '\0';
    if (e == '\\') *out++ = '\\';
    else if (e == 'n') *out++ = '\n';
    else if (e == 't') *out++ = '\t';
    else if (e == 'r') *out++ = '\r';
    else if (e == 'x' && i + 2 < len && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      int v = hex_value(s[i + 1]) << 4 | hex_value(s[i + 2]);
      if (v == 0) return bad(cur, "string contains \\x00 (strings cannot hold NUL)");
      *out++ = (char)v;
      i += 2;
    } else
      return bad(cur, "bad escape in a string (known: \\\\ \\n \\t \\r \\xHH with lowercase hex)");
  }
  *out = '\0';
  return LAMP_OK;
}

/* ---- records -------------------------------------------------------------------------------- */

static lamp_status meta_record(cursor *cur, const char *kind, lamp_ckpt_meta *m) {
  char *f[2];
  size_t len[2];
  lamp_status st;
  if (strcmp(kind, "str") == 0) {
    /* The value is the rest of the line, spaces and all, and may be empty. */
    f[0] = field(cur, &len[0]);
    if (f[0] == NULL || cur->p > cur->end) return bad(cur, "'str' needs a name and a value (str NAME VALUE)");
    if ((st = check_name(cur, "meta name", f[0], len[0])) != LAMP_OK) return st;
    m->type = LAMP_CKPT_META_STR;
    m->key = f[0];
    m->str = cur->p;
    st = unescape(cur, cur->p, (size_t)(cur->end - cur->p));
    cur->p = cur->end + 1;
    return st;
  }
  int is_int = strcmp(kind, "int") == 0;
  if ((st = fields(cur, kind, is_int ? "NAME INTEGER" : "NAME NUMBER", 2, f, len)) != LAMP_OK) return st;
  if ((st = check_name(cur, "meta name", f[0], len[0])) != LAMP_OK) return st;
  m->key = f[0];
  m->type = is_int ? LAMP_CKPT_META_INT : LAMP_CKPT_META_DOUBLE;
  return is_int ? parse_i64(cur, f[1], len[1], &m->i) : parse_f64(cur, f[1], len[1], &m->d);
}

static lamp_status parse_shape(const cursor *cur, const char *s, size_t len, lamp_ckpt_entry *e) {
  char shown[256];
  if (len < 2 || s[0] != '[' || s[len - 1] != ']')
    return bad(cur, "shape '%s' is not [D0,D1,...]", ckpt_show(shown, sizeof shown, s, len));
  const char *p = s + 1, *end = s + len - 1;
  e->ndim = 0;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    if (e->ndim == LAMP_CKPT_MAX_DIMS)
      return bad(cur, "shape '%s' has more than %d dimensions", ckpt_show(shown, sizeof shown, s, len),
                 LAMP_CKPT_MAX_DIMS);
    uint64_t d;
    lamp_status st = parse_u64(cur, "dimension", p, (size_t)(stop - p), INT64_MAX, &d);
    if (st != LAMP_OK) return st;
    e->shape[e->ndim++] = (int64_t)d;
    p = comma ? comma + 1 : end;
    if (comma && p == end) return bad(cur, "shape '%s' ends with a comma", ckpt_show(shown, sizeof shown, s, len));
  }
  return LAMP_OK;
}

/* Size, alignment, order and bounds of an entry within the data section. */
static lamp_status place_entry(const cursor *cur, lamp_ckpt_entry *e, const lamp_ckpt_entry *prev,
                               uint64_t data_len) {
  const char *kind = e->kind == LAMP_CKPT_BLOB ? "blob" : "tensor";
  char shape[256];
  if (e->kind == LAMP_CKPT_TENSOR) {
    int overflow;
    uint64_t nbytes = ckpt_shape_bytes(e->dtype, e->ndim, e->shape, &overflow);
    ckpt_format_shape(shape, sizeof shape, e->dtype, e->ndim, e->shape);
    if (overflow) return bad(cur, "tensor '%s' %s needs more than 2^64 bytes (size overflow)", e->name, shape);
    if (nbytes > data_len)
      return bad(cur, "tensor '%s' %s needs %llu bytes, more than the whole data section (%llu bytes)", e->name, shape,
                 (unsigned long long)nbytes, (unsigned long long)data_len);
    e->nbytes = (size_t)nbytes;
  } else if (e->nbytes > data_len) {
    return bad(cur, "blob '%s' of %zu bytes is larger than the whole data section (%llu bytes)", e->name, e->nbytes,
               (unsigned long long)data_len);
  }
  if (e->offset % CKPT_ALIGN != 0)
    return bad(cur, "%s '%s' offset %llu is not a multiple of %d", kind, e->name, (unsigned long long)e->offset,
               CKPT_ALIGN);
  if (e->offset > data_len || e->nbytes > data_len - e->offset)
    return bad(cur, "%s '%s' (bytes %llu to %llu of the data section) runs past its end (%llu bytes)", kind, e->name,
               (unsigned long long)e->offset, (unsigned long long)e->offset + e->nbytes,
               (unsigned long long)data_len);
  if (prev != NULL && e->offset < prev->offset + prev->nbytes)
    return bad(cur, "%s '%s' at offset %llu overlaps the previous entry '%s' (which ends at %llu)", kind, e->name,
               (unsigned long long)e->offset, prev->name, (unsigned long long)(prev->offset + prev->nbytes));
  return LAMP_OK;
}

static lamp_status entry_record(cursor *cur, const char *kind, lamp_ckpt_entry *e, const lamp_ckpt_entry *prev,
                                uint64_t data_len) {
  char *f[5];
  size_t len[5];
  char shown[256];
  int tensor = strcmp(kind, "tensor") == 0;
  lamp_status st = tensor ? fields(cur, kind, "NAME DTYPE [SHAPE] OFFSET CRC32", 5, f, len)
                          : fields(cur, kind, "NAME NBYTES OFFSET CRC32", 4, f, len);
  if (st != LAMP_OK) return st;
  if ((st = check_name(cur, "entry name", f[0], len[0])) != LAMP_OK) return st;
  e->name = f[0];
  e->kind = tensor ? LAMP_CKPT_TENSOR : LAMP_CKPT_BLOB;
  int at = 1;
  if (tensor) {
    int dtype = ckpt_dtype_parse(f[1], len[1]);
    if (dtype < 0)
      return bad(cur, "tensor '%s' has unknown dtype '%s' (known: " CKPT_DTYPE_LIST ")", e->name,
                 ckpt_show(shown, sizeof shown, f[1], len[1]));
    e->dtype = (lamp_ckpt_dtype)dtype;
    if ((st = parse_shape(cur, f[2], len[2], e)) != LAMP_OK) return st;
    at = 3;
  } else {
    uint64_t nbytes;
    if ((st = parse_u64(cur, "blob size", f[1], len[1], SIZE_MAX, &nbytes)) != LAMP_OK) return st;
    e->dtype = LAMP_CKPT_U8;
    e->ndim = 1;
    e->nbytes = (size_t)nbytes;
    e->shape[0] = nbytes > INT64_MAX ? INT64_MAX : (int64_t)nbytes;
    at = 2;
  }
  if ((st = parse_u64(cur, "offset", f[at], len[at], UINT64_MAX, &e->offset)) != LAMP_OK) return st;
  if ((st = parse_crc(cur, f[at + 1], len[at + 1], &e->crc32)) != LAMP_OK) return st;
  return place_entry(cur, e, prev, data_len);
}

/* ---- the whole header ------------------------------------------------------------------------- */

/* Whether a line's first field names an entry record (tensor or blob) rather than a meta. */
static int is_entry_kind(const char *p, size_t len) {
  const char *space = memchr(p, ' ', len);
  size_t n = space ? (size_t)(space - p) : len;
  return (n == 6 && memcmp(p, "tensor", 6) == 0) || (n == 4 && memcmp(p, "blob", 4) == 0);
}

/* Checks the framing (no NUL, every line ends in '\n') and counts the records of each family. */
static lamp_status count_records(lamp_ckpt *c, const char *text, size_t len, size_t *n_metas, size_t *n_entries) {
  cursor cur = {.c = c, .line = 1};
  const char *nul = memchr(text, '\0', len);
  *n_metas = *n_entries = 0;
  for (const char *p = text; p < text + len; cur.line++) {
    const char *nl = memchr(p, '\n', (size_t)(text + len - p));
    if (nul != NULL && (nl == NULL || nul < nl)) return bad(&cur, "contains a NUL byte");
    if (nl == NULL) return bad(&cur, "does not end with a newline (the header must end with one)");
    if (*n_metas + *n_entries == LAMP_CKPT_MAX_RECORDS)
      return bad(&cur, "more than %d records (metas and entries)", LAMP_CKPT_MAX_RECORDS);
    if (is_entry_kind(p, (size_t)(nl - p))) ++*n_entries;
    else ++*n_metas;
    p = nl + 1;
  }
  return LAMP_OK;
}

/* One line; cap_* are the counts count_records found, which bound the arrays. */
static lamp_status record(lamp_ckpt *c, cursor *cur, uint64_t data_len, size_t cap_metas, size_t cap_entries) {
  size_t klen = 0;
  char *kind = field(cur, &klen);
  char shown[256];
  if (klen == 0) return bad(cur, "empty record");
  if (is_entry_kind(kind, klen)) {
    if (c->n_entries >= cap_entries) return lamp_error(LAMP_ERR_INTERNAL, "%s: entry count changed", c->name);
    lamp_ckpt_entry *e = &c->entries[c->n_entries];
    lamp_status st = entry_record(cur, kind, e, c->n_entries ? &c->entries[c->n_entries - 1] : NULL, data_len);
    if (st == LAMP_OK) c->n_entries++;
    return st;
  }
  if (strcmp(kind, "str") == 0 || strcmp(kind, "int") == 0 || strcmp(kind, "f64") == 0) {
    if (c->n_metas >= cap_metas) return lamp_error(LAMP_ERR_INTERNAL, "%s: meta count changed", c->name);
    lamp_status st = meta_record(cur, kind, &c->metas[c->n_metas]);
    if (st == LAMP_OK) c->n_metas++;
    return st;
  }
  return bad(cur, "unknown record '%s' (known: str, int, f64, tensor, blob)", ckpt_show(shown, sizeof shown, kind, klen));
}

lamp_status ckpt_parse_header(lamp_ckpt *c) {
  char *text = (char *)c->buf + CKPT_PREAMBLE;
  size_t len = c->header_len;
  size_t n_metas, n_entries;
  lamp_status st = count_records(c, text, len, &n_metas, &n_entries);
  if (st != LAMP_OK) return st;
  /* Bounded by LAMP_CKPT_MAX_RECORDS and by the header's real length. */
  if (n_metas && ((c->metas = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, n_metas * sizeof *c->metas)) == NULL ||
                  (c->meta_order = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, n_metas * sizeof *c->meta_order)) == NULL))
    return LAMP_ERR_SYSTEM;
  if (n_entries &&
      ((c->entries = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, n_entries * sizeof *c->entries)) == NULL ||
       (c->entry_order = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, n_entries * sizeof *c->entry_order)) == NULL))
    return LAMP_ERR_SYSTEM;
  uint64_t data_len = c->len - c->data_start;
  cursor cur = {.c = c, .line = 1};
  for (char *p = text; p < text + len; cur.line++) {
    char *nl = memchr(p, '\n', (size_t)(text + len - p));
    *nl = '\0';
    cur.p = p;
    cur.end = nl;
    if ((st = record(c, &cur, data_len, n_metas, n_entries)) != LAMP_OK) return st;
    p = nl + 1;
  }
  return LAMP_OK;
}
