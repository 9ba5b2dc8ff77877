/* Getting things back out of an open checkpoint: metas by key, entries by name, typed copies. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "checkpoint/format.h"
#include "checkpoint/reader_internal.h"

const char *lamp_ckpt_name(const lamp_ckpt *c) { return c ? c->name : ""; }
uint64_t lamp_ckpt_file_size(const lamp_ckpt *c) { return c ? c->len : 0; }
size_t lamp_ckpt_meta_count(const lamp_ckpt *c) { return c ? c->n_metas : 0; }
size_t lamp_ckpt_entry_count(const lamp_ckpt *c) { return c ? c->n_entries : 0; }

const lamp_ckpt_meta *lamp_ckpt_meta_at(const lamp_ckpt *c, size_t i) {
  return c && i < c->n_metas ? &c->metas[i] : NULL;
}

const lamp_ckpt_entry *lamp_ckpt_entry_at(const lamp_ckpt *c, size_t i) {
  return c && i < c->n_entries ? &c->entries[i] : NULL;
}

/* Binary search over the sorted order; NULL when absent. */
static const lamp_ckpt_meta *find_meta(const lamp_ckpt *c, const char *key) {
  size_t lo = 0, hi = c->n_metas;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const lamp_ckpt_meta *m = &c->metas[c->meta_order[mid]];
    int cmp = strcmp(key, m->key);
    if (cmp == 0) return m;
    if (cmp < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

static const lamp_ckpt_entry *find_entry(const lamp_ckpt *c, const char *name) {
  size_t lo = 0, hi = c->n_entries;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const lamp_ckpt_entry *e = &c->entries[c->entry_order[mid]];
    int cmp = strcmp(name, e->name);
    if (cmp == 0) return e;
    if (cmp < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

int lamp_ckpt_has_meta(const lamp_ckpt *c, const char *key) { return c && key && find_meta(c, key) != NULL; }

static const char *type_name(lamp_ckpt_meta_type t) {
  switch (t) {
  case LAMP_CKPT_META_STR: return "a string";
  case LAMP_CKPT_META_INT: return "an integer";
  case LAMP_CKPT_META_DOUBLE: return "a double";
  }
  return "?";
}

static lamp_status get_meta(const lamp_ckpt *c, const char *key, lamp_ckpt_meta_type type, const lamp_ckpt_meta **out) {
  if (c == NULL || key == NULL || out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL argument");
  const lamp_ckpt_meta *m = find_meta(c, key);
  if (m == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: no meta '%s' in this checkpoint", c->name, key);
  if (m->type != type)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: meta '%s' is %s, expected %s", c->name, key, type_name(m->type),
                      type_name(type));
  *out = m;
  return LAMP_OK;
}

lamp_status lamp_ckpt_meta_str(const lamp_ckpt *c, const char *key, const char **out) {
  const lamp_ckpt_meta *m;
  lamp_status st = get_meta(c, key, LAMP_CKPT_META_STR, &m);
  if (st == LAMP_OK) *out = m->str;
  return st;
}

lamp_status lamp_ckpt_meta_int(const lamp_ckpt *c, const char *key, int64_t *out) {
  const lamp_ckpt_meta *m;
  lamp_status st = get_meta(c, key, LAMP_CKPT_META_INT, &m);
  if (st == LAMP_OK) *out = m->i;
  return st;
}

lamp_status lamp_ckpt_meta_double(const lamp_ckpt *c, const char *key, double *out) {
  const lamp_ckpt_meta *m;
  lamp_status st = get_meta(c, key, LAMP_CKPT_META_DOUBLE, &m);
  if (st == LAMP_OK) *out = m->d;
  return st;
}

lamp_status lamp_ckpt_find(const lamp_ckpt *c, const char *name, const lamp_ckpt_entry **out) {
  if (c == NULL || name == NULL || out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL argument");
  *out = find_entry(c, name);
  if (*out == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: no tensor or blob '%s' in this checkpoint", c->name, name);
  return LAMP_OK;
}

lamp_status lamp_ckpt_blob(const lamp_ckpt *c, const char *name, const void **data, size_t *nbytes) {
  const lamp_ckpt_entry *e;
  lamp_status st = lamp_ckpt_find(c, name, &e);
  if (st != LAMP_OK) return st;
  if (e->kind != LAMP_CKPT_BLOB)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: '%s' is a tensor, expected a blob", c->name, name);
  *data = e->data;
  *nbytes = e->nbytes;
  return LAMP_OK;
}

lamp_status lamp_ckpt_check_tensor(const lamp_ckpt *c, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                   const int64_t *shape) {
  const lamp_ckpt_entry *e;
  lamp_status st = lamp_ckpt_find(c, name, &e);
  if (st != LAMP_OK) return st;
  if (e->kind != LAMP_CKPT_TENSOR)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: '%s' is a blob, expected a tensor", c->name, name);
  if (ndim < 0 || ndim > LAMP_CKPT_MAX_DIMS || (ndim > 0 && shape == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: expected shape of %d dimensions", ndim);
  int same = e->dtype == dtype && e->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
  if (!same) {
    char found[256], expected[256];
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: tensor '%s' is %s, expected %s", c->name, name,
                      ckpt_format_shape(found, sizeof found, e->dtype, e->ndim, e->shape),
                      ckpt_format_shape(expected, sizeof expected, dtype, ndim, shape));
  }
  return LAMP_OK;
}

lamp_status lamp_ckpt_read_tensor(const lamp_ckpt *c, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                  const int64_t *shape, void *dst) {
  lamp_status st = lamp_ckpt_check_tensor(c, name, dtype, ndim, shape);
  if (st != LAMP_OK) return st;
  const lamp_ckpt_entry *e;
  lamp_ckpt_find(c, name, &e);
  if (e->nbytes) memcpy(dst, e->data, e->nbytes);
  return LAMP_OK;
}
