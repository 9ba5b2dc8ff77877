/*
** cuDNN, opened on the first convolution (dlopen): the module, and every run without a
** convolution, works on a machine without libcudnn. Only the graph API's few entry points are
** used (conv_cudnn.c), through this table; the header gives their types, the library their code.
** LAMP_CUDNN_LIBRARY names another file to open (a test points it at a missing one).
*/
#ifndef LAMP_BACKEND_CUDA_CUDNN_LIB_H
#define LAMP_BACKEND_CUDA_CUDNN_LIB_H

#include <cudnn_graph.h>

#include "backend/cuda/cuda_impl.h"

#define LAMP_CUDNN_DEFAULT_LIBRARY "libcudnn.so.9"

typedef struct lamp_cudnn_api {
  size_t (*GetVersion)(void);
  const char *(*GetErrorString)(cudnnStatus_t);
  cudnnStatus_t (*Create)(cudnnHandle_t *);
  cudnnStatus_t (*Destroy)(cudnnHandle_t);
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
  cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void *);
  cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
  cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} lamp_cudnn_api;

/* The table, the library opened on the first call ("<fn>: device cuda: the cuDNN library
   <file> was not found (<dlerror>)" when it cannot be; a failure is not cached, so a later
   call tries again). */
lamp_status lamp_cudnn_api_get(const char *fn, const lamp_cudnn_api **out);

/* The handle, made on first use and bound to lamp_cuda_stream(). */
lamp_status lamp_cudnn_handle(const char *fn, const lamp_cudnn_api **api, cudnnHandle_t *out);

/* LAMP_OK for CUDNN_STATUS_SUCCESS, else LAMP_ERR_SYSTEM "<fn>: cudnn: <what>: <error string>". */
lamp_status lamp_cudnn_status(const lamp_cudnn_api *api, cudnnStatus_t st, const char *fn, const char *what);

/* Destroys the handle (at the module's close); the library stays open. */
void lamp_cudnn_release(void);

#endif
