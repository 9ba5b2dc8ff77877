/*
** The checkpoint writer: collects metas, tensors and blobs, then lays them out (offsets,
** CRCs, header text) and streams the file in one sequential pass. Tensor data is borrowed,
** not copied: a checkpoint is as large as the model and its optimizer state.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/format.h"
#include "checkpoint/strbuf.h"
#include "tensor/memory.h"

/* Progress is reported, and a write syscall issued, per chunk of this size. */
#define WRITE_CHUNK ((size_t)4 << 20)

typedef struct wmeta {
  char *key;
  lamp_ckpt_meta_type type;
  char *str;
  int64_t i;
  double d;
} wmeta;

typedef struct wentry {
  lamp_ckpt_entry e; /* e.name is owned; e.data is borrowed (tensor) or owned (blob) */
  void *owned;
} wentry;

struct lamp_ckpt_writer {
  wmeta *metas;
  size_t n_metas, cap_metas;
  wentry *entries;
  size_t n_entries, cap_entries;
  lamp_ckpt_progress_fn progress;
  void *progress_userdata;
};

lamp_status lamp_ckpt_writer_new(lamp_ckpt_writer **out) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint writer: output is NULL");
  *out = calloc(1, sizeof **out);
  if (*out == NULL) return lamp_error(LAMP_ERR_SYSTEM, "checkpoint writer: out of memory");
  return LAMP_OK;
}

void lamp_ckpt_writer_free(lamp_ckpt_writer *w) {
  if (w == NULL) return;
  for (size_t i = 0; i < w->n_metas; i++) {
    free(w->metas[i].key);
    free(w->metas[i].str);
  }
  for (size_t i = 0; i < w->n_entries; i++) {
    free((char *)w->entries[i].e.name);
    free(w->entries[i].owned);
  }
  free(w->metas);
  free(w->entries);
  free(w);
}

void lamp_ckpt_writer_set_progress(lamp_ckpt_writer *w, lamp_ckpt_progress_fn fn, void *userdata) {
  if (w == NULL) return;
  w->progress = fn;
  w->progress_userdata = userdata;
}

/* ---- adding records ------------------------------------------------------------------------ */

static lamp_status check_name(const char *what, const char *name) {
  if (name == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: %s name is NULL", what);
  if (!ckpt_name_ok(name, strlen(name))) {
    char shown[256];
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: invalid %s name '%s' (expected " CKPT_NAME_RULE ")", what,
                      ckpt_show(shown, sizeof shown, name, strlen(name)));
  }
  return LAMP_OK;
}

static lamp_status check_room(const lamp_ckpt_writer *w) {
  if (w->n_metas + w->n_entries >= LAMP_CKPT_MAX_RECORDS)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: more than %d metas and entries", LAMP_CKPT_MAX_RECORDS);
  return LAMP_OK;
}

static int grow(void **array, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 1;
  size_t next = *cap ? *cap * 2 : 16;
  void *p = realloc(*array, next * elem);
  if (p == NULL) return 0;
  *array = p;
  *cap = next;
  return 1;
}

static lamp_status add_meta(lamp_ckpt_writer *w, const char *key, wmeta m, const char *str) {
  if (w == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint writer is NULL");
  lamp_status st = check_name("meta", key);
  if (st == LAMP_OK) st = check_room(w);
  if (st != LAMP_OK) return st;
  for (size_t i = 0; i < w->n_metas; i++)
    if (strcmp(w->metas[i].key, key) == 0)
      return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: meta '%s' added twice", key);
  if (!grow((void **)&w->metas, &w->cap_metas, w->n_metas, sizeof *w->metas))
    return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory");
  m.key = strdup(key);
  m.str = str ? strdup(str) : NULL;
  if (m.key == NULL || (str && m.str == NULL)) {
    free(m.key);
    free(m.str);
    return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory");
  }
  w->metas[w->n_metas++] = m;
  return LAMP_OK;
}

lamp_status lamp_ckpt_add_meta_str(lamp_ckpt_writer *w, const char *key, const char *value) {
  if (value == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: meta '%s' has a NULL string", key ? key : "?");
  return add_meta(w, key, (wmeta){.type = LAMP_CKPT_META_STR}, value);
}

lamp_status lamp_ckpt_add_meta_int(lamp_ckpt_writer *w, const char *key, int64_t value) {
  return add_meta(w, key, (wmeta){.type = LAMP_CKPT_META_INT, .i = value}, NULL);
}

lamp_status lamp_ckpt_add_meta_double(lamp_ckpt_writer *w, const char *key, double value) {
  return add_meta(w, key, (wmeta){.type = LAMP_CKPT_META_DOUBLE, .d = value}, NULL);
}

static lamp_status add_entry(lamp_ckpt_writer *w, lamp_ckpt_entry e, void *owned) {
  for (size_t i = 0; i < w->n_entries; i++)
    if (strcmp(w->entries[i].e.name, e.name) == 0)
      return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: entry '%s' added twice", e.name);
  if (!grow((void **)&w->entries, &w->cap_entries, w->n_entries, sizeof *w->entries))
    return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory");
  e.name = strdup(e.name);
  if (e.name == NULL) return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory");
  if (owned) e.data = owned;
  w->entries[w->n_entries++] = (wentry){.e = e, .owned = owned};
  return LAMP_OK;
}

lamp_status lamp_ckpt_add_tensor(lamp_ckpt_writer *w, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                 const int64_t *shape, const void *data) {
  if (w == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint writer is NULL");
  lamp_status st = check_name("tensor", name);
  if (st == LAMP_OK) st = check_room(w);
  if (st != LAMP_OK) return st;
  if ((unsigned)dtype >= LAMP_CKPT_DTYPE_COUNT)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: tensor '%s' has unknown dtype %d", name, (int)dtype);
  if (ndim < 0 || ndim > LAMP_CKPT_MAX_DIMS || (ndim > 0 && shape == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: tensor '%s' has %d dimensions, expected 0 to %d", name, ndim,
                      LAMP_CKPT_MAX_DIMS);
  lamp_ckpt_entry e = {.name = name, .kind = LAMP_CKPT_TENSOR, .dtype = dtype, .ndim = ndim, .data = data};
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: tensor '%s' dimension %d is negative (%lld)", name, i,
                        (long long)shape[i]);
    e.shape[i] = shape[i];
  }
  int overflow;
  uint64_t nbytes = ckpt_shape_bytes(dtype, ndim, shape, &overflow);
  if (overflow || nbytes > SIZE_MAX / 2)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: tensor '%s' is too large to address", name);
  e.nbytes = (size_t)nbytes;
  if (e.nbytes > 0 && data == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: tensor '%s' of %zu bytes has NULL data", name, e.nbytes);
  return add_entry(w, e, NULL);
}

lamp_status lamp_ckpt_add_blob(lamp_ckpt_writer *w, const char *name, const void *data, size_t nbytes) {
  if (w == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint writer is NULL");
  lamp_status st = check_name("blob", name);
  if (st == LAMP_OK) st = check_room(w);
  if (st != LAMP_OK) return st;
  if (nbytes > 0 && data == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: blob '%s' of %zu bytes has NULL data", name, nbytes);
  void *copy = malloc(nbytes ? nbytes : 1);
  if (copy == NULL) return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory copying blob '%s'", name);
  if (nbytes) memcpy(copy, data, nbytes);
  lamp_ckpt_entry e = {.name = name, .kind = LAMP_CKPT_BLOB, .dtype = LAMP_CKPT_U8, .ndim = 1,
                       .shape = {(int64_t)nbytes}, .nbytes = nbytes};
  st = add_entry(w, e, copy);
  if (st != LAMP_OK) free(copy);
  return st;
}

/* ---- layout -------------------------------------------------------------------------------- */

/* Strings are one line: backslash, control bytes and DEL are escaped; other bytes pass. */
static void add_escaped(ckpt_strbuf *b, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\\') ckpt_strbuf_add(b, "\\\\", 2);
    else if (c == '\n') ckpt_strbuf_add(b, "\\n", 2);
    else if (c == '\t') ckpt_strbuf_add(b, "\\t", 2);
    else if (c == '\r') ckpt_strbuf_add(b, "\\r", 2);
    else if (c < 0x20 || c == 0x7f) ckpt_strbuf_printf(b, "\\x%02x", c);
    else ckpt_strbuf_add(b, (const char *)&c, 1);
  }
}

static void add_meta_line(ckpt_strbuf *b, const wmeta *m) {
  switch (m->type) {
  case LAMP_CKPT_META_STR:
    ckpt_strbuf_printf(b, "str %s ", m->key);
    add_escaped(b, m->str);
    ckpt_strbuf_add(b, "\n", 1);
    break;
  case LAMP_CKPT_META_INT: ckpt_strbuf_printf(b, "int %s %lld\n", m->key, (long long)m->i); break;
  case LAMP_CKPT_META_DOUBLE: ckpt_strbuf_printf(b, "f64 %s %.17g\n", m->key, m->d); break;
  }
}

static void add_entry_line(ckpt_strbuf *b, const lamp_ckpt_entry *e) {
  if (e->kind == LAMP_CKPT_BLOB) {
    ckpt_strbuf_printf(b, "blob %s %zu %llu %08x\n", e->name, e->nbytes, (unsigned long long)e->offset, e->crc32);
    return;
  }
  ckpt_strbuf_printf(b, "tensor %s %s [", e->name, lamp_ckpt_dtype_name(e->dtype));
  for (int i = 0; i < e->ndim; i++) ckpt_strbuf_printf(b, i ? ",%lld" : "%lld", (long long)e->shape[i]);
  ckpt_strbuf_printf(b, "] %llu %08x\n", (unsigned long long)e->offset, e->crc32);
}

typedef struct layout {
  uint8_t preamble[CKPT_PREAMBLE];
  ckpt_strbuf header;
  uint64_t data_start;
  uint64_t file_len;
} layout;

/* Offsets and CRCs of every entry, the header text and the preamble. */
static lamp_status plan(lamp_ckpt_writer *w, layout *lay) {
  uint64_t end = 0;
  for (size_t i = 0; i < w->n_entries; i++) {
    lamp_ckpt_entry *e = &w->entries[i].e;
    e->offset = ckpt_align(end);
    end = e->offset + e->nbytes;
    e->crc32 = ckpt_crc32(0, e->data, e->nbytes);
  }
  memset(lay, 0, sizeof *lay);
  for (size_t i = 0; i < w->n_metas; i++) add_meta_line(&lay->header, &w->metas[i]);
  for (size_t i = 0; i < w->n_entries; i++) add_entry_line(&lay->header, &w->entries[i].e);
  if (lay->header.failed) return lamp_error(LAMP_ERR_SYSTEM, "checkpoint: out of memory for the header");
  if (lay->header.len > CKPT_MAX_HEADER)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: header of %zu bytes is over the %u-byte limit",
                      lay->header.len, (unsigned)CKPT_MAX_HEADER);
  lay->data_start = ckpt_align(CKPT_PREAMBLE + lay->header.len);
  lay->file_len = lay->data_start + end;
  memcpy(lay->preamble, CKPT_MAGIC, CKPT_MAGIC_LEN);
  ckpt_put_u32(lay->preamble + 8, LAMP_CKPT_FORMAT_VERSION);
  ckpt_put_u32(lay->preamble + 12, (uint32_t)lay->header.len);
  ckpt_put_u64(lay->preamble + 16, lay->file_len);
  ckpt_put_u32(lay->preamble + CKPT_CRC_AT, ckpt_header_crc(lay->preamble, lay->header.text, lay->header.len));
  return LAMP_OK;
}

/* ---- emitting ------------------------------------------------------------------------------ */

/* Where the bytes go: a file being written atomically, or one memory block. */
typedef struct sink {
  ckpt_atomic_file *file;
  uint8_t *mem;
  uint64_t pos, total;
  lamp_ckpt_progress_fn progress;
  void *userdata;
} sink;

static lamp_status put(sink *s, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    size_t chunk = n < WRITE_CHUNK ? n : WRITE_CHUNK;
    if (s->file) {
      lamp_status st = ckpt_atomic_write(s->file, p, chunk);
      if (st != LAMP_OK) return st;
    } else {
      memcpy(s->mem + s->pos, p, chunk);
    }
    s->pos += chunk;
    p += chunk;
    n -= chunk;
    if (s->progress && s->file) s->progress(s->pos, s->total, s->userdata);
  }
  return LAMP_OK;
}

static lamp_status pad_to(sink *s, uint64_t target) {
  static const uint8_t zeros[CKPT_ALIGN];
  while (s->pos < target) {
    lamp_status st = put(s, zeros, (size_t)(target - s->pos < CKPT_ALIGN ? target - s->pos : CKPT_ALIGN));
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

static lamp_status emit(const lamp_ckpt_writer *w, const layout *lay, sink *s) {
  lamp_status st = put(s, lay->preamble, sizeof lay->preamble);
  if (st == LAMP_OK && lay->header.len) st = put(s, lay->header.text, lay->header.len);
  for (size_t i = 0; st == LAMP_OK && i < w->n_entries; i++) {
    const lamp_ckpt_entry *e = &w->entries[i].e;
    st = pad_to(s, lay->data_start + e->offset);
    if (st == LAMP_OK) st = put(s, e->data, e->nbytes);
  }
  if (st == LAMP_OK) st = pad_to(s, lay->file_len);
  return st;
}

lamp_status lamp_ckpt_write_atomic(lamp_ckpt_writer *w, const char *path) {
  if (w == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint writer is NULL");
  layout lay;
  lamp_status st = plan(w, &lay);
  ckpt_atomic_file file;
  if (st == LAMP_OK) st = ckpt_atomic_open(&file, path);
  if (st == LAMP_OK) {
    sink s = {.file = &file, .total = lay.file_len, .progress = w->progress, .userdata = w->progress_userdata};
    st = emit(w, &lay, &s); /* a failed write has already removed the .tmp */
    if (st == LAMP_OK) st = ckpt_atomic_commit(&file);
  }
  ckpt_strbuf_free(&lay.header);
  return st;
}

lamp_status lamp_ckpt_write_memory(lamp_ckpt_writer *w, void **bytes, size_t *len) {
  if (w == NULL || bytes == NULL || len == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL writer or output");
  *bytes = NULL;
  *len = 0;
  layout lay;
  lamp_status st = plan(w, &lay);
  if (st == LAMP_OK && lay.file_len > SIZE_MAX) st = lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: too large for memory");
  uint8_t *mem = NULL;
  if (st == LAMP_OK && (mem = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, (size_t)lay.file_len)) == NULL)
    st = LAMP_ERR_SYSTEM;
  if (st == LAMP_OK) {
    sink s = {.mem = mem, .total = lay.file_len};
    st = emit(w, &lay, &s);
  }
  ckpt_strbuf_free(&lay.header);
  if (st != LAMP_OK) {
    lamp_mem_free(mem);
    return st;
  }
  *bytes = mem;
  *len = (size_t)lay.file_len;
  return LAMP_OK;
}
