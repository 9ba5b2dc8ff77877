/*
** The simulated device (core/backend/sim): its memory faults on any host access, every operation
** gives the CPU backend's bytes, queued work runs in order and is seen only after a wait, a failing
** operation is reported by the next wait (once), a host pointer handed to it fails at once, and a
** free waits for the work queued before it.
**
** The kernel tests run the whole sequence on the CPU first and only then queue it on the sim, so
** the CPU's kernels on this thread never overlap the sim's on its worker (they share OpenBLAS's
** thread count, which the CPU's parallel loops change while they run).
*/
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "backend/sim/sim_stream.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/ledger.h"
#include "tensor/memory.h"

#define OK(call) assert_int_equal((call), LAMP_OK)

static const lamp_device both[2] = {LAMP_CPU, LAMP_SIM}; /* the CPU first: see the top */

/* ---- data on both devices ------------------------------------------------------------------ */

/* The same bytes on the host (the CPU's copy) and on the simulated device. */
typedef struct pair {
  void *host, *dev;
  size_t bytes;
} pair;

static void *at(const pair *p, lamp_device d) { return d == LAMP_SIM ? p->dev : p->host; }

static pair pair_of(const void *data, size_t bytes) {
  pair p = {malloc(bytes), lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, bytes), bytes};
  assert_non_null(p.host);
  assert_non_null(p.dev);
  memcpy(p.host, data, bytes);
  OK(lamp_copy(LAMP_SIM, p.dev, LAMP_HOST, data, bytes));
  return p;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(float lo, float hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)(rng_state >> 40) / 16777216.0f;
}

/* n values of `dtype` from the fp32 values v (rounded as lamp_convert rounds). */
static pair stored_pair(lamp_dtype dtype, const float *v, size_t n) {
  size_t bytes = n * lamp_dtype_size(dtype);
  void *stored = malloc(bytes);
  assert_non_null(stored);
  OK(lamp_convert(LAMP_CPU, stored, dtype, v, LAMP_F32, n));
  pair p = pair_of(stored, bytes);
  free(stored);
  return p;
}

/* n values uniform in [lo, hi), stored as dtype. */
static pair random_pair(lamp_dtype dtype, size_t n, float lo, float hi) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
  pair p = stored_pair(dtype, v, n);
  free(v);
  return p;
}

/* n copies of value stored as dtype (NaN for outputs a kernel must write without reading). */
static pair filled_pair(lamp_dtype dtype, size_t n, float value) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = value;
  pair p = stored_pair(dtype, v, n);
  free(v);
  return p;
}

/* fp32 storage holding values of `via` (a GEMM operand in a 16-bit compute dtype). */
static pair operand_pair(lamp_dtype via, size_t n, float lo, float hi) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
  OK(lamp_round_through(LAMP_CPU, v, v, via, n));
  pair p = pair_of(v, n * sizeof *v);
  free(v);
  return p;
}

/* The device's bytes, downloaded (which waits for the queue), are the CPU's. */
static void expect_same(const pair *p) {
  void *got = malloc(p->bytes);
  assert_non_null(got);
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, p->dev, p->bytes));
  assert_memory_equal(got, p->host, p->bytes);
  free(got);
}

static void drop(pair *p) {
  free(p->host);
  lamp_mem_free(p->dev);
  p->host = p->dev = NULL;
}

/* Every pair of a test compared, then freed; the queue is left empty for the next test. */
static void expect_all_same_and_drop(pair *ps, size_t n) {
  for (size_t i = 0; i < n; i++) expect_same(&ps[i]);
  for (size_t i = 0; i < n; i++) drop(&ps[i]);
  OK(lamp_synchronize(LAMP_SIM));
}
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the device ---------------------------------------------------------------------------- */

static int register_sim(void **state) {
  (void)state;
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

static void test_device_is_registered(void **state) {
  (void)state;
  lamp_device d;
  OK(lamp_device_parse("sim", &d));
  assert_int_equal(d, LAMP_SIM);
  assert_string_equal(lamp_device_name(LAMP_SIM), "sim");
  assert_int_equal(lamp_device_count(LAMP_SIM), 1);
  assert_true(lamp_device_has(LAMP_SIM, LAMP_CAP_HOST_VIEW));
  assert_false(lamp_device_has(LAMP_SIM, LAMP_CAP_NATIVE_16BIT_GEMM));
  const lamp_sim_stream *stream = lamp_device_stream(LAMP_SIM);
  assert_non_null(stream);
  assert_int_equal(stream->magic, LAMP_SIM_STREAM_MAGIC);
  int on_host = 0;
  assert_null(lamp_device_host_view(LAMP_SIM, &on_host));
  assert_null(lamp_device_host_view(LAMP_SIM, NULL));
}

/* In a child, so the fault ends only it: a sanitizer's or cmocka's handler would catch the
   signal and report instead of dying of it, and a core file would only litter. */
static int child_dies_of_sigsegv(volatile float *p, int write) {
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
    if (write) p[1] = 1.0f;
    else {
      float v = p[0];
      (void)v;
    }
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

static void test_host_access_to_device_memory_crashes(void **state) {
  (void)state;
  float value = 3.25f;
  float *p = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, 64 * sizeof(float));
  assert_non_null(p);
  OK(lamp_copy(LAMP_SIM, p, LAMP_HOST, &value, sizeof value));
  assert_true(child_dies_of_sigsegv(p, 0));
  assert_true(child_dies_of_sigsegv(p, 1));
  /* the same memory through the host view, once the queue is done with it */
  OK(lamp_synchronize(LAMP_SIM));
  const float *view = lamp_device_host_view(LAMP_SIM, p);
  assert_non_null(view);
  assert_true(view != p);
  assert_true(view[0] == 3.25f);
  lamp_mem_free(p);
}

static void test_ledger_counts_sim_memory(void **state) {
  (void)state;
  size_t before = lamp_ledger_get(LAMP_SIM, LAMP_MEM_OPTIM_STATE).current;
  void *p = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_OPTIM_STATE, 1000);
  assert_non_null(p);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_OPTIM_STATE).current, before + 1000);
  assert_int_equal(lamp_mem_device(p), LAMP_SIM);
  assert_int_equal(lamp_mem_size(p), 1000);
  assert_int_equal((uintptr_t)p % 64, 0);
  lamp_mem_free(p);
  assert_int_equal(lamp_ledger_get(LAMP_SIM, LAMP_MEM_OPTIM_STATE).current, before);
  OK(lamp_synchronize(LAMP_SIM));
}

static void test_out_of_device_memory_names_the_size(void **state) {
  (void)state;
  size_t huge = (size_t)1 << 50;
  assert_null(lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, huge));
  assert_non_null(strstr(lamp_last_error(), "sim: out of device memory for 1125899906842624 bytes"));
}

/* ---- every operation gives the CPU's bytes --------------------------------------------------- */

static void test_gemm_matches_cpu(void **state) {
  (void)state;
  size_t m = 13, n = 11, k = 17;
  /* fp32, both operands transposed, alpha and beta */
  pair f[] = {random_pair(LAMP_F32, k * m, -1, 1), random_pair(LAMP_F32, n * k, -1, 1),
              random_pair(LAMP_F32, m * n, -1, 1)};
  /* bf16 x f16 into bf16, beta 0 over a C of NaN (not read) */
  pair h[] = {random_pair(LAMP_BF16, m * k, -1, 1), random_pair(LAMP_F16, k * n, -1, 1),
              filled_pair(LAMP_BF16, m * n, NAN)};
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_gemm(d, 1, 1, m, n, k, 0.5f, at(&f[0], d), LAMP_F32, m, at(&f[1], d), LAMP_F32, k, 0.25f, at(&f[2], d),
                 LAMP_F32, n));
    OK(lamp_gemm(d, 0, 0, m, n, k, 1.0f, at(&h[0], d), LAMP_BF16, k, at(&h[1], d), LAMP_F16, n, 0.0f, at(&h[2], d),
                 LAMP_BF16, n));
  }
  expect_all_same_and_drop(f, COUNT(f));
  expect_all_same_and_drop(h, COUNT(h));
}

static void test_convert_and_fill_match_cpu(void **state) {
  (void)state;
  size_t n = 1031; /* odd, across the CPU's chunks */
  pair p[] = {random_pair(LAMP_F32, n, -70000, 70000), filled_pair(LAMP_BF16, n, NAN), filled_pair(LAMP_F16, n, NAN),
              filled_pair(LAMP_F32, n, NAN), filled_pair(LAMP_BF16, n, 0)};
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_convert(d, at(&p[1], d), LAMP_BF16, at(&p[0], d), LAMP_F32, n));
    OK(lamp_convert(d, at(&p[2], d), LAMP_F16, at(&p[1], d), LAMP_BF16, n));
    OK(lamp_convert(d, at(&p[3], d), LAMP_F32, at(&p[2], d), LAMP_F16, n));
    OK(lamp_fill(d, at(&p[4], d), LAMP_BF16, n, 1.3f));
  }
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_row_kernels_match_cpu(void **state) {
  (void)state;
  size_t rows = 9, cols = 37;
  enum { Y, BIAS, OUT, DY, ARGMAX_X, ARGMAX };
  pair p[] = {[Y] = random_pair(LAMP_F16, rows * cols, -2, 2),
              [BIAS] = random_pair(LAMP_BF16, cols, -1, 1),
              [OUT] = random_pair(LAMP_F32, cols, -1, 1),
              [DY] = random_pair(LAMP_BF16, rows * cols, -1, 1),
              [ARGMAX_X] = random_pair(LAMP_F32, rows * cols, -5, 5),
              [ARGMAX] = filled_pair(LAMP_F32, rows, NAN)}; /* int32 outputs: 4 bytes a row */
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_add_bias_rows(d, at(&p[Y], d), LAMP_F16, at(&p[BIAS], d), LAMP_BF16, rows, cols));
    OK(lamp_sum_rows(d, at(&p[OUT], d), at(&p[DY], d), LAMP_BF16, rows, cols, 2.0f, 0.5f));
    OK(lamp_argmax_rows(d, at(&p[ARGMAX], d), at(&p[ARGMAX_X], d), LAMP_F32, rows, cols));
  }
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_relu_matches_cpu(void **state) {
  (void)state;
  size_t n = 1001;
  enum { X, Y, DY, Y16, DX16 };
  pair p[] = {[X] = random_pair(LAMP_F32, n, -1, 1), [Y] = filled_pair(LAMP_F32, n, NAN),
              [DY] = random_pair(LAMP_BF16, n, -1, 1), [Y16] = random_pair(LAMP_BF16, n, -1, 1),
              [DX16] = filled_pair(LAMP_BF16, n, NAN)};
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_relu_forward(d, at(&p[Y], d), at(&p[X], d), LAMP_F32, n));
    OK(lamp_relu_backward(d, at(&p[DX16], d), at(&p[DY], d), at(&p[Y16], d), LAMP_BF16, n));
  }
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_cross_entropy_matches_cpu(void **state) {
  (void)state;
  size_t rows = 7, classes = 10;
  int32_t labels[7] = {3, 0, 9, 9, 4, 1, 7};
  double no_loss = NAN;
  size_t no_count = 12345;
  for (int t = 0; t < 2; t++) {
    lamp_dtype dtype = t == 0 ? LAMP_F32 : LAMP_BF16;
    enum { LOGITS, LABELS, LOSS, DLOGITS, CORRECT };
    pair p[] = {[LOGITS] = random_pair(dtype, rows * classes, -3, 3), [LABELS] = pair_of(labels, sizeof labels),
                [LOSS] = pair_of(&no_loss, sizeof no_loss), [DLOGITS] = filled_pair(dtype, rows * classes, NAN),
                [CORRECT] = pair_of(&no_count, sizeof no_count)};
    for (int i = 0; i < 2; i++) {
      lamp_device d = both[i];
      OK(lamp_cross_entropy(d, at(&p[LOGITS], d), dtype, at(&p[LABELS], d), rows, classes, 2.0f, at(&p[LOSS], d),
                            at(&p[DLOGITS], d), dtype, at(&p[CORRECT], d)));
    }
    expect_all_same_and_drop(p, COUNT(p));
  }
}

static void test_scaling_kernels_match_cpu(void **state) {
  (void)state;
  size_t n = 1001;
  int zero = 0;
  double no_sum = NAN;
  float *g = malloc(n * sizeof *g);
  assert_non_null(g);
  for (size_t i = 0; i < n; i++) g[i] = uniform(-100, 100);
  g[500] = INFINITY;
  enum { G, FOUND, ROUNDED, SRC, ACC, X, Y, SQ_X, SUM };
  pair p[] = {[G] = pair_of(g, n * sizeof *g),
              [FOUND] = pair_of(&zero, sizeof zero),
              [ROUNDED] = filled_pair(LAMP_F32, n, NAN),
              [SRC] = random_pair(LAMP_F32, n, -1000, 1000),
              [ACC] = random_pair(LAMP_F32, n, -1, 1),
              [X] = random_pair(LAMP_F32, n, -1, 1),
              [Y] = random_pair(LAMP_F32, n, -1, 1),
              [SQ_X] = random_pair(LAMP_F32, n, -3, 3),
              [SUM] = pair_of(&no_sum, sizeof no_sum)};
  free(g);
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_unscale_and_check(d, at(&p[G], d), n, 0.125f, at(&p[FOUND], d)));
    OK(lamp_round_through(d, at(&p[ROUNDED], d), at(&p[SRC], d), LAMP_BF16, n));
    OK(lamp_round_through(d, at(&p[SRC], d), at(&p[SRC], d), LAMP_F16, n)); /* in place */
    OK(lamp_accumulate_rounded(d, at(&p[ACC], d), at(&p[X], d), LAMP_F16, n));
    OK(lamp_scale(d, at(&p[X], d), n, 0.3f));
    OK(lamp_axpy(d, at(&p[Y], d), at(&p[X], d), n, -1.7f));
    OK(lamp_sum_squares(d, at(&p[SQ_X], d), n, at(&p[SUM], d)));
  }
  assert_int_equal(*(int *)p[FOUND].host, 1);
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_add_and_mask_match_cpu(void **state) {
  (void)state;
  size_t n = 1001;
  uint8_t *mask = malloc(n);
  assert_non_null(mask);
  for (size_t i = 0; i < n; i++) mask[i] = uniform(0, 1) < 0.5f;
  enum { Y, A, B, INTO, X, MASKED, MASK };
  pair p[] = {[Y] = filled_pair(LAMP_BF16, n, NAN),     [A] = random_pair(LAMP_F32, n, -1, 1),
              [B] = random_pair(LAMP_F16, n, -1, 1),    [INTO] = random_pair(LAMP_F16, n, -1, 1),
              [X] = random_pair(LAMP_BF16, n, -1, 1),   [MASKED] = filled_pair(LAMP_F32, n, NAN),
              [MASK] = pair_of(mask, n)};
  free(mask);
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    OK(lamp_add(d, at(&p[Y], d), LAMP_BF16, at(&p[A], d), LAMP_F32, at(&p[B], d), LAMP_F16, n, 1));
    OK(lamp_add_into(d, at(&p[INTO], d), LAMP_F16, at(&p[X], d), LAMP_BF16, n));
    OK(lamp_apply_mask(d, at(&p[MASKED], d), LAMP_F32, at(&p[X], d), LAMP_BF16, at(&p[MASK], d), 2.0f, n));
  }
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_pooling_matches_cpu(void **state) {
  (void)state;
  size_t planes = 6, side = 9, out = 5; /* 3x3 windows, stride 2, padding 1 */
  for (int t = 0; t < 2; t++) {
    lamp_dtype dtype = t == 0 ? LAMP_F32 : LAMP_BF16;
    size_t in_n = planes * side * side, out_n = planes * out * out;
    enum { X, Y, ARGMAX, DY, DX, AVG_Y, AVG_DX };
    pair p[] = {[X] = random_pair(dtype, in_n, -1, 1),      [Y] = filled_pair(dtype, out_n, NAN),
                [ARGMAX] = filled_pair(LAMP_F32, out_n, 0), [DY] = random_pair(dtype, out_n, -1, 1),
                [DX] = filled_pair(dtype, in_n, NAN),       [AVG_Y] = filled_pair(dtype, out_n, NAN),
                [AVG_DX] = filled_pair(dtype, in_n, NAN)};
    for (int i = 0; i < 2; i++) {
      lamp_device d = both[i];
      lamp_conv_geom g = {.height = side, .width = side, .kernel_h = 3, .kernel_w = 3, .stride_h = 2,
                          .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 1, .dilation_w = 1,
                          .out_h = out, .out_w = out};
      OK(lamp_maxpool_forward(d, at(&p[Y], d), dtype, at(&p[ARGMAX], d), at(&p[X], d), dtype, planes, &g));
      OK(lamp_maxpool_backward(d, at(&p[DX], d), dtype, at(&p[DY], d), dtype, at(&p[ARGMAX], d), planes, &g));
      OK(lamp_avgpool_forward(d, at(&p[AVG_Y], d), dtype, at(&p[X], d), dtype, planes, &g));
      OK(lamp_avgpool_backward(d, at(&p[AVG_DX], d), dtype, at(&p[DY], d), dtype, planes, &g));
      memset(&g, 0xff, sizeof g); /* the queued passes hold their own copies */
    }
    expect_all_same_and_drop(p, COUNT(p));
  }
}

/* Forward and backward (input and parameter gradients) of one convolution, x in `dtype`, which
   is also the compute dtype; weight and bias are fp32 operands holding its values. */
static void conv_matches_cpu(lamp_conv2d_shape s, lamp_dtype dtype) {
  size_t in_n = s.batch * s.in_channels * s.height * s.width, out_n = s.batch * s.out_channels * s.out_h * s.out_w;
  size_t w_n = s.out_channels * (s.in_channels / s.groups) * s.kernel * s.kernel;
  enum { X, W, BIAS, Y, DY, DX, GW, GB };
  pair p[] = {[X] = random_pair(dtype, in_n, -1, 1),         [W] = operand_pair(dtype, w_n, -0.5f, 0.5f),
              [BIAS] = operand_pair(dtype, s.out_channels, -1, 1), [Y] = filled_pair(dtype, out_n, NAN),
              [DY] = random_pair(dtype, out_n, -1, 1),       [DX] = filled_pair(dtype, in_n, NAN),
              [GW] = filled_pair(LAMP_F32, w_n, NAN),        [GB] = filled_pair(LAMP_F32, s.out_channels, NAN)};
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    lamp_conv2d_args a = {.shape = s, .compute = dtype, .x = at(&p[X], d), .x_dtype = dtype,
                          .weight = at(&p[W], d), .bias = at(&p[BIAS], d), .operand_dtype = LAMP_F32,
                          .y = at(&p[Y], d), .y_dtype = dtype, .dy = at(&p[DY], d), .dy_dtype = dtype,
                          .dx = at(&p[DX], d), .dx_dtype = dtype, .grad_weight = at(&p[GW], d),
                          .grad_bias = at(&p[GB], d), .grad_dtype = dtype, .overwrite_grads = 1};
    void *plan = NULL;
    OK(lamp_conv2d_forward(d, &plan, &a));
    assert_non_null(plan); /* the caller's slot is filled at once, on this thread */
    void *made = plan;
    OK(lamp_conv2d_backward(d, &plan, &a));
    assert_ptr_equal(plan, made);
    memset(&a, 0xff, sizeof a); /* the queued calls hold their own copies */
    lamp_conv2d_plan_free(d, plan);
  }
  expect_all_same_and_drop(p, COUNT(p));
}

static void test_conv2d_matches_cpu(void **state) {
  (void)state;
  lamp_conv2d_shape same = {.batch = 2, .in_channels = 3, .out_channels = 4, .groups = 1, .height = 6, .width = 6,
                            .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .out_h = 6, .out_w = 6};
  conv_matches_cpu(same, LAMP_F32);
  lamp_conv2d_shape strided = {.batch = 3, .in_channels = 4, .out_channels = 6, .groups = 2, .height = 7,
                               .width = 7, .kernel = 3, .stride = 2, .padding = 1, .dilation = 1, .out_h = 4,
                               .out_w = 4};
  conv_matches_cpu(strided, LAMP_F32);
  conv_matches_cpu(strided, LAMP_BF16);
}

static void test_batchnorm_matches_cpu(void **state) {
  (void)state;
  size_t batch = 3, channels = 4, plane = 10, n = batch * channels * plane;
  enum { X, Y, WEIGHT, BIAS, MEAN, VAR, TRACKED, SAVED, DY, DX, GW, GB, Y_INFER };
  pair p[] = {[X] = random_pair(LAMP_F32, n, -2, 3),         [Y] = filled_pair(LAMP_F32, n, NAN),
              [WEIGHT] = random_pair(LAMP_F32, channels, 0.5f, 1.5f),
              [BIAS] = random_pair(LAMP_F32, channels, -0.5f, 0.5f),
              [MEAN] = random_pair(LAMP_F32, channels, -0.1f, 0.1f),
              [VAR] = random_pair(LAMP_F32, channels, 0.9f, 1.1f), [TRACKED] = filled_pair(LAMP_F32, 1, 0),
              [SAVED] = filled_pair(LAMP_F32, 4 * channels, NAN), [DY] = random_pair(LAMP_F32, n, -1, 1),
              [DX] = filled_pair(LAMP_F32, n, NAN),         [GW] = filled_pair(LAMP_F32, channels, NAN),
              [GB] = filled_pair(LAMP_F32, channels, NAN),  [Y_INFER] = filled_pair(LAMP_BF16, n, NAN)};
  for (int i = 0; i < 2; i++) {
    lamp_device d = both[i];
    lamp_batchnorm_args a = {.batch = batch, .channels = channels, .plane = plane, .momentum = 0.1, .eps = 1e-5,
                             .training = 1, .relu = 1, .x = at(&p[X], d), .x_dtype = LAMP_F32, .y = at(&p[Y], d),
                             .y_dtype = LAMP_F32, .weight = at(&p[WEIGHT], d), .bias = at(&p[BIAS], d),
                             .running_mean = at(&p[MEAN], d), .running_var = at(&p[VAR], d),
                             .batches_tracked = at(&p[TRACKED], d), .saved = at(&p[SAVED], d),
                             .dy = at(&p[DY], d), .dy_dtype = LAMP_F32, .dx = at(&p[DX], d), .dx_dtype = LAMP_F32,
                             .grad_weight = at(&p[GW], d), .grad_bias = at(&p[GB], d), .grad_dtype = LAMP_F32,
                             .overwrite_grads = 1};
    OK(lamp_batchnorm_forward(d, &a));
    OK(lamp_batchnorm_backward(d, &a));
    a.training = 0; /* inference from the running statistics just updated, into bf16 */
    a.y = at(&p[Y_INFER], d);
    a.y_dtype = LAMP_BF16;
    OK(lamp_batchnorm_forward(d, &a));
    memset(&a, 0xff, sizeof a); /* the queued calls hold their own copies */
  }
  expect_all_same_and_drop(p, COUNT(p));
}

/* ---- ordering ------------------------------------------------------------------------------ */

/* 200 dependent operations (y = y + x, halved every 50th): the order matters, every value is exact. */
static void test_long_chain_runs_in_order(void **state) {
  (void)state;
  size_t n = 1000;
  float *x = malloc(n * sizeof *x), *expected = malloc(n * sizeof *x), *got = malloc(n * sizeof *x);
  assert_non_null(x);
  assert_non_null(expected);
  assert_non_null(got);
  for (size_t i = 0; i < n; i++) x[i] = (float)(i + 1);
  float *dx = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof *x);
  float *dy = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof *x); /* zeroed */
  assert_non_null(dx);
  assert_non_null(dy);
  OK(lamp_copy(LAMP_SIM, dx, LAMP_HOST, x, n * sizeof *x));
  memset(expected, 0, n * sizeof *expected);
  for (int step = 0; step < 200; step++) {
    int halve = step % 50 == 49;
    OK(halve ? lamp_scale(LAMP_SIM, dy, n, 0.5f) : lamp_axpy(LAMP_SIM, dy, dx, n, 1.0f));
    for (size_t i = 0; i < n; i++) expected[i] = halve ? expected[i] * 0.5f : expected[i] + x[i];
  }
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, dy, n * sizeof *got));
  assert_memory_equal(got, expected, n * sizeof *got);
  assert_true(got[0] == 45.9375f); /* ((((49 / 2 + 49) / 2 + 49) / 2) + 49) / 2 */
  lamp_mem_free(dx);
  lamp_mem_free(dy);
  free(x);
  free(expected);
  free(got);
  OK(lamp_synchronize(LAMP_SIM));
}

static void test_event_guards_async_upload(void **state) {
  (void)state;
  size_t n = 4096;
  int32_t *src = malloc(n * sizeof *src), *got = malloc(n * sizeof *got);
  assert_non_null(src);
  assert_non_null(got);
  for (size_t i = 0; i < n; i++) src[i] = (int32_t)i;
  void *dev = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_DATA, n * sizeof *src);
  assert_non_null(dev);
  lamp_event *e;
  OK(lamp_event_new(LAMP_SIM, &e));
  OK(lamp_event_wait(e)); /* never recorded: at once */
  OK(lamp_upload_async(LAMP_SIM, dev, src, n * sizeof *src));
  OK(lamp_event_record(e));
  OK(lamp_event_wait(e));
  for (size_t i = 0; i < n; i++) src[i] = -1; /* reused once the event says it was read */
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, dev, n * sizeof *got));
  for (size_t i = 0; i < n; i++) assert_int_equal(got[i], (int32_t)i);
  lamp_event_free(e);
  lamp_mem_free(dev);
  free(src);
  free(got);
  OK(lamp_synchronize(LAMP_SIM));
}

/* A copy within the device is queued in order with the work on either side of it. */
static void test_device_copy_is_queued_in_order(void **state) {
  (void)state;
  size_t n = 300;
  float *got = malloc(n * sizeof *got);
  assert_non_null(got);
  float *a = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof *a);
  float *b = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof *b);
  assert_non_null(a);
  assert_non_null(b);
  OK(lamp_fill(LAMP_SIM, a, LAMP_F32, n, 7.0f));
  OK(lamp_copy(LAMP_SIM, b, LAMP_SIM, a, n * sizeof *a));
  OK(lamp_fill(LAMP_SIM, a, LAMP_F32, n, 9.0f));
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, b, n * sizeof *got));
  for (size_t i = 0; i < n; i++) assert_true(got[i] == 7.0f);
  lamp_mem_free(a);
  lamp_mem_free(b);
  free(got);
  OK(lamp_synchronize(LAMP_SIM));
}

/* What a host function queued on the stream sees: the device's memory as the work queued before it
   left it, through the host view, and not yet what is queued after it. */
typedef struct peek {
  const float *view;
  float seen;
} peek;

static void peek_first(void *arg) {
  peek *p = arg;
  p->seen = p->view[0];
}

static void test_stream_runs_host_functions_in_queue_order(void **state) {
  (void)state;
  const lamp_sim_stream *stream = lamp_device_stream(LAMP_SIM);
  float *a = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, 64 * sizeof *a);
  assert_non_null(a);
  peek p = {.view = lamp_device_host_view(LAMP_SIM, a), .seen = 0.0f};
  lamp_sim_hold(1); /* nothing runs until every piece is queued */
  OK(lamp_fill(LAMP_SIM, a, LAMP_F32, 64, 7.0f));
  OK(stream->launch_host_func(peek_first, &p));
  OK(lamp_fill(LAMP_SIM, a, LAMP_F32, 64, 9.0f));
  assert_true(p.seen == 0.0f); /* queued, not run */
  lamp_sim_hold(0);
  OK(lamp_synchronize(LAMP_SIM));
  assert_true(p.seen == 7.0f);
  lamp_mem_free(a);
  OK(lamp_synchronize(LAMP_SIM));
}

/* The CPU's workspaces made on the worker (an fp16 GEMM widens there, on every GEMM provider) are
   freed there. */
static void test_release_workspace_reaches_the_worker(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  size_t base = lamp_ledger_get(LAMP_CPU, LAMP_MEM_WORKSPACE).current;
  pair a = random_pair(LAMP_F16, 64 * 64, -1, 1), c = filled_pair(LAMP_F32, 64 * 64, 0);
  OK(lamp_gemm(LAMP_SIM, 0, 0, 64, 64, 64, 1.0f, a.dev, LAMP_F16, 64, a.dev, LAMP_F16, 64, 0.0f, c.dev, LAMP_F32, 64));
  OK(lamp_synchronize(LAMP_SIM));
  assert_true(lamp_ledger_get(LAMP_CPU, LAMP_MEM_WORKSPACE).current > base);
  lamp_backend_release_workspace();
  assert_int_equal(lamp_ledger_get(LAMP_CPU, LAMP_MEM_WORKSPACE).current, base);
  drop(&a);
  drop(&c);
  OK(lamp_synchronize(LAMP_SIM));
}

/* ---- errors -------------------------------------------------------------------------------- */

static void test_async_error_is_reported_once(void **state) {
  (void)state;
  int32_t labels[3] = {1, 0, 10}; /* row 2 is out of range */
  int32_t worse[3] = {-1, 0, 0};
  double loss;
  float after[8];
  pair logits = random_pair(LAMP_F32, 3 * 10, -1, 1), bad = pair_of(labels, sizeof labels),
       bad2 = pair_of(worse, sizeof worse), loss_p = pair_of(&loss, sizeof loss), y = filled_pair(LAMP_F32, 8, 0);
  const char *message = "cross_entropy: label 10 at row 2 is outside [0, 10)";

  /* queued without complaint; the next wait reports it, once */
  OK(lamp_cross_entropy(LAMP_SIM, logits.dev, LAMP_F32, bad.dev, 3, 10, 1.0f, loss_p.dev, NULL, LAMP_F32, NULL));
  OK(lamp_fill(LAMP_SIM, y.dev, LAMP_F32, 8, 2.5f)); /* later work still runs */
  assert_int_equal(lamp_synchronize(LAMP_SIM), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), message);
  OK(lamp_synchronize(LAMP_SIM));
  OK(lamp_copy(LAMP_HOST, after, LAMP_SIM, y.dev, sizeof after));
  for (int i = 0; i < 8; i++) assert_true(after[i] == 2.5f);

  /* the first of two failures wins, and a download reports it too */
  OK(lamp_cross_entropy(LAMP_SIM, logits.dev, LAMP_F32, bad.dev, 3, 10, 1.0f, loss_p.dev, NULL, LAMP_F32, NULL));
  OK(lamp_cross_entropy(LAMP_SIM, logits.dev, LAMP_F32, bad2.dev, 3, 10, 1.0f, loss_p.dev, NULL, LAMP_F32, NULL));
  assert_int_equal(lamp_copy(LAMP_HOST, after, LAMP_SIM, y.dev, sizeof after), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), message);
  OK(lamp_synchronize(LAMP_SIM));

  /* and an event wait */
  lamp_event *e;
  OK(lamp_event_new(LAMP_SIM, &e));
  OK(lamp_cross_entropy(LAMP_SIM, logits.dev, LAMP_F32, bad.dev, 3, 10, 1.0f, loss_p.dev, NULL, LAMP_F32, NULL));
  OK(lamp_event_record(e));
  assert_int_equal(lamp_event_wait(e), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), message);
  OK(lamp_event_wait(e));
  lamp_event_free(e);

  drop(&logits);
  drop(&bad);
  drop(&bad2);
  drop(&loss_p);
  drop(&y);
  OK(lamp_synchronize(LAMP_SIM));
}

static void expect_refused(lamp_status st, const char *op, const char *arg, const void *ptr) {
  char expected[256];
  snprintf(expected, sizeof expected, "sim: %s: argument %s is not memory of the simulated device (%p)", op, arg,
           (void *)(uintptr_t)ptr);
  assert_int_equal(st, LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), expected);
}

static void test_host_pointer_fails_at_once(void **state) {
  (void)state;
  float host[16] = {0};
  float ones[16], got[16];
  for (int i = 0; i < 16; i++) ones[i] = 1.0f;
  pair y = pair_of(ones, sizeof ones), a = pair_of(ones, sizeof ones);
  expect_refused(lamp_axpy(LAMP_SIM, y.dev, host, 16, 1.0f), "axpy", "x", host);
  expect_refused(lamp_gemm(LAMP_SIM, 0, 0, 4, 4, 4, 1.0f, a.dev, LAMP_F32, 4, a.dev, LAMP_F32, 4, 0.0f, host,
                           LAMP_F32, 4),
                 "gemm", "c", host);
  expect_refused(lamp_copy(LAMP_SIM, host, LAMP_SIM, y.dev, sizeof host), "copy", "dst", host);
  lamp_conv2d_shape s = {.batch = 1, .in_channels = 1, .out_channels = 1, .groups = 1, .height = 4, .width = 4,
                         .kernel = 1, .stride = 1, .padding = 0, .dilation = 1, .out_h = 4, .out_w = 4};
  lamp_conv2d_args args = {.shape = s, .compute = LAMP_F32, .x = a.dev, .weight = host, .y = y.dev};
  void *plan = NULL;
  expect_refused(lamp_conv2d_forward(LAMP_SIM, &plan, &args), "conv2d_forward", "weight", host);
  assert_null(plan);
  lamp_batchnorm_args bn = {.batch = 2, .channels = 1, .plane = 8, .x = a.dev, .y = y.dev, .saved = host};
  expect_refused(lamp_batchnorm_forward(LAMP_SIM, &bn), "batchnorm_forward", "saved", host);
  /* nothing was queued: no error to come, y untouched */
  OK(lamp_synchronize(LAMP_SIM));
  OK(lamp_copy(LAMP_HOST, got, LAMP_SIM, y.dev, sizeof got));
  assert_memory_equal(got, ones, sizeof got);
  drop(&y);
  drop(&a);
  OK(lamp_synchronize(LAMP_SIM));
}

/* ---- freeing ------------------------------------------------------------------------------- */

static void test_free_waits_for_queued_work(void **state) {
  (void)state;
  size_t n = (size_t)1 << 16;
  pair x = random_pair(LAMP_F32, n, -1, 1), y = filled_pair(LAMP_F32, n, 0.5f);
  OK(lamp_axpy(LAMP_CPU, y.host, x.host, n, 1.5f));
  OK(lamp_axpy(LAMP_SIM, y.dev, x.dev, n, 1.5f));
  lamp_mem_free(x.dev); /* while the axpy may not have read it yet */
  x.dev = NULL;
  /* a block of the same size, likely x's once it is back, overwritten at once */
  void *z = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof(float));
  assert_non_null(z);
  OK(lamp_fill(LAMP_SIM, z, LAMP_F32, n, NAN));
  OK(lamp_synchronize(LAMP_SIM));
  expect_same(&y);
  lamp_mem_free(z);
  drop(&x);
  drop(&y);
  OK(lamp_synchronize(LAMP_SIM));
}

/* While work queued before a free is pending, the block is not handed out again. */
static void test_freed_block_waits_for_the_queue(void **state) {
  (void)state;
  size_t n = 64;
  pair x = random_pair(LAMP_F32, n, -1, 1), y = filled_pair(LAMP_F32, n, 0);
  lamp_sim_hold(1); /* the axpy and the free stay queued */
  OK(lamp_axpy(LAMP_SIM, y.dev, x.dev, n, 1.0f));
  void *freed = x.dev;
  lamp_mem_free(x.dev);
  x.dev = NULL;
  void *again = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_ACTIVATIONS, n * sizeof(float));
  assert_non_null(again);
  assert_ptr_not_equal(again, freed);
  lamp_sim_hold(0);
  OK(lamp_synchronize(LAMP_SIM));
  OK(lamp_axpy(LAMP_CPU, y.host, x.host, n, 1.0f));
  expect_same(&y);
  lamp_mem_free(again);
  drop(&x);
  drop(&y);
  OK(lamp_synchronize(LAMP_SIM));
}

/* lamp_mem_free ignores pointers it did not hand out; the backend's own free reports them. */
static void test_free_of_a_foreign_pointer_is_reported(void **state) {
  (void)state;
  int host = 0;
  char expected[256];
  lamp_sim_backend.memory.free(&host);
  snprintf(expected, sizeof expected,
           "sim: free: %p is not a block of the simulated device (a host pointer, or freed twice)", (void *)&host);
  assert_int_equal(lamp_synchronize(LAMP_SIM), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), expected);
  void *p = lamp_sim_backend.memory.alloc(100);
  assert_non_null(p);
  lamp_sim_backend.memory.free(p);
  lamp_sim_backend.memory.free(p);
  snprintf(expected, sizeof expected,
           "sim: free: %p is not a block of the simulated device (a host pointer, or freed twice)", p);
  assert_int_equal(lamp_synchronize(LAMP_SIM), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), expected);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_is_registered),
      cmocka_unit_test(test_host_access_to_device_memory_crashes),
      cmocka_unit_test(test_ledger_counts_sim_memory),
      cmocka_unit_test(test_out_of_device_memory_names_the_size),
      cmocka_unit_test(test_gemm_matches_cpu),
      cmocka_unit_test(test_convert_and_fill_match_cpu),
      cmocka_unit_test(test_row_kernels_match_cpu),
      cmocka_unit_test(test_relu_matches_cpu),
      cmocka_unit_test(test_cross_entropy_matches_cpu),
      cmocka_unit_test(test_scaling_kernels_match_cpu),
      cmocka_unit_test(test_add_and_mask_match_cpu),
      cmocka_unit_test(test_pooling_matches_cpu),
      cmocka_unit_test(test_conv2d_matches_cpu),
      cmocka_unit_test(test_batchnorm_matches_cpu),
      cmocka_unit_test(test_long_chain_runs_in_order),
      cmocka_unit_test(test_event_guards_async_upload),
      cmocka_unit_test(test_device_copy_is_queued_in_order),
      cmocka_unit_test(test_stream_runs_host_functions_in_queue_order),
      cmocka_unit_test(test_release_workspace_reaches_the_worker),
      cmocka_unit_test(test_async_error_is_reported_once),
      cmocka_unit_test(test_host_pointer_fails_at_once),
      cmocka_unit_test(test_free_waits_for_queued_work),
      cmocka_unit_test(test_freed_block_waits_for_the_queue),
      cmocka_unit_test(test_free_of_a_foreign_pointer_is_reported),
  };
  return cmocka_run_group_tests(tests, register_sim, NULL);
}
