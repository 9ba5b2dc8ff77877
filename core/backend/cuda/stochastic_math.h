/*
** Stochastic rounding's per-element math for the CUDA kernel (round_stochastic.cu), written once
** for the device and the host like elementwise_math.h: Philox4x32-10 and the roundings of
** core/tensor/philox.h and core/tensor/stochastic_round.h, in integer operations only, so the
** answer is the CPU's whatever the floating-point environment. tests/unit/test_cuda_math.c
** compiles this header on the CPU and checks it bit for bit against the CPU's functions.
*/
#ifndef LAMP_BACKEND_CUDA_STOCHASTIC_MATH_H
#define LAMP_BACKEND_CUDA_STOCHASTIC_MATH_H

#include "backend/cuda/elementwise_math.h"

/* One Philox4x32-10 block: the four words for counter (c[0] .. c[3]) under key (k0, k1). */
LAMP_EM_FN void lamp_em_philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
#ifdef __CUDA_ARCH__
    uint32_t hi0 = __umulhi(c[0], 0xD2511F53u), lo0 = c[0] * 0xD2511F53u;
    uint32_t hi1 = __umulhi(c[2], 0xCD9E8D57u), lo1 = c[2] * 0xCD9E8D57u;
#else
    uint64_t p0 = (uint64_t)c[0] * 0xD2511F53u, p1 = (uint64_t)c[2] * 0xCD9E8D57u;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
#endif
    uint32_t next0 = hi1 ^ c[1] ^ k0, next2 = hi0 ^ c[3] ^ k1;
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/*
** The four words of counter `block` of a stream: those of elements g * 64 + w * 16 + b for w < 4,
** where g = block / 16 and b = block % 16 (philox.h's layout).
*/
LAMP_EM_FN void lamp_em_philox_block(uint32_t words[4], uint64_t seed, uint64_t stream, uint64_t block) {
  words[0] = (uint32_t)block;
  words[1] = (uint32_t)(block >> 32);
  words[2] = (uint32_t)stream;
  words[3] = (uint32_t)(stream >> 32);
  lamp_em_philox(words, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Element `index` of counter `block` and word `w`: the inverse of the layout above. */
LAMP_EM_FN uint64_t lamp_em_philox_element(uint64_t block, int w) {
  return block / 16u * 64u + (uint64_t)w * 16u + block % 16u;
}

/* fp32 -> bf16 stochastically: the dropped 16 bits plus r's low 16; to nearest beyond the largest
   finite bf16 (0x7f7f0000 as fp32), which keeps NaN, inf and the overflow range as they were. */
LAMP_EM_FN uint16_t lamp_em_f32_to_bf16_sr(float x, uint32_t r) {
  uint32_t bits = lamp_em_bits(x);
  if ((bits & LAMP_EM_ABS) > 0x7f7f0000u) return lamp_em_f32_to_bf16(x);
  return (uint16_t)((bits + (r & 0xffffu)) >> 16);
}

/*
** fp32 -> fp16 stochastically: normals drop 13 bits (r's low 13 decide); subnormals drop
** 126 - exponent bits, up to 32 of them meeting as many bits of r, beyond that the dropped
** fraction's first 32 bits meeting all of r; below 2^-126 the result is a signed 0; to nearest
** beyond the largest finite fp16 (65504, 0x477fe000 as fp32).
*/
LAMP_EM_FN uint16_t lamp_em_f32_to_f16_sr(float x, uint32_t r) {
  uint32_t bits = lamp_em_bits(x), a = bits & LAMP_EM_ABS;
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  if (a > 0x477fe000u) return lamp_em_f32_to_f16(x);
  if (a >= 0x38800000u) return (uint16_t)(sign | ((a - 0x38000000u + (r & 0x1fffu)) >> 13));
  if (a < 0x00800000u) return sign;
  uint32_t shift = 126u - (a >> 23), significand = (a & 0x7fffffu) | 0x800000u, units;
  if (shift <= 32u) {
    uint64_t mask = ((uint64_t)1 << shift) - 1u;
    units = (uint32_t)(((uint64_t)significand + (r & mask)) >> shift);
  } else {
    uint32_t fraction = shift - 32u < 24u ? significand >> (shift - 32u) : 0u;
    units = (uint32_t)(((uint64_t)fraction + r) >> 32);
  }
  return (uint16_t)(sign | units);
}

/* Either dtype (f16 or bf16). */
LAMP_EM_FN uint16_t lamp_em_round_sr(float x, uint32_t r, lamp_dtype dtype) {
  return dtype == LAMP_F16 ? lamp_em_f32_to_f16_sr(x, r) : lamp_em_f32_to_bf16_sr(x, r);
}

#endif
