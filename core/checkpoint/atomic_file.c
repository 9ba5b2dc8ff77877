#include "checkpoint/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file_kind.h"

/* open() failed with errnum. A socket fails with ENXIO and a FIFO opened for writing without a
   reader too: those are named by what they are, anything else by its reason. */
static lamp_status open_failure(const char *path, int flags, int errnum) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return lamp_error_not_regular(path, sb.st_mode);
  int user = errnum == ENOENT || errnum == ENOTDIR || errnum == EACCES || errnum == EROFS || errnum == EISDIR;
  return lamp_error(user ? LAMP_ERR_INVALID_USAGE : LAMP_ERR_SYSTEM, "cannot %s %s: %s",
                    flags & O_CREAT ? "create" : "open", path, strerror(errnum));
}

lamp_status ckpt_open_regular(const char *path, int flags, int *fd, struct stat *sb) {
  *fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
  if (*fd < 0) return open_failure(path, flags, errno);
  struct stat own;
  if (sb == NULL) sb = &own;
  lamp_status st = LAMP_OK;
  int mode_flags;
  if (fstat(*fd, sb) != 0) st = lamp_error(LAMP_ERR_SYSTEM, "cannot stat %s: %s", path, strerror(errno));
  else if (!S_ISREG(sb->st_mode)) st = lamp_error_not_regular(path, sb->st_mode);
  else if ((mode_flags = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, mode_flags & ~O_NONBLOCK) != 0)
    st = lamp_error(LAMP_ERR_SYSTEM, "cannot make %s blocking: %s", path, strerror(errno));
  if (st != LAMP_OK) {
    close(*fd);
    *fd = -1;
  }
  return st;
}

/* The .tmp is locked before it is emptied: a second writer of the same path must not cut the
   first one's bytes (its rename would then put a truncated file under the final name). A
   filesystem without flock gets no such protection rather than no checkpoints. */
static lamp_status lock_tmp(ckpt_atomic_file *f) {
  if (flock(f->fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) return LAMP_OK;
  close(f->fd);
  f->fd = -1;
  return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot write %s: another writer is writing it now (it holds %s)",
                    f->path, f->tmp);
}

lamp_status ckpt_atomic_open(ckpt_atomic_file *f, const char *path) {
  f->fd = -1;
  if (path == NULL || path[0] == '\0') return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: the path is empty");
  if (strlen(path) >= sizeof f->path)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: path of %zu characters is too long", strlen(path));
  snprintf(f->path, sizeof f->path, "%s", path);
  snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
  lamp_status st = ckpt_open_regular(f->tmp, O_WRONLY | O_CREAT, &f->fd, NULL);
  if (st == LAMP_OK) st = lock_tmp(f);
  if (st == LAMP_OK && ftruncate(f->fd, 0) != 0) {
    lamp_error(LAMP_ERR_SYSTEM, "cannot empty %s: %s", f->tmp, strerror(errno));
    close(f->fd);
    f->fd = -1;
    return LAMP_ERR_SYSTEM;
  }
  return st;
}

/* Reports errnum for the step `what`, removes the .tmp and returns LAMP_ERR_SYSTEM. */
static lamp_status fail(ckpt_atomic_file *f, const char *what, int errnum) {
  lamp_error(LAMP_ERR_SYSTEM, "%s: %s failed: %s (the partial file was removed; %s is untouched)", f->tmp, what,
             strerror(errnum), f->path);
  ckpt_atomic_abort(f);
  return LAMP_ERR_SYSTEM;
}

lamp_status ckpt_atomic_write(ckpt_atomic_file *f, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    ssize_t done = write(f->fd, p, chunk);
    if (done < 0) {
      if (errno == EINTR) continue;
      return fail(f, "write", errno);
    }
    if (done == 0) return fail(f, "write", EIO);
    p += done;
    n -= (size_t)done;
  }
  return LAMP_OK;
}

/* The folder holding path ("." for a bare name), into buf. */
static const char *folder_of(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) return ".";
  if (slash == path) return "/";
  snprintf(buf, size, "%.*s", (int)(slash - path), path);
  return buf;
}

lamp_status ckpt_sync_folder(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return lamp_error(LAMP_ERR_SYSTEM, "cannot open the folder %s to sync it: %s", dir, strerror(errno));
  int rc = fsync(fd);
  int errnum = errno;
  close(fd);
  /* Filesystems that cannot fsync a folder say EINVAL (or EROFS): nothing to do there. */
  if (rc != 0 && errnum != EINVAL && errnum != EROFS)
    return lamp_error(LAMP_ERR_SYSTEM, "fsync of the folder %s failed: %s", dir, strerror(errnum));
  return LAMP_OK;
}

/* Makes the rename durable. */
static lamp_status sync_folder_of(const char *path) {
  char buf[4096];
  if (ckpt_sync_folder(folder_of(path, buf, sizeof buf)) == LAMP_OK) return LAMP_OK;
  return lamp_error_context(LAMP_ERR_SYSTEM, "%s is complete but may not survive a power loss", path);
}

lamp_status ckpt_atomic_commit(ckpt_atomic_file *f) {
  if (fsync(f->fd) != 0) return fail(f, "fsync", errno);
  if (rename(f->tmp, f->path) != 0) { /* renamed while still open and locked: no writer slips in */
    int errnum = errno;
    lamp_error(LAMP_ERR_SYSTEM, "cannot rename %s to %s: %s (the partial file was removed; %s is untouched)", f->tmp,
               f->path, strerror(errnum), f->path);
    ckpt_atomic_abort(f);
    return LAMP_ERR_SYSTEM;
  }
  int rc = close(f->fd);
  f->fd = -1;
  if (rc != 0)
    return lamp_error(LAMP_ERR_SYSTEM, "closing %s failed after it was written and synced: %s", f->path, strerror(errno));
  return sync_folder_of(f->path);
}

void ckpt_atomic_abort(ckpt_atomic_file *f) {
  if (f->fd < 0) return; /* never opened (or refused): the .tmp is not this writer's */
  unlink(f->tmp);        /* while the lock is still held, so no other writer's .tmp is removed */
  close(f->fd);
  f->fd = -1;
}
