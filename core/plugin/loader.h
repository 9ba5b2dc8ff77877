/*
** Finding, loading and validating plugins (the rules and every message: docs/plugins.md, "How
** plugins are found and checked").
**
** A name containing '/' is a path used verbatim. Otherwise name N of kind K is searched in:
**   1. LAMP_PLUGIN_PATH: ';'-separated templates in which '?' stands for N and '!' for the kind
**      folder ("precision", "comm", "optim"); e.g. "/opt/lamp/!/?.so;./?.so";
**   2. the build/install plugin directory: <LAMP_PLUGIN_DIR>/<kind>/N.so;
** and nowhere else (never dlopen's own search). An empty element of LAMP_PLUGIN_PATH (";;")
** stands for step 2, which then is not repeated. A plugin found by name must declare N and K.
** Before dlopen, which already runs the file's code, the file must be a regular file and it
** and every directory above it owned by root or the running user and writable by no one else
** (LAMP_PLUGIN_UNSAFE_PATHS=1 turns that refusal into a warning, for development). Loaded
** plugins are cached by real path and never unloaded during the run.
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
** "comm: single 1.0 (ABI 1.3) from /path/single.so". Errors carry the exact messages of the
** validation order, each naming the path.
*/
lamp_status lamp_plugin_load(lamp_kind kind, const char *name_or_path, const lamp_plugin_handle **out);

/*
** "auto": loads every plugin of `kind` in the plugin directory and LAMP_PLUGIN_PATH, probes
** each, and returns the highest score (ties: first found). Logs each candidate's score and
** reason at info level: "comm auto: mpi scored 0 (not launched under mpirun)".
*/
lamp_status lamp_plugin_select_auto(lamp_kind kind, const lamp_plugin_handle **out);

/* The plugin's probe: its score (negative counts as 0) and its reason in reason[size] (size > 0),
   "no reason given" when it left none. */
int lamp_plugin_probe(const lamp_plugin_handle *h, char *reason, size_t size);

/*
** Validates a file and returns its descriptor without logging or calling anything but the
** entry function (for `lamp plugin-info`). A name_or_path containing '/' or ending in ".so" is a
** path (as before names were accepted here: "x.so" names a file in the current folder); a name is
** looked up as each kind in turn (precision, comm, optim), the first file found answering, and
** must declare that name: "no precision, comm or optim plugin 'x' found; tried:" and every
** candidate once when no kind has it.
*/
lamp_status lamp_plugin_inspect(const char *name_or_path, const lamp_plugin_handle **out);

/* A plugin's text options (ABI 1.4): its text_params and their count, or NULL and 0 for a
   table built before them. */
const lamp_text_param *lamp_plugin_text_params(const lamp_plugin *desc, uint32_t *n);

/* An enum's choices as "exact, smooth" (cut short when it does not fit in size). */
void lamp_plugin_choices_text(const char *const *choices, char *out, size_t size);

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

/* Sets or clears the flag plugins poll through host->abort_flag (Ctrl-C, a failed rank). */
void lamp_host_set_abort(int on);

/* ---- internal to core/plugin (host.c, search.c, loader.c, discover.c, instance.c) ------------ */

/* Per-object error storage: one lamp_ctx per plugin object, passed to its create(). */
lamp_ctx *lamp_ctx_new(void);          /* NULL (with lamp_last_error) when out of memory */
/* What host->option_text answers for this object: desc's text options, texts[i] the value of the
   i-th (both outlive the ctx). */
void lamp_ctx_bind_texts(lamp_ctx *ctx, const lamp_plugin *desc, char *const *texts);
void lamp_ctx_free(lamp_ctx *ctx);     /* NULL is a no-op */
void lamp_ctx_clear(lamp_ctx *ctx);    /* forget the previous message before a call */
const char *lamp_ctx_message(const lamp_ctx *ctx); /* "" when the plugin set none */

/* The message a plugin left with set_error(NULL, ...) in its entry or probe, this thread. */
void lamp_host_load_message_clear(void);
const char *lamp_host_load_message(void);

/*
** Search (search.c). The effective search path is LAMP_PLUGIN_PATH with each empty element
** (as in "a;;b") replaced by the default template "<lamp_plugin_dir()>/!/?.so", which is
** appended when no empty element put it in. Malloc'ed; NULL (with lamp_last_error) when out
** of memory.
*/
char *lamp_plugin_search_path(void);

/* Copies the next ';'-separated template at *cursor into out and advances; 0 at the end.
   Templates longer than size are skipped. */
int lamp_plugin_next_template(const char **cursor, char *out, size_t size);

/* Replaces '?' with name and '!' with the kind folder; 0 when the result does not fit. */
int lamp_plugin_expand(const char *template_, lamp_kind kind, const char *name, char *out,
                       size_t size);

/*
** Finds the file for name of kind: the first readable candidate goes to `path` and 1 is
** returned. With none readable, returns 0 with `path` ""; `tried` lists every candidate either
** way, each on its own line indented by two spaces (a name containing '/' is its only
** candidate). Returns -1 (with lamp_last_error) when out of memory.
*/
int lamp_plugin_search(lamp_kind kind, const char *name, char *path, size_t path_size,
                       char *tried, size_t tried_size);

/* Whether the file at `path` (its real path `real`) may be opened: a regular file, and it and
   every directory above it (and above the directory `path` names, when a link leads elsewhere)
   owned by root or the running user and writable by neither group nor others.
   "<path>: refusing a plugin ..." (LAMP_ERR_INVALID_USAGE) naming what is unsafe and the fix;
   LAMP_PLUGIN_UNSAFE_PATHS (set, not "0") turns an owner or mode refusal into a warning. */
lamp_status lamp_plugin_check_file(const char *path, const char *real);

/* The loader's lock (not recursive): held around every use of the calls below. */
void lamp_plugin_lock(void);
void lamp_plugin_unlock(void);

/* A readable file: checked, then from the cache or opened and validated (expected 0: any
   kind). Logs nothing but the LAMP_PLUGIN_UNSAFE_PATHS warning. */
lamp_status lamp_plugin_load_file(const char *path, lamp_kind expected,
                                  const lamp_plugin_handle **out);

/* Logs the handle's info line unless it was logged before. */
void lamp_plugin_announce(const lamp_plugin_handle *h);

/* Argument checks shared by the public calls: "empty comm plugin name" and so on. */
lamp_status lamp_plugin_check_request(lamp_kind kind, const char *name, const void *out);

/* Size of the prefix of a family table holding every member ABI 1.<minor> requires. */
size_t lamp_plugin_required_size(lamp_kind kind, unsigned minor);

#endif
