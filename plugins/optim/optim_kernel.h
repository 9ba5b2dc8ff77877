/*
** What every optimizer's per-element code shares, compiled for the host (the plugins' C steps)
** and for the device (their CUDA steps, nvcc --fmad=false): the function qualifier and the
** rounding of an updated fp32 weight into its 16-bit copy (weights_out, ABI 1.2), and how the
** CUDA steps split the slab among threads.
**
** The rounding is integer work on the bit patterns, exactly as the core's scalar conversions
** (core/tensor/half.c, the reference its F16C path matches): to nearest, ties to even; a NaN
** stays a quiet NaN with its sign and top payload bits; beyond the largest finite value, inf.
** It does not depend on the floating-point environment, so host and device agree by
** construction. tests/unit/test_optim_kernel.c checks it against the core's.
*/
#ifndef LAMP_OPTIM_KERNEL_H
#define LAMP_OPTIM_KERNEL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lamp/optim.h"

#if defined(__CUDACC__)
#define LAMP_OPTIM_FN static __host__ __device__ __forceinline__
#define LAMP_RESTRICT __restrict__
#else
#define LAMP_OPTIM_FN static inline __attribute__((always_inline))
#define LAMP_RESTRICT restrict
#endif

LAMP_OPTIM_FN uint32_t lamp_optim_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

/* value >> shift (1..31), to nearest, ties to even. */
LAMP_OPTIM_FN uint32_t lamp_optim_shift_round(uint32_t value, unsigned shift) {
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rest = value & ((half << 1) - 1);
  uint32_t kept = value >> shift;
  if (rest > half || (rest == half && (kept & 1u))) kept++;
  return kept;
}

LAMP_OPTIM_FN uint16_t lamp_optim_to_f16(float x) {
  const uint32_t bits = lamp_optim_float_bits(x);
  const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up: inf */
  if (a >= 0x38800000u) /* normal: rebias the exponent, drop 13 mantissa bits */
    return (uint16_t)(sign | lamp_optim_shift_round(a - 0x38000000u, 13));
  if (a <= 0x33000000u) return sign; /* up to half the smallest subnormal: zero */
  /* subnormal, in units of 2^-24 */
  const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | lamp_optim_shift_round(mantissa, 126u - (a >> 23)));
}

/* Branch-free: a NaN is truncated and made quiet, anything else rounds (a carry is correct).
   Signed compares and an arithmetic final shift, whose low 16 bits are the same, let the host
   loop vectorise with SSE2's signed pack. */
LAMP_OPTIM_FN uint16_t lamp_optim_to_bf16(float x) {
  const uint32_t bits = lamp_optim_float_bits(x);
  const uint32_t nan_mask = (int32_t)(bits & 0x7fffffffu) > (int32_t)0x7f800000u ? 0xffffffffu : 0u;
  const uint32_t round_up = (0x7fffu + ((bits >> 16) & 1u)) & ~nan_mask;
  const uint32_t quieted = bits | (0x00400000u & nan_mask);
  return (uint16_t)((int32_t)(quieted + round_up) >> 16);
}

/* out[i] = round(p[i]) for i in [0, n): the 16-bit weights the core would otherwise convert from
   the updated fp32 slab. `is_bf16` selects bf16, else fp16 (the caller checked the dtype). */
LAMP_OPTIM_FN void lamp_optim_round_out(uint16_t *LAMP_RESTRICT out, const float *LAMP_RESTRICT p,
                                        size_t n, int is_bf16) {
  if (is_bf16)
    for (size_t i = 0; i < n; i++) out[i] = lamp_optim_to_bf16(p[i]);
  else
    for (size_t i = 0; i < n; i++) out[i] = lamp_optim_to_f16(p[i]);
}

/*
** The CUDA steps' split of the slab: block b updates the contiguous chunk [b * CHUNK, (b + 1) *
** CHUNK), its thread t the elements t, t + THREADS, ... of it, so loads coalesce and a thread
** meets few segment boundaries. Each optimizer's per-thread function (lamp_sgd_thread,
** lamp_adam_thread) is what its kernel runs; the unit tests run it on the host for every block
** and thread.
*/
#define LAMP_OPTIM_THREADS 256
#define LAMP_OPTIM_ITEMS 8
#define LAMP_OPTIM_CHUNK ((size_t)LAMP_OPTIM_THREADS * LAMP_OPTIM_ITEMS)

/* The segment holding element i: the first whose end lies past i (ends never decrease, and an
   empty segment ends where it starts, so it is never the answer). */
LAMP_OPTIM_FN size_t lamp_optim_find_segment(const lamp_optim_segment *seg, size_t n_seg,
                                             size_t i) {
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

/* The first element of thread t of block b, and the end of the block's chunk; 0 elements for
   the thread when first >= end. */
LAMP_OPTIM_FN size_t lamp_optim_chunk_end(size_t block, size_t n) {
  const size_t end = (block + 1) * LAMP_OPTIM_CHUNK;
  return end < n ? end : n;
}

#endif
