/*
** lamp_round_stochastic on the device: one thread per Philox counter, which rounds the (up to)
** four elements that counter's words belong to (stochastic_math.h). Consecutive threads take
** consecutive counters of a group, whose elements of one word are consecutive: each of the four
** stores of a warp is coalesced.
*/
#include "backend/cuda/launch.cuh"
#include "backend/cuda/stochastic_math.h"

static __global__ void round_stochastic_kernel(uint16_t *dst, lamp_dtype dtype, const float *src, size_t n,
                                               uint64_t seed, uint64_t stream, size_t blocks) {
  LAMP_GRID_STRIDE(block, blocks) {
    uint32_t words[4];
    lamp_em_philox_block(words, seed, stream, block);
    for (int w = 0; w < 4; w++) {
      uint64_t i = lamp_em_philox_element(block, w);
      if (i < n) dst[i] = lamp_em_round_sr(src[i], words[w], dtype);
    }
  }
}

lamp_status lamp_cuda_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                       uint64_t stream) {
  lamp_status s = lamp_cuda_check_half("round_stochastic", "dst", dst_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("round_stochastic", "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("round_stochastic", "src", src, n);
  if (s != LAMP_OK || n == 0) return s;
  /* The counters of every group an element falls in: 16 per 64 elements, the last group whole. */
  size_t blocks = (n + 63u) / 64u * 16u;
  round_stochastic_kernel<<<lamp_cuda_blocks(blocks), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(
      (uint16_t *)dst, dst_dtype, src, n, seed, stream, blocks);
  return lamp_cuda_launched("round_stochastic");
}
