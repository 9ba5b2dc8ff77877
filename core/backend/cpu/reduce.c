/* Reductions: bias gradients (sum over rows), squared norms, row arg-max. */
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"

#define BLOCK LAMP_CPU_BLOCK

/* ---- sum_rows ---------------------------------------------------------------------------- */

static void accumulate_f32(float *restrict acc, const float *restrict x, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) acc[i + j] += x[i + j];
  for (; i < n; i++) acc[i] += x[i];
}

/* out = beta * out + alpha * acc; with beta == 0, out is not read (BLAS convention: it may be
   uninitialised). */
static void blend_out(float *out, const float *acc, size_t n, float alpha, float beta) {
  for (size_t i = 0; i < n; i++)
    out[i] = beta == 0.0f ? alpha * acc[i] : beta * out[i] + alpha * acc[i];
}

/* A column chunk at a time: an fp32 accumulator per column, rows added in order. */
static void sum_rows_cpu(float *out, const void *dy, lamp_dtype dtype, size_t rows, size_t cols,
                         float alpha, float beta) {
  float acc[LAMP_CPU_CHUNK], stage[LAMP_CPU_CHUNK];
  for (size_t c0 = 0; c0 < cols; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, cols - c0);
    for (size_t j = 0; j < len; j++) acc[j] = 0.0f;
    for (size_t r = 0; r < rows; r++)
      accumulate_f32(acc, lamp_cpu_read(stage, dy, dtype, r * cols + c0, len), len);
    blend_out(out + c0, acc, len, alpha, beta);
  }
}

lamp_status lamp_cpu_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype,
                          size_t rows, size_t cols, float alpha, float beta) {
  lamp_status s = lamp_cpu_check_float("sum_rows", "dy", dy_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("sum_rows", "out", out, cols);
  if (s == LAMP_OK) s = lamp_cpu_check_data("sum_rows", "dy", dy, rows * cols);
  if (s != LAMP_OK) return s;
  sum_rows_cpu(out, dy, dy_dtype, rows, cols, alpha, beta);
  return LAMP_OK;
}

/* ---- sum_squares --------------------------------------------------------------------------- */

/* Independent partial sums, so the loop vectorises and the dependency chain is short. */
#define SQUARES_LANES 16

/* Squares of floats are exact in double and the summation order is fixed by this source (no
   reassociation without fast-math), so every build and both variants below give the same
   bits for the same input. */
static inline __attribute__((always_inline)) double sum_squares_loop(const float *x, size_t n) {
  double partial[SQUARES_LANES] = {0};
  size_t i = 0;
  for (; i + SQUARES_LANES <= n; i += SQUARES_LANES)
    for (size_t j = 0; j < SQUARES_LANES; j++) partial[j] += (double)x[i + j] * (double)x[i + j];
  double total = 0.0;
  for (; i < n; i++) total += (double)x[i] * (double)x[i];
  for (size_t j = 0; j < SQUARES_LANES; j++) total += partial[j];
  return total;
}

/* Global-norm clipping runs this over every parameter each step: the AVX2 build of the same
   loop (four doubles a register instead of two) is about 1.6x faster where the CPU has it. */
#if defined(__x86_64__) || defined(__i386__)
/* vzeroupper on the way out: the SSE code around would run slowly behind dirty upper halves. */
__attribute__((target("avx2"))) static double sum_squares_avx2(const float *x, size_t n) {
  double total = sum_squares_loop(x, n);
  _mm256_zeroupper();
  return total;
}
#endif

static double sum_squares_cpu(const float *x, size_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (lamp_cpu_has(LAMP_ISA_AVX2)) return sum_squares_avx2(x, n);
#endif
  return sum_squares_loop(x, n);
}

lamp_status lamp_cpu_sum_squares(const float *x, size_t n, double *out) {
  lamp_status s = lamp_cpu_check_data("sum_squares", "x", x, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("sum_squares", "out", out, 1);
  if (s != LAMP_OK) return s;
  *out = sum_squares_cpu(x, n);
  return LAMP_OK;
}

/* ---- argmax_rows --------------------------------------------------------------------------- */

static int32_t row_argmax(const void *x, lamp_dtype dtype, size_t first, size_t cols) {
  float stage[LAMP_CPU_CHUNK];
  float best = -INFINITY;
  size_t index = 0;
  for (size_t c0 = 0; c0 < cols; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, cols - c0);
    lamp_cpu_argmax_fold(lamp_cpu_read(stage, x, dtype, first + c0, len), len, c0, &best, &index);
  }
  return (int32_t)index;
}

lamp_status lamp_cpu_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype,
                             size_t rows, size_t cols) {
  lamp_status s = lamp_cpu_check_float("argmax_rows", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("argmax_rows", "out", out, rows);
  if (s == LAMP_OK) s = lamp_cpu_check_data("argmax_rows", "x", x, rows * cols);
  if (s != LAMP_OK) return s;
  if (rows > 0 && cols == 0) {
    return lamp_error(LAMP_ERR_INVALID_ARG, "argmax_rows: rows of 0 columns have no arg-max");
  }
  if (cols > INT32_MAX) {
    return lamp_error(LAMP_ERR_INVALID_ARG, "argmax_rows: %zu columns exceed the int32 index range", cols);
  }
  for (size_t r = 0; r < rows; r++) out[r] = row_argmax(x, dtype, r * cols, cols);
  return LAMP_OK;
}
