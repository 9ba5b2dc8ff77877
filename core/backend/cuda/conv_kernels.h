/*
** The convolution's own kernels (conv_bias.cu) and its slots (conv_cudnn.c): cuDNN computes
** the products, these kernels the bias terms around them. All are queued on lamp_cuda_stream().
*/
#ifndef LAMP_BACKEND_CUDA_CONV_KERNELS_H
#define LAMP_BACKEND_CUDA_CONV_KERNELS_H

#include <cudnn_graph.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table's slots (backend.h gives the contracts). */
lamp_status lamp_cuda_conv2d_forward(void **plan, const lamp_conv2d_args *a);
lamp_status lamp_cuda_conv2d_backward(void **plan, const lamp_conv2d_args *a);
void lamp_cuda_conv2d_plan_free(void *plan);

/* Whether an engine with these numerical notes may run (conv_cudnn.c says which and why). */
int lamp_cuda_conv_engine_acceptable(const cudnnBackendNumericalNote_t *notes, int64_t count, lamp_dtype compute);

/* y[b, c, p] = acc[b, c, p] + bias[c] in fp32, rounded once to y's dtype (y may be acc itself). */
lamp_status lamp_cuda_conv_bias_forward(void *y, lamp_dtype y_dtype, const void *acc, lamp_dtype acc_dtype, const void *bias,
                                        lamp_dtype bias_dtype, size_t batch, size_t channels, size_t plane);

/* out[c] = the sum over b and p of dy[b, c, p], added in double, rounded once to fp32. */
lamp_status lamp_cuda_conv_bias_sums(float *out, const void *dy, lamp_dtype dy_dtype, size_t batch, size_t channels,
                                     size_t plane);

#ifdef __cplusplus
}
#endif
#endif
