/*
** Stochastic rounding (tensor/stochastic_round.h) and its generator (tensor/philox.h):
**   - Philox4x32-10 gives the published known answers (Random123's kat_vectors);
**   - the vector group function gives every element the word lamp_philox_word names (the layout),
**     at the start of the counter space, across a 2^32 boundary of the counters, in batches that
**     take the vector paths and the scalar tail;
**   - unbiased: for values between two bf16 (and fp16) neighbours, the mean error of many draws is
**     within 3 standard errors of 0, and rounding to nearest fails the same test (the test has
**     the power to see a bias); values a format holds exactly never move;
**   - the edges: r = 0 truncates toward zero, r = 2^32 - 1 rounds away from it; inf, NaN and the
**     overflow range round to nearest; nothing becomes inf that rounding to nearest keeps finite;
**   - the bulk forms equal the scalar one element by element, whatever the offset and length;
**   - lamp_round_stochastic: the same bytes on the CPU with one and with two threads and on the
**     simulated device, depending only on (seed, stream, index); refusals and their messages.
*/
#include <cblas.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/error.h"
#include "tensor/half.h"
#include "tensor/memory.h"
#include "tensor/philox.h"
#include "tensor/stochastic_round.h"

#define OK(call) assert_int_equal((call), LAMP_OK)

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

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* ---- the generator ---------------------------------------------------------------------------- */

static void philox_gives_the_known_answers(void **state) {
  (void)state;
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
    uint32_t out[4];
    lamp_philox4x32(out, kat[k].ctr, kat[k].key);
    for (int w = 0; w < 4; w++) assert_int_equal(out[w], kat[k].out[w]);
  }
}

/* count groups from `group` on, against the scalar word of each element. */
static void check_groups(uint64_t seed, uint64_t stream, uint64_t group, size_t count) {
  uint32_t *words = malloc(count * LAMP_PHILOX_GROUP * sizeof *words);
  assert_non_null(words);
  lamp_philox_groups(words, count, seed, stream, group);
  for (size_t j = 0; j < count * LAMP_PHILOX_GROUP; j++) {
    uint32_t want = lamp_philox_word(seed, stream, group * LAMP_PHILOX_GROUP + j);
    if (words[j] != want)
      fail_msg("group %llu + %zu words, element %zu: %08x, expected %08x", (unsigned long long)group, count, j,
               words[j], want);
  }
  free(words);
}

static void groups_follow_the_layout(void **state) {
  (void)state;
  for (size_t count = 1; count <= 9; count++) check_groups(7, 3, 0, count); /* vector batches and the scalar tail */
  check_groups(UINT64_MAX, UINT64_MAX, 5, 4);
  /* group 2^28 - 2 .. 2^28 + 1: counters 2^32 - 32 .. 2^32 + 31, whose high word changes */
  check_groups(0x0123456789abcdefull, 41, (UINT64_C(1) << 28) - 2, 4);
  /* the layout itself: element g * 64 + w * 16 + b is word w of counter g * 16 + b */
  uint32_t out[4];
  const uint32_t key[2] = {0x89abcdefu, 0x01234567u}, ctr[4] = {5 * 16 + 9, 0, 77, 0};
  lamp_philox4x32(out, ctr, key);
  for (int w = 0; w < 4; w++) assert_int_equal(lamp_philox_word(0x0123456789abcdefull, 77, 5 * 64 + w * 16 + 9), out[w]);
  /* every input moves the word */
  uint32_t base = lamp_philox_word(1, 1, 1);
  assert_int_not_equal(lamp_philox_word(2, 1, 1), base);
  assert_int_not_equal(lamp_philox_word(1, 2, 1), base);
  assert_int_not_equal(lamp_philox_word(1, 1, 2), base);
  assert_int_not_equal(lamp_philox_word(1 | (UINT64_C(1) << 32), 1, 1), base);
  assert_int_not_equal(lamp_philox_word(1, 1 | (UINT64_C(1) << 32), 1), base);
}

/* ---- unbiasedness --------------------------------------------------------------------------- */

typedef uint16_t (*round_fn)(float x);
typedef float (*widen_fn)(uint16_t h);

#define DRAWS 200000

/*
** DRAWS roundings of x (one stream, consecutive elements) into the format (bulk form), between
** its neighbours lo < x < hi: how far the mean lies from x in standard errors of a rounding that
** picks hi with probability (x - lo) / (hi - lo). In double: the values are exact there.
*/
static double bias_in_standard_errors(float x, float lo, float hi, int bf16, uint64_t stream) {
  float *src = malloc(DRAWS * sizeof *src);
  uint16_t *dst = malloc(DRAWS * sizeof *dst);
  assert_true(src != NULL && dst != NULL);
  for (size_t i = 0; i < DRAWS; i++) src[i] = x;
  if (bf16) lamp_f32_to_bf16_sr_n(dst, src, DRAWS, 12345, stream, 0);
  else lamp_f32_to_f16_sr_n(dst, src, DRAWS, 12345, stream, 0);
  double sum = 0.0;
  for (size_t i = 0; i < DRAWS; i++) {
    float v = bf16 ? lamp_bf16_to_f32(dst[i]) : lamp_f16_to_f32(dst[i]);
    if (v != lo && v != hi) fail_msg("%a rounded to %a, not to a neighbour %a or %a", (double)x, (double)v, (double)lo, (double)hi);
    sum += (double)v - (double)x;
  }
  free(src);
  free(dst);
  double spacing = (double)hi - (double)lo, p = ((double)x - (double)lo) / spacing;
  double se = spacing * sqrt(p * (1.0 - p) / DRAWS);
  return (sum / DRAWS) / se;
}

/* x = lo + fraction * (hi - lo), rounded to fp32 (exact for these formats and fractions). */
static float between(float lo, float hi, double fraction) { return (float)((double)lo + fraction * ((double)hi - lo)); }

static void rounding_is_unbiased(void **state) {
  (void)state;
  static const double fractions[] = {0.5, 0.25, 0.75, 0.1, 0.9, 0.01, 0.99, 1.0 / 3.0, 0.001};
  /* bf16 neighbours: in one binade, across a binade (hi = 2), negative, subnormal, huge, tiny */
  static const uint16_t bf16_lo[] = {0x3f80, 0x3fff, 0xbf80, 0x0003, 0x7f00, 0x0080, 0x3c23};
  for (size_t k = 0; k < sizeof bf16_lo / sizeof bf16_lo[0]; k++) {
    float lo = lamp_bf16_to_f32(bf16_lo[k]), hi = lamp_bf16_to_f32((uint16_t)(bf16_lo[k] + 1));
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
      float x = between(lo, hi, fractions[f]);
      double z = bias_in_standard_errors(x, fminf(lo, hi), fmaxf(lo, hi), 1, k * 16 + f);
      if (!(fabs(z) < 3.0)) fail_msg("bf16: %a (%.3g of the way from %a): mean error %.2f standard errors", (double)x, fractions[f], (double)lo, z);
    }
  }
  /* fp16 neighbours: normal, across a binade, negative, subnormal (13 to 24 dropped bits) */
  static const uint16_t f16_lo[] = {0x3c00, 0x3bff, 0xc400, 0x0001, 0x0000, 0x03ff, 0x7bfe};
  for (size_t k = 0; k < sizeof f16_lo / sizeof f16_lo[0]; k++) {
    float lo = lamp_f16_to_f32(f16_lo[k]), hi = lamp_f16_to_f32((uint16_t)(f16_lo[k] + 1));
    for (size_t f = 0; f < sizeof fractions / sizeof fractions[0]; f++) {
      float x = between(lo, hi, fractions[f]);
      double z = bias_in_standard_errors(x, fminf(lo, hi), fmaxf(lo, hi), 0, 1000 + k * 16 + f);
      if (!(fabs(z) < 3.0)) fail_msg("fp16: %a (%.3g of the way from %a): mean error %.2f standard errors", (double)x, fractions[f], (double)lo, z);
    }
  }
}

/* The measure sees a bias: rounding to nearest, a quarter of the way between neighbours, is off
   by hundreds of standard errors. */
static void rounding_to_nearest_fails_the_same_test(void **state) {
  (void)state;
  float lo = 1.0f, hi = lamp_bf16_to_f32(0x3f81), x = between(lo, hi, 0.25);
  double spacing = (double)hi - lo, p = 0.25, se = spacing * sqrt(p * (1.0 - p) / DRAWS);
  double mean_error = (double)lamp_bf16_to_f32(lamp_f32_to_bf16(x)) - (double)x;
  assert_true(fabs(mean_error / se) > 100.0);
  assert_true(fabs(bias_in_standard_errors(x, lo, hi, 1, 99)) < 3.0);
}

static void exact_values_never_move(void **state) {
  (void)state;
  static const uint32_t words[] = {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, 0x1fffu, 0x12345678u, 0xffffffffu};
  for (uint32_t h = 0; h <= 0xffffu; h++) {
    float b = lamp_bf16_to_f32((uint16_t)h), f = lamp_f16_to_f32((uint16_t)h);
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
      /* NaN as rounding to nearest does it (quieted); every number stays itself */
      uint16_t want_b = isnan(b) ? lamp_f32_to_bf16(b) : (uint16_t)h, want_f = isnan(f) ? lamp_f32_to_f16(f) : (uint16_t)h;
      if (lamp_f32_to_bf16_sr(b, words[k]) != want_b) fail_msg("bf16 %04x moved with r %08x", h, words[k]);
      if (lamp_f32_to_f16_sr(f, words[k]) != want_f) fail_msg("fp16 %04x moved with r %08x", h, words[k]);
    }
  }
}

/* ---- edges ------------------------------------------------------------------------------------ */

/* The 16-bit value toward zero and away from it, by the bits: for bf16 the top half and one more. */
static void bf16_neighbours(float x, uint16_t *down, uint16_t *up) {
  uint32_t b = bits_of(x);
  *down = (uint16_t)(b >> 16);
  *up = (uint16_t)((b & 0xffffu) ? *down + 1 : *down);
}

static void the_random_word_decides_between_the_neighbours(void **state) {
  (void)state;
  for (int k = 0; k < 200000; k++) {
    float x = float_of((next_u32() & 0x7f7effffu) | (next_u32() & 0x80000000u)); /* finite, below bf16's max */
    uint16_t down, up;
    bf16_neighbours(x, &down, &up);
    assert_int_equal(lamp_f32_to_bf16_sr(x, 0), down);
    assert_int_equal(lamp_f32_to_bf16_sr(x, 0xffffffffu), up);
    uint16_t s = lamp_f32_to_bf16_sr(x, next_u32());
    assert_true(s == down || s == up);
  }
  /* fp16: truncation with r = 0, away from zero with all ones unless exact; always one of the
     two (subnormals see up to 32 dropped bits) */
  for (int k = 0; k < 200000; k++) {
    float x = (float)((double)(next_u32() & 0xffffff) * ldexp(1.0, (int)(next_u32() % 64) - 70));
    if (next_u32() & 1) x = -x;
    if (fabsf(x) > 65504.0f) continue;
    uint16_t down = lamp_f32_to_f16_sr(x, 0), up = lamp_f32_to_f16_sr(x, 0xffffffffu);
    double v = fabs((double)x), vd = fabs((double)lamp_f16_to_f32(down)), vu = fabs((double)lamp_f16_to_f32(up));
    if (v >= 0x1p-33) {
      if (!(vd <= v && v <= vu)) fail_msg("%a rounds to %a and %a", (double)x, vd, vu);
      assert_true(vu == vd || lamp_f16_to_f32((uint16_t)((down & 0x7fffu) + 1)) == (float)vu);
      assert_true((vd == v) == (vu == v)); /* up moves exactly when x is inexact */
    } else { /* under 2^-33 only the first 32 bits of the fraction of 2^-24 count */
      assert_true(vd == 0.0);
      assert_true(vu == (v >= 0x1p-56 ? 0x1p-24 : 0.0));
    }
    uint16_t s = lamp_f32_to_f16_sr(x, next_u32());
    assert_true(s == down || s == up);
  }
}

static void beyond_the_largest_finite_value_it_rounds_to_nearest(void **state) {
  (void)state;
  static const uint32_t words[] = {0u, 0xffffu, 0xffffffffu, 0x5555aaaau};
  /* bf16: (max, max + half a spacing) keeps max, the tie and above are inf; inf and NaN as nearest */
  static const uint32_t bf16_inputs[] = {0x7f7f0001u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0x7f800000u,
                                         0x7f800001u, 0x7fc12345u, 0xff7f4000u, 0xff800000u, 0xffffffffu};
  static const uint16_t bf16_want[] = {0x7f7f, 0x7f7f, 0x7f80, 0x7f80, 0x7f80, 0x7fc0, 0x7fc1, 0xff7f, 0xff80, 0xffff};
  for (size_t i = 0; i < sizeof bf16_inputs / sizeof bf16_inputs[0]; i++)
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
      assert_int_equal(lamp_f32_to_bf16_sr(float_of(bf16_inputs[i]), words[k]), bf16_want[i]);
      assert_int_equal(lamp_f32_to_bf16_sr(float_of(bf16_inputs[i]), words[k]), lamp_f32_to_bf16(float_of(bf16_inputs[i])));
    }
  /* fp16: 65504 < |x| < 65520 keeps 65504, 65520 and above are inf */
  static const float f16_inputs[] = {65504.5f, 65519.0f, -65510.0f, 65520.0f, 1e6f, -1e30f, INFINITY, NAN};
  static const uint16_t f16_want[] = {0x7bff, 0x7bff, 0xfbff, 0x7c00, 0x7c00, 0xfc00, 0x7c00, 0x7e00};
  for (size_t i = 0; i < sizeof f16_inputs / sizeof f16_inputs[0]; i++)
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
      assert_int_equal(lamp_f32_to_f16_sr(f16_inputs[i], words[k]), f16_want[i]);
  /* signed zeros and fp32 subnormals */
  assert_int_equal(lamp_f32_to_bf16_sr(-0.0f, 0xffffffffu), 0x8000);
  assert_int_equal(lamp_f32_to_f16_sr(-0.0f, 0xffffffffu), 0x8000);
  assert_int_equal(lamp_f32_to_bf16_sr(float_of(0x00000001u), 0xffffu), 0x0001); /* bf16 has these subnormals */
  assert_int_equal(lamp_f32_to_f16_sr(float_of(0x807fffffu), 0xffffffffu), 0x8000);
}

/* ---- bulk and the backend ------------------------------------------------------------------- */

static float *random_values(size_t n) {
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++) x[i] = (float)((double)(int32_t)next_u32() * 0x1p-40);
  x[n / 3] = INFINITY;
  x[n / 2] = NAN;
  return x;
}

static void bulk_equals_the_scalar_form(void **state) {
  (void)state;
  const size_t n = 1000;
  float *x = random_values(n);
  uint16_t out[1000 + 8];
  static const uint64_t firsts[] = {0, 1, 63, 64, 65, 1000, (UINT64_C(1) << 34) - 3};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; f++)
      for (size_t len = 0; len <= n; len += len < 200 ? 1 : 199) {
        memset(out, 0xa5, sizeof out);
        if (bf16) lamp_f32_to_bf16_sr_n(out, x, len, 99, 5, firsts[f]);
        else lamp_f32_to_f16_sr_n(out, x, len, 99, 5, firsts[f]);
        for (size_t i = 0; i < len; i++) {
          uint32_t r = lamp_philox_word(99, 5, firsts[f] + i);
          uint16_t want = bf16 ? lamp_f32_to_bf16_sr(x[i], r) : lamp_f32_to_f16_sr(x[i], r);
          if (out[i] != want) fail_msg("%s, first %llu, length %zu: element %zu is %04x, expected %04x", bf16 ? "bf16" : "fp16",
                                       (unsigned long long)firsts[f], len, i, out[i], want);
        }
        for (size_t i = len; i < n + 8; i++) assert_int_equal(out[i], 0xa5a5); /* nothing past the end */
      }
  free(x);
}

/* Over the CPU's split threshold, so two threads take a half each. */
#define BIG 300001

static void the_backend_bytes_depend_on_nothing_else(void **state) {
  (void)state;
  float *x = random_values(BIG);
  uint16_t *one = malloc(BIG * 2), *two = malloc(BIG * 2), *sim_copy = malloc(BIG * 2), *want = malloc(BIG * 2);
  assert_true(one && two && sim_copy && want);
  float *sim_x = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, BIG * sizeof(float));
  uint16_t *sim_y = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, BIG * 2);
  assert_true(sim_x != NULL && sim_y != NULL);
  OK(lamp_copy(LAMP_SIM, sim_x, LAMP_HOST, x, BIG * sizeof(float)));
  int threads = openblas_get_num_threads();
  static const lamp_dtype dtypes[] = {LAMP_BF16, LAMP_F16};
  for (int d = 0; d < 2; d++) {
    openblas_set_num_threads(1);
    OK(lamp_round_stochastic(LAMP_CPU, one, dtypes[d], x, BIG, 2024, 17));
    openblas_set_num_threads(2);
    OK(lamp_round_stochastic(LAMP_CPU, two, dtypes[d], x, BIG, 2024, 17));
    openblas_set_num_threads(threads);
    OK(lamp_round_stochastic(LAMP_SIM, sim_y, dtypes[d], sim_x, BIG, 2024, 17));
    OK(lamp_copy(LAMP_HOST, sim_copy, LAMP_SIM, sim_y, BIG * 2));
    if (dtypes[d] == LAMP_BF16) lamp_f32_to_bf16_sr_n(want, x, BIG, 2024, 17, 0);
    else lamp_f32_to_f16_sr_n(want, x, BIG, 2024, 17, 0);
    assert_memory_equal(one, want, BIG * 2);
    assert_memory_equal(two, want, BIG * 2);
    assert_memory_equal(sim_copy, want, BIG * 2);
    /* another stream or seed draws other bits */
    OK(lamp_round_stochastic(LAMP_CPU, two, dtypes[d], x, BIG, 2024, 18));
    assert_memory_not_equal(one, two, BIG * 2);
    OK(lamp_round_stochastic(LAMP_CPU, two, dtypes[d], x, BIG, 2025, 17));
    assert_memory_not_equal(one, two, BIG * 2);
  }
  lamp_mem_free(sim_x);
  lamp_mem_free(sim_y);
  free(x), free(one), free(two), free(sim_copy), free(want);
}

static void the_backend_refuses_with_reasons(void **state) {
  (void)state;
  float x[2] = {1.0f, 2.0f};
  uint16_t y[2];
  assert_int_equal(lamp_round_stochastic(LAMP_CPU, y, LAMP_F32, x, 2, 1, 1), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "round_stochastic: dtype f32 not supported for dst (expected f16 or bf16)");
  assert_int_equal(lamp_round_stochastic(LAMP_CPU, y, LAMP_I32, x, 2, 1, 1), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "round_stochastic: dtype i32 not supported for dst (expected f16 or bf16)");
  assert_int_equal(lamp_round_stochastic(LAMP_CPU, NULL, LAMP_BF16, x, 2, 1, 1), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "round_stochastic: dst is NULL");
  assert_int_equal(lamp_round_stochastic(LAMP_CPU, y, LAMP_F16, NULL, 2, 1, 1), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "round_stochastic: src is NULL");
  OK(lamp_round_stochastic(LAMP_CPU, NULL, LAMP_F16, NULL, 0, 1, 1));
  assert_int_equal(lamp_round_stochastic(LAMP_SIM, y, LAMP_BF16, x, 2, 1, 1), LAMP_ERR_INVALID_ARG);
  const char *refusal = "sim: round_stochastic: argument dst is not memory of the simulated device (";
  assert_memory_equal(lamp_last_error(), refusal, strlen(refusal));
}

static int register_sim(void **state) {
  (void)state;
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(philox_gives_the_known_answers),
      cmocka_unit_test(groups_follow_the_layout),
      cmocka_unit_test(rounding_is_unbiased),
      cmocka_unit_test(rounding_to_nearest_fails_the_same_test),
      cmocka_unit_test(exact_values_never_move),
      cmocka_unit_test(the_random_word_decides_between_the_neighbours),
      cmocka_unit_test(beyond_the_largest_finite_value_it_rounds_to_nearest),
      cmocka_unit_test(bulk_equals_the_scalar_form),
      cmocka_unit_test(the_backend_bytes_depend_on_nothing_else),
      cmocka_unit_test(the_backend_refuses_with_reasons),
  };
  return cmocka_run_group_tests(tests, register_sim, NULL);
}
