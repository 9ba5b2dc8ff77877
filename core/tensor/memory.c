#include "tensor/memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tensor/ledger.h"

/* The header sits in the 64 bytes before the aligned block, so free() needs no lookup table. */
typedef struct block_header {
  size_t bytes;
  uint32_t tag;
  uint32_t device;
  uint64_t guard;
} block_header;

#define HEADER_SPACE 64
#define BLOCK_GUARD 0x6c616d70626c6f6bull /* "lampblok" */

void *lamp_mem_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  if (device != LAMP_CPU) {
    lamp_error(LAMP_ERR_UNSUPPORTED, "memory: device %d has no allocator in this build", (int)device);
    return NULL;
  }
  if ((unsigned)tag >= LAMP_MEM_TAG_COUNT) {
    lamp_error(LAMP_ERR_INVALID_ARG, "memory: unknown tag %d", (int)tag);
    return NULL;
  }
  size_t rounded = (bytes + 63u) & ~(size_t)63u;
  if (rounded < bytes || rounded > SIZE_MAX - HEADER_SPACE) {
    lamp_error(LAMP_ERR_INVALID_ARG, "memory: %zu bytes for %s is too large", bytes, lamp_mem_tag_name(tag));
    return NULL;
  }
  char *base = aligned_alloc(64, rounded + HEADER_SPACE);
  if (base == NULL) {
    lamp_error(LAMP_ERR_SYSTEM, "memory: out of memory allocating %zu bytes for %s", bytes, lamp_mem_tag_name(tag));
    return NULL;
  }
  memset(base + HEADER_SPACE, 0, rounded);
  block_header *h = (block_header *)base;
  h->bytes = bytes;
  h->tag = (uint32_t)tag;
  h->device = (uint32_t)device;
  h->guard = BLOCK_GUARD;
  lamp_ledger_add(tag, bytes);
  return base + HEADER_SPACE;
}

static block_header *header_of(const void *ptr) {
  return (block_header *)((char *)(uintptr_t)ptr - HEADER_SPACE);
}

void lamp_mem_free(void *ptr) {
  if (ptr == NULL) return;
  block_header *h = header_of(ptr);
  if (h->guard != BLOCK_GUARD) return; /* not ours: refusing beats corrupting the heap */
  h->guard = 0;
  lamp_ledger_sub((lamp_mem_tag)h->tag, h->bytes);
  free(h);
}

size_t lamp_mem_size(const void *ptr) {
  if (ptr == NULL) return 0;
  const block_header *h = header_of(ptr);
  return h->guard == BLOCK_GUARD ? h->bytes : 0;
}
