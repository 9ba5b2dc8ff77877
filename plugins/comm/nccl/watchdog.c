/*
** Collectives in flight and the watchdog that keeps them from hanging the run.
**
** Every collective ends with an event recorded on the communication stream (an op). The op sits
** on the pending list, oldest first, with its deadline (start + timeout). A thread checks the
** list every few milliseconds: finished ops leave it; when the oldest is past its deadline, when
** the run is being aborted (host->abort_flag), when its event reports a CUDA error, or when
** ncclCommGetAsyncError reports one, the thread calls ncclCommAbort and marks the communicator
** broken. NCCL kernels waiting for a dead peer end with the abort, so nothing on the GPU waits
** for ever; every later call on the communicator then fails with the first reason.
**
** The lock serialises the NCCL calls with the abort (a communicator is not thread-safe) and
** guards the lists. Only non-blocking calls are made under it: the host never waits for the GPU
** while holding it, so the watchdog always gets its turn.
*/
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_impl.h"

#define WATCHDOG_PERIOD_NS 5000000L /* 5 ms */
#define SPIN_SECONDS 0.001          /* a blocking wait spins this long before it naps */

double nccl_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void nccl_nap(long ns) {
  struct timespec t = {ns / 1000000000L, ns % 1000000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

const char *nccl_timeout_source(const nccl_comm *m) { return m->timeout_from; }

static int aborting(const nccl_comm *m) {
  return m->host->abort_flag != NULL && *m->host->abort_flag != 0;
}

lamp_status nccl_broken_error(nccl_comm *m) {
  return m->host->set_error(m->ctx, LAMP_ERR_REMOTE, "%s", m->broken_why);
}

void nccl_break_locked(nccl_comm *m, const char *fmt, ...) {
  if (atomic_load(&m->broken)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->broken_why, sizeof m->broken_why, fmt, ap);
  va_end(ap);
  /* Abort before anyone can see the flag: a caller that sees it may go on to destroy. */
  if (m->comm != NULL && !m->aborted) {
    m->lib->comm_abort(m->comm);
    m->aborted = 1;
  }
  atomic_store(&m->broken, 1);
}

/* ---- the reasons ----------------------------------------------------------------------------- */

static void break_timed_out(nccl_comm *m, const nccl_op *op) {
  nccl_break_locked(m, "%s #%lld on rank %d did not finish within %g s (%s); the communicator was aborted",
                    op->name, (long long)op->seq, m->rank, m->timeout, nccl_timeout_source(m));
}

static void break_interrupted(nccl_comm *m, const nccl_op *op) {
  nccl_break_locked(m, "%s #%lld on rank %d was interrupted: the run is stopping; the communicator was aborted",
                    op->name, (long long)op->seq, m->rank);
}

static void break_cuda(nccl_comm *m, const char *name, int64_t seq, cudaError_t err) {
  nccl_break_locked(m, "%s #%lld on rank %d failed on cuda:%d: %s (%s); the communicator was aborted", name,
                    (long long)seq, m->rank, m->gpu, cudaGetErrorString(err), cudaGetErrorName(err));
}

static void break_nccl(nccl_comm *m, const char *name, int64_t seq, ncclResult_t r) {
  const char *detail = m->comm != NULL ? m->lib->get_last_error(m->comm) : NULL;
  nccl_break_locked(m, "%s #%lld on rank %d failed: NCCL: %s%s%s%s; the communicator was aborted", name,
                    (long long)seq, m->rank, m->lib->get_error_string(r),
                    detail != NULL && detail[0] ? " (" : "", detail != NULL ? detail : "",
                    detail != NULL && detail[0] ? ")" : "");
}

lamp_status nccl_cuda_failed_locked(nccl_comm *m, const char *op, int64_t seq, cudaError_t err) {
  break_cuda(m, op, seq, err);
  return nccl_broken_error(m);
}

/* ---- ops ------------------------------------------------------------------------------------- */

lamp_status nccl_settle_locked(nccl_comm *m, ncclResult_t r, const char *op, int64_t seq) {
  double deadline = nccl_now() + m->timeout;
  while (r == ncclInProgress) {
    if (nccl_now() > deadline) {
      nccl_break_locked(m, "%s #%lld on rank %d could not be started within %g s (%s); the communicator was aborted",
                        op, (long long)seq, m->rank, m->timeout, nccl_timeout_source(m));
      return nccl_broken_error(m);
    }
    if (aborting(m)) {
      nccl_break_locked(m, "%s #%lld on rank %d was interrupted: the run is stopping; the communicator was aborted",
                        op, (long long)seq, m->rank);
      return nccl_broken_error(m);
    }
    nccl_nap(100000L);
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = m->lib->comm_get_async_error(m->comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  if (r == ncclSuccess) return LAMP_OK;
  break_nccl(m, op, seq, r);
  return nccl_broken_error(m);
}

static nccl_op *op_get_locked(nccl_comm *m, cudaError_t *err) {
  nccl_op *op = m->spare;
  if (op != NULL) {
    m->spare = op->next;
    return op;
  }
  op = calloc(1, sizeof *op);
  if (op == NULL) {
    *err = cudaErrorMemoryAllocation;
    return NULL;
  }
  *err = cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming);
  if (*err != cudaSuccess) {
    free(op);
    return NULL;
  }
  op->all = m->all;
  m->all = op;
  return op;
}

static void op_put_locked(nccl_comm *m, nccl_op *op) {
  op->next = m->spare;
  m->spare = op;
}

lamp_status nccl_track_locked(nccl_comm *m, const char *name, int64_t seq, nccl_op **out) {
  cudaError_t err = cudaSuccess;
  nccl_op *op = op_get_locked(m, &err);
  if (op != NULL) err = cudaEventRecord(op->done, m->stream);
  if (err != cudaSuccess) {
    if (op != NULL) op_put_locked(m, op);
    /* The collective is queued but cannot be watched: stop it rather than risk a hang. */
    break_cuda(m, name, seq, err);
    return nccl_broken_error(m);
  }
  op->seq = seq;
  op->name = name;
  op->deadline = nccl_now() + m->timeout;
  op->refs = 2;
  op->pending = 1;
  op->next = NULL;
  if (m->tail != NULL) m->tail->next = op;
  else m->head = op;
  m->tail = op;
  *out = op;
  return LAMP_OK;
}

static void unref_locked(nccl_comm *m, nccl_op *op) {
  if (--op->refs == 0) op_put_locked(m, op);
}

void nccl_op_release(nccl_comm *m, nccl_op *op) {
  pthread_mutex_lock(&m->lock);
  unref_locked(m, op);
  pthread_mutex_unlock(&m->lock);
}

lamp_status nccl_op_wait(nccl_comm *m, nccl_op *op) {
  double start = nccl_now();
  long nap = 0;
  lamp_status st = LAMP_OK;
  for (;;) {
    /* Reading the event needs no lock: op stays ours until the release below. */
    cudaError_t q = cudaEventQuery(op->done);
    if (q == cudaSuccess) {
      /* An abort ends the queued collectives too, and the watchdog may have aborted at the
         deadline while this thread was off its core: done is success only on a communicator
         not broken. The abort and the flag happen under the lock, so read the flag there. */
      pthread_mutex_lock(&m->lock);
      int broken = atomic_load(&m->broken);
      pthread_mutex_unlock(&m->lock);
      if (broken) st = nccl_broken_error(m);
      break;
    }
    if (atomic_load(&m->broken)) {
      st = nccl_broken_error(m);
      break;
    }
    double t = nccl_now();
    if (q != cudaErrorNotReady || t > op->deadline || aborting(m)) {
      /* The watchdog would see the same within moments; say it now. */
      pthread_mutex_lock(&m->lock);
      if (q != cudaErrorNotReady) break_cuda(m, op->name, op->seq, q);
      else if (t > op->deadline) break_timed_out(m, op);
      else break_interrupted(m, op);
      pthread_mutex_unlock(&m->lock);
      st = nccl_broken_error(m);
      break;
    }
    if (t - start < SPIN_SECONDS) {
      sched_yield();
    } else {
      nap = nap == 0 ? 20000L : (nap < 1000000L ? nap * 2 : 1000000L);
      nccl_nap(nap);
    }
  }
  nccl_op_release(m, op);
  return st;
}

int nccl_drain(nccl_comm *m) {
  for (;;) {
    pthread_mutex_lock(&m->lock);
    int empty = m->head == NULL, broken = atomic_load(&m->broken);
    pthread_mutex_unlock(&m->lock);
    if (empty) return 1;
    if (broken) return 0;
    nccl_nap(1000000L);
  }
}

void nccl_ops_free(nccl_comm *m) {
  nccl_op *op = m->all;
  while (op != NULL) {
    nccl_op *next = op->all;
    cudaEventDestroy(op->done);
    free(op);
    op = next;
  }
  m->all = m->head = m->tail = m->spare = NULL;
}

/* ---- the watchdog ---------------------------------------------------------------------------- */

/* One look at the pending list and NCCL's error state. */
static void sweep_locked(nccl_comm *m) {
  while (m->head != NULL) {
    nccl_op *op = m->head;
    cudaError_t q = cudaEventQuery(op->done);
    if (q == cudaErrorNotReady) break;
    if (q != cudaSuccess) {
      break_cuda(m, op->name, op->seq, q);
      return;
    }
    m->head = op->next;
    if (m->head == NULL) m->tail = NULL;
    op->pending = 0;
    unref_locked(m, op);
  }
  if (m->head != NULL && nccl_now() > m->head->deadline) {
    break_timed_out(m, m->head);
    return;
  }
  if (m->head != NULL && aborting(m)) {
    break_interrupted(m, m->head);
    return;
  }
  if (m->comm == NULL) return;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = m->lib->comm_get_async_error(m->comm, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess || state == ncclInProgress) return;
  if (m->head != NULL) break_nccl(m, m->head->name, m->head->seq, state);
  else break_nccl(m, "the communicator after collective", m->seq, state);
}

static void *watchdog_main(void *arg) {
  nccl_comm *m = arg;
  /* This thread's CUDA calls go to the communicator's device, never a fresh context on 0. */
  cudaSetDevice(m->gpu);
  while (!atomic_load(&m->stop)) {
    nccl_nap(WATCHDOG_PERIOD_NS);
    pthread_mutex_lock(&m->lock);
    if (!atomic_load(&m->broken)) sweep_locked(m);
    pthread_mutex_unlock(&m->lock);
  }
  return NULL;
}

int nccl_watchdog_start(nccl_comm *m) {
  /* Signals stay with the process's other threads (Ctrl-C is the core's to handle). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  atomic_store(&m->stop, 0);
  int rc = pthread_create(&m->watchdog, NULL, watchdog_main, m);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  m->watchdog_running = rc == 0;
  return rc == 0;
}

void nccl_watchdog_stop(nccl_comm *m) {
  if (!m->watchdog_running) return;
  atomic_store(&m->stop, 1);
  pthread_join(m->watchdog, NULL);
  m->watchdog_running = 0;
}
