// Compiled, never linked or run: proves that nvcc builds a real kernel and its launcher with
// the project's CUDA flags (warnings are errors). See tests/cuda/CMakeLists.txt.
#include <cuda_runtime.h>

// y[i] += a * x[i] over a grid-stride loop, so any grid size covers any n.
static __global__ void saxpy_kernel(int n, float a, const float *__restrict__ x,
                                    float *__restrict__ y) {
  const int stride = (int)(blockDim.x * gridDim.x);
  for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    y[i] = a * x[i] + y[i];
  }
}

// Launches on stream; x and y are device pointers. Returns the launch error, if any.
extern "C" cudaError_t lamp_cuda_compile_check_saxpy(int n, float a, const float *x, float *y,
                                                     cudaStream_t stream) {
  if (n <= 0) {
    return cudaSuccess;
  }
  const int block = 256;
  const int blocks = (n + block - 1) / block;
  const int grid = blocks < 4096 ? blocks : 4096;
  saxpy_kernel<<<grid, block, 0, stream>>>(n, a, x, y);
  return cudaGetLastError();
}
