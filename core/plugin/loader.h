/*
** Finding, loading and validating plugins (DESIGN.md "The plugin ABI", rules 5 to 8).
**
** A name containing '/' is a path used verbatim. Otherwise name N of kind K is searched in:
**   1. LAMP_PLUGIN_PATH: ';'-separated templates in which '?' stands for N and '!' for the kind
**      folder ("precision", "comm", "optim"); e.g. "/opt/lamp/!/?.so;./?.so";
**   2. the build/install plugin directory: <LAMP_PLUGIN_DIR>/<kind>/N.so;
**   3. a bare dlopen("lamp-<kind>-N.so"), so LD_LIBRARY_PATH still works.
** Loaded plugins are cached by real path and never unloaded during the run.
*/
#ifndef LAMP_PLUGIN_LOADER_H
#define LAMP_PLUGIN_LOADER_H

#include <limits.h>

#include "lamp/plugin.h"

typedef struct lamp_plugin_handle {
  const lamp_plugin *desc; /* validated; the family table starts here */
  lamp_kind kind;
  char path[PATH_MAX];     /* real path of the .so */
} lamp_plugin_handle;

/* "precision", "comm", "optim". */
const char *lamp_kind_name(lamp_kind kind);
int lamp_kind_parse(const char *name, lamp_kind *out);

/* The directory built plugins are found in (compile-time default, LAMP_PLUGIN_DIR overrides). */
const char *lamp_plugin_dir(void);

/*
** Resolves, dlopens and validates. Logs one info line on first load:
** "comm: single 1.0 (ABI 1.0) from /path/single.so". Errors carry the exact messages of the
** validation order, each naming the path.
*/
lamp_status lamp_plugin_load(lamp_kind kind, const char *name_or_path, const lamp_plugin_handle **out);

/*
** "auto": loads every plugin of `kind` in the plugin directory and LAMP_PLUGIN_PATH, probes
** each, and returns the highest score (ties: first found). Logs each candidate's score and
** reason at info level: "comm auto: mpi scored 0 (not launched under mpirun)".
*/
lamp_status lamp_plugin_select_auto(lamp_kind kind, const lamp_plugin_handle **out);

/* Validates a file and returns its descriptor without logging or calling anything but the
   entry function (for `lamp plugin-info`). */
lamp_status lamp_plugin_inspect(const char *path, const lamp_plugin_handle **out);

/* Every plugin file found in the search locations, loaded or failed. */
typedef struct lamp_plugin_listing {
  char path[PATH_MAX];
  lamp_status status;             /* LAMP_OK when it validated */
  char error[512];                /* the message when not */
  const lamp_plugin_handle *handle; /* NULL when not */
} lamp_plugin_listing;

/* *items is malloc'ed; free with free(). */
lamp_status lamp_plugin_list(lamp_plugin_listing **items, size_t *n);

/* The host table handed to every plugin. */
const lamp_host *lamp_host_get(void);

#endif
