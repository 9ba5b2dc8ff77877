/*
** A parallel loop for kernels whose natural unit is small (a convolution over a chunk of
** images): OpenBLAS parallelises each GEMM internally, which for the thin GEMMs of a small CNN
** costs more in synchronisation than it gains (and its spinning threads behave badly on a busy
** machine). Here the tasks run on as many threads as OpenBLAS would use, each task calling
** single-threaded BLAS; OpenBLAS's own threading is switched off for the duration and restored
** after.
**
** Tasks are dealt out statically in contiguous ranges (worker w of T runs tasks [w n/T,
** (w+1) n/T)), so which worker computes what, and hence every rounding, depends only on the
** thread count, never on timing; and consecutive layers give a worker the same images, which
** may still sit in its cache.
** A worker's error is carried back to the calling thread (the error slot is per thread).
** Between loops a helper, and the calling thread at the end of a loop, first spin for a short
** while (LAMP_CPU_SPIN_NS) before sleeping: a small CNN step runs dozens of loops back to back, and
** waking a sleeping thread through the kernel costs tens of microseconds each time. A multi-threaded
** GEMM tells the helpers to sleep at once (lamp_cpu_pool_sleep): OpenBLAS's own threads need
** those cores then (a polling helper made the MLP 6% slower).
** The helper threads persist between loops (see `pool`); their per-thread GEMM workspaces
** therefore persist too, as the calling thread's do.
*/
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

/* One worker's share of the current loop: its status and, on failure, its message. */
typedef struct slot {
  lamp_status status;
  char message[512];
} slot;

/*
** The helper threads are started once and kept: a loop wakes them (a condition variable)
** instead of creating and joining threads, which cost tens of microseconds per loop and a
** small CNN step runs dozens of loops. The calling thread is worker 0; helper i is worker i.
*/
typedef struct pool {
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  atomic_size_t generation; /* bumped by every loop, under lock (read without it while polling) */
  size_t helpers;           /* helper threads started: workers 1 .. helpers */
  size_t active;            /* workers of the current loop (those >= active sit it out) */
  atomic_size_t pending;    /* helpers still running the current loop (changed under lock) */
  atomic_int sleep_now;     /* helpers stop polling for the next loop (lamp_cpu_pool_sleep) */
  size_t n_tasks;
  lamp_task_fn fn;
  void *ctx;
  slot slots[LAMP_CPU_MAX_WORKERS];
} pool;

static pool the_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
                        .done = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t one_loop = PTHREAD_MUTEX_INITIALIZER; /* loops from different threads take turns */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

typedef struct helper_start {
  size_t index;
  size_t generation; /* the last one before it started: it waits for the next */
} helper_start;
static helper_start starts[LAMP_CPU_MAX_WORKERS];

static _Thread_local int inside_parallel; /* a nested loop runs serially in its worker */

/* Worker i's tasks of the current loop: [i n/T, (i+1) n/T). */
static void run_slot(pool *p, size_t i) {
  slot *s = &p->slots[i];
  s->status = LAMP_OK;
  size_t end = p->n_tasks * (i + 1) / p->active;
  for (size_t t = p->n_tasks * i / p->active; t < end && s->status == LAMP_OK; t++) s->status = p->fn(p->ctx, i, t);
  if (s->status != LAMP_OK) snprintf(s->message, sizeof s->message, "%s", lamp_last_error());
}

static long elapsed_ns(const struct timespec *since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - since->tv_sec) * 1000000000L + (now.tv_nsec - since->tv_nsec);
}

static inline void pause_briefly(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/* Polls until *v differs from `from` (1), or LAMP_CPU_SPIN_NS have passed or *stop is set (0). */
static int spin_while_equal(atomic_size_t *v, size_t from, atomic_int *stop) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(v, memory_order_acquire) != from) return 1;
    if (stop != NULL && atomic_load_explicit(stop, memory_order_relaxed)) return 0;
    pause_briefly();
    if (i % 64 == 0) {
      if (elapsed_ns(&start) > LAMP_CPU_SPIN_NS) return 0;
      sched_yield(); /* a thread that has work here (OpenBLAS's, another process's) goes first */
    }
  }
}

/* The next loop after `seen`: polled for, then slept for; returns with the lock held. */
static void wait_for_loop(pool *p, size_t seen) {
  spin_while_equal(&p->generation, seen, &p->sleep_now);
  pthread_mutex_lock(&p->lock);
  while (atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->lock);
}

static void *helper(void *arg) {
  const helper_start *start = arg;
  pool *p = &the_pool;
  inside_parallel = 1;
  for (size_t seen = start->generation;;) {
    wait_for_loop(p, seen);
    seen = atomic_load(&p->generation);
    int active = start->index < p->active;
    pthread_mutex_unlock(&p->lock);
    if (!active) continue;
    run_slot(p, start->index);
    pthread_mutex_lock(&p->lock);
    if (atomic_fetch_sub(&p->pending, 1) == 1) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->lock);
  }
  return NULL;
}

/*
** fork(): no loop may be running and no helper may hold the pool's lock at that moment, so both
** locks are taken first. A child has none of the parent's helpers (nor their waits on the
** condition variables): it starts afresh and makes its own helpers when it needs them.
*/
static void fork_prepare(void) {
  pthread_mutex_lock(&one_loop);
  pthread_mutex_lock(&the_pool.lock);
}
static void fork_parent(void) {
  pthread_mutex_unlock(&the_pool.lock);
  pthread_mutex_unlock(&one_loop);
}
static void fork_child(void) {
  the_pool.helpers = 0;
  pthread_cond_init(&the_pool.wake, NULL);
  pthread_cond_init(&the_pool.done, NULL);
  pthread_mutex_unlock(&the_pool.lock);
  pthread_mutex_unlock(&one_loop);
}
static void register_fork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* Starts helpers up to `wanted` (fewer if the system refuses); called holding one_loop. */
static void start_helpers(pool *p, size_t wanted) {
  while (p->helpers < wanted) {
    size_t i = p->helpers + 1;
    pthread_t thread;
    starts[i] = (helper_start){.index = i, .generation = atomic_load(&p->generation)};
    if (pthread_create(&thread, NULL, helper, &starts[i]) != 0) return;
    pthread_detach(thread);
    p->helpers = i;
  }
}

size_t lamp_cpu_threads(void) {
  int n = openblas_get_num_threads();
  if (n < 1) n = 1;
  return (size_t)n < LAMP_CPU_MAX_WORKERS ? (size_t)n : LAMP_CPU_MAX_WORKERS;
}

static lamp_status serially(size_t n_tasks, lamp_task_fn fn, void *ctx) {
  for (size_t t = 0; t < n_tasks; t++) {
    lamp_status st = fn(ctx, 0, t);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

void lamp_cpu_pool_sleep(void) {
  if (!inside_parallel) atomic_store_explicit(&the_pool.sleep_now, 1, memory_order_relaxed);
}

lamp_status lamp_cpu_parallel_for(size_t n_tasks, lamp_task_fn fn, void *ctx) {
  size_t threads = lamp_cpu_threads();
  if (threads > n_tasks) threads = n_tasks;
  if (threads <= 1 || inside_parallel) return serially(n_tasks, fn, ctx);
  pthread_once(&fork_once, register_fork);
  pthread_mutex_lock(&one_loop);
  pool *p = &the_pool;
  start_helpers(p, threads - 1);
  size_t helpers = p->helpers < threads - 1 ? p->helpers : threads - 1;
  int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  pthread_mutex_lock(&p->lock);
  p->active = threads;
  p->n_tasks = n_tasks;
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->pending, helpers);
  atomic_store(&p->sleep_now, 0);
  atomic_fetch_add(&p->generation, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  inside_parallel = 1;
  run_slot(p, 0);
  /* Workers whose helper could not be started: the calling thread runs their shares, under
     their indices, so the split (and every rounding) is the planned one. */
  for (size_t i = helpers + 1; i < threads; i++) run_slot(p, i);
  inside_parallel = 0;
  for (size_t left; (left = atomic_load(&p->pending)) > 0 && spin_while_equal(&p->pending, left, NULL);) {
  }
  pthread_mutex_lock(&p->lock);
  while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->lock);
  pthread_mutex_unlock(&p->lock);
  openblas_set_num_threads(blas_threads);
  lamp_status st = LAMP_OK;
  for (size_t i = 0; i < threads && st == LAMP_OK; i++)
    if (p->slots[i].status != LAMP_OK) st = lamp_error(p->slots[i].status, "%s", p->slots[i].message);
  pthread_mutex_unlock(&one_loop);
  return st;
}

/* The host's threads (backend.h) are this pool. */
lamp_status lamp_host_parallel_for(size_t n_tasks, lamp_task_fn fn, void *ctx) {
  return lamp_cpu_parallel_for(n_tasks, fn, ctx);
}

size_t lamp_host_threads(void) { return lamp_cpu_threads(); }
