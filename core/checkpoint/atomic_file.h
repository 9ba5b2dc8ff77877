/*
** Replacing a file so that a crash at any moment leaves either the old file or the complete
** new one: write "path.tmp", fsync it, rename it over path, fsync the folder (without that
** last step the rename itself may be lost on power failure). Any failure removes the .tmp.
** The .tmp is held under an advisory lock while it is written, so a second writer of the same
** path is refused instead of truncating the first one's bytes.
*/
#ifndef LAMP_CHECKPOINT_ATOMIC_FILE_H
#define LAMP_CHECKPOINT_ATOMIC_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "lamp/abi.h"

typedef struct ckpt_atomic_file {
  int fd;
  char path[4096];
  char tmp[4096 + 8];
} ckpt_atomic_file;

/* Creates path.tmp (or takes over one a dead writer left) and empties it. */
lamp_status ckpt_atomic_open(ckpt_atomic_file *f, const char *path);
/* Writes all n bytes, retrying short writes and EINTR. On failure the .tmp is removed. */
lamp_status ckpt_atomic_write(ckpt_atomic_file *f, const void *data, size_t n);
/* fsync, close, rename, fsync the folder. On failure the .tmp is removed. */
lamp_status ckpt_atomic_commit(ckpt_atomic_file *f);
/* Closes and removes the .tmp (after an error elsewhere); keeps the current error message. */
void ckpt_atomic_abort(ckpt_atomic_file *f);

/*
** Opens path (flags as for open(2)) without ever blocking on a FIFO or a device, and refuses
** anything that is not a regular file, naming what it is: "<path> is a FIFO, not a regular
** file". On success *fd is open in blocking mode; sb (when not NULL) receives its fstat.
*/
lamp_status ckpt_open_regular(const char *path, int flags, int *fd, struct stat *sb);

/* Makes renames inside dir durable; filesystems that cannot fsync a folder are fine. */
lamp_status ckpt_sync_folder(const char *dir);

#endif
