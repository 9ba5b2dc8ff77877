/*
** adam's and adamw's CUDA step: one launch over the whole slab on the core's stream. Each thread
** runs lamp_adam_thread (adam_update.h): the CPU step's own per-element code, built with
** --fmad=false so the bits agree, the segment's scalars from the device table, the step's
** (bias corrections in double, from the host) from the arguments, and the 16-bit weights written
** in the same pass.
*/
#include "optim_cuda.h"

/* ADAMW picks the decay (decoupled or L2) at compile time, as LAMP_ADAMW does on the CPU. */
template <int ADAMW>
static __global__ void __launch_bounds__(LAMP_OPTIM_THREADS)
    adam_kernel(lamp_adam_slabs a, lamp_adam_scalars s, unsigned flags) {
  lamp_adam_thread(&a, &s, flags, blockIdx.x, threadIdx.x, ADAMW);
}

extern "C" lamp_status lamp_adam_cuda_step(lamp_optim_cuda *cu, const lamp_host *h,
                                           lamp_ctx *ctx, const lamp_optim_step *st,
                                           const lamp_adam_scalars *s, unsigned flags) {
  if (st->n == 0) return LAMP_OK;
  lamp_adam_slabs a;
  unsigned grid;
  lamp_status status = lamp_optim_cuda_prepare(cu, h, ctx, st, &a.seg, &grid);
  if (status != LAMP_OK) return status;
  a.p = st->params;
  a.grad = st->grads;
  a.m = st->slots[0];
  a.v = st->slots[1];
  a.vmax = (flags & LAMP_ADAM_AMSGRAD) ? st->slots[2] : NULL;
  a.out = lamp_optim_weights_out(st);
  a.out_bf16 = a.out != NULL && st->weights_out_dtype == LAMP_BF16;
  a.n = st->n;
  a.n_seg = st->n_segments;
  cudaStream_t stream = (cudaStream_t)lamp_optim_stream(st);
  if (s->adamw)
    adam_kernel<1><<<grid, LAMP_OPTIM_THREADS, 0, stream>>>(a, *s, flags);
  else
    adam_kernel<0><<<grid, LAMP_OPTIM_THREADS, 0, stream>>>(a, *s, flags);
  return lamp_optim_cuda_launched(h, ctx, s->adamw ? "adamw step" : "adam step");
}
