/*
** CUDA's errors as lamp's: one message shape, "cuda: <what>: <error name>: <error string>", so a
** failure read in a log names the call and CUDA's own words. Out of memory is said plainly.
*/
#include "backend/cuda/runtime.h"

const lamp_backend_services *lamp_cuda_svc;

lamp_status lamp_cuda_status(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return LAMP_OK;
  (void)cudaGetLastError(); /* a failed call also leaves its error for the next launch check: it is told here */
  if (err == cudaErrorMemoryAllocation)
    return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "cuda: %s: out of device memory (%s)", what, cudaGetErrorName(err));
  return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "cuda: %s: %s: %s", what, cudaGetErrorName(err),
                              cudaGetErrorString(err));
}

lamp_status lamp_cuda_launched(const char *op) { return lamp_cuda_status(cudaGetLastError(), op); }
