/*
** Opening a data file. Readers take only regular files: a FIFO would block the first read
** forever, a directory or a device is never a data set. The check itself must not block, so
** the file is opened non-blocking (opening a FIFO for reading otherwise waits for a writer) and
** its descriptor, not its path, is examined, leaving no window for a swap in between.
*/
#ifndef LAMP_DATA_FILE_H
#define LAMP_DATA_FILE_H

#include <stdint.h>

#include "lamp/abi.h"

/*
** Opens path for reading (blocking reads, close-on-exec) into *fd and its size into *size.
** Anything but a regular file is refused, e.g. "<path> is a FIFO, not a regular file";
** a file that cannot be opened is "cannot open <path>: <reason><hint>", where hint (or "")
** is appended only when the file does not exist. On failure *fd is -1.
*/
lamp_status lamp_data_open(const char *path, const char *hint, int *fd, uint64_t *size);

/*
** Reads up to len bytes from fd into buf, retrying short reads and interruptions; *got < len
** only at the end of the file. A read error names path.
*/
lamp_status lamp_data_read(const char *path, int fd, void *buf, size_t len, size_t *got);

#endif
