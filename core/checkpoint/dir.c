/*
** A folder of checkpoints, <dir>/ckpt-<step>.lamp: saving with a retention count, and finding
** the newest complete one to resume from. Completeness comes from the atomic rename (a file
** under its final name was fully written and synced) and is confirmed by validation, so a
** *.tmp left by a killed save or a file damaged later is never picked.
*/
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/reader_internal.h"

#define WHO "checkpoint"

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

lamp_status lamp_ckpt_prune(const char *dir, int keep) {
  if (dir == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: folder is NULL");
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
  char path[4400];
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

lamp_status lamp_ckpt_save_dir(lamp_ckpt_writer *w, const char *dir, uint64_t step, int keep, char *path_out,
                               size_t path_size) {
  char path[4096];
  lamp_status st = lamp_ckpt_dir_path(path, sizeof path, dir, step);
  if (st == LAMP_OK) st = make_folder(dir);
  if (st == LAMP_OK) st = lamp_ckpt_write_atomic(w, path);
  if (st != LAMP_OK) return st;
  if (path_out != NULL && path_size > 0) snprintf(path_out, path_size, "%s", path);
  /* The new checkpoint is safe on disk; a failure to tidy up older ones must not hide that. */
  if (lamp_ckpt_prune(dir, keep) != LAMP_OK)
    lamp_log(LAMP_LOG_WARN, WHO, "saved %s, but removing older checkpoints failed: %s", path, lamp_last_error());
  return LAMP_OK;
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
    lamp_log(LAMP_LOG_INFO, WHO, "no checkpoint to resume: folder %s does not exist", dir);
    return LAMP_OK;
  }
  char path[4400];
  size_t skipped = 0;
  for (size_t i = n; i-- > 0 && !*found;) {
    join(path, sizeof path, dir, items[i].name);
    if (items[i].is_tmp) {
      lamp_log(LAMP_LOG_INFO, WHO, "ignoring %s: an unfinished save (never renamed into place)", path);
      continue;
    }
    lamp_ckpt *c;
    if (lamp_ckpt_open(&c, path) != LAMP_OK) {
      lamp_log(LAMP_LOG_WARN, WHO, "skipping %s", lamp_last_error()); /* the message names path */
      skipped++;
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
  if (st == LAMP_OK && !*found)
    lamp_log(skipped ? LAMP_LOG_WARN : LAMP_LOG_INFO, WHO, "no complete checkpoint in %s (%zu damaged file%s skipped)",
             dir, skipped, skipped == 1 ? "" : "s");
  if (st == LAMP_OK) lamp_error_clear();
  return st;
}
