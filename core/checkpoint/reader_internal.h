/* The reader's state, shared by the files that validate, look up and describe a checkpoint. */
#ifndef LAMP_CHECKPOINT_READER_INTERNAL_H
#define LAMP_CHECKPOINT_READER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"

struct lamp_ckpt {
  char *name;         /* the path, or the name given with the bytes */
  uint8_t *buf;       /* the whole file, 64-byte aligned; names and strings are NUL-terminated in place */
  size_t len;
  uint32_t version;
  uint32_t header_len;
  uint32_t header_crc;
  uint64_t data_start; /* file offset of the data section */
  lamp_ckpt_meta *metas;
  size_t n_metas;
  lamp_ckpt_entry *entries;
  size_t n_entries;
  uint32_t *meta_order;  /* metas sorted by key, for lookups and the duplicate check */
  uint32_t *entry_order; /* entries sorted by name */
};

/* The preamble fields, checked against the file's real length `len`; only the first min(len, 32)
   bytes are read, so the preamble of a huge file can be checked before the file is read. */
typedef struct ckpt_preamble {
  uint32_t version;
  uint32_t header_len;
  uint64_t file_len;
  uint32_t header_crc;
  uint64_t data_start;
} ckpt_preamble;

lamp_status ckpt_check_preamble(const char *name, const uint8_t *bytes, size_t len, ckpt_preamble *out);

/*
** Parses the header text c->buf[32 .. 32 + header_len) into c->metas and c->entries (every
** record's syntax, names, dtypes, shapes, sizes, alignment, order and bounds within the data
** section). The header checksum was verified before.
*/
lamp_status ckpt_parse_header(lamp_ckpt *c);

/* Preamble and header checksum of the file at path, without reading its data (folder pruning). */
lamp_status ckpt_quick_check(const char *path);

#endif
