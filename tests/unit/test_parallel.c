/*
** lamp_parallel_for's contract (backend.h): every task runs exactly once, on the worker the
** static split names (worker w of T runs tasks [w n/T, (w+1) n/T)), failures come back with
** their message, nested loops run serially. The pool's helpers poll for the next loop for a
** while and then sleep, and a multi-threaded GEMM sends them to sleep at once
** (lamp_cpu_pool_sleep); so loops run back to back, after pauses longer than the polling, and
** after such a call, and each kind must keep the contract.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

#define MAX_TASKS 64

typedef struct record {
  size_t n_tasks, threads;
  atomic_int runs[MAX_TASKS];
  atomic_int bad_worker;
} record;

static size_t worker_of(size_t task, size_t n_tasks, size_t threads) {
  for (size_t w = 0; w < threads; w++)
    if (task < n_tasks * (w + 1) / threads) return w;
  return threads;
}

static lamp_status count_task(void *ctx, size_t worker, size_t task) {
  record *r = ctx;
  atomic_fetch_add(&r->runs[task], 1);
  if (worker != worker_of(task, r->n_tasks, r->threads)) atomic_store(&r->bad_worker, 1);
  return LAMP_OK;
}

static void pause_us(long us) {
  struct timespec t = {0, us * 1000L};
  nanosleep(&t, NULL);
}

/* One loop of n tasks, checked; `gap` selects what happens before it. */
static void checked_loop(size_t n, int gap) {
  static record r;
  memset(&r, 0, sizeof r);
  r.n_tasks = n;
  r.threads = lamp_cpu_threads() < n ? lamp_cpu_threads() : n;
  if (gap == 1) pause_us(LAMP_CPU_SPIN_NS / 1000 + 300); /* longer than the helpers poll: they are asleep */
  if (gap == 2) lamp_cpu_pool_sleep();
  assert_int_equal(lamp_cpu_parallel_for(n, count_task, &r), LAMP_OK);
  for (size_t t = 0; t < n; t++)
    if (atomic_load(&r.runs[t]) != 1) fail_msg("task %zu of %zu ran %d times", t, n, atomic_load(&r.runs[t]));
  if (atomic_load(&r.bad_worker)) fail_msg("a task of %zu ran on another worker than the static split's", n);
}

static void every_task_once_on_its_worker(void **state) {
  (void)state;
  for (int i = 0; i < 20000; i++) checked_loop((size_t)(i % 37) + 1, 0);
  for (int i = 0; i < 200; i++) checked_loop((size_t)(i % 37) + 1, i % 3);
}

/* Fails on the last task (the last worker's), with a message naming it. */
static lamp_status failing_task(void *ctx, size_t worker, size_t task) {
  size_t n = *(const size_t *)ctx;
  (void)worker;
  if (task == n - 1) return lamp_error(LAMP_ERR_INVALID_ARG, "task %zu refused", task);
  return LAMP_OK;
}

static void failure_carries_its_message(void **state) {
  (void)state;
  size_t n = 8;
  for (int i = 0; i < 100; i++) {
    if (i % 2) lamp_cpu_pool_sleep();
    assert_int_equal(lamp_cpu_parallel_for(n, failing_task, &n), LAMP_ERR_INVALID_ARG);
    assert_string_equal(lamp_last_error(), "task 7 refused");
  }
  checked_loop(n, 0); /* the pool still works */
}

/* A loop inside a task runs serially, all of it, on that worker. */
static lamp_status nested_task(void *ctx, size_t worker, size_t task) {
  atomic_int *total = ctx;
  (void)worker, (void)task;
  static _Thread_local record inner;
  memset(&inner, 0, sizeof inner);
  inner.n_tasks = 5;
  inner.threads = 1;
  lamp_status st = lamp_cpu_parallel_for(5, count_task, &inner);
  for (size_t t = 0; t < 5; t++) atomic_fetch_add(total, atomic_load(&inner.runs[t]));
  if (atomic_load(&inner.bad_worker)) return lamp_error(LAMP_ERR_INTERNAL, "nested loop left its worker");
  return st;
}

static void nested_loops_run_serially(void **state) {
  (void)state;
  atomic_int total = 0;
  assert_int_equal(lamp_cpu_parallel_for(6, nested_task, &total), LAMP_OK);
  assert_int_equal(atomic_load(&total), 30);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_task_once_on_its_worker),
      cmocka_unit_test(failure_carries_its_message),
      cmocka_unit_test(nested_loops_run_serially),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
