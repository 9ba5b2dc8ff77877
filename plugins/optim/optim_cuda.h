/*
** Inside the optimizer plugins' CUDA steps (C++, nvcc): the device side of a plugin object and
** what every step's launch shares. The C side sees only optim_step.h.
*/
#ifndef LAMP_OPTIM_CUDA_H
#define LAMP_OPTIM_CUDA_H

#include <cuda_runtime.h>

#include "optim_step.h"

/* Elements one block updates: 256 threads, each taking every 256th element of a contiguous
   chunk, so loads coalesce and a thread meets few segment boundaries. */
#define LAMP_OPTIM_THREADS 256
#define LAMP_OPTIM_ITEMS 8
#define LAMP_OPTIM_CHUNK (LAMP_OPTIM_THREADS * LAMP_OPTIM_ITEMS)

/*
** Binds the object to the run's device (first time), uploads the segment table where it changed
** since the last step (on the step's stream, from a host copy the plugin keeps), and sets
** *table to the device table and *grid to the blocks covering the slab.
*/
lamp_status lamp_optim_cuda_prepare(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                    const lamp_optim_step *st,
                                    const lamp_optim_segment **table, unsigned *grid);

/* After a launch: LAMP_OK, or the launch's error named ("sgd step: <CUDA's message>"). */
lamp_status lamp_optim_cuda_launched(const lamp_host *h, lamp_ctx *ctx, const char *what);

/*
** The segment holding element i: the first whose end lies past i (ends never decrease, and an
** empty segment ends where it starts, so it is never the answer).
*/
static __device__ __forceinline__ size_t lamp_optim_find_segment(
    const lamp_optim_segment *__restrict__ seg, size_t n_seg, size_t i) {
  size_t lo = 0, hi = n_seg;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (seg[mid].offset + seg[mid].count > i)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

#endif
