/*
** A second pair of hands for the memory-bound passes (conversions, rounding, unscaling). While
** they run, OpenBLAS's own threads only spin waiting for the next GEMM, so on this 2-core
** machine one core would sit idle. Workers sleep on a condition variable between jobs, so they
** never compete with a running GEMM; the caller takes the first share itself and spins only
** for the short tail of the others.
**
** Splits are by element ranges aligned to 64 elements, so every kernel run this way gives the
** same bits whatever the thread count (each element is computed by the same code).
** LAMP_NUM_THREADS=1 turns it off.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"

#define MAX_WORKERS 7
#define MIN_ELEMENTS_PER_THREAD 65536 /* below this, waking a thread costs more than it saves */
#define ALIGN 64

typedef struct job {
  lamp_cpu_range_fn fn;
  void *ctx;
  size_t n;
  int parts;
} job;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards the job and generation */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;   /* one parallel_for at a time */
static job current;
static unsigned long generation;
static atomic_int pending;
static int workers;

static void part_range(size_t n, int parts, int i, size_t *begin, size_t *end) {
  size_t share = (n / (size_t)parts + ALIGN - 1) / ALIGN * ALIGN;
  *begin = share * (size_t)i < n ? share * (size_t)i : n;
  *end = share * (size_t)(i + 1) < n ? share * (size_t)(i + 1) : n;
}

static void *worker_main(void *arg) {
  int index = (int)(intptr_t)arg;
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&lock);
    while (generation == seen) pthread_cond_wait(&wake, &lock);
    seen = generation;
    job j = current;
    pthread_mutex_unlock(&lock);
    if (index < j.parts) {
      size_t begin, end;
      part_range(j.n, j.parts, index, &begin, &end);
      if (begin < end) j.fn(j.ctx, begin, end);
      atomic_fetch_sub(&pending, 1);
    }
  }
  return NULL;
}

static int configured_threads(void) {
  const char *env = getenv("LAMP_NUM_THREADS");
  long n = env != NULL ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : (int)n;
}

static void start_workers(void) {
  int want = configured_threads() - 1;
  for (int i = 1; i <= want; i++) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker_main, (void *)(intptr_t)i) == 0) workers++;
    pthread_attr_destroy(&attr);
  }
}

void lamp_cpu_parallel_for(size_t n, lamp_cpu_range_fn fn, void *ctx) {
  int parts = (int)(n / MIN_ELEMENTS_PER_THREAD);
  if (parts >= 2) pthread_once(&once, start_workers);
  if (parts > workers + 1) parts = workers + 1;
  /* Too small, no workers, or another thread is mid-job (the pool is not re-entrant): inline. */
  if (parts < 2 || pthread_mutex_trylock(&busy) != 0) {
    fn(ctx, 0, n);
    return;
  }
  atomic_store(&pending, parts - 1);
  pthread_mutex_lock(&lock);
  current = (job){fn, ctx, n, parts};
  generation++;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&lock);
  size_t begin, end;
  part_range(n, parts, 0, &begin, &end);
  fn(ctx, begin, end);
  while (atomic_load(&pending) > 0) {
  }
  pthread_mutex_unlock(&busy);
}
