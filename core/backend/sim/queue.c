/*
** The simulated device's queue: one worker thread, started on first use and kept for the process,
** runs the queued closures strictly in order. Before each it sleeps a pseudo-random 0-20 us
** (200 us for about one in 64), from a fixed seed (LAMP_SIM_SEED overrides it), so host code that
** reads a result before waiting for it, or reuses a buffer the queue has not read yet, sees the
** wrong data reproducibly rather than by luck.
**
** Errors are asynchronous, as CUDA's are: the first failing operation leaves its status and
** message as the sticky error; later operations still run (the memory stays mapped, so nothing
** crashes), and the next call that waits for the queue reports the error once and clears it.
** Ordering is by sequence numbers: operation i is done once `completed` >= i.
**
** Host waits are counted (lamp_sim_host_waits) the way they cost on a GPU: a wait for work the
** host has already waited for (an event recorded before the last synchronisation) returns at once
** there, so only a wait past `known`, the last operation the host has waited for, counts.
*/
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/sim/sim_impl.h"
#include "backend/sim/sim_stream.h"
#include "base/error.h"

#define DEFAULT_SEED 0x5eed5eed5eed5eedull

typedef struct sim_op {
  struct sim_op *next;
  uint64_t seq;
  lamp_sim_fn fn;
  size_t size;        /* of args: a recorded operation is copied again for each replay */
  max_align_t args[]; /* the closure's copy of its arguments, aligned for any struct */
} sim_op;

/* Operations in order: a recording (a graph), or the frees held back while one is made. */
typedef struct sim_ops {
  sim_op *head, *tail;
} sim_ops;

static struct {
  pthread_once_t once;
  int started; /* the worker is running */
  pthread_mutex_t lock;
  pthread_cond_t work, done; /* an operation was queued / completed */
  sim_ops pending;
  uint64_t queued, completed; /* sequence numbers of the last operation queued / completed */
  lamp_status error;          /* sticky: the first failure not yet reported, and its message */
  char message[LAMP_ERROR_MAX];
  uint64_t rng; /* the worker's alone */
  int held;     /* lamp_sim_hold: the worker starts nothing new */
  uint64_t known;      /* the last operation the host has waited for */
  uint64_t host_waits; /* waits past `known` */
  /* While a graph is captured: where operations go instead of the queue, the frees held back
     until the end, and the first operation refused (its status and message). */
  sim_ops *recording;
  sim_ops held_frees;
  lamp_status refused;
  char refusal[LAMP_ERROR_MAX];
} q = {.once = PTHREAD_ONCE_INIT,
       .lock = PTHREAD_MUTEX_INITIALIZER,
       .work = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

/* ---- the worker ------------------------------------------------------------------------------ */

static uint64_t next_random(void) { /* xorshift64* */
  q.rng ^= q.rng >> 12;
  q.rng ^= q.rng << 25;
  q.rng ^= q.rng >> 27;
  return q.rng * 0x2545f4914f6cdd1dull;
}

static void pause_randomly(void) {
  uint64_t r = next_random();
  long us = (r >> 58) == 0 ? 200 : (long)((r >> 16) % 21); /* top 6 bits zero: 1 in 64 */
  struct timespec t = {0, us * 1000};
  if (us > 0) nanosleep(&t, NULL);
}

/* Keeps `st` as the sticky error unless one is pending; its message is this thread's. */
static void record_failure(lamp_status st) {
  if (st == LAMP_OK) return;
  pthread_mutex_lock(&q.lock);
  if (q.error == LAMP_OK) {
    q.error = st;
    snprintf(q.message, sizeof q.message, "%s", lamp_last_error());
  }
  pthread_mutex_unlock(&q.lock);
}

static sim_op *next_op(void) {
  pthread_mutex_lock(&q.lock);
  while (q.pending.head == NULL || q.held) pthread_cond_wait(&q.work, &q.lock);
  sim_op *op = q.pending.head;
  q.pending.head = op->next;
  if (q.pending.head == NULL) q.pending.tail = NULL;
  pthread_mutex_unlock(&q.lock);
  return op;
}

static void complete(uint64_t seq) {
  pthread_mutex_lock(&q.lock);
  q.completed = seq;
  pthread_cond_broadcast(&q.done);
  pthread_mutex_unlock(&q.lock);
}

static void *worker(void *unused) {
  (void)unused;
  for (;;) {
    sim_op *op = next_op();
    pause_randomly();
    record_failure(op->fn(op->args));
    complete(op->seq);
    free(op);
  }
  return NULL;
}

static uint64_t seed(void) {
  const char *s = getenv("LAMP_SIM_SEED");
  char *end;
  uint64_t v = s != NULL && *s != '\0' ? strtoull(s, &end, 0) : DEFAULT_SEED;
  if (s != NULL && *s != '\0' && *end != '\0') v = DEFAULT_SEED; /* not a number: the default */
  return v != 0 ? v : DEFAULT_SEED;                               /* xorshift must not start at 0 */
}

static void start_worker(void) {
  pthread_t thread;
  q.rng = seed();
  q.started = pthread_create(&thread, NULL, worker, NULL) == 0;
  if (q.started) pthread_detach(thread);
}

/* ---- queuing and waiting --------------------------------------------------------------------- */

static sim_op *new_op(lamp_sim_fn fn, const void *args, size_t size) {
  sim_op *op = malloc(sizeof *op + size);
  if (op == NULL) return NULL;
  op->next = NULL;
  op->seq = 0;
  op->fn = fn;
  op->size = size;
  if (size > 0) memcpy(op->args, args, size);
  return op;
}

static void append(sim_ops *list, sim_op *op) {
  if (list->tail != NULL) list->tail->next = op;
  else list->head = op;
  list->tail = op;
}

static void free_ops(sim_ops *list) {
  for (sim_op *op = list->head, *next; op != NULL; op = next) {
    next = op->next;
    free(op);
  }
  list->head = list->tail = NULL;
}

/* Puts op on the queue for the worker; called holding the lock. */
static void queue_locked(sim_op *op, uint64_t *seq) {
  op->seq = ++q.queued;
  append(&q.pending, op);
  if (seq != NULL) *seq = op->seq;
  pthread_cond_signal(&q.work);
}

lamp_status lamp_sim_enqueue(lamp_sim_fn fn, const void *args, size_t size, uint64_t *seq) {
  pthread_once(&q.once, start_worker);
  if (!q.started) return lamp_error(LAMP_ERR_SYSTEM, "sim: the queue's worker thread could not be started");
  sim_op *op = new_op(fn, args, size);
  if (op == NULL) return lamp_error(LAMP_ERR_SYSTEM, "sim: out of host memory queuing an operation");
  pthread_mutex_lock(&q.lock);
  if (q.recording != NULL) {
    append(q.recording, op); /* recorded, not run: sequence number 0 */
    if (seq != NULL) *seq = 0;
  } else {
    queue_locked(op, seq);
  }
  pthread_mutex_unlock(&q.lock);
  return LAMP_OK;
}

void lamp_sim_enqueue_or_run(lamp_sim_fn fn, const void *args, size_t size) {
  pthread_mutex_lock(&q.lock);
  sim_op *op = q.recording != NULL ? new_op(fn, args, size) : NULL;
  if (op != NULL) append(&q.held_frees, op); /* a replay must not free it again: after the capture */
  pthread_mutex_unlock(&q.lock);
  if (op != NULL) return;
  if (lamp_sim_enqueue(fn, args, size, NULL) == LAMP_OK) return;
  lamp_sim_drain();
  record_failure(fn(args));
}

/* Until operation `seq` is done; called holding the lock. */
static void wait_locked(uint64_t seq) {
  if (seq > q.known) {
    q.host_waits++;
    q.known = seq;
  }
  while (q.completed < seq) pthread_cond_wait(&q.done, &q.lock);
}

lamp_status lamp_sim_wait(uint64_t seq) {
  char message[LAMP_ERROR_MAX];
  pthread_mutex_lock(&q.lock);
  wait_locked(seq);
  lamp_status st = q.error;
  if (st != LAMP_OK) memcpy(message, q.message, sizeof message);
  q.error = LAMP_OK;
  pthread_mutex_unlock(&q.lock);
  return st == LAMP_OK ? LAMP_OK : lamp_error(st, "%s", message);
}

lamp_status lamp_sim_run_and_wait(lamp_sim_fn fn, const void *args, size_t size) {
  uint64_t seq;
  lamp_status st = lamp_sim_refuse_in_capture("a blocking copy");
  if (st == LAMP_OK) st = lamp_sim_enqueue(fn, args, size, &seq);
  return st == LAMP_OK ? lamp_sim_wait(seq) : st;
}

lamp_status lamp_sim_synchronize(void) {
  lamp_status st = lamp_sim_refuse_in_capture("synchronize");
  if (st != LAMP_OK) return st;
  pthread_mutex_lock(&q.lock);
  uint64_t last = q.queued;
  pthread_mutex_unlock(&q.lock);
  return lamp_sim_wait(last);
}

void lamp_sim_drain(void) {
  pthread_mutex_lock(&q.lock);
  wait_locked(q.queued);
  pthread_mutex_unlock(&q.lock);
}

static lamp_status run_release_workspace(const void *unused) {
  (void)unused;
  lamp_cpu_backend.release_workspace();
  return LAMP_OK;
}

/* The workspaces live on the worker thread: released there. Nothing to do before it started. */
void lamp_sim_release_workspace(void) {
  pthread_mutex_lock(&q.lock);
  uint64_t any = q.queued;
  pthread_mutex_unlock(&q.lock);
  if (any == 0 || lamp_cpu_backend.release_workspace == NULL || lamp_sim_capturing()) return;
  if (lamp_sim_enqueue(run_release_workspace, NULL, 0, NULL) == LAMP_OK) lamp_sim_drain();
}

/* ---- events: the sequence number of the last operation queued before the record -------------- */

typedef struct sim_event {
  uint64_t seq; /* 0: never recorded, nothing to wait for */
} sim_event;

lamp_status lamp_sim_event_new(void **event) {
  *event = calloc(1, sizeof(sim_event));
  return *event != NULL ? LAMP_OK : lamp_error(LAMP_ERR_SYSTEM, "sim: out of host memory for an event");
}

void lamp_sim_event_free(void *event) { free(event); }

lamp_status lamp_sim_event_record(void *event) {
  sim_event *e = event;
  lamp_status st = lamp_sim_refuse_in_capture("event_record");
  if (st != LAMP_OK) return st;
  pthread_mutex_lock(&q.lock);
  e->seq = q.queued;
  pthread_mutex_unlock(&q.lock);
  return LAMP_OK;
}

lamp_status lamp_sim_event_wait(void *event) {
  lamp_status st = lamp_sim_refuse_in_capture("event_wait");
  return st == LAMP_OK ? lamp_sim_wait(((const sim_event *)event)->seq) : st;
}

/* ---- the stream (sim_stream.h) --------------------------------------------------------------- */
/* Plugins queue host functions in order with the device's work. */

typedef struct host_func {
  void (*fn)(void *arg);
  void *arg;
} host_func;

static lamp_status run_host_func(const void *args) {
  const host_func *h = args;
  h->fn(h->arg);
  return LAMP_OK;
}

static lamp_status launch_host_func(void (*fn)(void *arg), void *arg) {
  host_func h = {fn, arg};
  return lamp_sim_enqueue(run_host_func, &h, sizeof h, NULL);
}

static lamp_sim_stream stream = {LAMP_SIM_STREAM_MAGIC, launch_host_func};

void *lamp_sim_stream_handle(void) { return &stream; }

/* ---- graphs ---------------------------------------------------------------------------------- */
/* While one is captured, operations are recorded instead of queued; a launch queues a copy of
   each recorded operation, in order. */

int lamp_sim_capturing(void) {
  pthread_mutex_lock(&q.lock);
  int on = q.recording != NULL;
  pthread_mutex_unlock(&q.lock);
  return on;
}

lamp_status lamp_sim_refuse_in_capture(const char *what) {
  if (!lamp_sim_capturing()) return LAMP_OK;
  lamp_status st = lamp_error(LAMP_ERR_INVALID_USAGE, "sim: %s while a graph is being captured (a replay would not "
                              "repeat it)", what);
  pthread_mutex_lock(&q.lock);
  if (q.refused == LAMP_OK) {
    q.refused = st;
    snprintf(q.refusal, sizeof q.refusal, "%s", lamp_last_error());
  }
  pthread_mutex_unlock(&q.lock);
  return st;
}

lamp_status lamp_sim_graph_begin(void) {
  sim_ops *g = calloc(1, sizeof *g);
  if (g == NULL) return lamp_error(LAMP_ERR_SYSTEM, "sim: out of host memory for a graph");
  pthread_mutex_lock(&q.lock);
  int busy = q.recording != NULL;
  if (!busy) {
    q.recording = g;
    q.refused = LAMP_OK;
  }
  pthread_mutex_unlock(&q.lock);
  if (!busy) return LAMP_OK;
  free(g);
  return lamp_error(LAMP_ERR_INVALID_USAGE, "sim: graph_begin: a graph is being captured already");
}

lamp_status lamp_sim_graph_end(void **graph) {
  *graph = NULL;
  pthread_mutex_lock(&q.lock);
  sim_ops *g = q.recording;
  lamp_status refused = q.refused;
  char why[LAMP_ERROR_MAX];
  memcpy(why, q.refusal, sizeof why);
  q.recording = NULL;
  for (sim_op *op = q.held_frees.head, *next; op != NULL; op = next) {
    next = op->next;
    op->next = NULL;
    queue_locked(op, NULL);
  }
  q.held_frees.head = q.held_frees.tail = NULL;
  pthread_mutex_unlock(&q.lock);
  if (g == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "sim: graph_end without graph_begin");
  if (refused == LAMP_OK) {
    *graph = g;
    return LAMP_OK;
  }
  free_ops(g);
  free(g);
  return lamp_error(refused, "%s", why);
}

lamp_status lamp_sim_graph_launch(void *graph) {
  lamp_status st = lamp_sim_refuse_in_capture("graph_launch");
  for (const sim_op *op = ((const sim_ops *)graph)->head; st == LAMP_OK && op != NULL; op = op->next)
    st = lamp_sim_enqueue(op->fn, op->args, op->size, NULL);
  return st;
}

void lamp_sim_graph_free(void *graph) {
  if (graph == NULL) return;
  free_ops(graph);
  free(graph);
}

uint64_t lamp_sim_host_waits(void) {
  pthread_mutex_lock(&q.lock);
  uint64_t n = q.host_waits;
  pthread_mutex_unlock(&q.lock);
  return n;
}

void lamp_sim_hold(int on) {
  pthread_mutex_lock(&q.lock);
  q.held = on != 0;
  pthread_cond_broadcast(&q.work);
  pthread_mutex_unlock(&q.lock);
}
