/*
** `lamp devices`: each device kind this build knows, whether this process can use it, and what its
** devices are; or, for one it cannot use, the reason (the message lamp.device() would raise). The
** exit status is 0 either way: a missing device is a finding, not a failure of the command.
**
**   cpu: available, 1 device
**     cpu:0  Intel(R) Xeon(R) Platinum 8480+, 2015.6 GiB
**       gemm: openblas; bf16: dnnl
**   cuda: not available: device cuda: no CUDA driver: ...
*/
#include <stdio.h>

#include "backend/backend.h"
#include "backend/load.h"
#include "base/error.h"
#include "cli/commands.h"

static void print_devices(lamp_device d) {
  int count = lamp_device_count(d);
  const char *module = lamp_backend_is_module(d) ? lamp_backend_module_path(d) : "";
  printf("%s: available, %d device%s", lamp_device_name(d), count, count == 1 ? "" : "s");
  if (module[0] != '\0') printf(" (backend module %s)", module);
  printf("\n");
  for (int i = 0; i < count; i++) {
    lamp_device_info info;
    if (lamp_device_describe(d, i, &info) != LAMP_OK) {
      printf("  %s:%d  cannot be described: %s\n", lamp_device_name(d), i, lamp_last_error());
      continue;
    }
    printf("  %s:%d  %s", lamp_device_name(d), i, info.name);
    if (info.memory > 0) printf(", %.1f GiB", (double)info.memory / (1024.0 * 1024.0 * 1024.0));
    if (info.cc_major > 0) printf(", compute capability %d.%d", info.cc_major, info.cc_minor);
    printf("\n");
    if (info.gemm[0] != '\0') printf("    gemm: %s\n", info.gemm);
  }
}

int lamp_cmd_devices(void) {
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++) {
    lamp_device device = (lamp_device)d;
    if (d >= LAMP_DEVICE_COUNT && !lamp_device_has_memory(device)) continue; /* an empty slot */
    if (lamp_device_check(device) != LAMP_OK) {
      printf("%s: not available: %s\n", lamp_device_name(device), lamp_last_error());
      continue;
    }
    print_devices(device);
  }
  return fflush(stdout) == 0 ? 0 : 1;
}
