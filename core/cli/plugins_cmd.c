/* `lamp plugins` and `lamp plugin-info`: what is installed, and what a plugin declares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli/commands.h"
#include "plugin/loader.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"

/* "2 (launched under mpirun)": the probe's score and reason, as `auto` weighs them. */
static void probe_text(const lamp_plugin_handle *h, char *out, size_t size) {
  char reason[256];
  int score = lamp_plugin_probe(h, reason, sizeof reason);
  snprintf(out, size, "%d (%s)", score, reason);
}

typedef char probe_cell[320];

/* The PROBE column of each item ("?" for one that failed), and the column's width. */
static probe_cell *probe_column(const lamp_plugin_listing *items, size_t n, int *width) {
  probe_cell *probes = calloc(n > 0 ? n : 1, sizeof *probes);
  *width = (int)strlen("PROBE");
  for (size_t i = 0; probes != NULL && i < n; i++) {
    if (items[i].handle != NULL) probe_text(items[i].handle, probes[i], sizeof probes[i]);
    else snprintf(probes[i], sizeof probes[i], "?");
    if ((int)strlen(probes[i]) > *width) *width = (int)strlen(probes[i]);
  }
  return probes;
}

int lamp_cmd_plugins(void) {
  lamp_plugin_listing *items;
  size_t n;
  if (lamp_plugin_list(&items, &n) != LAMP_OK) {
    fprintf(stderr, "lamp plugins: %s\n", lamp_last_error());
    return 1;
  }
  int w;
  probe_cell *probes = probe_column(items, n, &w);
  if (probes == NULL) {
    fprintf(stderr, "lamp plugins: out of memory\n");
    free(items);
    return 1;
  }
  printf("%-10s %-10s %-8s %-5s %-*s %s\n", "KIND", "NAME", "VERSION", "ABI", w, "PROBE",
         "PATH");
  int failures = 0;
  for (size_t i = 0; i < n; i++) {
    const lamp_plugin_handle *h = items[i].handle;
    if (h == NULL) {
      printf("%-10s %-10s %-8s %-5s %-*s %s\n           error: %s\n", "?", "?", "?", "?", w,
             probes[i], items[i].path, items[i].error);
      failures++;
      continue;
    }
    printf("%-10s %-10s %-8s %u.%-3u %-*s %s\n", lamp_kind_name(h->kind), h->desc->name,
           h->desc->version, (unsigned)h->desc->abi_major, (unsigned)h->desc->abi_minor, w,
           probes[i], h->path);
  }
  if (n == 0) printf("(no plugins found in %s or LAMP_PLUGIN_PATH)\n", lamp_plugin_dir());
  free(probes);
  free(items);
  return failures ? 1 : 0;
}

static void print_mask(const char *label, uint32_t mask, int count, const char *(*name)(int)) {
  printf("%-12s", label);
  int any = 0;
  for (int i = 0; i < count; i++) {
    if (mask & LAMP_BIT(i)) {
      printf("%s%s", any ? ", " : "", name(i));
      any = 1;
    }
  }
  printf("%s\n", any ? "" : "(none)");
}

static const char *device_name(int d) { return lamp_device_name((lamp_device)d); }
static const char *dtype_name(int d) { return lamp_dtype_name((lamp_dtype)d); }

int lamp_cmd_plugin_info(const char *path) {
  const lamp_plugin_handle *h;
  if (lamp_plugin_inspect(path, &h) != LAMP_OK) {
    fprintf(stderr, "lamp plugin-info: %s\n", lamp_last_error());
    return 1;
  }
  const lamp_plugin *d = h->desc;
  printf("%-12s%s\n", "name", d->name);
  printf("%-12s%s\n", "kind", lamp_kind_name(h->kind));
  printf("%-12s%s\n", "version", d->version);
  printf("%-12s%u.%u (this core: %d.%d)\n", "abi", (unsigned)d->abi_major, (unsigned)d->abi_minor, LAMP_ABI_MAJOR,
         LAMP_ABI_MINOR);
  printf("%-12s%u bytes\n", "table", (unsigned)d->struct_size);
  printf("%-12s%s\n", "path", h->path);
  if (d->description) printf("%-12s%s\n", "description", d->description);
  print_mask("devices", d->devices, LAMP_DEVICE_COUNT, device_name);
  print_mask("dtypes", d->dtypes, LAMP_DTYPE_COUNT, dtype_name);
  printf("%-12s%s\n", "parameters", d->n_params ? "" : "(none)");
  for (uint32_t i = 0; i < d->n_params; i++) {
    const lamp_param *p = &d->params[i];
    printf("  %-14s default %-8g range [%g, %g]  %s\n", p->name, p->default_value, p->min_value, p->max_value,
           p->help ? p->help : "");
  }
  return 0;
}
