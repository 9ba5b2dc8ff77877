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

/* "lr=0.01 (number), sign=exact (enum: exact|smooth), tag="" (string)": every option a plugin
   takes, under its row. */
static void print_options_line(const lamp_plugin *d) {
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(d, &n_text);
  if (d->n_params == 0 && n_text == 0) return;
  printf("%-10s options:", "");
  for (uint32_t i = 0; i < d->n_params; i++)
    printf("%s %s=%g (number)", i > 0 ? "," : "", d->params[i].name, d->params[i].default_value);
  for (uint32_t i = 0; i < n_text; i++) {
    printf("%s %s=", i + d->n_params > 0 ? "," : "", t[i].name);
    if (t[i].choices == NULL) {
      printf("\"%s\" (string)", t[i].default_value);
      continue;
    }
    printf("%s (enum:", t[i].default_value);
    for (size_t c = 0; t[i].choices[c] != NULL; c++) printf("%s%s", c > 0 ? "|" : " ", t[i].choices[c]);
    printf(")");
  }
  printf("\n");
}

/* One named plugin as a listing item: found and validated as plugin-info finds it. */
static void inspect_item(const char *name_or_path, lamp_plugin_listing *item) {
  memset(item, 0, sizeof *item);
  snprintf(item->path, sizeof item->path, "%s", name_or_path);
  item->status = lamp_plugin_inspect(name_or_path, &item->handle);
  if (item->status != LAMP_OK) {
    item->handle = NULL;
    snprintf(item->error, sizeof item->error, "%s", lamp_last_error());
  }
}

/* Every plugin the search finds, or the ones named (names or paths, as plugin-info takes them). */
static lamp_status gather(int argc, char **argv, lamp_plugin_listing **items, size_t *n) {
  if (argc == 0) return lamp_plugin_list(items, n);
  *items = calloc((size_t)argc, sizeof **items);
  if (*items == NULL) return lamp_error(LAMP_ERR_SYSTEM, "out of memory");
  for (int i = 0; i < argc; i++) inspect_item(argv[i], &(*items)[i]);
  *n = (size_t)argc;
  return LAMP_OK;
}

int lamp_cmd_plugins(int argc, char **argv) {
  lamp_plugin_listing *items;
  size_t n;
  if (gather(argc, argv, &items, &n) != LAMP_OK) {
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
    print_options_line(h->desc);
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

/* A text option's row: its default, "string" or the enum's choices, its help. */
static void print_text_param(const lamp_text_param *p) {
  char quoted[256];
  snprintf(quoted, sizeof quoted, "\"%s\"", p->default_value);
  printf("  %-14s default %-8s ", p->name, p->choices != NULL ? p->default_value : quoted);
  if (p->choices == NULL) {
    printf("string  %s\n", p->help ? p->help : "");
    return;
  }
  char list[1024];
  lamp_plugin_choices_text(p->choices, list, sizeof list);
  printf("enum, one of: %s  %s\n", list, p->help ? p->help : "");
}

int lamp_cmd_plugin_info(const char *name_or_path) {
  const lamp_plugin_handle *h;
  if (lamp_plugin_inspect(name_or_path, &h) != LAMP_OK) {
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
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(d, &n_text);
  printf("%-12s%s\n", "parameters", d->n_params || n_text ? "" : "(none)");
  for (uint32_t i = 0; i < d->n_params; i++) {
    const lamp_param *p = &d->params[i];
    printf("  %-14s default %-8g range [%g, %g]  %s\n", p->name, p->default_value, p->min_value, p->max_value,
           p->help ? p->help : "");
  }
  for (uint32_t i = 0; i < n_text; i++) print_text_param(&t[i]);
  return 0;
}
