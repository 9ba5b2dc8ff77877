/*
** Tracked memory on every device. Each block is recorded in a host-side table (pointer ->
** bytes, tag, device), never in a header beside it: a device pointer cannot be read by the host.
** The ledger (ledger.h) keeps current and peak bytes per device and tag.
**
** Host memory is built in. Other devices lend their allocator when their backend is registered
** (core/backend/registry.c), so this module needs no knowledge of them.
*/
#ifndef LAMP_TENSOR_MEMORY_H
#define LAMP_TENSOR_MEMORY_H

#include <stddef.h>
#include "lamp/host.h"

/* Memory the host reads and writes directly (data sets, checkpoint buffers, staging): the CPU
   device's. Named apart from the CPU device, which says where work runs. */
#define LAMP_HOST LAMP_CPU

/* Device slots the core can hold: the ABI's devices, then the core's own simulated device
   (core/backend/backend.h). */
#define LAMP_DEVICE_SLOTS 4

/* How a device allocates. alloc returns NULL with the error set; zero fills bytes with 0 (on the
   device's queue, before any later work on it); free may defer until queued work is done. */
typedef struct lamp_device_memory {
  const char *name; /* "cpu", "cuda", "sim" */
  void *(*alloc)(size_t bytes);
  void (*free)(void *ptr);
  lamp_status (*zero)(void *ptr, size_t bytes);
} lamp_device_memory;

/* The host's allocator, untracked (lamp_mem_alloc records what it hands out): 64-byte aligned;
   blocks of 2 MiB and more 2 MiB aligned and marked for transparent huge pages where
   lamp_host_huge_pages() (Linux, unless LAMP_HUGE_PAGES=0). */
void *lamp_host_alloc(size_t bytes);
int lamp_host_huge_pages(void);
void lamp_host_free(void *ptr);
lamp_status lamp_host_zero(void *ptr, size_t bytes);

/* Lends `memory` (kept, not copied) for `device`. Host memory cannot be replaced. */
lamp_status lamp_device_memory_register(lamp_device device, const lamp_device_memory *memory);

/* "cpu", "cuda", "sim"; "device N" for a slot nothing was registered in. */
const char *lamp_device_name(lamp_device device);

/* Whether `device` has an allocator (the host always does). */
int lamp_device_has_memory(lamp_device device);

/* NULL on failure, with lamp_last_error() naming the device, tag and size. Zero-filled; 64-byte
   aligned. */
void *lamp_mem_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes);

/* NULL is a no-op; a pointer this module did not hand out is ignored (refusing beats corrupting
   a heap). */
void lamp_mem_free(void *ptr);

/* The number of bytes a block was allocated with (0 for NULL or a foreign pointer). */
size_t lamp_mem_size(const void *ptr);

/* The device a block lives on; LAMP_HOST for NULL or a foreign pointer. */
lamp_device lamp_mem_device(const void *ptr);

#endif
