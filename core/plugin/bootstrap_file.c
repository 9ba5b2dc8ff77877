/*
** The file store: the bootstrap for launchers without MPI (torchrun, a job scheduler, a shell
** loop), over a folder every rank can reach (LAMP_STORE_DIR).
**
** Layout. Each run works in its own folder <dir>/<tag>: rank 0 creates it (mode 0700) and the
** others wait for it to appear. Collective k of rank r is the file <k>.<r>, written whole under
** a temporary name and renamed, so a reader sees all of it or nothing. A broadcast writes only
** the root's file; all_gather and barrier write one per rank.
**
** Waiting without sleeping: inotify on the folder wakes a rank when a file arrives; the poll()
** that waits for it has a timeout for the deadline, at most SLICE_MS so that the abort flag is
** seen soon and so that a folder on a network file system (where inotify does not see other
** machines' writes) is looked at again.
**
** Reuse. A tag names one run: LAMP_RUN_ID, else torchrun's TORCHELASTIC_RUN_ID, else "lamp",
** followed by the number of the bootstrap in the process (".0" for the first). Each rank leaves
** a file left.<r> when it closes; the rank that finds every rank's there removes the folder. A
** run that fails leaves its folder behind, and rank 0 of the next run with the same tag refuses
** to start in it (it cannot tell a stale file from a fresh one): remove it, or give each run its
** own LAMP_RUN_ID.
**
** Trust. The store's own folder must not be writable by others unless it has the sticky bit (as
** /tmp), and the run's folder must be a folder owned by this user and writable by no one else:
** whoever can write in it can feed the ranks their NCCL id.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "plugin/bootstrap.h"
#include "plugin/loader.h"

#define SLICE_MS 100
#define MAX_TAG 120

typedef struct store {
  char dir[PATH_MAX]; /* <store>/<tag> */
  int rank, size;
  int inotify;        /* watching dir */
  int broken;         /* a call failed: the ranks no longer agree on what comes next */
  char *missing;      /* "1, 3": the ranks a wait is missing */
  size_t missing_size;
} store;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int aborted(void) {
  const volatile int *flag = lamp_host_get()->abort_flag;
  return flag != NULL && *flag != 0;
}

/* ---- waiting for the folder to change -------------------------------------------------------- */

static void drain(int fd) {
  char buf[4096];
  while (read(fd, buf, sizeof buf) > 0) {
  }
}

/* Returns when something arrived in the watched folder, at the deadline, or after SLICE_MS. */
static void await_change(int fd, double deadline) {
  double left = deadline - now_seconds();
  if (left <= 0) return;
  int ms = left * 1000.0 < SLICE_MS ? (int)ceil(left * 1000.0) : SLICE_MS;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, ms) > 0) drain(fd);
}

static lamp_status watch(const char *path, uint32_t events, int *fd) {
  *fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (*fd < 0) return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: inotify_init1 failed: %s", strerror(errno));
  if (inotify_add_watch(*fd, path, events) >= 0) return LAMP_OK;
  lamp_status st = lamp_error(LAMP_ERR_SYSTEM, "bootstrap: cannot watch the file store folder %s: %s", path,
                              strerror(errno));
  close(*fd);
  *fd = -1;
  return st;
}

/* ---- files ----------------------------------------------------------------------------------- */

static void file_path(const store *s, char *out, size_t size, unsigned long seq, int rank) {
  snprintf(out, size, "%s/%lu.%d", s->dir, seq, rank);
}

static lamp_status io_failed(const store *s, const char *what, const char *path) {
  return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: %s %s (file store %s): %s", what, path, s->dir, strerror(errno));
}

static int write_all(int fd, const void *data, size_t bytes) {
  const char *p = data;
  while (bytes > 0) {
    ssize_t n = write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    bytes -= (size_t)n;
  }
  return 0;
}

/* <dir>/<name> holds `bytes` of data, written under a temporary name and renamed. */
static lamp_status publish(const store *s, const char *name, const char *tmp_name, const void *data, size_t bytes) {
  char tmp[PATH_MAX + 64], path[PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s/%s", s->dir, tmp_name);
  snprintf(path, sizeof path, "%s/%s", s->dir, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return io_failed(s, "cannot create", tmp);
  int bad = write_all(fd, data, bytes);
  if (close(fd) != 0) bad = 1;
  if (bad) {
    lamp_status st = io_failed(s, "cannot write", tmp);
    unlink(tmp);
    return st;
  }
  if (rename(tmp, path) == 0) return LAMP_OK;
  lamp_status st = io_failed(s, "cannot rename into", path);
  unlink(tmp);
  return st;
}

static lamp_status put(const store *s, unsigned long seq, const void *data, size_t bytes) {
  char name[64], tmp[64];
  snprintf(name, sizeof name, "%lu.%d", seq, s->rank);
  snprintf(tmp, sizeof tmp, ".%lu.%d.tmp", seq, s->rank);
  return publish(s, name, tmp, data, bytes);
}

static int read_all(int fd, void *data, size_t bytes) {
  char *p = data;
  while (bytes > 0) {
    ssize_t n = read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    bytes -= (size_t)n;
  }
  return 0;
}

/* Rank r's file of collective seq, which must hold exactly `bytes`. */
static lamp_status get(const store *s, const char *op, unsigned long seq, int r, void *data, size_t bytes) {
  char path[PATH_MAX + 64];
  file_path(s, path, sizeof path, seq, r);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return io_failed(s, "cannot open", path);
  struct stat st;
  lamp_status status = LAMP_OK;
  if (fstat(fd, &st) != 0) {
    status = io_failed(s, "cannot stat", path);
  } else if ((size_t)st.st_size != bytes) {
    status = lamp_error(LAMP_ERR_REMOTE, "bootstrap: %s %lu: rank %d sent %lld bytes, rank %d expected %zu (file store %s)",
                        op, seq, r, (long long)st.st_size, s->rank, bytes, s->dir);
  } else if (read_all(fd, data, bytes) != 0) {
    status = io_failed(s, "cannot read", path);
  }
  close(fd);
  return status;
}

/* ---- the collectives ------------------------------------------------------------------------- */

/* The ranks whose file of collective seq is not there yet (only: one rank, or -1 for all),
   listed in s->missing; how many. */
static int find_missing(store *s, unsigned long seq, int only) {
  int n = 0;
  size_t used = 0;
  s->missing[0] = '\0';
  for (int r = only < 0 ? 0 : only; r < (only < 0 ? s->size : only + 1); r++) {
    char path[PATH_MAX + 64];
    file_path(s, path, sizeof path, seq, r);
    if (access(path, F_OK) == 0) continue;
    if (used + 16 < s->missing_size) used += (size_t)snprintf(s->missing + used, s->missing_size - used, "%s%d", n ? ", " : "", r);
    n++;
  }
  return n;
}

static lamp_status await_ranks(store *s, const char *op, unsigned long seq, int only, double timeout_s) {
  double start = now_seconds(), deadline = start + timeout_s;
  for (;;) {
    int n = find_missing(s, seq, only);
    if (n == 0) return LAMP_OK;
    if (aborted())
      return lamp_error(LAMP_ERR_REMOTE,
                        "bootstrap: %s %lu interrupted after %.1f s, the run is stopping, while waiting for rank%s %s (file store %s)",
                        op, seq, now_seconds() - start, n > 1 ? "s" : "", s->missing, s->dir);
    if (now_seconds() >= deadline)
      return lamp_error(LAMP_ERR_REMOTE, "bootstrap: %s %lu timed out after %g s waiting for rank%s %s (file store %s)",
                        op, seq, timeout_s, n > 1 ? "s" : "", s->missing, s->dir);
    await_change(s->inotify, deadline);
  }
}

/* A failed call leaves the ranks at different collectives: later ones would pair wrong files. */
static lamp_status usable(const store *s, const char *op, unsigned long seq) {
  if (!s->broken) return LAMP_OK;
  return lamp_error(LAMP_ERR_REMOTE, "bootstrap: %s %lu: the file store %s failed earlier and cannot be used again",
                    op, seq, s->dir);
}

static lamp_status mark(store *s, lamp_status st) {
  if (st != LAMP_OK) s->broken = 1;
  return st;
}

static lamp_status file_broadcast(void *state, unsigned long seq, void *buf, size_t bytes, int root,
                                  double timeout_s) {
  store *s = state;
  lamp_status st = usable(s, "broadcast", seq);
  if (st != LAMP_OK) return st;
  if (s->rank == root) return mark(s, put(s, seq, buf, bytes));
  st = await_ranks(s, "broadcast", seq, root, timeout_s);
  if (st == LAMP_OK) st = get(s, "broadcast", seq, root, buf, bytes);
  return mark(s, st);
}

static lamp_status file_all_gather(void *state, unsigned long seq, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  store *s = state;
  lamp_status st = usable(s, "all_gather", seq);
  if (st == LAMP_OK) st = put(s, seq, send, bytes);
  if (st == LAMP_OK) st = await_ranks(s, "all_gather", seq, -1, timeout_s);
  for (int r = 0; st == LAMP_OK && r < s->size; r++)
    if (r != s->rank) st = get(s, "all_gather", seq, r, (char *)recv + (size_t)r * bytes, bytes);
  if (st == LAMP_OK) memmove((char *)recv + (size_t)s->rank * bytes, send, bytes);
  return mark(s, st);
}

static lamp_status file_barrier(void *state, unsigned long seq, double timeout_s) {
  store *s = state;
  lamp_status st = usable(s, "barrier", seq);
  if (st == LAMP_OK) st = put(s, seq, NULL, 0);
  if (st == LAMP_OK) st = await_ranks(s, "barrier", seq, -1, timeout_s);
  return mark(s, st);
}

/* ---- opening and closing --------------------------------------------------------------------- */

static void free_store(store *s) {
  if (s->inotify >= 0) close(s->inotify);
  free(s->missing);
  free(s);
}

/* Removes the run's folder and what is in it; a rank doing the same at once is harmless. */
static void remove_folder(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* This rank leaves; the last one out (the one that finds every left.<r>) removes the folder. */
static void file_close(void *state) {
  store *s = state;
  char name[32], tmp[32];
  snprintf(name, sizeof name, "left.%d", s->rank);
  snprintf(tmp, sizeof tmp, ".left.%d.tmp", s->rank);
  char saved[LAMP_ERROR_MAX]; /* closing after a failure must not replace its message */
  snprintf(saved, sizeof saved, "%s", lamp_last_error());
  int everyone = publish(s, name, tmp, NULL, 0) == LAMP_OK;
  if (!everyone) lamp_error(LAMP_ERR_SYSTEM, "%s", saved);
  for (int r = 0; everyone && r < s->size; r++) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/left.%d", s->dir, r);
    everyone = access(path, F_OK) == 0;
  }
  if (everyone) remove_folder(s->dir);
  free_store(s);
}

static int tag_ok(const char *tag) {
  size_t n = strlen(tag);
  if (n == 0 || n > MAX_TAG || tag[0] == '.') return 0;
  return strspn(tag, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The store's folder: a folder, and not one anyone may change unless it is sticky. */
static lamp_status check_store(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: file store folder %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: file store %s is not a folder", dir);
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "bootstrap: refusing the file store folder %s: writable by others without the sticky bit "
                      "(mode %04o), so anyone could replace a rank's files; fix with chmod o-w %s",
                      dir, (unsigned)(st.st_mode & 07777), dir);
  return LAMP_OK;
}

/* The run's folder: a real folder of ours that only we can write. */
static lamp_status check_run_folder(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0)
    return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: file store folder %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: refusing the file store folder %s: not a folder", dir);
  if (st.st_uid != geteuid())
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: refusing the file store folder %s: owned by uid %u, not this user (uid %u)",
                      dir, (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: refusing the file store folder %s: writable by others (mode %04o)",
                      dir, (unsigned)(st.st_mode & 07777));
  return LAMP_OK;
}

static lamp_status create_run_folder(const store *s) {
  if (mkdir(s->dir, 0700) == 0) return LAMP_OK;
  if (errno == EEXIST)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "bootstrap: the file store folder %s exists already: a run with the same run id failed or "
                      "is running; remove the folder, or give each run its own LAMP_RUN_ID",
                      s->dir);
  return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: cannot create the file store folder %s: %s", s->dir, strerror(errno));
}

/* The other ranks wait for rank 0 to create the folder, watching its parent. */
static lamp_status await_run_folder(const store *s, const char *parent, double timeout_s) {
  int fd = -1;
  lamp_status st = watch(parent, IN_CREATE | IN_MOVED_TO, &fd);
  double start = now_seconds(), deadline = start + timeout_s;
  while (st == LAMP_OK && access(s->dir, F_OK) != 0) {
    if (aborted())
      st = lamp_error(LAMP_ERR_REMOTE,
                      "bootstrap: open interrupted after %.1f s, the run is stopping, while waiting for rank 0 to create the file store %s",
                      now_seconds() - start, s->dir);
    else if (now_seconds() >= deadline)
      st = lamp_error(LAMP_ERR_REMOTE, "bootstrap: open timed out after %g s waiting for rank 0 to create the file store %s",
                      timeout_s, s->dir);
    else
      await_change(fd, deadline);
  }
  if (fd >= 0) close(fd);
  return st;
}

static lamp_status join(store *s, const char *parent, double timeout_s) {
  lamp_status st = s->rank == 0 ? create_run_folder(s) : await_run_folder(s, parent, timeout_s);
  if (st == LAMP_OK) st = check_run_folder(s->dir);
  if (st == LAMP_OK) st = watch(s->dir, IN_MOVED_TO | IN_CREATE, &s->inotify);
  return st;
}

lamp_status lamp_boot_file_open(lamp_boot_transport *t, const char *dir, const char *tag, int rank, int size,
                                double timeout_s) {
  if (dir == NULL || tag == NULL || size < 1 || rank < 0 || rank >= size)
    return lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: file store: rank %d of %d%s", rank, size,
                      dir == NULL || tag == NULL ? " without a folder or tag" : "");
  if (!tag_ok(tag))
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "bootstrap: run id '%s' must be 1 to %d letters, digits, '.', '_' or '-', not starting with '.'",
                      tag, MAX_TAG);
  lamp_status st = check_store(dir);
  if (st != LAMP_OK) return st;
  store *s = calloc(1, sizeof *s);
  if (s != NULL) {
    s->missing_size = 256;
    s->missing = malloc(s->missing_size);
  }
  if (s == NULL || s->missing == NULL) {
    if (s != NULL) free(s);
    return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: out of memory");
  }
  s->inotify = -1;
  s->rank = rank;
  s->size = size;
  if ((size_t)snprintf(s->dir, sizeof s->dir, "%s/%s", dir, tag) >= sizeof s->dir) {
    free_store(s);
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: file store path %s/%s is too long", dir, tag);
  }
  st = join(s, dir, timeout_s);
  if (st != LAMP_OK) {
    free_store(s);
    return st;
  }
  snprintf(t->name, sizeof t->name, "file store %s", s->dir);
  t->rank = rank;
  t->size = size;
  t->state = s;
  t->broadcast = file_broadcast;
  t->all_gather = file_all_gather;
  t->barrier = file_barrier;
  t->close = file_close;
  return LAMP_OK;
}
