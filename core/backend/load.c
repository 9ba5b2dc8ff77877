/*
** Backend modules (module.h). A device's module is found, checked like a plugin (a regular file
** that only root or the running user can have put there, in folders no one else can write), opened
** with dlopen, and its entry is handed the core's services; the table it returns is registered like
** a built-in backend. The module is looked for in:
**   1. $LAMP_BACKEND_DIR/<device>.so when LAMP_BACKEND_DIR is set (and nowhere else then);
**   2. <folder of the running executable>/backends/<device>.so (a build folder, a bundle), or for
**      an installed lamp <prefix>/lib/lamp/backends/<device>.so (base/install_tree.h);
**   3. the folder this build puts modules in (LAMP_BACKEND_DIR_DEFAULT), except for an installed lamp.
** Each module is tried once per process. Every way of failing has its own message, all beginning
** "device <name>: ", and the failure is kept: the device stays unavailable for the run and every
** ask gets the same message. A module, once opened, is never closed (its library may have left
** exit handlers behind, as the CUDA runtime does).
*/
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/load.h"
#include "backend/module.h"
#include "base/error.h"
#include "base/install_tree.h"
#include "base/log.h"
#include "plugin/loader.h"
#include "tensor/ledger.h"

#ifndef LAMP_BACKEND_DIR_DEFAULT
#define LAMP_BACKEND_DIR_DEFAULT "backends"
#endif
#ifndef LAMP_BACKEND_CUDA_BUILT
#define LAMP_BACKEND_CUDA_BUILT 0
#endif

typedef struct module {
  lamp_device device;
  const char *file;       /* "cuda.so" */
  const char *libraries;  /* "CUDA": whose libraries the module links */
  int built;              /* this build made the module (its configure step found the toolkit) */
  const char *not_built;  /* the message's tail when it did not */
  pthread_mutex_t lock;
  int tried;
  lamp_status status;
  char message[LAMP_ERROR_MAX]; /* the kept failure */
  char path[PATH_MAX];          /* where it was loaded from */
} module;

static module modules[] = {
    {.device = LAMP_CUDA,
     .file = "cuda.so",
     .libraries = "CUDA",
     .built = LAMP_BACKEND_CUDA_BUILT,
     .not_built = "this build has no CUDA backend (it was configured without the CUDA toolkit: install the "
                  "toolkit and configure with -DLAMP_CUDA=ON)",
     .lock = PTHREAD_MUTEX_INITIALIZER},
};

static const lamp_backend_services services = {
    .struct_size = sizeof(lamp_backend_services),
    .version = LAMP_BACKEND_MODULE_VERSION,
    .backend_size = sizeof(lamp_backend),
    .error = lamp_error,
    .log = lamp_log,
    .ledger_add = lamp_ledger_add,
    .ledger_sub = lamp_ledger_sub,
};

static module *module_of(lamp_device device) {
  for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++)
    if (modules[i].device == device) return &modules[i];
  return NULL;
}

int lamp_backend_is_module(lamp_device device) { return module_of(device) != NULL; }

/* Keeps "device <name>: <fmt...>" as the module's failure and records it as the error. */
static lamp_status fail(module *m, lamp_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static lamp_status fail(module *m, lamp_status code, const char *fmt, ...) {
  char what[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  int n = snprintf(m->message, sizeof m->message, "device %s: %s", lamp_device_name(m->device), what);
  if (n < 0) snprintf(m->message, sizeof m->message, "device %s: (unprintable message)", lamp_device_name(m->device));
  m->status = code; /* a message cut at LAMP_ERROR_MAX is still the message */
  return lamp_error(code, "%s", m->message);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Where the executable's own modules are: <installed tree>/backends/<file> for an installed lamp,
   else <folder of the running executable>/backends/<file>; "" when neither can be told. */
static void beside_executable(const module *m, char *out, size_t size) {
  char dir[PATH_MAX];
  const char *tree = lamp_install_tree();
  out[0] = '\0';
  if (tree != NULL) snprintf(dir, sizeof dir, "%s", tree);
  else if (!lamp_executable_dir(dir, sizeof dir)) return;
  if (snprintf(out, size, "%s/backends/%s", dir, m->file) >= (int)size) out[0] = '\0'; /* too long to use */
}

/* The module's file into m->path, or its kept failure. */
static lamp_status locate(module *m) {
  const char *dir = getenv("LAMP_BACKEND_DIR");
  if (dir != NULL && dir[0] != '\0') {
    snprintf(m->path, sizeof m->path, "%s/%s", dir, m->file);
    if (exists(m->path)) return LAMP_OK;
    return fail(m, LAMP_ERR_UNSUPPORTED, "no backend module %s (LAMP_BACKEND_DIR is %s)", m->path, dir);
  }
  char beside[PATH_MAX], built[PATH_MAX];
  beside_executable(m, beside, sizeof beside);
  if (lamp_install_tree() != NULL) /* an installed lamp keeps to its own modules, as to its plugins */
    snprintf(built, sizeof built, "%s", beside);
  else
    snprintf(built, sizeof built, "%s/%s", LAMP_BACKEND_DIR_DEFAULT, m->file);
  if (beside[0] != '\0' && exists(beside)) {
    snprintf(m->path, sizeof m->path, "%s", beside);
    return LAMP_OK;
  }
  if (exists(built)) {
    snprintf(m->path, sizeof m->path, "%s", built);
    return LAMP_OK;
  }
  m->path[0] = '\0';
  if (!m->built) return fail(m, LAMP_ERR_UNSUPPORTED, "%s", m->not_built);
  if (strcmp(beside, built) == 0) /* lamp run from its build folder, or installed */
    return fail(m, LAMP_ERR_UNSUPPORTED,
                "the backend module %s was not found (looked for %s; set LAMP_BACKEND_DIR to the folder holding it)",
                m->file, built);
  return fail(m, LAMP_ERR_UNSUPPORTED,
              "the backend module %s was not found (looked for %s and %s; set LAMP_BACKEND_DIR to the folder "
              "holding it)",
              m->file, beside[0] != '\0' ? beside : "<executable's folder>/backends", built);
}

/* The library a failed dlopen could not find, from dlerror's "libcublas.so.13: cannot open shared
   object file: No such file or directory" (after the module's own path when glibc names it); 0 when
   the failure is something else, or the module itself. */
static int missing_library(const char *err, const char *path, char *name, size_t size) {
  const char *mark = strstr(err, ": cannot open shared object file");
  if (mark == NULL) return 0;
  const char *start = err;
  for (const char *p = err; p < mark; p++)
    if (p[0] == ':' && p[1] == ' ') start = p + 2;
  size_t len = (size_t)(mark - start);
  if (len == 0 || (strlen(path) == len && strncmp(path, start, len) == 0)) return 0;
  snprintf(name, size, "%.*s", (int)len, start);
  return 1;
}

/* Opens m->path once it passed the file check; the handle, or NULL with the kept failure. */
static void *open_file(module *m) {
  void *handle = dlopen(m->path, RTLD_NOW | RTLD_LOCAL);
  if (handle != NULL) return handle;
  const char *err = dlerror();
  char library[256];
  if (err != NULL && missing_library(err, m->path, library, sizeof library))
    fail(m, LAMP_ERR_UNSUPPORTED,
         "the %s library %s was not found (the backend module %s needs it: install the %s libraries, or add the "
         "folder holding %s to LD_LIBRARY_PATH)",
         m->libraries, library, m->path, m->libraries, library);
  else
    fail(m, LAMP_ERR_UNSUPPORTED, "cannot load the backend module %s: %s", m->path, err ? err : "unknown error");
  return NULL;
}

/* A table the registry can rely on: everything backend_impl.h does not call optional. */
static const char *missing_slot(const lamp_backend *b) {
  if (b->memory.name == NULL || b->memory.alloc == NULL || b->memory.free == NULL || b->memory.zero == NULL)
    return "memory";
  if (b->count == NULL) return "count";
  if (b->upload == NULL) return "upload";
  if (b->download == NULL) return "download";
  if (b->copy == NULL) return "copy";
  return NULL;
}

/* Runs the module's entry and registers its table; else the kept failure. */
static lamp_status open_module(module *m, void *handle) {
  lamp_backend_module_open_fn entry;
  void *sym = dlsym(handle, LAMP_BACKEND_MODULE_ENTRY);
  if (sym == NULL)
    return fail(m, LAMP_ERR_INVALID_USAGE, "%s is not a lamp backend module (it exports no %s)", m->path,
                LAMP_BACKEND_MODULE_ENTRY);
  memcpy(&entry, &sym, sizeof entry); /* ISO C has no cast from object to function pointer */
  const lamp_backend *table = NULL;
  lamp_error_clear();
  lamp_status st = entry(&services, &table);
  if (st != LAMP_OK) {
    const char *said = lamp_last_error();
    const char *name = lamp_device_name(m->device);
    size_t n = strlen(name);
    if (said[0] == '\0')
      return fail(m, st, "the backend module %s failed to open without saying why (%s)", m->path,
                  lamp_status_name(st));
    /* the module speaks as "cuda: ..."; its words follow the loader's "device cuda: " */
    if (strncmp(said, name, n) == 0 && said[n] == ':' && said[n + 1] == ' ') said += n + 2;
    char copy[LAMP_ERROR_MAX];
    snprintf(copy, sizeof copy, "%s", said);
    return fail(m, st, "%s", copy);
  }
  const char *slot = table != NULL ? missing_slot(table) : "table";
  if (slot != NULL)
    return fail(m, LAMP_ERR_INTERNAL, "the backend module %s returned a table without its %s", m->path, slot);
  st = lamp_backend_register(m->device, table);
  if (st != LAMP_OK) {
    char copy[LAMP_ERROR_MAX];
    snprintf(copy, sizeof copy, "%s", lamp_last_error());
    return fail(m, st, "%s", copy);
  }
  lamp_log(LAMP_LOG_DEBUG, NULL, "device %s: backend module %s (%d device%s)", lamp_device_name(m->device), m->path,
           table->count(), table->count() == 1 ? "" : "s");
  return LAMP_OK;
}

static lamp_status try_load(module *m) {
  lamp_status st = locate(m);
  if (st != LAMP_OK) return st;
  char real[PATH_MAX];
  if (realpath(m->path, real) == NULL)
    return fail(m, LAMP_ERR_UNSUPPORTED, "cannot resolve the backend module %s: %s", m->path, strerror(errno));
  if (lamp_plugin_check_file(m->path, real) != LAMP_OK) {
    char why[LAMP_ERROR_MAX];
    snprintf(why, sizeof why, "%s", lamp_last_error());
    return fail(m, LAMP_ERR_INVALID_USAGE, "%s", why);
  }
  void *handle = open_file(m);
  if (handle == NULL) return m->status;
  st = open_module(m, handle);
  if (st != LAMP_OK) m->path[0] = '\0';
  return st;
}

lamp_status lamp_backend_load(lamp_device device) {
  module *m = module_of(device);
  if (m == NULL)
    return lamp_error(LAMP_ERR_INTERNAL, "backend: device %s has no backend module", lamp_device_name(device));
  pthread_mutex_lock(&m->lock);
  lamp_status st;
  if (!m->tried) {
    m->tried = 1;
    m->status = LAMP_OK;
    st = try_load(m);
  } else {
    st = m->status;
    if (st != LAMP_OK) lamp_error(st, "%s", m->message);
  }
  pthread_mutex_unlock(&m->lock);
  return st;
}

const char *lamp_backend_module_path(lamp_device device) {
  module *m = module_of(device);
  if (m == NULL) return "";
  pthread_mutex_lock(&m->lock);
  const char *path = m->tried && m->status == LAMP_OK ? m->path : "";
  pthread_mutex_unlock(&m->lock);
  return path;
}
