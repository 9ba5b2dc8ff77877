/*
** sgd's per-element update and per-segment scalars, one definition for the C step (sgd.c) and
** the CUDA step (sgd_cuda.cu): the device result is the host's bit for bit because both run this
** code, in fp32 for the elements and in double for the scalars, without contraction into fused
** multiply-adds (C11 mode on the host, --fmad=false on the device). See sgd.c for the math.
*/
#ifndef LAMP_SGD_UPDATE_H
#define LAMP_SGD_UPDATE_H

#include "optim_kernel.h"

/* The scalars of one segment's update. */
typedef struct lamp_sgd_coeffs {
  float grad_scale, weight_decay, lr, momentum, damp_keep; /* damp_keep = 1 - dampening */
} lamp_sgd_coeffs;

/* What a step's configuration switches on; DECAY is per segment. */
enum { LAMP_SGD_DECAY = 1, LAMP_SGD_MOMENTUM = 2, LAMP_SGD_FIRST = 4, LAMP_SGD_NESTEROV = 8 };

/* The step's scalars every segment shares. */
typedef struct lamp_sgd_scalars {
  double lr, grad_scale, weight_decay;
  float momentum, damp_keep;
} lamp_sgd_scalars;

/* One segment's scalars, rounded to fp32 once as PyTorch rounds its Python numbers; *flags
   gains DECAY when the segment decays. */
LAMP_OPTIM_FN lamp_sgd_coeffs lamp_sgd_segment(const lamp_sgd_scalars *s, float lr_mult,
                                               float decay_mult, unsigned *flags) {
  lamp_sgd_coeffs c;
  c.grad_scale = (float)s->grad_scale;
  c.weight_decay = (float)(s->weight_decay * decay_mult);
  c.lr = (float)(s->lr * lr_mult);
  c.momentum = s->momentum;
  c.damp_keep = s->damp_keep;
  if (c.weight_decay != 0.0f) *flags |= LAMP_SGD_DECAY;
  return c;
}

/* Element j; buf may be NULL without MOMENTUM. */
LAMP_OPTIM_FN void lamp_sgd_update(float *LAMP_RESTRICT p, const float *LAMP_RESTRICT grad,
                                   float *LAMP_RESTRICT buf, size_t j, const lamp_sgd_coeffs c,
                                   const unsigned flags) {
  float g = grad[j] * c.grad_scale;
  if (flags & LAMP_SGD_DECAY) g += c.weight_decay * p[j];
  if (flags & LAMP_SGD_MOMENTUM) {
    const float b = (flags & LAMP_SGD_FIRST) ? g : c.momentum * buf[j] + c.damp_keep * g;
    buf[j] = b;
    g = (flags & LAMP_SGD_NESTEROV) ? g + c.momentum * b : b;
  }
  p[j] -= c.lr * g;
}

/* The flags a step sets, before the segment's DECAY. */
LAMP_OPTIM_FN unsigned lamp_sgd_step_flags(float momentum, int nesterov, uint64_t step) {
  if (momentum == 0.0f) return 0;
  return (unsigned)LAMP_SGD_MOMENTUM | (step == 1 ? (unsigned)LAMP_SGD_FIRST : 0u) |
         (nesterov ? (unsigned)LAMP_SGD_NESTEROV : 0u);
}

/* The slabs of one CUDA step: device memory; buf NULL without momentum, out without weights_out. */
typedef struct lamp_sgd_slabs {
  float *p;
  const float *grad;
  float *buf;
  uint16_t *out;
  int out_bf16;
  size_t n;
  const lamp_optim_segment *seg; /* the device table */
  size_t n_seg;
} lamp_sgd_slabs;

/*
** What thread `thread` of block `block` does in the CUDA step (sgd_cuda.cu): its elements of the
** block's chunk, upwards, finding its first segment by search and the later ones by stepping
** past the ends it crosses, with the 16-bit weight written right after each update.
*/
LAMP_OPTIM_FN void lamp_sgd_thread(const lamp_sgd_slabs *a, const lamp_sgd_scalars *s,
                                   unsigned step_flags, size_t block, size_t thread) {
  const size_t end = lamp_optim_chunk_end(block, a->n);
  size_t i = block * LAMP_OPTIM_CHUNK + thread;
  if (i >= end) return;
  size_t k = lamp_optim_find_segment(a->seg, a->n_seg, i), seg_end = 0;
  lamp_sgd_coeffs c = {0, 0, 0, 0, 0};
  unsigned flags = step_flags;
  for (; i < end; i += LAMP_OPTIM_THREADS) {
    if (i >= seg_end) {
      while (a->seg[k].offset + a->seg[k].count <= i) k++;
      seg_end = a->seg[k].offset + a->seg[k].count;
      flags = step_flags;
      c = lamp_sgd_segment(s, a->seg[k].lr_mult, a->seg[k].decay_mult, &flags);
    }
    lamp_sgd_update(a->p, a->grad, a->buf, i, c, flags);
    if (a->out != NULL)
      a->out[i] = a->out_bf16 ? lamp_optim_to_bf16(a->p[i]) : lamp_optim_to_f16(a->p[i]);
  }
}

#endif
