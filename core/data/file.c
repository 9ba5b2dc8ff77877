#include "data/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file_kind.h"

/* read() takes a size_t but may return less than asked above SSIZE_MAX: stay well below. */
#define MAX_READ ((size_t)1 << 30)

/* open() failed with errnum: a socket (ENXIO) is named as such, anything else by its reason. */
static lamp_status open_failure(const char *path, const char *hint, int errnum) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return lamp_error_not_regular(path, sb.st_mode);
  int user = errnum == ENOENT || errnum == ENOTDIR || errnum == EACCES;
  return lamp_error(user ? LAMP_ERR_INVALID_USAGE : LAMP_ERR_SYSTEM, "cannot open %s: %s%s", path, strerror(errnum),
                    errnum == ENOENT && hint != NULL ? hint : "");
}

/* fd is a regular file: now make its reads blocking again and report its size. */
static lamp_status check_descriptor(const char *path, int fd, uint64_t *size) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return lamp_error(LAMP_ERR_SYSTEM, "cannot stat %s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return lamp_error_not_regular(path, sb.st_mode);
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return lamp_error(LAMP_ERR_SYSTEM, "cannot set %s to blocking reads: %s", path, strerror(errno));
  *size = (uint64_t)sb.st_size;
  return LAMP_OK;
}

lamp_status lamp_data_open(const char *path, const char *hint, int *fd, uint64_t *size) {
  *fd = -1;
  *size = 0;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f < 0) return open_failure(path, hint, errno);
  lamp_status st = check_descriptor(path, f, size);
  if (st != LAMP_OK) {
    close(f);
    return st;
  }
  *fd = f;
  return LAMP_OK;
}

lamp_status lamp_data_read(const char *path, int fd, void *buf, size_t len, size_t *got) {
  *got = 0;
  while (*got < len) {
    size_t want = len - *got < MAX_READ ? len - *got : MAX_READ;
    ssize_t n = read(fd, (char *)buf + *got, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return lamp_error(LAMP_ERR_SYSTEM, "%s: read error: %s", path, strerror(errno));
    if (n == 0) break;
    *got += (size_t)n;
  }
  return LAMP_OK;
}
