/* The kernel slots of the CUDA backend's table: cuBLAS for the GEMM (gemm.c), lamp's own kernels
   for the rest (*.cu). The runtime side builds the table and calls this once at open. */
#include "backend/cuda/channel_ops.h"
#include "backend/cuda/conv_kernels.h"
#include "backend/cuda/kernels.h"

void lamp_cuda_fill_kernels(lamp_backend *b) {
  /* cublasGemmEx multiplies fp16 and bf16 operands as they are stored (gemm.c). */
  b->caps |= LAMP_CAP_NATIVE_16BIT_GEMM;
  b->gemm = lamp_cuda_gemm;
  b->convert = lamp_cuda_convert;
  b->fill = lamp_cuda_fill;
  b->add_bias_rows = lamp_cuda_add_bias_rows;
  b->sum_rows = lamp_cuda_sum_rows;
  b->relu_forward = lamp_cuda_relu_forward;
  b->relu_backward = lamp_cuda_relu_backward;
  b->cross_entropy = lamp_cuda_cross_entropy;
  b->argmax_rows = lamp_cuda_argmax_rows;
  b->unscale_and_check = lamp_cuda_unscale_and_check;
  b->round_through = lamp_cuda_round_through;
  b->accumulate_rounded = lamp_cuda_accumulate_rounded;
  b->round_stochastic = lamp_cuda_round_stochastic; /* round_stochastic.cu */
  b->scale = lamp_cuda_scale;
  b->axpy = lamp_cuda_axpy;
  b->sum_squares = lamp_cuda_sum_squares;
  b->add_into = lamp_cuda_add_into;
  b->add = lamp_cuda_add;
  b->apply_mask = lamp_cuda_apply_mask;
  /* coarse layer operations: pooling (pool.cu), BatchNorm (batchnorm.cu) */
  b->maxpool_forward = lamp_cuda_maxpool_forward;
  b->maxpool_backward = lamp_cuda_maxpool_backward;
  b->avgpool_forward = lamp_cuda_avgpool_forward;
  b->avgpool_backward = lamp_cuda_avgpool_backward;
  b->batchnorm_forward = lamp_cuda_batchnorm_forward;
  b->batchnorm_backward = lamp_cuda_batchnorm_backward;
  b->conv2d_forward = lamp_cuda_conv2d_forward;
  b->conv2d_backward = lamp_cuda_conv2d_backward;
  b->conv2d_plan_free = lamp_cuda_conv2d_plan_free;
}
