/*
** Large elementwise passes over a whole slab (the per-step inf/NaN check, the rounding of
** fp32 master weights into 16-bit GEMM operands) are bound by one core's memory bandwidth, and
** while they run the other core only spins in OpenBLAS's idle loop. Splitting such a pass into
** two halves on two threads makes it faster; an elementwise pass gives the same bits however it
** is split, so nothing depends on the thread count or on timing.
*/
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

/* Below this many elements a thread's start costs more than half the pass saves. */
#define SPLIT_MIN 262144

typedef struct halves {
  lamp_range_fn fn;
  void *ctx;
  size_t n, cut;
} halves;

static lamp_status run_half(void *ctx, size_t worker, size_t task) {
  (void)worker;
  const halves *h = ctx;
  size_t begin = task == 0 ? 0 : h->cut, end = task == 0 ? h->cut : h->n;
  h->fn(h->ctx, task, begin, end);
  return LAMP_OK;
}

lamp_status lamp_cpu_split_pass(size_t n, lamp_range_fn fn, void *ctx) {
  if (n < SPLIT_MIN || lamp_cpu_threads() < 2) {
    fn(ctx, 0, 0, n);
    return LAMP_OK;
  }
  /* The cut on a 64-byte boundary of fp32 data keeps each half's vector loop aligned alike. */
  halves h = {fn, ctx, n, (n / 2) & ~(size_t)15};
  return lamp_cpu_parallel_for(2, run_half, &h);
}
