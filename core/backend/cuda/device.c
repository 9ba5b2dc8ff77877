/*
** Which CUDA devices there are and which one lamp uses. Opening the module only counts them
** (cudaGetDeviceCount creates no context); the chosen device is activated on first real use, so a
** process told "cuda:1" never touches device 0. Failures to find a device are told in CUDA's words,
** after lamp's name for the case (no driver, a driver too old, no device).
*/
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/runtime.h"

static struct {
  int count;
  int ordinal; /* the chosen device */
  int active;  /* lamp_cuda_activate succeeded: the choice is fixed */
} dev;

/* Whether the driver's library can be opened at all: cudaErrorInsufficientDriver means either no
   driver or one older than the runtime, and the advice differs. */
static int driver_library_present(void) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == NULL) return 0;
  dlclose(h);
  return 1;
}

lamp_status lamp_cuda_devices_open(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  const char *name = cudaGetErrorName(err), *text = cudaGetErrorString(err);
  if (err == cudaErrorInsufficientDriver && !driver_library_present())
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "cuda: no CUDA driver: %s (%s)", text, name);
  if (err == cudaErrorInsufficientDriver)
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED,
                                "cuda: the CUDA driver is older than this build's CUDA runtime %d.%d: %s (%s)",
                                CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, text, name);
  if (err == cudaErrorNoDevice)
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "cuda: no CUDA device: %s (%s)", text, name);
  if (err != cudaSuccess)
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "cuda: CUDA cannot start: %s (%s)", text, name);
  if (n <= 0) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "cuda: no CUDA device: the driver reports none%s%s%s",
                                visible ? " (CUDA_VISIBLE_DEVICES is '" : "", visible ? visible : "",
                                visible ? "')" : "");
  }
  dev.count = n;
  return LAMP_OK;
}

int lamp_cuda_count(void) { return dev.count; }

int lamp_cuda_ordinal(void) { return dev.ordinal; }

int lamp_cuda_is_active(void) { return dev.active; }

lamp_status lamp_cuda_select(int ordinal) {
  if (dev.active && ordinal != dev.ordinal)
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_USAGE,
                                "cuda: cannot switch to cuda:%d: cuda:%d is in use already (choose the device "
                                "before anything is allocated on it)",
                                ordinal, dev.ordinal);
  dev.ordinal = ordinal;
  return LAMP_OK;
}

lamp_status lamp_cuda_describe(int ordinal, lamp_device_info *out) {
  struct cudaDeviceProp p;
  memset(out, 0, sizeof *out);
  lamp_status st = lamp_cuda_status(cudaGetDeviceProperties(&p, ordinal), "reading the device's properties");
  if (st != LAMP_OK) return st;
  memcpy(out->name, p.name, sizeof out->name < sizeof p.name ? sizeof out->name : sizeof p.name);
  out->name[sizeof out->name - 1] = '\0';
  out->memory = p.totalGlobalMem;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  return LAMP_OK;
}

lamp_status lamp_cuda_activate(void) {
  if (dev.active) return LAMP_OK;
  lamp_status st = lamp_cuda_status(cudaSetDevice(dev.ordinal), "making the chosen device current");
  if (st == LAMP_OK) st = lamp_cuda_queue_open();
  if (st == LAMP_OK) st = lamp_cuda_pool_open(dev.ordinal);
  dev.active = st == LAMP_OK;
  return st;
}
