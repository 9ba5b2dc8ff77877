/*
** An optimizer step cut into pieces for the host's threads: a plugin that declares
** LAMP_OPTIM_CAP_PIECEWISE (optim.h) updates each element from that element alone, so the core
** may hand it disjoint runs of the slabs as steps of their own and run them at once. The update
** of an element is the same whichever piece holds it: the bits never depend on the cut.
*/
#ifndef LAMP_PLUGIN_OPTIM_PIECES_H
#define LAMP_PLUGIN_OPTIM_PIECES_H

#include <stddef.h>

#include "lamp/optim.h"

/* Elements below which a piece is not worth a thread's hand-off (a few microseconds of update). */
#define LAMP_OPTIM_PIECE_MIN 16384

/* The pieces a step over n elements is cut into on `threads` threads: 1 where cutting does not pay. */
size_t lamp_optim_piece_count(size_t n, size_t threads);

/* The segments segs[0 .. n_segs) cut to the run [start, start + n) of the slab, their offsets
   counted from start, into out (room for n_segs); returns how many overlap it. */
size_t lamp_optim_cut_segments(const lamp_optim_segment *segs, size_t n_segs, size_t start, size_t n,
                               lamp_optim_segment *out);

/* Where the pieces' segments are cut into: pieces * n_segments entries, kept by the caller. */
typedef struct lamp_optim_piece_room {
  lamp_optim_segment *segments;
  size_t capacity; /* entries */
} lamp_optim_piece_room;

/* Room for `pieces` pieces of a step with n_segments segments; fails only out of memory. */
lamp_status lamp_optim_piece_room_fit(lamp_optim_piece_room *room, size_t pieces, size_t n_segments);

typedef lamp_status (*lamp_optim_step_fn)(void *state, const lamp_optim_step *step);

/*
** step_fn(state, piece) for each of `pieces` pieces of `whole` (a checked step over host memory,
** n_slots state slots), on the host's threads: each piece's params, grads, slots and weights_out
** at its first element, its segments cut from whole's, no tensor table. Piece boundaries are
** multiples of 16 elements (64-byte aligned in fp32). room must fit them
** (lamp_optim_piece_room_fit). Returns the first failing piece's status; the plugin's message is
** on its context.
*/
lamp_status lamp_optim_step_pieces(lamp_optim_step_fn step_fn, void *state, const lamp_optim_step *whole,
                                   uint32_t n_slots, size_t pieces, const lamp_optim_piece_room *room);

#endif
