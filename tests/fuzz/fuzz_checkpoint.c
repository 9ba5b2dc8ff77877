/*
** libFuzzer harness for the checkpoint reader. A mutated file almost never keeps a valid
** length field and header CRC-32, which would stop every input at the first two checks; so
** the harness repairs both before reading (the checks themselves are simple and unit-tested),
** and the fuzzer's effort goes into the header parser and the bounds checks behind it.
** Accepted inputs are then used the way a caller would: dumped, every meta and entry looked up.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "checkpoint/checkpoint.h"

static void repair(uint8_t *b, size_t len) {
  if (len < 32) return;
  for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)((uint64_t)len >> (8 * i));
  uint32_t h = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
  if (h > len - 32) return;
  uLong crc = crc32(crc32(0, b, 24), b + 32, h);
  for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(crc >> (8 * i));
}

static void use(const lamp_ckpt *c) {
  char *text;
  if (lamp_ckpt_describe(c, &text) == LAMP_OK) free(text);
  for (size_t i = 0; i < lamp_ckpt_meta_count(c); i++) {
    const lamp_ckpt_meta *m = lamp_ckpt_meta_at(c, i);
    const char *s;
    int64_t v;
    double d;
    lamp_ckpt_meta_str(c, m->key, &s);
    lamp_ckpt_meta_int(c, m->key, &v);
    lamp_ckpt_meta_double(c, m->key, &d);
  }
  for (size_t i = 0; i < lamp_ckpt_entry_count(c); i++) {
    const lamp_ckpt_entry *e = lamp_ckpt_entry_at(c, i), *found;
    lamp_ckpt_find(c, e->name, &found);
    if (found != e) abort(); /* names are unique: lookup must return this very entry */
    volatile uint8_t sink = 0;
    if (e->nbytes) sink ^= ((const uint8_t *)e->data)[0] ^ ((const uint8_t *)e->data)[e->nbytes - 1];
    (void)sink;
    if (e->nbytes <= (1u << 20)) {
      void *copy = malloc(e->nbytes + 1);
      if (copy && e->kind == LAMP_CKPT_TENSOR &&
          lamp_ckpt_read_tensor(c, e->name, e->dtype, e->ndim, e->shape, copy) != LAMP_OK)
        abort(); /* its own dtype and shape must match */
      free(copy);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (copy == NULL) return 0;
  if (size) memcpy(copy, data, size);
  repair(copy, size);
  lamp_ckpt *c;
  if (lamp_ckpt_open_memory(&c, copy, size, "fuzz") == LAMP_OK) {
    use(c);
    lamp_ckpt_close(c);
  }
  /* The unrepaired input too: the length and checksum checks see every mutation. */
  if (lamp_ckpt_open_memory(&c, data, size, "fuzz") == LAMP_OK) lamp_ckpt_close(c);
  free(copy);
  return 0;
}
