/*
** lamp's command line: runs a Lua training script, or inspects plugins. main() itself is in
** lamp.c, so that a program that registers another backend first (the simulated device's, for
** the tests) can run the same command line.
**
**   lamp SCRIPT.lua [ARGS...]   run a script; ARGS arrive in the global `arg`
**   lamp plugins [NAME|PATH...] list every plugin found, or those named
**   lamp plugin-info NAME|PATH  print a plugin's descriptor without initialising it
**   lamp devices                the devices this process can use, or why not
**   lamp plot FILE.jsonl... -o OUT.png [--size=WxH]   metrics files drawn into one PNG (gnuplot)
*/
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "lamp/abi.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: lamp SCRIPT.lua [ARGS...]   run a training script (ARGS in the global 'arg')\n"
          "       lamp plugins [NAME|PATH...] list every plugin found (or those named), with kind, version,\n"
          "                                   ABI, probe, path and options\n"
          "       lamp plugin-info NAME|PATH  print a plugin's descriptor without initialising it (a name\n"
          "                                   is looked up as each kind; a path has a '/' or ends in .so)\n"
          "       lamp devices                the devices this process can use (cpu, cuda), or why not\n"
          "       lamp plot FILE.jsonl [FILE.jsonl ...] -o OUT.png [--size=WIDTHxHEIGHT]\n"
          "                                   draw metrics files (Trainer{metrics = ...}) with gnuplot\n"
          "       lamp --version | --help\n"
          "environment: LAMP_PLUGIN_PATH (';'-separated templates, '?' = name, '!' = kind),\n"
          "             LAMP_PLUGIN_DIR, LAMP_BACKEND_DIR (the folder holding cuda.so), LAMP_DATA_DIR,\n"
          "             LAMP_LOG=error|warn|info|debug, LAMP_GEMM=openblas|dnnl|blis (the CPU's GEMM provider)\n");
}

int lamp_cli_main(int argc, char **argv) {
  lamp_cli_tune_blas(argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("lamp %s (plugin ABI %d.%d)\n", LAMP_CLI_VERSION, LAMP_ABI_MAJOR, LAMP_ABI_MINOR);
    printf("blas %s\n", lamp_cli_blas_description());
    return 0;
  }
  if (strcmp(cmd, "plugins") == 0) return lamp_cmd_plugins(argc - 2, argv + 2);
  if (strcmp(cmd, "devices") == 0) {
    if (argc != 2) {
      fprintf(stderr, "lamp devices: expected no arguments, got %d\n", argc - 2);
      return 2;
    }
    return lamp_cmd_devices();
  }
  if (strcmp(cmd, "plugin-info") == 0) {
    if (argc != 3) {
      fprintf(stderr, "lamp plugin-info: expected one plugin name or path, got %d arguments\n", argc - 2);
      return 2;
    }
    return lamp_cmd_plugin_info(argv[2]);
  }
  if (strcmp(cmd, "plot") == 0) return lamp_cmd_plot(argc - 2, argv + 2);
  return lamp_cmd_run_script(cmd, argc - 2, argv + 2);
}
