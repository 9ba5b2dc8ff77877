/*
** A data file read as the bytes it stands for: a gzip file (RFC 1952, recognised by its magic
** 0x1f 0x8b) is decompressed, any other file is read as it is. The file is opened with
** lamp_data_open (data/file.h), so only regular files are read.
**
** Gzip is checked as strictly as `gzip -t`: every member's CRC-32 and length (its 8-byte
** trailer) are verified the moment its compressed data ends, so a read that reaches the end of
** the stream has proved every byte it returned. Members may follow one another (as `cat a.gz
** b.gz` makes them), and their data is one stream; anything else after the last member, or a
** stream that stops early, is an error naming the file:
**   "<path> is truncated: the gzip stream ends without its CRC-32 and length"
**   "<path> is damaged: CRC-32 mismatch (the gzip trailer says 0x..., the data gives 0x...)"
** A reader that stops before the end of the stream has not seen those checks: read on until
** lamp_data_stream_read returns fewer bytes than asked.
*/
#ifndef LAMP_DATA_STREAM_H
#define LAMP_DATA_STREAM_H

#include <stddef.h>

#include "lamp/abi.h"

typedef struct lamp_data_stream lamp_data_stream;

/* Opens path; on failure *out is NULL and lamp_last_error() names the path and the problem. */
lamp_status lamp_data_stream_open(lamp_data_stream **out, const char *path);

/*
** Reads up to len bytes of the (decompressed) data into buf; *got < len only at the end of the
** data, which for gzip means the last member's trailer has been checked. After a failure the
** stream can only be closed.
*/
lamp_status lamp_data_stream_read(lamp_data_stream *s, void *buf, size_t len, size_t *got);

void lamp_data_stream_close(lamp_data_stream *s); /* NULL is a no-op */

#endif
