/*
** The IDX file format (LeCun's MNIST format, also used by Fashion-MNIST): a 4-byte magic
** 0x00 0x00 <type code> <ndim>, ndim big-endian uint32 dimensions, then the elements in
** row-major order. Files may be gzip-compressed or raw (data/stream.h reads both).
**
** Everything in the header is validated before any allocation sized from it, so a truncated,
** corrupt or hostile file is a clear error naming the path, never a crash or a huge allocation.
** Only a regular file is read (a FIFO or a device is refused without blocking), and a gzip file
** loads only when every member's CRC-32 and length check out.
*/
#ifndef LAMP_DATA_IDX_H
#define LAMP_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "lamp/abi.h"

#define LAMP_IDX_MAX_DIMS 4
/* No data set lamp reads is anywhere near this; a larger header is corrupt or hostile. */
#define LAMP_IDX_MAX_BYTES ((uint64_t)1 << 30)

/* IDX type codes (the third magic byte). Only LAMP_IDX_U8 is accepted by the reader. */
enum {
  LAMP_IDX_U8 = 0x08,
  LAMP_IDX_I8 = 0x09,
  LAMP_IDX_I16 = 0x0b,
  LAMP_IDX_I32 = 0x0c,
  LAMP_IDX_F32 = 0x0d,
  LAMP_IDX_F64 = 0x0e
};

typedef struct lamp_idx {
  uint8_t type;      /* IDX type code; always LAMP_IDX_U8 after a successful read */
  int ndim;          /* 1..4 */
  uint32_t dims[4];  /* dims[ndim..3] are 0 */
  uint8_t *data;     /* lamp_mem_alloc'ed with LAMP_MEM_DATA; nbytes long */
  size_t nbytes;
} lamp_idx;

/*
** Reads and validates a whole IDX file (gzip or raw). On failure *out is zeroed, nothing is
** left allocated, and lamp_last_error() names the path and the problem.
*/
lamp_status lamp_idx_read(const char *path, lamp_idx *out);

/* Frees the data and zeroes *idx; a zeroed or NULL idx is a no-op. */
void lamp_idx_free(lamp_idx *idx);

#endif
