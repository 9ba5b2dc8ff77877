/*
** Which files the loader agrees to dlopen: the plugin file and every directory above it must
** be owned by root or the running user and writable by no one else (OpenSSH's StrictModes; a
** sticky shared directory such as /tmp counts as unsafe), and the file must be a regular file.
** The fixtures live in directories this test creates with chosen owners and modes under
** LAMP_TEST_TMP_DIR, whose own chain (the build folder and above) must be safe.
*/
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/loader.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"
#define BUILT(kind, name) LAMP_PLUGIN_BUILD_DIR "/" kind "/" name ".so"
#define TMP LAMP_TEST_TMP_DIR "/plugin_paths"

/* A load that blocks (a FIFO opened for reading) ends the test program instead of hanging. */
#define NO_HANG_SECONDS 20

/* ---- helpers --------------------------------------------------------------------------------- */

static void assert_error(lamp_status st, const char *fmt, ...) {
  char expected[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, LAMP_ERR_INVALID_USAGE);
}

static void make_dir(const char *path, mode_t mode) {
  mkdir(path, 0755);
  assert_int_equal(chown(path, geteuid(), getegid()), 0);
  assert_int_equal(chmod(path, mode), 0);
}

static void copy_file(const char *from, const char *to, mode_t mode) {
  FILE *in = fopen(from, "rb");
  assert_non_null(in);
  unlink(to);
  FILE *out = fopen(to, "wb");
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  assert_int_equal(chmod(to, mode), 0);
}

static const char *real(const char *path) {
  static char buf[4][PATH_MAX];
  static int next;
  char *out = buf[next++ % 4];
  assert_non_null(realpath(path, out));
  return out;
}

/* The running user's name, as the messages print it. */
static const char *me(void) {
  static char name[64];
  struct passwd *pw = getpwuid(geteuid());
  if (pw != NULL) snprintf(name, sizeof name, "%s", pw->pw_name);
  else snprintf(name, sizeof name, "%u", (unsigned)geteuid());
  return name;
}

/* Another account to own fixtures: only root can give files away. NULL when this cannot run. */
static const struct passwd *stranger(void) {
  if (geteuid() != 0) return NULL;
  struct passwd *pw = getpwnam("nobody");
  return pw != NULL && pw->pw_uid != 0 ? pw : NULL;
}

/* Log capture, with the level. */
static char captured[16][1024];
static lamp_log_level captured_level[16];
static int n_captured;

static void capture(lamp_log_level level, const char *line, void *ud) {
  (void)ud;
  if (n_captured >= 16) return;
  captured_level[n_captured] = level;
  snprintf(captured[n_captured++], sizeof captured[0], "%s", line);
}

static void capture_start(void) {
  n_captured = 0;
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(capture, NULL);
}

static void capture_stop(void) { lamp_log_set_sink(NULL, NULL); }

static int count_warnings(const char *line) {
  int n = 0;
  for (int i = 0; i < n_captured; i++)
    n += captured_level[i] == LAMP_LOG_WARN && strcmp(captured[i], line) == 0;
  return n;
}

/* TMP/<name>/plug/fp32.so under a directory TMP/<name> of mode `mode`; returns the file. */
static const char *plugin_under(const char *name, mode_t mode) {
  static char file[PATH_MAX];
  char top[PATH_MAX];
  char plug[PATH_MAX];
  snprintf(top, sizeof top, "%s/%s", TMP, name);
  snprintf(plug, sizeof plug, "%s/%s/plug", TMP, name);
  snprintf(file, sizeof file, "%s/%s/plug/fp32.so", TMP, name);
  make_dir(top, 0755);
  make_dir(plug, 0755);
  copy_file(BUILT("precision", "fp32"), file, 0644);
  assert_int_equal(chmod(top, mode), 0);
  return file;
}

static int setup(void **state) {
  (void)state;
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  unsetenv("LAMP_PLUGIN_UNSAFE_PATHS");
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  make_dir(TMP, 0755);
  return 0;
}

static int reset(void **state) {
  (void)state;
  alarm(0);
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_UNSAFE_PATHS");
  unsetenv("LAMP_TEST_CTOR_MARK");
  capture_stop();
  return 0;
}

/* ---- every directory above the plugin, not only its own -------------------------------------- */

/* The reported attack: a plugin folder that is itself safe, in a parent anyone can write (so
   anyone can rename the folder away and put their own in its place). */
static void test_world_writable_parent(void **state) {
  (void)state;
  const char *path = plugin_under("wwparent", 0777);
  const char *top = TMP "/wwparent";
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               path, real(top), me(), real(top));
  assert_null(h);
  /* Found by name: the same refusal. */
  setenv("LAMP_PLUGIN_PATH", TMP "/wwparent/plug/?.so", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, "fp32", &h),
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               path, real(top), me(), real(top));
  assert_int_equal(chmod(top, 0755), 0);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, "fp32", &h), LAMP_OK);
  assert_string_equal(h->path, real(path));
}

static void test_group_writable_directory(void **state) {
  (void)state;
  const char *path = plugin_under("gwparent", 0775);
  const char *top = TMP "/gwparent";
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin in a directory writable by its group (%s, owner %s, mode "
               "0775); fix with chmod g-w %s",
               path, real(top), me(), real(top));
  assert_int_equal(chmod(top, 0755), 0);
}

static void test_group_writable_file(void **state) {
  (void)state;
  const char *path = plugin_under("gwfile", 0755);
  assert_int_equal(chmod(path, 0664), 0);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin file writable by its group (owner %s, mode 0664); fix "
               "with chmod g-w %s",
               path, me(), path);
}

/* Sticky, like /tmp: no one can rename another's entry, but anyone can create one first, and
   the rule has no exception for it. The fix is to move the plugin, not to chmod /tmp. */
static void test_sticky_parent(void **state) {
  (void)state;
  const char *path = plugin_under("sticky", 01777);
  const char *top = TMP "/sticky";
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 1777); fix by moving the plugin out of this shared sticky directory",
               path, real(top), me());
  assert_int_equal(chmod(top, 0755), 0);
}

static void test_tmp_is_unsafe(void **state) {
  (void)state;
  struct stat st;
  if (stat("/tmp", &st) != 0 || (st.st_mode & 07777) != 01777) skip();
  char dir[] = "/tmp/lamp-plugin-paths.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[sizeof dir + 16];
  snprintf(path, sizeof path, "%s/fp32.so", dir);
  copy_file(BUILT("precision", "fp32"), path, 0644);
  const lamp_plugin_handle *h = NULL;
  lamp_status status = lamp_plugin_load(LAMP_KIND_PRECISION, path, &h);
  char message[LAMP_ERROR_MAX];
  snprintf(message, sizeof message, "%s", lamp_last_error());
  unlink(path);
  rmdir(dir);
  struct passwd *owner = getpwuid(st.st_uid);
  assert_non_null(owner);
  char expected[LAMP_ERROR_MAX];
  snprintf(expected, sizeof expected,
           "%s: refusing a plugin in a directory writable by its group and others (%s, owner %s, "
           "mode 1777); fix by moving the plugin out of this shared sticky directory",
           path, real("/tmp"), owner->pw_name);
  assert_string_equal(message, expected);
  assert_int_equal(status, LAMP_ERR_INVALID_USAGE);
}

/* A symbolic link: the chain above the file it points to, and the chain above the link. */
static void test_symlinks_check_both_chains(void **state) {
  (void)state;
  const char *target = plugin_under("linktarget", 0777);
  const char *top = TMP "/linktarget";
  make_dir(TMP "/linksafe", 0755);
  unlink(TMP "/linksafe/fp32.so");
  assert_int_equal(symlink(target, TMP "/linksafe/fp32.so"), 0);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, TMP "/linksafe/fp32.so", &h),
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               TMP "/linksafe/fp32.so", real(top), me(), real(top));
  assert_int_equal(chmod(top, 0755), 0);

  /* A link in an unsafe place, to a safe file: whoever can replace the link chooses the code. */
  make_dir(TMP "/linkww", 0755);
  make_dir(TMP "/linkww/sub", 0755);
  unlink(TMP "/linkww/sub/fp32.so");
  assert_int_equal(symlink(target, TMP "/linkww/sub/fp32.so"), 0);
  assert_int_equal(chmod(TMP "/linkww", 0777), 0);
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, TMP "/linkww/sub/fp32.so", &h),
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               TMP "/linkww/sub/fp32.so", real(TMP "/linkww"), me(), real(TMP "/linkww"));
  assert_int_equal(chmod(TMP "/linkww", 0755), 0);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, TMP "/linkww/sub/fp32.so", &h), LAMP_OK);
  assert_string_equal(h->path, real(target));
}

static void test_safe_modes_load(void **state) {
  (void)state;
  const char *path = plugin_under("safe", 0700);
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
  assert_int_equal(chmod(path, 0444), 0);
  assert_int_equal(chmod(TMP "/safe", 02755), 0); /* setgid: no one else can write */
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
  assert_int_equal(chmod(TMP "/safe", 0755), 0);
}

/* ---- owners: root or the running user -------------------------------------------------------- */

static void test_directory_of_another_user(void **state) {
  (void)state;
  const struct passwd *pw = stranger();
  if (pw == NULL) skip();
  const char *path = plugin_under("foreign", 0755);
  const char *top = TMP "/foreign";
  assert_int_equal(chown(top, pw->pw_uid, (gid_t)-1), 0);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin in a directory owned by another user (%s, owner %s, mode "
               "0755; running as %s); fix with chown %s %s",
               path, real(top), pw->pw_name, me(), me(), real(top));
  assert_int_equal(chown(top, geteuid(), (gid_t)-1), 0);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
}

static void test_file_of_another_user(void **state) {
  (void)state;
  const struct passwd *pw = stranger();
  if (pw == NULL) skip();
  const char *path = plugin_under("foreignfile", 0755);
  assert_int_equal(chown(path, pw->pw_uid, (gid_t)-1), 0);
  assert_int_equal(chmod(path, 0644), 0);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h),
               "%s: refusing a plugin file owned by another user (owner %s, mode 0644; running "
               "as %s); fix with chown %s %s",
               path, pw->pw_name, me(), me(), path);
}

/* ---- the override for development, and no code runs before the checks ------------------------ */

static void test_unsafe_override_warns_on_every_load(void **state) {
  (void)state;
  const char *path = plugin_under("override", 0777);
  const char *top = TMP "/override";
  char warning[LAMP_ERROR_MAX];
  snprintf(warning, sizeof warning,
           "warning: %s: loading a plugin in a directory writable by its group and others (%s, "
           "owner %s, mode 0777) because LAMP_PLUGIN_UNSAFE_PATHS is set",
           path, real(top), me());
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_UNSAFE_PATHS", "0", 1); /* "0" does not switch it on */
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_ERR_INVALID_USAGE);
  setenv("LAMP_PLUGIN_UNSAFE_PATHS", "1", 1);
  capture_start();
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
  capture_stop();
  assert_int_equal(count_warnings(warning), 2);
  assert_string_equal(h->path, real(path));
  assert_int_equal(chmod(top, 0755), 0);
}

static void test_refused_plugin_runs_no_code(void **state) {
  (void)state;
  const char *mark = TMP "/ctor.mark";
  make_dir(TMP "/ctorparent", 0755);
  make_dir(TMP "/ctorparent/plug", 0755);
  copy_file(BAD("ctormark"), TMP "/ctorparent/plug/ctormark.so", 0644);
  assert_int_equal(chmod(TMP "/ctorparent", 0777), 0);
  unlink(mark);
  setenv("LAMP_TEST_CTOR_MARK", mark, 1);
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, TMP "/ctorparent/plug/ctormark.so", &h),
                   LAMP_ERR_INVALID_USAGE);
  assert_int_equal(access(mark, F_OK), -1);
  assert_int_equal(chmod(TMP "/ctorparent", 0755), 0);
}

/* ---- not a regular file: refused without opening it ------------------------------------------ */

static void test_fifo_refused_without_blocking(void **state) {
  (void)state;
  make_dir(TMP "/fifo", 0755);
  const char *path = TMP "/fifo/pipe.so";
  unlink(path);
  assert_int_equal(mkfifo(path, 0644), 0);
  alarm(NO_HANG_SECONDS);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, path, &h),
               "%s: refusing a plugin that is not a regular file (a FIFO)", path);
  assert_error(lamp_plugin_inspect(path, &h),
               "%s: refusing a plugin that is not a regular file (a FIFO)", path);
  setenv("LAMP_PLUGIN_PATH", TMP "/fifo/?.so", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "pipe", &h),
               "%s: refusing a plugin that is not a regular file (a FIFO)", path);
  /* The override is about owners and modes; a FIFO still cannot be loaded. */
  setenv("LAMP_PLUGIN_UNSAFE_PATHS", "1", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, path, &h),
               "%s: refusing a plugin that is not a regular file (a FIFO)", path);
  alarm(0);
}

static void test_other_file_types_refused(void **state) {
  (void)state;
  make_dir(TMP "/types", 0755);
  make_dir(TMP "/types/dir.so", 0755);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, TMP "/types/dir.so", &h),
               "%s: refusing a plugin that is not a regular file (a directory)",
               TMP "/types/dir.so");
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "/dev/null", &h),
               "/dev/null: refusing a plugin that is not a regular file (a character device)");
}

/* `lamp plugins` lists what it refuses, with the reason, and hangs on nothing. */
static const lamp_plugin_listing *find_listed(const lamp_plugin_listing *items, size_t n,
                                              const char *path) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(items[i].path, path) == 0) return &items[i];
  return NULL;
}

static void test_listing_shows_refusals(void **state) {
  (void)state;
  const char *path = plugin_under("listed", 0777);
  const char *top = TMP "/listed";
  make_dir(TMP "/listedfifo", 0755);
  unlink(TMP "/listedfifo/pipe.so");
  assert_int_equal(mkfifo(TMP "/listedfifo/pipe.so", 0644), 0);
  setenv("LAMP_PLUGIN_PATH", TMP "/listed/plug/?.so;" TMP "/listedfifo/?.so", 1);
  alarm(NO_HANG_SECONDS);
  lamp_plugin_listing *items = NULL;
  size_t n = 0;
  assert_int_equal(lamp_plugin_list(&items, &n), LAMP_OK);
  alarm(0);
  assert_int_equal(chmod(top, 0755), 0);

  const lamp_plugin_listing *item = find_listed(items, n, real(path));
  assert_non_null(item);
  assert_int_equal(item->status, LAMP_ERR_INVALID_USAGE);
  assert_null(item->handle);
  char expected[LAMP_ERROR_MAX];
  snprintf(expected, sizeof expected,
           "%s: refusing a plugin in a directory writable by its group and others (%s, owner %s, "
           "mode 0777); fix with chmod go-w %s",
           path, real(top), me(), real(top));
  assert_string_equal(item->error, expected);

  item = find_listed(items, n, real(TMP "/listedfifo/pipe.so"));
  assert_non_null(item);
  assert_null(item->handle);
  assert_string_equal(item->error, TMP "/listedfifo/pipe.so: refusing a plugin that is not a "
                                       "regular file (a FIFO)");
  /* The built plugins are still there, loaded. */
  item = find_listed(items, n, real(BUILT("comm", "single")));
  assert_non_null(item);
  assert_int_equal(item->status, LAMP_OK);
  free(items);
}

#define T(f) cmocka_unit_test_teardown(f, reset)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_world_writable_parent),
      T(test_group_writable_directory),
      T(test_group_writable_file),
      T(test_sticky_parent),
      T(test_tmp_is_unsafe),
      T(test_symlinks_check_both_chains),
      T(test_safe_modes_load),
      T(test_directory_of_another_user),
      T(test_file_of_another_user),
      T(test_unsafe_override_warns_on_every_load),
      T(test_refused_plugin_runs_no_code),
      T(test_fifo_refused_without_blocking),
      T(test_other_file_types_refused),
      T(test_listing_shows_refusals),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
