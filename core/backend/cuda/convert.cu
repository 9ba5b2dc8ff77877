/* dtype conversion and fill: elementwise, each element through elementwise_math.h (the CPU's
   rounding, bit for bit). */
#include "backend/cuda/launch.cuh"

/* Widened exactly, rounded once: f16 <-> bf16 goes through fp32 as on the CPU. */
static __global__ void convert_kernel(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype,
                                      size_t n) {
  LAMP_GRID_STRIDE(i, n) lamp_em_store(dst, dst_dtype, i, lamp_em_load(src, src_dtype, i));
}

lamp_status lamp_cuda_convert(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n) {
  lamp_status s = lamp_cuda_check_float("convert", "dst", dst_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float("convert", "src", src_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("convert", "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("convert", "src", src, n);
  if (s != LAMP_OK || n == 0) return s;
  if (dst_dtype == src_dtype) {
    if (dst == src) return LAMP_OK;
    /* cudaMemcpyAsync requires apart ranges; lamp_convert allows only dst == src or apart. */
    return lamp_cuda_status(cudaMemcpyAsync(dst, src, n * lamp_cuda_dtype_size(dst_dtype), cudaMemcpyDeviceToDevice,
                                            lamp_cuda_stream()),
                            "convert (cudaMemcpyAsync)");
  }
  convert_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(dst, dst_dtype, src, src_dtype,
                                                                                      n);
  return lamp_cuda_launched("convert");
}

/* The value is rounded once on the host (the same function) and its bits are copied. */
static __global__ void fill32_kernel(uint32_t *x, size_t n, uint32_t bits) {
  LAMP_GRID_STRIDE(i, n) x[i] = bits;
}

static __global__ void fill16_kernel(uint16_t *x, size_t n, uint16_t bits) {
  LAMP_GRID_STRIDE(i, n) x[i] = bits;
}

lamp_status lamp_cuda_fill(void *x, lamp_dtype dtype, size_t n, float value) {
  lamp_status s = lamp_cuda_check_float("fill", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("fill", "x", x, n);
  if (s != LAMP_OK || n == 0) return s;
  cudaStream_t stream = lamp_cuda_stream();
  if (dtype == LAMP_F32) {
    fill32_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, stream>>>((uint32_t *)x, n, lamp_em_bits(value));
  } else {
    uint16_t bits = dtype == LAMP_F16 ? lamp_em_f32_to_f16(value) : lamp_em_f32_to_bf16(value);
    fill16_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, stream>>>((uint16_t *)x, n, bits);
  }
  return lamp_cuda_launched("fill");
}
