/*
** sgd's CUDA step: one launch over the whole slab on the core's stream. Each thread runs
** lamp_sgd_thread (sgd_update.h): the CPU step's own per-element code, built with --fmad=false so
** the bits agree, the segment's scalars from the device table, the step's from the arguments,
** and the 16-bit weights written in the same pass.
*/
#include "optim_cuda.h"

static __global__ void __launch_bounds__(LAMP_OPTIM_THREADS)
    sgd_kernel(lamp_sgd_slabs a, lamp_sgd_scalars s, unsigned flags) {
  lamp_sgd_thread(&a, &s, flags, blockIdx.x, threadIdx.x);
}

extern "C" lamp_status lamp_sgd_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                          const lamp_optim_step *st, const lamp_sgd_scalars *s,
                                          unsigned flags) {
  if (st->n == 0) return LAMP_OK;
  lamp_sgd_slabs a;
  unsigned grid;
  lamp_status status = lamp_optim_cuda_prepare(cu, h, ctx, st, &a.seg, &grid);
  if (status != LAMP_OK) return status;
  a.p = st->params;
  a.grad = st->grads;
  a.buf = (flags & LAMP_SGD_MOMENTUM) ? st->slots[0] : NULL;
  a.out = lamp_optim_weights_out(st);
  a.out_bf16 = a.out != NULL && st->weights_out_dtype == LAMP_BF16;
  a.n = st->n;
  a.n_seg = st->n_segments;
  sgd_kernel<<<grid, LAMP_OPTIM_THREADS, 0, (cudaStream_t)lamp_optim_stream(st)>>>(a, *s, flags);
  return lamp_optim_cuda_launched(h, ctx, "sgd step");
}
