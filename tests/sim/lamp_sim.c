/*
** lamp-sim: the lamp executable with the simulated device registered (the one line that adds a
** device), so the tests can run any script with --device=sim, under scripts/lamp-run as well
** (LAMP_BIN=build/tests/lamp-sim).
*/
#include <stdio.h>

#include "backend/sim/sim.h"
#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char **argv) {
  if (lamp_backend_register(LAMP_SIM, &lamp_sim_backend) != LAMP_OK) {
    fprintf(stderr, "lamp-sim: %s\n", lamp_last_error());
    return 1;
  }
  return lamp_cli_main(argc, argv);
}
