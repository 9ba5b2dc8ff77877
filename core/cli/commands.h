/* The lamp executable's subcommands; each returns the process exit status. */
#ifndef LAMP_CLI_COMMANDS_H
#define LAMP_CLI_COMMANDS_H

/* The whole command line: `lamp ARGS...` (main.c). */
int lamp_cli_main(int argc, char **argv);

int lamp_cmd_run_script(const char *script, int argc, char **argv);
/* Every plugin found, or those named (names or paths, as plugin-info takes them). */
int lamp_cmd_plugins(int argc, char **argv);
/* A name (each kind's search) or a path: see lamp_plugin_inspect. */
int lamp_cmd_plugin_info(const char *name_or_path);
/* Every device kind: available with its devices, or why not (devices_cmd.c). */
int lamp_cmd_devices(void);
/* `lamp plot FILE.jsonl ... -o OUT.png`: metrics files drawn by gnuplot (plot_cmd.c); the arguments
   after "plot". */
int lamp_cmd_plot(int argc, char **argv);

/* Re-executes once with a faster OpenBLAS kernel where the library misdetects the CPU. */
void lamp_cli_tune_blas(char **argv);

/* "OpenBLAS 0.3.21 ... (core SkylakeX)": what GEMM runs on, for --version and benchmarks. */
const char *lamp_cli_blas_description(void);

#endif
