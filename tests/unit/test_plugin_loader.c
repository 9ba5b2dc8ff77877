/*
** The plugin loader against good and deliberately malformed plugins: every validation step
** with its exact message, search order, declared names, permissions, caching, the info line, auto selection
** and listing. Every failure must come back as a status and a message; the process neither
** crashes nor exits.
*/
#include <dlfcn.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/instance.h"
#include "plugin/loader.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"
#define BUILT(kind, name) LAMP_PLUGIN_BUILD_DIR "/" kind "/" name ".so"
#define TMP LAMP_TEST_TMP_DIR "/plugin_loader"

/* ---- helpers --------------------------------------------------------------------------------- */

static void assert_error(lamp_status st, lamp_status code, const char *fmt, ...) {
  char expected[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static void make_dir(const char *path, mode_t mode) {
  mkdir(path, 0755);
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

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(path, 0644), 0);
}

/* The running user's name, as the permission messages print a file's owner. */
static const char *me(void) {
  static char name[64];
  struct passwd *pw = getpwuid(geteuid());
  if (pw != NULL) snprintf(name, sizeof name, "%s", pw->pw_name);
  else snprintf(name, sizeof name, "%u", (unsigned)geteuid());
  return name;
}

static const char *real(const char *path) {
  static char buf[4][PATH_MAX];
  static int next;
  char *out = buf[next++ % 4];
  assert_non_null(realpath(path, out));
  return out;
}

/* Log capture. */
static char captured[64][1024];
static int n_captured;

static void capture(lamp_log_level level, const char *line, void *ud) {
  (void)level;
  (void)ud;
  if (n_captured < 64) snprintf(captured[n_captured++], sizeof captured[0], "%s", line);
}

static void capture_start(void) {
  n_captured = 0;
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(capture, NULL);
}

static void capture_stop(void) { lamp_log_set_sink(NULL, NULL); }

static int count_lines(const char *line) {
  int n = 0;
  for (int i = 0; i < n_captured; i++) n += strcmp(captured[i], line) == 0;
  return n;
}

static int setup(void **state) {
  (void)state;
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  make_dir(TMP, 0755);
  return 0;
}

static int reset_env(void **state) {
  (void)state;
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  capture_stop();
  return 0;
}

/* ---- not found, and the search order --------------------------------------------------------- */

static void test_not_found_default(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  lamp_status st = lamp_plugin_load(LAMP_KIND_PRECISION, "fp99", &h);
  assert_error(st, LAMP_ERR_INVALID_USAGE,
               "precision plugin 'fp99' not found; tried:\n"
               "  " BUILT("precision", "fp99"));
  assert_null(h);
}

static void test_not_found_lists_plugin_path(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_PATH", "/nonexistent/!/?.so;/nonexistent/lib?-x.so", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_COMM, "fp99", &h), LAMP_ERR_INVALID_USAGE,
               "comm plugin 'fp99' not found; tried:\n"
               "  /nonexistent/comm/fp99.so\n"
               "  /nonexistent/libfp99-x.so\n"
               "  " BUILT("comm", "fp99"));
}

static void test_double_semicolon_is_the_default(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_PATH", "/a/?.so;;/b/!/?.so", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "nope", &h), LAMP_ERR_INVALID_USAGE,
               "optim plugin 'nope' not found; tried:\n"
               "  /a/nope.so\n"
               "  " BUILT("optim", "nope") "\n"
                                           "  /b/optim/nope.so");
}

static void test_plugin_dir_env(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_DIR", "/elsewhere", 1);
  assert_string_equal(lamp_plugin_dir(), "/elsewhere");
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "sgd", &h), LAMP_ERR_INVALID_USAGE,
               "optim plugin 'sgd' not found; tried:\n"
               "  /elsewhere/optim/sgd.so");
}

static void test_path_with_slash_is_verbatim(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "./no/such/sgd", &h), LAMP_ERR_INVALID_USAGE,
               "optim plugin './no/such/sgd' not found; tried:\n"
               "  ./no/such/sgd");
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("newerminor"), &h), LAMP_OK);
  assert_string_equal(h->path, real(BAD("newerminor")));

  char cwd[PATH_MAX];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(LAMP_BAD_PLUGIN_DIR), 0);
  const lamp_plugin_handle *h2 = NULL;
  lamp_status st = lamp_plugin_load(LAMP_KIND_OPTIM, "./newerminor.so", &h2);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(st, LAMP_OK);
  assert_ptr_equal(h2, h);
}

static void test_plugin_path_templates(void **state) {
  (void)state;
  make_dir(TMP "/tree", 0755);
  make_dir(TMP "/tree/optim", 0755);
  make_dir(TMP "/tree/comm", 0755);
  copy_file(BUILT("optim", "sgd"), TMP "/tree/optim/sgd.so", 0644);
  copy_file(BUILT("comm", "single"), TMP "/tree/comm/single.so", 0644);
  setenv("LAMP_PLUGIN_PATH", "/nonexistent/?.so;" TMP "/tree/!/?.so", 1);

  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, "sgd", &h), LAMP_OK);
  assert_string_equal(h->desc->name, "sgd");
  assert_int_equal(h->kind, LAMP_KIND_OPTIM);
  assert_string_equal(h->path, real(TMP "/tree/optim/sgd.so"));

  /* LAMP_PLUGIN_PATH comes before the build directory. */
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "single", &h), LAMP_OK);
  assert_string_equal(h->path, real(TMP "/tree/comm/single.so"));

  setenv("LAMP_PLUGIN_PATH", LAMP_BAD_PLUGIN_DIR "/?.so", 1);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, "newerminor", &h), LAMP_OK);
  assert_string_equal(h->path, real(BAD("newerminor")));
}

/*
** A plugin loaded by name declares that name: a file named after one plugin that holds another,
** or a search-path entry without '?' (which every name reaches), fails instead of answering.
*/
static void test_name_must_match_the_declared_one(void **state) {
  (void)state;
  make_dir(TMP "/renamed", 0755);
  make_dir(TMP "/renamed/optim", 0755);
  copy_file(BUILT("optim", "sgd"), TMP "/renamed/optim/mysgd.so", 0644);
  setenv("LAMP_PLUGIN_PATH", TMP "/renamed/!/?.so", 1);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "mysgd", &h), LAMP_ERR_INVALID_USAGE,
               TMP "/renamed/optim/mysgd.so: asked for optim 'mysgd', the plugin declares itself "
                   "'sgd'");
  assert_null(h);
  /* By path the file is what the user named: it loads, under its own name. */
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, TMP "/renamed/optim/mysgd.so", &h), LAMP_OK);
  assert_string_equal(h->desc->name, "sgd");
  /* Cached now, asked for by name again: still refused. */
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "mysgd", &h), LAMP_ERR_INVALID_USAGE,
               TMP "/renamed/optim/mysgd.so: asked for optim 'mysgd', the plugin declares itself "
                   "'sgd'");
}

static void test_entry_without_mark_checks_the_name(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_PATH", BAD("lion"), 1);
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, "adam", &h), LAMP_ERR_INVALID_USAGE,
               BAD("lion") ": asked for optim 'adam', the plugin declares itself 'lion'");
  assert_error(lamp_plugin_load(LAMP_KIND_COMM, "lion", &h), LAMP_ERR_INVALID_USAGE,
               BAD("lion") ": is an optim plugin, expected comm");
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, "lion", &h), LAMP_OK);
  assert_string_equal(h->desc->name, "lion");
  assert_string_equal(h->path, real(BAD("lion")));
}

/*
** A bare name is looked up only in lamp's own search path, never by dlopen's system search
** (LD_LIBRARY_PATH, the ld.so cache), which would run the library's constructors before any
** check. LD_LIBRARY_PATH is read when a process starts, so a child started with it set does the
** load (main() runs bare_child() for it).
*/
static const char *self_path = "/proc/self/exe"; /* argv[0] when it is a path */

#define BARE_DIR TMP "/bare"
#define BARE_MARK TMP "/bare.mark"

static int bare_child(void) {
  const lamp_plugin_handle *h = NULL;
  const char *expected = "optim plugin 'ctormark' not found; tried:\n"
                         "  " BUILT("optim", "ctormark");
  if (lamp_plugin_load(LAMP_KIND_OPTIM, "ctormark", &h) == LAMP_OK) {
    fprintf(stderr, "bare name loaded from %s\n", h->path);
    return 1;
  }
  if (strcmp(lamp_last_error(), expected) != 0) {
    fprintf(stderr, "bare name: got '%s'\nwant '%s'\n", lamp_last_error(), expected);
    return 1;
  }
  return 0;
}

static void test_bare_name_skips_system_search(void **state) {
  (void)state;
  make_dir(BARE_DIR, 0755);
  copy_file(BAD("ctormark"), BARE_DIR "/lamp-optim-ctormark.so", 0644);
  copy_file(BAD("ctormark"), BARE_DIR "/ctormark.so", 0644);
  unlink(BARE_MARK);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("LD_LIBRARY_PATH", BARE_DIR, 1);
    setenv("LAMP_TEST_CTOR_MARK", BARE_MARK, 1);
    execl(self_path, "test_plugin_loader", "--bare-child", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(access(BARE_MARK, F_OK), -1); /* no constructor ran */
}

/* ---- found but failed: each validation step -------------------------------------------------- */

static void test_not_an_elf_file(void **state) {
  (void)state;
  make_dir(TMP "/text", 0755);
  const char *path = TMP "/text/notelf.so";
  write_text(path, "This is a text file, not a shared object. It is long enough to hold an\n"
                   "ELF header, so the dynamic loader reads one and finds it invalid.\n");
  dlerror();
  assert_null(dlopen(real(path), RTLD_NOW | RTLD_LOCAL));
  char reason[1024];
  const char *full = dlerror();
  size_t prefix = strlen(real(path));
  snprintf(reason, sizeof reason, "%s",
           strncmp(full, real(path), prefix) == 0 ? full + prefix + 2 : full);

  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_ERR_INVALID_USAGE,
               "cannot load plugin %s: %s", path, reason);
  assert_non_null(strstr(lamp_last_error(), "ELF"));
}

static void test_undefined_symbol(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("undefsym"), &h), LAMP_ERR_INVALID_USAGE,
               "cannot load plugin " BAD("undefsym") ": undefined symbol: "
                                                     "lamp_function_nobody_defines");
}

static void test_no_entry_symbol(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("noentry"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("noentry") ": no lamp_plugin_entry_v1 symbol: not a lamp plugin");
}

static void test_newer_core_entry(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("v2only"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("v2only") ": built for a newer core: exports lamp_plugin_entry_v2, this core "
                             "(ABI 1.4) needs lamp_plugin_entry_v1");
}

static void test_entry_refuses(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("refuse"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("refuse") ": lamp_plugin_entry_v1 returned NULL: refusing: core (any) is not "
                             "the one I need");
}

static void test_bad_magic(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("badmagic"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("badmagic") ": bad magic 0x12345678 (expected 0x504d414c)");
}

static void test_wrong_kind(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("wrongkind"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("wrongkind") ": is a comm plugin, expected precision");
  /* The same file as the right kind loads, and asking again for the wrong kind still fails
     with the same message although it is now cached. */
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, BAD("wrongkind"), &h), LAMP_OK);
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("wrongkind"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("wrongkind") ": is a comm plugin, expected optim");
}

static void test_abi_major(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("abi2"), &h), LAMP_ERR_INVALID_USAGE,
               "abi2: plugin ABI 2.0 not supported by this core (ABI 1.x): " BAD("abi2"));
}

static void test_struct_too_small(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, BAD("small"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("small") ": table is 40 bytes, ABI 1.4 precision plugins need at least %zu",
               offsetof(lamp_precision_v1, save_state));
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_PRECISION, 0), 120);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_COMM, 0), 128);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_OPTIM, 0), 104);
  /* ABI 1.1 added no family member: the same prefixes. */
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_PRECISION, 1), 120);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_COMM, 1), 128);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_OPTIM, 1), 104);
  /* ABI 1.2 added an optional one (lamp_optim_v1.caps): still the same prefixes. */
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_OPTIM, 2), 104);
  /* ABI 1.3 added optional comm members (the bootstrap, the stream-ordered calls): the same. */
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_COMM, 3), 128);
}

static void test_required_function_null(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("nofn"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("nofn") ": required function 'create' is NULL");
}

/* ABI 1.3: all_reduce_enqueue, wait_stream and poll come as three or not at all. */
static void test_stream_ordered_calls_together(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_COMM, BAD("halfstream"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("halfstream") ": has some of the stream-ordered calls but not 'wait_stream', 'poll': "
                                 "all_reduce_enqueue, wait_stream and poll come together");
}

static void test_create_fails(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  assert_error(lamp_optim_open(&o, BAD("failcreate"), NULL, 0), LAMP_ERR_INVALID_USAGE,
               "failcreate: cannot create: lr is 0.5");
  assert_null(o);
  lamp_option lr = {"lr", 0.25};
  assert_error(lamp_optim_open(&o, BAD("failcreate"), &lr, 1), LAMP_ERR_INVALID_USAGE,
               "failcreate: cannot create: lr is 0.25");
}

/* Rule 2: a newer minor with a bigger table, and an older table without trailing optionals. */
static void test_minor_versions_accepted(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("newerminor"), &h), LAMP_OK);
  assert_int_equal(h->desc->abi_minor, 7);

  lamp_precision *p = NULL;
  assert_int_equal(lamp_precision_open(&p, BAD("oldsize"), NULL, 0), LAMP_OK);
  size_t size = 1;
  assert_int_equal(lamp_precision_save_state(p, NULL, &size), LAMP_OK);
  assert_int_equal(size, 0); /* its save_state lies past struct_size: absent, never called */
  assert_int_equal(lamp_precision_load_state(p, NULL, 0), LAMP_OK);
  char blob[24] = {0};
  assert_error(lamp_precision_load_state(p, blob, sizeof blob), LAMP_ERR_INVALID_USAGE,
               "oldsize: has no scaler state, the checkpoint holds 24 bytes");
  lamp_precision_close(p);
}

/*
** A plugin built against ABI 1.0 (tests/bad_plugins/abi10.c): it loads, and the core calls it as
** 1.0 defined, its hdr.devices of 0 meaning the CPU. Its all_reduce adds 1 to each element.
*/
static void test_abi_1_0_plugin_runs(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, BAD("abi10"), &h), LAMP_OK);
  assert_int_equal(h->desc->abi_minor, 0);
  assert_int_equal(h->desc->devices, 0);
  assert_true(lamp_plugin_runs_on(h, LAMP_CPU));
  assert_int_equal(lamp_plugin_check_device(h, LAMP_CPU), LAMP_OK);

  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, BAD("abi10"), NULL, 0), LAMP_OK);
  assert_int_equal(lamp_comm_rank(c), 0);
  assert_int_equal(lamp_comm_size(c), 1);
  float x[3] = {1.0f, -2.0f, 0.5f};
  assert_int_equal(lamp_comm_all_reduce(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  assert_true(x[0] == 2.0f && x[1] == -1.0f && x[2] == 1.5f);
  assert_int_equal(lamp_comm_broadcast(c, x, 3, LAMP_F32, 0, LAMP_CPU), LAMP_OK);
  assert_int_equal(lamp_comm_barrier(c), LAMP_OK);
  /* Its optional members are absent, as in 1.0. */
  assert_false(lamp_comm_supports(c, "all_gather"));
  /* The core refuses what 1.0's devices 0 does not cover, before the plugin sees the call. */
  assert_error(lamp_comm_all_reduce(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA),
               LAMP_ERR_UNSUPPORTED, "abi10: does not run on cuda (its devices: cpu)");
  assert_true(x[0] == 2.0f);
  lamp_comm_close(c);
}

/* ---- permissions ----------------------------------------------------------------------------- */

static void test_world_writable_file(void **state) {
  (void)state;
  make_dir(TMP "/wwfile", 0755);
  const char *path = TMP "/wwfile/fp32.so";
  copy_file(BUILT("precision", "fp32"), path, 0666);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_ERR_INVALID_USAGE,
               "%s: refusing a plugin file writable by its group and others (owner %s, mode 0666); "
               "fix with chmod go-w %s",
               path, me(), path);
  assert_int_equal(chmod(path, 0644), 0);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_OK);
}

static void test_world_writable_directory(void **state) {
  (void)state;
  const char *dir = TMP "/wwdir";
  const char *path = TMP "/wwdir/fp32.so";
  make_dir(dir, 0755);
  copy_file(BUILT("precision", "fp32"), path, 0644);
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(chmod(dir, 0777), 0);
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_ERR_INVALID_USAGE,
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               path, dir, me(), dir);
  /* Sticky, like /tmp: others still create files there, e.g. a fp32.so of their own. */
  assert_int_equal(chmod(dir, 01777), 0);
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, path, &h), LAMP_ERR_INVALID_USAGE,
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 1777); fix by moving the plugin out of this shared sticky directory",
               path, dir, me());
  /* Found through LAMP_PLUGIN_PATH: the same refusal, not a silent skip. */
  setenv("LAMP_PLUGIN_PATH", TMP "/wwdir/?.so", 1);
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, "fp32", &h), LAMP_ERR_INVALID_USAGE,
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 1777); fix by moving the plugin out of this shared sticky directory",
               path, dir, me());
  assert_int_equal(chmod(dir, 0755), 0);
}

static void test_symlink_into_writable_directory(void **state) {
  (void)state;
  make_dir(TMP "/wwreal", 0755);
  make_dir(TMP "/safe", 0755);
  copy_file(BUILT("precision", "fp32"), TMP "/wwreal/fp32.so", 0644);
  unlink(TMP "/safe/link.so");
  assert_int_equal(symlink(TMP "/wwreal/fp32.so", TMP "/safe/link.so"), 0);
  assert_int_equal(chmod(TMP "/wwreal", 0777), 0);
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_PRECISION, TMP "/safe/link.so", &h),
               LAMP_ERR_INVALID_USAGE,
               "%s: refusing a plugin in a directory writable by its group and others (%s, owner "
               "%s, mode 0777); fix with chmod go-w %s",
               TMP "/safe/link.so", real(TMP "/wwreal"), me(), real(TMP "/wwreal"));
  assert_int_equal(chmod(TMP "/wwreal", 0755), 0);
}

/* ---- caching, the info line, inspect --------------------------------------------------------- */

static void test_cache_returns_same_handle(void **state) {
  (void)state;
  const lamp_plugin_handle *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "single", &a), LAMP_OK);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "single", &b), LAMP_OK);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, BUILT("comm", "single"), &c), LAMP_OK);
  assert_ptr_equal(a, b);
  assert_ptr_equal(a, c);
  assert_string_equal(a->path, real(BUILT("comm", "single")));
  assert_string_equal(a->desc->name, "single");
  assert_int_equal(a->kind, LAMP_KIND_COMM);
}

static void test_info_line_once(void **state) {
  (void)state;
  make_dir(TMP "/info", 0755);
  copy_file(BUILT("comm", "single"), TMP "/info/single.so", 0644);
  char line[PATH_MAX + 64];
  snprintf(line, sizeof line, "comm: single 1.0 (ABI 1.4) from %s", real(TMP "/info/single.so"));
  capture_start();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, TMP "/info/single.so", &h), LAMP_OK);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, TMP "/info/single.so", &h), LAMP_OK);
  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, TMP "/info/single.so", NULL, 0), LAMP_OK);
  lamp_comm_close(c);
  capture_stop();
  assert_int_equal(count_lines(line), 1);
  assert_int_equal(n_captured, 1);
}

static void test_inspect_is_silent_and_any_kind(void **state) {
  (void)state;
  make_dir(TMP "/inspect", 0755);
  copy_file(BUILT("optim", "sgd"), TMP "/inspect/sgd.so", 0644);
  capture_start();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_inspect(TMP "/inspect/sgd.so", &h), LAMP_OK);
  capture_stop();
  assert_int_equal(n_captured, 0);
  assert_int_equal(h->kind, LAMP_KIND_OPTIM);
  assert_int_equal(h->desc->n_params, 5);
  assert_error(lamp_plugin_inspect(BAD("badmagic"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("badmagic") ": bad magic 0x12345678 (expected 0x504d414c)");
  assert_error(lamp_plugin_inspect("/nonexistent/x.so", &h), LAMP_ERR_INVALID_USAGE,
               "plugin '/nonexistent/x.so' not found; tried:\n  /nonexistent/x.so");
}

static void test_kind_names(void **state) {
  (void)state;
  lamp_kind k;
  assert_string_equal(lamp_kind_name(LAMP_KIND_PRECISION), "precision");
  assert_string_equal(lamp_kind_name(LAMP_KIND_COMM), "comm");
  assert_string_equal(lamp_kind_name(LAMP_KIND_OPTIM), "optim");
  assert_true(lamp_kind_parse("comm", &k));
  assert_int_equal(k, LAMP_KIND_COMM);
  assert_false(lamp_kind_parse("optimizer", &k));
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_COMM, "", &h), LAMP_ERR_INVALID_ARG,
               "empty comm plugin name");
}

/* ---- auto and listing ------------------------------------------------------------------------ */

static void test_auto_picks_single(void **state) {
  (void)state;
  capture_start();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_select_auto(LAMP_KIND_COMM, &h), LAMP_OK);
  capture_stop();
  assert_string_equal(h->desc->name, "single");
  assert_int_equal(count_lines("comm auto: single scored 1 (always available)"), 1);
  assert_int_equal(count_lines("comm auto: picked single (always available)"), 1);

  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, "auto", NULL, 0), LAMP_OK);
  assert_ptr_equal(lamp_comm_handle(c), h);
  lamp_comm_close(c);
}

static void test_auto_ranks_by_score(void **state) {
  (void)state;
  /* The bad plugins join the candidates: wrongkind is a comm plugin scoring 0, the broken ones
     are skipped with their message, the other kinds are not candidates. */
  setenv("LAMP_PLUGIN_PATH", LAMP_BAD_PLUGIN_DIR "/?.so", 1);
  capture_start();
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_select_auto(LAMP_KIND_COMM, &h), LAMP_OK);
  capture_stop();
  assert_string_equal(h->desc->name, "single");
  assert_int_equal(count_lines("comm auto: wrongkind scored 0 (no reason given)"), 1);
  assert_int_equal(count_lines("comm auto: picked single (always available)"), 1);
  assert_int_equal(count_lines("comm auto: skipped: " BAD("badmagic") ": bad magic 0x12345678 "
                                                                      "(expected 0x504d414c)"),
                   1);
}

static void test_auto_nothing_usable(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  setenv("LAMP_PLUGIN_DIR", "/nonexistent", 1);
  assert_error(lamp_plugin_select_auto(LAMP_KIND_COMM, &h), LAMP_ERR_UNSUPPORTED,
               "comm auto: no usable comm plugin found");
  setenv("LAMP_PLUGIN_PATH", LAMP_BAD_PLUGIN_DIR "/wrongkind.so", 1);
  assert_error(lamp_plugin_select_auto(LAMP_KIND_COMM, &h), LAMP_ERR_UNSUPPORTED,
               "comm auto: no usable comm plugin; candidates:\n"
               "  wrongkind scored 0 (no reason given): %s",
               real(BAD("wrongkind")));
}

static const lamp_plugin_listing *find_listed(const lamp_plugin_listing *items, size_t n,
                                              const char *path) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(items[i].path, path) == 0) return &items[i];
  return NULL;
}

static void test_list_finds_built_plugins(void **state) {
  (void)state;
  lamp_plugin_listing *items = NULL;
  size_t n = 0;
  assert_int_equal(lamp_plugin_list(&items, &n), LAMP_OK);
  const char *names[][2] = {{"precision", "fp32"}, {"comm", "single"}, {"optim", "sgd"}};
  for (size_t i = 0; i < 3; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/%s.so", LAMP_PLUGIN_BUILD_DIR, names[i][0], names[i][1]);
    const lamp_plugin_listing *item = find_listed(items, n, real(path));
    assert_non_null(item);
    assert_int_equal(item->status, LAMP_OK);
    assert_non_null(item->handle);
    assert_string_equal(item->handle->desc->name, names[i][1]);
    assert_string_equal(lamp_kind_name(item->handle->kind), names[i][0]);
  }
  free(items);

  /* Failures are listed with their message. */
  setenv("LAMP_PLUGIN_PATH", LAMP_BAD_PLUGIN_DIR "/?.so", 1);
  assert_int_equal(lamp_plugin_list(&items, &n), LAMP_OK);
  const lamp_plugin_listing *bad = find_listed(items, n, real(BAD("badmagic")));
  assert_non_null(bad);
  assert_int_equal(bad->status, LAMP_ERR_INVALID_USAGE);
  assert_null(bad->handle);
  char expected[PATH_MAX + 64];
  snprintf(expected, sizeof expected, "%s: bad magic 0x12345678 (expected 0x504d414c)",
           BAD("badmagic"));
  assert_string_equal(bad->error, expected);
  const lamp_plugin_listing *good = find_listed(items, n, real(BAD("wrongkind")));
  assert_non_null(good);
  assert_int_equal(good->status, LAMP_OK);
  free(items);
}

#define T(f) cmocka_unit_test_teardown(f, reset_env)

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--bare-child") == 0) return bare_child();
  if (argc > 0 && strchr(argv[0], '/') != NULL) self_path = argv[0];
  const struct CMUnitTest tests[] = {
      T(test_not_found_default),
      T(test_not_found_lists_plugin_path),
      T(test_double_semicolon_is_the_default),
      T(test_plugin_dir_env),
      T(test_path_with_slash_is_verbatim),
      T(test_plugin_path_templates),
      T(test_name_must_match_the_declared_one),
      T(test_entry_without_mark_checks_the_name),
      T(test_bare_name_skips_system_search),
      T(test_not_an_elf_file),
      T(test_undefined_symbol),
      T(test_no_entry_symbol),
      T(test_newer_core_entry),
      T(test_entry_refuses),
      T(test_bad_magic),
      T(test_wrong_kind),
      T(test_abi_major),
      T(test_struct_too_small),
      T(test_required_function_null),
      T(test_stream_ordered_calls_together),
      T(test_create_fails),
      T(test_minor_versions_accepted),
      T(test_abi_1_0_plugin_runs),
      T(test_world_writable_file),
      T(test_world_writable_directory),
      T(test_symlink_into_writable_directory),
      T(test_cache_returns_same_handle),
      T(test_info_line_once),
      T(test_inspect_is_silent_and_any_kind),
      T(test_kind_names),
      T(test_auto_picks_single),
      T(test_auto_ranks_by_score),
      T(test_auto_nothing_usable),
      T(test_list_finds_built_plugins),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
