/*
** GEMM: C[m,n] = alpha * op(A) op(B) + beta * C, row-major, through the process's GEMM providers
** (gemm_provider.h: OpenBLAS for fp32; oneDNN's bf16 GEMM where it is installed and the CPU has
** AVX512_BF16).
**
** Two bf16 operands go to the bf16 GEMM as they are, where there is one. Otherwise 16-bit
** operands are widened exactly to fp32 into a workspace and multiplied in fp32 (O(mk + kn + mn)
** against the O(mnk) product). A 16-bit C is computed in an fp32 copy (read widened only when
** beta != 0) and rounded back once.
**
** Workspace: the calling thread's (workspace.c), kept between calls, so steady-state training
** allocates nothing and concurrent calls from different threads are safe.
*/
#include <limits.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_provider.h"
#include "base/error.h"
#include "tensor/half.h"

/* One stored matrix: rows x cols elements with row stride ld, as it sits in memory. */
typedef struct stored_matrix {
  const void *data;
  lamp_dtype dtype;
  size_t rows, cols, ld;
} stored_matrix;

/* At least `floats` floats of this thread's GEMM workspace, or NULL with the error recorded. */
static float *workspace_get(size_t floats) {
  if (floats > SIZE_MAX / sizeof(float)) {
    lamp_error(LAMP_ERR_INVALID_ARG, "a workspace of %zu floats is too large", floats);
    return NULL;
  }
  return lamp_cpu_workspace(LAMP_CPU_WS_GEMM, floats * sizeof(float));
}

/* Floats of workspace a matrix needs: none for f32 (used in place), else rows * cols rounded up
   to 64 bytes so every region of the workspace stays cache-line aligned. */
static size_t region_floats(lamp_dtype dtype, size_t rows, size_t cols) {
  if (dtype == LAMP_F32) return 0;
  return (rows * cols + 15u) & ~(size_t)15u;
}

/* ---- widening and rounding back -------------------------------------------------------- */

static void widen_rows(float *dst, const void *src, lamp_dtype dtype, size_t first, size_t n) {
  if (dtype == LAMP_F16) lamp_f16_to_f32_n(dst, (const uint16_t *)src + first, n);
  else lamp_bf16_to_f32_n(dst, (const uint16_t *)src + first, n);
}

/* A 16-bit matrix widened into dst, packed (ld = cols); one bulk call when already packed. */
static void widen_matrix(float *dst, const stored_matrix *x) {
  if (x->ld == x->cols) {
    widen_rows(dst, x->data, x->dtype, 0, x->rows * x->cols);
    return;
  }
  for (size_t r = 0; r < x->rows; r++) widen_rows(dst + r * x->cols, x->data, x->dtype, r * x->ld, x->cols);
}

/* The fp32 operand sgemm reads: the data itself, or its widened copy in `region`. */
static const float *fp32_operand(const stored_matrix *x, float *region, size_t *ld) {
  if (x->dtype == LAMP_F32) {
    *ld = x->ld;
    return x->data;
  }
  widen_matrix(region, x);
  *ld = x->cols;
  return region;
}

/* Rounds the packed fp32 result back into the 16-bit C, row by row. */
static void narrow_matrix(void *c, lamp_dtype dtype, size_t ldc, const float *src, size_t m,
                          size_t n) {
  for (size_t r = 0; r < m; r++) lamp_cpu_commit(c, dtype, r * ldc, src + r * n, n);
}

/* ---- the product --------------------------------------------------------------------------- */

/* k == 0: the product is empty, so C = beta * C; beta == 0 writes zeros without reading C.
   Done here rather than in BLAS, whose implementations disagree on this corner. */
static void scale_c_only(void *c, lamp_dtype dtype, size_t m, size_t n, size_t ldc, float beta) {
  float stage[LAMP_CPU_CHUNK];
  for (size_t r = 0; r < m; r++) {
    for (size_t c0 = 0; c0 < n; c0 += LAMP_CPU_CHUNK) {
      size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, n - c0), first = r * ldc + c0;
      float *row = beta == 0.0f ? lamp_cpu_scratch(stage, c, dtype, first)
                                : lamp_cpu_edit(stage, c, dtype, first, len);
      for (size_t j = 0; j < len; j++) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
      lamp_cpu_commit(c, dtype, first, row, len);
    }
  }
}

static lamp_status gemm_cpu(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                            const stored_matrix *a, const stored_matrix *b, float beta, void *c,
                            lamp_dtype c_dtype, size_t ldc) {
  if (m == 0 || n == 0) return LAMP_OK;
  if (k == 0) {
    scale_c_only(c, c_dtype, m, n, ldc, beta);
    return LAMP_OK;
  }
  lamp_gemm_choice choice = {NULL, NULL};
  lamp_status s = lamp_gemm_choice_get(&choice);
  if (s != LAMP_OK) return s;
  /* Two bf16 operands go as they are to a provider with a bf16 GEMM; anything else in fp32. */
  int native = choice.bf16 != NULL && a->dtype == LAMP_BF16 && b->dtype == LAMP_BF16;
  size_t a_floats = native ? 0 : region_floats(a->dtype, a->rows, a->cols);
  size_t b_floats = native ? 0 : region_floats(b->dtype, b->rows, b->cols);
  size_t c_floats = region_floats(c_dtype, m, n);
  float *a_region = NULL, *b_region = NULL, *c_region = NULL;
  if (a_floats + b_floats + c_floats > 0) {
    a_region = workspace_get(a_floats + b_floats + c_floats);
    if (a_region == NULL) return lamp_error_context(LAMP_ERR_SYSTEM, "gemm");
    b_region = a_region + a_floats;
    c_region = b_region + b_floats;
  }
  size_t lda = a->ld, ldb = b->ld;
  const void *a_op = native ? a->data : fp32_operand(a, a_region, &lda);
  const void *b_op = native ? b->data : fp32_operand(b, b_region, &ldb);
  float *c32 = c;
  size_t ldc32 = ldc;
  if (c_dtype != LAMP_F32) {
    c32 = c_region;
    ldc32 = n;
    /* beta == 0 leaves the copy unread: the GEMM overwrites it without reading. */
    if (beta != 0.0f) widen_matrix(c32, &(stored_matrix){c, c_dtype, m, n, ldc});
  }
  s = lamp_gemm_run(native ? choice.bf16 : choice.f32, native, trans_a, trans_b, (int)m, (int)n, (int)k, alpha, a_op,
                    (int)lda, b_op, (int)ldb, beta, c32, (int)ldc32);
  if (s == LAMP_OK && c_dtype != LAMP_F32) narrow_matrix(c, c_dtype, ldc, c32, m, n);
  return s;
}

/* ---- validation and dispatch --------------------------------------------------------------- */

static lamp_status check_dtypes(lamp_dtype a, lamp_dtype b, lamp_dtype c) {
  lamp_status s = lamp_cpu_check_float("gemm", "A", a);
  if (s == LAMP_OK) s = lamp_cpu_check_float("gemm", "B", b);
  if (s == LAMP_OK) s = lamp_cpu_check_float("gemm", "C", c);
  return s;
}

/* BLAS takes int sizes; anything larger must be refused before the cast, not wrapped. */
static lamp_status check_int(const char *what, size_t value) {
  if (value <= INT_MAX) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "gemm: %s = %zu exceeds the BLAS limit %d", what, value,
                    INT_MAX);
}

/* The stride must cover a stored row; BLAS would otherwise print to stderr and do nothing. */
static lamp_status check_ld(const char *name, size_t ld, size_t cols) {
  lamp_status s = check_int(name, ld);
  if (s != LAMP_OK || ld >= cols) return s;
  return lamp_error(LAMP_ERR_INVALID_ARG, "gemm: %s = %zu is smaller than the row length %zu",
                    name, ld, cols);
}

static lamp_status check_shapes(size_t m, size_t n, size_t k, const stored_matrix *a,
                                const stored_matrix *b, size_t ldc) {
  lamp_status s = check_int("m", m);
  if (s == LAMP_OK) s = check_int("n", n);
  if (s == LAMP_OK) s = check_int("k", k);
  if (s == LAMP_OK) s = check_ld("lda", a->ld, a->cols);
  if (s == LAMP_OK) s = check_ld("ldb", b->ld, b->cols);
  if (s == LAMP_OK) s = check_ld("ldc", ldc, n);
  return s;
}

static lamp_status check_pointers(size_t m, size_t n, size_t k, const void *a, const void *b,
                                  const void *c) {
  size_t product = (m && n && k) ? 1 : 0; /* A and B are read only for a non-empty product */
  lamp_status s = lamp_cpu_check_data("gemm", "A", a, product);
  if (s == LAMP_OK) s = lamp_cpu_check_data("gemm", "B", b, product);
  if (s == LAMP_OK) s = lamp_cpu_check_data("gemm", "C", c, m * n);
  return s;
}

lamp_status lamp_cpu_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k,
                      float alpha, const void *a, lamp_dtype a_dtype, size_t lda, const void *b,
                      lamp_dtype b_dtype, size_t ldb, float beta, void *c, lamp_dtype c_dtype,
                      size_t ldc) {
  lamp_status s = check_dtypes(a_dtype, b_dtype, c_dtype);
  if (s != LAMP_OK) return s;
  stored_matrix sa = {a, a_dtype, trans_a ? k : m, trans_a ? m : k, lda};
  stored_matrix sb = {b, b_dtype, trans_b ? n : k, trans_b ? k : n, ldb};
  s = check_shapes(m, n, k, &sa, &sb, ldc);
  if (s == LAMP_OK) s = check_pointers(m, n, k, a, b, c);
  if (s != LAMP_OK) return s;
  return gemm_cpu(trans_a, trans_b, m, n, k, alpha, &sa, &sb, beta, c, c_dtype, ldc);
}
