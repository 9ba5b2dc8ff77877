/*
** fp16 (IEEE binary16) and bf16 conversions. float -> 16-bit rounds to nearest, ties to even;
** NaN stays NaN (quiet, sign kept); values beyond the largest finite 16-bit value become
** ±inf; subnormals are produced and read exactly. 16-bit -> float is exact for every number;
** an fp16 signalling NaN comes back quiet (as F16C does), a bf16 NaN keeps its bits.
*/
#ifndef LAMP_TENSOR_HALF_H
#define LAMP_TENSOR_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t lamp_f32_to_f16(float x);

/*
** The largest float that rounds to +0 in a 16-bit format: 2^-25 for fp16 (half its smallest
** subnormal, a tie that goes to the even 0), 2^-134 for bf16. A positive v is stored as a
** positive value exactly when v exceeds it (a ReLU's mask from an output before rounding).
*/
#define LAMP_F16_ZERO_BOUND 0x1p-25f
#define LAMP_BF16_ZERO_BOUND 0x1p-134f

float lamp_f16_to_f32(uint16_t h);
uint16_t lamp_f32_to_bf16(float x);
float lamp_bf16_to_f32(uint16_t h);

/* Bulk forms (vectorised with F16C where the CPU has it; identical results either way). */
void lamp_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
void lamp_f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void lamp_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void lamp_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/*
** Rounding through a 16-bit format without leaving fp32 storage, in registers (no 16-bit
** intermediate array): dst[i] = widen(round(src[i])), and the accumulating form
** dst[i] += widen(round(src[i])). Results equal the conversions above bit for bit; dst may
** equal src in the first form.
*/
void lamp_round_f16_n(float *dst, const float *src, size_t n);
void lamp_round_bf16_n(float *dst, const float *src, size_t n);
void lamp_add_rounded_f16_n(float *dst, const float *src, size_t n);
void lamp_add_rounded_bf16_n(float *dst, const float *src, size_t n);

#endif
