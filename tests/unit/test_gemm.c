/*
** lamp_gemm against a naive triple loop in double on the same (widened) inputs, for every
** transpose combination, every A/B/C dtype combination, odd sizes, padded strides and several
** alpha/beta pairs. Two kinds of data:
**   - "exact": small dyadic values whose products and sums fp32 represents exactly, so the
**     result must equal the reference rounded to C's dtype bit for bit;
**   - "random": uniform values, f32 C within 1e-5 of the magnitude sum |alpha a b| + |beta c|,
**     16-bit C within 1 ulp of the rounded reference (or within that fp32 error budget, which
**     only matters where cancellation leaves a result far smaller than its terms).
*/
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
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/ledger.h"
#include "test_support.h"

/* ---- data --------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

typedef enum data_kind { EXACT, RANDOM } data_kind;

/* EXACT: k/8 for k in [-8, 8], exact in every dtype. RANDOM: uniform in [-1, 1). */
static float next_value(data_kind kind) {
  if (kind == EXACT) return (float)((int)(next_random() % 17u) - 8) / 8.0f;
  return (float)(next_random() >> 8) / 8388608.0f - 1.0f;
}

/* A matrix stored in `dtype` (rows x cols, row stride ld) and its exact fp32 widening, packed.
   Padding between rows holds NaN: the kernel must never read it. */
typedef struct matrix {
  void *data;
  float *wide;
  lamp_dtype dtype;
  size_t rows, cols, ld;
} matrix;

static void store_value(matrix *x, size_t index, float v) { store_f32_as(x->dtype, x->data, index, v); }

static float load_value(const matrix *x, size_t index) { return load_as_f32(x->dtype, x->data, index); }

static matrix make_matrix(lamp_dtype dtype, size_t rows, size_t cols, size_t ld, data_kind kind,
                          int fill_nan) {
  matrix x = {NULL, NULL, dtype, rows, cols, ld};
  size_t count = rows * ld + 1;
  x.data = malloc(count * lamp_dtype_size(dtype));
  x.wide = malloc((rows * cols + 1) * sizeof(float));
  assert_non_null(x.data);
  assert_non_null(x.wide);
  for (size_t i = 0; i < count; i++) store_value(&x, i, NAN);
  for (size_t r = 0; r < rows; r++) {
    for (size_t c = 0; c < cols; c++) {
      if (!fill_nan) store_value(&x, r * ld + c, next_value(kind));
      x.wide[r * cols + c] = load_value(&x, r * ld + c);
    }
  }
  return x;
}

static void free_matrix(matrix *x) {
  free(x->data);
  free(x->wide);
}

/* ---- reference and comparison ----------------------------------------------------------- */

typedef struct gemm_case {
  int trans_a, trans_b;
  size_t m, n, k;
  float alpha, beta;
  lamp_dtype a, b, c;
  data_kind kind;
  int padded; /* row strides larger than the rows */
} gemm_case;

static double op_at(const matrix *x, int trans, size_t i, size_t j) {
  return trans ? x->wide[j * x->cols + i] : x->wide[i * x->cols + j];
}

/* ref = alpha * op(A) op(B) + beta * C0 in double; mag = the same with absolute values. */
static void reference(const gemm_case *t, const matrix *a, const matrix *b, const matrix *c0,
                      double *ref, double *mag) {
  for (size_t i = 0; i < t->m; i++) {
    for (size_t j = 0; j < t->n; j++) {
      double sum = 0.0, abs_sum = 0.0;
      for (size_t p = 0; p < t->k; p++) {
        double term = op_at(a, t->trans_a, i, p) * op_at(b, t->trans_b, p, j);
        sum += term;
        abs_sum += fabs(term);
      }
      double c_term = t->beta == 0.0f ? 0.0 : (double)t->beta * c0->wide[i * t->n + j];
      ref[i * t->n + j] = (double)t->alpha * sum + c_term;
      mag[i * t->n + j] = fabs((double)t->alpha) * abs_sum + fabs(c_term);
    }
  }
}

/* Sign-magnitude 16-bit patterns as ordered integers, so adjacent values differ by 1. */
static long ordered16(uint16_t h) { return (h & 0x8000u) ? -(long)(h & 0x7fffu) : (long)h; }

static uint16_t round16(lamp_dtype dtype, double v) {
  return dtype == LAMP_F16 ? lamp_f32_to_f16((float)v) : lamp_f32_to_bf16((float)v);
}

static const char *describe(const gemm_case *t) {
  static char text[200];
  snprintf(text, sizeof text, "%s%s m=%zu n=%zu k=%zu alpha=%g beta=%g A=%s B=%s C=%s %s%s",
           t->trans_a ? "T" : "N", t->trans_b ? "T" : "N", t->m, t->n, t->k, (double)t->alpha,
           (double)t->beta, lamp_dtype_name(t->a), lamp_dtype_name(t->b), lamp_dtype_name(t->c),
           t->kind == EXACT ? "exact" : "random", t->padded ? " padded" : "");
  return text;
}

static void check_element(const gemm_case *t, const matrix *c, size_t i, size_t j, double ref,
                          double mag) {
  size_t at = i * c->ld + j;
  double got = load_value(c, at);
  double budget = 1e-5 * mag;
  if (t->c == LAMP_F32) {
    double want = t->kind == EXACT ? (double)(float)ref : ref;
    if (t->kind == EXACT ? got != want : !(fabs(got - want) <= budget))
      fail_msg("%s: C[%zu,%zu] = %.9g, expected %.9g", describe(t), i, j, got, want);
    return;
  }
  uint16_t got_bits = ((const uint16_t *)c->data)[at], want_bits = round16(t->c, ref);
  long ulps = labs(ordered16(got_bits) - ordered16(want_bits));
  int ok = t->kind == EXACT ? ulps == 0 : (ulps <= 1 || fabs(got - ref) <= budget);
  if (!ok)
    fail_msg("%s: C[%zu,%zu] = %04x, expected %04x (%.9g)", describe(t), i, j, got_bits,
             want_bits, ref);
}

/* ---- running one case ------------------------------------------------------------------- */

static void run_case(const gemm_case *t) {
  size_t pad = t->padded ? 3 : 0;
  size_t a_rows = t->trans_a ? t->k : t->m, a_cols = t->trans_a ? t->m : t->k;
  size_t b_rows = t->trans_b ? t->n : t->k, b_cols = t->trans_b ? t->k : t->n;
  matrix a = make_matrix(t->a, a_rows, a_cols, a_cols + pad, t->kind, 0);
  matrix b = make_matrix(t->b, b_rows, b_cols, b_cols + pad, t->kind, 0);
  /* beta == 0: C starts as NaN everywhere, which must not leak into the result. */
  matrix c = make_matrix(t->c, t->m, t->n, t->n + pad, t->kind, t->beta == 0.0f);
  double *ref = malloc((t->m * t->n + 1) * sizeof *ref), *mag = malloc((t->m * t->n + 1) * sizeof *mag);
  assert_non_null(ref);
  assert_non_null(mag);
  reference(t, &a, &b, &c, ref, mag);
  lamp_status s = lamp_gemm(LAMP_CPU, t->trans_a, t->trans_b, t->m, t->n, t->k, t->alpha, a.data,
                            t->a, a.ld, b.data, t->b, b.ld, t->beta, c.data, t->c, c.ld);
  if (s != LAMP_OK) fail_msg("%s: %s", describe(t), lamp_last_error());
  for (size_t i = 0; i < t->m; i++)
    for (size_t j = 0; j < t->n; j++) check_element(t, &c, i, j, ref[i * t->n + j], mag[i * t->n + j]);
  for (size_t i = 0; i < t->m; i++) /* the padding of C is left alone */
    for (size_t j = t->n; j < c.ld; j++) assert_true(isnan(load_value(&c, i * c.ld + j)));
  free(ref);
  free(mag);
  free_matrix(&a);
  free_matrix(&b);
  free_matrix(&c);
}

static const lamp_dtype float_dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};
static const size_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 48, 40}};
static const float scalars[][2] = {{1.0f, 0.0f}, {1.5f, -0.5f}, {-1.0f, 1.0f}, {0.5f, 0.0f}};

/* Every transpose pair x shape x alpha/beta x dtype triple for one kind of data. */
static void sweep(data_kind kind) {
  for (int tr = 0; tr < 4; tr++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (size_t ab = 0; ab < sizeof scalars / sizeof scalars[0]; ab++)
        for (int d = 0; d < 27; d++) {
          gemm_case t = {tr & 1, tr >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                         scalars[ab][0], scalars[ab][1], float_dtypes[d % 3],
                         float_dtypes[(d / 3) % 3], float_dtypes[d / 9], kind,
                         (int)((s + ab) % 2) /* alternate packed and padded strides */};
          run_case(&t);
        }
}

static void exact_data_matches_bit_for_bit(void **state) {
  (void)state;
  sweep(EXACT);
}

static void random_data_matches_within_tolerance(void **state) {
  (void)state;
  sweep(RANDOM);
}

/* A wide-ish product where OpenBLAS takes its blocked path and 16-bit C is rounded in bulk. */
static void larger_product(void **state) {
  (void)state;
  gemm_case t = {0, 1, 128, 200, 300, 1.0f, 0.0f, LAMP_BF16, LAMP_F16, LAMP_BF16, RANDOM, 0};
  run_case(&t);
  gemm_case u = {1, 0, 130, 70, 257, 0.75f, 0.25f, LAMP_F32, LAMP_BF16, LAMP_F16, EXACT, 1};
  run_case(&u);
}

/* ---- corners -------------------------------------------------------------------------- */

static void empty_m_or_n_touches_nothing(void **state) {
  (void)state;
  float c = 7.0f;
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 0, 1, 4, 1.0f, NULL, LAMP_F32, 4, NULL, LAMP_F32, 1,
                             0.0f, &c, LAMP_F32, 1), LAMP_OK);
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 1, 0, 4, 1.0f, NULL, LAMP_F16, 4, NULL, LAMP_BF16, 0,
                             0.0f, NULL, LAMP_F32, 0), LAMP_OK);
  assert_true(c == 7.0f);
}

/* k == 0: the product is empty, so C = beta * C; with beta == 0 even a NaN C becomes 0. */
static void empty_k_scales_c(void **state) {
  (void)state;
  for (int d = 0; d < 3; d++) {
    matrix c = make_matrix(float_dtypes[d], 3, 5, 6, EXACT, 0);
    assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 3, 5, 0, 1.0f, NULL, LAMP_F32, 1, NULL, LAMP_F32, 5,
                               -2.0f, c.data, c.dtype, c.ld), LAMP_OK);
    for (size_t i = 0; i < 15; i++)
      assert_true(load_value(&c, (i / 5) * 6 + i % 5) == -2.0f * c.wide[i]);
    free_matrix(&c);
    matrix z = make_matrix(float_dtypes[d], 3, 5, 5, EXACT, 1);
    assert_int_equal(lamp_gemm(LAMP_CPU, 1, 1, 3, 5, 0, 1.0f, NULL, LAMP_F32, 3, NULL, LAMP_F32, 0,
                               0.0f, z.data, z.dtype, z.ld), LAMP_OK);
    for (size_t i = 0; i < 15; i++) assert_true(load_value(&z, i) == 0.0f);
    free_matrix(&z);
  }
}

static void unsupported_dtypes_are_named(void **state) {
  (void)state;
  float a[4] = {0}, b[4] = {0}, c[4] = {0};
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 2, 2, 1.0f, a, LAMP_I32, 2, b, LAMP_F32, 2, 0.0f,
                             c, LAMP_F32, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: dtype i32 not supported for A (expected f32, f16 or bf16)");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 2, 2, 1.0f, a, LAMP_F16, 2, b, LAMP_U8, 2, 0.0f,
                             c, LAMP_F32, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: dtype u8 not supported for B (expected f32, f16 or bf16)");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 2, 2, 1.0f, a, LAMP_F32, 2, b, LAMP_F32, 2, 0.0f,
                             c, LAMP_I32, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: dtype i32 not supported for C (expected f32, f16 or bf16)");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 2, 2, 1.0f, a, LAMP_F32, 2, b, LAMP_F32, 2, 0.0f,
                             c, (lamp_dtype)99, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: dtype ? not supported for C (expected f32, f16 or bf16)");
}

static void bad_strides_and_devices_are_errors(void **state) {
  (void)state;
  float a[6] = {0}, b[6] = {0}, c[6] = {0};
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 3, 2, 1.0f, a, LAMP_F32, 1, b, LAMP_F32, 3, 0.0f,
                             c, LAMP_F32, 3), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "gemm: lda = 1 is smaller than the row length 2");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 1, 2, 3, 2, 1.0f, a, LAMP_F32, 2, b, LAMP_F32, 1, 0.0f,
                             c, LAMP_F32, 3), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "gemm: ldb = 1 is smaller than the row length 2");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 3, 2, 1.0f, a, LAMP_F32, 2, b, LAMP_F32, 3, 0.0f,
                             c, LAMP_F32, 2), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "gemm: ldc = 2 is smaller than the row length 3");
  assert_int_equal(lamp_gemm(LAMP_CPU, 0, 0, 2, 3, 2, 1.0f, NULL, LAMP_F32, 2, b, LAMP_F32, 3,
                             0.0f, c, LAMP_F32, 3), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "gemm: A is NULL");
  assert_int_equal(lamp_gemm(LAMP_CUDA, 0, 0, 2, 3, 2, 1.0f, a, LAMP_F32, 2, b, LAMP_F32, 3, 0.0f,
                             c, LAMP_F32, 3), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "gemm: " LAMP_TEST_CUDA_UNAVAILABLE); /* the cuda module's reason */
}

/* The 16-bit path reuses one workspace: a repeat call allocates nothing more. */
static void workspace_is_reused_and_released(void **state) {
  (void)state;
  lamp_cpu_workspace_release();
  size_t before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current;
  gemm_case t = {0, 0, 16, 16, 16, 1.0f, 0.0f, LAMP_F16, LAMP_F16, LAMP_F16, EXACT, 0};
  run_case(&t);
  size_t held = lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current;
  assert_true(held >= before + 3 * 16 * 16 * sizeof(float));
  run_case(&t);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current, held);
  lamp_cpu_workspace_release();
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current, before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exact_data_matches_bit_for_bit),
      cmocka_unit_test(random_data_matches_within_tolerance),
      cmocka_unit_test(larger_product),
      cmocka_unit_test(empty_m_or_n_touches_nothing),
      cmocka_unit_test(empty_k_scales_c),
      cmocka_unit_test(unsupported_dtypes_are_named),
      cmocka_unit_test(bad_strides_and_devices_are_errors),
      cmocka_unit_test(workspace_is_reused_and_released),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
