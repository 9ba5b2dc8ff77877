/* The lamp executable: its command line, with the backends built into the core. */
#include "cli/commands.h"

int main(int argc, char **argv) { return lamp_cli_main(argc, argv); }
