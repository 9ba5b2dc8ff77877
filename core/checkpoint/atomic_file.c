#include "checkpoint/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

lamp_status ckpt_atomic_open(ckpt_atomic_file *f, const char *path) {
  f->fd = -1;
  if (path == NULL || path[0] == '\0') return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: the path is empty");
  if (strlen(path) >= sizeof f->path)
    return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: path of %zu characters is too long", strlen(path));
  snprintf(f->path, sizeof f->path, "%s", path);
  snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0)
    return lamp_error(errno == ENOENT || errno == EACCES ? LAMP_ERR_INVALID_USAGE : LAMP_ERR_SYSTEM,
                      "cannot create %s: %s", f->tmp, strerror(errno));
  return LAMP_OK;
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

/* Makes the rename durable. Filesystems that cannot fsync a folder say EINVAL: nothing to do. */
static lamp_status sync_folder(const char *path) {
  char buf[4096];
  const char *dir = folder_of(path, buf, sizeof buf);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return lamp_error(LAMP_ERR_SYSTEM, "%s: cannot open its folder %s to sync it: %s", path, dir, strerror(errno));
  int rc = fsync(fd);
  int errnum = errno;
  close(fd);
  if (rc != 0 && errnum != EINVAL && errnum != EROFS)
    return lamp_error(LAMP_ERR_SYSTEM, "%s: fsync of the folder %s failed: %s (the checkpoint is complete but may not "
                                       "survive a power loss)", path, dir, strerror(errnum));
  return LAMP_OK;
}

lamp_status ckpt_atomic_commit(ckpt_atomic_file *f) {
  if (fsync(f->fd) != 0) return fail(f, "fsync", errno);
  int rc = close(f->fd);
  f->fd = -1;
  if (rc != 0) return fail(f, "close", errno);
  if (rename(f->tmp, f->path) != 0) {
    int errnum = errno;
    lamp_error(LAMP_ERR_SYSTEM, "cannot rename %s to %s: %s (the partial file was removed; %s is untouched)", f->tmp,
               f->path, strerror(errnum), f->path);
    unlink(f->tmp);
    return LAMP_ERR_SYSTEM;
  }
  return sync_folder(f->path);
}

void ckpt_atomic_abort(ckpt_atomic_file *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  unlink(f->tmp);
}
