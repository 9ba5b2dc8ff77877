/*
** Tracked memory. The table of blocks is an open-addressing hash map keyed by address (linear
** probing, deletion by backward shift, so no tombstones), guarded by one mutex: allocations are
** rare next to the work done with them, and several threads allocate (per-thread workspaces).
*/
#include "tensor/memory.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/error.h"
#include "tensor/ledger.h"

#define ALIGNMENT 64u

/* ---- the devices ---------------------------------------------------------------------------- */

/*
** Blocks of HUGE_PAGE bytes and more start on a HUGE_PAGE boundary and ask Linux for transparent
** huge pages, which a kernel set to "madvise" (Debian's and Ubuntu's default) grants only where
** asked. A step reads its weights, gradients and activations whole, several megabytes each: on
** 4 KiB pages every GEMM walks hundreds of TLB entries, and the mpi communicator's single-copy
** transfers pin the peer's gradient pages one at a time. The tail past the last whole huge page
** keeps small pages, so no memory is spent on it; the alignment costs address space only.
** LAMP_HUGE_PAGES=0 keeps small pages everywhere (to measure the difference).
*/
#define HUGE_PAGE ((size_t)2 << 20)

/* Read at every large allocation (a getenv next to zeroing megabytes), so a test can set it. */
int lamp_host_huge_pages(void) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const char *v = getenv("LAMP_HUGE_PAGES");
  return !(v != NULL && strcmp(v, "0") == 0);
#else
  return 0;
#endif
}

static void *alloc_huge(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: where THP is off, the block keeps small pages */
#endif
  return p;
}

void *lamp_host_alloc(size_t bytes) {
  size_t rounded = (bytes + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
  void *p = NULL;
  if (rounded >= bytes)
    p = rounded >= HUGE_PAGE && lamp_host_huge_pages() ? alloc_huge(rounded)
                                                       : aligned_alloc(ALIGNMENT, rounded ? rounded : ALIGNMENT);
  if (p == NULL) lamp_error(LAMP_ERR_SYSTEM, "out of host memory");
  return p;
}

lamp_status lamp_host_zero(void *ptr, size_t bytes) {
  memset(ptr, 0, bytes);
  return LAMP_OK;
}

void lamp_host_free(void *ptr) { free(ptr); }

static const lamp_device_memory host_memory = {"cpu", lamp_host_alloc, lamp_host_free, lamp_host_zero};

static const lamp_device_memory *devices[LAMP_DEVICE_SLOTS] = {[LAMP_HOST] = &host_memory};

lamp_status lamp_device_memory_register(lamp_device device, const lamp_device_memory *memory) {
  if ((unsigned)device >= LAMP_DEVICE_SLOTS || device == LAMP_HOST || memory == NULL || memory->alloc == NULL ||
      memory->free == NULL || memory->zero == NULL || memory->name == NULL)
    return lamp_error(LAMP_ERR_INTERNAL, "memory: cannot register an allocator for device %d", (int)device);
  devices[device] = memory;
  return LAMP_OK;
}

const char *lamp_device_name(lamp_device device) {
  static const char *const abi_names[LAMP_DEVICE_COUNT] = {"cpu", "cuda"};
  static char unknown[LAMP_DEVICE_SLOTS][16];
  if ((unsigned)device < LAMP_DEVICE_SLOTS && devices[device] != NULL) return devices[device]->name;
  if ((unsigned)device < LAMP_DEVICE_COUNT) return abi_names[device];
  if ((unsigned)device < LAMP_DEVICE_SLOTS) {
    snprintf(unknown[device], sizeof unknown[device], "device %d", (int)device);
    return unknown[device];
  }
  return "unknown device";
}

int lamp_device_has_memory(lamp_device device) {
  return (unsigned)device < LAMP_DEVICE_SLOTS && devices[device] != NULL;
}

/* ---- the table of blocks -------------------------------------------------------------------- */

typedef struct block {
  uintptr_t at; /* 0: an empty slot */
  size_t bytes;
  uint8_t tag, device;
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *slots;
static size_t capacity, used; /* capacity is 0 or a power of two */

static size_t home_of(uintptr_t at) {
  uint64_t h = (uint64_t)at * 0x9e3779b97f4a7c15ull; /* addresses are 64-byte aligned: mix them */
  return (size_t)(h >> 32) & (capacity - 1);
}

/* The slot holding `at`, or the empty slot where it would go. */
static size_t find(uintptr_t at) {
  size_t i = home_of(at);
  while (slots[i].at != 0 && slots[i].at != at) i = (i + 1) & (capacity - 1);
  return i;
}

static int grow(void) {
  size_t old_capacity = capacity;
  block *old = slots, *bigger = calloc(capacity ? 2 * capacity : 256, sizeof *bigger);
  if (bigger == NULL) return 0;
  slots = bigger;
  capacity = old_capacity ? 2 * old_capacity : 256;
  for (size_t i = 0; i < old_capacity; i++)
    if (old[i].at != 0) slots[find(old[i].at)] = old[i];
  free(old);
  return 1;
}

static int insert(const block *b) {
  if ((used + 1) * 4 > capacity * 3 && !grow()) return 0; /* at most 3/4 full */
  slots[find(b->at)] = *b;
  used++;
  return 1;
}

/* Removes slot i, moving later entries of its probe run back so every lookup still finds them. */
static void remove_slot(size_t i) {
  size_t hole = i;
  for (size_t j = (i + 1) & (capacity - 1); slots[j].at != 0; j = (j + 1) & (capacity - 1)) {
    size_t home = home_of(slots[j].at);
    /* j may fill the hole unless its home lies cyclically in (hole, j] */
    int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    slots[hole] = slots[j];
    hole = j;
  }
  slots[hole] = (block){0};
  used--;
}

/* A copy of the entry for ptr (at == 0 when there is none). */
static block lookup(const void *ptr) {
  block b = {0};
  if (ptr == NULL) return b;
  pthread_mutex_lock(&lock);
  if (capacity > 0) b = slots[find((uintptr_t)ptr)];
  pthread_mutex_unlock(&lock);
  if (b.at != (uintptr_t)ptr) b = (block){0}; /* the empty slot where it would be */
  return b;
}

/* ---- allocation ----------------------------------------------------------------------------- */

void *lamp_mem_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  if ((unsigned)tag >= LAMP_MEM_TAG_COUNT) {
    lamp_error(LAMP_ERR_INVALID_ARG, "memory: unknown tag %d", (int)tag);
    return NULL;
  }
  if (!lamp_device_has_memory(device)) {
    lamp_error(LAMP_ERR_UNSUPPORTED, "memory: device %s has no allocator (its backend is not loaded)",
               lamp_device_name(device));
    return NULL;
  }
  const lamp_device_memory *m = devices[device];
  void *p = m->alloc(bytes);
  if (p == NULL) {
    lamp_error_context(LAMP_ERR_SYSTEM, "memory: %zu bytes for %s on %s", bytes, lamp_mem_tag_name(tag), m->name);
    return NULL;
  }
  if (m->zero(p, bytes) != LAMP_OK) {
    m->free(p);
    lamp_error_context(LAMP_ERR_SYSTEM, "memory: zeroing %zu bytes for %s on %s", bytes, lamp_mem_tag_name(tag),
                       m->name);
    return NULL;
  }
  block b = {(uintptr_t)p, bytes, (uint8_t)tag, (uint8_t)device};
  pthread_mutex_lock(&lock);
  int kept = insert(&b);
  pthread_mutex_unlock(&lock);
  if (!kept) {
    m->free(p);
    lamp_error(LAMP_ERR_SYSTEM, "memory: out of host memory recording a block of %zu bytes", bytes);
    return NULL;
  }
  lamp_ledger_add(device, tag, bytes);
  return p;
}

void lamp_mem_free(void *ptr) {
  if (ptr == NULL) return;
  pthread_mutex_lock(&lock);
  block b = {0};
  if (capacity > 0) {
    size_t i = find((uintptr_t)ptr);
    b = slots[i];
    if (b.at != 0) remove_slot(i);
  }
  pthread_mutex_unlock(&lock);
  if (b.at == 0) return;
  lamp_ledger_sub((lamp_device)b.device, (lamp_mem_tag)b.tag, b.bytes);
  devices[b.device]->free(ptr);
}

size_t lamp_mem_size(const void *ptr) { return lookup(ptr).bytes; }

lamp_device lamp_mem_device(const void *ptr) {
  block b = lookup(ptr);
  return b.at != 0 ? (lamp_device)b.device : LAMP_HOST;
}
