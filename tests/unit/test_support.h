/*
** Helpers shared by the unit tests. Every one is static inline, so a test takes only what it
** uses; include this after <cmocka.h>, whose assertions they use.
**   - files:        make_dir, write_bytes, write_idx_file, data_bytes, require_fashion_mnist
**   - 16-bit data:  store_f32_as, load_as_f32
**   - layers:       OK, assert_near, new_tensor, fp, fill_uniform, linear, relu, seq
*/
#ifndef LAMP_TEST_SUPPORT_H
#define LAMP_TEST_SUPPORT_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/error.h"
#include "data/dataset.h"
#include "nn/layer.h"
#include "tensor/half.h"
#include "tensor/ledger.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

/* ---- devices ------------------------------------------------------------------------------ */

/* Why the cuda device cannot be used on the machine these tests assert for, one without a CUDA
   driver (CI): the CUDA module's no-driver message where this build has the module, else the
   loader's "not built" message. On a machine with a GPU the device loads instead, and
   scripts/gpu-check.sh is the test. */
#if LAMP_TEST_HAVE_CUDA
#define LAMP_TEST_CUDA_UNAVAILABLE                                                                  \
  "device cuda: no CUDA driver: CUDA driver version is insufficient for CUDA runtime version "     \
  "(cudaErrorInsufficientDriver)"
#else
#define LAMP_TEST_CUDA_UNAVAILABLE                                                                  \
  "device cuda: this build has no CUDA backend (it was configured without the CUDA toolkit: "      \
  "install the toolkit and configure with -DLAMP_CUDA=ON)"
#endif

/* ---- files -------------------------------------------------------------------------------- */

/* mkdir -p: creates path and its missing parents. */
static inline void make_dir(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(buf, 0755);
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) fail_msg("mkdir %s: %s", buf, strerror(errno));
}

/* Writes bytes to path, gzip-compressed when gz. */
static inline void write_bytes(const char *path, const void *bytes, size_t n, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(gzwrite(f, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
  }
}

/* An IDX header into buf: two zero bytes, the type code, ndim, then the dims big-endian.
   Returns its length, 4 + 4 * ndim. */
static inline size_t idx_header(uint8_t *buf, uint8_t type, int ndim, const uint32_t *dims) {
  size_t n = 0;
  buf[n++] = 0;
  buf[n++] = 0;
  buf[n++] = type;
  buf[n++] = (uint8_t)ndim;
  for (int i = 0; i < ndim; i++) {
    buf[n++] = (uint8_t)(dims[i] >> 24);
    buf[n++] = (uint8_t)(dims[i] >> 16);
    buf[n++] = (uint8_t)(dims[i] >> 8);
    buf[n++] = (uint8_t)dims[i];
  }
  return n;
}

/* An IDX file of unsigned bytes (type 0x08): the header for dims, then the n bytes of data. */
static inline void write_idx_file(const char *path, int ndim, const uint32_t *dims, const uint8_t *data,
                                  size_t n, int gz) {
  uint8_t *buf = malloc(4 + 4 * (size_t)ndim + n);
  assert_non_null(buf);
  size_t len = idx_header(buf, 0x08, ndim, dims);
  if (n) memcpy(buf + len, data, n);
  write_bytes(path, buf, len + n, gz);
  free(buf);
}

/* The bytes of data memory in use now. */
static inline size_t data_bytes(void) { return lamp_ledger_get(LAMP_HOST, LAMP_MEM_DATA).current; }

/* Skips the calling test unless the Debian package dataset-fashion-mnist is installed; then
   unsets LAMP_DATA_DIR, so that "fashion-mnist" names the installed files. */
static inline void require_fashion_mnist(void) {
  struct stat sb;
  if (stat(LAMP_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", &sb) != 0) skip();
  unsetenv("LAMP_DATA_DIR");
}

/* ---- 16-bit data ---------------------------------------------------------------------------- */

/* Element i of an f32, f16 or bf16 array: stored from fp32, rounded to the dtype... */
static inline void store_f32_as(lamp_dtype dtype, void *data, size_t i, float v) {
  if (dtype == LAMP_F32) ((float *)data)[i] = v;
  else if (dtype == LAMP_F16) ((uint16_t *)data)[i] = lamp_f32_to_f16(v);
  else ((uint16_t *)data)[i] = lamp_f32_to_bf16(v);
}

/* ... and loaded, widened to fp32. */
static inline float load_as_f32(lamp_dtype dtype, const void *data, size_t i) {
  if (dtype == LAMP_F32) return ((const float *)data)[i];
  if (dtype == LAMP_F16) return lamp_f16_to_f32(((const uint16_t *)data)[i]);
  return lamp_bf16_to_f32(((const uint16_t *)data)[i]);
}

/* ---- layers and tensors --------------------------------------------------------------------- */

#define OK(expr)                                                                      \
  do {                                                                                \
    lamp_status st_ = (expr);                                                         \
    if (st_ != LAMP_OK) fail_msg("%s failed: %s", #expr, lamp_last_error());          \
  } while (0)

/* cmocka's assert_float_equal compares in float; these checks want double. */
#define assert_near(a, b, tol)                                                                      \
  do {                                                                                              \
    double a_ = (a), b_ = (b);                                                                      \
    if (!(fabs(a_ - b_) <= (tol))) fail_msg("%s = %.9g, expected %.9g within %.3g", #a, a_, b_, (double)(tol)); \
  } while (0)

static inline lamp_tensor *new_tensor(lamp_dtype dtype, int ndim, const int64_t *shape) {
  lamp_tensor *t;
  OK(lamp_tensor_new(&t, dtype, LAMP_CPU, ndim, shape, LAMP_MEM_DATA));
  return t;
}

static inline float *fp(const lamp_tensor *t) { return lamp_tensor_data(t); }

static inline void fill_uniform(lamp_tensor *t, lamp_rng *r, double lo, double hi) {
  float *v = fp(t);
  for (size_t i = 0; i < lamp_tensor_numel(t); i++) v[i] = (float)(lo + (hi - lo) * lamp_rng_uniform(r));
}

/* A data set of n [1, 4, 4] images of 3 classes with fixed, varied bytes (labels i % 3): for the
   trainer tests that need a loader but no real data. */
static inline lamp_dataset *patterned_dataset(const char *name, size_t n) {
  lamp_dataset_bytes bytes = {.name = name, .n = n, .channels = 1, .rows = 4, .cols = 4, .classes = 3};
  bytes.pixels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n * 16);
  bytes.labels = lamp_mem_alloc(LAMP_CPU, LAMP_MEM_DATA, n);
  assert_non_null(bytes.pixels);
  assert_non_null(bytes.labels);
  for (size_t i = 0; i < n * 16; i++) bytes.pixels[i] = (uint8_t)(i * 37u + i / 7u);
  for (size_t i = 0; i < n; i++) bytes.labels[i] = (uint8_t)(i % 3);
  lamp_dataset *ds;
  OK(lamp_dataset_adopt(&ds, &bytes));
  return ds;
}

static inline lamp_layer *linear(int64_t in, int64_t out) {
  lamp_layer *l;
  OK(lamp_linear_new(&l, in, out, 1));
  return l;
}

static inline lamp_layer *relu(void) {
  lamp_layer *l;
  OK(lamp_relu_new(&l));
  return l;
}

/* A Sequential owning its children: the caller's references to them are dropped. */
static inline lamp_layer *seq(size_t n, lamp_layer *const *children) {
  lamp_layer *s;
  OK(lamp_sequential_new(&s, children, n));
  for (size_t i = 0; i < n; i++) lamp_layer_release(children[i]);
  return s;
}

#endif
