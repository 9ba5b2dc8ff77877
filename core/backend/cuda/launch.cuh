/*
** What the kernel sources (*.cu) share: launch geometry and the grid-stride loop. Elementwise
** kernels run LAMP_CUDA_THREADS threads a block over as many blocks as the data needs, capped:
** each thread then walks the array with the grid's stride, so any n is covered and a huge
** array does not launch millions of blocks.
*/
#ifndef LAMP_BACKEND_CUDA_LAUNCH_CUH
#define LAMP_BACKEND_CUDA_LAUNCH_CUH

#include <stddef.h>

#include "backend/cuda/elementwise_math.h"
#include "backend/cuda/kernels.h"

#define LAMP_CUDA_THREADS 256
#define LAMP_CUDA_MAX_BLOCKS 8192u

/* Blocks for n elements: at least 1 (callers return early for n == 0 where nothing is due). */
static inline unsigned lamp_cuda_blocks(size_t n) {
  size_t blocks = (n + LAMP_CUDA_THREADS - 1) / LAMP_CUDA_THREADS;
  if (blocks < 1) blocks = 1;
  return blocks > LAMP_CUDA_MAX_BLOCKS ? LAMP_CUDA_MAX_BLOCKS : (unsigned)blocks;
}

/* for (i = this thread's first index; i < n; i += the grid's thread count) */
#define LAMP_GRID_STRIDE(i, n)                                                                   \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                       \
       i += (size_t)blockDim.x * gridDim.x)

/*
** Matrices (rows x cols, row strides given): blocks of threads along a row, rows across the
** grid's y dimension, each loop striding so any size is covered; no division per element.
*/
static inline dim3 lamp_cuda_matrix_grid(size_t rows, size_t cols) {
  size_t x = (cols + LAMP_CUDA_THREADS - 1) / LAMP_CUDA_THREADS;
  if (x > 64) x = 64;
  return dim3(x < 1 ? 1u : (unsigned)x, rows < 1 ? 1u : rows > 65535 ? 65535u : (unsigned)rows, 1);
}

#define LAMP_MATRIX_STRIDE(r, c, rows, cols)                                                     \
  for (size_t r = blockIdx.y; r < (rows); r += gridDim.y)                                       \
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < (cols);                  \
         c += (size_t)blockDim.x * gridDim.x)

#endif
