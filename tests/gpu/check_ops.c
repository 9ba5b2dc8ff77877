/*
** check_ops: runs every kernel operation of a device's backend table (backend.h: gemm .. apply_mask)
** and the layer operations (pooling, BatchNorm, convolution) on random data on that device and on
** the CPU, and compares: elementwise operations bit for bit, GEMM and reductions within the bounds
** stated in check_gemm.c and check_reduce.c, pooling and BatchNorm bit for bit (check_layers.c),
** the convolutions within the bounds of check_conv.c. Each device result is computed twice and
** must be the same bits both times. One line per operation and dtype combination,
** "op  shapes  max-err  bound  ok|FAIL", then a summary and a digest of every device result
** (equal digests across runs of one seed: run-to-run determinism across processes).
**
**   check_ops DEVICE [--full] [--seed=N] [--only=OP[,OP...]] [--perturb=OP] [--sample-above=N]
**
** DEVICE is "sim" (the simulated device, registered here), "cuda" or "cuda:N" (loaded by the core
** on first use). --full adds the large shapes (GEMMs up to 4096^3, vectors of 4M elements); without
** it the shapes are small enough for the simulated device to take seconds. --perturb=OP alters the
** first device result of OP after it came back, so that the run must fail (checks the checker).
** GEMMs with m*n*k above 2^31 are compared on 64 rows spread over C; --sample-above=N moves that
** limit (the tests use it to run the sampled comparison on small shapes).
** Exit status: 0 when every line is ok, 1 when one failed or the device is unusable, 2 on usage.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "backend/sim/sim.h"
#include "base/error.h"
#include "check_ops.h"
#include "tensor/memory.h"

static const char *ops[] = {"gemm", "convert", "fill", "add_bias_rows", "sum_rows", "relu_forward", "relu_backward",
                            "cross_entropy", "argmax_rows", "unscale_and_check", "round_through", "accumulate_rounded",
                            "round_stochastic",
                            "scale", "axpy", "sum_squares", "add_into", "add", "apply_mask",
                            "maxpool_forward", "maxpool_backward", "avgpool_forward", "avgpool_backward",
                            "batchnorm_forward", "batchnorm_backward", "conv2d_forward", "conv2d_backward"};
#define N_OPS (sizeof ops / sizeof *ops)

static int usage(const char *why) {
  fprintf(stderr, "check_ops: %s\nusage: check_ops sim|cuda|cuda:N [--full] [--seed=N] [--only=OP,...] [--perturb=OP] [--sample-above=N]\n",
          why);
  return 2;
}

static int known_op(const char *name) {
  for (size_t i = 0; i < N_OPS; i++)
    if (strcmp(ops[i], name) == 0) return 1;
  return 0;
}

/* Every name in a comma-separated list is an operation. */
static int known_ops(const char *list) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save))
    if (!known_op(t)) return 0;
  return 1;
}

/* The device named on the command line, ready for use; 1 with the reason printed if not. */
static int open_device(const char *spec, lamp_device *out) {
  char name[32];
  int ordinal = 0;
  const char *colon = strchr(spec, ':');
  snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - spec) : (int)strlen(spec), spec);
  if (colon != NULL) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (*end != '\0' || end == colon + 1 || v < 0 || v > 1024) return usage("the ordinal after ':' must be a number");
    ordinal = (int)v;
  }
  if (strcmp(name, "sim") == 0 && lamp_backend_register(LAMP_SIM, &lamp_sim_backend) != LAMP_OK) {
    fprintf(stderr, "check_ops: %s\n", lamp_last_error());
    return 1;
  }
  if (strcmp(name, "cpu") == 0) return usage("the CPU is the reference: name another device");
  if (lamp_device_parse(name, out) != LAMP_OK || lamp_device_check(*out) != LAMP_OK ||
      (ordinal != lamp_device_ordinal(*out) && lamp_device_select(*out, ordinal) != LAMP_OK)) {
    fprintf(stderr, "check_ops: %s\n", lamp_last_error());
    return 1;
  }
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  check_run run = {.sample_above = 1ull << 31};
  const char *device = NULL;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--full") == 0) run.full = 1;
    else if (strncmp(a, "--seed=", 7) == 0) seed = strtoull(a + 7, NULL, 10);
    else if (strncmp(a, "--only=", 7) == 0) run.only = a + 7;
    else if (strncmp(a, "--perturb=", 10) == 0) run.perturb = a + 10;
    else if (strncmp(a, "--sample-above=", 15) == 0) run.sample_above = strtoull(a + 15, NULL, 10);
    else if (a[0] == '-') return usage("unknown option");
    else if (device == NULL) device = a;
    else return usage("one device only");
  }
  if (device == NULL) return usage("no device named");
  if (run.only != NULL && !known_ops(run.only)) return usage("--only names an operation that is not in the table");
  if (run.perturb != NULL && !known_op(run.perturb)) return usage("--perturb names an operation that is not in the table");
  int opened = open_device(device, &run.device);
  if (opened != 0) return opened;
  lamp_rng_seed(&run.rng, seed);

  printf("check_ops: device %s (ordinal %d) against cpu, seed %llu, %s shapes\n", device,
         lamp_device_ordinal(run.device), (unsigned long long)seed, run.full ? "full" : "small");
  printf("%-33s %-32s %9s %9s  %s\n", "op", "shapes", "max-err", "bound", "result");
  double start = now();
  check_gemm(&run);
  check_elementwise(&run);
  check_reductions(&run);
  check_layers(&run);
  check_conv(&run);
  lamp_backend_release_workspace();

  if (run.perturb != NULL && !run.perturbed) printf("--perturb=%s: no case of it ran\n", run.perturb);
  printf("check_ops: %d of %d lines ok, %.1f s; digest %016llx\n", run.lines - run.failures, run.lines, now() - start,
         (unsigned long long)run.digest);
  return run.failures != 0 || run.lines == 0 ? 1 : 0;
}
