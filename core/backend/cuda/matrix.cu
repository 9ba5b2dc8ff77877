/* Strided matrix helpers for the GEMM (gemm.c): widening operands and rounding results where
   cuBLAS has no kernel for the dtype combination, and C = beta * C for an empty product. */
#include "backend/cuda/launch.cuh"

static __global__ void convert_matrix_kernel(void *dst, lamp_dtype dst_dtype, size_t ld_dst, const void *src,
                                             lamp_dtype src_dtype, size_t ld_src, size_t rows, size_t cols) {
  LAMP_MATRIX_STRIDE(r, c, rows, cols) {
    lamp_em_store(dst, dst_dtype, r * ld_dst + c, lamp_em_load(src, src_dtype, r * ld_src + c));
  }
}

lamp_status lamp_cuda_convert_matrix(void *dst, lamp_dtype dst_dtype, size_t ld_dst, const void *src,
                                     lamp_dtype src_dtype, size_t ld_src, size_t rows, size_t cols) {
  if (rows * cols == 0) return LAMP_OK;
  convert_matrix_kernel<<<lamp_cuda_matrix_grid(rows, cols), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      dst, dst_dtype, ld_dst, src, src_dtype, ld_src, rows, cols);
  return lamp_cuda_launched("gemm");
}

/* The CPU's k == 0 case: beta * C in fp32 rounded to C's dtype, or +0 unread when beta == 0. */
static __global__ void scale_matrix_kernel(void *c, lamp_dtype dtype, size_t ldc, size_t rows, size_t cols,
                                           float beta) {
  LAMP_MATRIX_STRIDE(r, j, rows, cols) {
    size_t at = r * ldc + j;
    lamp_em_store(c, dtype, at, beta == 0.0f ? 0.0f : lamp_em_mul(beta, lamp_em_load(c, dtype, at)));
  }
}

lamp_status lamp_cuda_scale_matrix(void *c, lamp_dtype dtype, size_t ldc, size_t rows, size_t cols, float beta) {
  if (rows * cols == 0) return LAMP_OK;
  scale_matrix_kernel<<<lamp_cuda_matrix_grid(rows, cols), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      c, dtype, ldc, rows, cols, beta);
  return lamp_cuda_launched("gemm");
}
