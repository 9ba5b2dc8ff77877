/*
** fp16 / bf16 conversions: exhaustive over every 16-bit pattern, against the F16C instructions
** (every f32 pattern for f32 -> f16), and against an independent reference that rounds in
** double arithmetic (frexp/ldexp/floor), so neither the library's bit tricks nor F16C is
** trusted blindly. The edge cases of the conversion rules (docs/design.md, "Numerics": ties to
** even, overflow to infinity, subnormals, NaN) get their own tests.
*/
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <immintrin.h>

#include "base/cpu.h"
#include "tensor/half.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static int f16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

__attribute__((target("f16c"))) static float f16c_to_f32(uint16_t h) { return _cvtsh_ss(h); }

/* F16C reference for a block of 8 floats. */
__attribute__((target("f16c,avx"))) static void f16c_from_f32x8(uint16_t *dst, const float *src) {
  __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128((__m128i *)(void *)dst, h);
}

/*
** Independent reference: round a finite float to a binary format with `precision` significant
** bits, smallest normal exponent `min_exp` (frexp convention, |x| = m * 2^e, m in [0.5, 1)) and
** overflow threshold 2^max_exp, to nearest with ties to even, in double arithmetic. Returns
** the rounded value as a double (+-inf on overflow). Every step is exact in double.
*/
static double round_reference(float x, int precision, int min_exp, int max_exp) {
  double v = fabs((double)x);
  if (v == 0.0) return (double)x;
  int e;
  frexp(v, &e);
  if (e < min_exp) e = min_exp;
  double ulp = ldexp(1.0, e - precision);
  double q = v / ulp;
  double whole = floor(q);
  double frac = q - whole;
  if (frac > 0.5 || (frac == 0.5 && fmod(whole, 2.0) == 1.0)) whole += 1.0;
  double r = whole * ulp;
  if (r >= ldexp(1.0, max_exp)) r = INFINITY;
  return copysign(r, (double)x);
}

/* f16: 11 significant bits, normals from 2^-14 (frexp exponent -13), overflow at 2^16. */
static double f16_reference(float x) { return round_reference(x, 11, -13, 16); }

/* bf16: 8 significant bits, normals from 2^-126 (frexp exponent -125), overflow at 2^128. */
static double bf16_reference(float x) { return round_reference(x, 8, -125, 128); }

/* Checks one f32 -> f16 conversion against the double reference (NaN must stay NaN). */
static int f16_matches_reference(float x) {
  uint16_t h = lamp_f32_to_f16(x);
  if (isnan(x)) return f16_is_nan(h) && (h >> 15) == (bits_of(x) >> 31);
  double want = f16_reference(x);
  float got = lamp_f16_to_f32(h);
  return (double)got == want && !signbit(got) == !signbit(want);
}

static int bf16_matches_reference(float x) {
  uint16_t h = lamp_f32_to_bf16(x);
  if (isnan(x)) return bf16_is_nan(h) && (h >> 15) == (bits_of(x) >> 31);
  double want = bf16_reference(x);
  float got = lamp_bf16_to_f32(h);
  return (double)got == want && !signbit(got) == !signbit(want);
}

/* ---- fp16: every 16-bit pattern ---------------------------------------------------------- */

static void f16_to_f32_matches_f16c_on_all_patterns(void **state) {
  (void)state;
  if (!lamp_cpu_has(LAMP_ISA_F16C)) skip();
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t got = bits_of(lamp_f16_to_f32((uint16_t)h));
    uint32_t want = bits_of(f16c_to_f32((uint16_t)h));
    if (got != want) fail_msg("f16 %04x: got %08x, F16C gives %08x", h, got, want);
  }
}

static void f16_round_trips_on_all_patterns(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float x = lamp_f16_to_f32((uint16_t)h);
    uint16_t back = lamp_f32_to_f16(x);
    if (f16_is_nan((uint16_t)h)) {
      if (!isnan(x) || !f16_is_nan(back) || (back & 0x8000u) != (h & 0x8000u))
        fail_msg("f16 NaN %04x came back as %04x", h, back);
    } else if (back != h) {
      fail_msg("f16 %04x -> %a -> %04x", h, (double)x, back);
    }
  }
}

static void f16_to_f32_matches_reference_values(void **state) {
  (void)state;
  /* Every finite f16 is m * 2^(e-25) for its integer significand; check that directly. */
  for (uint32_t h = 0; h < 0x7c00; h++) {
    uint32_t exponent = h >> 10, mantissa = h & 0x3ffu;
    double want = exponent ? ldexp((double)(mantissa | 0x400u), (int)exponent - 25)
                           : ldexp((double)mantissa, -24);
    assert_true((double)lamp_f16_to_f32((uint16_t)h) == want);
    assert_true((double)lamp_f16_to_f32((uint16_t)(h | 0x8000u)) == -want);
  }
  assert_true(isinf(lamp_f16_to_f32(0x7c00)) && lamp_f16_to_f32(0x7c00) > 0);
  assert_true(isinf(lamp_f16_to_f32(0xfc00)) && lamp_f16_to_f32(0xfc00) < 0);
}

/* ---- fp16: every f32 pattern against F16C ------------------------------------------------ */

#define SWEEP_CHUNK 4096

static void f32_to_f16_matches_f16c_on_all_f32_patterns(void **state) {
  (void)state;
  if (!lamp_cpu_has(LAMP_ISA_F16C)) skip();
  static float src[SWEEP_CHUNK];
  static uint16_t want[SWEEP_CHUNK];
  uint64_t mismatches = 0;
  for (uint64_t base = 0; base < (1ull << 32); base += SWEEP_CHUNK) {
    for (uint32_t i = 0; i < SWEEP_CHUNK; i++) src[i] = float_of((uint32_t)(base + i));
    for (uint32_t i = 0; i < SWEEP_CHUNK; i += 8) f16c_from_f32x8(want + i, src + i);
    for (uint32_t i = 0; i < SWEEP_CHUNK; i++) {
      uint16_t got = lamp_f32_to_f16(src[i]);
      if (got != want[i] && mismatches++ < 10)
        print_error("f32 %08x: got %04x, F16C gives %04x\n", bits_of(src[i]), got, want[i]);
    }
  }
  assert_int_equal(mismatches, 0);
}

/* Runs without F16C too: a fixed stride through all f32 patterns against the double reference. */
static void f32_to_f16_matches_reference_on_strided_patterns(void **state) {
  (void)state;
  for (uint64_t u = 0; u < (1ull << 32); u += 251) {
    float x = float_of((uint32_t)u);
    if (!f16_matches_reference(x)) fail_msg("f32 %08x -> f16 %04x", (uint32_t)u, lamp_f32_to_f16(x));
  }
}

/* ---- fp16: rounding edges ------------------------------------------------------------------ */

/* Between adjacent finite f16 values a and a+1 (same sign): the exact midpoint goes to the even
   one, one f32 ulp either side goes to the nearer one. */
static void f16_midpoints_round_to_even(void **state) {
  (void)state;
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
    for (uint32_t h = 0; h < 0x7bff; h++) {
      uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(sign | (h + 1));
      double mid_d = ((double)lamp_f16_to_f32(lo) + (double)lamp_f16_to_f32(hi)) / 2.0;
      float mid = (float)mid_d;
      assert_true((double)mid == mid_d); /* 12 significant bits: exact in f32 */
      uint16_t even = (h & 1u) ? hi : lo;
      float toward_zero = nextafterf(mid, 0.0f);
      float away = nextafterf(mid, sign ? -INFINITY : INFINITY);
      if (lamp_f32_to_f16(mid) != even) fail_msg("midpoint of %04x/%04x -> %04x", lo, hi, lamp_f32_to_f16(mid));
      if (lamp_f32_to_f16(toward_zero) != lo) fail_msg("just below midpoint of %04x", lo);
      if (lamp_f32_to_f16(away) != hi) fail_msg("just above midpoint of %04x", lo);
      assert_true(f16_matches_reference(mid) && f16_matches_reference(toward_zero) &&
                  f16_matches_reference(away));
    }
  }
}

static void f16_overflow_boundary(void **state) {
  (void)state;
  assert_int_equal(lamp_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(lamp_f32_to_f16(65520.0f), 0x7c00);               /* the tie goes to inf */
  assert_int_equal(lamp_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff); /* 65519.996 */
  assert_int_equal(lamp_f32_to_f16(-65520.0f), 0xfc00);
  assert_int_equal(lamp_f32_to_f16(nextafterf(-65520.0f, 0.0f)), 0xfbff);
  assert_int_equal(lamp_f32_to_f16(65536.0f), 0x7c00);
  assert_int_equal(lamp_f32_to_f16(FLT_MAX), 0x7c00);
  assert_int_equal(lamp_f32_to_f16(-FLT_MAX), 0xfc00);
  assert_int_equal(lamp_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(lamp_f32_to_f16(-INFINITY), 0xfc00);
}

static void f16_subnormals(void **state) {
  (void)state;
  const float smallest = 0x1p-24f; /* 5.96e-8 */
  assert_true(lamp_f16_to_f32(0x0001) == smallest);
  assert_true(lamp_f16_to_f32(0x03ff) == 1023.0f * smallest);
  assert_int_equal(lamp_f32_to_f16(smallest), 0x0001);
  assert_int_equal(lamp_f32_to_f16(-smallest), 0x8001);
  assert_int_equal(lamp_f32_to_f16(smallest / 2), 0x0000);         /* tie -> even zero */
  assert_int_equal(lamp_f32_to_f16(-smallest / 2), 0x8000);        /* keeps its sign */
  assert_int_equal(lamp_f32_to_f16(nextafterf(smallest / 2, 1.0f)), 0x0001);
  assert_int_equal(lamp_f32_to_f16(1.5f * smallest), 0x0002);      /* tie -> even 2 */
  assert_int_equal(lamp_f32_to_f16(2.5f * smallest), 0x0002);      /* tie -> even 2 */
  assert_int_equal(lamp_f32_to_f16(0x1p-14f), 0x0400);             /* smallest normal */
  assert_int_equal(lamp_f32_to_f16(1023.5f * smallest), 0x0400);   /* rounds up into normals */
  assert_int_equal(lamp_f32_to_f16(FLT_MIN), 0x0000);
  assert_int_equal(lamp_f32_to_f16(float_of(1)), 0x0000);          /* f32 subnormal */
  assert_int_equal(lamp_f32_to_f16(-0.0f), 0x8000);
}

static void f16_nan_stays_quiet_nan_with_sign(void **state) {
  (void)state;
  assert_int_equal(lamp_f32_to_f16(float_of(0x7fc00000u)), 0x7e00);
  assert_int_equal(lamp_f32_to_f16(float_of(0xffc00000u)), 0xfe00);
  /* A signalling NaN whose payload sits below the bits f16 keeps must not become inf. */
  assert_int_equal(lamp_f32_to_f16(float_of(0x7f800001u)), 0x7e00);
  assert_int_equal(lamp_f32_to_f16(float_of(0xff800001u)), 0xfe00);
  float x = lamp_f16_to_f32(0x7c01); /* signalling f16 NaN */
  assert_true(isnan(x));
  assert_true(bits_of(x) & 0x00400000u); /* comes out quiet */
  assert_true(signbit(lamp_f16_to_f32(0xfe00)));
}

static void f16_bulk_equals_scalar(void **state) {
  (void)state;
  static uint16_t h[65536 + 7], h_bulk[65536 + 7];
  static float f[65536 + 7], f_bulk[65536 + 7];
  for (uint32_t i = 0; i < 65536 + 7; i++) h[i] = (uint16_t)(i * 40503u); /* all patterns */
  /* An odd length and an odd start exercise the scalar tail and unaligned loads. */
  lamp_f16_to_f32_n(f_bulk + 1, h + 1, 65536 + 5);
  for (uint32_t i = 1; i < 65536 + 6; i++)
    assert_int_equal(bits_of(f_bulk[i]), bits_of(lamp_f16_to_f32(h[i])));
  for (uint32_t i = 0; i < 65536 + 7; i++) {
    f[i] = float_of(i * 2654435761u); /* spread over all f32 patterns, NaNs included */
    if (i % 5 == 0) f[i] = lamp_f16_to_f32(h[i]) * 1.00048828125f; /* near midpoints */
  }
  lamp_f32_to_f16_n(h_bulk + 1, f + 1, 65536 + 5);
  for (uint32_t i = 1; i < 65536 + 6; i++)
    assert_int_equal(h_bulk[i], lamp_f32_to_f16(f[i]));
}

/* Calls of every length up to two vectors and a bit, over all patterns: short rows (a 14-pixel
   image row) are all tail, and the tails are converted in vector registers too. */
static void f16_bulk_tails_equal_scalar(void **state) {
  (void)state;
  static uint16_t h[65536 + 40], h_bulk[65536 + 40];
  static float f[65536 + 40], f_bulk[65536 + 40];
  for (uint32_t i = 0; i < 65536 + 40; i++) {
    h[i] = (uint16_t)(i * 40503u);
    f[i] = i % 3 == 0 ? lamp_f16_to_f32(h[i]) * 1.00048828125f : float_of(i * 2654435761u);
  }
  for (size_t len = 1; len <= 35; len++) {
    memset(f_bulk, 0, sizeof f_bulk);
    for (size_t at = 0; at + len <= 65536 + 40; at += len) {
      lamp_f16_to_f32_n(f_bulk + at, h + at, len);
      lamp_f32_to_f16_n(h_bulk + at, f + at, len);
    }
    size_t covered = (65536 + 40) / len * len;
    for (size_t i = 0; i < covered; i++) {
      if (bits_of(f_bulk[i]) != bits_of(lamp_f16_to_f32(h[i])))
        fail_msg("lamp_f16_to_f32_n, length %zu: element %zu (0x%04x)", len, i, h[i]);
      if (h_bulk[i] != lamp_f32_to_f16(f[i]))
        fail_msg("lamp_f32_to_f16_n, length %zu: element %zu (0x%08x)", len, i, bits_of(f[i]));
    }
    if (covered < 65536 + 40) assert_true(bits_of(f_bulk[covered]) == 0); /* nothing written past a call */
  }
}

/* ---- bf16 ----------------------------------------------------------------------------------- */

static void bf16_round_trips_on_all_patterns(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float x = lamp_bf16_to_f32((uint16_t)h);
    assert_int_equal(bits_of(x), h << 16); /* widening is exact: the top half of an f32 */
    uint16_t back = lamp_f32_to_bf16(x);
    if (bf16_is_nan((uint16_t)h)) {
      if (!bf16_is_nan(back) || (back & 0x8000u) != (h & 0x8000u))
        fail_msg("bf16 NaN %04x came back as %04x", h, back);
    } else if (back != h) {
      fail_msg("bf16 %04x -> %04x", h, back);
    }
  }
}

static void bf16_matches_reference_on_strided_patterns(void **state) {
  (void)state;
  for (uint64_t u = 0; u < (1ull << 32); u += 251) {
    float x = float_of((uint32_t)u);
    if (!bf16_matches_reference(x)) fail_msg("f32 %08x -> bf16 %04x", (uint32_t)u, lamp_f32_to_bf16(x));
  }
}

/* Midpoints between adjacent finite bf16 values, and one f32 ulp either side. */
static void bf16_midpoints_round_to_even(void **state) {
  (void)state;
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
    for (uint32_t h = 0; h < 0x7f7f; h++) {
      uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(sign | (h + 1));
      float mid = float_of(((uint32_t)lo << 16) | 0x8000u);
      assert_true((double)mid == ((double)lamp_bf16_to_f32(lo) + (double)lamp_bf16_to_f32(hi)) / 2);
      float toward_zero = nextafterf(mid, 0.0f);
      float away = nextafterf(mid, sign ? -INFINITY : INFINITY);
      assert_int_equal(lamp_f32_to_bf16(mid), (h & 1u) ? hi : lo);
      assert_int_equal(lamp_f32_to_bf16(toward_zero), lo);
      assert_int_equal(lamp_f32_to_bf16(away), hi);
      assert_true(bf16_matches_reference(mid) && bf16_matches_reference(toward_zero) &&
                  bf16_matches_reference(away));
    }
  }
}

static void bf16_edges(void **state) {
  (void)state;
  assert_int_equal(lamp_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);        /* tie -> even 1.0 */
  assert_int_equal(lamp_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);    /* tie -> even */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f); /* below the tie */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x7f7f8000u)), 0x7f80); /* tie -> even is inf */
  assert_int_equal(lamp_f32_to_bf16(FLT_MAX), 0x7f80);
  assert_int_equal(lamp_f32_to_bf16(-FLT_MAX), 0xff80);
  assert_int_equal(lamp_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(lamp_f32_to_bf16(-INFINITY), 0xff80);
  assert_int_equal(lamp_f32_to_bf16(float_of(1)), 0x0000);           /* far below half a unit */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x8000u)), 0x0000);     /* subnormal tie -> even zero */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x18000u)), 0x0002);    /* tie -> even 2 */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x7fffffu)), 0x0080);   /* into the normals */
  assert_int_equal(lamp_f32_to_bf16(-0.0f), 0x8000);
  /* NaN: quiet, signed, never inf even when the payload is only in the dropped bits. */
  assert_int_equal(lamp_f32_to_bf16(float_of(0x7fc00000u)), 0x7fc0);
  assert_int_equal(lamp_f32_to_bf16(float_of(0xffc00000u)), 0xffc0);
  assert_int_equal(lamp_f32_to_bf16(float_of(0x7f800001u)), 0x7fc0);
  assert_int_equal(lamp_f32_to_bf16(float_of(0xff80ffffu)), 0xffc0);
  assert_true(isnan(lamp_bf16_to_f32(0x7f81)));
}

/* The zero bounds are the largest floats stored as +0; the next float up is the smallest
   subnormal (a ReLU's mask from outputs before rounding relies on it). */
static void zero_bounds(void **state) {
  (void)state;
  assert_int_equal(lamp_f32_to_f16(LAMP_F16_ZERO_BOUND), 0x0000);
  assert_int_equal(lamp_f32_to_f16(nextafterf(LAMP_F16_ZERO_BOUND, 1.0f)), 0x0001);
  assert_int_equal(lamp_f32_to_bf16(LAMP_BF16_ZERO_BOUND), 0x0000);
  assert_int_equal(lamp_f32_to_bf16(nextafterf(LAMP_BF16_ZERO_BOUND, 1.0f)), 0x0001);
  uint16_t h[2];
  const float v[2] = {LAMP_F16_ZERO_BOUND, nextafterf(LAMP_F16_ZERO_BOUND, 1.0f)};
  lamp_f32_to_f16_n(h, v, 2);
  assert_int_equal(h[0], 0x0000);
  assert_int_equal(h[1], 0x0001);
}

static void bf16_bulk_equals_scalar(void **state) {
  (void)state;
  static uint16_t h[65536 + 7], h_bulk[65536 + 7];
  static float f[65536 + 7], f_bulk[65536 + 7];
  for (uint32_t i = 0; i < 65536 + 7; i++) h[i] = (uint16_t)(i * 40503u);
  lamp_bf16_to_f32_n(f_bulk + 1, h + 1, 65536 + 5);
  for (uint32_t i = 1; i < 65536 + 6; i++)
    assert_int_equal(bits_of(f_bulk[i]), bits_of(lamp_bf16_to_f32(h[i])));
  for (uint32_t i = 0; i < 65536 + 7; i++) {
    f[i] = float_of(i * 2654435761u);
    if (i % 3 == 0) f[i] = float_of(((uint32_t)h[i] << 16) | 0x8000u); /* midpoints */
  }
  lamp_f32_to_bf16_n(h_bulk + 1, f + 1, 65536 + 5);
  for (uint32_t i = 1; i < 65536 + 6; i++)
    assert_int_equal(h_bulk[i], lamp_f32_to_bf16(f[i]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f16_to_f32_matches_f16c_on_all_patterns),
      cmocka_unit_test(f16_round_trips_on_all_patterns),
      cmocka_unit_test(f16_to_f32_matches_reference_values),
      cmocka_unit_test(f32_to_f16_matches_f16c_on_all_f32_patterns),
      cmocka_unit_test(f32_to_f16_matches_reference_on_strided_patterns),
      cmocka_unit_test(f16_midpoints_round_to_even),
      cmocka_unit_test(f16_overflow_boundary),
      cmocka_unit_test(f16_subnormals),
      cmocka_unit_test(f16_nan_stays_quiet_nan_with_sign),
      cmocka_unit_test(f16_bulk_equals_scalar),
      cmocka_unit_test(f16_bulk_tails_equal_scalar),
      cmocka_unit_test(bf16_round_trips_on_all_patterns),
      cmocka_unit_test(bf16_matches_reference_on_strided_patterns),
      cmocka_unit_test(bf16_midpoints_round_to_even),
      cmocka_unit_test(bf16_edges),
      cmocka_unit_test(bf16_bulk_equals_scalar),
      cmocka_unit_test(zero_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
