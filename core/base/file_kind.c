#include "base/file_kind.h"

#include <sys/stat.h>

#include "base/error.h"

const char *lamp_file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return NULL;
}

lamp_status lamp_error_not_regular(const char *path, mode_t mode) {
  const char *kind = lamp_file_kind(mode);
  if (kind == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is not a regular file", path);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s is %s, not a regular file", path, kind);
}
