/*
** Opening cuDNN (cudnn_lib.h). The library is opened once and kept for the process: its
** engines may keep state (kernel caches) that outlives any handle.
*/
#include "backend/cuda/cudnn_lib.h"

#include <dlfcn.h>
#include <stdlib.h>

static lamp_cudnn_api api;
static int loaded;
static cudnnHandle_t handle;
static cudaStream_t handle_stream;

static const char *library_name(void) {
  const char *env = getenv("LAMP_CUDNN_LIBRARY");
  return env != NULL && env[0] != '\0' ? env : LAMP_CUDNN_DEFAULT_LIBRARY;
}

/* One entry of the table: *slot = the symbol, or the error naming it. */
static lamp_status bind(void *lib, const char *fn, const char *file, const char *symbol, void **slot) {
  *slot = dlsym(lib, symbol);
  if (*slot != NULL) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: device cuda: the cuDNN library %s lacks %s", fn, file, symbol);
}

#define BIND(name) (s == LAMP_OK ? bind(lib, fn, file, "cudnn" #name, (void **)&t.name) : s)

lamp_status lamp_cudnn_api_get(const char *fn, const lamp_cudnn_api **out) {
  if (loaded) {
    *out = &api;
    return LAMP_OK;
  }
  const char *file = library_name();
  void *lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *why = dlerror();
    return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: device cuda: the cuDNN library %s was not found (%s)", fn,
                                file, why != NULL ? why : "no reason given");
  }
  lamp_cudnn_api t;
  lamp_status s = LAMP_OK;
  s = BIND(GetVersion);
  s = BIND(GetErrorString);
  s = BIND(Create);
  s = BIND(Destroy);
  s = BIND(SetStream);
  s = BIND(BackendCreateDescriptor);
  s = BIND(BackendDestroyDescriptor);
  s = BIND(BackendFinalize);
  s = BIND(BackendSetAttribute);
  s = BIND(BackendGetAttribute);
  s = BIND(BackendExecute);
  if (s != LAMP_OK) {
    dlclose(lib);
    return s;
  }
  size_t version = t.GetVersion();
  if (version / 10000 != CUDNN_MAJOR) {
    dlclose(lib);
    return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: device cuda: the cuDNN library %s is version %zu (expected %d.x)",
                                fn, file, version, CUDNN_MAJOR);
  }
  api = t;
  loaded = 1;
  *out = &api;
  return LAMP_OK;
}

lamp_status lamp_cudnn_status(const lamp_cudnn_api *a, cudnnStatus_t st, const char *fn, const char *what) {
  if (st == CUDNN_STATUS_SUCCESS) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: cudnn: %s: %s", fn, what, a->GetErrorString(st));
}

lamp_status lamp_cudnn_handle(const char *fn, const lamp_cudnn_api **out_api, cudnnHandle_t *out) {
  const lamp_cudnn_api *a = NULL;
  lamp_status s = lamp_cudnn_api_get(fn, &a);
  if (s != LAMP_OK) return s;
  if (handle == NULL) {
    cudnnHandle_t h = NULL;
    s = lamp_cudnn_status(a, a->Create(&h), fn, "cudnnCreate");
    if (s != LAMP_OK) return s;
    handle = h;
    handle_stream = NULL;
  }
  cudaStream_t stream = lamp_cuda_stream();
  if (stream != handle_stream) {
    s = lamp_cudnn_status(a, a->SetStream(handle, stream), fn, "cudnnSetStream");
    if (s != LAMP_OK) return s;
    handle_stream = stream;
  }
  *out_api = a;
  *out = handle;
  return LAMP_OK;
}

void lamp_cudnn_release(void) {
  if (handle != NULL) api.Destroy(handle);
  handle = NULL;
  handle_stream = NULL;
}
