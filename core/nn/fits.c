#include "nn/fits.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/error.h"

uint64_t lamp_physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return lamp_size_mul_add((uint64_t)pages, (uint64_t)page, 0);
}

uint64_t lamp_size_mul_add(uint64_t a, uint64_t b, uint64_t c) {
  if (b != 0 && a > UINT64_MAX / b) return UINT64_MAX;
  uint64_t p = a * b;
  return p > UINT64_MAX - c ? UINT64_MAX : p + c;
}

/* Memory the host addresses (the CPU's, the simulated device's) comes out of the host's. */
static int uses_host_memory(lamp_device device) { return lamp_device_has(device, LAMP_CAP_HOST_VIEW); }

lamp_status lamp_check_fits(lamp_device device, uint64_t bytes, const char *hint, const char *what, ...) {
  uint64_t physical = lamp_physical_memory();
  if (!uses_host_memory(device) || physical == 0 || bytes <= physical) return LAMP_OK;
  char subject[1024];
  va_list ap;
  va_start(ap, what);
  vsnprintf(subject, sizeof subject, what, ap);
  va_end(ap);
  /* A saturated count stands for any size past 2^64 - 2. */
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s needs %s%llu bytes, more than this machine's %.1f GiB (%llu bytes) of physical memory%s",
                    subject, bytes == UINT64_MAX ? "more than " : "", (unsigned long long)(bytes == UINT64_MAX ? bytes - 1 : bytes),
                    (double)physical / 1073741824.0, (unsigned long long)physical, hint ? hint : "");
}
