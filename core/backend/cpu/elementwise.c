/*
** Elementwise kernels: fill, bias add, ReLU forward/backward, scale, axpy.
**
** Loops run over fixed blocks of LAMP_CPU_BLOCK elements (see cpu_backend.h) so GCC vectorises
** them at -O2. Where input and output may alias, a block is read completely into a local array
** before it is written: that makes exact aliasing (y == x) correct and lets the compiler
** vectorise without proving the pointers apart.
*/
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "tensor/half.h"

#define BLOCK LAMP_CPU_BLOCK

/* ---- fill -------------------------------------------------------------------------------- */

static void fill_f32(float *x, size_t n, float value) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) x[i + j] = value;
  for (; i < n; i++) x[i] = value;
}

static void fill_u16(uint16_t *x, size_t n, uint16_t bits) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) x[i + j] = bits;
  for (; i < n; i++) x[i] = bits;
}

/* A 16-bit fill rounds the value once and then copies bits. */
static void fill_cpu(void *x, lamp_dtype dtype, size_t n, float value) {
  switch (dtype) {
  case LAMP_F16: fill_u16(x, n, lamp_f32_to_f16(value)); break;
  case LAMP_BF16: fill_u16(x, n, lamp_f32_to_bf16(value)); break;
  default: fill_f32(x, n, value); break;
  }
}

lamp_status lamp_fill(lamp_device device, void *x, lamp_dtype dtype, size_t n, float value) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("fill", device);
  lamp_status s = lamp_cpu_check_float("fill", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("fill", "x", x, n);
  if (s != LAMP_OK) return s;
  fill_cpu(x, dtype, n, value);
  return LAMP_OK;
}

/* ---- bias -------------------------------------------------------------------------------- */

static void add_f32(float *restrict y, const float *restrict b, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) y[i + j] += b[i + j];
  for (; i < n; i++) y[i] += b[i];
}

/* Column chunks outermost: each chunk of the bias is widened once and added to every row. */
static void add_bias_rows_cpu(void *y, lamp_dtype y_dtype, const void *bias,
                              lamp_dtype bias_dtype, size_t rows, size_t cols) {
  float bias_stage[LAMP_CPU_CHUNK], row_stage[LAMP_CPU_CHUNK];
  for (size_t c0 = 0; c0 < cols; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, cols - c0);
    const float *b = lamp_cpu_read(bias_stage, bias, bias_dtype, c0, len);
    for (size_t r = 0; r < rows; r++) {
      float *row = lamp_cpu_edit(row_stage, y, y_dtype, r * cols + c0, len);
      add_f32(row, b, len);
      lamp_cpu_commit(y, y_dtype, r * cols + c0, row, len);
    }
  }
}

lamp_status lamp_add_bias_rows(lamp_device device, void *y, lamp_dtype y_dtype, const void *bias,
                               lamp_dtype bias_dtype, size_t rows, size_t cols) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("add_bias_rows", device);
  lamp_status s = lamp_cpu_check_float("add_bias_rows", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("add_bias_rows", "bias", bias_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("add_bias_rows", "y", y, rows * cols);
  if (s == LAMP_OK) s = lamp_cpu_check_data("add_bias_rows", "bias", bias, rows ? cols : 0);
  if (s != LAMP_OK) return s;
  add_bias_rows_cpu(y, y_dtype, bias, bias_dtype, rows, cols);
  return LAMP_OK;
}

/* ---- ReLU -------------------------------------------------------------------------------- */
/*
** NaN passes through the forward pass (as in PyTorch), so a blown-up activation still reaches
** the loss and the scaler's inf/NaN check instead of being silently zeroed; -0 becomes +0.
** The 16-bit forms work on the bits directly: no widening, and exactly the fp32 answer.
*/

static void relu_f32(float *y, const float *x, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    float out[BLOCK];
    for (size_t j = 0; j < BLOCK; j++) out[j] = x[i + j] <= 0.0f ? 0.0f : x[i + j];
    for (size_t j = 0; j < BLOCK; j++) y[i + j] = out[j];
  }
  for (; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

/* A negative (or -0) 16-bit value that is not NaN, i.e. sign set and magnitude <= inf: zero. */
static inline uint16_t relu_bits(uint16_t h, uint16_t inf_bits) {
  return ((h & 0x8000u) && (h & 0x7fffu) <= inf_bits) ? 0 : h;
}

static void relu_u16(uint16_t *y, const uint16_t *x, size_t n, uint16_t inf_bits) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    uint16_t out[BLOCK];
    for (size_t j = 0; j < BLOCK; j++) out[j] = relu_bits(x[i + j], inf_bits);
    for (size_t j = 0; j < BLOCK; j++) y[i + j] = out[j];
  }
  for (; i < n; i++) y[i] = relu_bits(x[i], inf_bits);
}

/* The bit pattern of +inf, which bounds the non-NaN magnitudes. */
static uint16_t inf_bits_of(lamp_dtype dtype) { return dtype == LAMP_F16 ? 0x7c00u : 0x7f80u; }

lamp_status lamp_relu_forward(lamp_device device, void *y, const void *x, lamp_dtype dtype,
                              size_t n) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("relu_forward", device);
  lamp_status s = lamp_cpu_check_float("relu_forward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_forward", "y", y, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_forward", "x", x, n);
  if (s != LAMP_OK) return s;
  if (dtype == LAMP_F32) relu_f32(y, x, n);
  else relu_u16(y, x, n, inf_bits_of(dtype));
  return LAMP_OK;
}

/* dy is passed by value, i.e. always loaded: a conditional load would block vectorising. */
static inline float relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

static void relu_backward_f32(float *dx, const float *dy, const float *y, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    float out[BLOCK];
    for (size_t j = 0; j < BLOCK; j++) out[j] = relu_grad(dy[i + j], y[i + j]);
    for (size_t j = 0; j < BLOCK; j++) dx[i + j] = out[j];
  }
  for (; i < n; i++) dx[i] = relu_grad(dy[i], y[i]);
}

/* y > 0 on the bits: sign clear, not zero, not NaN, i.e. 1 <= y <= inf (unsigned compare). */
static inline uint16_t relu_grad_bits(uint16_t dy, uint16_t y, uint16_t inf_bits) {
  return (uint16_t)(y - 1u) < inf_bits ? dy : 0;
}

static void relu_backward_u16(uint16_t *dx, const uint16_t *dy, const uint16_t *y, size_t n,
                              uint16_t inf_bits) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    uint16_t out[BLOCK];
    for (size_t j = 0; j < BLOCK; j++) out[j] = relu_grad_bits(dy[i + j], y[i + j], inf_bits);
    for (size_t j = 0; j < BLOCK; j++) dx[i + j] = out[j];
  }
  for (; i < n; i++) dx[i] = relu_grad_bits(dy[i], y[i], inf_bits);
}

lamp_status lamp_relu_backward(lamp_device device, void *dx, const void *dy, const void *y,
                               lamp_dtype dtype, size_t n) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("relu_backward", device);
  lamp_status s = lamp_cpu_check_float("relu_backward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "dx", dx, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "dy", dy, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "y", y, n);
  if (s != LAMP_OK) return s;
  if (dtype == LAMP_F32) relu_backward_f32(dx, dy, y, n);
  else relu_backward_u16(dx, dy, y, n, inf_bits_of(dtype));
  return LAMP_OK;
}

/* ---- fp32 vector updates ----------------------------------------------------------------- */

static void scale_f32(float *x, size_t n, float alpha) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) x[i + j] *= alpha;
  for (; i < n; i++) x[i] *= alpha;
}

lamp_status lamp_scale(lamp_device device, float *x, size_t n, float alpha) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("scale", device);
  lamp_status s = lamp_cpu_check_data("scale", "x", x, n);
  if (s != LAMP_OK) return s;
  scale_f32(x, n, alpha);
  return LAMP_OK;
}

static void axpy_f32(float *y, const float *x, size_t n, float alpha) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    float out[BLOCK];
    for (size_t j = 0; j < BLOCK; j++) out[j] = y[i + j] + alpha * x[i + j];
    for (size_t j = 0; j < BLOCK; j++) y[i + j] = out[j];
  }
  for (; i < n; i++) y[i] += alpha * x[i];
}

lamp_status lamp_axpy(lamp_device device, float *y, const float *x, size_t n, float alpha) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("axpy", device);
  lamp_status s = lamp_cpu_check_data("axpy", "y", y, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("axpy", "x", x, n);
  if (s != LAMP_OK) return s;
  axpy_f32(y, x, n, alpha);
  return LAMP_OK;
}
