/* The human-readable dump behind `lamp.checkpoint.info(path)`: preamble, metas, tensor table. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoint/format.h"
#include "checkpoint/reader_internal.h"
#include "checkpoint/strbuf.h"

/* A string meta in double quotes, with its control bytes escaped as C would. */
static void add_quoted(ckpt_strbuf *b, const char *s) {
  ckpt_strbuf_add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') ckpt_strbuf_printf(b, "\\%c", c);
    else if (c == '\n') ckpt_strbuf_add(b, "\\n", 2);
    else if (c == '\t') ckpt_strbuf_add(b, "\\t", 2);
    else if (c < 0x20 || c == 0x7f) ckpt_strbuf_printf(b, "\\x%02x", c);
    else ckpt_strbuf_add(b, (const char *)&c, 1);
  }
  ckpt_strbuf_add(b, "\"", 1);
}

static int name_width(const lamp_ckpt *c, int metas) {
  size_t w = 4;
  size_t n = metas ? c->n_metas : c->n_entries;
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(metas ? c->metas[i].key : c->entries[i].name);
    if (len > w) w = len;
  }
  return (int)(w < 48 ? w : 48);
}

static void add_metas(ckpt_strbuf *b, const lamp_ckpt *c) {
  int w = name_width(c, 1);
  ckpt_strbuf_printf(b, "metas (%zu):\n", c->n_metas);
  for (size_t i = 0; i < c->n_metas; i++) {
    const lamp_ckpt_meta *m = &c->metas[i];
    switch (m->type) {
    case LAMP_CKPT_META_STR:
      ckpt_strbuf_printf(b, "  str  %-*s  ", w, m->key);
      add_quoted(b, m->str);
      ckpt_strbuf_add(b, "\n", 1);
      break;
    case LAMP_CKPT_META_INT: ckpt_strbuf_printf(b, "  int  %-*s  %lld\n", w, m->key, (long long)m->i); break;
    case LAMP_CKPT_META_DOUBLE: ckpt_strbuf_printf(b, "  f64  %-*s  %.17g\n", w, m->key, m->d); break;
    }
  }
}

static void add_entries(ckpt_strbuf *b, const lamp_ckpt *c) {
  int w = name_width(c, 0);
  uint64_t total = 0;
  for (size_t i = 0; i < c->n_entries; i++) total += c->entries[i].nbytes;
  ckpt_strbuf_printf(b, "entries (%zu, %llu bytes of data):\n", c->n_entries, (unsigned long long)total);
  if (c->n_entries)
    ckpt_strbuf_printf(b, "  %-6s  %-*s  %-24s  %12s  %12s  %s\n", "kind", w, "name", "dtype[shape]", "bytes", "offset",
                       "crc32");
  for (size_t i = 0; i < c->n_entries; i++) {
    const lamp_ckpt_entry *e = &c->entries[i];
    char shape[256];
    ckpt_format_shape(shape, sizeof shape, e->dtype, e->ndim, e->shape);
    ckpt_strbuf_printf(b, "  %-6s  %-*s  %-24s  %12zu  %12llu  %08x\n", e->kind == LAMP_CKPT_BLOB ? "blob" : "tensor", w,
                       e->name, shape, e->nbytes, (unsigned long long)e->offset, e->crc32);
  }
}

lamp_status lamp_ckpt_describe(const lamp_ckpt *c, char **text) {
  if (c == NULL || text == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL argument");
  *text = NULL;
  ckpt_strbuf b = {0};
  ckpt_strbuf_printf(&b, "%s: lamp checkpoint format %u, %zu bytes (header %u bytes, crc32 %08x; data from byte %llu)\n",
                     c->name, c->version, c->len, c->header_len, c->header_crc, (unsigned long long)c->data_start);
  add_metas(&b, c);
  add_entries(&b, c);
  if (b.failed) {
    ckpt_strbuf_free(&b);
    return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory describing the checkpoint", c->name);
  }
  *text = b.text;
  return LAMP_OK;
}

lamp_status lamp_ckpt_info(const char *path, char **text) {
  if (text == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL argument");
  *text = NULL;
  lamp_ckpt *c;
  lamp_status st = lamp_ckpt_open(&c, path);
  if (st != LAMP_OK) return st;
  st = lamp_ckpt_describe(c, text);
  lamp_ckpt_close(c);
  return st;
}
