/*
** 16 bf16 values in the lanes of an AVX-512 register, for kernels that compute on bf16 tensors
** without staging them through fp32 buffers. The same steps as lamp_bf16_to_f32 and
** lamp_f32_to_bf16 (tensor/half.h), lane by lane, so the same bits. Only for functions compiled
** with __attribute__((target("avx512f"))) and called where lamp_cpu_has(LAMP_ISA_AVX512F).
*/
#ifndef LAMP_TENSOR_HALF_AVX512_H
#define LAMP_TENSOR_HALF_AVX512_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Widening is exact: the 16 bits become the top half of the fp32 pattern. */
__attribute__((target("avx512f"))) static inline __m512 lamp_bf16x16_load(const uint16_t *src) {
  __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)src);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* fp32 patterns rounded to nearest even on the top 16 bits (low half zeroed); a NaN is quieted,
   its sign and payload top kept. */
__attribute__((target("avx512f"))) static inline __m512i lamp_bf16x16_round_bits(__m512i b) {
  __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  __m512i quieted = _mm512_or_si512(b, _mm512_set1_epi32(0x00400000));
  return _mm512_and_si512(_mm512_mask_mov_epi32(rounded, nan, quieted), _mm512_set1_epi32((int)0xffff0000u));
}

__attribute__((target("avx512f"))) static inline void lamp_bf16x16_store(uint16_t *dst, __m512 v) {
  __m512i r = lamp_bf16x16_round_bits(_mm512_castps_si512(v));
  _mm256_storeu_si256((__m256i *)(void *)dst, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}

/* The first n < 16 lanes, through a zero-padded block: a row's tail stays in vector code, which
   calls no scalar conversion with the upper register halves dirty. */
__attribute__((target("avx512f"))) static inline __m512 lamp_bf16x16_load_n(const uint16_t *src, size_t n) {
  uint16_t block[16] = {0};
  memcpy(block, src, n * sizeof *block);
  return lamp_bf16x16_load(block);
}

__attribute__((target("avx512f"))) static inline void lamp_bf16x16_store_n(uint16_t *dst, __m512 v, size_t n) {
  uint16_t block[16];
  lamp_bf16x16_store(block, v);
  memcpy(dst, block, n * sizeof *block);
}
#endif

#endif
