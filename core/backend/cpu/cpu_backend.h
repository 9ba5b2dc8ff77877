/*
** Private to the CPU backend: the argument checks every kernel shares, and fp32 views of
** f32/f16/bf16 arrays. 16-bit data is widened a chunk at a time into a small stack buffer, so a
** kernel is written once, in fp32, with no per-element dtype switch and no allocation.
*/
#ifndef LAMP_BACKEND_CPU_BACKEND_H
#define LAMP_BACKEND_CPU_BACKEND_H

#include <math.h>
#include <stddef.h>

#include "lamp/host.h"

/* Elements per inner block. GCC at -O2 only vectorises loops whose trip count it knows, so the
   hot loops run over fixed blocks of this many elements plus a scalar tail. */
#define LAMP_CPU_BLOCK 8

/* Floats in one stack staging buffer (2 KiB): big enough to amortise the conversion call,
   small enough to stay in L1 next to the data it is combined with. */
#define LAMP_CPU_CHUNK 512

static inline size_t lamp_cpu_min(size_t a, size_t b) { return a < b ? a : b; }

/* ---- argument checks (checks.c); each returns LAMP_OK or records the error ----------------- */

/* "<fn>: device cuda is not supported by this build". */
lamp_status lamp_cpu_unsupported_device(const char *fn, lamp_device device);

/* 1 for f32, f16 and bf16: the dtypes every floating-point kernel accepts. */
int lamp_cpu_is_float(lamp_dtype dtype);

/* "<fn>: dtype i32 not supported for <role> (expected f32, f16 or bf16)"; role may be NULL. */
lamp_status lamp_cpu_check_float(const char *fn, const char *role, lamp_dtype dtype);

/* "<fn>: <name> is NULL" when ptr is NULL and the call has elements to touch. */
lamp_status lamp_cpu_check_data(const char *fn, const char *name, const void *ptr, size_t count);

/* ---- fp32 views of f32/f16/bf16 arrays (fp32_view.c) --------------------------------------
** `first` and `n` count elements of the array's own dtype; n <= LAMP_CPU_CHUNK whenever a
** stage is involved. For f32 data the views are the data itself and nothing is copied. */

/* Elements [first, first + n) of src as fp32, read-only: src itself or the widened stage. */
const float *lamp_cpu_read(float *stage, const void *src, lamp_dtype dtype, size_t first,
                           size_t n);

/* The same elements as writable fp32: data itself or the widened stage; commit afterwards. */
float *lamp_cpu_edit(float *stage, void *data, lamp_dtype dtype, size_t first, size_t n);

/* Where to write n fp32 results destined for data[first...], without reading the data
   (it may hold anything, NaN included); commit afterwards. */
float *lamp_cpu_scratch(float *stage, void *data, lamp_dtype dtype, size_t first);

/* Stores values into data[first...], rounding to the dtype; nothing to do when values
   already is that memory (an f32 edit or scratch view). */
void lamp_cpu_commit(void *data, lamp_dtype dtype, size_t first, const float *values, size_t n);

/* One element as fp32 (for the odd single read, such as the label's logit). */
float lamp_cpu_get(const void *src, lamp_dtype dtype, size_t index);

/* ---- shared by argmax_rows and cross_entropy -------------------------------------------- */

/* Folds x[0..n) (element indices base...) into a running arg-max: the first maximum wins on
   ties, and NaN counts as the largest value (the first NaN wins), as in NumPy and PyTorch, so
   a NaN row is never reported as a clean prediction. Start from best = -INFINITY, index = 0. */
static inline void lamp_cpu_argmax_fold(const float *x, size_t n, size_t base, float *best,
                                        size_t *index) {
  float b = *best;
  size_t at = *index;
  for (size_t i = 0; i < n && !isnan(b); i++) {
    float v = x[i];
    if (v > b || isnan(v)) {
      b = v;
      at = base + i;
    }
  }
  *best = b;
  *index = at;
}

/* ---- gemm.c ------------------------------------------------------------------------------ */

/* Frees the calling thread's GEMM workspace (it is also freed when the thread exits). */
void lamp_cpu_gemm_release_workspace(void);

/*
** fn(ctx, part, begin, end) over [0, n): in one call for small n, else in two halves (part 0
** and 1) on two threads when OpenBLAS is allowed two (split.c). Only for elementwise passes,
** whose results cannot depend on the split.
*/
typedef void (*lamp_range_fn)(void *ctx, size_t part, size_t begin, size_t end);
lamp_status lamp_cpu_split_pass(size_t n, lamp_range_fn fn, void *ctx);

/* ---- parallel.c -------------------------------------------------------------------------- */

/* The pool's helpers stop polling for the next loop and sleep (called before OpenBLAS runs its
   own threads; a no-op inside a loop). */
void lamp_cpu_pool_sleep(void);

#endif
