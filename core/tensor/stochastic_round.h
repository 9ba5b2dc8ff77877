/*
** Stochastic rounding of fp32 into fp16 and bf16. A value x between two neighbouring 16-bit
** values lo < x < hi becomes hi with probability (x - lo) / (hi - lo) and lo otherwise, so that
** the rounding is unbiased (the mean of many roundings of x is x): an update far smaller than
** the 16-bit spacing is kept on average instead of always rounded away, as rounding to nearest
** does to weights stored in 16 bits without fp32 masters.
**
** The draw is a 32-bit random word r per element: |x| rounds up (away from zero) exactly when the
** bits below the 16-bit precision plus as many low bits of r carry into the kept ones, so r = 0
** truncates toward zero and r = 2^32 - 1 rounds every inexact value away from it. The probability
** is exact in those bits: 16 for bf16, 13 for fp16 normals, up to 32 for fp16 subnormals (a value
** below 2^-33 has its probability truncated to a multiple of 2^-32; an fp32 subnormal, below
** 2^-126, becomes 0). Values a 16-bit format holds exactly are returned unchanged, whatever r.
** Beyond the largest finite 16-bit value (inf, NaN, and the overflow range) the result is the
** round-to-nearest one of tensor/half.h: NaN stays NaN, and nothing rounds up to inf that
** rounding to nearest would have kept finite.
*/
#ifndef LAMP_TENSOR_STOCHASTIC_ROUND_H
#define LAMP_TENSOR_STOCHASTIC_ROUND_H

#include <stddef.h>
#include <stdint.h>

/* One value with the random word r. */
uint16_t lamp_f32_to_bf16_sr(float x, uint32_t r);
uint16_t lamp_f32_to_f16_sr(float x, uint32_t r);

/*
** dst[i] = src[i] rounded with the word lamp_philox_word(seed, stream, first + i) (tensor/
** philox.h): element first + i of one stream, whatever part of the array a call covers, so a
** split across threads, or a device that walks the array otherwise, draws the same bits.
*/
void lamp_f32_to_bf16_sr_n(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t stream, uint64_t first);
void lamp_f32_to_f16_sr_n(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t stream, uint64_t first);

#endif
