/*
** The nccl communicator's state, shared by its files:
**   nccl.c       the plugin table, probe, the collectives
**   setup.c      create: the bootstrap exchange, the GPU, NCCL's non-blocking init
**   watchdog.c   collectives in flight, their deadlines, the thread that aborts
**   staging.c    host buffers through device memory
**   lib.c        libnccl, opened with dlopen
*/
#ifndef LAMP_NCCL_IMPL_H
#define LAMP_NCCL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "lamp/plugin.h"
#include "lib.h"

#define NCCL_DEFAULT_TIMEOUT 300.0
/* Device and pinned host bytes each for staging host buffers (larger ones go in pieces). */
#define NCCL_STAGE_BYTES ((size_t)4 << 20)

/* One collective in flight: its completion event on the communication stream, its deadline. */
typedef struct nccl_op {
  int64_t seq;
  const char *name;     /* "all_reduce", "broadcast", ... */
  cudaEvent_t done;     /* recorded on the communication stream after the collective */
  double deadline;      /* monotonic seconds */
  int refs;             /* the pending list's, and its waiter's (a request, a blocking call) */
  int pending;          /* still on the pending list */
  struct nccl_op *next; /* the pending list (oldest first), or the spare list */
  struct nccl_op *all;  /* every op this communicator made, for destroy */
} nccl_op;

typedef struct nccl_comm {
  const lamp_host *host;
  lamp_ctx *ctx;
  const nccl_lib *lib;
  double timeout;           /* seconds */
  const char *timeout_from; /* "LAMP_COMM_TIMEOUT", "the timeout option" or "the default" */
  int rank, size, gpu;
  ncclComm_t comm;      /* NULL until NCCL's init has finished */
  cudaStream_t stream;  /* the communication stream: every collective runs here */
  cudaEvent_t ready;    /* recorded on a caller's stream for the communication stream to wait on */
  void *stage_dev;      /* NCCL_STAGE_BYTES of device memory */
  void *stage_host;     /* NCCL_STAGE_BYTES of pinned host memory */
  int64_t seq;          /* collectives started so far; #seq is the latest */

  /* The NCCL calls and the lists. Never held while the host waits for the GPU. */
  pthread_mutex_t lock;
  nccl_op *head, *tail; /* pending, oldest first */
  nccl_op *spare;       /* finished ops with their events, for reuse */
  nccl_op *all;         /* every op made (nccl_op.all) */
  int aborted;          /* ncclCommAbort was called */

  /* Set once (under lock, with broken_why written first); read without the lock by poll. */
  atomic_int broken;
  char broken_why[640];

  pthread_t watchdog;
  int watchdog_running;
  atomic_int stop;
} nccl_comm;

/* ---- helpers (watchdog.c) -------------------------------------------------------------------- */
double nccl_now(void);
void nccl_nap(long ns);
/* The error of a broken communicator, recorded on its ctx (main thread only). */
lamp_status nccl_broken_error(nccl_comm *m);
/* Marks the communicator broken with the message, aborting NCCL first. Holds lock; idempotent:
   the first reason stays. */
void nccl_break_locked(nccl_comm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* " (LAMP_COMM_TIMEOUT)" and the like: where the timeout came from, for messages. */
const char *nccl_timeout_source(const nccl_comm *m);

/* ---- collectives in flight (watchdog.c) ------------------------------------------------------ */
/* Holds lock. After an NCCL call: waits out ncclInProgress (init of lazy connections) against
   the timeout; on an error or timeout breaks the communicator. */
lamp_status nccl_settle_locked(nccl_comm *m, ncclResult_t r, const char *op, int64_t seq);
/* Holds lock. Records the completion of collective #seq on the communication stream and puts
   it on the pending list with its deadline; *out holds a reference for the caller. */
lamp_status nccl_track_locked(nccl_comm *m, const char *op, int64_t seq, nccl_op **out);
/* Drops the caller's reference. */
void nccl_op_release(nccl_comm *m, nccl_op *op);
/* Blocks the host until op completes (LAMP_OK) or the communicator breaks; drops the reference. */
lamp_status nccl_op_wait(nccl_comm *m, nccl_op *op);
/* Holds lock. A CUDA call for collective #seq failed: breaks the communicator, says so. */
lamp_status nccl_cuda_failed_locked(nccl_comm *m, const char *op, int64_t seq, cudaError_t err);
/* Waits for every pending collective (the destroy of a healthy communicator); 0 on a timeout. */
int nccl_drain(nccl_comm *m);
/* Frees the ops and their events (destroy, after the watchdog stopped). */
void nccl_ops_free(nccl_comm *m);
int nccl_watchdog_start(nccl_comm *m);
void nccl_watchdog_stop(nccl_comm *m);

/* ---- create (setup.c) ------------------------------------------------------------------------ */
lamp_status nccl_setup(nccl_comm *m, const lamp_bootstrap *boot);
/* The CUDA error as the plugin words it: "what: text (name)". */
lamp_status nccl_cuda_error(nccl_comm *m, lamp_status code, cudaError_t err, const char *what);

/* ---- host buffers (staging.c) ---------------------------------------------------------------- */
size_t nccl_dtype_size(lamp_dtype dtype);
ncclDataType_t nccl_dtype(lamp_dtype dtype);
ncclRedOp_t nccl_reduce_op(lamp_reduce_op op);
/* The blocking collectives on host buffers: each piece is copied into the pinned buffer, up to
   the device, through NCCL, back, and out; `name` is the operation the caller reports. */
lamp_status nccl_staged_all_reduce(nccl_comm *m, const char *name, void *buf, size_t count,
                                   lamp_dtype dtype, lamp_reduce_op op);
lamp_status nccl_staged_broadcast(nccl_comm *m, void *buf, size_t count, lamp_dtype dtype, int root);
lamp_status nccl_staged_all_gather(nccl_comm *m, const void *send, void *recv, size_t count,
                                   lamp_dtype dtype);
lamp_status nccl_staged_reduce_scatter(nccl_comm *m, const void *send, void *recv, size_t count,
                                       lamp_dtype dtype, lamp_reduce_op op);

#endif
