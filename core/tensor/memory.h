/*
** Tracked allocation: 64-byte aligned blocks whose size and tag the ledger records.
** Only the CPU device allocates here; the CUDA backend registers its own allocator later.
*/
#ifndef LAMP_TENSOR_MEMORY_H
#define LAMP_TENSOR_MEMORY_H

#include <stddef.h>
#include "lamp/host.h"

/* NULL on failure, with lamp_last_error() naming the tag and size. Zero-filled. */
void *lamp_mem_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes);
void lamp_mem_free(void *ptr);

/* The number of bytes a block was allocated with (0 for NULL). */
size_t lamp_mem_size(const void *ptr);

#endif
