/*
** Naming what a path is when it is not a regular file. Data files, checkpoints and plugins are
** read only from regular files (a FIFO would block the first read forever), and each refusal
** says the same thing the same way.
*/
#ifndef LAMP_BASE_FILE_KIND_H
#define LAMP_BASE_FILE_KIND_H

#include <sys/types.h>

#include "lamp/abi.h"

/* "a FIFO", "a directory", "a socket", ...; NULL for a regular file or a kind without a name. */
const char *lamp_file_kind(mode_t mode);

/* Sets and returns LAMP_ERR_INVALID_USAGE: "<path> is a FIFO, not a regular file", or "<path> is
   not a regular file" for a kind without a name. */
lamp_status lamp_error_not_regular(const char *path, mode_t mode);

#endif
