/*
** The per-channel kernels (BatchNorm's statistics, normalisation and input gradient) read 16-bit
** inputs as they are, widening a chunk at a time. Widening is exact and the arithmetic is fp32
** either way, so every result must equal, bit for bit, the same kernel run on an fp32 copy of the
** inputs: over rows shorter than a block, exactly one chunk, and several chunks with a tail, with
** and without a ReLU mask. The sums are also checked against double-precision references.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

#define N 3
#define C 2
#define MAX_HW 1003

static const size_t plane_sizes[] = {7, 512, 1003};
static const lamp_dtype half_types[] = {LAMP_F16, LAMP_BF16};

static uint32_t rng_state = 99u;

static float next_value(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((int32_t)((rng_state >> 8) % 8192) - 4096) / 1024.0f;
}

/* n random values rounded to dtype: *half holds them in dtype, *wide the same values in fp32. */
static void fill(uint16_t *half, float *wide, size_t n, lamp_dtype dtype) {
  for (size_t i = 0; i < n; i++) {
    float v = next_value();
    half[i] = dtype == LAMP_F16 ? lamp_f32_to_f16(v) : lamp_f32_to_bf16(v);
    wide[i] = dtype == LAMP_F16 ? lamp_f16_to_f32(half[i]) : lamp_bf16_to_f32(half[i]);
  }
}

/* NaN, -0, +-inf and the smallest subnormal planted every 64 elements from `offset` (a's and b's
   offsets differ, so no element meets two NaNs, whose order of operands would pick the result). */
static void plant_specials(uint16_t *half, float *wide, size_t n, lamp_dtype dtype, size_t offset) {
  static const uint16_t bf16[] = {0x7fc1u, 0x8000u, 0x7f80u, 0xff80u, 0x0001u, 0x8001u};
  static const uint16_t f16[] = {0x7e01u, 0x8000u, 0x7c00u, 0xfc00u, 0x0001u, 0x8001u};
  const uint16_t *v = dtype == LAMP_F16 ? f16 : bf16;
  for (size_t i = offset, s = 0; i < n; i += 64, s = (s + 1) % 6) {
    half[i] = v[s];
    wide[i] = dtype == LAMP_F16 ? lamp_f16_to_f32(half[i]) : lamp_bf16_to_f32(half[i]);
  }
}

typedef struct data {
  uint16_t a16[N * C * MAX_HW], b16[N * C * MAX_HW], out16[N * C * MAX_HW];
  float a32[N * C * MAX_HW], b32[N * C * MAX_HW], out32[N * C * MAX_HW];
} data;

/* Coefficients with full mantissas, so a product or sum taken in another order rounds apart;
   channel 1's shift is -0, so -0 inputs come out of the affine map as -0, which its ReLU zeroes. */
static const float center[C] = {0.25f, -1.5f}, scale[C] = {0.7517f, 1.3109f}, shift[C] = {0.4931f, -0.0f};
static const float p[C] = {1.0917f, -0.5303f}, q[C] = {-0.2711f, 1.9377f}, r[C] = {0.0613f, -2.9713f};

static void same_bits(const void *x, const void *y, size_t bytes, const char *what, lamp_dtype dtype, size_t hw) {
  if (memcmp(x, y, bytes) != 0)
    fail_msg("%s: %s input differs from its fp32 copy (hw = %zu)", what, lamp_dtype_name(dtype), hw);
}

/* a and b at random, with the specials planted in each. */
static void fill_both(data *d, size_t n, lamp_dtype dtype) {
  fill(d->a16, d->a32, n, dtype);
  fill(d->b16, d->b32, n, dtype);
  plant_specials(d->a16, d->a32, n, dtype, 3);
  plant_specials(d->b16, d->b32, n, dtype, 35);
}

static void check_reduce(data *d, lamp_dtype dtype, size_t hw, const lamp_relu_mask *mask) {
  double s16[C], d16[C], s32[C], d32[C];
  if (mask != NULL) {
    assert_int_equal(lamp_cpu_channel_reduce_masked(d->a16, dtype, d->b16, dtype, center, mask, N, C, hw, s16, d16),
                     LAMP_OK);
    assert_int_equal(
        lamp_cpu_channel_reduce_masked(d->a32, LAMP_F32, d->b32, LAMP_F32, center, mask, N, C, hw, s32, d32), LAMP_OK);
  } else {
    assert_int_equal(lamp_cpu_channel_reduce(d->a16, dtype, center, d->b16, dtype, center, N, C, hw, s16, d16),
                     LAMP_OK);
    assert_int_equal(lamp_cpu_channel_reduce(d->a32, LAMP_F32, center, d->b32, LAMP_F32, center, N, C, hw, s32, d32),
                     LAMP_OK);
  }
  same_bits(s16, s32, sizeof s16, mask ? "channel_reduce_masked sum" : "channel_reduce sum", dtype, hw);
  same_bits(d16, d32, sizeof d16, mask ? "channel_reduce_masked dot" : "channel_reduce dot", dtype, hw);
  for (size_t k = 0; k < C; k++) { /* against double sums: rows in fp32, so a relative 1e-5 */
    double sa = 0.0, sab = 0.0, mag_a = 0.0, mag_ab = 0.0;
    for (size_t i = 0; i < N; i++)
      for (size_t e = 0; e < hw; e++) {
        size_t at = (i * C + k) * hw + e;
        double a = d->a32[at], b = d->b32[at];
        if (mask != NULL && !(d->b32[at] * scale[k] + shift[k] > mask->zero_bound)) a = 0.0;
        double ac = a - (mask != NULL ? 0.0f : center[k]); /* the masked form takes no a_center */
        sa += a;
        sab += ac * (b - center[k]);
        mag_a += fabs(a);
        mag_ab += fabs(ac * (b - center[k]));
      }
    assert_true(fabs(s32[k] - sa) <= 1e-5 * mag_a + 1e-30);
    assert_true(fabs(d32[k] - sab) <= 1e-5 * mag_ab + 1e-30);
  }
}

static void channel_reduce_reads_16_bit_inputs_exactly(void **state) {
  (void)state;
  static data d;
  for (size_t t = 0; t < 2; t++)
    for (size_t s = 0; s < sizeof plane_sizes / sizeof *plane_sizes; s++) {
      size_t hw = plane_sizes[s], n = N * C * hw;
      fill(d.a16, d.a32, n, half_types[t]);
      fill(d.b16, d.b32, n, half_types[t]);
      lamp_relu_mask mask = {scale, shift, half_types[t] == LAMP_F16 ? LAMP_F16_ZERO_BOUND : LAMP_BF16_ZERO_BOUND};
      check_reduce(&d, half_types[t], hw, NULL);
      check_reduce(&d, half_types[t], hw, &mask);
    }
}

/* The affine pass and the input-gradient combine: 16-bit in and out against fp32 in, rounded. */
static void affine_and_combine_read_16_bit_inputs_exactly(void **state) {
  (void)state;
  static data d;
  static uint16_t want[N * C * MAX_HW];
  for (size_t t = 0; t < 2; t++)
    for (size_t s = 0; s < sizeof plane_sizes / sizeof *plane_sizes; s++) {
      lamp_dtype dt = half_types[t];
      size_t hw = plane_sizes[s], n = N * C * hw;
      fill_both(&d, n, dt);
      for (int relu = 0; relu < 2; relu++) {
        assert_int_equal(lamp_cpu_channel_affine(d.out16, dt, d.a16, dt, scale, shift, N, C, hw, relu), LAMP_OK);
        assert_int_equal(lamp_cpu_channel_affine(want, dt, d.a32, LAMP_F32, scale, shift, N, C, hw, relu), LAMP_OK);
        same_bits(d.out16, want, n * sizeof *want, "channel_affine", dt, hw);
      }
      lamp_relu_mask mask = {scale, shift, dt == LAMP_F16 ? LAMP_F16_ZERO_BOUND : LAMP_BF16_ZERO_BOUND};
      assert_int_equal(lamp_cpu_channel_combine_typed(d.out16, dt, d.a16, dt, d.b16, dt, p, q, r, N, C, hw), LAMP_OK);
      assert_int_equal(lamp_cpu_channel_combine_typed(want, dt, d.a32, LAMP_F32, d.b32, LAMP_F32, p, q, r, N, C, hw),
                       LAMP_OK);
      same_bits(d.out16, want, n * sizeof *want, "channel_combine", dt, hw);
      assert_int_equal(lamp_cpu_channel_combine_masked(d.out16, dt, d.a16, dt, d.b16, dt, p, q, r, &mask, N, C, hw),
                       LAMP_OK);
      assert_int_equal(lamp_cpu_channel_combine_masked(d.out32, LAMP_F32, d.a32, LAMP_F32, d.b32, LAMP_F32, p, q, r,
                                                       &mask, N, C, hw),
                       LAMP_OK);
      for (size_t i = 0; i < n; i++) { /* the masked combine against its definition */
        size_t k = i / hw % C;
        float a = d.b32[i] * scale[k] + shift[k] > mask.zero_bound ? d.a32[i] : 0.0f;
        float v = p[k] * a + q[k] * d.b32[i] + r[k];
        if (memcmp(&v, &d.out32[i], sizeof v) != 0) fail_msg("channel_combine_masked: element %zu", i);
        want[i] = dt == LAMP_F16 ? lamp_f32_to_f16(v) : lamp_f32_to_bf16(v);
      }
      same_bits(d.out16, want, n * sizeof *want, "channel_combine_masked", dt, hw);
    }
}

/* y = a + b (and its ReLU): 16-bit in and out against fp32 in, rounded, also in place. */
static void add_reads_16_bit_inputs_exactly(void **state) {
  (void)state;
  static data d;
  static uint16_t want[N * C * MAX_HW];
  for (size_t t = 0; t < 2; t++)
    for (size_t s = 0; s < sizeof plane_sizes / sizeof *plane_sizes; s++) {
      lamp_dtype dt = half_types[t];
      size_t n = N * C * plane_sizes[s];
      fill_both(&d, n, dt);
      for (size_t i = 0; i < n; i++) /* -0 + -0 is -0, which the ReLU zeroes */
        if (d.a16[i] == 0x8000u) d.b16[i] = 0x8000u, d.b32[i] = -0.0f;
      for (int relu = 0; relu < 2; relu++) {
        assert_int_equal(lamp_cpu_add(d.out16, dt, d.a16, dt, d.b16, dt, n, relu), LAMP_OK);
        assert_int_equal(lamp_cpu_add(want, dt, d.a32, LAMP_F32, d.b32, LAMP_F32, n, relu), LAMP_OK);
        same_bits(d.out16, want, n * sizeof *want, "add", dt, n);
      }
      memcpy(d.out16, d.a16, n * sizeof *d.out16);
      assert_int_equal(lamp_cpu_add_into(d.out16, dt, d.b16, dt, n), LAMP_OK);
      assert_int_equal(lamp_cpu_add(want, dt, d.a32, LAMP_F32, d.b32, LAMP_F32, n, 0), LAMP_OK);
      same_bits(d.out16, want, n * sizeof *want, "add_into", dt, n);
    }
}

static void errors_name_the_kernel(void **state) {
  (void)state;
  double s[C], dd[C];
  float x[4] = {0};
  assert_int_equal(lamp_cpu_channel_reduce(x, LAMP_I32, NULL, NULL, LAMP_F32, NULL, 1, 1, 4, s, dd),
                   LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "channel_reduce: dtype i32 not supported for a (expected f32, f16 or bf16)");
  assert_int_equal(lamp_cpu_channel_reduce_masked(x, LAMP_F32, NULL, LAMP_F32, NULL, NULL, 1, 1, 4, s, dd),
                   LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "channel_reduce_masked: the mask's input b and the mask are required");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(channel_reduce_reads_16_bit_inputs_exactly),
      cmocka_unit_test(affine_and_combine_read_16_bit_inputs_exactly),
      cmocka_unit_test(add_reads_16_bit_inputs_exactly),
      cmocka_unit_test(errors_name_the_kernel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
