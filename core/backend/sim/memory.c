/*
** The simulated device's memory. One memfd is mapped twice, MAP_SHARED: the device view is
** PROT_NONE, so a host access through a pointer the device handed out faults at once, and the
** host view is read-write, for the device's own queued work only. A device pointer becomes a host
** one by its offset: host = host_base + (ptr - device_base). memfd pages are VM_NORESERVE: a large
** arena commits nothing until it is touched.
**
** Blocks are carved from the arena first-fit: an address-ordered list of segments, each free or in
** use, split on allocation and merged with free neighbours on release, under one mutex (the host
** allocates, the worker releases). The list lives on the host heap, never inside the arena, so a
** kernel writing past its buffer cannot corrupt it.
*/
/* memfd_create: glibc declares it only under _GNU_SOURCE, which the build's global
   _POSIX_C_SOURCE/_DEFAULT_SOURCE do not imply; it must come before the first system header. */
#define _GNU_SOURCE

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/sim/sim_impl.h"
#include "base/error.h"

#define ALIGNMENT ((size_t)64)
#define ARENA_MAX ((size_t)16 << 30) /* tried first ... */
#define ARENA_MIN ((size_t)256 << 20) /* ... then halved down to this, where the system maps less */

typedef struct segment {
  size_t offset, bytes;
  int used;
  struct segment *prev, *next;
} segment;

static struct {
  pthread_once_t once;
  lamp_status status; /* of mapping the arena; its message follows */
  char message[256];
  char *device, *host;
  size_t bytes;
  pthread_mutex_t lock; /* guards the segments */
  segment *first;
} arena = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- mapping --------------------------------------------------------------------------------- */

static void map_failed(const char *what) {
  arena.status = LAMP_ERR_SYSTEM;
  snprintf(arena.message, sizeof arena.message, "sim: cannot map the device arena: %s: %s", what, strerror(errno));
}

/* Both views of `bytes` of fd; 0 (both unmapped) when either cannot be had. */
static int map_views(int fd, size_t bytes) {
  if (ftruncate(fd, (off_t)bytes) != 0) return 0;
  void *device = mmap(NULL, bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  void *host = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (device != MAP_FAILED && host != MAP_FAILED) {
    arena.device = device;
    arena.host = host;
    arena.bytes = bytes;
    return 1;
  }
  if (device != MAP_FAILED) munmap(device, bytes);
  if (host != MAP_FAILED) munmap(host, bytes);
  return 0;
}

/* The largest arena the system maps (an address-space limit or a sanitizer may refuse 2 x 16 GiB). */
static void map_arena(void) {
  int fd = memfd_create("lamp-sim", MFD_CLOEXEC);
  if (fd < 0) {
    map_failed("memfd_create");
    return;
  }
  size_t bytes = ARENA_MAX;
  while (!map_views(fd, bytes) && bytes > ARENA_MIN) bytes /= 2;
  if (arena.bytes == 0) map_failed("mmap");
  close(fd); /* the mappings keep the memory */
  if (arena.bytes == 0) return;
  arena.first = calloc(1, sizeof *arena.first);
  if (arena.first == NULL) {
    arena.status = lamp_error(LAMP_ERR_SYSTEM, "sim: out of host memory for the arena's list");
    snprintf(arena.message, sizeof arena.message, "%s", lamp_last_error());
    return;
  }
  arena.first->bytes = arena.bytes; /* one free segment: the whole arena */
}

/* LAMP_OK once the arena is mapped; else the error (recorded again on every call). */
static lamp_status arena_ready(void) {
  pthread_once(&arena.once, map_arena);
  return arena.status == LAMP_OK ? LAMP_OK : lamp_error(arena.status, "%s", arena.message);
}

/* ---- translation ----------------------------------------------------------------------------- */

void *lamp_sim_host_view(const void *ptr) {
  pthread_once(&arena.once, map_arena);
  if (ptr == NULL || arena.device == NULL) return NULL;
  uintptr_t offset = (uintptr_t)ptr - (uintptr_t)arena.device; /* wraps for ptr below the arena */
  return offset < arena.bytes ? arena.host + offset : NULL;
}

lamp_status lamp_sim_arg(const char *op, const char *name, const void *ptr, void **host) {
  *host = lamp_sim_host_view(ptr);
  if (ptr == NULL || *host != NULL) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "sim: %s: argument %s is not memory of the simulated device (%p)", op,
                    name, ptr);
}

/* ---- blocks ---------------------------------------------------------------------------------- */

/* Cuts s down to `bytes`, the rest a free segment after it; keeps s whole when no node can be had
   (a larger block than asked for, released whole later: wasteful, never wrong). */
static void split(segment *s, size_t bytes) {
  if (s->bytes == bytes) return;
  segment *rest = calloc(1, sizeof *rest);
  if (rest == NULL) return;
  rest->offset = s->offset + bytes;
  rest->bytes = s->bytes - bytes;
  rest->prev = s;
  rest->next = s->next;
  if (s->next != NULL) s->next->prev = rest;
  s->next = rest;
  s->bytes = bytes;
}

/* The offset of a newly used block of `bytes` (a multiple of ALIGNMENT), first fit; 0 if none. */
static int take(size_t bytes, size_t *offset) {
  pthread_mutex_lock(&arena.lock);
  segment *s = arena.first;
  while (s != NULL && (s->used || s->bytes < bytes)) s = s->next;
  if (s != NULL) {
    split(s, bytes);
    s->used = 1;
    *offset = s->offset;
  }
  pthread_mutex_unlock(&arena.lock);
  return s != NULL;
}

/* Folds b, the segment after a, into a. */
static void merge(segment *a, segment *b) {
  a->bytes += b->bytes;
  a->next = b->next;
  if (b->next != NULL) b->next->prev = a;
  free(b);
}

void *lamp_sim_alloc(size_t bytes) {
  if (arena_ready() != LAMP_OK || lamp_sim_refuse_in_capture("allocating device memory") != LAMP_OK) return NULL;
  size_t rounded = (bytes + ALIGNMENT - 1) & ~(ALIGNMENT - 1);
  if (rounded == 0) rounded = ALIGNMENT; /* zero bytes still get a distinct block */
  size_t offset;
  int found = bytes <= arena.bytes && take(rounded, &offset);
  if (!found && bytes <= arena.bytes) {
    lamp_sim_drain(); /* queued frees give their blocks back */
    found = take(rounded, &offset);
  }
  if (!found) {
    lamp_error(LAMP_ERR_SYSTEM, "sim: out of device memory for %zu bytes (arena of %zu bytes)", bytes, arena.bytes);
    return NULL;
  }
  return arena.device + offset;
}

lamp_status lamp_sim_release(void *ptr) {
  void *host = lamp_sim_host_view(ptr);
  size_t offset = host != NULL ? (size_t)((char *)host - arena.host) : 0;
  pthread_mutex_lock(&arena.lock);
  segment *s = host != NULL ? arena.first : NULL;
  while (s != NULL && s->offset < offset) s = s->next;
  int valid = s != NULL && s->offset == offset && s->used;
  if (valid) {
    s->used = 0;
    if (s->next != NULL && !s->next->used) merge(s, s->next);
    if (s->prev != NULL && !s->prev->used) merge(s->prev, s);
  }
  pthread_mutex_unlock(&arena.lock);
  if (valid) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "sim: free: %p is not a block of the simulated device (a host pointer, "
                    "or freed twice)", ptr);
}

static lamp_status run_release(const void *args) {
  void *ptr;
  memcpy(&ptr, args, sizeof ptr);
  return lamp_sim_release(ptr);
}

/* A bad pointer is reported by the next wait, as the sticky error: free itself returns nothing. */
void lamp_sim_free(void *ptr) {
  if (ptr != NULL) lamp_sim_enqueue_or_run(run_release, &ptr, sizeof ptr);
}

typedef struct zero_call {
  void *ptr;
  size_t bytes;
} zero_call;

static lamp_status run_zero(const void *args) {
  const zero_call *z = args;
  memset(z->ptr, 0, z->bytes);
  return LAMP_OK;
}

lamp_status lamp_sim_zero(void *ptr, size_t bytes) {
  zero_call z = {NULL, bytes};
  if (bytes == 0) return LAMP_OK;
  lamp_status st = lamp_sim_arg("zero", "ptr", ptr, &z.ptr);
  if (st != LAMP_OK) return st;
  if (z.ptr == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "sim: zero: ptr is NULL (%zu bytes)", bytes);
  return lamp_sim_enqueue(run_zero, &z, sizeof z, NULL);
}
