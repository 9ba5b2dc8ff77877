/*
** The device side every optimizer plugin's CUDA step shares: binding to the run's GPU and the
** device table of segments (offset, count, lr and decay multipliers), uploaded when the
** segments change, which in a training run is once.
**
** The CUDA runtime is linked statically and opens the driver itself on its first call, so a
** plugin built with it loads on a machine without a driver; no CUDA call is made until the run
** trains on a GPU.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_cuda.h"

struct lamp_optim_cuda {
  int ordinal;                   /* the run's GPU, -1 until known */
  int checked;                   /* without an ordinal: the runtime has a current device */
  lamp_optim_segment *host_copy; /* what the device table holds */
  size_t n_segments, capacity;
  lamp_optim_segment *table;     /* device memory, capacity entries */
};

static lamp_status cuda_error(const lamp_host *h, lamp_ctx *ctx, const char *what, cudaError_t e) {
  return h->set_error(ctx, LAMP_ERR_SYSTEM, "%s: %s (CUDA error %d)", what, cudaGetErrorString(e),
                      (int)e);
}

/*
** The run's GPU, made the calling thread's current device on every step (cheap once its context
** exists; the step may come from another thread than create). Where the host cannot say which
** (no CUDA backend yet, or a core before ABI 1.1), the thread's current device, after checking
** once that the runtime has one: on a machine without a driver the step fails here, with CUDA's
** own reason.
*/
static lamp_status bind(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx) {
  if (cu->ordinal < 0 && LAMP_HOST_HAS(h, device_ordinal)) /* created before the device was chosen */
    cu->ordinal = h->device_ordinal(LAMP_CUDA);
  if (cu->ordinal >= 0) {
    cudaError_t e = cudaSetDevice(cu->ordinal);
    if (e == cudaSuccess) return LAMP_OK;
    char what[48];
    snprintf(what, sizeof what, "cudaSetDevice(%d)", cu->ordinal);
    return cuda_error(h, ctx, what, e);
  }
  if (cu->checked) return LAMP_OK;
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e != cudaSuccess) return cuda_error(h, ctx, "cuda step", e);
  cu->checked = 1;
  return LAMP_OK;
}

extern "C" lamp_status lamp_optim_cuda_new(const lamp_host *h, lamp_ctx *ctx,
                                           lamp_optim_cuda **out) {
  lamp_optim_cuda *cu = (lamp_optim_cuda *)calloc(1, sizeof *cu);
  if (cu == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  cu->ordinal = -1; /* asked in bind: asking now would load the CUDA backend for a CPU run */
  /* Only a run on the GPU binds now: creating the CPU step touches no CUDA. */
  if (LAMP_HOST_HAS(h, run_device) && h->run_device() == LAMP_CUDA) {
    lamp_status st = bind(cu, h, ctx);
    if (st != LAMP_OK) {
      free(cu);
      return st;
    }
  }
  *out = cu;
  return LAMP_OK;
}

extern "C" void lamp_optim_cuda_free(lamp_optim_cuda *cu) {
  if (cu == NULL) return;
  if (cu->table != NULL) (void)cudaFree(cu->table); /* at exit the runtime may be gone: ignored */
  free(cu->host_copy);
  free(cu);
}

static int segments_changed(const lamp_optim_cuda *cu, const lamp_optim_step *st) {
  return st->n_segments != cu->n_segments ||
         (st->n_segments > 0 &&
          memcmp(st->segments, cu->host_copy, st->n_segments * sizeof *st->segments) != 0);
}

/* A bigger table, allocated and freed in stream order: the steps queued before still read the
   old one. */
static lamp_status grow(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx, size_t n,
                        cudaStream_t stream) {
  lamp_optim_segment *copy = (lamp_optim_segment *)realloc(cu->host_copy, n * sizeof *copy);
  if (copy == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  cu->host_copy = copy;
  void *table = NULL;
  cudaError_t e = cudaMallocAsync(&table, n * sizeof *cu->table, stream);
  if (e != cudaSuccess) return cuda_error(h, ctx, "segment table", e);
  if (cu->table != NULL) (void)cudaFreeAsync(cu->table, stream);
  cu->table = (lamp_optim_segment *)table;
  cu->capacity = n;
  return LAMP_OK;
}

/*
** The copy's source is pageable memory the plugin owns: cudaMemcpyAsync returns once it has
** staged it, so the next change may rewrite host_copy at once, and the stream orders the device
** write after the steps that read the old table.
*/
static lamp_status upload(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                          const lamp_optim_step *st, cudaStream_t stream) {
  const size_t n = st->n_segments;
  if (n > cu->capacity) {
    lamp_status status = grow(cu, h, ctx, n, stream);
    if (status != LAMP_OK) return status;
  }
  cu->n_segments = 0; /* a failed copy leaves the table unknown: the next step uploads again */
  if (n == 0) return LAMP_OK;
  memcpy(cu->host_copy, st->segments, n * sizeof *st->segments);
  cudaError_t e = cudaMemcpyAsync(cu->table, cu->host_copy, n * sizeof *cu->table,
                                  cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) return cuda_error(h, ctx, "uploading the segment table", e);
  cu->n_segments = n;
  return LAMP_OK;
}

lamp_status lamp_optim_cuda_prepare(lamp_optim_cuda *cu, const lamp_host *h,
                                               lamp_ctx *ctx, const lamp_optim_step *st,
                                               const lamp_optim_segment **table, unsigned *grid) {
  const size_t blocks = (st->n + LAMP_OPTIM_CHUNK - 1) / LAMP_OPTIM_CHUNK;
  if (blocks > 0x7fffffffu)
    return h->set_error(ctx, LAMP_ERR_UNSUPPORTED,
                        "a slab of %zu elements is more than one launch covers (%zu)", st->n,
                        (size_t)0x7fffffffu * LAMP_OPTIM_CHUNK);
  lamp_status status = bind(cu, h, ctx);
  cudaStream_t stream = (cudaStream_t)lamp_optim_stream(st);
  if (status == LAMP_OK && segments_changed(cu, st)) status = upload(cu, h, ctx, st, stream);
  *table = cu->table;
  *grid = (unsigned)blocks;
  return status;
}

lamp_status lamp_optim_cuda_launched(const lamp_host *h, lamp_ctx *ctx,
                                                const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LAMP_OK : cuda_error(h, ctx, what, e);
}
