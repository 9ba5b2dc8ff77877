/*
** mpi: the communicator of a run launched by mpirun (OpenMPI or any MPI-3 library), for
** buffers in host memory.
**
** Never hangs forever. Every operation, blocking or not, is the non-blocking MPI call plus a
** polling loop with a deadline (`timeout` seconds; precedence: the option, else the
** environment variable LAMP_COMM_TIMEOUT, else 300 — an option equal to the default 300
** cannot be told apart from no option, so LAMP_COMM_TIMEOUT wins then). The loop also stops
** on host->abort_flag. When a collective fails, the ranks still alive exchange heartbeats
** (point-to-point, on a communicator of their own, with a short deadline): each tells the
** others which collective it is stuck in, so the error names the ranks that never reached
** collective #N ("dead, hung or busy outside a collective") and those waiting in another
** one (mismatched calls). A heartbeat also tells a rank still waiting that a peer gave up,
** so every live rank fails within moments of the first, instead of each waiting out its own
** timeout. After a failure the communicator is unusable: MPI cannot cancel a collective.
**
** OpenMPI's mpirun kills the whole job when one rank dies, before any rank can report
** (exit status 137, "mpirun noticed that process rank 1 ... exited on signal 9"). For the
** named report, launch with `mpirun --enable-recovery`: the survivors then live on, time out
** here and say which rank is gone. In that mode mpirun exits 0 even when a rank exits
** non-zero (OpenMPI 4.1.4), so a launcher must collect the ranks' exit statuses itself.
** Under scripts/lamp-run (LAMP_RUN_STATUS_DIR set) a failed collective also leaves its report
** in that directory, which tells the launcher to end ranks that are stopped or hung.
**
** Buffers of RING_MIN_BYTES and more are reduced and gathered by ring collectives over
** point-to-point messages (mpi/ring.h), which OpenMPI's non-blocking collectives are several
** times slower than on large buffers; the smaller ones go to MPI_Iallreduce and its kin. Started
** rings move on whenever this rank polls for any collective, so requests may be waited for in
** any order.
**
** Dtypes: all_reduce and reduce_scatter take f32 and i32 (SUM, MAX, MIN); f16 and bf16
** reductions are refused (LAMP_ERR_UNSUPPORTED: reduce in fp32, as the trainer does), u8 too.
** broadcast and all_gather move any dtype. Counts are limited to INT_MAX elements per call
** (MPI's int counts).
**
** Buffers on the cpu, or on cuda through host memory (slow, said once at info level; nccl is the
** communicator for GPU runs): the MPI library is not assumed CUDA-aware, so a cuda buffer is
** copied into a host buffer (host->copy, which waits for the work queued before it), the MPI
** call runs on that, and the result is copied back; all_reduce_start copies in and wait copies
** back, each request with a host buffer of its own, kept after its wait for a later request (the
** trainer's buckets come back with the same sizes every step).
**
** MPI is initialised by the first create if nobody did it before, and finalised when the
** last communicator this plugin created is destroyed (MPI cannot be initialised twice in one
** process, so keep one communicator open for the run). After a failure it is not finalised:
** that could wait for the dead rank; the process is expected to exit.
*/
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "lamp/plugin.h"
#include "mpi/ring.h"

#define WHO "mpi"
#define DEFAULT_TIMEOUT 300.0
#define HEARTBEAT_TAG 7177
#define REQUEST_MAGIC 0x6d706972u /* "mpir" */
#define SPARES 64                 /* request buffers kept: more buckets than that are rare */
/* Buffers from this size on are reduced and gathered by mpi/ring.c rather than MPI's non-blocking
   collectives. All-reduce on one machine: on 2 ranks the ring took 0.6x libnbc's time at 256 KiB
   and 0.43x at 7.45 MB; on 3 ranks it lost below 256 KiB (its 2(N-1) steps of latency) and took
   0.8x at 1 MiB. */
#define RING_MIN_BYTES ((size_t)256 * 1024)

typedef struct mpi_comm {
  const lamp_host *host;
  lamp_ctx *ctx;
  double timeout;  /* seconds */
  MPI_Comm comm;   /* the collectives: a duplicate of MPI_COMM_WORLD */
  MPI_Comm hb;     /* heartbeats after a failure: a second duplicate, never mixed with data */
  MPI_Comm ring;   /* the point-to-point messages of ring collectives: a third duplicate */
  int rank, size;
  int64_t seq;     /* collectives started so far; #seq is the latest */
  int broken;      /* a collective failed: nothing further is attempted */
  char broken_why[512];
  void *staging;   /* host copy of the cuda buffers of blocking calls (host->alloc) */
  size_t staging_bytes;
  void *scratch;   /* the ring scratch of blocking calls (host->alloc) */
  size_t scratch_bytes;
  struct lamp_request *rings; /* started rings not yet waited for, moved on by every poll */
  struct spare {   /* the host buffers of requests waited for, for the next ones */
    void *ptr;
    size_t bytes;
  } spares[SPARES];
} mpi_comm;

struct lamp_request {
  uint32_t magic;
  MPI_Request req;
  int64_t seq;
  const char *op;
  void *device_buf; /* a cuda buffer: copied back from staging once the reduction is done */
  void *staging;
  size_t bytes, staging_bytes;
  int ringed;       /* a ring collective (ring), not MPI's (req) */
  mpi_ring ring;
  int ring_done, ring_rc; /* moved on by other waits too: finished, or its MPI error */
  void *scratch;
  size_t scratch_bytes;
  struct lamp_request *next_ring;
};

/* Staging is said once per process, at the first cuda buffer. */
static int said_staging;

/* Communicators alive, and whether the first of them initialised MPI (then the last one to
   go finalises it). Creates and destroys are rare; the plugin is never unloaded mid-run. */
static int live_comms;
static int we_initialised;

static const lamp_param mpi_params[] = {
    {"timeout", DEFAULT_TIMEOUT, 0.1, 604800.0,
     "seconds a collective may wait before failing (default: $LAMP_COMM_TIMEOUT, else 300)"},
};

#define SPIN_SECONDS 0.05

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pause_briefly(long ns) {
  struct timespec t = {0, ns};
  nanosleep(&t, NULL);
}

/* "MPI_ERR_TRUNCATE: message truncated" for an MPI return code. */
static const char *mpi_error_text(int code, char *buf, size_t size) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "?");
  snprintf(buf, size, "MPI error %d: %s", code, text);
  return buf;
}

static lamp_status mpi_failed(mpi_comm *m, const char *op, int code) {
  char text[MPI_MAX_ERROR_STRING + 32];
  return m->host->set_error(m->ctx, LAMP_ERR_REMOTE, "%s (collective #%lld): %s", op,
                            (long long)m->seq, mpi_error_text(code, text, sizeof text));
}

/* An MPI error in a collective breaks the communicator (MPI cannot cancel one); later calls are
   told "<op> <how>": "could not start" or "failed earlier". */
static lamp_status mpi_broke(mpi_comm *m, const char *op, int code, const char *how) {
  m->broken = 1;
  snprintf(m->broken_why, sizeof m->broken_why, "%s %s", op, how);
  return mpi_failed(m, op, code);
}

/* ---- probe, create, destroy ------------------------------------------------------------------ */

static int mpi_probe(const lamp_host *h, char *reason, size_t reason_size) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  (void)h;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v != NULL && v[0] != '\0') {
      snprintf(reason, reason_size, "launched under mpirun (%s=%s)", vars[i], v);
      return 2;
    }
  }
  snprintf(reason, reason_size, "not launched under mpirun (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK)");
  return 0;
}

/* option > LAMP_COMM_TIMEOUT > 300 (see the top of the file for the one ambiguity). */
static lamp_status resolve_timeout(mpi_comm *m, double option) {
  m->timeout = option;
  const char *env = getenv("LAMP_COMM_TIMEOUT");
  if (option != DEFAULT_TIMEOUT || env == NULL || env[0] == '\0') return LAMP_OK;
  char *end = NULL;
  double v = strtod(env, &end);
  if (end == env || *end != '\0' || !(v >= mpi_params[0].min_value && v <= mpi_params[0].max_value))
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE,
                              "LAMP_COMM_TIMEOUT must be seconds in [%g, %g], got '%s'",
                              mpi_params[0].min_value, mpi_params[0].max_value, env);
  m->timeout = v;
  return LAMP_OK;
}

static lamp_status init_mpi(mpi_comm *m) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE,
                              "MPI was finalised already in this process and cannot start again "
                              "(keep one mpi communicator open for the whole run)");
  if (initialised) return LAMP_OK;
  int provided = MPI_THREAD_SINGLE;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING + 32];
    return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "MPI_Init_thread failed: %s",
                              mpi_error_text(rc, text, sizeof text));
  }
  we_initialised = 1;
  if (provided < MPI_THREAD_SERIALIZED)
    m->host->log(LAMP_LOG_WARN, WHO,
                 "the MPI library gives thread level %d < MPI_THREAD_SERIALIZED: call the "
                 "communicator from the thread that opened it",
                 provided);
  return LAMP_OK;
}

static lamp_status dup_world(mpi_comm *m, MPI_Comm *out) {
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) return LAMP_OK;
  char text[MPI_MAX_ERROR_STRING + 32];
  return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "duplicating MPI_COMM_WORLD failed: %s",
                            mpi_error_text(rc, text, sizeof text));
}

static void finalise_if_last(const lamp_host *h) {
  if (--live_comms > 0 || !we_initialised) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
  (void)h;
}

static lamp_status mpi_create(const lamp_host *h, lamp_ctx *ctx, const double *params,
                              void **comm) {
  mpi_comm *m = calloc(1, sizeof *m);
  if (m == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  m->host = h;
  m->ctx = ctx;
  m->comm = m->hb = m->ring = MPI_COMM_NULL;
  lamp_status st = resolve_timeout(m, params[0]);
  if (st == LAMP_OK) st = init_mpi(m);
  if (st != LAMP_OK) {
    free(m);
    return st;
  }
  live_comms++;
  /* Errors come back as codes, never abort: on our duplicates always, and on
     MPI_COMM_WORLD too when this plugin owns MPI (then nobody else relies on its handler). */
  if (we_initialised) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  st = dup_world(m, &m->comm);
  if (st == LAMP_OK) st = dup_world(m, &m->hb);
  if (st == LAMP_OK) st = dup_world(m, &m->ring);
  if (st == LAMP_OK) {
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
  }
  if (st != LAMP_OK) {
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    if (m->hb != MPI_COMM_NULL) MPI_Comm_free(&m->hb);
    finalise_if_last(h);
    free(m);
    return st;
  }
  h->log(LAMP_LOG_INFO, WHO, "rank %d of %d, timeout %g s", m->rank, m->size, m->timeout);
  *comm = m;
  return LAMP_OK;
}

static void mpi_destroy(void *comm) {
  mpi_comm *m = comm;
  if (m == NULL) return;
  if (m->broken) {
    /* A collective is still pending and can never complete: freeing or finalising could
       wait for the dead rank. Leave MPI as it is; the process is about to exit. */
    m->host->log(LAMP_LOG_WARN, WHO, "not finalising MPI after a failed collective");
    live_comms--;
    free(m);
    return;
  }
  MPI_Comm_free(&m->ring);
  MPI_Comm_free(&m->hb);
  MPI_Comm_free(&m->comm);
  finalise_if_last(m->host);
  if (m->staging != NULL) m->host->free(m->staging);
  if (m->scratch != NULL) m->host->free(m->scratch);
  for (int i = 0; i < SPARES; i++)
    if (m->spares[i].ptr != NULL) m->host->free(m->spares[i].ptr);
  free(m);
}

static int mpi_rank(void *comm) { return ((mpi_comm *)comm)->rank; }

static int mpi_size(void *comm) { return ((mpi_comm *)comm)->size; }

/* ---- failure reports ------------------------------------------------------------------------- */

/* What a heartbeat says: the sender is stuck in (or gave up on) collective #seq. */
typedef struct heartbeat {
  int64_t seq;
  int64_t gave_up; /* 1: the sender's own deadline passed or it was aborted */
} heartbeat;

/* Appends to a fixed buffer, truncating quietly. */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t size, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, size - used, fmt, ap);
  va_end(ap);
}

/* Receives one waiting heartbeat into `beats` (indexed by rank); 0 when none is waiting. */
static int receive_heartbeat(mpi_comm *m, heartbeat *beats, unsigned char *heard) {
  int flag = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, HEARTBEAT_TAG, m->hb, &flag, &status) != MPI_SUCCESS || !flag)
    return 0;
  heartbeat b;
  int src = status.MPI_SOURCE;
  if (MPI_Recv(&b, (int)sizeof b, MPI_BYTE, src, HEARTBEAT_TAG, m->hb, MPI_STATUS_IGNORE) !=
      MPI_SUCCESS)
    return 0;
  if (src >= 0 && src < m->size && beats != NULL) {
    beats[src] = b;
    heard[src] = 1;
  }
  return 1;
}

/*
** Tells every peer that this rank gave up on collective #seq, then listens for their
** heartbeats until all have answered or `grace` seconds pass. A peer waiting in a collective
** answers at once (it notices the heartbeat in its polling loop); one that is dead, hung or
** computing does not. Fills `report` with what was learnt.
*/
static void exchange_heartbeats(mpi_comm *m, heartbeat *beats, unsigned char *heard, double grace,
                                char *report, size_t size) {
  /* The payload must outlive sends that may never complete (to a dead rank): it is not
     freed. This happens once per communicator, on the way to an error exit. */
  heartbeat *mine = malloc(sizeof *mine);
  if (mine != NULL) {
    mine->seq = m->seq;
    mine->gave_up = 1;
    for (int r = 0; r < m->size; r++) {
      MPI_Request req;
      if (r != m->rank &&
          MPI_Isend(mine, (int)sizeof *mine, MPI_BYTE, r, HEARTBEAT_TAG, m->hb, &req) == MPI_SUCCESS)
        MPI_Request_free(&req);
    }
  }
  double deadline = now_seconds() + grace;
  for (;;) {
    int missing = 0;
    for (int r = 0; r < m->size; r++) missing += r != m->rank && !heard[r];
    if (missing == 0 || now_seconds() > deadline) break;
    if (!receive_heartbeat(m, beats, heard)) pause_briefly(1000000L);
  }

  char absent[256] = "", elsewhere[256] = "";
  int n_absent = 0;
  for (int r = 0; r < m->size; r++) {
    if (r == m->rank) continue;
    if (!heard[r]) {
      append(absent, sizeof absent, "%s%d", n_absent++ ? ", " : "", r);
    } else if (beats[r].seq != m->seq) {
      append(elsewhere, sizeof elsewhere, "; rank %d is at collective #%lld", r,
             (long long)beats[r].seq);
    }
  }
  report[0] = '\0';
  if (n_absent > 0)
    append(report, size,
           "; rank%s %s did not reach collective #%lld (no heartbeat within %.1f s: exited, "
           "killed, or hung outside a collective)",
           n_absent > 1 ? "s" : "", absent, (long long)m->seq, grace);
  append(report, size, "%s", elsewhere);
  if (n_absent == 0 && elsewhere[0] == '\0')
    append(report, size, "; every rank answered from collective #%lld", (long long)m->seq);
}

/*
** scripts/lamp-run sets LAMP_RUN_STATUS_DIR; a failed collective leaves its report there as
** failed.<rank>. The heartbeats have just told every live rank, so each fails within moments:
** a rank still running seconds later is stopped or hung, and the launcher ends it then
** instead of waiting out another timeout. Best effort: without the file the launcher waits.
*/
static void tell_launcher(const mpi_comm *m) {
  const char *dir = getenv("LAMP_RUN_STATUS_DIR");
  if (dir == NULL || dir[0] == '\0') return;
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/failed.%d", dir, m->rank);
  if (n < 0 || (size_t)n >= sizeof path) return;
  FILE *f = fopen(path, "w");
  if (f == NULL) return;
  fprintf(f, "%s\n", m->broken_why);
  fclose(f);
}

/*
** Marks the communicator broken and records the error. why: "timed out after 5.0 s
** (timeout 5 s)" and the like; first_peer: the rank whose heartbeat ended the wait, or -1.
*/
static lamp_status fail_collective(mpi_comm *m, const char *op, const char *why,
                                   heartbeat *beats, unsigned char *heard) {
  double grace = m->timeout < 2.0 ? m->timeout : 2.0;
  char report[768];
  exchange_heartbeats(m, beats, heard, grace, report, sizeof report);
  m->broken = 1;
  snprintf(m->broken_why, sizeof m->broken_why, "%s (collective #%lld) %s%s", op,
           (long long)m->seq, why, report);
  tell_launcher(m);
  return m->host->set_error(m->ctx, LAMP_ERR_REMOTE, "rank %d: %s", m->rank, m->broken_why);
}

/* ---- the polling loop ------------------------------------------------------------------------ */

/* What a polling loop waits for: one MPI request, or a ring collective (mpi/ring.h). */
typedef struct waited {
  MPI_Request *req;
  mpi_ring *ring;
} waited;

/* Moves w on as far as it goes without waiting; *done once it is complete. An MPI code. */
static int progress(waited w, int *done) {
  if (w.ring == NULL) return MPI_Test(w.req, done, MPI_STATUS_IGNORE);
  for (;;) {
    int flag = 0, rc = MPI_Testall(2, w.ring->req, &flag, MPI_STATUSES_IGNORE);
    *done = 0;
    if (rc != MPI_SUCCESS || !flag) return rc;
    rc = mpi_ring_next(w.ring, done);
    if (rc != MPI_SUCCESS || *done) return rc;
  }
}

/* The started rings other than `skip` move on while a rank waits for something else, as MPI's
   non-blocking collectives do: requests may be waited for in any order. An error stays with
   its request, reported by its wait. */
static void move_rings_on(mpi_comm *m, const lamp_request *skip) {
  for (lamp_request *r = m->rings; r != NULL; r = r->next_ring)
    if (r != skip && !r->ring_done && r->ring_rc == MPI_SUCCESS)
      r->ring_rc = progress((waited){NULL, &r->ring}, &r->ring_done);
}

/*
** Waits for w (collective #seq, `op`; `self` the request it belongs to, if any) until it
** completes, the deadline passes, the run is aborted or a peer announces it gave up. Spins
** (yielding) for SPIN_SECONDS, then sleeps in growing steps up to 1 ms so that long waits
** leave the cores to the ranks still computing.
*/
static lamp_status poll_until(mpi_comm *m, waited w, const lamp_request *self, const char *op) {
  double start = now_seconds(), deadline = start + m->timeout;
  long nap = 0;
  heartbeat *beats = NULL;
  unsigned char *heard = NULL;
  for (unsigned long spins = 0;; spins++) {
    int done = 0;
    int rc = progress(w, &done);
    if (rc != MPI_SUCCESS) return mpi_broke(m, op, rc, "failed earlier");
    if (done) return LAMP_OK;

    char why[160] = "";
    double t = now_seconds();
    int aborted = m->host->abort_flag != NULL && *m->host->abort_flag != 0;
    int peer_gave_up = (spins & 63u) == 63u && m->size > 1;
    if (peer_gave_up) {
      int flag = 0;
      peer_gave_up = MPI_Iprobe(MPI_ANY_SOURCE, HEARTBEAT_TAG, m->hb, &flag, MPI_STATUS_IGNORE) ==
                         MPI_SUCCESS && flag;
    }
    if (t > deadline)
      snprintf(why, sizeof why, "timed out after %.1f s (timeout %g s)", t - start, m->timeout);
    else if (aborted)
      snprintf(why, sizeof why, "interrupted after %.1f s: the run is stopping", t - start);
    if (why[0] == '\0' && !peer_gave_up) {
      move_rings_on(m, self);
      /* OpenMPI moves a non-blocking collective forward only inside MPI_Test: for the first
         SPIN_SECONDS keep testing (yielding the core between tests), so a gradient bucket is
         not held up by a nap; after that, sleep in growing steps to leave idle cores alone. */
      if (t - start < SPIN_SECONDS) {
        sched_yield();
      } else {
        nap = nap == 0 ? 20000L : (nap < 1000000L ? nap * 2 : 1000000L);
        pause_briefly(nap);
      }
      continue;
    }

    beats = calloc((size_t)m->size, sizeof *beats);
    heard = calloc((size_t)m->size, 1);
    if (beats == NULL || heard == NULL) {
      free(beats);
      free(heard);
      m->broken = 1;
      return m->host->set_error(m->ctx, LAMP_ERR_REMOTE, "%s (collective #%lld) %s", op,
                                (long long)m->seq, why[0] ? why : "failed on a peer");
    }
    if (why[0] == '\0') {
      /* A peer gave up: this collective can never complete. Say who, then report. */
      while (receive_heartbeat(m, beats, heard)) {
      }
      int first = -1;
      for (int r = 0; r < m->size && first < 0; r++)
        if (heard[r]) first = r;
      snprintf(why, sizeof why, "abandoned after %.1f s: rank %d gave up on collective #%lld",
               t - start, first, first >= 0 ? (long long)beats[first].seq : -1LL);
    }
    lamp_status st = fail_collective(m, op, why, beats, heard);
    free(beats);
    free(heard);
    return st;
  }
}

/* ---- argument checks ------------------------------------------------------------------------- */

static lamp_status check_usable(mpi_comm *m, const char *op) {
  if (!m->broken) return LAMP_OK;
  return m->host->set_error(m->ctx, LAMP_ERR_REMOTE,
                            "%s: the communicator failed earlier and cannot be used: %s", op,
                            m->broken_why);
}

static MPI_Datatype datatype_of(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32: return MPI_FLOAT;
  case LAMP_I32: return MPI_INT32_T;
  case LAMP_F16:
  case LAMP_BF16: return MPI_UINT16_T; /* moved, never reduced */
  case LAMP_U8: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

static lamp_status check_buffer(mpi_comm *m, const char *op, const void *buf, size_t count,
                                lamp_dtype dtype, lamp_device device) {
  lamp_status st = check_usable(m, op);
  if (st != LAMP_OK) return st;
  if ((unsigned)dtype >= LAMP_DTYPE_COUNT)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown dtype %d", op, (int)dtype);
  if ((unsigned)device >= LAMP_DEVICE_COUNT)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown device %d", op,
                              (int)device);
  if (device != LAMP_CPU && device != LAMP_CUDA)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED, "%s: cpu and cuda buffers only, got device %d",
                              op, (int)device);
  if (device == LAMP_CUDA && !LAMP_HOST_HAS(m->host, copy))
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "%s: cuda buffers need a core with host->copy (ABI 1.1); this one is %u.%u", op,
                              (unsigned)m->host->abi_major, (unsigned)m->host->abi_minor);
  if (buf == NULL && count > 0)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", op,
                              count);
  if (count > (size_t)INT_MAX)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "%s: %zu elements exceed MPI's limit of %d per call", op, count,
                              INT_MAX);
  return LAMP_OK;
}

static lamp_status check_reduction(mpi_comm *m, const char *op, lamp_dtype dtype,
                                   lamp_reduce_op reduce, MPI_Op *out) {
  switch (reduce) {
  case LAMP_REDUCE_SUM: *out = MPI_SUM; break;
  case LAMP_REDUCE_MAX: *out = MPI_MAX; break;
  case LAMP_REDUCE_MIN: *out = MPI_MIN; break;
  default:
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown reduce op %d", op,
                              (int)reduce);
  }
  if (dtype == LAMP_F32 || dtype == LAMP_I32) return LAMP_OK;
  return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                            "%s: %s reductions are not supported (f32 and i32 only; reduce 16-bit "
                            "values in an f32 buffer)",
                            op, lamp_dtype_name(dtype));
}

/* ---- cuda buffers, through host memory ------------------------------------------------------- */

static size_t dtype_bytes(lamp_dtype dtype) {
  return dtype == LAMP_U8 ? 1u : (dtype == LAMP_F16 || dtype == LAMP_BF16) ? 2u : 4u;
}

static void say_staging(const mpi_comm *m) {
  if (said_staging) return;
  said_staging = 1;
  m->host->log(LAMP_LOG_INFO, WHO, "cuda buffers are staged through host memory (slow); use nccl for GPU runs");
}

/* The kept host buffer of the blocking calls, at least `bytes` long. */
static lamp_status staging_for(mpi_comm *m, const char *op, size_t bytes, void **out) {
  say_staging(m);
  if (bytes > m->staging_bytes) {
    if (m->staging != NULL) m->host->free(m->staging);
    m->staging = m->host->alloc(LAMP_CPU, LAMP_MEM_WORKSPACE, bytes);
    m->staging_bytes = m->staging != NULL ? bytes : 0;
    if (m->staging == NULL)
      return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "%s: out of host memory staging %zu bytes of cuda buffers",
                                op, bytes);
  }
  *out = m->staging;
  return LAMP_OK;
}

/* A request's host buffer of at least `bytes`: the smallest spare that fits, else a new one. */
static void *take_spare(mpi_comm *m, size_t bytes, size_t *got) {
  int best = -1;
  for (int i = 0; i < SPARES; i++)
    if (m->spares[i].ptr != NULL && m->spares[i].bytes >= bytes &&
        (best < 0 || m->spares[i].bytes < m->spares[best].bytes))
      best = i;
  if (best < 0) {
    *got = bytes;
    return m->host->alloc(LAMP_CPU, LAMP_MEM_WORKSPACE, bytes);
  }
  void *p = m->spares[best].ptr;
  *got = m->spares[best].bytes;
  m->spares[best].ptr = NULL;
  return p;
}

/* Kept for a later request where a slot is free, else handed back. */
static void keep_spare(mpi_comm *m, void *ptr, size_t bytes) {
  for (int i = 0; i < SPARES; i++)
    if (m->spares[i].ptr == NULL) {
      m->spares[i].ptr = ptr;
      m->spares[i].bytes = bytes;
      return;
    }
  m->host->free(ptr);
}

/* The core's message does not reach the plugin: the copy is named here, with its status. */
static lamp_status copy_between(mpi_comm *m, const char *op, void *dst, lamp_device dst_device, const void *src,
                                lamp_device src_device, size_t bytes) {
  if (bytes == 0) return LAMP_OK;
  lamp_status st = m->host->copy(dst, dst_device, src, src_device, bytes);
  if (st == LAMP_OK) return LAMP_OK;
  return m->host->set_error(m->ctx, st, "%s: staging %zu bytes %s host memory failed (status %d)", op, bytes,
                            dst_device == LAMP_CPU ? "from cuda into" : "from", (int)st);
}

/* *data: buf itself on the cpu; on cuda the staging buffer, holding buf's `bytes`. */
static lamp_status stage_in(mpi_comm *m, const char *op, lamp_device device, const void *buf, size_t bytes,
                            size_t staged_bytes, void **data) {
  *data = (void *)(uintptr_t)buf;
  if (device != LAMP_CUDA) return LAMP_OK;
  lamp_status st = staging_for(m, op, staged_bytes, data);
  return st == LAMP_OK ? copy_between(m, op, *data, LAMP_CPU, buf, LAMP_CUDA, bytes) : st;
}

/* The result back into the cuda buffer, after a call that succeeded. */
static lamp_status stage_out(mpi_comm *m, const char *op, lamp_device device, void *buf, const void *data,
                             size_t bytes, lamp_status st) {
  if (st != LAMP_OK || device != LAMP_CUDA) return st;
  return copy_between(m, op, buf, LAMP_CUDA, data, LAMP_CPU, bytes);
}

/* A started operation's MPI return code: on success, wait for it. */
static lamp_status run_started(mpi_comm *m, const char *op, int rc, MPI_Request *req) {
  if (rc != MPI_SUCCESS) return mpi_broke(m, op, rc, "could not start");
  return poll_until(m, (waited){req, NULL}, NULL, op);
}

/* ---- rings (mpi/ring.h): the large buffers ----------------------------------------------------- */

/* Every rank sees the same counts, so every rank takes the same path. */
static int use_ring(const mpi_comm *m, size_t bytes) { return m->size > 1 && bytes >= RING_MIN_BYTES; }

/* A ring's messages carry its collective's number (MPI_TAG_UB is at least 32767): rings in flight
   at once never take each other's messages. */
static int ring_tag(const mpi_comm *m) { return (int)(m->seq % 32000) + 1; }

/* The kept scratch of the blocking calls, at least `bytes` long. */
static lamp_status scratch_for(mpi_comm *m, const char *op, size_t bytes, void **out) {
  if (bytes > m->scratch_bytes) {
    if (m->scratch != NULL) m->host->free(m->scratch);
    m->scratch = m->host->alloc(LAMP_CPU, LAMP_MEM_WORKSPACE, bytes);
    m->scratch_bytes = m->scratch != NULL ? bytes : 0;
    if (m->scratch == NULL)
      return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "%s: out of host memory for %zu bytes of ring scratch", op,
                                bytes);
  }
  *out = m->scratch;
  return LAMP_OK;
}

/* A blocking ring collective over host buffers (see mpi_ring_start for src and dst). */
static lamp_status ring_collective(mpi_comm *m, const char *op, mpi_ring_kind kind, const void *src, void *dst,
                                   size_t total, lamp_dtype dtype, MPI_Op mop) {
  size_t elem = dtype_bytes(dtype);
  void *scratch = NULL;
  lamp_status st = scratch_for(m, op, mpi_ring_scratch_bytes(kind, total, m->size, elem), &scratch);
  if (st != LAMP_OK) return st;
  mpi_ring ring;
  int rc = mpi_ring_start(&ring, kind, m->ring, ring_tag(m), datatype_of(dtype), mop, elem, src, dst, total, scratch);
  if (rc != MPI_SUCCESS) return mpi_broke(m, op, rc, "could not start");
  return poll_until(m, (waited){NULL, &ring}, NULL, op);
}

static void forget_ring(mpi_comm *m, const lamp_request *r) {
  for (lamp_request **p = &m->rings; *p != NULL; p = &(*p)->next_ring)
    if (*p == r) {
      *p = r->next_ring;
      return;
    }
}

/* A started ring to its end: it may have got there, or failed, while other waits moved it on. */
static lamp_status wait_ring(mpi_comm *m, lamp_request *r) {
  lamp_status st = LAMP_OK;
  if (r->ring_rc != MPI_SUCCESS)
    st = mpi_broke(m, r->op, r->ring_rc, "failed earlier");
  else if (!r->ring_done)
    st = poll_until(m, (waited){NULL, &r->ring}, r, r->op);
  if (st == LAMP_OK) forget_ring(m, r);
  return st;
}

/* ---- collectives ----------------------------------------------------------------------------- */

static lamp_status mpi_all_reduce_start(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                        lamp_reduce_op op, lamp_device device,
                                        lamp_request **out) {
  mpi_comm *m = comm;
  MPI_Op mop;
  lamp_status st = check_buffer(m, "all_reduce_start", buf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduction(m, "all_reduce_start", dtype, op, &mop);
  if (st == LAMP_OK && out == NULL)
    st = m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG, "all_reduce_start: NULL request");
  if (st != LAMP_OK) return st;
  lamp_request *r = calloc(1, sizeof *r);
  if (r == NULL) return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "out of memory");
  r->magic = REQUEST_MAGIC;
  r->op = "all_reduce";
  void *data = buf;
  if (device == LAMP_CUDA) { /* a buffer of its own: several requests may be in flight */
    say_staging(m);
    r->device_buf = buf;
    r->bytes = count * dtype_bytes(dtype);
    data = r->staging = take_spare(m, r->bytes ? r->bytes : 1, &r->staging_bytes);
    st = data == NULL ? m->host->set_error(m->ctx, LAMP_ERR_SYSTEM,
                                           "all_reduce_start: out of host memory staging %zu bytes of cuda buffers",
                                           r->bytes)
                      : copy_between(m, "all_reduce_start", data, LAMP_CPU, buf, LAMP_CUDA, r->bytes);
    if (st != LAMP_OK) {
      if (r->staging != NULL) keep_spare(m, r->staging, r->staging_bytes);
      free(r);
      return st;
    }
  }
  r->seq = ++m->seq;
  size_t elem = dtype_bytes(dtype);
  int rc;
  if (use_ring(m, count * elem)) {
    size_t need = mpi_ring_scratch_bytes(MPI_RING_ALL_REDUCE, count, m->size, elem);
    r->scratch = take_spare(m, need, &r->scratch_bytes);
    if (r->scratch == NULL) {
      if (r->staging != NULL) keep_spare(m, r->staging, r->staging_bytes);
      free(r);
      return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM,
                                "all_reduce_start: out of host memory for %zu bytes of ring scratch", need);
    }
    r->ringed = 1;
    rc = mpi_ring_start(&r->ring, MPI_RING_ALL_REDUCE, m->ring, ring_tag(m), datatype_of(dtype), mop, elem, data,
                        data, count, r->scratch);
  } else {
    rc = MPI_Iallreduce(MPI_IN_PLACE, data, (int)count, datatype_of(dtype), mop, m->comm, &r->req);
  }
  if (rc != MPI_SUCCESS) {
    if (r->staging != NULL) keep_spare(m, r->staging, r->staging_bytes);
    if (r->scratch != NULL) keep_spare(m, r->scratch, r->scratch_bytes);
    free(r);
    return mpi_broke(m, "all_reduce_start", rc, "could not start");
  }
  if (r->ringed) {
    r->next_ring = m->rings;
    m->rings = r;
  }
  *out = r;
  return LAMP_OK;
}

static lamp_status mpi_wait(void *comm, lamp_request *req) {
  mpi_comm *m = comm;
  if (req == NULL || req->magic != REQUEST_MAGIC)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG,
                              "wait: not a request of this communicator");
  lamp_status st = check_usable(m, "wait");
  if (st != LAMP_OK) return st; /* the request stays with MPI, which cannot cancel it */
  int64_t latest = m->seq;
  m->seq = req->seq; /* reports name the collective waited for */
  st = req->ringed ? wait_ring(m, req) : poll_until(m, (waited){&req->req, NULL}, req, req->op);
  m->seq = latest;
  if (st != LAMP_OK) return st; /* MPI keeps the request and its buffer */
  if (req->device_buf != NULL)
    st = copy_between(m, "wait", req->device_buf, LAMP_CUDA, req->staging, LAMP_CPU, req->bytes);
  if (req->staging != NULL) keep_spare(m, req->staging, req->staging_bytes);
  if (req->scratch != NULL) keep_spare(m, req->scratch, req->scratch_bytes);
  req->magic = 0;
  free(req);
  return st;
}

static lamp_status mpi_all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                  lamp_reduce_op op, lamp_device device) {
  mpi_comm *m = comm;
  MPI_Op mop;
  MPI_Request req;
  void *data = NULL;
  size_t bytes = count * dtype_bytes(dtype);
  lamp_status st = check_buffer(m, "all_reduce", buf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduction(m, "all_reduce", dtype, op, &mop);
  if (st == LAMP_OK) st = stage_in(m, "all_reduce", device, buf, bytes, bytes, &data);
  if (st != LAMP_OK) return st;
  m->seq++;
  if (use_ring(m, bytes))
    st = ring_collective(m, "all_reduce", MPI_RING_ALL_REDUCE, data, data, count, dtype, mop);
  else
    st = run_started(m, "all_reduce",
                     MPI_Iallreduce(MPI_IN_PLACE, data, (int)count, datatype_of(dtype), mop, m->comm, &req), &req);
  return stage_out(m, "all_reduce", device, buf, data, bytes, st);
}

static lamp_status mpi_broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                                 lamp_device device) {
  mpi_comm *m = comm;
  MPI_Request req;
  lamp_status st = check_buffer(m, "broadcast", buf, count, dtype, device);
  if (st != LAMP_OK) return st;
  if (root < 0 || root >= m->size)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_ARG,
                              "broadcast: root %d out of range for %d ranks", root, m->size);
  void *data = NULL;
  size_t bytes = count * dtype_bytes(dtype);
  st = stage_in(m, "broadcast", device, buf, bytes, bytes, &data);
  if (st != LAMP_OK) return st;
  m->seq++;
  st = run_started(m, "broadcast", MPI_Ibcast(data, (int)count, datatype_of(dtype), root, m->comm, &req), &req);
  return stage_out(m, "broadcast", device, buf, data, bytes, st);
}

static lamp_status mpi_barrier(void *comm) {
  mpi_comm *m = comm;
  MPI_Request req;
  lamp_status st = check_usable(m, "barrier");
  if (st != LAMP_OK) return st;
  m->seq++;
  return run_started(m, "barrier", MPI_Ibarrier(m->comm, &req), &req);
}

static lamp_status mpi_all_gather(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                                  lamp_dtype dtype, lamp_device device) {
  mpi_comm *m = comm;
  MPI_Request req;
  lamp_status st = check_buffer(m, "all_gather", sendbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_buffer(m, "all_gather", recvbuf, count, dtype, device);
  if (st != LAMP_OK) return st;
  if (count > (size_t)INT_MAX / (size_t)m->size)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "all_gather: %zu elements times %d ranks exceed MPI's int counts",
                              count, m->size);
  MPI_Datatype t = datatype_of(dtype);
  int size = 0;
  MPI_Type_size(t, &size);
  /* The caller's own block already in place is MPI_IN_PLACE. */
  const void *send = (const char *)recvbuf + (size_t)m->rank * count * (size_t)size == sendbuf
                         ? MPI_IN_PLACE
                         : sendbuf;
  void *recv = recvbuf;
  size_t bytes = count * (size_t)size, all = bytes * (size_t)m->size;
  if (device == LAMP_CUDA) { /* this rank's block goes in place into the staged whole */
    st = staging_for(m, "all_gather", all, &recv);
    if (st == LAMP_OK)
      st = copy_between(m, "all_gather", (char *)recv + (size_t)m->rank * bytes, LAMP_CPU, sendbuf, LAMP_CUDA, bytes);
    if (st != LAMP_OK) return st;
    send = MPI_IN_PLACE;
  }
  m->seq++;
  if (use_ring(m, all)) { /* the ring gathers in place */
    if (send != MPI_IN_PLACE) memmove((char *)recv + (size_t)m->rank * bytes, send, bytes);
    st = ring_collective(m, "all_gather", MPI_RING_ALL_GATHER, NULL, recv, count * (size_t)m->size, dtype, MPI_OP_NULL);
  } else {
    st = run_started(m, "all_gather", MPI_Iallgather(send, (int)count, t, recv, (int)count, t, m->comm, &req), &req);
  }
  return stage_out(m, "all_gather", device, recvbuf, recv, all, st);
}

static lamp_status mpi_reduce_scatter(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                                      lamp_dtype dtype, lamp_reduce_op op, lamp_device device) {
  mpi_comm *m = comm;
  MPI_Op mop;
  MPI_Request req;
  lamp_status st = check_buffer(m, "reduce_scatter", sendbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_buffer(m, "reduce_scatter", recvbuf, count, dtype, device);
  if (st == LAMP_OK) st = check_reduction(m, "reduce_scatter", dtype, op, &mop);
  if (st != LAMP_OK) return st;
  if (count > (size_t)INT_MAX / (size_t)m->size)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "reduce_scatter: %zu elements times %d ranks exceed MPI's int counts",
                              count, m->size);
  /* sendbuf == recvbuf: the whole input sits in recvbuf, the result lands at its start. */
  const void *send = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
  void *recv = recvbuf;
  size_t bytes = count * dtype_bytes(dtype), all = bytes * (size_t)m->size;
  if (device == LAMP_CUDA) { /* the whole input staged, reduced in place: the result at its start */
    st = stage_in(m, "reduce_scatter", device, sendbuf, all, all, &recv);
    if (st != LAMP_OK) return st;
    send = MPI_IN_PLACE;
  }
  m->seq++;
  if (use_ring(m, all))
    st = ring_collective(m, "reduce_scatter", MPI_RING_REDUCE_SCATTER, send == MPI_IN_PLACE ? recv : send, recv,
                         count * (size_t)m->size, dtype, mop);
  else
    st = run_started(m, "reduce_scatter",
                     MPI_Ireduce_scatter_block(send, recv, (int)count, datatype_of(dtype), mop, m->comm, &req), &req);
  return stage_out(m, "reduce_scatter", device, recvbuf, recv, bytes, st);
}

static const lamp_comm_v1 mpi_table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "mpi", "1.0",
                               "MPI between processes launched by mpirun; cpu buffers, cuda through "
                               "host memory; every wait has a deadline and names the missing ranks"),
            .devices = LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA),
            .dtypes = LAMP_BIT(LAMP_F32) | LAMP_BIT(LAMP_I32) | LAMP_BIT(LAMP_F16) |
                      LAMP_BIT(LAMP_BF16) | LAMP_BIT(LAMP_U8),
            .params = mpi_params, .n_params = sizeof mpi_params / sizeof mpi_params[0],
            .probe = mpi_probe},
    .create = mpi_create,
    .destroy = mpi_destroy,
    .rank = mpi_rank,
    .size = mpi_size,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .all_reduce_start = mpi_all_reduce_start,
    .wait = mpi_wait,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &mpi_table.hdr;
}
