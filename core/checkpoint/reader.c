/*
** Opening a checkpoint: the preamble is checked on its own first (so a 10 GB file that is not
** a checkpoint costs 32 bytes of reading), then the file is read into one aligned buffer of its
** real size and everything is validated before the caller sees any of it.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/format.h"
#include "checkpoint/reader_internal.h"
#include "tensor/memory.h"

/* ---- the preamble ---------------------------------------------------------------------------- */

static lamp_status check_magic(const char *name, const uint8_t *bytes, size_t len) {
  size_t n = len < CKPT_MAGIC_LEN ? len : CKPT_MAGIC_LEN;
  if (memcmp(bytes, CKPT_MAGIC, n) == 0) return LAMP_OK;
  char hex[3 * CKPT_MAGIC_LEN + 1] = "";
  size_t used = 0;
  for (size_t i = 0; i < n; i++) used += (size_t)snprintf(hex + used, sizeof hex - used, i ? " %02x" : "%02x", bytes[i]);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: not a lamp checkpoint (it starts with bytes %s, expected the magic \"%s\")",
                    name, hex, CKPT_MAGIC);
}

lamp_status ckpt_check_preamble(const char *name, const uint8_t *bytes, size_t len, ckpt_preamble *out) {
  if (len == 0) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: empty file, not a lamp checkpoint", name);
  lamp_status st = check_magic(name, bytes, len);
  if (st != LAMP_OK) return st;
  if (len < CKPT_PREAMBLE)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated: %zu bytes, shorter than the %d-byte checkpoint preamble",
                      name, len, CKPT_PREAMBLE);
  out->version = ckpt_get_u32(bytes + 8);
  out->header_len = ckpt_get_u32(bytes + 12);
  out->file_len = ckpt_get_u64(bytes + 16);
  out->header_crc = ckpt_get_u32(bytes + CKPT_CRC_AT);
  uint32_t reserved = ckpt_get_u32(bytes + 28);
  if (out->version > LAMP_CKPT_FORMAT_VERSION)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: checkpoint format version %u is newer than this lamp supports (%d)",
                      name, out->version, LAMP_CKPT_FORMAT_VERSION);
  if (out->version == 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: checkpoint format version 0 is invalid (this lamp reads version %d)",
                      name, LAMP_CKPT_FORMAT_VERSION);
  if (reserved != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: corrupt preamble: the reserved field is 0x%08x, expected 0", name,
                      reserved);
  if (out->file_len > len)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated: the checkpoint is %llu bytes long, the file has %zu",
                      name, (unsigned long long)out->file_len, len);
  if (out->file_len < len)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %llu unexpected bytes after the end of the checkpoint (%llu bytes)",
                      name, (unsigned long long)(len - out->file_len), (unsigned long long)out->file_len);
  if (out->header_len > CKPT_MAX_HEADER)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: corrupt preamble: header length %u is over the limit of %u bytes",
                      name, out->header_len, (unsigned)CKPT_MAX_HEADER);
  if (CKPT_PREAMBLE + (uint64_t)out->header_len > out->file_len)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: corrupt preamble: the %u-byte header runs past the end of the checkpoint (%llu bytes)", name,
                      out->header_len, (unsigned long long)out->file_len);
  out->data_start = ckpt_align(CKPT_PREAMBLE + (uint64_t)out->header_len);
  if (out->data_start > out->file_len)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: corrupt preamble: the checkpoint ends at byte %llu, inside the padding after the header "
                      "(the data starts at %llu)", name, (unsigned long long)out->file_len,
                      (unsigned long long)out->data_start);
  return LAMP_OK;
}

static lamp_status check_header_crc(const char *name, const uint8_t *bytes, const ckpt_preamble *pre) {
  uint32_t crc = ckpt_header_crc(bytes, bytes + CKPT_PREAMBLE, pre->header_len);
  if (crc != pre->header_crc)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: header checksum mismatch (stored %08x, computed %08x): the header is corrupt",
                      name, pre->header_crc, crc);
  return LAMP_OK;
}

/* ---- the data section ------------------------------------------------------------------------ */

/* Every byte from `from` to `to` must be the zero padding the writer puts there. */
static lamp_status check_zero(const lamp_ckpt *c, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++)
    if (c->buf[i] != 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: padding byte %llu is 0x%02x, expected 0: the file is corrupt",
                        c->name, (unsigned long long)i, c->buf[i]);
  return LAMP_OK;
}

/* The padding around and the CRC-32 of every entry; also points each entry at its data. */
static lamp_status check_data(lamp_ckpt *c) {
  uint64_t pos = CKPT_PREAMBLE + (uint64_t)c->header_len;
  for (size_t i = 0; i < c->n_entries; i++) {
    lamp_ckpt_entry *e = &c->entries[i];
    uint64_t at = c->data_start + e->offset;
    lamp_status st = check_zero(c, pos, at);
    if (st != LAMP_OK) return st;
    e->data = c->buf + at;
    uint32_t crc = ckpt_crc32(0, e->data, e->nbytes);
    if (crc != e->crc32)
      return lamp_error(LAMP_ERR_INVALID_USAGE,
                        "%s: checksum mismatch in %s '%s' (stored %08x, computed %08x): its data is corrupt", c->name,
                        e->kind == LAMP_CKPT_BLOB ? "blob" : "tensor", e->name, e->crc32, crc);
    pos = at + e->nbytes;
  }
  return check_zero(c, pos, c->len);
}

/* ---- names ------------------------------------------------------------------------------------ */

/* qsort takes no context argument; per thread, so readers opened on several threads stay apart. */
static _Thread_local const lamp_ckpt *sorting;

static int by_meta_key(const void *a, const void *b) {
  return strcmp(sorting->metas[*(const uint32_t *)a].key, sorting->metas[*(const uint32_t *)b].key);
}

static int by_entry_name(const void *a, const void *b) {
  return strcmp(sorting->entries[*(const uint32_t *)a].name, sorting->entries[*(const uint32_t *)b].name);
}

/* Sorts the lookup orders and refuses a name that appears twice. */
static lamp_status sort_names(lamp_ckpt *c) {
  for (size_t i = 0; i < c->n_metas; i++) c->meta_order[i] = (uint32_t)i;
  for (size_t i = 0; i < c->n_entries; i++) c->entry_order[i] = (uint32_t)i;
  sorting = c;
  if (c->n_metas) qsort(c->meta_order, c->n_metas, sizeof *c->meta_order, by_meta_key);
  if (c->n_entries) qsort(c->entry_order, c->n_entries, sizeof *c->entry_order, by_entry_name);
  sorting = NULL;
  for (size_t i = 1; i < c->n_metas; i++) {
    const char *key = c->metas[c->meta_order[i]].key;
    if (strcmp(c->metas[c->meta_order[i - 1]].key, key) == 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: meta '%s' appears twice in the header", c->name, key);
  }
  for (size_t i = 1; i < c->n_entries; i++) {
    const char *name = c->entries[c->entry_order[i]].name;
    if (strcmp(c->entries[c->entry_order[i - 1]].name, name) == 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: entry '%s' appears twice in the tensor table", c->name, name);
  }
  return LAMP_OK;
}

/* ---- opening -------------------------------------------------------------------------------- */

static lamp_status new_reader(lamp_ckpt **out, const char *name, size_t len) {
  lamp_ckpt *c = calloc(1, sizeof *c);
  if (c == NULL || (c->name = strdup(name)) == NULL) {
    free(c);
    return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory", name);
  }
  c->len = len;
  if ((c->buf = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, len)) == NULL) {
    lamp_error_context(LAMP_ERR_SYSTEM, "%s", name);
    lamp_ckpt_close(c);
    return LAMP_ERR_SYSTEM;
  }
  *out = c;
  return LAMP_OK;
}

/* Everything after the preamble: header checksum, records, names, padding, data CRCs. */
static lamp_status validate(lamp_ckpt *c) {
  ckpt_preamble pre;
  lamp_status st = ckpt_check_preamble(c->name, c->buf, c->len, &pre);
  if (st == LAMP_OK) st = check_header_crc(c->name, c->buf, &pre);
  if (st != LAMP_OK) return st;
  c->version = pre.version;
  c->header_len = pre.header_len;
  c->header_crc = pre.header_crc;
  c->data_start = pre.data_start;
  if ((st = ckpt_parse_header(c)) != LAMP_OK) return st;
  if ((st = sort_names(c)) != LAMP_OK) return st;
  return check_data(c);
}

static lamp_status finish_open(lamp_ckpt **out, lamp_ckpt *c) {
  lamp_status st = validate(c);
  if (st != LAMP_OK) {
    lamp_ckpt_close(c);
    return st;
  }
  *out = c;
  return LAMP_OK;
}

lamp_status lamp_ckpt_open_memory(lamp_ckpt **out, const void *bytes, size_t len, const char *name) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: output is NULL");
  *out = NULL;
  if (name == NULL) name = "<memory>";
  if (bytes == NULL && len > 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: NULL bytes", name);
  /* The preamble first, on the caller's bytes: nothing is allocated for a file that fails it. */
  ckpt_preamble pre;
  lamp_status st = ckpt_check_preamble(name, bytes, len, &pre);
  lamp_ckpt *c;
  if (st == LAMP_OK) st = new_reader(&c, name, len);
  if (st != LAMP_OK) return st;
  memcpy(c->buf, bytes, len);
  return finish_open(out, c);
}

/* Reads exactly len bytes from offset `at`; a shorter file is reported as truncated. */
static lamp_status read_fully(const char *path, int fd, uint8_t *buf, size_t len, size_t *got) {
  *got = 0;
  while (*got < len) {
    ssize_t n = pread(fd, buf + *got, len - *got, (off_t)*got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return lamp_error(LAMP_ERR_SYSTEM, "%s: read error: %s", path, strerror(errno));
    }
    if (n == 0) break;
    *got += (size_t)n;
  }
  return LAMP_OK;
}

/* Never blocks: a FIFO or a device named as a checkpoint is refused, naming what it is. */
static lamp_status open_file(const char *path, int *fd, size_t *len) {
  struct stat sb;
  lamp_status st = ckpt_open_regular(path, O_RDONLY, fd, &sb);
  if (st == LAMP_OK) *len = (size_t)sb.st_size;
  return st;
}

/* The preamble of an open file, checked against the file's size. */
static lamp_status read_preamble(const char *path, int fd, size_t len, uint8_t *head, ckpt_preamble *pre) {
  size_t got, want = len < CKPT_PREAMBLE ? len : CKPT_PREAMBLE;
  lamp_status st = read_fully(path, fd, head, want, &got);
  if (st != LAMP_OK) return st;
  return ckpt_check_preamble(path, head, got < want ? got : len, pre); /* got < want: it shrank meanwhile */
}

lamp_status lamp_ckpt_open(lamp_ckpt **out, const char *path) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: output is NULL");
  *out = NULL;
  if (path == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "checkpoint: path is NULL");
  int fd;
  size_t len, got;
  uint8_t head[CKPT_PREAMBLE];
  ckpt_preamble pre;
  lamp_status st = open_file(path, &fd, &len);
  if (st != LAMP_OK) return st;
  lamp_ckpt *c = NULL;
  if ((st = read_preamble(path, fd, len, head, &pre)) == LAMP_OK && (st = new_reader(&c, path, len)) == LAMP_OK &&
      (st = read_fully(path, fd, c->buf, len, &got)) == LAMP_OK && got < len)
    st = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated while reading: the file shrank from %zu to %zu bytes", path,
                    len, got);
  close(fd);
  if (st != LAMP_OK) {
    lamp_ckpt_close(c);
    return st;
  }
  return finish_open(out, c);
}

lamp_status ckpt_quick_check(const char *path) {
  int fd;
  size_t len, got;
  uint8_t head[CKPT_PREAMBLE];
  ckpt_preamble pre;
  lamp_status st = open_file(path, &fd, &len);
  if (st != LAMP_OK) return st;
  uint8_t *bytes = NULL;
  if ((st = read_preamble(path, fd, len, head, &pre)) == LAMP_OK) {
    size_t n = CKPT_PREAMBLE + (size_t)pre.header_len;
    if ((bytes = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, n)) == NULL) st = LAMP_ERR_SYSTEM;
    else if ((st = read_fully(path, fd, bytes, n, &got)) == LAMP_OK && got < n)
      st = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: truncated while reading", path);
    if (st == LAMP_OK) st = check_header_crc(path, bytes, &pre);
  }
  lamp_mem_free(bytes);
  close(fd);
  return st;
}

void lamp_ckpt_close(lamp_ckpt *c) {
  if (c == NULL) return;
  lamp_mem_free(c->buf);
  lamp_mem_free(c->metas);
  lamp_mem_free(c->entries);
  lamp_mem_free(c->meta_order);
  lamp_mem_free(c->entry_order);
  free(c->name);
  free(c);
}
