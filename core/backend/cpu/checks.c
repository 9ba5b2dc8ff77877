/* Argument checks shared by the CPU kernels, so every kernel words its errors the same way. */
#include "backend/cpu/cpu_backend.h"

#include "base/error.h"
#include "tensor/dtype.h"

lamp_status lamp_cpu_check_float(const char *fn, const char *role, lamp_dtype dtype) {
  if (lamp_dtype_is_float(dtype)) return LAMP_OK;
  if (role == NULL) {
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: dtype %s not supported (expected f32, f16 or bf16)",
                      fn, lamp_dtype_name(dtype));
  }
  return lamp_error(LAMP_ERR_UNSUPPORTED,
                    "%s: dtype %s not supported for %s (expected f32, f16 or bf16)", fn,
                    lamp_dtype_name(dtype), role);
}

lamp_status lamp_cpu_check_half(const char *fn, const char *role, lamp_dtype dtype) {
  if (dtype == LAMP_F16 || dtype == LAMP_BF16) return LAMP_OK;
  return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: dtype %s not supported for %s (expected f16 or bf16)", fn,
                    lamp_dtype_name(dtype), role);
}

lamp_status lamp_cpu_check_data(const char *fn, const char *name, const void *ptr, size_t count) {
  if (ptr != NULL || count == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
}
