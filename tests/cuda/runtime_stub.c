/*
** The CUDA module's runtime side (cuda_impl.h: services, status, launch check, stream, scratch),
** replaced for the tests that link only the kernel side's sources (test_cuda_kernel_checks.c,
** test_cuda_conv_checks.c): errors go to the core's error, the stream is the legacy one, and
** scratch is a plain cudaMalloc (no call in those tests reaches it with a driver); the ledger
** counts nothing and no graph is ever captured.
*/
#include <stdarg.h>

#include "backend/cuda/cuda_impl.h"
#include "base/error.h"

static lamp_status stub_error(lamp_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lamp_status s = lamp_verror(code, fmt, ap);
  va_end(ap);
  return s;
}

static void stub_ledger(lamp_device device, lamp_mem_tag tag, size_t bytes) { (void)device, (void)tag, (void)bytes; }

static const lamp_backend_services services = {.struct_size = sizeof services,
                                               .version = LAMP_BACKEND_MODULE_VERSION,
                                               .backend_size = sizeof(lamp_backend),
                                               .error = stub_error,
                                               .ledger_add = stub_ledger,
                                               .ledger_sub = stub_ledger};
const lamp_backend_services *lamp_cuda_svc = &services;

lamp_status lamp_cuda_status(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return LAMP_OK;
  return stub_error(LAMP_ERR_SYSTEM, "cuda: %s: %s: %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

lamp_status lamp_cuda_launched(const char *op) { return lamp_cuda_status(cudaGetLastError(), op); }

cudaStream_t lamp_cuda_stream(void) { return NULL; }

lamp_status lamp_cuda_scratch(size_t bytes, void **out) { return lamp_cuda_status(cudaMalloc(out, bytes), "scratch"); }

/* These tests record no graph. */
int lamp_cuda_capturing(void) { return 0; }

lamp_status lamp_cuda_refuse_in_capture(const char *what) {
  (void)what;
  return LAMP_OK;
}
