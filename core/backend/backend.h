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

/* ---- convolution, pooling and per-channel kernels (NCHW, fp32 unless a dtype is given) ----- */

/* The geometry of one sliding window over the planes of an image. */
typedef struct lamp_conv_geom {
  size_t channels, height, width;      /* input planes of one image (or of one group) */
  size_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  size_t out_h, out_w;
} lamp_conv_geom;

/*
** Columns of n_images images for a convolution as one GEMM operand:
** col[(c * kernel_h + i) * kernel_w + j][s * out_hw + p] = x_s[c][y(p) + i*dil - pad][x(p) + j*dil - pad]
** (0 outside the image), rows of ldcol elements, where image s starts at x + s * image_stride.
*/
lamp_status lamp_im2col(lamp_device device, float *col, size_t ldcol, const float *x, size_t image_stride,
                        size_t n_images, const lamp_conv_geom *g);

/* The adjoint: x_s[...] += every column entry that im2col would read from there. */
lamp_status lamp_col2im(lamp_device device, float *x, size_t image_stride, const float *col, size_t ldcol,
                        size_t n_images, const lamp_conv_geom *g);

/*
** Direct convolution of one image with a 3x3 kernel, stride 1, padding 1 (so out_h = height,
** out_w = width), where the device has a kernel for it
** (lamp_conv_direct_supported): out[o][p] = sum_r wt[r][o] * col[r][p] for o < n_out, with col
** the columns lamp_im2col would make for g, never formed. x: g->channels planes, contiguous;
** out rows ld_out apart; wt is [channels * kernel_h * kernel_w][ldw], ldw =
** lamp_conv_direct_width(n_out) (columns from n_out on are read, their results dropped: zero
** them); work holds lamp_conv_direct_work(g) floats. Sums are fp32, in order over r.
*/
int lamp_conv_direct_supported(lamp_device device, const lamp_conv_geom *g);
size_t lamp_conv_direct_width(size_t n_out);
size_t lamp_conv_direct_work(const lamp_conv_geom *g);
lamp_status lamp_conv_direct(lamp_device device, float *out, size_t ld_out, const float *x, const float *wt,
                             size_t ldw, size_t n_out, const lamp_conv_geom *g, float *work);
/*
** Its weight gradient for one image, same geometry: gw[o][r] = sum_p dy[o][p] * col[r][p] for
** o < n_out (dy [n_out][plane]) and r < g->channels * 9, summed into the accumulator acc
** (lamp_conv_direct_grad_acc floats, written, or added to when `accumulate`), so that a batch's
** images add up there and are moved into gw once (lamp_conv_direct_grad_reduce). work holds
** lamp_conv_direct_grad_work floats. Pixels are summed in raster order, images in call order.
*/
size_t lamp_conv_direct_grad_acc(const lamp_conv_geom *g, size_t n_out);
size_t lamp_conv_direct_grad_work(const lamp_conv_geom *g, size_t n_out);
lamp_status lamp_conv_direct_grad(lamp_device device, float *acc, const float *x, const float *dy, size_t n_out,
                                  const lamp_conv_geom *g, float *work, int accumulate);
/* gw[o][r] (+)= the accumulated sum for (o, r); gw's rows ldg apart, rows = g->channels * 9. */
lamp_status lamp_conv_direct_grad_reduce(lamp_device device, float *gw, size_t ldg, const float *acc, size_t n_out,
                                         size_t rows, int accumulate);
/* The forward and lamp_conv_direct_grad with x in f32, f16 or bf16 (x_dtype), a 16-bit x widened
   exactly as lamp_convert does (the forward widens it into work; an fp32 x it reads in place). */
lamp_status lamp_conv_direct_typed(lamp_device device, float *out, size_t ld_out, const void *x, lamp_dtype x_dtype,
                                   const float *wt, size_t ldw, size_t n_out, const lamp_conv_geom *g, float *work);
lamp_status lamp_conv_direct_grad_typed(lamp_device device, float *acc, const void *x, lamp_dtype x_dtype,
                                        const float *dy, size_t n_out, const lamp_conv_geom *g, float *work,
                                        int accumulate);

/* dst[c][s * plane + p] = src[s * image_stride + c * plane + p] for c < channels, widened to fp32:
   a batch of NCHW images as one [channels, n_images * plane] matrix. */
lamp_status lamp_gather_planes(lamp_device device, float *dst, const void *src, lamp_dtype src_dtype,
                               size_t image_stride, size_t n_images, size_t channels, size_t plane);

/* The inverse, plus bias[c] when bias is not NULL, rounded to dst_dtype. */
lamp_status lamp_scatter_planes(lamp_device device, void *dst, lamp_dtype dst_dtype, size_t image_stride,
                                const float *src, const float *bias, size_t n_images, size_t channels, size_t plane);

/* Max pooling over planes (n_planes = N * C, geometry per plane; channels is ignored): y and
   argmax [n_planes, out_h, out_w], argmax the index inside the plane (-1 where the window holds
   only padding). NaN wins, as in PyTorch. Backward writes every element of dx. */
lamp_status lamp_maxpool_forward(lamp_device device, float *y, int32_t *argmax, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g);
lamp_status lamp_maxpool_backward(lamp_device device, float *dx, const float *dy, const int32_t *argmax,
                                  size_t n_planes, const lamp_conv_geom *g);

/* Average pooling, padding counted in the divisor (count_include_pad); backward writes all of dx. */
lamp_status lamp_avgpool_forward(lamp_device device, float *y, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g);
lamp_status lamp_avgpool_backward(lamp_device device, float *dx, const float *dy, size_t n_planes,
                                  const lamp_conv_geom *g);

/*
** The per-channel kernels read their inputs in any float dtype (a 16-bit input is widened
** exactly, a chunk at a time, never as a whole fp32 copy) and compute in fp32.
**
** Per-channel sums over [n, c, hw]: sum_a[k] = sum of (a - a_center[k]) over channel k without b;
** when b is not NULL, sum_a[k] = sum of a and sum_ab[k] = sum of (a - a_center[k]) (b - b_center[k])
** (a NULL center counts as 0). Each image row is summed in fp32, rows are added in double.
*/
lamp_status lamp_channel_reduce(lamp_device device, const void *a, lamp_dtype a_dtype, const float *a_center,
                                const void *b, lamp_dtype b_dtype, const float *b_center, size_t n, size_t c,
                                size_t hw, double *sum_a, double *sum_ab);

/* y[i, k, :] = x[i, k, :] * scale[k] + shift[k], rounded to y_dtype. With `relu`, a ReLU is applied
   on the way (v <= 0 gives +0, NaN stays NaN: lamp_relu_forward's rule), the same bits as the two
   passes one after the other. */
lamp_status lamp_channel_affine(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                const float *scale, const float *shift, size_t n, size_t c, size_t hw, int relu);

/*
** A residual block's close in one pass: y = relu(t + skip) with t = x * scale[k] + shift[k]
** rounded to y_dtype (as if stored), the sum and ReLU as lamp_add(..., relu 1), rounded once to
** y_dtype: the same bits as lamp_channel_affine into a tensor of y_dtype, then lamp_add.
*/
lamp_status lamp_channel_affine_add_relu(lamp_device device, void *y, lamp_dtype y_dtype, const void *x,
                                         lamp_dtype x_dtype, const float *scale, const float *shift, const void *skip,
                                         lamp_dtype skip_dtype, size_t n, size_t c, size_t hw);

/* out[i, k, :] = p[k] * a[i, k, :] + q[k] * b[i, k, :] + r[k] (BatchNorm's input gradient). */
lamp_status lamp_channel_combine(lamp_device device, float *out, const float *a, const float *b, const float *p,
                                 const float *q, const float *r, size_t n, size_t c, size_t hw);
/* The same with typed inputs, out rounded to out_dtype as it is written (out must not overlap a
   or b unless all three are fp32). */
lamp_status lamp_channel_combine_typed(lamp_device device, void *out, lamp_dtype out_dtype, const void *a,
                                       lamp_dtype a_dtype, const void *b, lamp_dtype b_dtype, const float *p,
                                       const float *q, const float *r, size_t n, size_t c, size_t hw);

/*
** The gradient mask of a ReLU that followed lamp_channel_affine(..., x, scale, shift, ..., relu 1),
** recomputed from its input: element e of channel k passes where
**   x[e] * scale[k] + shift[k] > zero_bound,
** the affine pass's own fp32 arithmetic, with zero_bound 0 for an fp32 output and
** LAMP_F16_ZERO_BOUND / LAMP_BF16_ZERO_BOUND for a 16-bit one: exactly where the stored output
** is > 0, which is where lamp_relu_backward passes the gradient.
*/
typedef struct lamp_relu_mask {
  const float *scale, *shift;
  float zero_bound;
} lamp_relu_mask;

/*
** lamp_channel_reduce (with a_center NULL) and lamp_channel_combine_typed with a read through
** the mask (a masked-off element reads as +0, as lamp_relu_backward writes it), the mask taken
** from b: BatchNorm's backward with the ReLU after it in the same passes. The same bits as
** lamp_relu_backward into a, then the unmasked kernel.
*/
lamp_status lamp_channel_reduce_masked(lamp_device device, const void *a, lamp_dtype a_dtype, const void *b,
                                       lamp_dtype b_dtype, const float *b_center, const lamp_relu_mask *mask,
                                       size_t n, size_t c, size_t hw, double *sum_a, double *sum_ab);
lamp_status lamp_channel_combine_masked(lamp_device device, void *out, lamp_dtype out_dtype, const void *a,
                                        lamp_dtype a_dtype, const void *b, lamp_dtype b_dtype, const float *p,
                                        const float *q, const float *r, const lamp_relu_mask *mask, size_t n,
                                        size_t c, size_t hw);

/* lamp_convert split across the backend's threads (large arrays; dst and src apart or equal);
   the same values bit for bit. Not for use inside a lamp_parallel_for task. */
lamp_status lamp_convert_parallel(lamp_device device, void *dst, lamp_dtype dst_dtype, const void *src,
                                  lamp_dtype src_dtype, size_t n);

/* y += x elementwise, in fp32, rounded to y's dtype (a residual connection). */
lamp_status lamp_add_into(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                          size_t n);

/* y = a + b elementwise, in fp32, rounded to y's dtype; y may alias a or b exactly. `relu` as in
   lamp_channel_affine. */
lamp_status lamp_add(lamp_device device, void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype,
                     const void *b, lamp_dtype b_dtype, size_t n, int relu);

/*
** fn(ctx, worker, task) for every task in [0, n_tasks), on up to lamp_backend_threads() threads
** (worker < that count identifies the thread, for per-thread workspaces). Tasks are assigned
** statically, so results never depend on timing; GEMMs called inside run single-threaded.
** Returns the first failure, its message carried to the calling thread. Nested calls run serially.
*/
typedef lamp_status (*lamp_task_fn)(void *ctx, size_t worker, size_t task);
lamp_status lamp_parallel_for(lamp_device device, size_t n_tasks, lamp_task_fn fn, void *ctx);
size_t lamp_backend_threads(lamp_device device);

/* y = mask ? x * scale : 0 elementwise (Dropout); y and x may alias. */
lamp_status lamp_apply_mask(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                            const uint8_t *mask, float scale, size_t n);

/*
** 16-bit GEMM inputs are widened into a per-thread workspace that is kept between calls (and
** charged to the ledger as workspace); this returns it now rather than at thread exit.
*/
void lamp_backend_release_workspace(void);

#endif
