/*
** adam's and adamw's per-element update and per-segment scalars, one definition for the C step
** (adam.c) and the CUDA step (adam_cuda.cu): the device result is the host's bit for bit because
** both run this code, in fp32 for the elements and in double for the scalars, without contraction
** into fused multiply-adds (C11 mode on the host, --fmad=false on the device), with IEEE sqrt and
** division on both. The step's bias corrections (pow) are the host's, passed in. See adam.c for
** the math.
*/
#ifndef LAMP_ADAM_UPDATE_H
#define LAMP_ADAM_UPDATE_H

#include "optim_kernel.h"

#if defined(__CUDA_ARCH__)
#define LAMP_OPTIM_SQRTF(x) __fsqrt_rn(x)
#else
#include <math.h>
#define LAMP_OPTIM_SQRTF(x) sqrtf(x)
#endif

/* The scalars of one segment's update, each rounded to fp32 as PyTorch rounds it. */
typedef struct lamp_adam_coeffs {
  float grad_scale;
  float decay; /* adam: weight_decay; adamw: 1 - lr * weight_decay */
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bc2_sqrt; /* sqrt(1 - beta2^t) */
  float eps;
  float neg_step_size; /* -lr / (1 - beta1^t) */
} lamp_adam_coeffs;

/* DECAY is per segment, the others per step. */
enum { LAMP_ADAM_DECAY = 1, LAMP_ADAM_AMSGRAD = 2, LAMP_ADAM_UNIT_BC2 = 4 };

/* The step's scalars every segment shares: the options, the scheduled lr and the bias
   corrections, in double (bc2_sqrt already rounded). */
typedef struct lamp_adam_scalars {
  double lr, grad_scale, beta1, beta2, eps, weight_decay;
  double bc1;     /* 1 - beta1^t */
  float bc2_sqrt; /* (float)sqrt(1 - beta2^t) */
  int adamw;
} lamp_adam_scalars;

/* One segment's scalars; *flags gains DECAY when the segment decays. */
LAMP_OPTIM_FN lamp_adam_coeffs lamp_adam_segment(const lamp_adam_scalars *s, float lr_mult,
                                                 float decay_mult, unsigned *flags) {
  const double lr = s->lr * lr_mult;
  const double wd = s->weight_decay * decay_mult;
  lamp_adam_coeffs c;
  c.grad_scale = (float)s->grad_scale;
  c.decay = s->adamw ? (float)(1.0 - lr * wd) : (float)wd;
  c.beta1 = (float)s->beta1;
  c.one_minus_beta1 = (float)(1.0 - s->beta1);
  c.beta2 = (float)s->beta2;
  c.one_minus_beta2 = (float)(1.0 - s->beta2);
  c.bc2_sqrt = s->bc2_sqrt;
  c.eps = (float)s->eps;
  c.neg_step_size = (float)-(lr / s->bc1);
  if (wd != 0.0) *flags |= LAMP_ADAM_DECAY;
  return c;
}

/* torch.maximum: NaN in either operand gives NaN. */
LAMP_OPTIM_FN float lamp_adam_nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

/* Element j; vmax may be NULL without AMSGRAD. `adamw` is a constant in every caller. */
LAMP_OPTIM_FN void lamp_adam_update(float *LAMP_RESTRICT p, const float *LAMP_RESTRICT grad,
                                    float *LAMP_RESTRICT m, float *LAMP_RESTRICT v,
                                    float *LAMP_RESTRICT vmax, size_t j, const lamp_adam_coeffs c,
                                    const unsigned flags, const int adamw) {
  float g = grad[j] * c.grad_scale;
  float pj = p[j];
  if (flags & LAMP_ADAM_DECAY) {
    if (adamw)
      pj = pj * c.decay;
    else
      g = g + c.decay * pj;
  }
  const float mj = m[j] * c.beta1 + c.one_minus_beta1 * g;
  const float vj = v[j] * c.beta2 + c.one_minus_beta2 * g * g;
  m[j] = mj;
  v[j] = vj;
  float vhat = vj;
  if (flags & LAMP_ADAM_AMSGRAD) vmax[j] = vhat = lamp_adam_nan_max(vmax[j], vj);
  /* x / 1 == x exactly: late in training bc2 rounds to 1 and the division goes away. */
  const float root = (flags & LAMP_ADAM_UNIT_BC2) ? LAMP_OPTIM_SQRTF(vhat)
                                                  : LAMP_OPTIM_SQRTF(vhat) / c.bc2_sqrt;
  p[j] = pj + c.neg_step_size * mj / (root + c.eps);
}

#if !defined(__CUDACC__)
/* The step's scalars, on the host: the bias corrections in double, once per step, as PyTorch's
   Python-side scalars are. */
static inline lamp_adam_scalars lamp_adam_step_scalars(double beta1, double beta2, double eps,
                                                       double weight_decay, int adamw,
                                                       uint64_t step, double lr,
                                                       double grad_scale) {
  const double t = (double)step;
  lamp_adam_scalars s;
  s.lr = lr;
  s.grad_scale = grad_scale;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.bc1 = 1.0 - pow(beta1, t);
  s.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
  s.adamw = adamw;
  return s;
}
#endif

/* The flags a step sets, before the segment's DECAY. */
LAMP_OPTIM_FN unsigned lamp_adam_step_flags(const lamp_adam_scalars *s, int amsgrad) {
  return (amsgrad ? (unsigned)LAMP_ADAM_AMSGRAD : 0u) |
         (s->bc2_sqrt == 1.0f ? (unsigned)LAMP_ADAM_UNIT_BC2 : 0u);
}

/* The slabs of one CUDA step: device memory; vmax NULL without amsgrad, out without
   weights_out. */
typedef struct lamp_adam_slabs {
  float *p;
  const float *grad;
  float *m, *v, *vmax;
  uint16_t *out;
  int out_bf16;
  size_t n;
  const lamp_optim_segment *seg; /* the device table */
  size_t n_seg;
} lamp_adam_slabs;

/* What thread `thread` of block `block` does in the CUDA step (adam_cuda.cu), as
   lamp_sgd_thread; `adamw` is a constant in every caller. */
LAMP_OPTIM_FN void lamp_adam_thread(const lamp_adam_slabs *a, const lamp_adam_scalars *s,
                                    unsigned step_flags, size_t block, size_t thread,
                                    const int adamw) {
  const size_t end = lamp_optim_chunk_end(block, a->n);
  size_t i = block * LAMP_OPTIM_CHUNK + thread;
  if (i >= end) return;
  size_t k = lamp_optim_find_segment(a->seg, a->n_seg, i), seg_end = 0;
  lamp_adam_coeffs c = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  unsigned flags = step_flags;
  for (; i < end; i += LAMP_OPTIM_THREADS) {
    if (i >= seg_end) {
      while (a->seg[k].offset + a->seg[k].count <= i) k++;
      seg_end = a->seg[k].offset + a->seg[k].count;
      flags = step_flags;
      c = lamp_adam_segment(s, a->seg[k].lr_mult, a->seg[k].decay_mult, &flags);
    }
    lamp_adam_update(a->p, a->grad, a->m, a->v, a->vmax, i, c, flags, adamw);
    if (a->out != NULL)
      a->out[i] = a->out_bf16 ? lamp_optim_to_bf16(a->p[i]) : lamp_optim_to_f16(a->p[i]);
  }
}

#endif
