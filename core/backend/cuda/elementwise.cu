/*
** Elementwise kernels: bias, ReLU, the fp32 vector updates, the rounding helpers, sums and
** Dropout's mask. One thread per element over a grid-stride loop; each element reads its
** inputs before writing its output, so exact aliasing (y == x) is safe as the contracts allow.
** The per-element math is elementwise_math.h's, the CPU's bit for bit.
*/
#include "backend/cuda/launch.cuh"

#define LAUNCH(kernel, n) kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>

/* ---- bias ---------------------------------------------------------------------------------- */

static __global__ void add_bias_rows_kernel(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype,
                                            size_t rows, size_t cols) {
  LAMP_MATRIX_STRIDE(r, c, rows, cols) {
    float v = lamp_em_add(lamp_em_load(y, y_dtype, r * cols + c), lamp_em_load(bias, bias_dtype, c));
    lamp_em_store(y, y_dtype, r * cols + c, v);
  }
}

lamp_status lamp_cuda_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype,
                                    size_t rows, size_t cols) {
  lamp_status s = lamp_cuda_check_float("add_bias_rows", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float("add_bias_rows", "bias", bias_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("add_bias_rows", "y", y, rows * cols);
  if (s == LAMP_OK) s = lamp_cuda_check_data("add_bias_rows", "bias", bias, rows ? cols : 0);
  if (s != LAMP_OK || rows * cols == 0) return s;
  add_bias_rows_kernel<<<lamp_cuda_matrix_grid(rows, cols), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      y, y_dtype, bias, bias_dtype, rows, cols);
  return lamp_cuda_launched("add_bias_rows");
}

/* ---- ReLU ---------------------------------------------------------------------------------- */
/* fp32 on the values; 16-bit on the bits (no widening, the same answer as fp32's). */

static __global__ void relu_f32_kernel(float *y, const float *x, size_t n) {
  LAMP_GRID_STRIDE(i, n) y[i] = lamp_em_relu(x[i]);
}

static __global__ void relu_u16_kernel(uint16_t *y, const uint16_t *x, size_t n, uint16_t inf_bits) {
  LAMP_GRID_STRIDE(i, n) y[i] = lamp_em_relu_bits(x[i], inf_bits);
}

lamp_status lamp_cuda_relu_forward(void *y, const void *x, lamp_dtype dtype, size_t n) {
  lamp_status s = lamp_cuda_check_float("relu_forward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("relu_forward", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("relu_forward", "x", x, n);
  if (s != LAMP_OK || n == 0) return s;
  if (dtype == LAMP_F32) LAUNCH(relu_f32_kernel, n)((float *)y, (const float *)x, n);
  else LAUNCH(relu_u16_kernel, n)((uint16_t *)y, (const uint16_t *)x, n, lamp_em_inf_bits(dtype));
  return lamp_cuda_launched("relu_forward");
}

static __global__ void relu_backward_f32_kernel(float *dx, const float *dy, const float *y, size_t n) {
  LAMP_GRID_STRIDE(i, n) dx[i] = lamp_em_relu_grad(dy[i], y[i]);
}

static __global__ void relu_backward_u16_kernel(uint16_t *dx, const uint16_t *dy, const uint16_t *y, size_t n,
                                                uint16_t inf_bits) {
  LAMP_GRID_STRIDE(i, n) dx[i] = lamp_em_relu_grad_bits(dy[i], y[i], inf_bits);
}

lamp_status lamp_cuda_relu_backward(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n) {
  lamp_status s = lamp_cuda_check_float("relu_backward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("relu_backward", "dx", dx, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("relu_backward", "dy", dy, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("relu_backward", "y", y, n);
  if (s != LAMP_OK || n == 0) return s;
  if (dtype == LAMP_F32) LAUNCH(relu_backward_f32_kernel, n)((float *)dx, (const float *)dy, (const float *)y, n);
  else
    LAUNCH(relu_backward_u16_kernel, n)((uint16_t *)dx, (const uint16_t *)dy, (const uint16_t *)y, n,
                                        lamp_em_inf_bits(dtype));
  return lamp_cuda_launched("relu_backward");
}

/* ---- fp32 vector updates ------------------------------------------------------------------- */

static __global__ void scale_kernel(float *x, size_t n, float alpha) {
  LAMP_GRID_STRIDE(i, n) x[i] = lamp_em_mul(x[i], alpha);
}

lamp_status lamp_cuda_scale(float *x, size_t n, float alpha) {
  lamp_status s = lamp_cuda_check_data("scale", "x", x, n);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(scale_kernel, n)(x, n, alpha);
  return lamp_cuda_launched("scale");
}

static __global__ void axpy_kernel(float *y, const float *x, size_t n, float alpha) {
  LAMP_GRID_STRIDE(i, n) y[i] = lamp_em_axpy(y[i], alpha, x[i]);
}

lamp_status lamp_cuda_axpy(float *y, const float *x, size_t n, float alpha) {
  lamp_status s = lamp_cuda_check_data("axpy", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("axpy", "x", x, n);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(axpy_kernel, n)(y, x, n, alpha);
  return lamp_cuda_launched("axpy");
}

/* ---- rounding through a 16-bit dtype in fp32 storage --------------------------------------- */

static __global__ void round_through_kernel(float *dst, const float *src, lamp_dtype via, size_t n) {
  LAMP_GRID_STRIDE(i, n) dst[i] = lamp_em_round_via(src[i], via);
}

static __global__ void accumulate_rounded_kernel(float *dst, const float *src, lamp_dtype via, size_t n) {
  LAMP_GRID_STRIDE(i, n) dst[i] = lamp_em_add(dst[i], lamp_em_round_via(src[i], via));
}

static lamp_status check_rounding(const char *fn, float *dst, const float *src, lamp_dtype via, size_t n) {
  lamp_status s = lamp_cuda_check_float(fn, "via", via);
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data(fn, "src", src, n);
  return s;
}

lamp_status lamp_cuda_round_through(float *dst, const float *src, lamp_dtype via, size_t n) {
  lamp_status s = check_rounding("round_through", dst, src, via, n);
  if (s != LAMP_OK || n == 0) return s;
  if (via == LAMP_F32) {
    if (dst == src) return LAMP_OK;
    return lamp_cuda_status(cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, lamp_cuda_stream()),
                            "round_through (cudaMemcpyAsync)");
  }
  LAUNCH(round_through_kernel, n)(dst, src, via, n);
  return lamp_cuda_launched("round_through");
}

lamp_status lamp_cuda_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n) {
  lamp_status s = check_rounding("accumulate_rounded", dst, src, via, n);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(accumulate_rounded_kernel, n)(dst, src, via, n);
  return lamp_cuda_launched("accumulate_rounded");
}

/* ---- y = a + b ------------------------------------------------------------------------------ */

static __global__ void add_kernel(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                                  lamp_dtype b_dtype, size_t n, int relu) {
  LAMP_GRID_STRIDE(i, n) {
    float v = lamp_em_sum(lamp_em_load(a, a_dtype, i), lamp_em_load(b, b_dtype, i), relu);
    lamp_em_store(y, y_dtype, i, v);
  }
}

lamp_status lamp_cuda_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                          lamp_dtype b_dtype, size_t n, int relu) {
  lamp_status s = lamp_cuda_check_float("add", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float("add", "a", a_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float("add", "b", b_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("add", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("add", "a", a, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("add", "b", b, n);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(add_kernel, n)(y, y_dtype, a, a_dtype, b, b_dtype, n, relu != 0);
  return lamp_cuda_launched("add");
}

lamp_status lamp_cuda_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n) {
  return lamp_cuda_add(y, y_dtype, y, y_dtype, x, x_dtype, n, 0);
}

/* ---- y = mask ? x * scale : 0 --------------------------------------------------------------- */

static __global__ void apply_mask_kernel(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                         const uint8_t *mask, float scale, size_t n) {
  LAMP_GRID_STRIDE(i, n) lamp_em_store(y, y_dtype, i, lamp_em_masked(mask[i], lamp_em_load(x, x_dtype, i), scale));
}

lamp_status lamp_cuda_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                 const uint8_t *mask, float scale, size_t n) {
  lamp_status s = lamp_cuda_check_float("apply_mask", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float("apply_mask", "x", x_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("apply_mask", "y", y, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("apply_mask", "x", x, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("apply_mask", "mask", mask, n);
  if (s != LAMP_OK || n == 0) return s;
  LAUNCH(apply_mask_kernel, n)(y, y_dtype, x, x_dtype, mask, scale, n);
  return lamp_cuda_launched("apply_mask");
}
