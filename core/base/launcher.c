#include "base/launcher.h"

#include <stddef.h>
#include <stdlib.h>

/* The first of `vars` that is set to a whole number in [0, 2^20), or -1. */
static int first_number(const char *const *vars, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *v = getenv(vars[i]);
    if (v == NULL || v[0] == '\0') continue;
    char *end;
    long value = strtol(v, &end, 10);
    if (*end == '\0' && value >= 0 && value < 1 << 20) return (int)value;
  }
  return -1;
}

const char *lamp_launcher_mpi_var(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v != NULL && v[0] != '\0') return vars[i];
  }
  return NULL;
}

int lamp_launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"};
  return first_number(vars, sizeof vars / sizeof vars[0]);
}

int lamp_launcher_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"};
  return first_number(vars, sizeof vars / sizeof vars[0]);
}
