/*
** OpenBLAS 0.3.21 (Debian 12) does not recognise recent Intel CPUs and falls back to its
** generic "Prescott" SSE3 kernels, which halve GEMM speed on a CPU with AVX-512. The kernel is
** chosen when libopenblas loads, before main runs, so the only remedy is to set
** OPENBLAS_CORETYPE and re-execute once. A user's own OPENBLAS_CORETYPE is always respected,
** and LAMP_BLAS_AUTOTUNE=0 turns this off.
*/
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"
#include "cli/commands.h"

static const char *better_coretype(void) {
  if (lamp_cpu_has(LAMP_ISA_AVX512F) && lamp_cpu_has(LAMP_ISA_AVX512BW) && lamp_cpu_has(LAMP_ISA_AVX512VL) &&
      lamp_cpu_has(LAMP_ISA_AVX512DQ))
    return "SkylakeX";
  if (lamp_cpu_has(LAMP_ISA_AVX2) && lamp_cpu_has(LAMP_ISA_FMA)) return "Haswell";
  return NULL;
}

void lamp_cli_tune_blas(char **argv) {
  const char *off = getenv("LAMP_BLAS_AUTOTUNE");
  if (getenv("OPENBLAS_CORETYPE") != NULL || (off != NULL && strcmp(off, "0") == 0)) return;
  const char *core = openblas_get_corename();
  if (core == NULL || strcmp(core, "Prescott") != 0) return;
  const char *better = better_coretype();
  if (better == NULL) return;
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);
  /* exec failed: carry on with the generic kernels, which are slower but correct. */
  unsetenv("OPENBLAS_CORETYPE");
}

const char *lamp_cli_blas_description(void) {
  static char description[256];
  const char *config = openblas_get_config();
  const char *core = openblas_get_corename();
  snprintf(description, sizeof description, "%s (core %s)", config ? config : "OpenBLAS", core ? core : "unknown");
  return description;
}
