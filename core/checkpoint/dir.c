/*
** A folder of checkpoints, <dir>/ckpt-<step>.lamp: saving with a retention count, and finding
** the newest complete one to resume from. Completeness comes from the atomic rename (a file
** under its final name was fully written and synced) and is confirmed by validation, so a
** *.tmp left by a killed save or a file damaged later is never picked.
**
** Two more files live beside the checkpoints:
**   lamp.lock   the writers' lock (flock): held for a whole save and its pruning, it holds the
**               holder's pid for the message that refuses a second writer. The kernel drops the
**               lock when its process dies, so a crashed writer never blocks the next one.
**   lamp.owner  "run <16 hex digits>": the run whose checkpoints these are. A run saves and prunes
**               only in a folder it owns (see lamp_ckpt_save_run). A folder without it (written by
**               an older lamp) is owned by an id derived from the folder itself, which a run that
**               resumes from the folder adopts.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/reader_internal.h"

#define WHO "checkpoint"
#define LOCK_NAME "lamp.lock"
#define OWNER_NAME "lamp.owner"
#define ASIDE_PREFIX "previous-"
#define PATH_CAP 4400

typedef struct candidate {
  uint64_t step;
  int is_tmp;
  char name[256];
} candidate;

lamp_status lamp_ckpt_dir_path(char *out, size_t size, const char *dir, uint64_t step) {
  if (out == NULL || dir == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL folder or output");
  int n = snprintf(out, size, "%s/ckpt-%08llu.lamp", dir, (unsigned long long)step);
  if (n < 0 || (size_t)n >= size)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: path in folder %s is longer than %zu characters", dir, size);
  return LAMP_OK;
}

/* "ckpt-<digits>.lamp" or the same with ".tmp": 1, with the step; anything else: 0. */
static int parse_name(const char *name, uint64_t *step, int *is_tmp) {
  if (strncmp(name, "ckpt-", 5) != 0) return 0;
  const char *p = name + 5;
  uint64_t v = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9'; p++, digits++) {
    if (digits == 19) return 0; /* beyond any step count; also keeps v from overflowing */
    v = v * 10 + (uint64_t)(*p - '0');
  }
  if (digits == 0) return 0;
  if (strcmp(p, ".lamp") == 0) *is_tmp = 0;
  else if (strcmp(p, ".lamp.tmp") == 0) *is_tmp = 1;
  else return 0;
  *step = v;
  return 1;
}

static int by_step(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The checkpoint-like names of dir, sorted by step; *items is malloc'ed. ENOENT sets *missing. */
static lamp_status list_dir(const char *dir, candidate **items, size_t *n, int *missing) {
  *items = NULL;
  *n = 0;
  *missing = 0;
  DIR *d = opendir(dir);
  if (d == NULL) {
    if (errno == ENOENT) {
      *missing = 1;
      return LAMP_OK;
    }
    return lamp_error(errno == EACCES || errno == ENOTDIR ? LAMP_ERR_INVALID_USAGE : LAMP_ERR_SYSTEM,
                      "cannot open folder %s: %s", dir, strerror(errno));
  }
  size_t cap = 0;
  struct dirent *ent;
  lamp_status st = LAMP_OK;
  while ((ent = readdir(d)) != NULL) {
    candidate c;
    if (strlen(ent->d_name) >= sizeof c.name || !parse_name(ent->d_name, &c.step, &c.is_tmp)) continue;
    snprintf(c.name, sizeof c.name, "%s", ent->d_name);
    if (*n == cap) {
      size_t next = cap ? cap * 2 : 16;
      candidate *p = realloc(*items, next * sizeof *p);
      if (p == NULL) {
        st = lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory listing checkpoints", dir);
        break;
      }
      *items = p;
      cap = next;
    }
    (*items)[(*n)++] = c;
  }
  closedir(d);
  if (st != LAMP_OK) {
    free(*items);
    *items = NULL;
    *n = 0;
    return st;
  }
  if (*n) qsort(*items, *n, sizeof **items, by_step);
  return LAMP_OK;
}

static void join(char *out, size_t size, const char *dir, const char *name) { snprintf(out, size, "%s/%s", dir, name); }

/* mkdir -p */
static lamp_status make_folder(const char *dir) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: folder name %s is too long", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot create folder %s: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot create folder %s: %s", buf, strerror(errno));
  return LAMP_OK;
}

/* ---- the writers' lock --------------------------------------------------------------------- */

/* The pid a lock holder wrote into the lock file; 0 when there is none yet. */
static long holder_pid(int fd) {
  char text[32] = "";
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  long pid = 0;
  if (n > 0) {
    text[n] = '\0';
    if (sscanf(text, "pid %ld", &pid) != 1 || pid <= 0) pid = 0;
  }
  return pid;
}

static lamp_status refuse_second_writer(const char *dir, const char *path, int fd) {
  long pid = holder_pid(fd);
  if (pid == (long)getpid())
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "cannot write checkpoints into %s: this process (pid %ld) is already writing there (it holds %s)",
                      dir, pid, path);
  if (pid > 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "cannot write checkpoints into %s: process %ld is writing there (it holds %s)", dir, pid, path);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot write checkpoints into %s: another process is writing there (it holds %s)",
                    dir, path);
}

/* Takes dir's lock (the folder exists) and writes this process's pid into it; *fd holds it. */
static lamp_status lock_folder(const char *dir, int *fd) {
  char path[PATH_CAP];
  join(path, sizeof path, dir, LOCK_NAME);
  lamp_status st = ckpt_open_regular(path, O_RDWR | O_CREAT, fd, NULL);
  if (st != LAMP_OK) return st;
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      st = refuse_second_writer(dir, path, *fd);
      close(*fd);
      *fd = -1;
      return st;
    }
    /* A filesystem without flock: checkpoints without the protection rather than none. */
    lamp_log(LAMP_LOG_WARN, WHO, "cannot lock %s (%s): a second writer into %s would not be refused", path,
             strerror(errno), dir);
    return LAMP_OK;
  }
  char text[32];
  int len = snprintf(text, sizeof text, "pid %ld\n", (long)getpid());
  if (ftruncate(*fd, 0) != 0 || pwrite(*fd, text, (size_t)len, 0) != len)
    lamp_log(LAMP_LOG_DEBUG, WHO, "cannot write the pid into %s: %s", path, strerror(errno));
  return LAMP_OK;
}

/* Closing drops the flock. The file stays: removing it would let a writer that opened it a
   moment ago lock an orphan while a third one creates and locks a new file. */
static void unlock_folder(int fd) {
  if (fd >= 0) close(fd);
}

/* ---- the owning run ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* A new run's id: never 0 (which means "none yet"). */
static uint64_t draw_run_id(void) {
  static uint64_t counter;
  uint64_t seed = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &seed, sizeof seed) != (ssize_t)sizeof seed) seed = 0;
    close(fd);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t id = mix64(seed ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^ ++counter);
  return id ? id : 1;
}

/* The owner of a folder without lamp.owner: the same id for everyone who asks while the folder
   exists, so that a run resuming from it may go on saving into it. */
static lamp_status implicit_owner(const char *dir, uint64_t *id) {
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    *id = 0;
    if (errno == ENOENT) return LAMP_OK;
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot stat folder %s: %s", dir, strerror(errno));
  }
  *id = mix64(mix64((uint64_t)sb.st_dev) ^ (uint64_t)sb.st_ino) | 1;
  return LAMP_OK;
}

/* lamp.owner's id; *present = 0 when the file is missing or unreadable (then the implicit one). */
static lamp_status folder_owner(const char *dir, uint64_t *id, int *present) {
  char path[PATH_CAP];
  join(path, sizeof path, dir, OWNER_NAME);
  *present = 0;
  int fd;
  struct stat sb;
  if (stat(path, &sb) == 0 && ckpt_open_regular(path, O_RDONLY, &fd, NULL) == LAMP_OK) {
    char text[64] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unsigned long long v = 0;
    if (n > 0 && sscanf(text, "run %16llx", &v) == 1 && v != 0) {
      *id = v;
      *present = 1;
      return LAMP_OK;
    }
    lamp_log(LAMP_LOG_WARN, WHO, "ignoring %s: it does not hold \"run <16 hex digits>\"", path);
  }
  lamp_error_clear();
  return implicit_owner(dir, id);
}

static lamp_status write_owner(const char *dir, uint64_t id) {
  char path[PATH_CAP], text[32];
  join(path, sizeof path, dir, OWNER_NAME);
  int len = snprintf(text, sizeof text, "run %016llx\n", (unsigned long long)id);
  ckpt_atomic_file f;
  lamp_status st = ckpt_atomic_open(&f, path);
  if (st == LAMP_OK) st = ckpt_atomic_write(&f, text, (size_t)len);
  if (st == LAMP_OK) st = ckpt_atomic_commit(&f);
  return st;
}

lamp_status lamp_ckpt_dir_owner(const char *dir, uint64_t *run_id) {
  if (dir == NULL || run_id == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL folder or output");
  int present;
  return folder_owner(dir, run_id, &present);
}

/* ---- what a folder holds ------------------------------------------------------------------ */

/* Complete = under a final name, with a valid preamble and header checksum. */
static int is_complete(const char *dir, const candidate *c) {
  char path[PATH_CAP];
  join(path, sizeof path, dir, c->name);
  return !c->is_tmp && ckpt_quick_check(path) == LAMP_OK;
}

/* How many complete checkpoints the listing holds, and the newest one's step. */
static size_t count_complete(const char *dir, const candidate *items, size_t n, uint64_t *newest) {
  size_t count = 0;
  for (size_t i = n; i-- > 0;) {
    if (!is_complete(dir, &items[i])) continue;
    if (count++ == 0) *newest = items[i].step;
  }
  lamp_error_clear();
  return count;
}

/* A new dir/previous-<k>, the first k free. */
static lamp_status make_aside_folder(const char *dir, char *aside, size_t size) {
  for (int k = 1; k < 1000000; k++) {
    snprintf(aside, size, "%s/" ASIDE_PREFIX "%d", dir, k);
    if (mkdir(aside, 0755) == 0) return LAMP_OK;
    if (errno != EEXIST) return lamp_error(LAMP_ERR_SYSTEM, "cannot create folder %s: %s", aside, strerror(errno));
  }
  return lamp_error(LAMP_ERR_SYSTEM, "%s: no free name for a folder " ASIDE_PREFIX "<n>", dir);
}

static lamp_status move_into(const char *dir, const char *aside, const char *name, int missing_ok) {
  char from[PATH_CAP], to[PATH_CAP + 256];
  join(from, sizeof from, dir, name);
  join(to, sizeof to, aside, name);
  if (rename(from, to) == 0 || (missing_ok && errno == ENOENT)) return LAMP_OK;
  return lamp_error(LAMP_ERR_SYSTEM, "cannot move %s into %s: %s", from, aside, strerror(errno));
}

/* Starting over: every checkpoint of dir (complete, damaged or unfinished) and its owner file
   move into a new dir/previous-<k>. Nothing is deleted, and that folder can be resumed from. */
static lamp_status set_aside(const char *dir, const candidate *items, size_t n, uint64_t newest, size_t complete) {
  char aside[PATH_CAP];
  lamp_status st = make_aside_folder(dir, aside, sizeof aside);
  for (size_t i = n; st == LAMP_OK && i-- > 0;) st = move_into(dir, aside, items[i].name, 0);
  if (st == LAMP_OK) st = move_into(dir, aside, OWNER_NAME, 1);
  if (st == LAMP_OK) st = ckpt_sync_folder(aside);
  if (st == LAMP_OK) st = ckpt_sync_folder(dir);
  if (st != LAMP_OK) return lamp_error_context(st, "starting over in %s", dir);
  lamp_log(LAMP_LOG_INFO, WHO, "starting over in %s: moved its %zu checkpoint file%s (%zu complete, newest: step %llu) into %s",
           dir, n, n == 1 ? "" : "s", complete, (unsigned long long)newest, aside);
  return LAMP_OK;
}

/* ---- pruning ------------------------------------------------------------------------------- */

/* Removes all but the `keep` newest complete checkpoints; the caller holds the lock. */
static lamp_status prune_locked(const char *dir, int keep) {
  if (keep <= 0) return LAMP_OK;
  candidate *items;
  size_t n;
  int missing;
  lamp_status st = list_dir(dir, &items, &n, &missing);
  if (st != LAMP_OK || missing) return st;
  /* Newest first: the first `keep` complete ones stay; every older complete one goes. */
  char *doomed = calloc(n ? n : 1, 1);
  if (doomed == NULL) {
    free(items);
    return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory", dir);
  }
  int kept = 0;
  char path[PATH_CAP];
  for (size_t i = n; i-- > 0;) {
    if (items[i].is_tmp) continue;
    join(path, sizeof path, dir, items[i].name);
    if (ckpt_quick_check(path) != LAMP_OK) {
      lamp_log(LAMP_LOG_WARN, WHO, "not counting or removing %s", lamp_last_error()); /* the message names path */
      continue;
    }
    if (kept < keep) kept++;
    else doomed[i] = 1;
  }
  for (size_t i = 0; i < n; i++) { /* oldest first */
    if (!doomed[i]) continue;
    join(path, sizeof path, dir, items[i].name);
    if (unlink(path) != 0) {
      st = lamp_error(LAMP_ERR_SYSTEM, "cannot remove old checkpoint %s: %s", path, strerror(errno));
      break;
    }
    lamp_log(LAMP_LOG_DEBUG, WHO, "removed %s (keeping the %d newest)", path, keep);
  }
  free(doomed);
  free(items);
  return st;
}

lamp_status lamp_ckpt_prune(const char *dir, int keep) {
  if (dir == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: folder is NULL");
  if (keep <= 0) return LAMP_OK;
  struct stat sb;
  if (stat(dir, &sb) != 0 && errno == ENOENT) return LAMP_OK; /* nothing to prune, and no lock file to leave */
  int fd;
  lamp_status st = lock_folder(dir, &fd);
  if (st == LAMP_OK) st = prune_locked(dir, keep);
  unlock_folder(fd);
  return st;
}

/* ---- saving -------------------------------------------------------------------------------- */

/* The checkpoint is written; then older ones go. The new one is safe on disk by then, so a
   failure to tidy up must not hide that. */
static lamp_status write_then_prune(lamp_ckpt_writer *w, const char *dir, const char *path, int keep) {
  lamp_status st = lamp_ckpt_write_atomic(w, path);
  if (st != LAMP_OK) return st;
  if (prune_locked(dir, keep) != LAMP_OK)
    lamp_log(LAMP_LOG_WARN, WHO, "saved %s, but removing older checkpoints failed: %s", path, lamp_last_error());
  return LAMP_OK;
}

static lamp_status copy_out(char *out, size_t size, const char *path) {
  if (out != NULL && size > 0) snprintf(out, size, "%s", path);
  return LAMP_OK;
}

lamp_status lamp_ckpt_save_dir(lamp_ckpt_writer *w, const char *dir, uint64_t step, int keep, char *path_out,
                               size_t path_size) {
  char path[4096];
  int fd = -1;
  lamp_status st = lamp_ckpt_dir_path(path, sizeof path, dir, step);
  if (st == LAMP_OK) st = make_folder(dir);
  if (st == LAMP_OK) st = lock_folder(dir, &fd);
  if (st == LAMP_OK) st = write_then_prune(w, dir, path, keep);
  unlock_folder(fd);
  return st == LAMP_OK ? copy_out(path_out, path_size, path) : st;
}

/* Whether run may write into dir (the caller holds the lock): it owns the folder, or the folder
   holds no complete checkpoint, or it starts over (the others move aside). */
static lamp_status claim(const char *dir, lamp_ckpt_run *run) {
  candidate *items;
  size_t n;
  int missing, present;
  uint64_t owner, newest = 0;
  lamp_status st = list_dir(dir, &items, &n, &missing);
  if (st == LAMP_OK) st = folder_owner(dir, &owner, &present);
  if (st != LAMP_OK) {
    free(items);
    return st;
  }
  if (run->id == 0) run->id = draw_run_id();
  size_t complete = count_complete(dir, items, n, &newest);
  if (owner != run->id && run->start_over && n > 0) st = set_aside(dir, items, n, newest, complete);
  else if (owner != run->id && complete > 0)
    st = lamp_error(LAMP_ERR_INVALID_USAGE,
                    "cannot save into %s: it holds checkpoints of another run (newest: step %llu); resume from it, "
                    "or start over (start_over: its checkpoints move into %s/" ASIDE_PREFIX "<n>)",
                    dir, (unsigned long long)newest, dir);
  free(items);
  if (st == LAMP_OK && (owner != run->id || !present)) st = write_owner(dir, run->id);
  return st;
}

lamp_status lamp_ckpt_save_run(lamp_ckpt_writer *w, const char *dir, uint64_t step, lamp_ckpt_run *run, char *path_out,
                               size_t path_size) {
  if (run == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: the run is NULL");
  char path[4096];
  int fd = -1;
  lamp_status st = lamp_ckpt_dir_path(path, sizeof path, dir, step);
  if (st == LAMP_OK) st = make_folder(dir);
  if (st == LAMP_OK) st = lock_folder(dir, &fd);
  if (st == LAMP_OK) st = claim(dir, run);
  if (st == LAMP_OK) st = write_then_prune(w, dir, path, run->keep);
  unlock_folder(fd);
  return st == LAMP_OK ? copy_out(path_out, path_size, path) : st;
}

/* ---- the newest complete checkpoint ----------------------------------------------------------- */

/* The reasons damaged files were skipped, for the message that refuses a folder of nothing else. */
typedef struct skip_list {
  size_t count;
  size_t used;
  size_t listed;
  char text[LAMP_ERROR_MAX - 400];
} skip_list;

static void note_skipped(skip_list *s, const char *reason) {
  s->count++;
  size_t len = strlen(reason);
  if (s->used + len + 4 >= sizeof s->text) return; /* the log has every one of them */
  s->used += (size_t)snprintf(s->text + s->used, sizeof s->text - s->used, "\n  %s", reason);
  s->listed++;
}

static lamp_status refuse_all_damaged(const char *dir, const skip_list *s) {
  char more[96] = "";
  if (s->listed < s->count)
    snprintf(more, sizeof more, "\n  ... and %zu more (each is named in the log)", s->count - s->listed);
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "cannot resume from %s: its %zu checkpoint%s %s damaged (move %s away to start afresh):%s%s", dir,
                    s->count, s->count == 1 ? "" : "s", s->count == 1 ? "is" : "are all", s->count == 1 ? "it" : "them",
                    s->text, more);
}

lamp_status lamp_ckpt_latest(const char *dir, char *path_out, size_t path_size, uint64_t *step, int *found) {
  if (dir == NULL || found == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: NULL folder or output");
  *found = 0;
  candidate *items;
  size_t n;
  int missing;
  lamp_status st = list_dir(dir, &items, &n, &missing);
  if (st != LAMP_OK) return st;
  if (missing) {
    lamp_log(LAMP_LOG_INFO, WHO, "no checkpoint in %s: the folder does not exist", dir);
    return LAMP_OK;
  }
  char path[PATH_CAP];
  skip_list skipped = {0};
  for (size_t i = n; i-- > 0 && !*found;) {
    join(path, sizeof path, dir, items[i].name);
    if (items[i].is_tmp) {
      lamp_log(LAMP_LOG_INFO, WHO, "ignoring %s: an unfinished save (never renamed into place)", path);
      continue;
    }
    lamp_ckpt *c;
    if (lamp_ckpt_open(&c, path) != LAMP_OK) {
      lamp_log(LAMP_LOG_WARN, WHO, "skipping %s", lamp_last_error()); /* the message names path */
      note_skipped(&skipped, lamp_last_error());
      continue;
    }
    lamp_ckpt_close(c);
    if (path_out != NULL && (size_t)snprintf(path_out, path_size, "%s", path) >= path_size) {
      st = lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: %s does not fit the %zu-byte output", path, path_size);
      break;
    }
    if (step != NULL) *step = items[i].step;
    *found = 1;
  }
  free(items);
  if (st != LAMP_OK) return st;
  /* Damaged files and nothing else: starting afresh would bury them under a new run. */
  if (!*found && skipped.count > 0) return refuse_all_damaged(dir, &skipped);
  if (!*found) lamp_log(LAMP_LOG_INFO, WHO, "no complete checkpoint in %s", dir);
  lamp_error_clear();
  return LAMP_OK;
}
