/*
** fp16 / bf16 conversions.
**
** The scalar forms are pure integer manipulation of the IEEE bit patterns: they do not depend
** on the floating-point environment (rounding mode, FTZ/DAZ) and give the same answer on every
** machine. They are the reference the F16C bulk path must match bit for bit (test_half.c
** checks that on every fp16 pattern and every fp32 pattern).
**
** Layouts:   f32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm   (bias 127)
**            f16  s eeeee mmmmmmmmmm                     (bias 15)
**            bf16 s eeeeeeee mmmmmmm                     (the top half of an f32)
*/
#include "tensor/half.h"
#include "tensor/half_avx512.h"

#include <string.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LAMP_HAVE_X86 1
#endif

static inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

#define F32_ABS_MASK 0x7fffffffu
#define F32_INF 0x7f800000u
#define F16_INF 0x7c00u
#define F16_QUIET_NAN 0x7e00u /* exponent all ones plus the quiet bit */
#define BF16_QUIET_BIT 0x0040u

/* |x| at or above this is 65520 = (65504 + 65536) / 2: rounds to inf (ties go to the even inf). */
#define F16_OVERFLOW_F32 0x477ff000u
/* 2^-14, the smallest normal f16. */
#define F16_MIN_NORMAL_F32 0x38800000u
/* 2^-25, half the smallest subnormal f16: at or below it rounds to zero (the tie goes to even 0). */
#define F16_HALF_MIN_SUBNORMAL_F32 0x33000000u
/* (127 - 15) << 23: moves an f32 exponent to the f16 bias. */
#define F16_REBIAS 0x38000000u

/* Shifts `value` right by `shift` (1..31), rounding to nearest, ties to even. */
static inline uint32_t shift_right_round_even(uint32_t value, unsigned shift) {
  uint32_t half = 1u << (shift - 1);
  uint32_t rest = value & ((half << 1) - 1);
  uint32_t kept = value >> shift;
  if (rest > half || (rest == half && (kept & 1u))) kept++;
  return kept;
}

/* An f32 magnitude in [2^-14, 65520) to f16: drop 13 mantissa bits; a carry out of the mantissa
   correctly bumps the exponent (up to 0x7bff at most, by the range). */
static inline uint16_t f16_from_normal(uint32_t abs_bits) {
  return (uint16_t)shift_right_round_even(abs_bits - F16_REBIAS, 13);
}

/* An f32 magnitude in (2^-25, 2^-14) to a subnormal f16 (units of 2^-24): the value is
   mantissa * 2^(exponent - 150), so the f16 count is mantissa >> (126 - exponent). Rounding up
   from the largest subnormal yields 0x400, which is exactly the smallest normal. */
static inline uint16_t f16_from_subnormal(uint32_t abs_bits) {
  uint32_t exponent = abs_bits >> 23;
  uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  return (uint16_t)shift_right_round_even(mantissa, 126u - exponent);
}

uint16_t lamp_f32_to_f16(float x) {
  uint32_t bits = float_bits(x);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t a = bits & F32_ABS_MASK;
  /* NaN: keep the top 10 payload bits and set the quiet bit, as F16C does. */
  if (a > F32_INF) return (uint16_t)(sign | F16_QUIET_NAN | ((a >> 13) & 0x3ffu));
  if (a >= F16_OVERFLOW_F32) return (uint16_t)(sign | F16_INF);
  if (a >= F16_MIN_NORMAL_F32) return (uint16_t)(sign | f16_from_normal(a));
  if (a <= F16_HALF_MIN_SUBNORMAL_F32) return sign;
  return (uint16_t)(sign | f16_from_subnormal(a));
}

/* A nonzero subnormal f16 mantissa m (value m * 2^-24) as f32 bits: normalise so the leading
   one becomes the implicit bit. With the top set bit at position p, the value is
   1.f * 2^(p - 24), whose biased f32 exponent is p + 103. */
static inline uint32_t f32_from_f16_subnormal(uint32_t mantissa) {
  uint32_t top = 31u - (uint32_t)__builtin_clz(mantissa);
  uint32_t fraction = (mantissa << (23u - top)) & 0x7fffffu;
  return ((top + 103u) << 23) | fraction;
}

float lamp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {
    /* inf stays inf; a NaN comes out quiet with its payload, as F16C's vcvtph2ps gives. */
    uint32_t quiet = mantissa ? 0x400000u : 0u;
    return bits_float(sign | F32_INF | quiet | (mantissa << 13));
  }
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);
  return bits_float(sign | f32_from_f16_subnormal(mantissa));
}

/* Round the low 16 bits away to nearest even (a carry into the exponent gives the next binade
   or inf, both correct), except NaN, which is truncated and made quiet so that a payload in
   the low bits cannot turn it into inf. Branch-free, on masks, with signed compares and an
   arithmetic final shift (the result fits int16, so SSE2's signed pack narrows it): this is
   what lets the bulk loop vectorise without SSE4.1's unsigned compares and packs. */
static inline uint16_t bf16_from_bits(uint32_t bits) {
  uint32_t nan_mask = (int32_t)(bits & F32_ABS_MASK) > (int32_t)F32_INF ? 0xffffffffu : 0u;
  uint32_t round_up = (0x7fffu + ((bits >> 16) & 1u)) & ~nan_mask;
  uint32_t quieted = bits | ((BF16_QUIET_BIT << 16) & nan_mask);
  /* Whether >> on a negative int32 is arithmetic or logical, the low 16 bits are the same. */
  return (uint16_t)((int32_t)(quieted + round_up) >> 16);
}

uint16_t lamp_f32_to_bf16(float x) { return bf16_from_bits(float_bits(x)); }

float lamp_bf16_to_f32(uint16_t h) { return bits_float((uint32_t)h << 16); }

/* ---- bulk forms -------------------------------------------------------------------------- */

#ifdef LAMP_HAVE_X86
/* The F16C paths: 8 lanes per instruction, the tail too (through a small zero-padded block: the
   scalar conversions agree bit for bit, but a short row, such as a 14-pixel image row, would
   spend most of its time in them). Compiled for F16C/AVX only here, chosen at run time, so the
   build needs no -march.
   Every 256-bit loop here ends in an explicit vzeroupper, before the tail: GCC leaves the upper
   register halves dirty on a path that calls out (the scalar tail) or tail-calls, and the rest
   of lamp is SSE code, which then runs several times slower (the fp16 loss of 10 classes ran
   at 0.65 ms instead of 20 us). tests/unit/test_vector_state.c checks the state each leaves. */
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
  }
  if (i < n) {
    float in[8] = {0};
    uint16_t out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    _mm_storeu_si128((__m128i *)(void *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
  _mm256_zeroupper();
}

__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {
    uint16_t in[8] = {0};
    float out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)in)));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
  _mm256_zeroupper();
}

/* The same on 16 lanes where AVX-512F is there (its vcvtps2ph and vcvtph2ps round alike); the
   fp32 side of a tail is a masked load or store, the 16-bit side goes through a small block. */
__attribute__((target("avx512f"))) static void f32_to_f16_avx512(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256((__m256i *)(void *)(dst + i), h);
  }
  if (i < n) {
    uint16_t out[16];
    __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1u), src + i);
    _mm256_storeu_si256((__m256i *)(void *)out, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
  _mm256_zeroupper();
}

__attribute__((target("avx512f"))) static void f16_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + i))));
  if (i < n) {
    uint16_t in[16] = {0};
    memcpy(in, src + i, (n - i) * sizeof *in);
    __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)in));
    _mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << (n - i)) - 1u), v);
  }
  _mm256_zeroupper();
}

#endif

void lamp_f32_to_f16_n(uint16_t *dst, const float *src, size_t n) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    f32_to_f16_avx512(dst, src, n);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_F16C)) {
    f32_to_f16_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = lamp_f32_to_f16(src[i]);
}

void lamp_f16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    f16_to_f32_avx512(dst, src, n);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_F16C)) {
    f16_to_f32_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = lamp_f16_to_f32(src[i]);
}

/* The bf16 loops run in blocks of a fixed 16 elements: at -O2 GCC's "very cheap" vectoriser
   only takes loops whose trip count it knows, and the block is such a loop. Each block is read
   whole before it is written, so the compiler needs no proof that dst and src are apart. The
   same loop is also compiled for AVX2 (twice the width), chosen at run time like F16C. */
#define BF16_BLOCK 16

static inline __attribute__((always_inline)) void f32_to_bf16_loop(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + BF16_BLOCK <= n; i += BF16_BLOCK) {
    uint16_t out[BF16_BLOCK];
    for (size_t j = 0; j < BF16_BLOCK; j++) out[j] = bf16_from_bits(float_bits(src[i + j]));
    memcpy(dst + i, out, sizeof out);
  }
  for (; i < n; i++) dst[i] = bf16_from_bits(float_bits(src[i]));
}

static inline __attribute__((always_inline)) void bf16_to_f32_loop(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + BF16_BLOCK <= n; i += BF16_BLOCK) {
    uint32_t out[BF16_BLOCK];
    for (size_t j = 0; j < BF16_BLOCK; j++) out[j] = (uint32_t)src[i + j] << 16;
    memcpy(dst + i, out, sizeof out);
  }
  for (; i < n; i++) dst[i] = bits_float((uint32_t)src[i] << 16);
}

#ifdef LAMP_HAVE_X86
/* The AVX-512 forms: 16 lanes, the scalar code for the tail. These conversions run over every
   weight and activation each step under bf16, and AVX2's 8 lanes left them the slowest part
   of a bf16 step outside the GEMMs. */
__attribute__((target("avx512f"))) static void f32_to_bf16_avx512(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lamp_bf16x16_store(dst + i, _mm512_loadu_ps(src + i));
  }
  _mm256_zeroupper();
  for (; i < n; i++) dst[i] = bf16_from_bits(float_bits(src[i]));
}

/*
** With AVX512_BF16, VCVTNEPS2BF16 rounds to nearest even and quiets a NaN keeping its sign and
** payload top, as bf16_from_bits does, in one instruction for the ten above; but it reads a
** denormal as zero, so a block holding one takes the integer steps.
*/
__attribute__((target("avx512f,avx512bf16"))) static void f32_to_bf16_avx512bf16(uint16_t *dst, const float *src,
                                                                                 size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i b = _mm512_loadu_si512((const void *)(src + i));
    __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
    __m256i h;
    if (_mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x007fffff)))
      h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(lamp_bf16x16_round_bits(b), 16));
    else h = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(b));
    _mm256_storeu_si256((__m256i *)(void *)(dst + i), h);
  }
  _mm256_zeroupper();
  for (; i < n; i++) dst[i] = bf16_from_bits(float_bits(src[i]));
}

__attribute__((target("avx512f"))) static void bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, lamp_bf16x16_load(src + i));
  }
  _mm256_zeroupper();
  for (; i < n; i++) dst[i] = bits_float((uint32_t)src[i] << 16);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(uint16_t *dst, const float *src, size_t n) {
  f32_to_bf16_loop(dst, src, n);
  _mm256_zeroupper();
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n) {
  bf16_to_f32_loop(dst, src, n);
  _mm256_zeroupper();
}
#endif

void lamp_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512BF16)) {
    f32_to_bf16_avx512bf16(dst, src, n);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    f32_to_bf16_avx512(dst, src, n);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_AVX2)) {
    f32_to_bf16_avx2(dst, src, n);
    return;
  }
#endif
  f32_to_bf16_loop(dst, src, n);
}

void lamp_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    bf16_to_f32_avx512(dst, src, n);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_AVX2)) {
    bf16_to_f32_avx2(dst, src, n);
    return;
  }
#endif
  bf16_to_f32_loop(dst, src, n);
}

/* ---- rounding through 16 bits in fp32 storage --------------------------------------------- */

/*
** bf16's rounding as an fp32 -> fp32 map, in the 32-bit domain so that it vectorises: the same
** bits as (uint32_t)bf16_from_bits(x) << 16, NaN quieted with its sign and payload top kept.
*/
static inline float bf16_round_float(float x) {
  uint32_t bits = float_bits(x);
  uint32_t nan_mask = (int32_t)(bits & F32_ABS_MASK) > (int32_t)F32_INF ? 0xffffffffu : 0u;
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  uint32_t quieted = (bits | ((uint32_t)BF16_QUIET_BIT << 16)) & 0xffff0000u;
  return bits_float((rounded & ~nan_mask) | (quieted & nan_mask));
}

static void round_bf16_scalar(float *dst, const float *src, size_t n, int add) {
  for (size_t i = 0; i < n; i++) dst[i] = add ? dst[i] + bf16_round_float(src[i]) : bf16_round_float(src[i]);
}

#ifdef LAMP_HAVE_X86
/* bf16_round_float on 16 lanes (AVX-512F) and on 8 (AVX2): GCC at -O2 leaves the scalar form
   unvectorised. */
__attribute__((target("avx512f"))) static void round_bf16_avx512(float *dst, const float *src, size_t n, int add) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 r = _mm512_castsi512_ps(lamp_bf16x16_round_bits(_mm512_loadu_si512((const void *)(src + i))));
    if (add) r = _mm512_add_ps(_mm512_loadu_ps(dst + i), r);
    _mm512_storeu_ps(dst + i, r);
  }
  _mm256_zeroupper();
  round_bf16_scalar(dst + i, src + i, n - i, add);
}

__attribute__((target("avx2"))) static void round_bf16_avx2(float *dst, const float *src, size_t n, int add) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i high = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(BF16_QUIET_BIT << 16);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i b = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
    __m256i rounded = _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(bias, lsb)), high);
    __m256i quieted = _mm256_and_si256(_mm256_or_si256(b, quiet), high);
    __m256 r = _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quieted, nan));
    if (add) r = _mm256_add_ps(_mm256_loadu_ps(dst + i), r);
    _mm256_storeu_ps(dst + i, r);
  }
  _mm256_zeroupper();
  round_bf16_scalar(dst + i, src + i, n - i, add);
}
#endif

static void round_bf16(float *dst, const float *src, size_t n, int add) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    round_bf16_avx512(dst, src, n, add);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_AVX2)) {
    round_bf16_avx2(dst, src, n, add);
    return;
  }
#endif
  round_bf16_scalar(dst, src, n, add);
}

void lamp_round_bf16_n(float *dst, const float *src, size_t n) { round_bf16(dst, src, n, 0); }
void lamp_add_rounded_bf16_n(float *dst, const float *src, size_t n) { round_bf16(dst, src, n, 1); }

static inline float f16_round_float(float x) { return lamp_f16_to_f32(lamp_f32_to_f16(x)); }

#ifdef LAMP_HAVE_X86
__attribute__((target("avx512f"))) static void round_f16_avx512(float *dst, const float *src, size_t n, int add) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 r = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (add) r = _mm512_add_ps(_mm512_loadu_ps(dst + i), r);
    _mm512_storeu_ps(dst + i, r);
  }
  if (i < n) { /* the tail in masked lanes too, as the conversions do (short rows are all tail) */
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    __m512 r = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    if (add) r = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), r);
    _mm512_mask_storeu_ps(dst + i, m, r);
  }
  _mm256_zeroupper();
}

__attribute__((target("f16c,avx"))) static void round_f16_f16c(float *dst, const float *src, size_t n, int add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (add) r = _mm256_add_ps(_mm256_loadu_ps(dst + i), r);
    _mm256_storeu_ps(dst + i, r);
  }
  if (i < n) { /* the tail through a zero-padded block, as the conversions do */
    float in[8] = {0}, out[8] = {0};
    memcpy(in, src + i, (n - i) * sizeof *in);
    if (add) memcpy(out, dst + i, (n - i) * sizeof *out);
    __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    if (add) r = _mm256_add_ps(_mm256_loadu_ps(out), r);
    _mm256_storeu_ps(out, r);
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
  _mm256_zeroupper();
}
#endif

static void round_f16(float *dst, const float *src, size_t n, int add) {
#ifdef LAMP_HAVE_X86
  if (lamp_cpu_has(LAMP_ISA_AVX512F)) {
    round_f16_avx512(dst, src, n, add);
    return;
  }
  if (lamp_cpu_has(LAMP_ISA_F16C)) {
    round_f16_f16c(dst, src, n, add);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = add ? dst[i] + f16_round_float(src[i]) : f16_round_float(src[i]);
}

void lamp_round_f16_n(float *dst, const float *src, size_t n) { round_f16(dst, src, n, 0); }
void lamp_add_rounded_f16_n(float *dst, const float *src, size_t n) { round_f16(dst, src, n, 1); }
