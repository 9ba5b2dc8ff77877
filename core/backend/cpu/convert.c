/* dtype conversion between f32, f16 and bf16 arrays (rounding to nearest even, see half.h). */
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* f16 <-> bf16 has no direct instruction: go through fp32 (exact), a stack chunk at a time. */
static void convert_via_f32(void *dst, lamp_dtype dst_dtype, const void *src,
                            lamp_dtype src_dtype, size_t n) {
  float stage[LAMP_CPU_CHUNK];
  for (size_t first = 0; first < n; first += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, n - first);
    const float *values = lamp_cpu_read(stage, src, src_dtype, first, len);
    lamp_cpu_commit(dst, dst_dtype, first, values, len);
  }
}

static void convert_cpu(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype,
                        size_t n) {
  if (dst_dtype == src_dtype) {
    memmove(dst, src, n * lamp_dtype_size(dst_dtype)); /* dst == src is a valid no-op */
  } else if (src_dtype == LAMP_F32) {
    lamp_cpu_commit(dst, dst_dtype, 0, src, n);
  } else if (dst_dtype == LAMP_F32 && src_dtype == LAMP_F16) {
    lamp_f16_to_f32_n(dst, src, n);
  } else if (dst_dtype == LAMP_F32) {
    lamp_bf16_to_f32_n(dst, src, n);
  } else {
    convert_via_f32(dst, dst_dtype, src, src_dtype, n);
  }
}

lamp_status lamp_cpu_convert(void *dst, lamp_dtype dst_dtype, const void *src,
                         lamp_dtype src_dtype, size_t n) {
  lamp_status s = lamp_cpu_check_float("convert", "dst", dst_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("convert", "src", src_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("convert", "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("convert", "src", src, n);
  if (s != LAMP_OK) return s;
  convert_cpu(dst, dst_dtype, src, src_dtype, n);
  return LAMP_OK;
}
