/*
** Name resolution for plugins: the kind names, the search path and its templates, the
** candidate walk, and the shared-machine safety rule on file permissions.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "plugin/loader.h"

#ifndef LAMP_PLUGIN_DIR_DEFAULT
#define LAMP_PLUGIN_DIR_DEFAULT "plugins"
#endif

/*
** {======================================================
** Kinds and directories
** =======================================================
*/

const char *lamp_kind_name(lamp_kind kind) {
  switch (kind) {
  case LAMP_KIND_PRECISION: return "precision";
  case LAMP_KIND_COMM: return "comm";
  case LAMP_KIND_OPTIM: return "optim";
  }
  return "unknown";
}

int lamp_kind_parse(const char *name, lamp_kind *out) {
  static const lamp_kind kinds[] = {LAMP_KIND_PRECISION, LAMP_KIND_COMM, LAMP_KIND_OPTIM};
  for (size_t i = 0; name != NULL && i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strcmp(name, lamp_kind_name(kinds[i])) == 0) {
      *out = kinds[i];
      return 1;
    }
  }
  return 0;
}

const char *lamp_plugin_dir(void) {
  const char *dir = getenv("LAMP_PLUGIN_DIR");
  return dir != NULL && dir[0] != '\0' ? dir : LAMP_PLUGIN_DIR_DEFAULT;
}

/* }====================================================== */

/*
** {======================================================
** The search path
** =======================================================
*/

#define PATH_SEP ';'
#define NAME_MARK '?'
#define KIND_MARK '!'

static size_t count_empty_elements(const char *path) {
  size_t n = 0;
  const char *p = path;
  for (;;) {
    const char *end = strchr(p, PATH_SEP);
    if (end == NULL) end = p + strlen(p);
    if (end == p) n++;
    if (*end == '\0') return n;
    p = end + 1;
  }
}

/* Joins path's elements with ';', an empty one replaced by `def`. */
static void join_replacing_empty(char *out, const char *path, const char *def) {
  const char *p = path;
  out[0] = '\0';
  for (;;) {
    const char *end = strchr(p, PATH_SEP);
    if (end == NULL) end = p + strlen(p);
    if (out[0] != '\0') strcat(out, ";");
    if (end == p)
      strcat(out, def);
    else
      strncat(out, p, (size_t)(end - p));
    if (*end == '\0') return;
    p = end + 1;
  }
}

char *lamp_plugin_search_path(void) {
  const char *env = getenv("LAMP_PLUGIN_PATH");
  char def[PATH_MAX + 16];
  snprintf(def, sizeof def, "%s/%c/%c.so", lamp_plugin_dir(), KIND_MARK, NAME_MARK);
  if (env == NULL || env[0] == '\0') env = "";
  size_t n_empty = count_empty_elements(env);
  size_t size = strlen(env) + (n_empty + 1) * (strlen(def) + 1) + 1;
  char *out = malloc(size);
  if (out == NULL) {
    lamp_error(LAMP_ERR_SYSTEM, "out of memory building the plugin search path");
    return NULL;
  }
  join_replacing_empty(out, env, def);
  if (n_empty == 0) {
    strcat(out, ";");
    strcat(out, def);
  }
  return out;
}

int lamp_plugin_next_template(const char **cursor, char *out, size_t size) {
  while (**cursor != '\0') {
    const char *start = *cursor;
    const char *end = strchr(start, PATH_SEP);
    if (end == NULL) end = start + strlen(start);
    *cursor = *end != '\0' ? end + 1 : end;
    size_t len = (size_t)(end - start);
    if (len == 0 || len >= size) continue;
    memcpy(out, start, len);
    out[len] = '\0';
    return 1;
  }
  return 0;
}

int lamp_plugin_expand(const char *template_, lamp_kind kind, const char *name, char *out,
                       size_t size) {
  size_t used = 0;
  for (const char *t = template_; *t != '\0'; t++) {
    const char *piece = *t == NAME_MARK ? name : *t == KIND_MARK ? lamp_kind_name(kind) : NULL;
    size_t len = piece != NULL ? strlen(piece) : 1;
    if (used + len >= size) return 0;
    memcpy(out + used, piece != NULL ? piece : t, len);
    used += len;
  }
  out[used] = '\0';
  return 1;
}

/* }====================================================== */

/*
** {======================================================
** Candidates
** =======================================================
*/

/* Appends "\n  <path><note>" (no newline before the first); truncation is acceptable. */
static void add_tried(char *tried, size_t size, const char *path, const char *note) {
  size_t used = strlen(tried);
  if (used + 1 >= size) return;
  snprintf(tried + used, size - used, "%s  %s%s", used > 0 ? "\n" : "", path, note);
}

static int readable(const char *path) { return access(path, R_OK) == 0; }

static int copy_path(char *dst, size_t size, const char *src) {
  return (size_t)snprintf(dst, size, "%s", src) < size;
}

/* Walks the templates; 1 with the first readable candidate in path. */
static int search_templates(const char *search_path, lamp_kind kind, const char *name, char *path,
                            size_t path_size, char *tried, size_t tried_size) {
  char template_[PATH_MAX];
  char candidate[PATH_MAX];
  const char *cursor = search_path;
  while (lamp_plugin_next_template(&cursor, template_, sizeof template_)) {
    if (!lamp_plugin_expand(template_, kind, name, candidate, sizeof candidate)) continue;
    add_tried(tried, tried_size, candidate, "");
    if (readable(candidate) && copy_path(path, path_size, candidate)) return 1;
  }
  return 0;
}

int lamp_plugin_search(lamp_kind kind, const char *name, char *path, size_t path_size, char *tried,
                       size_t tried_size) {
  tried[0] = '\0';
  path[0] = '\0';
  if (strchr(name, '/') != NULL) {
    add_tried(tried, tried_size, name, "");
    return readable(name) && copy_path(path, path_size, name);
  }
  char *search_path = lamp_plugin_search_path();
  if (search_path == NULL) return -1;
  int found = search_templates(search_path, kind, name, path, path_size, tried, tried_size);
  free(search_path);
  if (found) return 1;
  snprintf(path, path_size, "lamp-%s-%s.so", lamp_kind_name(kind), name);
  add_tried(tried, tried_size, path, " (dlopen search path)");
  return 0;
}

/* }====================================================== */

/*
** {======================================================
** Permissions: on a shared machine, a plugin anyone can replace is anyone's code
** =======================================================
*/

static void parent_dir(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(out, size, ".");
    return;
  }
  size_t len = slash == path ? 1 : (size_t)(slash - path);
  snprintf(out, size, "%.*s", (int)len, path);
}

static lamp_status check_dir(const char *plugin, const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: cannot stat its directory %s: %s", plugin, dir,
                      strerror(errno));
  if ((st.st_mode & S_IWOTH) == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: refusing a plugin in a directory writable by others (%s, mode %04o); "
                    "fix with chmod o-w %s",
                    plugin, dir, (unsigned)(st.st_mode & 07777), dir);
}

static lamp_status check_file(const char *plugin) {
  struct stat st;
  if (stat(plugin, &st) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: cannot stat: %s", plugin, strerror(errno));
  if ((st.st_mode & S_IWOTH) == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: refusing a plugin file writable by others (mode %04o); "
                    "fix with chmod o-w %s",
                    plugin, (unsigned)(st.st_mode & 07777), plugin);
}

/* The file (stat follows links to the real one), the directory it was named in, and the
   directory it really lives in. */
lamp_status lamp_plugin_check_permissions(const char *path) {
  char dir[PATH_MAX];
  char real[PATH_MAX];
  char real_dir[PATH_MAX];
  lamp_status st = check_file(path);
  if (st != LAMP_OK) return st;
  parent_dir(path, dir, sizeof dir);
  st = check_dir(path, dir);
  if (st != LAMP_OK || realpath(path, real) == NULL) return st;
  parent_dir(real, real_dir, sizeof real_dir);
  return strcmp(real_dir, dir) == 0 ? LAMP_OK : check_dir(path, real_dir);
}

/* }====================================================== */
