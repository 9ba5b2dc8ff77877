/*
** Name resolution for plugins: the kind names, the search path and its templates, the
** candidate walk, and the rule on which files may be opened at all (a regular file that only
** root or the running user can have put there).
*/
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file_kind.h"
#include "base/install_tree.h"
#include "base/log.h"
#include "plugin/loader.h"

#ifndef LAMP_PLUGIN_DIR_DEFAULT
#define LAMP_PLUGIN_DIR_DEFAULT "plugins"
#endif

/* ---- kinds and directories ------------------------------------------------------------------- */

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

/* An installed lamp's own plugin folder, <tree>/plugins ("" for a lamp in its build folder). */
static char installed_plugins[PATH_MAX];
static pthread_once_t installed_once = PTHREAD_ONCE_INIT;

static void find_installed_plugins(void) {
  const char *tree = lamp_install_tree();
  if (tree != NULL && (size_t)snprintf(installed_plugins, sizeof installed_plugins, "%s/plugins", tree) >=
                          sizeof installed_plugins)
    installed_plugins[0] = '\0';
}

/* The folder of the core's own plugins: the installation's, else the build's. */
static const char *own_plugin_dir(void) {
  pthread_once(&installed_once, find_installed_plugins);
  return installed_plugins[0] != '\0' ? installed_plugins : LAMP_PLUGIN_DIR_DEFAULT;
}

const char *lamp_plugin_dir(void) {
  const char *dir = getenv("LAMP_PLUGIN_DIR");
  return dir != NULL && dir[0] != '\0' ? dir : own_plugin_dir();
}

/* ---- the search path ------------------------------------------------------------------------- */

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

/* ---- candidates ------------------------------------------------------------------------------ */

/* Appends "\n  <path>" (no newline before the first); truncation is acceptable. */
static void add_tried(char *tried, size_t size, const char *path) {
  size_t used = strlen(tried);
  if (used + 1 >= size) return;
  snprintf(tried + used, size - used, "%s  %s", used > 0 ? "\n" : "", path);
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
    add_tried(tried, tried_size, candidate);
    if (readable(candidate) && copy_path(path, path_size, candidate)) return 1;
  }
  return 0;
}

/* No step hands a bare name to dlopen: its own search (LD_LIBRARY_PATH, the ld.so cache) would
   run the library's constructors before any check could look at the file. */
int lamp_plugin_search(lamp_kind kind, const char *name, char *path, size_t path_size, char *tried,
                       size_t tried_size) {
  tried[0] = '\0';
  path[0] = '\0';
  if (strchr(name, '/') != NULL) {
    add_tried(tried, tried_size, name);
    return readable(name) && copy_path(path, path_size, name);
  }
  char *search_path = lamp_plugin_search_path();
  if (search_path == NULL) return -1;
  int found = search_templates(search_path, kind, name, path, path_size, tried, tried_size);
  free(search_path);
  if (!found) path[0] = '\0';
  return found;
}

/* ---- permissions: on a shared machine, a plugin anyone else can replace is anyone's code ----- */

/* OpenSSH's StrictModes: the file and every directory above it belong to root or to the running
   user, and neither group nor others may write them. Write access anywhere on the chain lets
   its holder rename what lies below and put their own tree in its place. A sticky directory
   such as /tmp only stops renaming others' entries; anyone can still create one first. */

typedef struct unsafe_reason {
  char what[PATH_MAX + 256]; /* "file writable by ... (owner u, mode 0666)" */
  char fix[PATH_MAX + 64];   /* "fix with chmod go-w PATH" */
} unsafe_reason;

static void user_name(uid_t uid, char *out, size_t size) {
  struct passwd pw;
  struct passwd *found = NULL;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != NULL)
    snprintf(out, size, "%s", found->pw_name);
  else
    snprintf(out, size, "%u", (unsigned)uid);
}

/* "its group", "others" or both, with the chmod letters that fix it. */
static const char *writers(mode_t mode, const char **letters) {
  int group = (mode & S_IWGRP) != 0;
  int other = (mode & S_IWOTH) != 0;
  *letters = group && other ? "go" : group ? "g" : "o";
  return group && other ? "its group and others" : group ? "its group" : "others";
}

/* "(<dir>, owner alice, mode 0755" for a directory, "(owner alice, mode 0644" for the file:
   the parenthesis stays open for the owner rule to add whom lamp runs as. */
static void details(const char *path, const struct stat *st, int is_file, char *out,
                    size_t size) {
  char owner[64];
  user_name(st->st_uid, owner, sizeof owner);
  snprintf(out, size, "(%s%sowner %s, mode %04o", is_file ? "" : path, is_file ? "" : ", ", owner,
           (unsigned)(st->st_mode & 07777));
}

static int foreign_owner(const char *path, const struct stat *st, int is_file,
                         unsafe_reason *r) {
  uid_t me = geteuid();
  if (st->st_uid == 0 || st->st_uid == me) return 0;
  char running[64];
  char said[PATH_MAX + 128];
  user_name(me, running, sizeof running);
  details(path, st, is_file, said, sizeof said);
  snprintf(r->what, sizeof r->what, "%s owned by another user %s; running as %s)",
           is_file ? "file" : "in a directory", said, running);
  snprintf(r->fix, sizeof r->fix, "fix with chown %s %s", running, path);
  return 1;
}

/* A sticky directory writable by others is shared on purpose (/tmp): the fix is to leave it. */
static int writable_by_others(const char *path, const struct stat *st, int is_file,
                              unsafe_reason *r) {
  if ((st->st_mode & (S_IWGRP | S_IWOTH)) == 0) return 0;
  const char *letters;
  const char *who = writers(st->st_mode, &letters);
  char said[PATH_MAX + 128];
  details(path, st, is_file, said, sizeof said);
  snprintf(r->what, sizeof r->what, "%s writable by %s %s)", is_file ? "file" : "in a directory",
           who, said);
  if (!is_file && (st->st_mode & S_ISVTX) != 0 && (st->st_mode & S_IWOTH) != 0)
    snprintf(r->fix, sizeof r->fix, "fix by moving the plugin out of this shared sticky directory");
  else
    snprintf(r->fix, sizeof r->fix, "fix with chmod %s-w %s", letters, path);
  return 1;
}

/* 1 with the reason when `path` (the plugin file when is_file, else a directory above it) is
   unsafe; the owner is judged first. */
static int unsafe(const char *path, const struct stat *st, int is_file, unsafe_reason *r) {
  return foreign_owner(path, st, is_file, r) || writable_by_others(path, st, is_file, r);
}

/*
** The lamp tree: the folder holding the core's own plugin folder (the build folder, or an
** installation's lib/lamp, see base/install_tree.h), without symbolic links; "" when it cannot be resolved. Folders
** above it are exactly as trusted as the lamp executable and the core's plugins inside it:
** whoever can replace one of them can replace lamp itself, plugin check or not. So a plugin inside
** the tree is checked up to the tree's top, any other plugin up to "/"; and a checkout under a
** shared folder keeps loading its own plugins.
*/
static char tree[PATH_MAX];
static pthread_once_t tree_once = PTHREAD_ONCE_INIT;

static void find_tree(void) {
  char plugins[PATH_MAX];
  if (realpath(own_plugin_dir(), plugins) == NULL) return;
  char *slash = strrchr(plugins, '/');
  if (slash != NULL && slash != plugins) *slash = '\0';
  snprintf(tree, sizeof tree, "%s", plugins);
}

/* 1 when dir is the lamp tree or lies inside it. */
static int in_tree(const char *dir) {
  pthread_once(&tree_once, find_tree);
  size_t n = strlen(tree);
  return n > 1 && strncmp(dir, tree, n) == 0 && (dir[n] == '/' || dir[n] == '\0');
}

/* dir and every directory above it up to "/", or up to the lamp tree's top when dir lies inside
   it (dir is absolute, without symbolic links). 1 with the reason, or with *err set when one
   cannot be examined. */
static int unsafe_chain(const char *plugin, const char *dir, unsafe_reason *r, lamp_status *err) {
  char cur[PATH_MAX];
  int stop_at_tree = in_tree(dir);
  snprintf(cur, sizeof cur, "%s", dir);
  for (;;) {
    struct stat st;
    if (stat(cur, &st) != 0) {
      *err = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: cannot stat its directory %s: %s", plugin,
                        cur, strerror(errno));
      return 1;
    }
    if (unsafe(cur, &st, 0, r)) return 1;
    if (stop_at_tree && strcmp(cur, tree) == 0) return 0;
    char *slash = strrchr(cur, '/');
    if (slash == NULL || strcmp(cur, "/") == 0) return 0;
    if (slash == cur) slash[1] = '\0';
    else *slash = '\0';
  }
}

static void parent_dir(const char *path, char *out, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(out, size, ".");
    return;
  }
  size_t len = slash == path ? 1 : (size_t)(slash - path);
  snprintf(out, size, "%.*s", (int)len, path);
}

static int unsafe_paths_allowed(void) {
  const char *v = getenv("LAMP_PLUGIN_UNSAFE_PATHS");
  return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* The file itself (real has no links left), the chain above it, and the chain above the
   directory the plugin was named in when a link led elsewhere: whoever can replace the link
   chooses the code. 1 with the reason, or with *err set when something could not be read. */
static int unsafe_plugin(const char *path, const char *real, const struct stat *st,
                         unsafe_reason *r, lamp_status *err) {
  char dir[PATH_MAX];
  char named[PATH_MAX];
  char named_real[PATH_MAX];
  if (unsafe(path, st, 1, r)) return 1;
  parent_dir(real, dir, sizeof dir);
  if (unsafe_chain(path, dir, r, err)) return 1;
  parent_dir(path, named, sizeof named);
  if (realpath(named, named_real) == NULL) {
    *err = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: cannot resolve its directory %s: %s", path,
                      named, strerror(errno));
    return 1;
  }
  return strcmp(named_real, dir) != 0 && unsafe_chain(path, named_real, r, err);
}

lamp_status lamp_plugin_check_file(const char *path, const char *real) {
  struct stat st;
  if (lstat(real, &st) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot load plugin %s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: refusing a plugin that is not a regular file (%s)", path,
                      lamp_file_kind(st.st_mode) ? lamp_file_kind(st.st_mode) : "a kind lamp does not know");
  unsafe_reason r;
  lamp_status err = LAMP_OK;
  if (!unsafe_plugin(path, real, &st, &r, &err) || err != LAMP_OK) return err;
  if (!unsafe_paths_allowed())
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: refusing a plugin %s; %s", path, r.what, r.fix);
  lamp_log(LAMP_LOG_WARN, NULL,
           "%s: loading a plugin %s because LAMP_PLUGIN_UNSAFE_PATHS is set", path, r.what);
  return LAMP_OK;
}
