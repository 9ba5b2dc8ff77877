/*
** What the CPU device is, for lamp.device("cpu") and `lamp devices`: the processor's model name
** (Linux's /proc/cpuinfo), the machine's physical memory and the GEMM providers in use.
*/
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_provider.h"

/* The first "model name : ..." line's value into out; 0 when there is none (not every
   architecture's kernel writes one). */
static int model_name(char *out, size_t size) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *colon = strchr(line, ':');
    if (colon == NULL) continue;
    const char *v = colon + 1 + strspn(colon + 1, " \t");
    size_t len = strcspn(v, "\n");
    snprintf(out, size, "%.*s", (int)len, v);
    found = len > 0;
  }
  fclose(f);
  return found;
}

lamp_status lamp_cpu_describe(int ordinal, lamp_device_info *out) {
  (void)ordinal; /* the registry checked it: the CPU is one device */
  memset(out, 0, sizeof *out);
  if (!model_name(out->name, sizeof out->name)) snprintf(out->name, sizeof out->name, "cpu");
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->memory = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
  lamp_gemm_choice_describe(out->gemm, sizeof out->gemm);
  return LAMP_OK;
}
