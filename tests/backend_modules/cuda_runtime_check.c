/*
** The CUDA module's runtime side on its own (build/backends/cuda.so, core/backend/cuda): opened as
** the core opens it, with services of this program's own, so it needs nothing but the C library
** and runs where lamp's other dependencies are missing (the GPU machine).
**
**   cuda_runtime_check MODULE --expect-no-driver   a machine without a CUDA driver (ctest): the
**                                                  entry refuses with the exact no-driver message
**   cuda_runtime_check MODULE                      a GPU: devices, the pool, copies, the pinned
**                                                  staging, events, out of memory, the ledger
** Prints one line per failed check and "cuda runtime: P passed, F failed"; exit 0 when none failed.
*/
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/module.h"

static char last[2048];
static long long ledger[LAMP_DEVICE_SLOTS][LAMP_MEM_TAG_COUNT];
static int passed, failed;

static lamp_status record(lamp_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last, sizeof last, fmt, ap);
  va_end(ap);
  return code;
}

static void say(lamp_log_level level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "log %d %s: ", (int)level, who ? who : "-");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void add(lamp_device d, lamp_mem_tag t, size_t bytes) { ledger[d][t] += (long long)bytes; }
static void sub(lamp_device d, lamp_mem_tag t, size_t bytes) { ledger[d][t] -= (long long)bytes; }

static const lamp_backend_services svc = {sizeof svc, LAMP_BACKEND_MODULE_VERSION, sizeof(lamp_backend), record, say,
                                          add, sub};

static void check(const char *what, int ok) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  printf("FAILED: %s (last error: %s)\n", what, last);
}

static int done(void) {
  printf("cuda runtime: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

static int filled_with(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31u + seed)) return 0;
  return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
}

/* Copies host -> device -> device -> host, and zeroing. */
static void check_copies(const lamp_backend *b) {
  size_t n = (size_t)3 << 20;
  unsigned char *host = malloc(n), *back = malloc(n);
  void *x = b->memory.alloc(n), *y = b->memory.alloc(n);
  check("alloc 3 MiB twice", x != NULL && y != NULL && host != NULL && back != NULL);
  if (x == NULL || y == NULL || host == NULL || back == NULL) return;
  check("zero", b->memory.zero(x, n) == LAMP_OK);
  memset(back, 1, n);
  check("download of zeros", b->download(back, x, n) == LAMP_OK && back[0] == 0 && back[n - 1] == 0 &&
                                 memchr(back, 1, n) == NULL);
  fill(host, n, 7);
  check("upload", b->upload(x, host, n) == LAMP_OK);
  check("copy on the device", b->copy(y, x, n) == LAMP_OK);
  memset(back, 0, n);
  check("download of the copy", b->download(back, y, n) == LAMP_OK && filled_with(back, n, 7));
  b->memory.free(x);
  b->memory.free(y);
  free(host);
  free(back);
}

/* upload_async: the host buffer is reused at once, in sizes that make both staging buffers grow. */
static void check_async_uploads(const lamp_backend *b) {
  size_t sizes[4] = {1000, (size_t)2 << 20, 4096, (size_t)5 << 20};
  void *dst[4];
  size_t max = (size_t)5 << 20;
  unsigned char *host = malloc(max), *back = malloc(max);
  for (int i = 0; i < 4; i++) {
    dst[i] = b->memory.alloc(sizes[i]);
    fill(host, sizes[i], (unsigned)i);
    check("upload_async", dst[i] != NULL && b->upload_async(dst[i], host, sizes[i]) == LAMP_OK);
    memset(host, 0xee, max); /* what backend.h allows only after an event: this backend copied it */
  }
  check("pinned staging is charged to the host ledger", ledger[LAMP_HOST][LAMP_MEM_WORKSPACE] >= (5 << 20));
  void *e = NULL;
  check("event_new", b->event_new(&e) == LAMP_OK && e != NULL);
  check("event_wait before any record returns", b->event_wait(e) == LAMP_OK);
  check("event_record", b->event_record(e) == LAMP_OK);
  check("event_wait", b->event_wait(e) == LAMP_OK);
  b->event_free(e);
  for (int i = 0; i < 4; i++) {
    memset(back, 0, sizes[i]);
    check("async upload arrived intact", b->download(back, dst[i], sizes[i]) == LAMP_OK &&
                                             filled_with(back, sizes[i], (unsigned)i));
    b->memory.free(dst[i]);
  }
  b->release_workspace();
  check("release_workspace returns the staging to the ledger", ledger[LAMP_HOST][LAMP_MEM_WORKSPACE] == 0);
  free(host);
  free(back);
}

static void check_out_of_memory(const lamp_backend *b) {
  size_t huge = (size_t)1 << 50;
  char expected[256];
  snprintf(expected, sizeof expected, "cuda: out of device memory: %zu bytes for a tensor on cuda:0 (%s)", huge,
           "cudaErrorMemoryAllocation");
  check("a petabyte is refused", b->memory.alloc(huge) == NULL);
  check("out of memory names the bytes", strcmp(last, expected) == 0);
  void *p = b->memory.alloc(1024);
  check("memory is given after an out-of-memory failure", p != NULL);
  b->memory.free(p);
  check("synchronize", b->synchronize() == LAMP_OK);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cuda_runtime_check MODULE [--expect-no-driver]\n");
    return 2;
  }
  int expect_no_driver = argc > 2 && strcmp(argv[2], "--expect-no-driver") == 0;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  check("the module opens", h != NULL);
  if (h == NULL) {
    printf("dlopen: %s\n", dlerror());
    return done();
  }
  lamp_backend_module_open_fn entry;
  void *sym = dlsym(h, LAMP_BACKEND_MODULE_ENTRY);
  memcpy(&entry, &sym, sizeof entry);
  check("the module exports its entry", sym != NULL);
  if (sym == NULL) return done();

  lamp_backend_services old = svc;
  old.version = LAMP_BACKEND_MODULE_VERSION + 1;
  const lamp_backend *b = NULL;
  check("services of another interface version are refused", entry(&old, &b) == LAMP_ERR_INVALID_USAGE && b == NULL);
  char built[64], has[64];
  snprintf(built, sizeof built, "built for backend interface version %d ", LAMP_BACKEND_MODULE_VERSION);
  snprintf(has, sizeof has, "but lamp has version %d ", LAMP_BACKEND_MODULE_VERSION + 1);
  check("naming both versions", strstr(last, built) != NULL && strstr(last, has) != NULL);

  lamp_status st = entry(&svc, &b);
  if (expect_no_driver) {
    check("without a driver the entry refuses", st == LAMP_ERR_UNSUPPORTED && b == NULL);
    check("with CUDA's words", strcmp(last, "cuda: no CUDA driver: CUDA driver version is insufficient for CUDA "
                                            "runtime version (cudaErrorInsufficientDriver)") == 0);
    return done();
  }
  check("the entry opens the module", st == LAMP_OK && b != NULL);
  if (b == NULL) return done();
  int count = b->count();
  check("at least one device", count >= 1);
  lamp_device_info info;
  check("describe", b->describe(0, &info) == LAMP_OK && info.name[0] != '\0' && info.memory > 0 &&
                        info.cc_major >= 5);
  printf("cuda:0 %s, %zu bytes, compute capability %d.%d; %d device(s)\n", info.name, info.memory, info.cc_major,
         info.cc_minor, count);
  check("select 0", b->select(0) == LAMP_OK);
  check("the stream", b->stream() != NULL);
  check_copies(b);
  check_async_uploads(b);
  check_out_of_memory(b);
  if (count > 1) {
    check("another device is refused once one is in use", b->select(1) == LAMP_ERR_INVALID_USAGE);
    check("naming both", strcmp(last, "cuda: cannot switch to cuda:1: cuda:0 is in use already (choose the device "
                                      "before anything is allocated on it)") == 0);
  }
  return done();
}
