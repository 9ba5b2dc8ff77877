/*
** Inside the CUDA backend module (build/backends/cuda.so): what its files share. The module is
** built only where the CUDA toolkit is found and loaded by the core on the first use of the cuda
** device (core/backend/module.h). It links cudart_static and cuBLAS; nothing else in lamp links
** CUDA.
**
** The runtime side (module.c, device.c, memory.c, queue.c) owns the device, the one stream the
** core's work goes to, memory and copies. The kernel side (kernels.c, gemm.c, *.cu) fills the
** table's kernel slots; every kernel is enqueued on lamp_cuda_stream() and never synchronises.
** Only the thread that loaded the module issues CUDA work (the core's main thread).
*/
#ifndef LAMP_BACKEND_CUDA_IMPL_H
#define LAMP_BACKEND_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "backend/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The core's services, set by lamp_backend_module_open before anything else runs. */
extern const lamp_backend_services *lamp_cuda_svc;

/* LAMP_OK for cudaSuccess; otherwise LAMP_ERR_SYSTEM with "cuda: <what>: <error name>: <error
   string>" recorded through the services (out of memory is named as such). */
lamp_status lamp_cuda_status(cudaError_t err, const char *what);

/* After a kernel launch: cudaGetLastError() as lamp_cuda_status(err, op). */
lamp_status lamp_cuda_launched(const char *op);

/* The stream every queued operation of the core goes to (non-blocking). It is created when the
   chosen device is first used (an allocation, a copy: runtime.h), so it exists before any kernel
   runs, every kernel's operands having been allocated. */
cudaStream_t lamp_cuda_stream(void);

/*
** Scratch device memory of at least `bytes` for work enqueued on lamp_cuda_stream() (reduction
** partials, converted GEMM operands): one buffer that grows, released in stream order, so a
** kernel may use it until the next call of lamp_cuda_scratch. Not zeroed; charged to the
** ledger as workspace.
*/
lamp_status lamp_cuda_scratch(size_t bytes, void **out);

/* Whether the stream is being captured into a graph (graph.c), and LAMP_OK unless it is: then the
   error "cuda: <what> while a graph is being captured (...)", which also fails the capture. What
   a replay could not repeat (an allocation, a wait, a copy from host memory) asks first. */
int lamp_cuda_capturing(void);
lamp_status lamp_cuda_refuse_in_capture(const char *what);

/* Fills every kernel slot of the table (gemm .. apply_mask) and the coarse layer operations
   (pooling, BatchNorm, the cuDNN convolutions); the runtime side calls it once while building the
   table at open. */
void lamp_cuda_fill_kernels(lamp_backend *b);

#ifdef __cplusplus
}
#endif
#endif
