/*
** A stand-in for the CUDA runtime and libnccl, for testing the nccl communicator's own logic (the
** watchdog, poll, wait_stream, the staging of host buffers, destroy) on a machine without a GPU.
** One shared library exports the cuda* and nccl* functions the plugin calls: the plugin's test
** build links to it instead of the CUDA runtime, and opens it as its "libnccl" through
** LAMP_NCCL_LIBRARY. Controls (fake_*) let the test stall a stream, hang NCCL, report an error.
**
** The model: device memory is host memory. A stream is a queue of items run in order, as far as
** each can: a copy or a collective runs at once unless the stream is stalled or an earlier item
** waits; "wait for event" waits until the event's stream has run past the point it was recorded;
** a collective in hang mode runs only once its communicator is aborted (as NCCL's kernels end on
** an abort). Every call moves every stream on. A fake communicator of N ranks behaves as if every
** rank held this rank's data: SUM multiplies by N, MAX and MIN keep it, all-gather repeats it,
** reduce-scatter reduces this rank's block.
*/
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_ITEMS 4096

typedef enum { ITEM_COPY, ITEM_WAIT, ITEM_COLLECTIVE } item_kind;

typedef struct item {
  item_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  cudaEvent_t event;             /* ITEM_WAIT */
  struct ncclComm *comm;         /* ITEM_COLLECTIVE */
  int op;                        /* 0 all-reduce, 1 broadcast, 2 all-gather, 3 reduce-scatter */
  ncclDataType_t type;
  ncclRedOp_t red;
  size_t count;
} item;

struct CUstream_st {
  item items[MAX_ITEMS];
  size_t head, tail; /* items[head, tail) are queued */
  uint64_t done;     /* items run so far */
  int stalled;
};

struct CUevent_st {
  struct CUstream_st *stream; /* NULL: never recorded (complete) */
  uint64_t ticket;            /* complete once stream->done reaches it */
};

struct ncclComm {
  int nranks, rank;
  int aborted;
  int init_polls; /* ncclCommGetAsyncError answers ncclInProgress this many more times */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st default_stream;
static struct CUstream_st *streams[64];
static int n_streams = 1;
static int gpus = 1, hang, init_polls_next;
static ncclResult_t async_error = ncclSuccess;
static int aborts, destroys, finalizes, collectives;
/* fake_set_query_delay: the next cudaEventQuery of the thread that set it sleeps first. */
static double query_delay;
static pthread_t query_thread;

static void progress(void);

/* ---- controls -------------------------------------------------------------------------------- */

EXPORT void fake_set_gpus(int n) { gpus = n; }
EXPORT void fake_set_hang(int on) { hang = on; }
EXPORT void fake_set_async_error(int r) { async_error = (ncclResult_t)r; }
EXPORT void fake_set_init_polls(int n) { init_polls_next = n; }
/* A waiting thread taken off its core: its next event query looks only after `seconds`. */
EXPORT void fake_set_query_delay(double seconds) {
  query_delay = seconds;
  query_thread = pthread_self();
}
EXPORT void fake_stall(cudaStream_t s, int on) {
  pthread_mutex_lock(&lock);
  (s ? s : &default_stream)->stalled = on;
  pthread_mutex_unlock(&lock);
}
EXPORT void fake_progress(void) {
  pthread_mutex_lock(&lock);
  progress();
  pthread_mutex_unlock(&lock);
}
EXPORT void fake_counts(int *n_aborts, int *n_destroys, int *n_finalizes, int *n_collectives) {
  *n_aborts = aborts;
  *n_destroys = destroys;
  *n_finalizes = finalizes;
  *n_collectives = collectives;
}
EXPORT void fake_reset(void) {
  gpus = 1;
  hang = 0;
  init_polls_next = 0;
  query_delay = 0;
  async_error = ncclSuccess;
  aborts = destroys = finalizes = collectives = 0;
}

/* ---- the streams ----------------------------------------------------------------------------- */

static struct CUstream_st *stream_of(cudaStream_t s) { return s != NULL ? s : &default_stream; }

static int event_complete(const struct CUevent_st *e) { return e->stream == NULL || e->stream->done >= e->ticket; }

static size_t type_size(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclInt32 ? 4 : t == ncclUint8 ? 1 : 2;
}

static void run_collective(const item *it) {
  size_t es = type_size(it->type), bytes = it->count * es;
  int n = it->comm->nranks;
  if (it->op == 2) {
    for (int r = 0; r < n; r++) memmove((char *)it->dst + (size_t)r * bytes, it->src, bytes);
    return;
  }
  /* a reduce-scatter reduces this rank's block of send, as an all-reduce reduces the whole */
  memmove(it->dst, (const char *)it->src + (it->op == 3 ? (size_t)it->comm->rank * bytes : 0), bytes);
  if ((it->op != 0 && it->op != 3) || it->red != ncclSum) return;
  for (size_t i = 0; i < it->count; i++) {
    if (it->type == ncclFloat32) {
      float v;
      memcpy(&v, (char *)it->dst + i * 4, 4);
      v *= (float)n;
      memcpy((char *)it->dst + i * 4, &v, 4);
    } else if (it->type == ncclInt32) {
      int32_t v;
      memcpy(&v, (char *)it->dst + i * 4, 4);
      v *= n;
      memcpy((char *)it->dst + i * 4, &v, 4);
    }
  }
}

/* Runs what can run, on every stream, until nothing moves. Holds lock. */
static void progress(void) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (int k = 0; k < n_streams; k++) {
      struct CUstream_st *s = k == 0 ? &default_stream : streams[k];
      if (s == NULL) continue;
      while (!s->stalled && s->head < s->tail) {
        item *it = &s->items[s->head % MAX_ITEMS];
        if (it->kind == ITEM_WAIT && !event_complete(it->event)) break;
        if (it->kind == ITEM_COLLECTIVE && hang && !it->comm->aborted) break;
        if (it->kind == ITEM_COPY) memmove(it->dst, it->src, it->bytes);
        if (it->kind == ITEM_COLLECTIVE && !it->comm->aborted) run_collective(it);
        if (it->kind == ITEM_WAIT) free(it->event); /* the copy cudaStreamWaitEvent made */
        s->head++;
        s->done++;
        moved = 1;
      }
    }
  }
}

static cudaError_t enqueue(cudaStream_t stream, const item *it) {
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of(stream);
  if (s->tail - s->head >= MAX_ITEMS) {
    pthread_mutex_unlock(&lock);
    return cudaErrorLaunchOutOfResources;
  }
  s->items[s->tail++ % MAX_ITEMS] = *it;
  progress();
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

/* ---- the CUDA runtime ------------------------------------------------------------------------ */

EXPORT const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }
EXPORT const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }

EXPORT cudaError_t cudaGetDeviceCount(int *n) {
  *n = gpus;
  return gpus > 0 ? cudaSuccess : cudaErrorNoDevice;
}

EXPORT cudaError_t cudaSetDevice(int d) { return d >= 0 && d < gpus ? cudaSuccess : cudaErrorInvalidDevice; }

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  (void)flags;
  pthread_mutex_lock(&lock);
  struct CUstream_st *st = n_streams < 64 ? calloc(1, sizeof *st) : NULL;
  if (st != NULL) streams[n_streams++] = st;
  pthread_mutex_unlock(&lock);
  *s = st;
  return st != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  (void)s; /* kept: an aborted collective may still name it */
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  *e = calloc(1, sizeof **e);
  return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of(stream);
  e->stream = s;
  e->ticket = s->done + (s->tail - s->head);
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (query_delay > 0 && pthread_equal(pthread_self(), query_thread)) {
    struct timespec t = {(time_t)query_delay, (long)((query_delay - (double)(time_t)query_delay) * 1e9)};
    query_delay = 0;
    nanosleep(&t, NULL);
  }
  pthread_mutex_lock(&lock);
  progress();
  int complete = event_complete(e);
  pthread_mutex_unlock(&lock);
  return complete ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  /* The wait is for the event as recorded now. */
  struct CUevent_st *copy = malloc(sizeof *copy);
  if (copy == NULL) return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&lock);
  *copy = *e;
  pthread_mutex_unlock(&lock);
  item it = {.kind = ITEM_WAIT, .event = copy};
  return enqueue(stream, &it);
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  (void)kind;
  item it = {.kind = ITEM_COPY, .dst = dst, .src = src, .bytes = bytes};
  return enqueue(stream, &it);
}

EXPORT cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = malloc(bytes);
  return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaMalloc(p, bytes); }

EXPORT cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}

EXPORT cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }

/* ---- NCCL ------------------------------------------------------------------------------------ */

EXPORT ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  memcpy(id->internal, "fake nccl id", 12);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t *config) {
  (void)id;
  if (config == NULL || config->blocking != 0) return ncclInvalidUsage; /* the plugin must ask for non-blocking */
  struct ncclComm *c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  c->nranks = nranks;
  c->rank = rank;
  c->init_polls = init_polls_next;
  *comm = c;
  return c->init_polls > 0 ? ncclInProgress : ncclSuccess;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state) {
  pthread_mutex_lock(&lock);
  if (comm->init_polls > 0) {
    comm->init_polls--;
    *state = ncclInProgress;
  } else {
    *state = async_error;
  }
  pthread_mutex_unlock(&lock);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  (void)comm;
  finalizes++;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  destroys++;
  free(comm);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  pthread_mutex_lock(&lock);
  aborts++;
  comm->aborted = 1; /* kept, not freed: queued collectives still name it (a leak in a test) */
  progress();
  pthread_mutex_unlock(&lock);
  return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclRemoteError ? "remote process exited or there was a network error" : "fake NCCL error";
}

EXPORT const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return async_error != ncclSuccess ? "peer 1 went away" : "";
}

static ncclResult_t collective(int op, const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream) {
  collectives++;
  item it = {.kind = ITEM_COLLECTIVE, .dst = recv, .src = send, .comm = comm, .op = op, .type = type, .red = red,
             .count = count};
  return enqueue(stream, &it) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
  return collective(0, send, recv, count, type, op, comm, stream);
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  (void)root;
  return collective(1, send, recv, count, type, ncclSum, comm, stream);
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  cudaStream_t stream) {
  return collective(2, send, recv, count, type, ncclSum, comm, stream);
}

EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t stream) {
  return collective(3, send, recv, count, type, op, comm, stream);
}
