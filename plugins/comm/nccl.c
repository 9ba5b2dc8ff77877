/*
** nccl: the communicator of a data-parallel run on CUDA GPUs, one process per GPU (NCCL between
** them), started by a launcher (mpirun, scripts/lamp-run) whose bootstrap carries NCCL's unique
** id. Built where the toolkit has nccl.h; it loads anywhere: the CUDA runtime is linked in
** statically and libnccl.so.2 is opened at first need (plugins/comm/nccl/lib.c), so on a machine
** without a driver or without NCCL the probe scores 0 and says which is missing.
**
** Never hangs. NCCL runs non-blocking (config.blocking = 0): its init and every call return at
** once and are polled against the timeout (precedence as mpi's: the option, else
** LAMP_COMM_TIMEOUT, else 300) and the run's abort flag. Every collective ends with an event on
** the plugin's communication stream; a watchdog thread aborts the communicator (ncclCommAbort)
** when one is late or NCCL reports an error, and every later call fails with the reason: the
** operation, its sequence number, the rank and the timeout (plugins/comm/nccl/watchdog.c).
**
** Streams. all_reduce_enqueue orders the all-reduce after the work on the caller's stream (an
** event the communication stream waits on) and returns; wait_stream makes a stream wait for it
** (again an event: the host never waits); poll reports a failure without blocking. The blocking
** forms (all_reduce, broadcast, all_gather, reduce_scatter, barrier) are the same followed by a
** host wait on the completion event, with its deadline; on cuda buffers they first follow the
** core's stream.
** Host buffers (LAMP_CPU) go through pinned and device staging buffers (staging.c).
**
** Dtypes f32, f16, bf16, i32, u8; reductions SUM, MAX, MIN on each (NCCL reduces 16-bit values
** in their own type: the trainer reduces in fp32).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_impl.h"

#define WHO "nccl"
#define REQUEST_MAGIC 0x6e63636cu /* "nccl" */
/* Above mpi's 2: on a CUDA run under a launcher NCCL is the better of the two. */
#define SCORE_LAUNCHED 3

/* The variables by which a launcher says it started several processes: mpirun and lamp-run, and
   the world size of the core's file-store bootstrap (LAMP_WORLD_SIZE, or torchrun's WORLD_SIZE). */
static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "LAMP_WORLD_SIZE",
                                            "WORLD_SIZE"};

struct lamp_request {
  uint32_t magic;
  nccl_op *op;
};

static const lamp_param nccl_params[] = {
    {"timeout", NCCL_DEFAULT_TIMEOUT, 0.1, 604800.0,
     "seconds a collective (or NCCL's init) may take before the communicator is aborted (default: "
     "$LAMP_COMM_TIMEOUT, else 300)"},
};

/* ---- probe ----------------------------------------------------------------------------------- */

static const char *launcher(char *value, size_t size) {
  for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) {
    const char *v = getenv(launcher_vars[i]);
    if (v != NULL && v[0] != '\0') {
      snprintf(value, size, "%s", v);
      return launcher_vars[i];
    }
  }
  return NULL;
}

/* The CUDA runtime's answer to "which GPUs are there", in the words of the cuda backend. */
static int gpu_count(char *reason, size_t size) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  const char *text = cudaGetErrorString(err), *name = cudaGetErrorName(err);
  if (err == cudaErrorInsufficientDriver)
    snprintf(reason, size, "no usable CUDA driver: %s (%s)", text, name);
  else if (err == cudaErrorNoDevice)
    snprintf(reason, size, "no CUDA device: %s (%s)", text, name);
  else if (err != cudaSuccess)
    snprintf(reason, size, "CUDA cannot start: %s (%s)", text, name);
  else if (n <= 0)
    snprintf(reason, size, "no CUDA device: the driver reports none");
  return err == cudaSuccess ? n : 0;
}

/*
** Cheap and without a device context: the run device, libnccl, the GPU count. A CUDA run under a
** launcher scores 3 (mpi scores 2 there); one process without a launcher scores 0, so that
** `auto` keeps single (nothing to communicate; --comm=nccl still works there).
*/
static int nccl_probe(const lamp_host *h, char *reason, size_t size) {
  if (!LAMP_HOST_HAS(h, run_device)) {
    snprintf(reason, size, "this core (ABI %u.%u) does not say the run device", h->abi_major, h->abi_minor);
    return 0;
  }
  lamp_device d = h->run_device();
  if (d != LAMP_CUDA) {
    snprintf(reason, size, "the run device is %s: nccl moves cuda buffers (train with --device=cuda)",
             d == LAMP_CPU ? "cpu" : "not cuda");
    return 0;
  }
  char why[512];
  const nccl_lib *lib = nccl_lib_open(why, sizeof why);
  if (lib == NULL) {
    snprintf(reason, size, "%s", why);
    return 0;
  }
  int gpus = gpu_count(reason, size);
  if (gpus == 0) return 0;
  char version[32], value[64];
  nccl_version_text(lib->version, version, sizeof version);
  const char *var = launcher(value, sizeof value);
  if (var == NULL) {
    snprintf(reason, size, "one process without a launcher: single serves (NCCL %s, %d GPU%s)", version, gpus,
             gpus == 1 ? "" : "s");
    return 0;
  }
  snprintf(reason, size, "cuda run under a launcher (%s=%s): NCCL %s, %d GPU%s", var, value, version, gpus,
           gpus == 1 ? "" : "s");
  return SCORE_LAUNCHED;
}

/* ---- create, destroy ------------------------------------------------------------------------- */

/* option > LAMP_COMM_TIMEOUT > 300, as mpi resolves it. */
static lamp_status resolve_timeout(nccl_comm *m, double option) {
  m->timeout = option;
  m->timeout_from = option != NCCL_DEFAULT_TIMEOUT ? "the comm option 'timeout'"
                                                   : "the default; LAMP_COMM_TIMEOUT sets it";
  const char *env = getenv("LAMP_COMM_TIMEOUT");
  if (option != NCCL_DEFAULT_TIMEOUT || env == NULL || env[0] == '\0') return LAMP_OK;
  char *end = NULL;
  double v = strtod(env, &end);
  if (end == env || *end != '\0' || !(v >= nccl_params[0].min_value && v <= nccl_params[0].max_value))
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE, "LAMP_COMM_TIMEOUT must be seconds in [%g, %g], got '%s'",
                              nccl_params[0].min_value, nccl_params[0].max_value, env);
  m->timeout = v;
  m->timeout_from = "LAMP_COMM_TIMEOUT";
  return LAMP_OK;
}

static lamp_status check_bootstrap(nccl_comm *m, const lamp_bootstrap *b) {
  if (b->struct_size < sizeof *b || b->broadcast == NULL || b->all_gather == NULL)
    return m->host->set_error(m->ctx, LAMP_ERR_INTERNAL, "the bootstrap is incomplete (struct_size %u, need %zu)",
                              b->struct_size, sizeof *b);
  if (b->size < 1 || b->rank < 0 || b->rank >= b->size || b->local_size < 1 || b->local_rank < 0 ||
      b->local_rank >= b->local_size)
    return m->host->set_error(m->ctx, LAMP_ERR_INTERNAL,
                              "the bootstrap says rank %d of %d, local rank %d of %d", b->rank, b->size,
                              b->local_rank, b->local_size);
  return LAMP_OK;
}

/* What create leaves on the device; the communicator is already aborted or never was. */
static void release_device(nccl_comm *m) {
  nccl_ops_free(m);
  if (m->ready != NULL) cudaEventDestroy(m->ready);
  if (m->stream != NULL) cudaStreamDestroy(m->stream);
  /* Freeing synchronises the device: after an abort that could wait on a wedged GPU. The process
     is on its way out then; the memory goes with it. */
  if (atomic_load(&m->broken)) return;
  if (m->stage_dev != NULL) cudaFree(m->stage_dev);
  if (m->stage_host != NULL) cudaFreeHost(m->stage_host);
}

static void free_comm(nccl_comm *m) {
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static lamp_status make_comm(const lamp_host *h, lamp_ctx *ctx, const double *params, const lamp_bootstrap *boot,
                             void **out) {
  nccl_comm *m = calloc(1, sizeof *m);
  if (m == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  m->host = h;
  m->ctx = ctx;
  m->size = 1;
  pthread_mutex_init(&m->lock, NULL);
  atomic_init(&m->broken, 0);
  atomic_init(&m->stop, 0);
  lamp_status st = resolve_timeout(m, params[0]);
  if (st == LAMP_OK && boot != NULL) st = check_bootstrap(m, boot);
  if (st == LAMP_OK && boot != NULL) {
    m->rank = boot->rank;
    m->size = boot->size;
  }
  if (st == LAMP_OK) st = nccl_setup(m, boot);
  if (st == LAMP_OK && !nccl_watchdog_start(m)) {
    m->lib->comm_abort(m->comm);
    m->comm = NULL;
    st = h->set_error(ctx, LAMP_ERR_SYSTEM, "cannot start the watchdog thread");
  }
  if (st != LAMP_OK) {
    release_device(m);
    free_comm(m);
    return st;
  }
  char version[32];
  nccl_version_text(m->lib->version, version, sizeof version);
  h->log(LAMP_LOG_INFO, WHO, "rank %d of %d on cuda:%d, NCCL %s (%s), timeout %g s", m->rank, m->size, m->gpu,
         version, m->lib->path, m->timeout);
  *out = m;
  return LAMP_OK;
}

static lamp_status nccl_create_with_bootstrap(const lamp_host *h, lamp_ctx *ctx, const double *params,
                                              const lamp_bootstrap *boot, void **comm) {
  if (boot == NULL) return h->set_error(ctx, LAMP_ERR_INTERNAL, "create_with_bootstrap: NULL bootstrap");
  return make_comm(h, ctx, params, boot, comm);
}

/* Without a bootstrap (a core older than ABI 1.3) NCCL's id cannot travel: one process only. */
static lamp_status nccl_create(const lamp_host *h, lamp_ctx *ctx, const double *params, void **comm) {
  static const char *const world_sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof world_sizes / sizeof world_sizes[0]; i++) {
    const char *v = getenv(world_sizes[i]);
    if (v != NULL && atoi(v) > 1)
      return h->set_error(ctx, LAMP_ERR_UNSUPPORTED,
                          "created without a bootstrap, which serves one process, but %s=%s: this core (ABI %u.%u) "
                          "cannot hand NCCL's unique id to the other ranks",
                          world_sizes[i], v, h->abi_major, h->abi_minor);
  }
  return make_comm(h, ctx, params, NULL, comm);
}

/* ncclCommFinalize flushes what is queued; non-blocking, so polled against the timeout. Its
   final state: ncclInProgress when the deadline passed. */
static ncclResult_t finalize(nccl_comm *m) {
  ncclResult_t state = m->lib->comm_finalize(m->comm);
  double deadline = nccl_now() + m->timeout;
  while (state == ncclInProgress && nccl_now() <= deadline) {
    nccl_nap(1000000L);
    ncclResult_t q = m->lib->comm_get_async_error(m->comm, &state);
    if (q != ncclSuccess) state = q;
  }
  return state;
}

static void nccl_destroy(void *comm) {
  nccl_comm *m = comm;
  if (m == NULL) return;
  /* Whatever is still queued finishes first (or breaks the communicator at its deadline). */
  nccl_drain(m);
  nccl_watchdog_stop(m);
  ncclResult_t state = atomic_load(&m->broken) ? ncclSuccess : finalize(m);
  if (state != ncclSuccess) {
    pthread_mutex_lock(&m->lock);
    if (state == ncclInProgress)
      nccl_break_locked(m, "destroy on rank %d: ncclCommFinalize did not finish within %g s (%s); the communicator "
                        "was aborted", m->rank, m->timeout, nccl_timeout_source(m));
    else
      nccl_break_locked(m, "destroy on rank %d: ncclCommFinalize failed: %s; the communicator was aborted", m->rank,
                        m->lib->get_error_string(state));
    pthread_mutex_unlock(&m->lock);
  }
  if (atomic_load(&m->broken)) {
    /* ncclCommDestroy would wait for the collectives the abort ended: never call it now. */
    if (!m->aborted) m->lib->comm_abort(m->comm);
    m->host->log(LAMP_LOG_WARN, WHO, "destroyed after an abort (%s); its staging buffers are left to the exiting process",
                 m->broken_why);
  } else {
    m->lib->comm_destroy(m->comm);
  }
  m->comm = NULL;
  release_device(m);
  free_comm(m);
}

static int nccl_rank(void *comm) { return ((nccl_comm *)comm)->rank; }

static int nccl_size(void *comm) { return ((nccl_comm *)comm)->size; }

/* ---- argument checks ------------------------------------------------------------------------- */

static lamp_status check_buffer(nccl_comm *m, const char *op, const void *buf, size_t count, lamp_dtype dtype,
                                lamp_device device) {
  if (atomic_load(&m->broken)) return nccl_broken_error(m);
  if (nccl_dtype_size(dtype) == 0)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown dtype %d", op, (int)dtype);
  if (device != LAMP_CPU && device != LAMP_CUDA)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown device %d", op, (int)device);
  if (buf == NULL && count > 0)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: NULL buffer for %zu %s elements", op, count,
                              lamp_dtype_name(dtype));
  return LAMP_OK;
}

static lamp_status check_reduce_op(nccl_comm *m, const char *op, lamp_reduce_op reduce) {
  if (reduce == LAMP_REDUCE_SUM || reduce == LAMP_REDUCE_MAX || reduce == LAMP_REDUCE_MIN) return LAMP_OK;
  return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown reduce op %d", op, (int)reduce);
}

/* ---- collectives on device buffers ----------------------------------------------------------- */

typedef enum { CALL_ALL_REDUCE, CALL_BROADCAST, CALL_ALL_GATHER, CALL_REDUCE_SCATTER } call_kind;

typedef struct call {
  call_kind kind;
  const char *name;
  const void *send;
  void *recv;
  size_t count;
  lamp_dtype dtype;
  lamp_reduce_op op;
  int root;
} call;

static ncclResult_t issue(nccl_comm *m, const call *c) {
  ncclDataType_t t = nccl_dtype(c->dtype);
  switch (c->kind) {
  case CALL_ALL_REDUCE:
    return m->lib->all_reduce(c->send, c->recv, c->count, t, nccl_reduce_op(c->op), m->comm, m->stream);
  case CALL_BROADCAST: return m->lib->broadcast(c->send, c->recv, c->count, t, c->root, m->comm, m->stream);
  case CALL_REDUCE_SCATTER:
    return m->lib->reduce_scatter(c->send, c->recv, c->count, t, nccl_reduce_op(c->op), m->comm, m->stream);
  default: return m->lib->all_gather(c->send, c->recv, c->count, t, m->comm, m->stream);
  }
}

/*
** Queues collective c after the work already on `stream` and returns its op (one reference for
** the caller), without waiting for either.
*/
static lamp_status start(nccl_comm *m, const call *c, void *stream, nccl_op **out) {
  pthread_mutex_lock(&m->lock);
  if (atomic_load(&m->broken)) {
    pthread_mutex_unlock(&m->lock);
    return nccl_broken_error(m);
  }
  int64_t seq = ++m->seq;
  cudaError_t err = cudaEventRecord(m->ready, (cudaStream_t)stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(m->stream, m->ready, 0);
  lamp_status st = err != cudaSuccess ? nccl_cuda_failed_locked(m, c->name, seq, err)
                                      : nccl_settle_locked(m, issue(m, c), c->name, seq);
  if (st == LAMP_OK) st = nccl_track_locked(m, c->name, seq, out);
  pthread_mutex_unlock(&m->lock);
  return st;
}

/* The core's queue on cuda, which the blocking forms follow. */
static void *core_stream(const nccl_comm *m) {
  return LAMP_HOST_HAS(m->host, stream) ? m->host->stream(LAMP_CUDA) : NULL;
}

static lamp_status run_blocking(nccl_comm *m, const call *c) {
  nccl_op *op = NULL;
  lamp_status st = start(m, c, core_stream(m), &op);
  return st == LAMP_OK ? nccl_op_wait(m, op) : st;
}

/* ---- the collectives ------------------------------------------------------------------------- */

static lamp_status nccl_all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                   lamp_device device) {
  nccl_comm *m = comm;
  lamp_status st = check_buffer(m, "all_reduce", buf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduce_op(m, "all_reduce", op);
  if (st != LAMP_OK || count == 0) return st;
  if (device == LAMP_CPU) return nccl_staged_all_reduce(m, "all_reduce", buf, count, dtype, op);
  call c = {CALL_ALL_REDUCE, "all_reduce", buf, buf, count, dtype, op, 0};
  return run_blocking(m, &c);
}

static lamp_status nccl_broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                                  lamp_device device) {
  nccl_comm *m = comm;
  lamp_status st = check_buffer(m, "broadcast", buf, count, dtype, device);
  if (st == LAMP_OK && (root < 0 || root >= m->size))
    st = m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "broadcast: root %d out of range for %d ranks", root,
                            m->size);
  if (st != LAMP_OK || count == 0) return st;
  if (device == LAMP_CPU) return nccl_staged_broadcast(m, buf, count, dtype, root);
  call c = {CALL_BROADCAST, "broadcast", buf, buf, count, dtype, LAMP_REDUCE_SUM, root};
  return run_blocking(m, &c);
}

static lamp_status nccl_barrier(void *comm) {
  nccl_comm *m = comm;
  if (atomic_load(&m->broken)) return nccl_broken_error(m);
  /* NCCL has no barrier: an all-reduce of one int, which no rank finishes before all started. */
  int32_t one = 1;
  return nccl_staged_all_reduce(m, "barrier", &one, 1, LAMP_I32, LAMP_REDUCE_SUM);
}

static lamp_status nccl_all_gather(void *comm, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype,
                                   lamp_device device) {
  nccl_comm *m = comm;
  lamp_status st = check_buffer(m, "all_gather", sendbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_buffer(m, "all_gather", recvbuf, count, dtype, device);
  if (st != LAMP_OK || count == 0) return st;
  if (device == LAMP_CPU) return nccl_staged_all_gather(m, sendbuf, recvbuf, count, dtype);
  call c = {CALL_ALL_GATHER, "all_gather", sendbuf, recvbuf, count, dtype, LAMP_REDUCE_SUM, 0};
  return run_blocking(m, &c);
}

/* recv[count] = the op over every rank's block `rank` of send[size * count]. */
static lamp_status nccl_reduce_scatter(void *comm, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype,
                                       lamp_reduce_op op, lamp_device device) {
  nccl_comm *m = comm;
  lamp_status st = check_buffer(m, "reduce_scatter", sendbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_buffer(m, "reduce_scatter", recvbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduce_op(m, "reduce_scatter", op);
  if (st != LAMP_OK || count == 0) return st;
  if (device == LAMP_CPU) return nccl_staged_reduce_scatter(m, sendbuf, recvbuf, count, dtype, op);
  call c = {CALL_REDUCE_SCATTER, "reduce_scatter", sendbuf, recvbuf, count, dtype, op, 0};
  return run_blocking(m, &c);
}

static lamp_status nccl_all_reduce_enqueue(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                           lamp_reduce_op op, lamp_device device, void *stream,
                                           lamp_request **req) {
  nccl_comm *m = comm;
  lamp_status st = check_buffer(m, "all_reduce_enqueue", buf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduce_op(m, "all_reduce_enqueue", op);
  if (st == LAMP_OK && device != LAMP_CUDA)
    st = m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                            "all_reduce_enqueue: cuda buffers only (host buffers go through all_reduce)");
  if (st == LAMP_OK && req == NULL)
    st = m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "all_reduce_enqueue: NULL request");
  if (st != LAMP_OK) return st;
  lamp_request *r = calloc(1, sizeof *r);
  if (r == NULL) return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "out of memory");
  call c = {CALL_ALL_REDUCE, "all_reduce", buf, buf, count, dtype, op, 0};
  st = start(m, &c, stream, &r->op);
  if (st != LAMP_OK) {
    free(r);
    return st;
  }
  r->magic = REQUEST_MAGIC;
  *req = r;
  return LAMP_OK;
}

static lamp_status nccl_wait_stream(void *comm, lamp_request *req, void *stream) {
  nccl_comm *m = comm;
  if (req == NULL || req->magic != REQUEST_MAGIC)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "wait_stream: not a request of this communicator");
  nccl_op *op = req->op;
  req->magic = 0;
  free(req);
  lamp_status st = LAMP_OK;
  pthread_mutex_lock(&m->lock);
  if (atomic_load(&m->broken)) {
    st = nccl_broken_error(m);
  } else {
    cudaError_t err = cudaStreamWaitEvent((cudaStream_t)stream, op->done, 0);
    if (err != cudaSuccess) st = nccl_cuda_failed_locked(m, op->name, op->seq, err);
  }
  pthread_mutex_unlock(&m->lock);
  nccl_op_release(m, op);
  return st;
}

static lamp_status nccl_poll(void *comm) {
  nccl_comm *m = comm;
  return atomic_load(&m->broken) ? nccl_broken_error(m) : LAMP_OK;
}

static const lamp_comm_v1 nccl_table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "nccl", "1.0",
                               "NCCL between CUDA GPUs, one process each; stream-ordered all-reduce; a watchdog "
                               "aborts a late or failed collective and names it"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA),
            .dtypes = LAMP_BIT(LAMP_F32) | LAMP_BIT(LAMP_F16) | LAMP_BIT(LAMP_BF16) | LAMP_BIT(LAMP_I32) |
                      LAMP_BIT(LAMP_U8),
            .params = nccl_params,
            .n_params = sizeof nccl_params / sizeof nccl_params[0],
            .probe = nccl_probe},
    .create = nccl_create,
    .destroy = nccl_destroy,
    .rank = nccl_rank,
    .size = nccl_size,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .create_with_bootstrap = nccl_create_with_bootstrap,
    .all_reduce_enqueue = nccl_all_reduce_enqueue,
    .wait_stream = nccl_wait_stream,
    .poll = nccl_poll,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &nccl_table.hdr;
}
