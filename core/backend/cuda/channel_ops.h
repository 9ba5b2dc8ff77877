/*
** The CUDA backend's coarse slots for pooling (pool.cu) and BatchNorm (batchnorm.cu): backend.h
** gives their contracts, core/backend/cpu/pool.c and batchnorm.c the values they reproduce, and
** channel_math.h the per-element math both share with their CPU test.
*/
#ifndef LAMP_BACKEND_CUDA_CHANNEL_OPS_H
#define LAMP_BACKEND_CUDA_CHANNEL_OPS_H

#include "backend/cuda/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

lamp_status lamp_cuda_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                      size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cuda_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                       const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cuda_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                      const lamp_conv_geom *g);
lamp_status lamp_cuda_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                       size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cuda_batchnorm_forward(const lamp_batchnorm_args *a);
lamp_status lamp_cuda_batchnorm_backward(const lamp_batchnorm_args *a);

#ifdef __cplusplus
}
#endif
#endif
