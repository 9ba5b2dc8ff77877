/*
** Stochastic rounding (stochastic_round.h), on the IEEE bit patterns. Within one sign, the fp32
** patterns of the values a 16-bit format holds are those whose dropped bits are zero, and the
** patterns are ordered as the values: adding the random bits to the dropped ones and letting a
** carry move into the kept bits is rounding up with the probability the dropped bits give,
** across binade boundaries too (the carry moves into the exponent). fp16 subnormals drop a
** varying number of bits, counted from the value's exponent.
**
** The bulk forms take the random words a group of 64 elements at a time (lamp_philox_group) and
** round a whole group in a loop of fixed length, which the compiler vectorises in the AVX2 and
** AVX-512 clones: the rounding is a few integer operations per element, and it runs over every
** parameter once per optimizer step.
*/
#include "tensor/stochastic_round.h"

#include <string.h>

#include "base/cpu.h"
#include "tensor/half.h"
#include "tensor/philox.h"

#define F32_ABS_MASK 0x7fffffffu
/* The largest finite bf16 and fp16 as fp32 patterns: above them the rounding is to nearest. */
#define BF16_MAX_F32 0x7f7f0000u
#define F16_MAX_F32 0x477fe000u
/* 2^-14, the smallest normal fp16, and (127 - 15) << 23, which moves an exponent to fp16's bias. */
#define F16_MIN_NORMAL_F32 0x38800000u
#define F16_REBIAS 0x38000000u
/* The smallest normal fp32: below it a value is < 2^-126 and rounds to 0 (see the header). */
#define F32_MIN_NORMAL 0x00800000u

static inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* The dropped 16 bits plus r's low 16: a carry rounds up. */
static inline uint16_t bf16_sr_bits(uint32_t bits, uint32_t r) { return (uint16_t)((bits + (r & 0xffffu)) >> 16); }

uint16_t lamp_f32_to_bf16_sr(float x, uint32_t r) {
  uint32_t bits = float_bits(x);
  if ((bits & F32_ABS_MASK) > BF16_MAX_F32) return lamp_f32_to_bf16(x);
  return bf16_sr_bits(bits, r);
}

/*
** An fp16 subnormal from an fp32 magnitude a in [2^-126, 2^-14): its count of 2^-24 units is the
** 24-bit significand shifted right by `shift` = 126 - exponent (14 .. 125) bits. Up to 32 dropped
** bits take as many random bits; beyond, the value is below 2^-33, under one unit, and only the
** first 32 bits of its fraction of a unit meet r's 32.
*/
static inline uint32_t f16_subnormal_sr(uint32_t a, uint32_t r) {
  uint32_t shift = 126u - (a >> 23), significand = (a & 0x7fffffu) | 0x800000u;
  if (shift <= 32u) {
    uint64_t mask = (UINT64_C(1) << shift) - 1u;
    return (uint32_t)(((uint64_t)significand + (r & mask)) >> shift);
  }
  uint32_t fraction = shift - 32u < 24u ? significand >> (shift - 32u) : 0u;
  return (uint32_t)(((uint64_t)fraction + r) >> 32);
}

uint16_t lamp_f32_to_f16_sr(float x, uint32_t r) {
  uint32_t bits = float_bits(x), a = bits & F32_ABS_MASK;
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  if (a > F16_MAX_F32) return lamp_f32_to_f16(x);
  if (a >= F16_MIN_NORMAL_F32) return (uint16_t)(sign | ((a - F16_REBIAS + (r & 0x1fffu)) >> 13));
  if (a < F32_MIN_NORMAL) return sign;
  return (uint16_t)(sign | f16_subnormal_sr(a, r));
}

/* ---- bulk ------------------------------------------------------------------------------------ */

/*
** A whole group, branch-free so that it vectorises: the nearest rounding is taken for every
** element and kept only beyond the largest finite bf16 (bf16's nearest rounding is itself a few
** integer operations: half.h's rule, NaN made quiet).
*/
static inline __attribute__((always_inline)) void bf16_group(uint16_t *restrict dst, const float *restrict src,
                                                             const uint32_t *restrict r) {
  uint32_t bits[LAMP_PHILOX_GROUP];
  memcpy(bits, src, sizeof bits);
  for (size_t j = 0; j < LAMP_PHILOX_GROUP; j++) {
    uint32_t b = bits[j], a = b & F32_ABS_MASK;
    uint16_t nearest = a > 0x7f800000u ? (uint16_t)((b >> 16) | 0x0040u)
                                       : (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    dst[j] = a > BF16_MAX_F32 ? nearest : bf16_sr_bits(b, r[j]);
  }
}

static void bf16_groups_scalar(uint16_t *dst, const float *src, const uint32_t *words) {
  bf16_group(dst, src, words);
}

#if defined(__x86_64__) || defined(__i386__)
#define LAMP_HAVE_X86 1
__attribute__((target("avx512f,avx512bw"))) static void bf16_groups_avx512(uint16_t *dst, const float *src,
                                                                           const uint32_t *words) {
  bf16_group(dst, src, words);
}

__attribute__((target("avx2"))) static void bf16_groups_avx2(uint16_t *dst, const float *src, const uint32_t *words) {
  bf16_group(dst, src, words);
}
#endif

static void bf16_whole_group(uint16_t *dst, const float *src, const uint32_t *words) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F) && lamp_cpu_has(LAMP_ISA_AVX512BW)) {
    bf16_groups_avx512(dst, src, words);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_AVX2)) {
    bf16_groups_avx2(dst, src, words);
    return;
  }
#endif
  bf16_groups_scalar(dst, src, words);
}

static void f16_whole_group(uint16_t *dst, const float *src, const uint32_t *words) {
  for (size_t j = 0; j < LAMP_PHILOX_GROUP; j++) dst[j] = lamp_f32_to_f16_sr(src[j], words[j]);
}

typedef uint16_t (*round_one_fn)(float x, uint32_t r);
typedef void (*round_group_fn)(uint16_t *dst, const float *src, const uint32_t *words);

/* Groups whose words are drawn in one call: 4 KiB of words on the stack. */
#define BATCH 16

/* dst[0 .. len) from elements first .. first + len of one group (a partial group at either end). */
static void round_part(uint16_t *dst, const float *src, size_t len, uint64_t seed, uint64_t stream, uint64_t first,
                       round_one_fn round_one) {
  uint32_t words[LAMP_PHILOX_GROUP];
  lamp_philox_groups(words, 1, seed, stream, first / LAMP_PHILOX_GROUP);
  const uint32_t *r = words + first % LAMP_PHILOX_GROUP;
  for (size_t k = 0; k < len; k++) dst[k] = round_one(src[k], r[k]);
}

/* Element first + i of the stream is dst[i]: whole groups go to round_group, BATCH at a time, a
   partial group at either end element by element. */
static void round_n(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t stream, uint64_t first,
                    round_one_fn round_one, round_group_fn round_group) {
  size_t head = (size_t)((LAMP_PHILOX_GROUP - first % LAMP_PHILOX_GROUP) % LAMP_PHILOX_GROUP);
  if (head > n) head = n;
  round_part(dst, src, head, seed, stream, first, round_one);
  size_t done = head;
  uint32_t words[BATCH * LAMP_PHILOX_GROUP];
  while (n - done >= LAMP_PHILOX_GROUP) {
    size_t groups = (n - done) / LAMP_PHILOX_GROUP;
    if (groups > BATCH) groups = BATCH;
    lamp_philox_groups(words, groups, seed, stream, (first + done) / LAMP_PHILOX_GROUP);
    for (size_t g = 0; g < groups; g++, done += LAMP_PHILOX_GROUP)
      round_group(dst + done, src + done, words + g * LAMP_PHILOX_GROUP);
  }
  if (done < n) round_part(dst + done, src + done, n - done, seed, stream, first + done, round_one);
}

void lamp_f32_to_bf16_sr_n(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t stream, uint64_t first) {
  round_n(dst, src, n, seed, stream, first, lamp_f32_to_bf16_sr, bf16_whole_group);
}

void lamp_f32_to_f16_sr_n(uint16_t *dst, const float *src, size_t n, uint64_t seed, uint64_t stream, uint64_t first) {
  round_n(dst, src, n, seed, stream, first, lamp_f32_to_f16_sr, f16_whole_group);
}
