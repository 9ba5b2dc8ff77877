/*
** lamp-sim: the lamp executable with the simulated device registered (the one line that adds a
** device), so the tests can run any script with --device=sim, under scripts/lamp-run as well
** (LAMP_BIN=build/tests/lamp-sim). LAMP_SIM_NATIVE16=1 registers the table that advertises
** LAMP_CAP_NATIVE_16BIT_GEMM, so the layers take the 16-bit operand path a CUDA device takes.
** LAMP_SIM_HOST_WAITS=1 prints the host's waits for the device (lamp_sim_host_waits) at the end,
** "lamp-sim: N host waits", for the tests that count synchronisations per step.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char **argv) {
  const char *native16 = getenv("LAMP_SIM_NATIVE16");
  int on = native16 != NULL && strcmp(native16, "1") == 0;
  if (native16 != NULL && *native16 != '\0' && !on && strcmp(native16, "0") != 0) {
    fprintf(stderr, "lamp-sim: LAMP_SIM_NATIVE16 must be 0 or 1, got '%s'\n", native16);
    return 1;
  }
  if (lamp_backend_register(LAMP_SIM, on ? &lamp_sim_native16_backend : &lamp_sim_backend) != LAMP_OK) {
    fprintf(stderr, "lamp-sim: %s\n", lamp_last_error());
    return 1;
  }
  int rc = lamp_cli_main(argc, argv);
  const char *waits = getenv("LAMP_SIM_HOST_WAITS");
  if (waits != NULL && strcmp(waits, "1") == 0)
    fprintf(stderr, "lamp-sim: %llu host waits\n", (unsigned long long)lamp_sim_host_waits());
  return rc;
}
