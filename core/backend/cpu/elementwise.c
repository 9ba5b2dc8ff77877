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

lamp_status lamp_cpu_fill(void *x, lamp_dtype dtype, size_t n, float value) {
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

lamp_status lamp_cpu_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias,
                               lamp_dtype bias_dtype, size_t rows, size_t cols) {
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

/*
** Large tensors are split into one contiguous range per thread (elementwise, so the result is the
** same bit for bit); small ones stay on the calling thread.
*/
#define RELU_PARALLEL_MIN 65536

typedef struct relu_pass {
  void *dst;
  const void *src, *y; /* y: the forward output, for backward */
  lamp_dtype dtype;
  size_t n, tasks;
  int backward;
} relu_pass;

static void relu_range(const relu_pass *p, size_t i0, size_t i1) {
  size_t e = p->dtype == LAMP_F32 ? 4 : 2, n = i1 - i0;
  char *dst = (char *)p->dst + i0 * e;
  const char *src = (const char *)p->src + i0 * e, *y = p->backward ? (const char *)p->y + i0 * e : NULL;
  if (p->dtype == LAMP_F32 && p->backward) relu_backward_f32((float *)dst, (const float *)src, (const float *)y, n);
  else if (p->dtype == LAMP_F32) relu_f32((float *)dst, (const float *)src, n);
  else if (p->backward)
    relu_backward_u16((uint16_t *)dst, (const uint16_t *)src, (const uint16_t *)y, n, inf_bits_of(p->dtype));
  else relu_u16((uint16_t *)dst, (const uint16_t *)src, n, inf_bits_of(p->dtype));
}

static lamp_status relu_task(void *ctx, size_t worker, size_t t) {
  const relu_pass *p = ctx;
  (void)worker;
  relu_range(p, p->n * t / p->tasks, p->n * (t + 1) / p->tasks);
  return LAMP_OK;
}

static lamp_status run_relu(relu_pass *p) {
  p->tasks = p->n >= RELU_PARALLEL_MIN ? lamp_cpu_threads() : 1;
  if (p->tasks <= 1) {
    relu_range(p, 0, p->n);
    return LAMP_OK;
  }
  return lamp_cpu_parallel_for(p->tasks, relu_task, p);
}

lamp_status lamp_cpu_relu_forward(void *y, const void *x, lamp_dtype dtype,
                              size_t n) {
  lamp_status s = lamp_cpu_check_float("relu_forward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_forward", "y", y, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_forward", "x", x, n);
  if (s != LAMP_OK) return s;
  relu_pass p = {.dst = y, .src = x, .dtype = dtype, .n = n};
  return run_relu(&p);
}

lamp_status lamp_cpu_relu_backward(void *dx, const void *dy, const void *y,
                               lamp_dtype dtype, size_t n) {
  lamp_status s = lamp_cpu_check_float("relu_backward", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "dx", dx, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "dy", dy, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("relu_backward", "y", y, n);
  if (s != LAMP_OK) return s;
  relu_pass p = {.dst = dx, .src = dy, .y = y, .dtype = dtype, .n = n, .backward = 1};
  return run_relu(&p);
}

/* ---- fp32 vector updates ----------------------------------------------------------------- */

static void scale_f32(float *x, size_t n, float alpha) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) x[i + j] *= alpha;
  for (; i < n; i++) x[i] *= alpha;
}

lamp_status lamp_cpu_scale(float *x, size_t n, float alpha) {
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

lamp_status lamp_cpu_axpy(float *y, const float *x, size_t n, float alpha) {
  lamp_status s = lamp_cpu_check_data("axpy", "y", y, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("axpy", "x", x, n);
  if (s != LAMP_OK) return s;
  axpy_f32(y, x, n, alpha);
  return LAMP_OK;
}
