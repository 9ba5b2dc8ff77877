/*
** Device memory from CUDA's stream-ordered pool. Blocks are taken and given back on the stream
** (cudaMallocAsync / cudaFreeAsync), so a block freed while queued work still reads it is reused
** only after that work, and nothing waits for the device. The pool keeps what is freed (its release
** threshold is "never"): a training step asks for the same sizes every time, and they come back from
** the pool without the driver. The core's ledger counts the bytes lamp_mem_alloc hands out, not the
** pool's reserve; the scratch buffer below is charged to it here, as workspace.
*/
#include <stdint.h>

#include "backend/cuda/runtime.h"

static cudaMemPool_t pool;

lamp_status lamp_cuda_pool_open(int ordinal) {
  uint64_t keep_all = UINT64_MAX;
  lamp_status st = lamp_cuda_status(cudaDeviceGetDefaultMemPool(&pool, ordinal), "finding the memory pool");
  if (st == LAMP_OK)
    st = lamp_cuda_status(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
                          "setting the memory pool's release threshold");
  return st;
}

/* cudaMallocAsync on the stream. A failure for want of memory is retried once after the pool hands
   its unused reserve back to the driver (what is free in the pool may be in blocks of other sizes). */
static cudaError_t take(void **p, size_t bytes) {
  cudaError_t err = cudaMallocAsync(p, bytes, lamp_cuda_stream());
  if (err != cudaErrorMemoryAllocation) return err;
  (void)cudaGetLastError();
  if (cudaStreamSynchronize(lamp_cuda_stream()) != cudaSuccess || cudaMemPoolTrimTo(pool, 0) != cudaSuccess)
    return err;
  return cudaMallocAsync(p, bytes, lamp_cuda_stream());
}

/* NULL with the error set; out of memory names the bytes asked for. */
static void *take_or_say(size_t bytes, const char *what) {
  void *p = NULL;
  if (lamp_cuda_activate() != LAMP_OK || lamp_cuda_refuse_in_capture("allocating device memory") != LAMP_OK)
    return NULL;
  cudaError_t err = take(&p, bytes ? bytes : 1); /* a block of 0 bytes would be NULL: a failure */
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "cuda: out of device memory: %zu bytes for %s on cuda:%d (%s)", bytes,
                         what, lamp_cuda_ordinal(), cudaGetErrorName(err));
    return NULL;
  }
  return lamp_cuda_status(err, what) == LAMP_OK ? p : NULL;
}

void *lamp_cuda_alloc(size_t bytes) { return take_or_say(bytes, "a tensor"); }

/* Errors here have no caller to go to (a free cannot fail); they are logged, not recorded, so a
   cleanup after a failure does not replace that failure's message. */
void lamp_cuda_free(void *ptr) {
  if (ptr == NULL || lamp_cuda_hold_free(ptr)) return;
  cudaError_t err = cudaFreeAsync(ptr, lamp_cuda_stream());
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    lamp_cuda_svc->log(LAMP_LOG_WARN, NULL, "cuda: freeing device memory: %s: %s", cudaGetErrorName(err),
                       cudaGetErrorString(err));
  }
}

lamp_status lamp_cuda_zero(void *ptr, size_t bytes) {
  if (bytes == 0) return LAMP_OK;
  lamp_status st = lamp_cuda_activate();
  if (st != LAMP_OK) return st;
  return lamp_cuda_status(cudaMemsetAsync(ptr, 0, bytes, lamp_cuda_stream()), "zeroing device memory");
}

/* ---- scratch --------------------------------------------------------------------------------- */
/* One buffer for the kernels' temporaries, grown by half again (or to the request) so a run
   settles on its largest need after a few steps. */

static void *scratch;
static size_t scratch_bytes;

static void scratch_release(void) {
  if (scratch == NULL) return;
  lamp_cuda_free(scratch); /* in stream order: work queued with the old buffer still finds it */
  lamp_cuda_svc->ledger_sub(LAMP_CUDA, LAMP_MEM_WORKSPACE, scratch_bytes);
  scratch = NULL;
  scratch_bytes = 0;
}

lamp_status lamp_cuda_scratch(size_t bytes, void **out) {
  if (bytes <= scratch_bytes) {
    *out = scratch;
    return LAMP_OK;
  }
  size_t grown = scratch_bytes + scratch_bytes / 2;
  size_t want = bytes > grown ? bytes : grown;
  scratch_release();
  void *p = take_or_say(want, "scratch");
  if (p == NULL && want > bytes) { /* the growth margin may be what does not fit */
    want = bytes;
    p = take_or_say(want, "scratch");
  }
  if (p == NULL) return LAMP_ERR_SYSTEM;
  scratch = p;
  scratch_bytes = want;
  lamp_cuda_svc->ledger_add(LAMP_CUDA, LAMP_MEM_WORKSPACE, scratch_bytes);
  *out = scratch;
  return LAMP_OK;
}

void lamp_cuda_memory_release(void) {
  if (!lamp_cuda_is_active()) return;
  scratch_release();
}
