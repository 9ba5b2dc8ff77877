/*
** fp32 views of f32/f16/bf16 arrays. Kernels do their arithmetic in fp32 (backend.h), so they
** see 16-bit data through these: widened a chunk at a time into the caller's stack buffer, and
** rounded back (nearest even) on commit. f32 data is used in place. The batch norm's affine and
** combine passes and the additions on bf16 tensors, where the CPU has AVX-512, convert in
** registers instead (tensor/half_avx512.h), with the same bits.
*/
#include "backend/cpu/cpu_backend.h"

#include <stdint.h>
#include <string.h>

#include "tensor/half.h"

static const uint16_t *half_at(const void *data, size_t first) { return (const uint16_t *)data + first; }

static void widen(float *dst, const void *src, lamp_dtype dtype, size_t first, size_t n) {
  if (dtype == LAMP_F16) lamp_f16_to_f32_n(dst, half_at(src, first), n);
  else lamp_bf16_to_f32_n(dst, half_at(src, first), n);
}

const float *lamp_cpu_read(float *stage, const void *src, lamp_dtype dtype, size_t first, size_t n) {
  if (dtype == LAMP_F32) return (const float *)src + first;
  widen(stage, src, dtype, first, n);
  return stage;
}

float *lamp_cpu_edit(float *stage, void *data, lamp_dtype dtype, size_t first, size_t n) {
  if (dtype == LAMP_F32) return (float *)data + first;
  widen(stage, data, dtype, first, n);
  return stage;
}

float *lamp_cpu_scratch(float *stage, void *data, lamp_dtype dtype, size_t first) {
  return dtype == LAMP_F32 ? (float *)data + first : stage;
}

void lamp_cpu_commit(void *data, lamp_dtype dtype, size_t first, const float *values, size_t n) {
  switch (dtype) {
  case LAMP_F32: {
    float *dst = (float *)data + first;
    if (dst != values) memcpy(dst, values, n * sizeof *dst);
    break;
  }
  case LAMP_F16: lamp_f32_to_f16_n((uint16_t *)data + first, values, n); break;
  case LAMP_BF16: lamp_f32_to_bf16_n((uint16_t *)data + first, values, n); break;
  default: break; /* callers validated the dtype */
  }
}

float lamp_cpu_get(const void *src, lamp_dtype dtype, size_t index) {
  switch (dtype) {
  case LAMP_F16: return lamp_f16_to_f32(half_at(src, index)[0]);
  case LAMP_BF16: return lamp_bf16_to_f32(half_at(src, index)[0]);
  default: return ((const float *)src)[index];
  }
}
