/*
** The nccl communicator on a GPU (the GPU check's NCCL stage). One machine, one GPU
** is enough:
**
**     nccl_check PLUGIN    PLUGIN: the path of nccl.so
**
**   probe     on a CUDA run: 3 under a launcher (above mpi's 2), 0 for one process, the reason
**   peer      two processes, the second never creates its communicator (it answers the
**             bootstrap and nothing else): the first fails at its deadline (5 s), aborts, and
**             says so; within a few seconds of it
**   gpus      more ranks on this host than GPUs: refused before NCCL, naming both counts
**   one rank  every collective on device and host buffers (bf16, f16, f32, i32, u8; host buffers
**             larger than the staging buffer); the enqueued all-reduce runs after the work on
**             the caller's stream and before the work made to wait on it; poll; destroy
**   watchdog  an all-reduce held back past its deadline (2 s): poll reports the operation, its
**             number, the rank and the timeout within moments, every later call fails the same
**             way, and destroy returns (the communicator was aborted)
**
** Prints one line per check, "nccl_check: NAME: ok ..." or "... FAIL ...". Exit status: 0 all
** ok, 1 a failure, 2 this machine cannot run the checks (no CUDA device: the runtime's message).
*/
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "lamp/plugin.h"

static int failures;

static void report(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void report(const char *name, int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("nccl_check: %s: %s", name, ok ? "ok " : "FAIL ");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (!ok) failures++;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the host table -------------------------------------------------------------------------- */

struct lamp_ctx {
  char message[1024];
};

static const volatile int no_abort = 0;
static cudaStream_t core_stream; /* stands for the core's queue */

static void host_log(lamp_log_level level, const char *who, const char *fmt, ...) {
  if (level > LAMP_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nccl_check: [%s] ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static lamp_status host_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...) {
  if (ctx != NULL && fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

static int host_device_count(lamp_device d) {
  int n = 0;
  return d == LAMP_CUDA && cudaGetDeviceCount(&n) == cudaSuccess ? n : d == LAMP_CPU;
}
static int host_device_ordinal(lamp_device d) { return d == LAMP_CUDA ? 0 : -1; }
static lamp_device host_run_device(void) { return LAMP_CUDA; }
static void *host_stream(lamp_device d) { return d == LAMP_CUDA ? core_stream : NULL; }

static const lamp_host host = {
    .struct_size = sizeof(lamp_host),
    .abi_major = LAMP_ABI_MAJOR,
    .abi_minor = LAMP_ABI_MINOR,
    .core_version = "nccl_check",
    .log = host_log,
    .set_error = host_set_error,
    .abort_flag = &no_abort,
    .device_count = host_device_count,
    .device_ordinal = host_device_ordinal,
    .run_device = host_run_device,
    .stream = host_stream,
};

static const lamp_comm_v1 *open_plugin(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "nccl_check: cannot open %s: %s\n", path, dlerror());
    exit(1);
  }
  lamp_plugin_entry_fn entry;
  void *sym = dlsym(h, LAMP_ENTRY_SYMBOL);
  memcpy(&entry, &sym, sizeof entry);
  const lamp_comm_v1 *t = sym != NULL ? (const lamp_comm_v1 *)entry(&host) : NULL;
  if (t == NULL || !LAMP_COMM_HAS(t, poll)) {
    fprintf(stderr, "nccl_check: %s is not an ABI 1.3 communicator\n", path);
    exit(1);
  }
  return t;
}

/* ---- a two-process bootstrap (peer) ---------------------------------------------------------- */

/* Messages on a socket pair: op, payload bytes, payload. The peer answers 'G' (all-gather) with
   the payload it got (rank 0's "ready" status is its own) and 'R' (barrier) with one byte. */
typedef struct wire {
  char op;
  uint64_t bytes;
} wire;

static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    int ms = (int)((deadline - now()) * 1000.0);
    if (ms <= 0) return 0;
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, ms);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return 0;
  }
}

static int send_all(int fd, const void *buf, size_t n, double deadline) {
  const char *p = buf;
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return 0;
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return 0;
    p += k;
    n -= (size_t)k;
  }
  return 1;
}

static int recv_all(int fd, void *buf, size_t n, double deadline) {
  char *p = buf;
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return 0;
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return 0;
    p += k;
    n -= (size_t)k;
  }
  return 1;
}

typedef struct pair_boot {
  int fd;
} pair_boot;

static lamp_status pair_broadcast(const lamp_bootstrap *b, void *buf, size_t bytes, int root, double timeout_s) {
  pair_boot *p = b->impl;
  wire w = {'B', bytes};
  double deadline = now() + timeout_s;
  if (root != 0) return LAMP_ERR_INTERNAL;
  return send_all(p->fd, &w, sizeof w, deadline) && send_all(p->fd, buf, bytes, deadline) ? LAMP_OK : LAMP_ERR_REMOTE;
}

static lamp_status pair_all_gather(const lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  pair_boot *p = b->impl;
  wire w = {'G', bytes};
  double deadline = now() + timeout_s;
  memcpy(recv, send, bytes);
  return send_all(p->fd, &w, sizeof w, deadline) && send_all(p->fd, send, bytes, deadline) &&
                 recv_all(p->fd, (char *)recv + bytes, bytes, deadline)
             ? LAMP_OK
             : LAMP_ERR_REMOTE;
}

static lamp_status pair_barrier(const lamp_bootstrap *b, double timeout_s) {
  pair_boot *p = b->impl;
  wire w = {'R', 0};
  char c;
  double deadline = now() + timeout_s;
  return send_all(p->fd, &w, sizeof w, deadline) && recv_all(p->fd, &c, 1, deadline) ? LAMP_OK : LAMP_ERR_REMOTE;
}

/* The second process: goes through the bootstrap like a rank, never creates a communicator. */
static void echo_peer(int fd) {
  double deadline = now() + 60.0;
  for (;;) {
    wire w;
    if (!recv_all(fd, &w, sizeof w, deadline)) _exit(0);
    char *buf = malloc(w.bytes ? w.bytes : 1);
    if (buf == NULL || !recv_all(fd, buf, w.bytes, deadline)) _exit(1);
    if (w.op == 'G') send_all(fd, buf, w.bytes, deadline);
    if (w.op == 'R') send_all(fd, "r", 1, deadline);
    free(buf);
  }
}

/* The peer process, forked before this one touches CUDA; returns rank 0's end of the pair. */
static int start_peer(pid_t *pid) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -1;
  *pid = fork();
  if (*pid == 0) {
    close(fds[0]);
    echo_peer(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  if (*pid < 0) {
    close(fds[0]);
    return -1;
  }
  return fds[0];
}

static void check_missing_peer(const lamp_comm_v1 *t, int fd, pid_t pid) {
  if (fd < 0) {
    report("peer", 0, "cannot start the peer process: %s", strerror(errno));
    return;
  }
  pair_boot pb = {fd};
  /* The peer is on another host as far as the GPUs go: rank 0 is the only rank here. */
  lamp_bootstrap boot = {sizeof boot, 0, 2, 0, 1, &pb, pair_broadcast, pair_all_gather, pair_barrier};
  lamp_ctx ctx = {""};
  void *comm = NULL;
  double timeout = 5.0, start = now();
  lamp_status st = t->create_with_bootstrap(&host, &ctx, &timeout, &boot, &comm);
  double took = now() - start;
  close(fd);
  waitpid(pid, NULL, 0);
  const char *want = "initialising NCCL on rank 0 of 2 (cuda:0) did not finish within 5 s (the comm option "
                     "'timeout'): a rank did not join (exited, hung, or never created its communicator); the "
                     "communicator was aborted";
  report("peer", st == LAMP_ERR_REMOTE && strcmp(ctx.message, want) == 0 && took >= 5.0 && took < 12.0,
         "status %d after %.1f s: %s", (int)st, took, ctx.message);
  if (st == LAMP_OK) t->destroy(comm);
}

/* ---- probe ----------------------------------------------------------------------------------- */

static void check_probe(const lamp_comm_v1 *t, int gpus) {
  static const char alone_prefix[] = "one process without a launcher: single serves (NCCL ";
  char reason[512], with[512], want_prefix[160];
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  int launched = t->hdr.probe(&host, with, sizeof with);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  int alone = t->hdr.probe(&host, reason, sizeof reason);
  snprintf(want_prefix, sizeof want_prefix, "cuda run under a launcher (OMPI_COMM_WORLD_SIZE=2): NCCL ");
  char gpu_text[32];
  snprintf(gpu_text, sizeof gpu_text, ", %d GPU%s", gpus, gpus == 1 ? "" : "s");
  int ok = launched == 3 && strncmp(with, want_prefix, strlen(want_prefix)) == 0 && strstr(with, gpu_text) != NULL &&
           alone == 0 && strncmp(reason, alone_prefix, strlen(alone_prefix)) == 0;
  report("probe", ok, "under a launcher %d (%s); alone %d (%s)", launched, with, alone, reason);
}

/* ---- more ranks than GPUs (gpus) ------------------------------------------------------------- */

static lamp_status solo_broadcast(const lamp_bootstrap *b, void *buf, size_t bytes, int root, double timeout_s) {
  (void)b, (void)buf, (void)bytes, (void)root, (void)timeout_s;
  return LAMP_OK;
}

static lamp_status solo_all_gather(const lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  (void)timeout_s;
  for (int r = 0; r < b->size; r++) memcpy((char *)recv + (size_t)r * bytes, send, bytes);
  return LAMP_OK;
}

static lamp_status solo_barrier(const lamp_bootstrap *b, double timeout_s) {
  (void)b, (void)timeout_s;
  return LAMP_OK;
}

static void check_too_many_ranks(const lamp_comm_v1 *t, int gpus) {
  int n = gpus + 1;
  lamp_bootstrap boot = {sizeof boot, 0, n, 0, n, NULL, solo_broadcast, solo_all_gather, solo_barrier};
  lamp_ctx ctx = {""};
  void *comm = NULL;
  double timeout = 10.0;
  lamp_status st = t->create_with_bootstrap(&host, &ctx, &timeout, &boot, &comm);
  char want[160];
  snprintf(want, sizeof want, "%d ranks on this host but %d GPU%s: NCCL needs one GPU per rank", n, gpus,
           gpus == 1 ? "" : "s");
  report("gpus", st == LAMP_ERR_INVALID_USAGE && strcmp(ctx.message, want) == 0, "status %d: %s", (int)st,
         ctx.message);
  if (st == LAMP_OK) t->destroy(comm);
}

/* ---- one rank -------------------------------------------------------------------------------- */

static size_t dtype_bytes(lamp_dtype d) { return d == LAMP_F32 || d == LAMP_I32 ? 4 : d == LAMP_U8 ? 1 : 2; }

static void fill(unsigned char *p, size_t bytes, unsigned seed) {
  /* Bytes whose 16-bit and 32-bit readings are finite numbers: every value 0x00-0x3f. */
  for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 7) & 0x3f;
}

/* A device collective on a size-1 communicator leaves the data as it was. */
static int device_round(const lamp_comm_v1 *t, void *comm, const char *what, lamp_dtype d, size_t count,
                        lamp_ctx *ctx) {
  size_t bytes = count * dtype_bytes(d);
  unsigned char *want = malloc(bytes), *got = malloc(bytes);
  void *dev = NULL, *dev2 = NULL;
  fill(want, bytes, (unsigned)count);
  int ok = cudaMalloc(&dev, bytes) == cudaSuccess && cudaMalloc(&dev2, bytes) == cudaSuccess &&
           cudaMemcpy(dev, want, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  lamp_status st = LAMP_ERR_SYSTEM;
  if (ok && strcmp(what, "all_reduce") == 0) st = t->all_reduce(comm, dev, count, d, LAMP_REDUCE_SUM, LAMP_CUDA);
  if (ok && strcmp(what, "all_reduce max") == 0) st = t->all_reduce(comm, dev, count, d, LAMP_REDUCE_MAX, LAMP_CUDA);
  if (ok && strcmp(what, "broadcast") == 0) st = t->broadcast(comm, dev, count, d, 0, LAMP_CUDA);
  if (ok && strcmp(what, "all_gather") == 0) {
    st = t->all_gather(comm, dev, dev2, count, d, LAMP_CUDA);
    void *tmp = dev;
    dev = dev2;
    dev2 = tmp;
  }
  ok = ok && st == LAMP_OK && cudaMemcpy(got, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
       memcmp(got, want, bytes) == 0;
  if (!ok) printf("nccl_check:   %s on %zu elements (dtype %d): status %d '%s'\n", what, count, (int)d, (int)st,
                  ctx->message);
  cudaFree(dev);
  cudaFree(dev2);
  free(want);
  free(got);
  return ok;
}

static int host_round(const lamp_comm_v1 *t, void *comm, const char *what, lamp_dtype d, size_t count, lamp_ctx *ctx) {
  size_t bytes = count * dtype_bytes(d);
  unsigned char *want = malloc(bytes), *buf = malloc(bytes), *out = malloc(bytes);
  fill(want, bytes, 7u + (unsigned)count);
  memcpy(buf, want, bytes);
  lamp_status st;
  if (strcmp(what, "all_reduce") == 0) st = t->all_reduce(comm, buf, count, d, LAMP_REDUCE_SUM, LAMP_CPU);
  else if (strcmp(what, "broadcast") == 0) st = t->broadcast(comm, buf, count, d, 0, LAMP_CPU);
  else st = t->all_gather(comm, buf, out, count, d, LAMP_CPU), memcpy(buf, out, bytes);
  int ok = st == LAMP_OK && memcmp(buf, want, bytes) == 0;
  if (!ok) printf("nccl_check:   host %s on %zu elements (dtype %d): status %d '%s'\n", what, count, (int)d,
                  (int)st, ctx->message);
  free(want);
  free(buf);
  free(out);
  return ok;
}

/* A host function that holds its stream until released (or `limit` seconds pass). */
typedef struct gate {
  atomic_int open;
  double limit;
} gate;

static void CUDART_CB hold(void *arg) {
  gate *g = arg;
  double end = now() + g->limit;
  while (!atomic_load(&g->open) && now() < end) {
    struct timespec nap = {0, 1000000L};
    nanosleep(&nap, NULL);
  }
}

/* The all-reduce runs after the memset queued (late) on the caller's stream, and the copy made
   to wait for it runs after it: the host sees the memset's bytes. */
static int ordering_round(const lamp_comm_v1 *t, void *comm, lamp_ctx *ctx) {
  size_t count = ((size_t)1 << 22) + 5, bytes = count * 4;
  float *dev = NULL, *host_buf = NULL;
  cudaStream_t after = NULL;
  gate g = {0, 0.3};
  int ok = cudaMalloc((void **)&dev, bytes) == cudaSuccess && cudaMallocHost((void **)&host_buf, bytes) == cudaSuccess &&
           cudaStreamCreateWithFlags(&after, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMemset(dev, 0, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  lamp_request *req = NULL;
  lamp_status st = LAMP_ERR_SYSTEM;
  if (ok) {
    cudaLaunchHostFunc(core_stream, hold, &g); /* the memset comes 0.3 s late */
    cudaMemsetAsync(dev, 0x3f, bytes, core_stream);
    st = t->all_reduce_enqueue(comm, dev, count, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, core_stream, &req);
    if (st == LAMP_OK) st = t->wait_stream(comm, req, after);
    if (st == LAMP_OK) st = t->poll(comm);
    if (st == LAMP_OK && cudaMemcpyAsync(host_buf, dev, bytes, cudaMemcpyDeviceToHost, after) != cudaSuccess)
      st = LAMP_ERR_SYSTEM;
    if (st == LAMP_OK && cudaStreamSynchronize(after) != cudaSuccess) st = LAMP_ERR_SYSTEM;
  }
  size_t wrong = 0;
  unsigned want;
  memset(&want, 0x3f, sizeof want);
  for (size_t i = 0; st == LAMP_OK && i < count; i++) {
    unsigned v;
    memcpy(&v, &host_buf[i], sizeof v);
    wrong += v != want;
  }
  ok = ok && st == LAMP_OK && wrong == 0 && t->poll(comm) == LAMP_OK;
  if (!ok) printf("nccl_check:   enqueue ordering: status %d '%s', %zu of %zu wrong\n", (int)st, ctx->message, wrong, count);
  cudaDeviceSynchronize();
  cudaFree(dev);
  cudaFreeHost(host_buf);
  if (after != NULL) cudaStreamDestroy(after);
  return ok;
}

static void check_one_rank(const lamp_comm_v1 *t) {
  lamp_ctx ctx = {""};
  void *comm = NULL;
  double timeout = 30.0, start = now();
  lamp_status st = t->create(&host, &ctx, &timeout, &comm);
  if (st != LAMP_OK) {
    report("one rank", 0, "create: status %d: %s", (int)st, ctx.message);
    return;
  }
  double created = now() - start;
  int rounds = 0, ok = 0;
  const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16, LAMP_I32, LAMP_U8};
  const char *ops[] = {"all_reduce", "all_reduce max", "broadcast", "all_gather"};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
      rounds++;
      ok += device_round(t, comm, ops[k], dtypes[i], ((size_t)1 << 20) + 3, &ctx);
    }
  /* Host buffers: small, and larger than the 4 MiB staging buffer (several pieces). */
  const char *host_ops[] = {"all_reduce", "broadcast", "all_gather"};
  const size_t counts[] = {5, ((size_t)3 << 20) + 11};
  for (size_t k = 0; k < 3; k++)
    for (size_t c = 0; c < 2; c++) {
      rounds += 2;
      ok += host_round(t, comm, host_ops[k], LAMP_F32, counts[c], &ctx);
      ok += host_round(t, comm, host_ops[k], LAMP_U8, counts[c], &ctx);
    }
  rounds++;
  ok += t->barrier(comm) == LAMP_OK;
  rounds++;
  ok += ordering_round(t, comm, &ctx);
  start = now();
  t->destroy(comm);
  report("one rank", ok == rounds, "%d of %d rounds right (create %.2f s, destroy %.2f s)", ok, rounds, created,
         now() - start);
}

static void check_watchdog(const lamp_comm_v1 *t) {
  lamp_ctx ctx = {""};
  void *comm = NULL;
  double timeout = 2.0;
  lamp_status st = t->create(&host, &ctx, &timeout, &comm);
  if (st != LAMP_OK) {
    report("watchdog", 0, "create: status %d: %s", (int)st, ctx.message);
    return;
  }
  float *dev = NULL;
  cudaMalloc((void **)&dev, 1024 * sizeof *dev);
  gate g = {0, 6.0}; /* past the deadline: an abort that waited for the stream would show */
  cudaLaunchHostFunc(core_stream, hold, &g); /* the caller's stream never gets to the all-reduce */
  lamp_request *req = NULL;
  double start = now();
  st = t->all_reduce_enqueue(comm, dev, 1024, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, core_stream, &req);
  double enqueued = now() - start;
  while (st == LAMP_OK && now() - start < 9.0) {
    st = t->poll(comm);
    struct timespec nap = {0, 1000000L};
    nanosleep(&nap, NULL);
  }
  double took = now() - start;
  atomic_store(&g.open, 1);
  const char *want =
      "all_reduce #1 on rank 0 did not finish within 2 s (the comm option 'timeout'); the communicator was aborted";
  int ok = st == LAMP_ERR_REMOTE && strcmp(ctx.message, want) == 0 && took >= 2.0 && took < 4.0 && enqueued < 0.5;
  report("watchdog", ok, "poll: status %d after %.2f s (enqueue returned in %.3f s): %s", (int)st, took, enqueued,
         ctx.message);
  ctx.message[0] = '\0';
  st = t->all_reduce(comm, dev, 1024, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA);
  report("watchdog later call", st == LAMP_ERR_REMOTE && strcmp(ctx.message, want) == 0, "status %d: %s", (int)st,
         ctx.message);
  if (req != NULL) t->wait_stream(comm, req, core_stream);
  start = now();
  t->destroy(comm);
  report("watchdog destroy", now() - start < 5.0, "destroy of the aborted communicator took %.2f s", now() - start);
  cudaStreamSynchronize(core_stream);
  cudaFree(dev);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: nccl_check PATH/nccl.so\n");
    return 1;
  }
  const lamp_comm_v1 *t = open_plugin(argv[1]);
  /* The peer is forked while this process has no CUDA state (nor its threads) yet. */
  pid_t peer = -1;
  int peer_fd = start_peer(&peer);
  int gpus = 0;
  cudaError_t err = cudaGetDeviceCount(&gpus);
  if (err != cudaSuccess || gpus == 0) {
    if (peer_fd >= 0) close(peer_fd);
    if (peer > 0) waitpid(peer, NULL, 0);
    printf("nccl_check: no CUDA device: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "the driver reports none");
    return 2;
  }
  check_missing_peer(t, peer_fd, peer);
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&core_stream, cudaStreamNonBlocking) != cudaSuccess) {
    printf("nccl_check: cannot use cuda:0\n");
    return 1;
  }
  check_probe(t, gpus);
  check_too_many_ranks(t, gpus);
  check_one_rank(t);
  check_watchdog(t);
  printf("nccl_check: %s\n", failures == 0 ? "all ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
