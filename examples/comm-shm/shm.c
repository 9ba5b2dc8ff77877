/*
** shm: a communicator for the ranks of one host, over a POSIX shared-memory segment; an example
** of a communicator plugin written against the installed headers alone.
**
** Joining (create_with_bootstrap, ABI 1.3). The core lends the run's bootstrap (over MPI under
** mpirun or lamp-run, over a file store under other launchers): rank, size and local_size come
** from it, never from a launcher's environment. Rank 0 creates the segment under a fresh name
** (O_EXCL, mode 0600) and broadcasts the name through the bootstrap; every rank maps it and
** says through an all-gather whether it could; rank 0 then unlinks the name, so nothing is left
** in /dev/shm however the run ends (the mapping lives on until the last rank unmaps it).
**
** Collectives. The segment holds, for each rank, a staging area of `chunk_kb` KiB in each of two
** sets used in turn, and a counter of the barriers the rank has entered. A collective moves its
** data chunk by chunk: each rank copies its part into its own area of the current set, enters
** the barrier, and reads the others' areas. Alternating sets makes one barrier per chunk enough:
** a rank writes a set again only after the next barrier, which every rank enters after reading.
** all_reduce adds the ranks' values in rank order, the same order on every rank, so every rank
** gets the same bits (with two ranks, the same bits as any other communicator's sum).
**
** Waiting never hangs: a rank spins briefly, then sleeps in short naps, and gives up at the
** deadline (`timeout`: the option, else LAMP_COMM_TIMEOUT, else 300 s), when the run is aborted
** (host->abort_flag), or when another rank gave up (it leaves its rank in the segment). The
** message names the collective and the ranks that did not arrive; the communicator is then
** broken and every later call fails the same way.
**
** Buffers: cpu (host) memory. all_reduce: f32 and i32, sum, max and min (max and min return
** NaN where any rank has one). broadcast, all_gather and barrier: any dtype.
*/
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lamp/plugin.h>

#define WHO "shm"
#define LINE 64           /* a cache line: each rank's counter on its own */
#define NAME_BYTES 64     /* "/lamp-shm-<pid>-<n>" */
#define DEFAULT_TIMEOUT 300.0
#define SEGMENT_MAGIC 0x314d4853504d414cull /* "LAMPSHM1" */

/* The waits below use atomics on memory other processes share: they must not take a lock. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm needs lock-free 64-bit atomics");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm needs lock-free int atomics");

enum { P_TIMEOUT, P_CHUNK_KB, P_COUNT };

static const lamp_param shm_params[P_COUNT] = {
    [P_TIMEOUT] = {"timeout", DEFAULT_TIMEOUT, 0.1, 604800.0,
                   "seconds a collective may wait for the other ranks (default: $LAMP_COMM_TIMEOUT, else 300)"},
    [P_CHUNK_KB] = {"chunk_kb", 1024.0, 4.0, 65536.0, "KiB each rank stages per step of a collective"},
};

/* ---- the segment ----------------------------------------------------------------------------- */

typedef struct rank_line {
  _Alignas(LINE) atomic_ullong entered; /* barriers this rank has entered */
} rank_line;

typedef struct segment {
  uint64_t magic;  /* SEGMENT_MAGIC, written by rank 0 before it shares the name */
  uint32_t size;   /* ranks */
  uint32_t chunk;  /* bytes of one staging area */
  _Alignas(LINE) atomic_int gave_up; /* 0, or 1 + the first rank that gave up */
  _Alignas(LINE) rank_line ranks[];  /* size of them, then the staging areas */
} segment;

static size_t areas_offset(int size) {
  size_t head = sizeof(segment) + (size_t)size * sizeof(rank_line);
  return (head + LINE - 1) / LINE * LINE;
}

static size_t segment_bytes(int size, size_t chunk) { return areas_offset(size) + 2 * (size_t)size * chunk; }

typedef struct shm_comm {
  const lamp_host *host;
  lamp_ctx *ctx;
  int rank, size;
  double timeout;
  size_t chunk;        /* bytes */
  segment *seg;
  size_t seg_bytes;
  unsigned char *areas;
  uint64_t entered;    /* barriers this rank entered (its own counter's value) */
  uint64_t chunks;     /* chunks moved: their parity picks the set */
  long long seq;       /* collectives begun, for messages */
  char broken[256];    /* why the communicator failed, "" while it works */
} shm_comm;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- waiting --------------------------------------------------------------------------------- */

/* "rank 1" or "ranks 1, 3" (those whose counter is below `target`) into out. */
static void missing_ranks(const shm_comm *c, uint64_t target, char *out, size_t size) {
  int n = 0;
  size_t used = 0;
  out[0] = '\0';
  for (int r = 0; r < c->size; r++)
    if (atomic_load_explicit(&c->seg->ranks[r].entered, memory_order_acquire) < target) n++;
  used = (size_t)snprintf(out, size, "%s", n == 1 ? "rank " : "ranks ");
  for (int r = 0, k = 0; r < c->size && used < size; r++) {
    if (atomic_load_explicit(&c->seg->ranks[r].entered, memory_order_acquire) >= target) continue;
    used += (size_t)snprintf(out + used, size - used, "%s%d", k++ > 0 ? ", " : "", r);
  }
}

static int all_entered(const shm_comm *c, uint64_t target) {
  for (int r = 0; r < c->size; r++)
    if (atomic_load_explicit(&c->seg->ranks[r].entered, memory_order_acquire) < target) return 0;
  return 1;
}

/* Breaks the communicator with its message, and tells the other ranks (the first one to give up
   is the one they name). */
static lamp_status give_up(shm_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static lamp_status give_up(shm_comm *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->broken, sizeof c->broken, fmt, ap);
  va_end(ap);
  int none = 0;
  atomic_compare_exchange_strong(&c->seg->gave_up, &none, c->rank + 1);
  return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "%s", c->broken);
}

/*
** The barrier: this rank's counter goes up by one, then it waits until every counter has reached
** it. Counters differ by at most one (no rank can pass a barrier before all have entered it), so
** `>=` is exact. The release store publishes what this rank staged; the acquire loads make the
** others' staged data visible.
*/
static lamp_status barrier(shm_comm *c, const char *op) {
  const uint64_t target = ++c->entered;
  atomic_store_explicit(&c->seg->ranks[c->rank].entered, target, memory_order_release);
  const double start = now_seconds(), deadline = start + c->timeout;
  for (unsigned spins = 0;; spins++) {
    if (all_entered(c, target)) return LAMP_OK;
    int gave_up = atomic_load_explicit(&c->seg->gave_up, memory_order_relaxed);
    if (gave_up != 0)
      return give_up(c, "%s (collective #%lld): rank %d gave up (see its message); stopping too", op, c->seq,
                     gave_up - 1);
    if (*c->host->abort_flag != 0)
      return give_up(c, "%s (collective #%lld): the run was aborted", op, c->seq);
    if (spins < 1000) { /* the others are usually a moment away */
      sched_yield();
      continue;
    }
    const double t = now_seconds();
    if (t >= deadline) {
      char who[192];
      missing_ranks(c, target, who, sizeof who);
      return give_up(c, "%s (collective #%lld) timed out after %.1f s waiting for %s (timeout %g s)", op, c->seq,
                     t - start, who, c->timeout);
    }
    const struct timespec nap = {0, 20000}; /* 20 us */
    nanosleep(&nap, NULL);
  }
}

/* ---- arguments ------------------------------------------------------------------------------- */

static size_t dtype_size(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32:
  case LAMP_I32: return 4;
  case LAMP_F16:
  case LAMP_BF16: return 2;
  case LAMP_U8: return 1;
  default: return 0;
  }
}

/* Begins a collective: the communicator works, the buffer is host memory of a known dtype. */
static lamp_status begin(shm_comm *c, const char *op, const void *buf, size_t count, lamp_dtype dtype,
                         lamp_device device) {
  c->seq++;
  if (c->broken[0] != '\0')
    return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "%s: the communicator failed earlier: %s", op, c->broken);
  if (device != LAMP_CPU)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED, "%s: device %d: shm moves host (cpu) memory only", op,
                              (int)device);
  if (dtype_size(dtype) == 0)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_ARG, "%s: unknown dtype %d", op, (int)dtype);
  if (buf == NULL && count > 0)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", op, count);
  return LAMP_OK;
}

/* ---- collectives ----------------------------------------------------------------------------- */

/* Rank r's staging area in the set of chunk number `chunk`. */
static unsigned char *area(const shm_comm *c, uint64_t chunk, int r) {
  return c->areas + ((size_t)(chunk & 1) * (size_t)c->size + (size_t)r) * c->chunk;
}

/* dst = the ranks' areas combined in rank order; n elements. */
static void reduce_f32(const shm_comm *c, float *dst, uint64_t chunk, size_t n, lamp_reduce_op op) {
  memcpy(dst, area(c, chunk, 0), n * sizeof *dst);
  for (int r = 1; r < c->size; r++) {
    const float *src = (const float *)(const void *)area(c, chunk, r);
    for (size_t i = 0; i < n; i++) {
      const float a = dst[i], b = src[i];
      if (op == LAMP_REDUCE_SUM) dst[i] = a + b;
      else if (a != a || b != b) dst[i] = a != a ? a : b; /* NaN wins, as a found-inf flag wants */
      else dst[i] = op == LAMP_REDUCE_MAX ? (b > a ? b : a) : (b < a ? b : a);
    }
  }
}

static void reduce_i32(const shm_comm *c, int32_t *dst, uint64_t chunk, size_t n, lamp_reduce_op op) {
  memcpy(dst, area(c, chunk, 0), n * sizeof *dst);
  for (int r = 1; r < c->size; r++) {
    const int32_t *src = (const int32_t *)(const void *)area(c, chunk, r);
    for (size_t i = 0; i < n; i++) {
      const int32_t a = dst[i], b = src[i];
      if (op == LAMP_REDUCE_SUM) dst[i] = (int32_t)((uint32_t)a + (uint32_t)b); /* wraps, never UB */
      else dst[i] = op == LAMP_REDUCE_MAX ? (b > a ? b : a) : (b < a ? b : a);
    }
  }
}

static lamp_status shm_all_reduce(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                  lamp_device device) {
  shm_comm *c = comm;
  lamp_status st = begin(c, "all_reduce", buf, count, dtype, device);
  if (st != LAMP_OK) return st;
  if (dtype != LAMP_F32 && dtype != LAMP_I32)
    return c->host->set_error(c->ctx, LAMP_ERR_UNSUPPORTED,
                              "all_reduce: %s is not supported (f32 and i32 are; reduce 16-bit values in f32)",
                              lamp_dtype_name(dtype));
  if (op != LAMP_REDUCE_SUM && op != LAMP_REDUCE_MAX && op != LAMP_REDUCE_MIN)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_ARG, "all_reduce: unknown reduce op %d", (int)op);
  const size_t esize = dtype_size(dtype), per_chunk = c->chunk / esize;
  for (size_t done = 0; done < count; done += per_chunk) {
    const size_t n = count - done < per_chunk ? count - done : per_chunk;
    unsigned char *mine = (unsigned char *)buf + done * esize;
    memcpy(area(c, c->chunks, c->rank), mine, n * esize);
    if ((st = barrier(c, "all_reduce")) != LAMP_OK) return st;
    if (dtype == LAMP_F32) reduce_f32(c, (float *)(void *)mine, c->chunks, n, op);
    else reduce_i32(c, (int32_t *)(void *)mine, c->chunks, n, op);
    c->chunks++;
  }
  return LAMP_OK;
}

static lamp_status shm_broadcast(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                                 lamp_device device) {
  shm_comm *c = comm;
  lamp_status st = begin(c, "broadcast", buf, count, dtype, device);
  if (st != LAMP_OK) return st;
  if (root < 0 || root >= c->size)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_ARG, "broadcast: root %d out of range for %d ranks", root,
                              c->size);
  const size_t bytes = count * dtype_size(dtype);
  for (size_t done = 0; done < bytes; done += c->chunk) {
    const size_t n = bytes - done < c->chunk ? bytes - done : c->chunk;
    unsigned char *mine = (unsigned char *)buf + done;
    if (c->rank == root) memcpy(area(c, c->chunks, root), mine, n);
    if ((st = barrier(c, "broadcast")) != LAMP_OK) return st;
    if (c->rank != root) memcpy(mine, area(c, c->chunks, root), n);
    c->chunks++;
  }
  return LAMP_OK;
}

static lamp_status shm_all_gather(void *comm, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype,
                                  lamp_device device) {
  shm_comm *c = comm;
  lamp_status st = begin(c, "all_gather", sendbuf, count, dtype, device);
  if (st != LAMP_OK) return st;
  if (recvbuf == NULL && count > 0)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_ARG, "all_gather: NULL receive buffer for %zu elements",
                              count * (size_t)c->size);
  const size_t bytes = count * dtype_size(dtype);
  for (size_t done = 0; done < bytes; done += c->chunk) {
    const size_t n = bytes - done < c->chunk ? bytes - done : c->chunk;
    memcpy(area(c, c->chunks, c->rank), (const unsigned char *)sendbuf + done, n);
    if ((st = barrier(c, "all_gather")) != LAMP_OK) return st;
    for (int r = 0; r < c->size; r++) memcpy((unsigned char *)recvbuf + (size_t)r * bytes + done, area(c, c->chunks, r), n);
    c->chunks++;
  }
  return LAMP_OK;
}

static lamp_status shm_barrier(void *comm) {
  shm_comm *c = comm;
  lamp_status st = begin(c, "barrier", NULL, 0, LAMP_U8, LAMP_CPU);
  return st != LAMP_OK ? st : barrier(c, "barrier");
}

static int shm_rank(void *comm) { return ((const shm_comm *)comm)->rank; }
static int shm_size(void *comm) { return ((const shm_comm *)comm)->size; }

/* ---- joining and leaving --------------------------------------------------------------------- */

static int shm_probe(const lamp_host *host, char *reason, size_t reason_size) {
  (void)host;
  snprintf(reason, reason_size, "shared memory between the ranks of one host");
  return 1;
}

/* option > LAMP_COMM_TIMEOUT > 300, as the mpi plugin reads them (an option equal to the default
   cannot be told from none). */
static lamp_status resolve_timeout(shm_comm *c, double option) {
  c->timeout = option;
  const char *env = getenv("LAMP_COMM_TIMEOUT");
  if (option != DEFAULT_TIMEOUT || env == NULL || env[0] == '\0') return LAMP_OK;
  char *end = NULL;
  double v = strtod(env, &end);
  if (end == env || *end != '\0' || !(v >= shm_params[P_TIMEOUT].min_value && v <= shm_params[P_TIMEOUT].max_value))
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_USAGE, "LAMP_COMM_TIMEOUT must be seconds in [%g, %g], got '%s'",
                              shm_params[P_TIMEOUT].min_value, shm_params[P_TIMEOUT].max_value, env);
  c->timeout = v;
  return LAMP_OK;
}

/* Rank 0: a new segment under a name no one else has (O_EXCL), sized and filled in. */
static lamp_status create_segment(shm_comm *c, char name[NAME_BYTES]) {
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(name, NAME_BYTES, "/lamp-shm-%ld-%d", (long)getpid(), attempt);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) continue; /* left behind by a killed run with our pid */
    if (fd < 0)
      return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "cannot create shared memory %s: %s", name, strerror(errno));
    /* posix_fallocate reserves the pages now: a full /dev/shm is an error here, not a SIGBUS later. */
    int err = posix_fallocate(fd, 0, (off_t)c->seg_bytes);
    void *p = err == 0 ? mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (err == 0 && p == MAP_FAILED) err = errno;
    close(fd);
    if (err != 0) {
      shm_unlink(name);
      return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "cannot allocate %zu bytes of shared memory %s: %s%s",
                                c->seg_bytes, name, strerror(err),
                                err == ENOSPC ? " (is /dev/shm large enough? lower option chunk_kb)" : "");
    }
    c->seg = p; /* fresh pages are zero: every counter and gave_up start at 0 */
    c->seg->magic = SEGMENT_MAGIC;
    c->seg->size = (uint32_t)c->size;
    c->seg->chunk = (uint32_t)c->chunk;
    return LAMP_OK;
  }
  return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "cannot find a free shared memory name (/lamp-shm-%ld-*)",
                            (long)getpid());
}

/* The other ranks: the segment rank 0 named, checked against this rank's own options. */
static lamp_status open_segment(shm_comm *c, const char *name) {
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0)
    return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "cannot open rank 0's shared memory %s: %s", name,
                              strerror(errno));
  struct stat st;
  void *p = MAP_FAILED;
  int err = fstat(fd, &st) != 0 ? errno : 0;
  if (err == 0 && (size_t)st.st_size == c->seg_bytes) {
    p = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) err = errno;
  }
  close(fd);
  if (err != 0)
    return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "cannot map rank 0's shared memory %s: %s", name,
                              strerror(err));
  if (p == MAP_FAILED)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_USAGE,
                              "rank 0's shared memory %s is %lld bytes, this rank expects %zu: do the ranks "
                              "give shm the same chunk_kb?",
                              name, (long long)st.st_size, c->seg_bytes);
  c->seg = p;
  if (c->seg->magic != SEGMENT_MAGIC || c->seg->size != (uint32_t)c->size || c->seg->chunk != (uint32_t)c->chunk)
    return c->host->set_error(c->ctx, LAMP_ERR_INVALID_USAGE,
                              "rank 0's shared memory %s is for %u ranks in chunks of %u bytes, this rank expects "
                              "%d ranks in chunks of %zu: do the ranks give shm the same chunk_kb?",
                              name, c->seg->size, c->seg->chunk, c->size, c->chunk);
  return LAMP_OK;
}

static void shm_destroy(void *comm) {
  shm_comm *c = comm;
  if (c == NULL) return;
  if (c->seg != NULL) munmap(c->seg, c->seg_bytes);
  free(c);
}

/* Every rank learns whether every rank mapped the segment. LAMP_OK when all did; a rank that did
   not keeps its own message (the caller returns it), the others name it. */
static lamp_status agree_joined(shm_comm *c, const lamp_bootstrap *boot, int joined) {
  unsigned char *all = malloc((size_t)c->size);
  if (all == NULL) return c->host->set_error(c->ctx, LAMP_ERR_SYSTEM, "out of memory");
  unsigned char mine = (unsigned char)joined;
  lamp_status st = boot->all_gather(boot, &mine, all, 1, c->timeout); /* a failure is recorded by the core */
  int failed_rank = -1;
  for (int r = 0; st == LAMP_OK && r < c->size && failed_rank < 0; r++)
    if (!all[r]) failed_rank = r;
  free(all);
  if (st != LAMP_OK || failed_rank < 0 || !joined) return st;
  return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "rank %d could not map the shared memory (see its message)",
                            failed_rank);
}

/* Rank 0 creates and names the segment, the others map it, all agree that all did; then the name
   goes (rank 0 unlinks it once every rank holds the mapping). */
static lamp_status join(shm_comm *c, const lamp_bootstrap *boot) {
  char name[NAME_BYTES] = "";
  lamp_status st = LAMP_OK, mine = LAMP_OK;
  if (c->rank == 0) mine = create_segment(c, name); /* an empty name tells the others it failed */
  if ((st = boot->broadcast(boot, name, sizeof name, 0, c->timeout)) != LAMP_OK) {
    if (c->rank == 0 && name[0] != '\0' && mine == LAMP_OK) shm_unlink(name);
    return st;
  }
  if (c->rank == 0 && mine != LAMP_OK) return mine;
  if (c->rank != 0) {
    if (name[0] == '\0')
      return c->host->set_error(c->ctx, LAMP_ERR_REMOTE, "rank 0 could not create the shared memory (see its message)");
    name[NAME_BYTES - 1] = '\0';
    mine = open_segment(c, name);
  }
  st = agree_joined(c, boot, mine == LAMP_OK);
  if (c->rank == 0) shm_unlink(name); /* every rank has it mapped, or the run ends here */
  if (mine != LAMP_OK) return mine;
  if (st != LAMP_OK) return st;
  c->areas = (unsigned char *)c->seg + areas_offset(c->size);
  return LAMP_OK;
}

static lamp_status shm_create_with_bootstrap(const lamp_host *host, lamp_ctx *ctx, const double *params,
                                             const lamp_bootstrap *boot, void **comm) {
  if (boot->local_size != boot->size)
    return host->set_error(ctx, LAMP_ERR_INVALID_USAGE,
                           "the run's %d ranks span several hosts (%d on this one): shm joins the ranks of one "
                           "host only (use mpi or nccl)",
                           boot->size, boot->local_size);
  shm_comm *c = calloc(1, sizeof *c);
  if (c == NULL) return host->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  c->host = host;
  c->ctx = ctx;
  c->rank = boot->rank;
  c->size = boot->size;
  c->chunk = (size_t)params[P_CHUNK_KB] * 1024 / LINE * LINE;
  c->seg_bytes = segment_bytes(c->size, c->chunk);
  lamp_status st = resolve_timeout(c, params[P_TIMEOUT]);
  if (st == LAMP_OK) st = join(c, boot);
  if (st != LAMP_OK) {
    shm_destroy(c);
    return st;
  }
  host->log(LAMP_LOG_INFO, WHO, "rank %d of %d, %zu KiB segment, timeout %g s", c->rank, c->size,
            c->seg_bytes / 1024, c->timeout);
  *comm = c;
  return LAMP_OK;
}

/* A core older than ABI 1.3 calls create, without a bootstrap: shm cannot learn the ranks then. */
static lamp_status shm_create(const lamp_host *host, lamp_ctx *ctx, const double *params, void **comm) {
  (void)params;
  (void)comm;
  return host->set_error(ctx, LAMP_ERR_UNSUPPORTED,
                         "shm needs the core's bootstrap (plugin ABI 1.3 or later); this core is ABI %u.%u",
                         (unsigned)host->abi_major, (unsigned)host->abi_minor);
}

static const lamp_comm_v1 shm_comm_table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_COMM, lamp_comm_v1, "shm", "1.0",
                               "the ranks of one host over POSIX shared memory"),
            .devices = LAMP_BIT(LAMP_CPU),
            .dtypes = LAMP_BIT(LAMP_F32) | LAMP_BIT(LAMP_F16) | LAMP_BIT(LAMP_BF16) | LAMP_BIT(LAMP_I32) |
                      LAMP_BIT(LAMP_U8),
            .params = shm_params,
            .n_params = P_COUNT,
            .probe = shm_probe},
    .create = shm_create,
    .destroy = shm_destroy,
    .rank = shm_rank,
    .size = shm_size,
    .all_reduce = shm_all_reduce,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .all_gather = shm_all_gather,
    .create_with_bootstrap = shm_create_with_bootstrap,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &shm_comm_table.hdr;
}
