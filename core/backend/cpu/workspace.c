/*
** Per-thread workspaces of the CPU kernels: one block per purpose and thread, kept between calls
** and grown on demand, so steady-state training allocates nothing. Each is tagged "workspace" in
** the memory ledger, and freed when its thread exits or on lamp_cpu_workspace_release(). Per
** thread, so kernels running on several threads (or on the simulated device's queue) never
** share one.
*/
#include <pthread.h>
#include <stdint.h>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/memory.h"

typedef struct workspaces {
  void *block[LAMP_CPU_WS_COUNT];
  size_t bytes[LAMP_CPU_WS_COUNT];
} workspaces;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ready;
static _Thread_local workspaces mine;

static void release(workspaces *w) {
  for (int i = 0; i < LAMP_CPU_WS_COUNT; i++) {
    lamp_mem_free(w->block[i]);
    w->block[i] = NULL;
    w->bytes[i] = 0;
  }
}

/* At thread exit: the destructor runs while the thread's own variables are still there. */
static void at_exit(void *w) { release(w); }

static void key_create(void) { key_ready = pthread_key_create(&key, at_exit) == 0; }

void lamp_cpu_workspace_release(void) { release(&mine); }

void *lamp_cpu_workspace(lamp_cpu_ws which, size_t bytes) {
  pthread_once(&key_once, key_create);
  if (!key_ready) {
    lamp_error(LAMP_ERR_SYSTEM, "cannot create the per-thread workspace key");
    return NULL;
  }
  if ((unsigned)which >= LAMP_CPU_WS_COUNT) {
    lamp_error(LAMP_ERR_INTERNAL, "workspace: unknown slot %d", (int)which);
    return NULL;
  }
  if (mine.block[which] != NULL && mine.bytes[which] >= bytes) return mine.block[which];
  lamp_mem_free(mine.block[which]);
  mine.block[which] = NULL;
  mine.bytes[which] = 0;
  void *block = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_WORKSPACE, bytes ? bytes : 1);
  if (block == NULL) return NULL;
  if (pthread_setspecific(key, &mine) != 0) {
    lamp_mem_free(block);
    lamp_error(LAMP_ERR_SYSTEM, "cannot keep the per-thread workspace");
    return NULL;
  }
  mine.block[which] = block;
  mine.bytes[which] = bytes;
  return block;
}
