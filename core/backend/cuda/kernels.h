/*
** Inside the CUDA module, the kernel side (kernels.c, gemm.c, checks.c, faults.c, *.cu): the
** operations of the table's kernel slots (backend.h gives their contracts), the helpers they
** share, and the two calls the runtime side makes into this side:
**
**   lamp_cuda_kernel_faults()   after every wait for the stream (synchronize, a blocking
**                               download, an event wait) that found no CUDA error: reports a
**                               fault a kernel recorded on the device (a label out of range)
**                               as the CPU words it, once. It reads pinned host memory the
**                               kernels write into, so it costs no CUDA call and no extra sync.
**   lamp_cuda_kernels_release() at close, before the stream is destroyed: frees the cuBLAS
**                               handle and the fault record.
*/
#ifndef LAMP_BACKEND_CUDA_KERNELS_H
#define LAMP_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/fault_record.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- for the runtime side -------------------------------------------------------------------- */

/* LAMP_OK, or the first kernel fault recorded since the last call, reported (through
   lamp_cuda_svc->error) and cleared. Call only when the stream's work up to a point is known
   to be done (after a successful wait); it never waits itself. */
lamp_status lamp_cuda_kernel_faults(void);

/* Frees the kernel side's state (cuBLAS handle, fault record); the next use recreates it. */
void lamp_cuda_kernels_release(void);

/* ---- the slots (backend_impl.h), in kernels.c's order ---------------------------------------- */

lamp_status lamp_cuda_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                           lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb,
                           float beta, void *c, lamp_dtype c_dtype, size_t ldc);
lamp_status lamp_cuda_convert(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n);
lamp_status lamp_cuda_fill(void *x, lamp_dtype dtype, size_t n, float value);
lamp_status lamp_cuda_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype,
                                    size_t rows, size_t cols);
lamp_status lamp_cuda_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols,
                               float alpha, float beta);
lamp_status lamp_cuda_relu_forward(void *y, const void *x, lamp_dtype dtype, size_t n);
lamp_status lamp_cuda_relu_backward(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n);
lamp_status lamp_cuda_cross_entropy(const void *logits, lamp_dtype logits_dtype, const int32_t *labels,
                                    size_t rows, size_t classes, float grad_scale, double *loss, void *dlogits,
                                    lamp_dtype dlogits_dtype, size_t *correct);
lamp_status lamp_cuda_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols);
lamp_status lamp_cuda_unscale_and_check(float *g, size_t n, float inv_scale, int *found_inf);
lamp_status lamp_cuda_round_through(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_cuda_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_cuda_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                       uint64_t stream);
lamp_status lamp_cuda_scale(float *x, size_t n, float alpha);
lamp_status lamp_cuda_axpy(float *y, const float *x, size_t n, float alpha);
lamp_status lamp_cuda_sum_squares(const float *x, size_t n, double *out);
lamp_status lamp_cuda_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n);
lamp_status lamp_cuda_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                          lamp_dtype b_dtype, size_t n, int relu);
lamp_status lamp_cuda_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                 const uint8_t *mask, float scale, size_t n);

/* ---- shared by the kernel side --------------------------------------------------------------- */

/* The CPU backend's argument checks, worded the same (core/backend/cpu/checks.c):
   "<fn>: dtype i32 not supported for <role> (expected f32, f16 or bf16)" (role may be NULL)
   and "<fn>: <name> is NULL" when ptr is NULL and the call has elements to touch. */
lamp_status lamp_cuda_check_float(const char *fn, const char *role, lamp_dtype dtype);
lamp_status lamp_cuda_check_data(const char *fn, const char *name, const void *ptr, size_t count);
/* "<fn>: dtype f32 not supported for <role> (expected f16 or bf16)". */
lamp_status lamp_cuda_check_half(const char *fn, const char *role, lamp_dtype dtype);

/* Bytes per element of a float dtype (4 or 2). */
size_t lamp_cuda_dtype_size(lamp_dtype dtype);

/* For GEMM operands and results (matrix.cu), queued: dst[r, c] = src[r, c] converted, for a
   rows x cols matrix with row strides ld_dst and ld_src; and c[r, j] = beta * c[r, j] rounded to
   its dtype, +0 without reading c when beta == 0 (a product over k == 0). */
lamp_status lamp_cuda_convert_matrix(void *dst, lamp_dtype dst_dtype, size_t ld_dst, const void *src,
                                     lamp_dtype src_dtype, size_t ld_src, size_t rows, size_t cols);
lamp_status lamp_cuda_scale_matrix(void *c, lamp_dtype dtype, size_t ldc, size_t rows, size_t cols, float beta);

/* The fault record's device address (fault_record.h; made on first use), or the error. */
lamp_status lamp_cuda_fault_record(lamp_cuda_fault **device_view);

/* Destroys the cuBLAS handle (gemm.c); the next GEMM creates another. */
void lamp_cuda_gemm_release(void);

#ifdef __cplusplus
}
#endif
#endif
