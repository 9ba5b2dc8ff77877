/*
** Opening libnccl with dlopen (see lib.h). $LAMP_NCCL_LIBRARY names the file where the dynamic
** loader would not find it (Python's nvidia-nccl wheels keep it in site-packages); otherwise the
** loader's own search for libnccl.so.2 applies (LD_LIBRARY_PATH, the ld.so cache).
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static nccl_lib lib;
static int lib_ready;

void nccl_version_text(int code, char *buf, size_t size) {
  /* NCCL_VERSION: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after. */
  if (code >= 10000)
    snprintf(buf, size, "%d.%d.%d", code / 10000, code % 10000 / 100, code % 100);
  else
    snprintf(buf, size, "%d.%d.%d", code / 1000, code % 1000 / 100, code % 100);
}

/* Stores the address of `name` in the function pointer at `slot` (POSIX lets a data pointer
   from dlsym become a function pointer; memcpy keeps the compiler quiet about it). */
static int resolve(void *handle, const char *name, void *slot, size_t slot_size, char *why,
                   size_t why_size) {
  void *sym = dlsym(handle, name);
  if (sym == NULL || slot_size != sizeof sym) {
    snprintf(why, why_size, "%s has no %s (not an NCCL library?)", lib.path, name);
    return 0;
  }
  memcpy(slot, &sym, sizeof sym);
  return 1;
}

#define RESOLVE(member, name) resolve(handle, name, &lib.member, sizeof lib.member, why, why_size)

static int open_library(char *why, size_t why_size) {
  const char *env = getenv("LAMP_NCCL_LIBRARY");
  snprintf(lib.path, sizeof lib.path, "%s", env != NULL && env[0] != '\0' ? env : "libnccl.so.2");
  /* RTLD_LOCAL: NCCL's symbols serve this plugin only. */
  void *handle = dlopen(lib.path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *err = dlerror();
    snprintf(why, why_size, "cannot load %s (%s)%s", lib.path, err != NULL ? err : "no reason given",
             env != NULL && env[0] != '\0' ? ""
                                           : ": install NCCL, or set LAMP_NCCL_LIBRARY to its libnccl.so.2");
    return 0;
  }
  int ok = RESOLVE(get_version, "ncclGetVersion") && RESOLVE(get_unique_id, "ncclGetUniqueId") &&
           RESOLVE(comm_init_rank_config, "ncclCommInitRankConfig") &&
           RESOLVE(comm_get_async_error, "ncclCommGetAsyncError") &&
           RESOLVE(comm_finalize, "ncclCommFinalize") && RESOLVE(comm_destroy, "ncclCommDestroy") &&
           RESOLVE(comm_abort, "ncclCommAbort") && RESOLVE(get_error_string, "ncclGetErrorString") &&
           RESOLVE(get_last_error, "ncclGetLastError") && RESOLVE(all_reduce, "ncclAllReduce") &&
           RESOLVE(broadcast, "ncclBroadcast") && RESOLVE(all_gather, "ncclAllGather") &&
           RESOLVE(reduce_scatter, "ncclReduceScatter");
  if (ok && (lib.get_version(&lib.version) != ncclSuccess || lib.version < NCCL_LIB_MIN_VERSION)) {
    char have[32], need[32];
    nccl_version_text(lib.version, have, sizeof have);
    nccl_version_text(NCCL_LIB_MIN_VERSION, need, sizeof need);
    snprintf(why, why_size, "%s is NCCL %s; lamp needs %s or later (non-blocking communicators)",
             lib.path, have, need);
    ok = 0;
  }
  /* A library that failed is closed again: a later call may find another. */
  if (!ok) dlclose(handle);
  return ok;
}

const nccl_lib *nccl_lib_open(char *why, size_t why_size) {
  pthread_mutex_lock(&lib_lock);
  if (!lib_ready) lib_ready = open_library(why, why_size);
  pthread_mutex_unlock(&lib_lock);
  return lib_ready ? &lib : NULL;
}
