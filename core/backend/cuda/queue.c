/*
** The one stream all of the core's work goes to, and the copies and events ordered on it. The
** stream is non-blocking: it never waits for CUDA's legacy default stream, so work from libraries
** that use that stream does not serialise lamp's (and lamp never uses it either).
**
** Blocking copies queue on the stream and wait for it, which also reports the failure of any work
** queued before (backend.h's rule). upload_async copies the host data into one of two pinned
** staging buffers and queues the transfer from there: the caller's buffer is free again on return
** (more than backend.h promises), the transfer overlaps the device's work, and the buffer is
** reused only after the transfer queued from it two uploads ago is done.
*/
#include <string.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"

static cudaStream_t stream;
static int stream_made;

lamp_status lamp_cuda_queue_open(void) {
  if (stream_made) return LAMP_OK;
  lamp_status st = lamp_cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating the stream");
  stream_made = st == LAMP_OK;
  return st;
}

cudaStream_t lamp_cuda_stream(void) { return stream; }

void *lamp_cuda_stream_handle(void) { return lamp_cuda_activate() == LAMP_OK ? (void *)stream : NULL; }

/* After a wait for the stream: its CUDA error, or else a fault a kernel recorded in the work just
   waited for (a label out of range), which kernels.h reports without another CUDA call. */
static lamp_status waited(cudaError_t err, const char *what) {
  lamp_status st = lamp_cuda_status(err, what);
  return st == LAMP_OK ? lamp_cuda_kernel_faults() : st;
}

lamp_status lamp_cuda_synchronize(void) {
  if (!lamp_cuda_is_active()) return LAMP_OK; /* nothing was ever queued */
  lamp_status st = lamp_cuda_refuse_in_capture("synchronize");
  if (st != LAMP_OK) return st;
  return waited(cudaStreamSynchronize(stream), "synchronize");
}

/* Queues one transfer and waits for the stream: the blocking copies. */
static lamp_status transfer_and_wait(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                     const char *what) {
  lamp_status st = lamp_cuda_activate();
  if (st == LAMP_OK) st = lamp_cuda_refuse_in_capture(what);
  if (st == LAMP_OK) st = lamp_cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, stream), what);
  if (st == LAMP_OK) st = waited(cudaStreamSynchronize(stream), what);
  return st;
}

lamp_status lamp_cuda_upload(void *dst, const void *host_src, size_t bytes) {
  return transfer_and_wait(dst, host_src, bytes, cudaMemcpyHostToDevice, "upload");
}

lamp_status lamp_cuda_download(void *host_dst, const void *src, size_t bytes) {
  return transfer_and_wait(host_dst, src, bytes, cudaMemcpyDeviceToHost, "download");
}

lamp_status lamp_cuda_copy(void *dst, const void *src, size_t bytes) {
  lamp_status st = lamp_cuda_activate();
  if (st != LAMP_OK) return st;
  return lamp_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
}

/* ---- pinned staging for upload_async --------------------------------------------------------- */
/* Two buffers used in turn, each with the event recorded after the transfer queued from it. */

/* Larger uploads are rare (whole models, not batches) and not worth pinning that much host memory:
   they are done blocking, which the contract allows. */
#define STAGING_MAX ((size_t)64 << 20)

typedef struct staging {
  void *host; /* pinned; charged to the ledger as host workspace */
  size_t bytes;
  cudaEvent_t done; /* recorded after the last transfer from host */
  int queued;       /* done has been recorded since the last wait */
} staging;

static staging ring[2];
static int next_slot;

/* Waits until the slot's last transfer is done. */
static lamp_status drain(staging *s) {
  if (!s->queued) return LAMP_OK;
  s->queued = 0;
  return lamp_cuda_status(cudaEventSynchronize(s->done), "upload_async: waiting for a staging buffer");
}

static void release_slot(staging *s) {
  if (s->host == NULL) return;
  cudaFreeHost(s->host);
  lamp_cuda_svc->ledger_sub(LAMP_HOST, LAMP_MEM_WORKSPACE, s->bytes);
  s->host = NULL;
  s->bytes = 0;
}

/* The slot, drained, holding at least `bytes`; NULL-host when pinned memory is refused. */
static lamp_status ready_slot(staging *s, size_t bytes) {
  lamp_status st = drain(s);
  if (st != LAMP_OK) return st;
  if (s->done == NULL) {
    st = lamp_cuda_status(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "upload_async: an event");
    if (st != LAMP_OK) return st;
  }
  if (s->bytes >= bytes) return LAMP_OK;
  release_slot(s);
  size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes; /* small batches share one size */
  if (cudaHostAlloc(&s->host, want, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    s->host = NULL; /* pinned memory is limited: the caller falls back to a blocking upload */
    return LAMP_OK;
  }
  s->bytes = want;
  lamp_cuda_svc->ledger_add(LAMP_HOST, LAMP_MEM_WORKSPACE, s->bytes);
  return LAMP_OK;
}

lamp_status lamp_cuda_upload_async(void *dst, const void *host_src, size_t bytes) {
  lamp_status st = lamp_cuda_activate();
  if (st == LAMP_OK) st = lamp_cuda_refuse_in_capture("upload_async");
  if (st != LAMP_OK) return st;
  if (bytes > STAGING_MAX) return lamp_cuda_upload(dst, host_src, bytes);
  staging *s = &ring[next_slot];
  st = ready_slot(s, bytes);
  if (st != LAMP_OK) return st;
  if (s->host == NULL) return lamp_cuda_upload(dst, host_src, bytes);
  next_slot ^= 1;
  memcpy(s->host, host_src, bytes);
  st = lamp_cuda_status(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, stream), "upload_async");
  if (st == LAMP_OK) st = lamp_cuda_status(cudaEventRecord(s->done, stream), "upload_async");
  s->queued = st == LAMP_OK;
  return st;
}

void lamp_cuda_queue_release(void) {
  for (int i = 0; i < 2; i++) {
    if (drain(&ring[i]) != LAMP_OK) continue; /* a failed transfer: keep the buffer rather than free it under it */
    release_slot(&ring[i]);
  }
}

/* ---- events ---------------------------------------------------------------------------------- */
/* Points in the stream the host waits for. No timing, which makes them cheaper. */

lamp_status lamp_cuda_event_new(void **event) {
  cudaEvent_t e = NULL;
  lamp_status st = lamp_cuda_activate();
  if (st == LAMP_OK) st = lamp_cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event_new");
  *event = st == LAMP_OK ? (void *)e : NULL;
  return st;
}

void lamp_cuda_event_free(void *event) {
  if (event != NULL) cudaEventDestroy((cudaEvent_t)event);
}

lamp_status lamp_cuda_event_record(void *event) {
  lamp_status st = lamp_cuda_refuse_in_capture("event_record");
  if (st != LAMP_OK) return st;
  return lamp_cuda_status(cudaEventRecord((cudaEvent_t)event, stream), "event_record");
}

/* Never recorded: at once (cudaEventSynchronize on a fresh event returns success). */
lamp_status lamp_cuda_event_wait(void *event) {
  lamp_status st = lamp_cuda_refuse_in_capture("event_wait");
  if (st != LAMP_OK) return st;
  return waited(cudaEventSynchronize((cudaEvent_t)event), "event_wait");
}
