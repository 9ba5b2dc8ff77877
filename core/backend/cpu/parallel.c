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
*/
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

#define MAX_WORKERS 16

typedef struct worker {
  pthread_t thread;
  size_t index, count, n_tasks;
  lamp_task_fn fn;
  void *ctx;
  lamp_status status;
  char message[512];
} worker;

static _Thread_local int inside_parallel; /* a nested loop runs serially in its worker */

static void *run_worker(void *arg) {
  worker *w = arg;
  inside_parallel = 1;
  w->status = LAMP_OK;
  size_t end = w->n_tasks * (w->index + 1) / w->count;
  for (size_t t = w->n_tasks * w->index / w->count; t < end && w->status == LAMP_OK; t++)
    w->status = w->fn(w->ctx, w->index, t);
  if (w->status != LAMP_OK) snprintf(w->message, sizeof w->message, "%s", lamp_last_error());
  inside_parallel = 0;
  return NULL;
}

size_t lamp_backend_threads(lamp_device device) {
  if (device != LAMP_CPU) return 1;
  int n = openblas_get_num_threads();
  if (n < 1) n = 1;
  return (size_t)n < MAX_WORKERS ? (size_t)n : MAX_WORKERS;
}

static lamp_status serially(size_t n_tasks, lamp_task_fn fn, void *ctx) {
  for (size_t t = 0; t < n_tasks; t++) {
    lamp_status st = fn(ctx, 0, t);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

lamp_status lamp_parallel_for(lamp_device device, size_t n_tasks, lamp_task_fn fn, void *ctx) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("parallel_for", device);
  size_t threads = lamp_backend_threads(device);
  if (threads > n_tasks) threads = n_tasks;
  if (threads <= 1 || inside_parallel) return serially(n_tasks, fn, ctx);
  worker workers[MAX_WORKERS];
  int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  size_t started = 1;
  for (size_t i = 0; i < threads; i++)
    workers[i] = (worker){.index = i, .count = threads, .n_tasks = n_tasks, .fn = fn, .ctx = ctx};
  for (; started < threads; started++)
    if (pthread_create(&workers[started].thread, NULL, run_worker, &workers[started]) != 0) break;
  run_worker(&workers[0]);
  /* Fewer threads than planned: the calling thread takes over the tasks of those not started. */
  for (size_t i = started; i < threads && workers[0].status == LAMP_OK; i++)
    for (size_t t = n_tasks * i / threads; t < n_tasks * (i + 1) / threads && workers[0].status == LAMP_OK; t++) {
      workers[0].status = fn(ctx, 0, t);
      if (workers[0].status != LAMP_OK) snprintf(workers[0].message, sizeof workers[0].message, "%s", lamp_last_error());
    }
  for (size_t i = 1; i < started; i++) pthread_join(workers[i].thread, NULL);
  openblas_set_num_threads(blas_threads);
  for (size_t i = 0; i < started; i++)
    if (workers[i].status != LAMP_OK) return lamp_error(workers[i].status, "%s", workers[i].message);
  return LAMP_OK;
}
