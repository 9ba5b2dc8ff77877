/*
** sgd's CUDA step: one launch over the whole slab on the core's stream, the per-element update of
** sgd_update.h (the CPU step's own code, built with --fmad=false so the bits agree), the
** segment's scalars from the device table and the step's ones from the arguments, and the 16-bit
** weights written in the same pass.
*/
#include "optim_cuda.h"

/* Each thread walks its elements of the block's chunk upwards, so it finds its first segment by
   search and the later ones by stepping past the ends it crosses. */
static __global__ void __launch_bounds__(LAMP_OPTIM_THREADS)
    sgd_kernel(float *__restrict__ p, const float *__restrict__ grad, float *__restrict__ buf,
               uint16_t *__restrict__ out, int out_bf16, size_t n,
               const lamp_optim_segment *__restrict__ seg, size_t n_seg, lamp_sgd_scalars s,
               unsigned step_flags) {
  const size_t start = (size_t)blockIdx.x * LAMP_OPTIM_CHUNK + threadIdx.x;
  const size_t end = min((size_t)(blockIdx.x + 1) * LAMP_OPTIM_CHUNK, n);
  if (start >= end) return;
  size_t k = lamp_optim_find_segment(seg, n_seg, start);
  size_t seg_end = 0;
  lamp_sgd_coeffs c;
  unsigned flags = step_flags;
  for (size_t i = start; i < end; i += LAMP_OPTIM_THREADS) {
    if (i >= seg_end) {
      while (seg[k].offset + seg[k].count <= i) k++;
      seg_end = seg[k].offset + seg[k].count;
      flags = step_flags;
      c = lamp_sgd_segment(&s, seg[k].lr_mult, seg[k].decay_mult, &flags);
    }
    lamp_sgd_update(p, grad, buf, i, c, flags);
    if (out != NULL) out[i] = out_bf16 ? lamp_optim_to_bf16(p[i]) : lamp_optim_to_f16(p[i]);
  }
}

extern "C" lamp_status lamp_sgd_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                          const lamp_optim_step *st, const lamp_sgd_scalars *s,
                                          unsigned flags) {
  if (st->n == 0) return LAMP_OK;
  const lamp_optim_segment *table;
  unsigned grid;
  lamp_status status = lamp_optim_cuda_prepare(cu, h, ctx, st, &table, &grid);
  if (status != LAMP_OK) return status;
  uint16_t *out = lamp_optim_weights_out(st);
  float *buf = (flags & LAMP_SGD_MOMENTUM) ? st->slots[0] : NULL;
  sgd_kernel<<<grid, LAMP_OPTIM_THREADS, 0, (cudaStream_t)lamp_optim_stream(st)>>>(
      st->params, st->grads, buf, out, out != NULL && st->weights_out_dtype == LAMP_BF16, st->n,
      table, st->n_segments, *s, flags);
  return lamp_optim_cuda_launched(h, ctx, "sgd step");
}
