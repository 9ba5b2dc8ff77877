/*
** The scratch of scratch.h: chunks, and the places the current pass holds in them (few: the
** tensors one wrapped module keeps at a time), kept in chunk and offset order so that the first
** gap that fits is found in one walk. Places start on 256-byte boundaries, which every dtype's
** size divides and devices read best.
*/
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "nn/scratch.h"
#include "tensor/dtype.h"

#define ALIGN ((size_t)256)

typedef struct place {
  size_t chunk, offset, bytes;
} place;

struct lamp_scratch {
  lamp_tensor **chunks; /* u8 [bytes], LAMP_MEM_ACTIVATIONS */
  size_t n_chunks, chunk_cap;
  place *held; /* the pass's places, by chunk then offset */
  size_t n_held, held_cap;
  uint64_t rewinds;
};

lamp_status lamp_scratch_new(lamp_scratch **out) {
  *out = calloc(1, sizeof **out);
  return *out != NULL ? LAMP_OK : lamp_error(LAMP_ERR_SYSTEM, "scratch: out of memory");
}

void lamp_scratch_free(lamp_scratch *scratch) {
  if (scratch == NULL) return;
  for (size_t i = 0; i < scratch->n_chunks; i++) lamp_tensor_release(scratch->chunks[i]);
  free(scratch->chunks);
  free(scratch->held);
  free(scratch);
}

void lamp_scratch_rewind(lamp_scratch *scratch) {
  scratch->n_held = 0;
  scratch->rewinds++;
}

uint64_t lamp_scratch_rewinds(const lamp_scratch *scratch) { return scratch->rewinds; }

static size_t chunk_bytes(const lamp_scratch *s, size_t c) { return s->chunks[c]->storage->nbytes; }

/*
** The first gap of `bytes` in a chunk of `device`: *chunk and *offset, and *at, where its place
** goes in held. 0 when there is none.
*/
static int find_gap(const lamp_scratch *s, lamp_device device, size_t bytes, size_t *chunk, size_t *offset,
                    size_t *at) {
  size_t h = 0;
  for (size_t c = 0; c < s->n_chunks; c++) {
    int usable = s->chunks[c]->device == device;
    size_t start = 0;
    for (; h < s->n_held && s->held[h].chunk == c; h++) {
      if (usable && s->held[h].offset - start >= bytes) break;
      start = s->held[h].offset + s->held[h].bytes;
    }
    int before_next = h < s->n_held && s->held[h].chunk == c; /* the gap ends at a place */
    if (usable && (before_next || chunk_bytes(s, c) - start >= bytes)) {
      *chunk = c;
      *offset = start;
      *at = h;
      return 1;
    }
  }
  return 0;
}

static lamp_status add_chunk(lamp_scratch *s, lamp_device device, size_t bytes) {
  if (s->n_chunks == s->chunk_cap) {
    size_t cap = s->chunk_cap ? 2 * s->chunk_cap : 8;
    lamp_tensor **more = realloc(s->chunks, cap * sizeof *more);
    if (more == NULL) return lamp_error(LAMP_ERR_SYSTEM, "scratch: out of memory");
    s->chunks = more;
    s->chunk_cap = cap;
  }
  int64_t shape[1] = {(int64_t)bytes};
  lamp_status st = lamp_tensor_new(&s->chunks[s->n_chunks], LAMP_U8, device, 1, shape, LAMP_MEM_ACTIVATIONS);
  if (st == LAMP_OK) s->n_chunks++;
  return st;
}

static lamp_status hold(lamp_scratch *s, size_t at, place p) {
  if (s->n_held == s->held_cap) {
    size_t cap = s->held_cap ? 2 * s->held_cap : 16;
    place *more = realloc(s->held, cap * sizeof *more);
    if (more == NULL) return lamp_error(LAMP_ERR_SYSTEM, "scratch: out of memory");
    s->held = more;
    s->held_cap = cap;
  }
  memmove(s->held + at + 1, s->held + at, (s->n_held - at) * sizeof *s->held);
  s->held[at] = p;
  s->n_held++;
  return LAMP_OK;
}

/* *t is already the view of `chunk` at `offset` with this dtype and shape. */
static int is_view(const lamp_tensor *t, const lamp_tensor *chunk, size_t offset, lamp_dtype dtype, int ndim,
                   const int64_t *shape) {
  if (t == NULL || t->storage != chunk->storage || t->dtype != dtype || t->ndim != ndim ||
      t->offset * lamp_dtype_size(dtype) != offset || !lamp_tensor_is_contiguous(t))
    return 0;
  return memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) == 0;
}

lamp_status lamp_scratch_take(lamp_scratch *scratch, lamp_tensor **t, lamp_dtype dtype, lamp_device device, int ndim,
                              const int64_t *shape) {
  size_t numel, esize = lamp_dtype_size(dtype);
  if (!lamp_shape_numel(ndim, shape, &numel)) return lamp_error_context(LAMP_ERR_INVALID_ARG, "scratch");
  if (esize == 0 || numel > (SIZE_MAX - ALIGN) / esize)
    return lamp_error(LAMP_ERR_INVALID_ARG, "scratch: a tensor of %zu elements of %s does not fit in memory", numel,
                      lamp_dtype_name(dtype));
  size_t bytes = (numel * esize + ALIGN - 1) / ALIGN * ALIGN;
  if (bytes == 0) bytes = ALIGN; /* an empty tensor still gets a place of its own */
  size_t chunk, offset, at;
  if (!find_gap(scratch, device, bytes, &chunk, &offset, &at)) {
    lamp_status st = add_chunk(scratch, device, bytes);
    if (st != LAMP_OK) return st;
    chunk = scratch->n_chunks - 1;
    offset = 0;
    at = scratch->n_held; /* the last chunk: its place goes last */
  }
  lamp_status st = hold(scratch, at, (place){chunk, offset, bytes});
  if (st != LAMP_OK || is_view(*t, scratch->chunks[chunk], offset, dtype, ndim, shape)) return st;
  lamp_tensor *view;
  st = lamp_tensor_view_as(&view, scratch->chunks[chunk], offset, dtype, ndim, shape);
  if (st != LAMP_OK) return st;
  lamp_tensor_release(*t);
  *t = view;
  return LAMP_OK;
}

void lamp_scratch_give_back(lamp_scratch *scratch, const lamp_tensor *t) {
  if (t == NULL) return;
  size_t offset = t->offset * lamp_dtype_size(t->dtype);
  for (size_t h = 0; h < scratch->n_held; h++) {
    const place *p = &scratch->held[h];
    if (scratch->chunks[p->chunk]->storage == t->storage && p->offset == offset) {
      memmove(scratch->held + h, scratch->held + h + 1, (scratch->n_held - h - 1) * sizeof *scratch->held);
      scratch->n_held--;
      return;
    }
  }
}
