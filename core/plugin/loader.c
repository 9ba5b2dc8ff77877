/*
** The plugin loader: dlopen, the fixed validation order below (with its messages in
** docs/plugins.md, "How plugins are found and checked"), and the cache of loaded plugins (by
** real path, never unloaded). discover.c walks the search locations.
**
** Validation order, each step with one message naming the path:
**   not found -> not a regular file -> owner or mode unsafe (search.c) -> dlopen error
**   -> no entry symbol (or a newer one) -> entry returned NULL -> bad magic -> wrong kind
**   -> ABI major -> table too small -> required member NULL -> part of a group of optional
**   members (comm: all_reduce_enqueue, wait_stream, poll) -> bad parameter declarations
**   (numeric, then text) -> (loaded by name) another declared name.
** The file checks come before dlopen because dlopen already runs the file's code (its
** constructors), and they run on every load, cached or not.
*/
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/loader.h"

typedef struct loaded_plugin {
  lamp_plugin_handle handle;
  void *dl;
  int announced; /* the info line was logged */
} loaded_plugin;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static loaded_plugin **loaded;
static size_t n_loaded;
static size_t cap_loaded;

/* ---- what each family requires --------------------------------------------------------------- */

typedef struct member {
  const char *name;
  size_t offset;
} member;

/* clang-format off */
#define MEMBER(type, m) {#m, offsetof(type, m)}

static const member precision_required[] = {
    MEMBER(lamp_precision_v1, create), MEMBER(lamp_precision_v1, destroy),
    MEMBER(lamp_precision_v1, policy), MEMBER(lamp_precision_v1, loss_scale),
    MEMBER(lamp_precision_v1, update), MEMBER(lamp_precision_v1, stats)};

static const member comm_required[] = {
    MEMBER(lamp_comm_v1, create), MEMBER(lamp_comm_v1, destroy),
    MEMBER(lamp_comm_v1, rank),   MEMBER(lamp_comm_v1, size),
    MEMBER(lamp_comm_v1, all_reduce), MEMBER(lamp_comm_v1, broadcast),
    MEMBER(lamp_comm_v1, barrier)};

static const member optim_required[] = {
    MEMBER(lamp_optim_v1, create), MEMBER(lamp_optim_v1, destroy),
    MEMBER(lamp_optim_v1, slots), MEMBER(lamp_optim_v1, step)};
/* clang-format on */

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const member *required_members(lamp_kind kind, size_t *n) {
  switch (kind) {
  case LAMP_KIND_PRECISION: *n = COUNT(precision_required); return precision_required;
  case LAMP_KIND_COMM: *n = COUNT(comm_required); return comm_required;
  case LAMP_KIND_OPTIM: *n = COUNT(optim_required); return optim_required;
  }
  *n = 0;
  return NULL;
}

/* ABI 1.0: the required functions are a prefix; the optional ones after them may be cut off.
   ABI 1.1 added no family table member (only host members and lamp_optim_step.stream), 1.2
   only an optional one (lamp_optim_v1.caps), 1.3 only optional ones (lamp_comm_v1's
   create_with_bootstrap .. poll) and 1.4 only optional ones (every family's text_params and
   n_text_params), so every minor so far needs the same prefix. A
   minor that adds a required member makes this depend on `minor`; plugins declaring a minor
   this core does not know are held to the newest it does. */
size_t lamp_plugin_required_size(lamp_kind kind, unsigned minor) {
  (void)minor; /* 1.0 to 1.4 require the same members */
  size_t n;
  const member *m = required_members(kind, &n);
  if (m == NULL) return sizeof(lamp_plugin);
  return m[n - 1].offset + sizeof(void (*)(void));
}

static int kind_known(uint32_t kind) {
  return kind == LAMP_KIND_PRECISION || kind == LAMP_KIND_COMM || kind == LAMP_KIND_OPTIM;
}

/* A family's text options, where its table reaches them (the same two members in each). */
#define TEXT_PARAMS(type, d, n)                                                                    \
  (offsetof(type, n_text_params) + sizeof(uint32_t) <= (d)->struct_size                           \
       ? (*(n) = ((const type *)(d))->n_text_params, ((const type *)(d))->text_params)             \
       : (*(n) = 0, (const lamp_text_param *)NULL))

/* As declared: the count may come without its array (refused at load). */
static const lamp_text_param *text_members(const lamp_plugin *d, uint32_t *n) {
  *n = 0;
  switch ((lamp_kind)d->kind) {
  case LAMP_KIND_PRECISION: return TEXT_PARAMS(lamp_precision_v1, d, n);
  case LAMP_KIND_COMM: return TEXT_PARAMS(lamp_comm_v1, d, n);
  case LAMP_KIND_OPTIM: return TEXT_PARAMS(lamp_optim_v1, d, n);
  }
  return NULL;
}

const lamp_text_param *lamp_plugin_text_params(const lamp_plugin *d, uint32_t *n) {
  const lamp_text_param *p = text_members(d, n);
  if (p == NULL) *n = 0;
  return p;
}

/* ---- validation steps, in order -------------------------------------------------------------- */

/* dlerror() usually starts with the path again; the message names it once. */
static const char *without_path_prefix(const char *msg, const char *path) {
  size_t len = strlen(path);
  if (strncmp(msg, path, len) == 0 && msg[len] == ':' && msg[len + 1] == ' ') return msg + len + 2;
  return msg;
}

static const char *dl_message(const char *real) {
  const char *msg = dlerror();
  return msg != NULL ? without_path_prefix(msg, real) : "unknown dlopen error";
}

static lamp_status open_library(const char *path, const char *real, void **dl) {
  dlerror();
  *dl = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (*dl != NULL) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot load plugin %s: %s", path, dl_message(real));
}

static void *symbol(void *dl, const char *name) {
  dlerror();
  return dlsym(dl, name);
}

/* The newest entry symbol the library exports for a major above ours; 0 when none. */
static int newer_entry_major(void *dl) {
  char name[64];
  for (int major = 9; major > LAMP_ABI_MAJOR; major--) {
    snprintf(name, sizeof name, "lamp_plugin_entry_v%d", major);
    if (symbol(dl, name) != NULL) return major;
  }
  return 0;
}

static lamp_status find_entry(const char *path, void *dl, lamp_plugin_entry_fn *entry) {
  void *sym = symbol(dl, LAMP_ENTRY_SYMBOL);
  if (sym != NULL) {
    memcpy(entry, &sym, sizeof *entry); /* POSIX: dlsym's void * holds a function address */
    return LAMP_OK;
  }
  int newer = newer_entry_major(dl);
  if (newer > 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: built for a newer core: exports lamp_plugin_entry_v%d, this core "
                      "(ABI %d.%d) needs " LAMP_ENTRY_SYMBOL,
                      path, newer, LAMP_ABI_MAJOR, LAMP_ABI_MINOR);
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: no " LAMP_ENTRY_SYMBOL " symbol: not a lamp plugin", path);
}

static lamp_status call_entry(const char *path, lamp_plugin_entry_fn entry,
                              const lamp_plugin **desc) {
  lamp_host_load_message_clear();
  *desc = entry(lamp_host_get());
  if (*desc != NULL) return LAMP_OK;
  const char *why = lamp_host_load_message();
  if (why[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: " LAMP_ENTRY_SYMBOL " returned NULL without a message", path);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: " LAMP_ENTRY_SYMBOL " returned NULL: %s", path,
                    why);
}

/* expected 0: any kind. */
static lamp_status check_magic_and_kind(const char *path, const lamp_plugin *d,
                                        lamp_kind expected) {
  if (d->magic != LAMP_PLUGIN_MAGIC)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: bad magic 0x%08x (expected 0x%08x)", path,
                      (unsigned)d->magic, LAMP_PLUGIN_MAGIC);
  if (!kind_known(d->kind))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: unknown plugin kind %u%s%s", path,
                      (unsigned)d->kind, expected ? ", expected " : "",
                      expected ? lamp_kind_name(expected) : "");
  if (expected != 0 && d->kind != (uint32_t)expected)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: is %s %s plugin, expected %s", path,
                      d->kind == LAMP_KIND_OPTIM ? "an" : "a", lamp_kind_name((lamp_kind)d->kind),
                      lamp_kind_name(expected));
  return LAMP_OK;
}

static lamp_status check_abi(const char *path, const lamp_plugin *d) {
  if (d->abi_major == LAMP_ABI_MAJOR) return LAMP_OK;
  const char *name = d->name != NULL ? d->name : "plugin";
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: plugin ABI %u.%u not supported by this core (ABI %d.x): %s", name,
                    (unsigned)d->abi_major, (unsigned)d->abi_minor, LAMP_ABI_MAJOR, path);
}

static lamp_status check_size(const char *path, const lamp_plugin *d) {
  size_t need = lamp_plugin_required_size((lamp_kind)d->kind, d->abi_minor);
  if (d->struct_size >= need) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: table is %u bytes, ABI %u.%u %s plugins need at least %zu", path,
                    (unsigned)d->struct_size, (unsigned)d->abi_major, (unsigned)d->abi_minor,
                    lamp_kind_name((lamp_kind)d->kind), need);
}

static int function_is_null(const lamp_plugin *d, size_t offset) {
  void (*fn)(void);
  memcpy(&fn, (const char *)d + offset, sizeof fn);
  return fn == NULL;
}

static lamp_status check_members(const char *path, const lamp_plugin *d) {
  if (d->name == NULL || d->name[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: required member 'name' is %s", path,
                      d->name == NULL ? "NULL" : "empty");
  if (d->version == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: required member 'version' is NULL", path);
  if (d->probe == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: required function 'probe' is NULL", path);
  size_t n;
  const member *m = required_members((lamp_kind)d->kind, &n);
  for (size_t i = 0; i < n; i++)
    if (function_is_null(d, m[i].offset))
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: required function '%s' is NULL", path,
                        m[i].name);
  return LAMP_OK;
}

static lamp_status check_param(const char *path, const lamp_plugin *d, uint32_t i) {
  const lamp_param *p = &d->params[i];
  if (p->name == NULL || p->name[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: param %u has no name", path, (unsigned)i);
  if (!(p->min_value <= p->default_value && p->default_value <= p->max_value))
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: param '%s' has default %g outside its range [%g, %g]", path, p->name,
                      p->default_value, p->min_value, p->max_value);
  for (uint32_t j = 0; j < i; j++)
    if (strcmp(d->params[j].name, p->name) == 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: param '%s' is declared twice", path, p->name);
  return LAMP_OK;
}

/* A name declared once among the numeric and the text options: they share the option table. */
static int declared_before(const lamp_plugin *d, const char *name, uint32_t numeric, uint32_t text) {
  for (uint32_t j = 0; j < numeric; j++)
    if (strcmp(d->params[j].name, name) == 0) return 1;
  uint32_t n;
  const lamp_text_param *t = lamp_plugin_text_params(d, &n);
  for (uint32_t j = 0; j < text && j < n; j++)
    if (strcmp(t[j].name, name) == 0) return 1;
  return 0;
}

static int is_choice(const char *const *choices, const char *value) {
  for (size_t i = 0; choices[i] != NULL; i++)
    if (strcmp(choices[i], value) == 0) return 1;
  return 0;
}

/* "exact, smooth" (cut short when it does not fit). */
void lamp_plugin_choices_text(const char *const *choices, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; choices[i] != NULL && used < size; i++) {
    int w = snprintf(out + used, size - used, "%s%s", i > 0 ? ", " : "", choices[i]);
    if (w < 0) return;
    used += (size_t)w;
  }
}

static lamp_status check_text_param(const char *path, const lamp_plugin *d, const lamp_text_param *p,
                                    uint32_t i) {
  if (p->name == NULL || p->name[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: text param %u has no name", path, (unsigned)i);
  if (declared_before(d, p->name, d->n_params, i))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: param '%s' is declared twice", path, p->name);
  if (p->default_value == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: text param '%s' has no default", path, p->name);
  if (p->choices == NULL) return LAMP_OK;
  if (p->choices[0] == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: text param '%s' has an empty list of choices", path, p->name);
  if (is_choice(p->choices, p->default_value)) return LAMP_OK;
  char list[512];
  lamp_plugin_choices_text(p->choices, list, sizeof list);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: text param '%s' has default '%s', not one of its choices: %s",
                    path, p->name, p->default_value, list);
}

/* ABI 1.4: text options, after the numeric ones (whose names they must not repeat). */
static lamp_status check_text_params(const char *path, const lamp_plugin *d) {
  uint32_t n;
  const lamp_text_param *t = text_members(d, &n);
  if (t == NULL && n > 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: declares %u text params but 'text_params' is NULL", path,
                      (unsigned)n);
  for (uint32_t i = 0; i < n; i++) {
    lamp_status st = check_text_param(path, d, &t[i], i);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

/* ABI 1.3: a communicator's stream-ordered calls work only together (comm.h). */
static lamp_status check_comm_groups(const char *path, const lamp_plugin *d) {
  if (d->kind != LAMP_KIND_COMM) return LAMP_OK;
  static const member stream_ordered[] = {MEMBER(lamp_comm_v1, all_reduce_enqueue), MEMBER(lamp_comm_v1, wait_stream),
                                          MEMBER(lamp_comm_v1, poll)};
  int present = 0;
  char missing[96] = "";
  for (size_t i = 0; i < COUNT(stream_ordered); i++) {
    size_t end = stream_ordered[i].offset + sizeof(void (*)(void));
    if (end <= d->struct_size && !function_is_null(d, stream_ordered[i].offset)) {
      present++;
    } else {
      size_t used = strlen(missing);
      snprintf(missing + used, sizeof missing - used, "%s'%s'", used ? ", " : "", stream_ordered[i].name);
    }
  }
  if (present == 0 || present == (int)COUNT(stream_ordered)) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: has some of the stream-ordered calls but not %s: all_reduce_enqueue, wait_stream and poll "
                    "come together",
                    path, missing);
}

static lamp_status check_params(const char *path, const lamp_plugin *d) {
  if (d->n_params > 0 && d->params == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: declares %u params but 'params' is NULL", path,
                      (unsigned)d->n_params);
  for (uint32_t i = 0; i < d->n_params; i++) {
    lamp_status st = check_param(path, d, i);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

static lamp_status check_descriptor(const char *path, const lamp_plugin *d, lamp_kind expected) {
  lamp_status st = check_magic_and_kind(path, d, expected);
  if (st == LAMP_OK) st = check_abi(path, d);
  if (st == LAMP_OK) st = check_size(path, d);
  if (st == LAMP_OK) st = check_members(path, d);
  if (st == LAMP_OK) st = check_comm_groups(path, d);
  if (st == LAMP_OK) st = check_params(path, d);
  if (st == LAMP_OK) st = check_text_params(path, d);
  return st;
}

/* Everything after dlopen. */
static lamp_status validate(const char *path, void *dl, lamp_kind expected,
                            const lamp_plugin **desc) {
  lamp_plugin_entry_fn entry = NULL;
  lamp_status st = find_entry(path, dl, &entry);
  if (st == LAMP_OK) st = call_entry(path, entry, desc);
  if (st == LAMP_OK) st = check_descriptor(path, *desc, expected);
  return st;
}

/* ---- the cache (callers hold the lock) ------------------------------------------------------- */

static loaded_plugin *find_loaded(const char *real) {
  for (size_t i = 0; i < n_loaded; i++)
    if (strcmp(loaded[i]->handle.path, real) == 0) return loaded[i];
  return NULL;
}

static lamp_status remember(const char *real, void *dl, const lamp_plugin *desc,
                            loaded_plugin **out) {
  if (n_loaded == cap_loaded) {
    size_t cap = cap_loaded ? 2 * cap_loaded : 8;
    loaded_plugin **grown = realloc(loaded, cap * sizeof *grown);
    if (grown == NULL)
      return lamp_error(LAMP_ERR_SYSTEM, "out of memory recording plugin %s", real);
    loaded = grown;
    cap_loaded = cap;
  }
  loaded_plugin *lp = calloc(1, sizeof *lp);
  if (lp == NULL) return lamp_error(LAMP_ERR_SYSTEM, "out of memory recording plugin %s", real);
  lp->handle.desc = desc;
  lp->handle.kind = (lamp_kind)desc->kind;
  snprintf(lp->handle.path, sizeof lp->handle.path, "%s", real);
  lp->dl = dl;
  loaded[n_loaded++] = lp;
  *out = lp;
  return LAMP_OK;
}

static void announce(loaded_plugin *lp) {
  if (lp->announced) return;
  const lamp_plugin *d = lp->handle.desc;
  lp->announced = 1;
  lamp_log(LAMP_LOG_INFO, lamp_kind_name(lp->handle.kind), "%s %s (ABI %u.%u) from %s", d->name,
           d->version, (unsigned)d->abi_major, (unsigned)d->abi_minor, lp->handle.path);
  /* Accepted (rule 2), but what it may expect of the newer core is not there: said once. */
  if (d->abi_minor > LAMP_ABI_MINOR)
    lamp_log(LAMP_LOG_INFO, d->name, "built for plugin ABI %u.%u, this core has %d.%d: members it added are ignored",
             (unsigned)d->abi_major, (unsigned)d->abi_minor, LAMP_ABI_MAJOR, LAMP_ABI_MINOR);
}

/* A cached plugin asked for again, perhaps as another kind. */
static lamp_status reuse(const char *path, loaded_plugin *lp, lamp_kind expected,
                         loaded_plugin **out) {
  lamp_status st = check_magic_and_kind(path, lp->handle.desc, expected);
  if (st == LAMP_OK) *out = lp;
  return st;
}

/* Validates an opened library and records it; closes it when it is refused. */
static lamp_status adopt(const char *path, const char *real, void *dl, lamp_kind expected,
                         loaded_plugin **out) {
  const lamp_plugin *desc = NULL;
  lamp_status st = validate(path, dl, expected, &desc);
  if (st == LAMP_OK) st = remember(real, dl, desc, out);
  if (st != LAMP_OK) dlclose(dl);
  return st;
}

/* A readable file: checked, then cached, or opened and validated. The check runs for a cached
   plugin too, so that the override's warning comes with every load. */
static lamp_status load_file(const char *path, lamp_kind expected, loaded_plugin **out) {
  char real[PATH_MAX];
  if (realpath(path, real) == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot load plugin %s: %s", path, strerror(errno));
  lamp_status st = lamp_plugin_check_file(path, real);
  if (st != LAMP_OK) return st;
  loaded_plugin *lp = find_loaded(real);
  if (lp != NULL) return reuse(path, lp, expected, out);
  void *dl = NULL;
  st = open_library(path, real, &dl);
  if (st == LAMP_OK) st = adopt(path, real, dl, expected, out);
  return st;
}

static lamp_status not_found(lamp_kind kind, const char *name, const char *tried) {
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s plugin '%s' not found; tried:\n%s",
                    lamp_kind_name(kind), name, tried);
}

/* A name reaches every file an entry without '?' names, and any file that happens to be called
   NAME.so: only the plugin's own declaration says it is the one asked for. */
static lamp_status check_declared_name(const char *path, lamp_kind kind, const char *name,
                                       const loaded_plugin *lp) {
  const char *declared = lp->handle.desc->name;
  if (strcmp(declared, name) == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: asked for %s '%s', the plugin declares itself '%s'",
                    path, lamp_kind_name(kind), name, declared);
}

static lamp_status load_named(lamp_kind kind, const char *name, loaded_plugin **out) {
  char path[PATH_MAX];
  char tried[LAMP_ERROR_MAX];
  int found = lamp_plugin_search(kind, name, path, sizeof path, tried, sizeof tried);
  if (found < 0) return LAMP_ERR_SYSTEM;
  if (!found) return not_found(kind, name, tried);
  lamp_status st = load_file(path, kind, out);
  if (st == LAMP_OK && strchr(name, '/') == NULL) st = check_declared_name(path, kind, name, *out);
  return st;
}

/* ---- public entry points --------------------------------------------------------------------- */

void lamp_plugin_lock(void) { pthread_mutex_lock(&lock); }

void lamp_plugin_unlock(void) { pthread_mutex_unlock(&lock); }

lamp_status lamp_plugin_load_file(const char *path, lamp_kind expected,
                                  const lamp_plugin_handle **out) {
  loaded_plugin *lp = NULL;
  lamp_status st = load_file(path, expected, &lp);
  if (st == LAMP_OK) *out = &lp->handle;
  return st;
}

/* The handle is the first member of its record. */
void lamp_plugin_announce(const lamp_plugin_handle *h) { announce((loaded_plugin *)(uintptr_t)h); }

lamp_status lamp_plugin_check_request(lamp_kind kind, const char *name, const void *out) {
  if (out == NULL || name == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "plugin loader: NULL %s",
                      out == NULL ? "output" : "name");
  if (!kind_known((uint32_t)kind))
    return lamp_error(LAMP_ERR_INVALID_ARG, "plugin loader: unknown plugin kind %d", (int)kind);
  if (name[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_ARG, "empty %s plugin name", lamp_kind_name(kind));
  return LAMP_OK;
}

lamp_status lamp_plugin_load(lamp_kind kind, const char *name_or_path,
                             const lamp_plugin_handle **out) {
  lamp_status st = lamp_plugin_check_request(kind, name_or_path, out);
  if (st != LAMP_OK) return st;
  loaded_plugin *lp = NULL;
  pthread_mutex_lock(&lock);
  st = load_named(kind, name_or_path, &lp);
  if (st == LAMP_OK) {
    announce(lp);
    *out = &lp->handle;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

/* Whether `lines` ('\n'-separated) has a line equal to the len bytes at line. */
static int has_line(const char *lines, const char *line, size_t len) {
  for (const char *p = lines; *p != '\0';) {
    const char *end = strchr(p, '\n');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    if (n == len && memcmp(p, line, len) == 0) return 1;
    p += n + (end != NULL);
  }
  return 0;
}

/* Appends the candidates of `more` not already in `tried` (templates without '!' give every
   kind the same ones); what does not fit is left out. */
static void merge_tried(char *tried, size_t size, const char *more) {
  for (const char *p = more; *p != '\0';) {
    const char *end = strchr(p, '\n');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    size_t used = strlen(tried);
    size_t sep = used > 0;
    if (len > 0 && !has_line(tried, p, len) && used + sep + len < size) {
      if (sep) tried[used] = '\n';
      memcpy(tried + used + sep, p, len);
      tried[used + sep + len] = '\0';
    }
    p += len + (end != NULL);
  }
}

/* A name: the search of each kind in turn, the first file found answering (whatever kind it
   declares, as long as it declares the name). */
static lamp_status inspect_named(const char *name, loaded_plugin **out) {
  static const lamp_kind kinds[] = {LAMP_KIND_PRECISION, LAMP_KIND_COMM, LAMP_KIND_OPTIM};
  char path[PATH_MAX];
  char tried[LAMP_ERROR_MAX / 2] = "";
  char kind_tried[LAMP_ERROR_MAX / 2];
  for (size_t k = 0; k < COUNT(kinds); k++) {
    int found = lamp_plugin_search(kinds[k], name, path, sizeof path, kind_tried, sizeof kind_tried);
    if (found < 0) return LAMP_ERR_SYSTEM;
    if (found) {
      lamp_status st = load_file(path, 0, out);
      if (st == LAMP_OK) st = check_declared_name(path, (lamp_kind)(*out)->handle.desc->kind, name, *out);
      return st;
    }
    merge_tried(tried, sizeof tried, kind_tried);
  }
  return lamp_error(LAMP_ERR_INVALID_USAGE, "no precision, comm or optim plugin '%s' found; tried:\n%s", name, tried);
}

lamp_status lamp_plugin_inspect(const char *name_or_path, const lamp_plugin_handle **out) {
  if (name_or_path == NULL || out == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "plugin loader: NULL %s",
                      out == NULL ? "output" : "name");
  if (name_or_path[0] == '\0') return lamp_error(LAMP_ERR_INVALID_ARG, "empty plugin name");
  size_t len = strlen(name_or_path);
  /* "x.so" in the current folder was always a path to plugin-info: no plugin is named so. */
  int is_path = strchr(name_or_path, '/') != NULL || (len > 3 && strcmp(name_or_path + len - 3, ".so") == 0);
  if (is_path && access(name_or_path, R_OK) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "plugin '%s' not found; tried:\n  %s", name_or_path, name_or_path);
  loaded_plugin *lp = NULL;
  pthread_mutex_lock(&lock);
  lamp_status st = is_path ? load_file(name_or_path, 0, &lp) : inspect_named(name_or_path, &lp);
  if (st == LAMP_OK) *out = &lp->handle;
  pthread_mutex_unlock(&lock);
  return st;
}
