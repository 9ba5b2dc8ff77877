/*
** Scratch: device memory that several layers take their intermediate tensors from in turn. A
** model keeps one and hands it to every nn.Recompute through lamp_exec; each Recompute rewinds it
** before its forward and before its backward, so the intermediates of one wrapped module live
** only until the next Recompute runs, and all of them share one set of buffers (charged to the
** ledger as activations).
**
** Memory comes in chunks, each one allocation, kept until the scratch is freed. A pass (the
** takes since the last rewind) places each tensor in the first gap, chunk by chunk, that holds
** it, and allocates a chunk of its size when none does; a tensor given back leaves a gap. The
** same takes and give-backs after a rewind therefore land where they landed before: once the
** largest pass has run, nothing is allocated again and the tensors keep their addresses (what a
** recorded CUDA graph needs).
*/
#ifndef LAMP_NN_SCRATCH_H
#define LAMP_NN_SCRATCH_H

#include "tensor/tensor.h"

typedef struct lamp_scratch lamp_scratch;

lamp_status lamp_scratch_new(lamp_scratch **out);
void lamp_scratch_free(lamp_scratch *scratch); /* NULL is a no-op; tensors taken keep their chunk alive */

/* Starts a pass: every tensor taken since the last rewind may be overwritten from now on. */
void lamp_scratch_rewind(lamp_scratch *scratch);

/* Rewinds so far: unchanged since a pass began, its tensors are still as it left them. */
uint64_t lamp_scratch_rewinds(const lamp_scratch *scratch);

/*
** Makes *t a contiguous tensor of this dtype and shape in the scratch, the next place of the
** pass (*t is kept when it is already that tensor, released and replaced otherwise).
*/
lamp_status lamp_scratch_take(lamp_scratch *scratch, lamp_tensor **t, lamp_dtype dtype, lamp_device device, int ndim,
                              const int64_t *shape);

/* t's place is free again (the tensor itself stays, to be overwritten); a tensor that is not in
   the scratch's current pass (NULL, or a layer's own) is left alone. */
void lamp_scratch_give_back(lamp_scratch *scratch, const lamp_tensor *t);

#endif
