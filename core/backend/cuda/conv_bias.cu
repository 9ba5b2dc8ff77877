/*
** The convolution's bias, NCHW (conv_cudnn.c): the forward's y = acc + bias[c] rounded once to
** y's dtype (acc the fp32 product, as the CPU adds the bias to its fp32 product before the one
** rounding), and the backward's per-channel sums of dy over the batch and the plane, in double
** as on the CPU (the CPU's bias_sums), each channel added by one block in a fixed tree, so the
** result is the same bits on every run.
*/
#include "backend/cuda/conv_kernels.h"
#include "backend/cuda/launch.cuh"

static __global__ void bias_planes_kernel(void *y, lamp_dtype y_dtype, const void *acc, lamp_dtype acc_dtype, const void *bias,
                                          lamp_dtype bias_dtype, size_t channels, size_t plane, size_t n) {
  LAMP_GRID_STRIDE(i, n) {
    size_t c = (i / plane) % channels;
    lamp_em_store(y, y_dtype, i, lamp_em_add(lamp_em_load(acc, acc_dtype, i), lamp_em_load(bias, bias_dtype, c)));
  }
}

lamp_status lamp_cuda_conv_bias_forward(void *y, lamp_dtype y_dtype, const void *acc, lamp_dtype acc_dtype, const void *bias,
                                        lamp_dtype bias_dtype, size_t batch, size_t channels, size_t plane) {
  size_t n = batch * channels * plane;
  if (n == 0) return LAMP_OK;
  bias_planes_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(y, y_dtype, acc, acc_dtype, bias,
                                                                                        bias_dtype, channels, plane, n);
  return lamp_cuda_launched("conv2d_forward");
}

/* One block per channel: its threads walk the channel's planes of every image, then add up. */
static __global__ void bias_sums_kernel(float *out, const void *dy, lamp_dtype dtype, size_t batch, size_t channels,
                                        size_t plane) {
  __shared__ double s[LAMP_CUDA_THREADS];
  size_t c = blockIdx.x;
  double acc = 0.0;
  for (size_t b = 0; b < batch; b++) {
    size_t base = (b * channels + c) * plane;
    for (size_t p = threadIdx.x; p < plane; p += LAMP_CUDA_THREADS)
      acc = lamp_em_dadd(acc, (double)lamp_em_load(dy, dtype, base + p));
  }
  s[threadIdx.x] = acc;
  for (unsigned half = LAMP_CUDA_THREADS / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half) s[threadIdx.x] = lamp_em_dadd(s[threadIdx.x], s[threadIdx.x + half]);
  }
  if (threadIdx.x == 0) out[c] = (float)s[0];
}

lamp_status lamp_cuda_conv_bias_sums(float *out, const void *dy, lamp_dtype dy_dtype, size_t batch, size_t channels,
                                     size_t plane) {
  if (channels == 0) return LAMP_OK;
  if (channels > 0x7fffffffu)
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "conv2d_backward: %zu channels exceed the grid", channels);
  bias_sums_kernel<<<(unsigned)channels, LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(out, dy, dy_dtype, batch,
                                                                                     channels, plane);
  return lamp_cuda_launched("conv2d_backward");
}
