/* Argument checks of the kernel slots, worded as the CPU backend's (core/backend/cpu/checks.c),
   so a caller sees the same message whichever device refused the call. */
#include "backend/cuda/kernels.h"

size_t lamp_cuda_dtype_size(lamp_dtype dtype) { return dtype == LAMP_F32 ? 4 : 2; }

lamp_status lamp_cuda_check_float(const char *fn, const char *role, lamp_dtype dtype) {
  if (lamp_dtype_is_float(dtype)) return LAMP_OK;
  if (role == NULL) {
    return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "%s: dtype %s not supported (expected f32, f16 or bf16)",
                                fn, lamp_dtype_name(dtype));
  }
  return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "%s: dtype %s not supported for %s (expected f32, f16 or bf16)",
                              fn, lamp_dtype_name(dtype), role);
}

lamp_status lamp_cuda_check_half(const char *fn, const char *role, lamp_dtype dtype) {
  if (dtype == LAMP_F16 || dtype == LAMP_BF16) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED, "%s: dtype %s not supported for %s (expected f16 or bf16)", fn,
                              lamp_dtype_name(dtype), role);
}

lamp_status lamp_cuda_check_data(const char *fn, const char *name, const void *ptr, size_t count) {
  if (ptr != NULL || count == 0) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
}
