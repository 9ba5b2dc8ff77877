/*
** Kernels, dispatched on the device of the data. The CPU backend (OpenBLAS) implements every
** kernel and is the reference the CUDA backend is checked against. Kernels know no layers.
**
** Conventions: matrices are row-major; `ld*` are row strides in elements; 16-bit inputs are
** widened exactly to fp32, arithmetic and accumulation are fp32, and results are rounded
** (nearest even) to the output dtype. Every function returns a status and sets
** lamp_last_error() on failure (unsupported device or dtype, bad sizes).
*/
#ifndef LAMP_BACKEND_H
#define LAMP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "lamp/host.h"

/* C[m,n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A, B in f32/f16/bf16 (mixed
   allowed), C in f32/f16/bf16. With beta == 0, C is not read (it may hold NaN). */
lamp_status lamp_gemm(lamp_device device, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                      float alpha, const void *a, lamp_dtype a_dtype, size_t lda, const void *b,
                      lamp_dtype b_dtype, size_t ldb, float beta, void *c, lamp_dtype c_dtype,
                      size_t ldc);

/* dst = src converted element by element (any pair of f32/f16/bf16; same dtype copies). */
lamp_status lamp_convert(lamp_device device, void *dst, lamp_dtype dst_dtype, const void *src,
                         lamp_dtype src_dtype, size_t n);

/* x[i] = value for i < n (x in f32/f16/bf16). */
lamp_status lamp_fill(lamp_device device, void *x, lamp_dtype dtype, size_t n, float value);

/* y[r, c] += bias[c] for r < rows, c < cols; y and bias in f32/f16/bf16. */
lamp_status lamp_add_bias_rows(lamp_device device, void *y, lamp_dtype y_dtype, const void *bias,
                               lamp_dtype bias_dtype, size_t rows, size_t cols);

/* out[c] = beta * out[c] + alpha * sum_r dy[r, c] (the bias gradient); out is fp32 and is not
   read when beta == 0. */
lamp_status lamp_sum_rows(lamp_device device, float *out, const void *dy, lamp_dtype dy_dtype,
                          size_t rows, size_t cols, float alpha, float beta);

/* y = max(x, 0); y and x may alias. NaN passes through; -0 becomes +0. */
lamp_status lamp_relu_forward(lamp_device device, void *y, const void *x, lamp_dtype dtype,
                              size_t n);

/* dx = dy where y > 0, else 0 (y is the forward output); dx and dy may alias. */
lamp_status lamp_relu_backward(lamp_device device, void *dx, const void *dy, const void *y,
                               lamp_dtype dtype, size_t n);

/*
** Fused log-softmax + negative log-likelihood over `rows` rows of `classes` logits, all in
** fp32 whatever the logits' dtype. Writes the mean loss to *loss, and when dlogits is not
** NULL the gradient of (grad_scale * mean loss): (softmax - onehot) * grad_scale / rows, in
** dlogits_dtype. A label outside [0, classes) is LAMP_ERR_INVALID_ARG naming row and label.
** If `correct` is not NULL it receives the number of rows whose argmax equals the label.
*/
lamp_status lamp_cross_entropy(lamp_device device, const void *logits, lamp_dtype logits_dtype,
                               const int32_t *labels, size_t rows, size_t classes,
                               float grad_scale, double *loss, void *dlogits,
                               lamp_dtype dlogits_dtype, size_t *correct);

/* out[r] = index of the largest of row r's `cols` values (first one on ties; NaN counts as the
   largest, as in PyTorch). cols == 0 is an error. */
lamp_status lamp_argmax_rows(lamp_device device, int32_t *out, const void *x, lamp_dtype dtype,
                             size_t rows, size_t cols);

/* The fused unscale-and-check of the host API: g *= inv_scale; *found_inf = 1 on inf/NaN. */
lamp_status lamp_unscale_and_check(lamp_device device, float *g, size_t n, float inv_scale,
                                   int *found_inf);

/* dst = src rounded to `via` (f32, f16 or bf16) and widened back: fp32 storage holding the
   values a `via` tensor would. dst may equal src. */
lamp_status lamp_round_through(lamp_device device, float *dst, const float *src, lamp_dtype via,
                               size_t n);

/* dst += src rounded to `via`: gradients produced in a 16-bit dtype, accumulated in fp32. */
lamp_status lamp_accumulate_rounded(lamp_device device, float *dst, const float *src,
                                    lamp_dtype via, size_t n);

/* Whether lamp_gemm on this device runs 16-bit inputs natively (1) or widens them to fp32 (0),
   in which case callers that reuse an operand do better to keep it widened themselves. */
int lamp_backend_native_16bit_gemm(lamp_device device);

/* x *= alpha. */
lamp_status lamp_scale(lamp_device device, float *x, size_t n, float alpha);

/* y += alpha * x. */
lamp_status lamp_axpy(lamp_device device, float *y, const float *x, size_t n, float alpha);

/* *out = sum of x[i]^2, accumulated in double (for global-norm clipping). */
lamp_status lamp_sum_squares(lamp_device device, const float *x, size_t n, double *out);

/*
** 16-bit GEMM inputs are widened into a per-thread workspace that is kept between calls (and
** charged to the ledger as workspace); this returns it now rather than at thread exit.
*/
void lamp_backend_release_workspace(void);

#endif
