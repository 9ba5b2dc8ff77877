/*
** The mpi communicator with cuda buffers, staged through host memory: run as
** `mpirun -n 2 test_mpi_cuda_staging`. There is no GPU here, so the plugin is driven directly
** (dlopen, its table) under a host table of the test's own whose copy() counts each copy by
** direction and performs it with memcpy: "cuda" memory is host memory the plugin must still
** reach only through host->copy. Checked, on two ranks:
**   - all_reduce, broadcast, all_gather, reduce_scatter on "cuda" give the cpu results, with
**     one copy in and one copy out each;
**   - all_reduce_start copies in at once and back only in wait (two requests in flight), and a
**     later round of the same sizes reuses the requests' host buffers;
**   - cpu buffers are not copied; the staging is said once, at info level;
**   - under a core without host->copy (ABI 1.0) a cuda buffer is refused, saying why;
**   - every host buffer the plugin took is handed back by destroy.
*/
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

#define MPI_SO LAMP_PLUGIN_BUILD_DIR "/comm/mpi.so"
#define N 1000
#define STAGING_LINE "mpi: cuda buffers are staged through host memory (slow); use nccl for GPU runs"

static struct {
  int to_host, to_device, other; /* copies by direction */
  int allocs, frees;
  int staging_lines;
  char error[LAMP_ERROR_MAX];
} fake;

static void fake_log(lamp_log_level level, const char *who, const char *fmt, ...) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%s: ", who);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (strcmp(line, STAGING_LINE) == 0) fake.staging_lines += level == LAMP_LOG_INFO;
}

static lamp_status fake_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...) {
  (void)ctx;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fake.error, sizeof fake.error, fmt, ap);
  va_end(ap);
  return code;
}

static void *fake_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  (void)tag;
  if (device != LAMP_CPU) return NULL;
  fake.allocs++;
  return malloc(bytes);
}

static void fake_free(void *ptr) {
  fake.frees += ptr != NULL;
  free(ptr);
}

static lamp_status fake_copy(void *dst, lamp_device dst_device, const void *src, lamp_device src_device,
                             size_t bytes) {
  if (dst_device == LAMP_CPU && src_device == LAMP_CUDA) fake.to_host++;
  else if (dst_device == LAMP_CUDA && src_device == LAMP_CPU) fake.to_device++;
  else fake.other++;
  memmove(dst, src, bytes);
  return LAMP_OK;
}

static lamp_device fake_run_device(void) { return LAMP_CUDA; }

static const int no_abort = 0;

static const lamp_host host = {
    .struct_size = sizeof(lamp_host),
    .abi_major = LAMP_ABI_MAJOR,
    .abi_minor = LAMP_ABI_MINOR,
    .core_version = "test",
    .log = fake_log,
    .set_error = fake_set_error,
    .alloc = fake_alloc,
    .free = fake_free,
    .abort_flag = &no_abort,
    .run_device = fake_run_device,
    .copy = fake_copy,
};

static const lamp_comm_v1 *t;
static void *comm;

/* A plugin call that must succeed: the rank exits with its message otherwise. */
#define PLUGIN_OK(expr)                                                                               \
  do {                                                                                                \
    if ((expr) != LAMP_OK) {                                                                          \
      fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", check_rank, __FILE__, __LINE__, #expr, fake.error); \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

static void reset_copies(void) { fake.to_host = fake.to_device = fake.other = 0; }

static void check_copies(const char *what, int to_host, int to_device) {
  CHECK(fake.to_host == to_host && fake.to_device == to_device && fake.other == 0,
        "%s: copies to host %d, to device %d, other %d; expected %d, %d, 0", what, fake.to_host, fake.to_device,
        fake.other, to_host, to_device);
  reset_copies();
}

static void test_all_reduce(int rank) {
  static float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)(rank + 1) + 0.5f * (float)i;
  reset_copies();
  PLUGIN_OK(t->all_reduce(comm, f, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += f[i] != 3.0f + 0.5f * 2.0f * (float)i;
  CHECK(bad == 0, "cuda all_reduce SUM: %d wrong, f[1] = %g", bad, (double)f[1]);
  check_copies("all_reduce", 1, 1);
  PLUGIN_OK(t->all_reduce(comm, f, N, LAMP_F32, LAMP_REDUCE_MAX, LAMP_CPU));
  check_copies("all_reduce on the cpu", 0, 0);
}

/* The copy back happens in wait: until then the cuda buffer holds what went in. */
static void test_start_and_wait(int rank) {
  static float a[N], b[N];
  for (int i = 0; i < N; i++) a[i] = (float)rank, b[i] = (float)(10 * rank + i);
  lamp_request *ra = NULL, *rb = NULL;
  reset_copies();
  PLUGIN_OK(t->all_reduce_start(comm, a, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, &ra));
  PLUGIN_OK(t->all_reduce_start(comm, b, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, &rb));
  check_copies("two starts", 2, 0);
  CHECK(a[0] == (float)rank && b[1] == (float)(10 * rank + 1), "a start wrote the cuda buffer before wait");
  PLUGIN_OK(t->wait(comm, rb));
  check_copies("wait b", 0, 1);
  PLUGIN_OK(t->wait(comm, ra));
  check_copies("wait a", 0, 1);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += a[i] != 1.0f || b[i] != (float)(10 + 2 * i);
  CHECK(bad == 0, "start/wait on cuda: %d wrong", bad);
  /* The next step's buckets: same sizes, the same host buffers. */
  int allocs = fake.allocs;
  PLUGIN_OK(t->all_reduce_start(comm, a, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, &ra));
  PLUGIN_OK(t->all_reduce_start(comm, b, N / 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA, &rb));
  PLUGIN_OK(t->wait(comm, ra));
  PLUGIN_OK(t->wait(comm, rb));
  reset_copies();
  CHECK(fake.allocs == allocs, "a second round allocated %d host buffers", fake.allocs - allocs);
  CHECK(a[5] == 2.0f && b[5] == (float)(20 + 4 * 5) && b[N - 1] == (float)(10 + 2 * (N - 1)),
        "second round: a[5] = %g, b[5] = %g", (double)a[5], (double)b[5]);
}

/* A core of ABI 1.0 has no host->copy: cuda buffers are refused, naming the reason. */
static void test_old_core(void) {
  lamp_host old = host;
  old.struct_size = (uint32_t)offsetof(lamp_host, device_count);
  old.abi_minor = 0;
  const double params[] = {120.0};
  void *c = NULL;
  PLUGIN_OK(t->create(&old, NULL, params, &c));
  float x[4] = {1, 2, 3, 4};
  lamp_status st = t->all_reduce(c, x, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA);
  CHECK(st == LAMP_ERR_UNSUPPORTED, "cuda buffer under a 1.0 core: status %d", (int)st);
  CHECK(strcmp(fake.error, "all_reduce: cuda buffers need a core with host->copy (ABI 1.1); this one is 1.0") == 0,
        "message: %s", fake.error);
  t->destroy(c);
}

static void test_broadcast(int rank) {
  static uint16_t h[N]; /* f16 bits: moved, not reduced */
  for (int i = 0; i < N; i++) h[i] = (uint16_t)(rank == 1 ? 0x3c00 + i : 0);
  reset_copies();
  PLUGIN_OK(t->broadcast(comm, h, N, LAMP_F16, 1, LAMP_CUDA));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != (uint16_t)(0x3c00 + i);
  CHECK(bad == 0, "cuda broadcast from rank 1: %d wrong", bad);
  check_copies("broadcast", 1, 1);
}

static void test_all_gather_and_reduce_scatter(int rank, int size) {
  static float send[N], recv[2 * N], all[2 * N], part[N];
  for (int i = 0; i < N; i++) send[i] = (float)(100 * rank + i);
  reset_copies();
  PLUGIN_OK(t->all_gather(comm, send, recv, N, LAMP_F32, LAMP_CUDA));
  int bad = 0;
  for (int r = 0; r < size; r++)
    for (int i = 0; i < N; i++) bad += recv[r * N + i] != (float)(100 * r + i);
  CHECK(bad == 0, "cuda all_gather: %d wrong", bad);
  check_copies("all_gather", 1, 1);

  for (int i = 0; i < 2 * N; i++) all[i] = (float)(rank + 1) * (float)i;
  PLUGIN_OK(t->reduce_scatter(comm, all, part, N, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA));
  bad = 0;
  for (int i = 0; i < N; i++) bad += part[i] != 3.0f * (float)(rank * N + i);
  CHECK(bad == 0, "cuda reduce_scatter: %d wrong, part[1] = %g", bad, (double)part[1]);
  check_copies("reduce_scatter", 1, 1);
}

int main(void) {
  void *so = dlopen(MPI_SO, RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", MPI_SO, dlerror());
    return 1;
  }
  const lamp_plugin *(*entry)(const lamp_host *) = (const lamp_plugin *(*)(const lamp_host *))dlsym(
      so, "lamp_plugin_entry_v1");
  if (entry == NULL) return 1;
  t = (const lamp_comm_v1 *)entry(&host);
  const double params[] = {120.0};
  PLUGIN_OK(t->create(&host, NULL, params, &comm));
  int rank = t->rank(comm), size = t->size(comm);
  check_rank = rank;
  CHECK(size == 2, "expected 2 ranks, got %d", size);
  CHECK((t->hdr.devices & LAMP_BIT(LAMP_CUDA)) != 0, "mpi does not declare cuda");
  test_all_reduce(rank);
  test_start_and_wait(rank);
  test_broadcast(rank);
  test_all_gather_and_reduce_scatter(rank, size);
  test_old_core();
  CHECK(fake.staging_lines == 1, "the staging was said %d times at info level, expected once", fake.staging_lines);
  /* The verdict over both ranks, through the plugin on the cpu. */
  float counts[2] = {(float)checks_passed, (float)checks_failed};
  PLUGIN_OK(t->all_reduce(comm, counts, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU));
  t->destroy(comm); /* finalises MPI: the last collective is behind */
  int leaked = fake.allocs - fake.frees;
  if (leaked != 0) fprintf(stderr, "rank %d: %d host buffers not handed back\n", rank, leaked);
  if (rank == 0) printf("test_mpi_cuda_staging: %d ranks: %.0f passed, %.0f failed\n", size, counts[0], counts[1]);
  return counts[1] == 0.0f && counts[0] > 0.0f && leaked == 0 ? 0 : 1;
}
