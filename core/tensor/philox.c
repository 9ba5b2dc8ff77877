/*
** Philox4x32-10. A round multiplies two of the four words by fixed odd constants, keeps both
** halves of each 64-bit product, and mixes them with the other two words and the key; the key
** is bumped by two Weyl constants between rounds. The group function computes sixteen counters
** at once, word by word, which is what the vector forms do lane by lane; all forms give the same
** bits (test_philox.c), and the scalar one also the published known answers.
*/
#include "tensor/philox.h"

#include <stddef.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LAMP_HAVE_X86 1
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

static inline void mulhilo(uint32_t a, uint32_t m, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * m;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

void lamp_philox4x32(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(c0, PHILOX_M0, &hi0, &lo0);
    mulhilo(c2, PHILOX_M1, &hi1, &lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint32_t lamp_philox_word(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t group = index / LAMP_PHILOX_GROUP, j = index % LAMP_PHILOX_GROUP;
  uint64_t block = group * LAMP_PHILOX_LANES + j % LAMP_PHILOX_LANES;
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
  uint32_t out[4];
  lamp_philox4x32(out, ctr, key);
  return out[j / LAMP_PHILOX_LANES];
}

static void group_scalar(uint32_t words[LAMP_PHILOX_GROUP], const uint32_t key[2], uint64_t stream, uint64_t group) {
  for (uint32_t b = 0; b < LAMP_PHILOX_LANES; b++) {
    uint64_t block = group * LAMP_PHILOX_LANES + b;
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t out[4];
    lamp_philox4x32(out, ctr, key);
    for (int w = 0; w < 4; w++) words[w * LAMP_PHILOX_LANES + b] = out[w];
  }
}

#ifdef LAMP_HAVE_X86
/*
** The vector forms: lane b holds counter group * 16 + b. A 32x32 -> 64 multiply exists only for
** the even lanes (mul_epu32); the odd lanes' products come from the words shifted down, and
** both halves of each product are blended back into their lanes. A group's sixteen counters start at a multiple of
** 16, so they never straddle a 2^32 boundary: they share their high counter word.
*/
__attribute__((target("avx512f"))) static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
  __m512i even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* CHAINS groups at once: one group's ten rounds are a chain of dependent multiplies, and
   independent chains side by side keep the multiplier busy while each waits for its products. */
#define CHAINS 4

__attribute__((target("avx512f"))) static void groups_avx512(uint32_t *words, const uint32_t key[2], uint64_t stream,
                                                             uint64_t group) {
  const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i c0[CHAINS], c1[CHAINS], c2[CHAINS], c3[CHAINS];
  for (int g = 0; g < CHAINS; g++) {
    uint64_t first = (group + (uint64_t)g) * LAMP_PHILOX_LANES;
    c0[g] = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)first), lanes);
    c1[g] = _mm512_set1_epi32((int)(uint32_t)(first >> 32));
    c2[g] = _mm512_set1_epi32((int)(uint32_t)stream);
    c3[g] = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
  }
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    const __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);
    for (int g = 0; g < CHAINS; g++) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo16(c0[g], m0, &hi0, &lo0);
      mulhilo16(c2[g], m1, &hi1, &lo1);
      c0[g] = _mm512_xor_si512(_mm512_xor_si512(hi1, c1[g]), key0);
      c1[g] = lo1;
      c2[g] = _mm512_xor_si512(_mm512_xor_si512(hi0, c3[g]), key1);
      c3[g] = lo0;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  for (int g = 0; g < CHAINS; g++) {
    uint32_t *at = words + g * LAMP_PHILOX_GROUP;
    _mm512_storeu_si512((void *)(at + 0), c0[g]);
    _mm512_storeu_si512((void *)(at + 16), c1[g]);
    _mm512_storeu_si512((void *)(at + 32), c2[g]);
    _mm512_storeu_si512((void *)(at + 48), c3[g]);
  }
  _mm256_zeroupper();
}

__attribute__((target("avx2"))) static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
  __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

/* The same with eight lanes: a group is two halves, the CHAINS groups 2 * CHAINS chains. */
__attribute__((target("avx2"))) static void groups_avx2(uint32_t *words, const uint32_t key[2], uint64_t stream,
                                                        uint64_t group) {
  const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i c0[2 * CHAINS], c1[2 * CHAINS], c2[2 * CHAINS], c3[2 * CHAINS];
  for (int h = 0; h < 2 * CHAINS; h++) {
    uint64_t first = group * LAMP_PHILOX_LANES + (uint64_t)h * 8;
    c0[h] = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)first), lanes);
    c1[h] = _mm256_set1_epi32((int)(uint32_t)(first >> 32));
    c2[h] = _mm256_set1_epi32((int)(uint32_t)stream);
    c3[h] = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
  }
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    const __m256i key0 = _mm256_set1_epi32((int)k0), key1 = _mm256_set1_epi32((int)k1);
    for (int h = 0; h < 2 * CHAINS; h++) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c0[h], m0, &hi0, &lo0);
      mulhilo8(c2[h], m1, &hi1, &lo1);
      c0[h] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[h]), key0);
      c1[h] = lo1;
      c2[h] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[h]), key1);
      c3[h] = lo0;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  for (int h = 0; h < 2 * CHAINS; h++) { /* half h: group h / 2, lanes (h % 2) * 8 .. + 7 */
    uint32_t *at = words + (h / 2) * LAMP_PHILOX_GROUP + (h % 2) * 8;
    _mm256_storeu_si256((__m256i *)(void *)(at + 0), c0[h]);
    _mm256_storeu_si256((__m256i *)(void *)(at + 16), c1[h]);
    _mm256_storeu_si256((__m256i *)(void *)(at + 32), c2[h]);
    _mm256_storeu_si256((__m256i *)(void *)(at + 48), c3[h]);
  }
  _mm256_zeroupper();
}
#endif

void lamp_philox_groups(uint32_t *words, size_t count, uint64_t seed, uint64_t stream, uint64_t group) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  size_t done = 0;
#ifdef LAMP_HAVE_X86
  int avx512 = lamp_cpu_has(LAMP_ISA_AVX512F), avx2 = lamp_cpu_has(LAMP_ISA_AVX2);
  for (; (avx512 || avx2) && done + CHAINS <= count; done += CHAINS) {
    if (avx512) groups_avx512(words + done * LAMP_PHILOX_GROUP, key, stream, group + done);
    else groups_avx2(words + done * LAMP_PHILOX_GROUP, key, stream, group + done);
  }
#endif
  for (; done < count; done++) group_scalar(words + done * LAMP_PHILOX_GROUP, key, stream, group + done);
}
