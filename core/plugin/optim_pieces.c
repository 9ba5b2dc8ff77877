/*
** A piecewise optimizer step on the host's threads (optim_pieces.h). The slabs are cut into one
** run of elements per thread; each run goes to the plugin as a step of its own, the calling thread
** taking the first. An elementwise update changes no element outside its piece, so the pieces
** share nothing but the read-only scalars of the step.
*/
#include <stdint.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "plugin/optim_pieces.h"

size_t lamp_optim_piece_count(size_t n, size_t threads) {
  size_t pieces = n / LAMP_OPTIM_PIECE_MIN;
  if (pieces > threads) pieces = threads;
  return pieces > 1 ? pieces : 1;
}

typedef struct pieces_run {
  lamp_optim_step_fn step_fn;
  void *state;
  const lamp_optim_step *whole;
  uint32_t n_slots;
  size_t pieces;
  lamp_optim_segment *room;
} pieces_run;

/* Piece i is [bound(i), bound(i + 1)): equal shares, cut at multiples of 16 elements. */
static size_t bound(const pieces_run *r, size_t i) {
  if (i == r->pieces) return r->whole->n;
  return (r->whole->n * i / r->pieces) & ~(size_t)15;
}

size_t lamp_optim_cut_segments(const lamp_optim_segment *segs, size_t n_segs, size_t start, size_t n,
                               lamp_optim_segment *out) {
  size_t m = 0, end = start + n;
  for (size_t k = 0; k < n_segs; k++) {
    const lamp_optim_segment *s = &segs[k];
    size_t lo = s->offset > start ? s->offset : start, hi = s->offset + s->count < end ? s->offset + s->count : end;
    if (lo < hi) out[m++] = (lamp_optim_segment){lo - start, hi - lo, s->lr_mult, s->decay_mult};
  }
  return m;
}

static lamp_status run_piece(void *ctx, size_t worker, size_t task) {
  (void)worker;
  const pieces_run *r = ctx;
  const lamp_optim_step *whole = r->whole;
  size_t lo = bound(r, task), hi = bound(r, task + 1);
  float *slots[LAMP_OPTIM_MAX_SLOTS] = {0};
  for (uint32_t j = 0; j < r->n_slots; j++) slots[j] = whole->slots[j] + lo;
  lamp_optim_step step = *whole;
  step.n = hi - lo;
  step.params = whole->params + lo;
  step.grads = whole->grads + lo;
  step.slots = whole->slots != NULL ? slots : NULL;
  lamp_optim_segment *cut = r->room + task * whole->n_segments;
  step.segments = cut;
  step.n_segments = lamp_optim_cut_segments(whole->segments, whole->n_segments, lo, hi - lo, cut);
  step.tensors = NULL;
  step.n_tensors = 0;
  if (whole->weights_out != NULL) step.weights_out = (uint16_t *)whole->weights_out + lo; /* f16 or bf16 */
  return r->step_fn(r->state, &step);
}

lamp_status lamp_optim_piece_room_fit(lamp_optim_piece_room *room, size_t pieces, size_t n_segments) {
  size_t entries = pieces * n_segments;
  if (entries <= room->capacity) return LAMP_OK;
  lamp_optim_segment *grown = realloc(room->segments, entries * sizeof *grown);
  if (grown == NULL) return lamp_error(LAMP_ERR_SYSTEM, "out of memory cutting an optimizer step into pieces");
  room->segments = grown;
  room->capacity = entries;
  return LAMP_OK;
}

lamp_status lamp_optim_step_pieces(lamp_optim_step_fn step_fn, void *state, const lamp_optim_step *whole,
                                   uint32_t n_slots, size_t pieces, const lamp_optim_piece_room *room) {
  pieces_run r = {step_fn, state, whole, n_slots, pieces, room->segments};
  return lamp_host_parallel_for(pieces, run_piece, &r);
}
