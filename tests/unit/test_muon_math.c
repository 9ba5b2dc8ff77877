/*
** The Muon example's step (examples/optim-muon/muon.c, built beside the test plugins) against the
** math it claims, through the core's wrappers as a trainer calls it: the orthogonalised update
** against the same quintic Newton-Schulz iteration in double, transposition, the shape scales,
** Nesterov momentum, decoupled weight decay with the segments' multipliers, AdamW for the other
** tensors against the built-in adamw, and the refusal of a step without a tensor table.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/instance.h"
#include "test_support.h"

#define MUON LAMP_BAD_PLUGIN_DIR "/muon.so"
#define MAXN 64

/* A muon with numbers and its scale. */
static lamp_optim *open_muon(const lamp_option *nums, size_t n, const char *scale) {
  const lamp_text_option text = {"scale", scale};
  const lamp_options given = {nums, n, &text, 1};
  lamp_optim *o = NULL;
  OK(lamp_optim_open_options(&o, MUON, &given));
  return o;
}

/* One step over a single tensor of `shape` (its segment lr_mult, decay_mult). */
typedef struct one_tensor {
  float params[MAXN], grads[MAXN], slots[3][MAXN];
  int64_t shape[2];
  lamp_optim_segment seg;
  lamp_optim_tensor tensor;
} one_tensor;

static void init_tensor(one_tensor *t, int ndim, int64_t rows, int64_t cols) {
  memset(t, 0, sizeof *t);
  t->shape[0] = rows;
  t->shape[1] = cols;
  size_t n = (size_t)(ndim == 2 ? rows * cols : rows);
  t->seg = (lamp_optim_segment){0, n, 1.0f, 1.0f};
  t->tensor = (lamp_optim_tensor){"w", (uint32_t)ndim, t->shape, 0, n, 0};
}

static void step(lamp_optim *o, one_tensor *t, uint64_t k, double lr) {
  float *slots[3] = {t->slots[0], t->slots[1], t->slots[2]};
  lamp_optim_step s = {.device = LAMP_CPU, .n = t->tensor.count, .params = t->params, .grads = t->grads,
                       .slots = slots, .segments = &t->seg, .n_segments = 1, .step = k, .lr = lr,
                       .grad_scale = 1.0, .tensors = &t->tensor, .n_tensors = 1};
  OK(lamp_optim_apply(o, &s));
}

static void random_fill(float *x, size_t n, uint64_t seed) {
  lamp_rng g;
  lamp_rng_seed(&g, seed);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lamp_rng_uniform(&g) * 2.0 - 1.0);
}

/* The quintic Newton-Schulz iteration in double on u (rows x cols), transposed to have no more
   rows than columns and back: the orthogonalised matrix, rows x cols, into o. */
static void reference_ns(const double *u, size_t rows, size_t cols, int steps, double *o) {
  const int tr = rows > cols;
  const size_t r = tr ? cols : rows, c = tr ? rows : cols;
  double x[MAXN], a[MAXN], b[MAXN], y[MAXN], norm = 0.0;
  for (size_t i = 0; i < r; i++)
    for (size_t j = 0; j < c; j++) x[i * c + j] = tr ? u[j * cols + i] : u[i * cols + j];
  for (size_t i = 0; i < r * c; i++) norm += x[i] * x[i];
  for (size_t i = 0; i < r * c; i++) x[i] /= sqrt(norm) + 1e-7;
  for (int it = 0; it < steps; it++) {
    for (size_t i = 0; i < r; i++)
      for (size_t j = 0; j < r; j++) {
        a[i * r + j] = 0.0;
        for (size_t k = 0; k < c; k++) a[i * r + j] += x[i * c + k] * x[j * c + k];
      }
    for (size_t i = 0; i < r; i++)
      for (size_t j = 0; j < r; j++) {
        double aa = 0.0;
        for (size_t k = 0; k < r; k++) aa += a[i * r + k] * a[k * r + j];
        b[i * r + j] = -4.7750 * a[i * r + j] + 2.0315 * aa;
      }
    for (size_t i = 0; i < r; i++)
      for (size_t j = 0; j < c; j++) {
        double bx = 0.0;
        for (size_t k = 0; k < r; k++) bx += b[i * r + k] * x[k * c + j];
        y[i * c + j] = 3.4445 * x[i * c + j] + bx;
      }
    memcpy(x, y, r * c * sizeof *x);
  }
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) o[i * cols + j] = tr ? x[j * c + i] : x[i * c + j];
}

/* From zero parameters, one step of lr 1 without momentum or decay is -scale * NS(G). */
static void check_orthogonalised(int64_t rows, int64_t cols) {
  const lamp_option opts[] = {{"lr", 1.0}, {"momentum", 0.0}, {"weight_decay", 0.0}};
  lamp_optim *o = open_muon(opts, 3, "shape");
  one_tensor t;
  init_tensor(&t, 2, rows, cols);
  size_t n = (size_t)(rows * cols);
  random_fill(t.grads, n, 5 + (uint64_t)rows);
  step(o, &t, 1, 1.0);
  double u[MAXN], want[MAXN];
  for (size_t i = 0; i < n; i++) u[i] = t.grads[i];
  reference_ns(u, (size_t)rows, (size_t)cols, 5, want);
  double scale = rows > cols ? sqrt((double)rows / (double)cols) : 1.0;
  for (size_t i = 0; i < n; i++) assert_true(fabs(-t.params[i] / scale - want[i]) < 1e-4);
  /* Orthogonalised: the Gram matrix of the smaller side is near the identity (the quintic
     iteration leaves singular values in about [0.7, 1.2]). */
  size_t small = (size_t)(rows < cols ? rows : cols);
  for (size_t i = 0; i < small; i++) {
    double d = 0.0;
    for (size_t k = 0; k < n / small; k++) {
      double v = rows < cols ? want[i * (size_t)cols + k] : want[k * (size_t)cols + i];
      d += v * v;
    }
    assert_true(d > 0.45 && d < 1.45);
  }
  lamp_optim_close(o);
}

static void test_orthogonalised_update(void **state) {
  (void)state;
  check_orthogonalised(4, 8); /* wide: as it is */
  check_orthogonalised(8, 4); /* tall: transposed, and scaled by sqrt(8/4) */
  check_orthogonalised(6, 6);
}

/* A tall matrix is the transposed wide one: the same arithmetic, so the updates are exact
   transposes. */
static void test_transposed_matrices_agree(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 1.0}, {"momentum", 0.0}, {"weight_decay", 0.0}};
  lamp_optim *o = open_muon(opts, 3, "shape");
  one_tensor wide, tall;
  init_tensor(&wide, 2, 4, 8);
  init_tensor(&tall, 2, 8, 4);
  random_fill(wide.grads, 32, 9);
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 8; j++) tall.grads[j * 4 + i] = wide.grads[i * 8 + j];
  step(o, &wide, 1, 1.0);
  step(o, &tall, 1, 1.0);
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 8; j++) assert_true(tall.params[j * 4 + i] == (float)(wide.params[i * 8 + j] * sqrtf(2.0f)));
  lamp_optim_close(o);
}

/* scale = "rms": 0.2 sqrt(max(rows, cols)) instead of max(1, rows/cols)^0.5. */
static void test_rms_scale(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 1.0}, {"momentum", 0.0}, {"weight_decay", 0.0}};
  lamp_optim *shape = open_muon(opts, 3, "shape"), *rms = open_muon(opts, 3, "rms");
  one_tensor a, b;
  init_tensor(&a, 2, 8, 4);
  init_tensor(&b, 2, 8, 4);
  random_fill(a.grads, 32, 3);
  memcpy(b.grads, a.grads, sizeof a.grads);
  step(shape, &a, 1, 1.0);
  step(rms, &b, 1, 1.0);
  double ratio = 0.2 * sqrt(8.0) / sqrt(2.0);
  for (size_t i = 0; i < 32; i++) assert_true(fabs(b.params[i] - ratio * a.params[i]) < 1e-6);
  lamp_optim_close(shape);
  lamp_optim_close(rms);
}

/* Two steps: buf = beta buf + g, the update orthogonalises g + beta buf (Nesterov); weight decay
   multiplies by 1 - lr wd first; lr_mult and decay_mult are the segment's. */
static void test_momentum_and_decay(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 0.5}, {"weight_decay", 0.1}};
  lamp_optim *o = open_muon(opts, 2, "shape");
  one_tensor t;
  init_tensor(&t, 2, 4, 8);
  t.seg.lr_mult = 0.5f;
  float g1[32], g2[32], p0[32];
  random_fill(g1, 32, 21);
  random_fill(g2, 32, 22);
  random_fill(p0, 32, 23);
  memcpy(t.params, p0, sizeof p0);
  memcpy(t.grads, g1, sizeof g1);
  step(o, &t, 1, 0.5);
  float p1[32];
  memcpy(p1, t.params, sizeof p1);
  memcpy(t.grads, g2, sizeof g2);
  step(o, &t, 2, 0.5);
  double u[32], want[32];
  const double beta = 0.95, lr = 0.25; /* 0.5 * lr_mult */
  for (size_t i = 0; i < 32; i++) {
    double buf = beta * g1[i] + g2[i];
    u[i] = g2[i] + beta * buf;
  }
  reference_ns(u, 4, 8, 5, want);
  for (size_t i = 0; i < 32; i++) assert_true(fabs(t.params[i] - (p1[i] * (1.0 - lr * 0.1) - lr * want[i])) < 1e-5);
  /* decay_mult 0: no decay. */
  t.seg.decay_mult = 0.0f;
  memcpy(p1, t.params, sizeof p1);
  memset(t.grads, 0, sizeof t.grads);
  memset(t.slots[0], 0, sizeof t.slots[0]);
  step(o, &t, 3, 0.5);
  for (size_t i = 0; i < 32; i++) assert_true(t.params[i] == p1[i]); /* a zero update, and no decay */
  lamp_optim_close(o);
}

/* A 1-D tensor takes AdamW with adam_lr, scheduled by lr's factor: as the built-in adamw. */
static void test_other_tensors_take_adamw(void **state) {
  (void)state;
  const lamp_option muon_opts[] = {{"lr", 0.02}, {"adam_lr", 0.004}, {"weight_decay", 0.1}};
  const lamp_option adamw_opts[] = {{"lr", 0.004}, {"weight_decay", 0.1}};
  lamp_optim *m = open_muon(muon_opts, 3, "shape");
  lamp_optim *a = NULL;
  OK(lamp_optim_open(&a, "adamw", adamw_opts, 2));
  one_tensor tm, ta;
  init_tensor(&tm, 1, 16, 0);
  init_tensor(&ta, 1, 16, 0);
  random_fill(tm.params, 16, 31);
  memcpy(ta.params, tm.params, sizeof tm.params);
  for (uint64_t k = 1; k <= 3; k++) {
    random_fill(tm.grads, 16, 40 + k);
    memcpy(ta.grads, tm.grads, sizeof tm.grads);
    step(m, &tm, k, 0.01);  /* half of muon's lr: adam_lr is halved too */
    float *slots[2] = {ta.slots[0], ta.slots[1]};
    lamp_optim_step s = {.device = LAMP_CPU, .n = 16, .params = ta.params, .grads = ta.grads, .slots = slots,
                         .segments = &ta.seg, .n_segments = 1, .step = k, .lr = 0.002, .grad_scale = 1.0};
    OK(lamp_optim_apply(a, &s));
  }
  for (size_t i = 0; i < 16; i++) assert_true(fabs(tm.params[i] - ta.params[i]) < 1e-6);
  for (size_t i = 0; i < 16; i++) assert_true(tm.slots[0][i] == 0.0f); /* the momentum slot is the matrices' */
  lamp_optim_close(m);
  lamp_optim_close(a);
}

static void test_step_without_tensor_table(void **state) {
  (void)state;
  lamp_optim *o = open_muon(NULL, 0, "shape");
  one_tensor t;
  init_tensor(&t, 2, 4, 8);
  float *slots[3] = {t.slots[0], t.slots[1], t.slots[2]};
  lamp_optim_step s = {.device = LAMP_CPU, .n = 32, .params = t.params, .grads = t.grads, .slots = slots,
                       .segments = &t.seg, .n_segments = 1, .step = 1, .lr = 0.02, .grad_scale = 1.0};
  assert_int_equal(lamp_optim_apply(o, &s), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "muon: needs the tensor table to find the weight matrices; this step has none "
                                         "(a core before ABI 1.4, or a step without a model)");
  lamp_optim_close(o);
}

static int setup(void **state) {
  (void)state;
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  lamp_log_set_level(LAMP_LOG_WARN);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_orthogonalised_update),   cmocka_unit_test(test_transposed_matrices_agree),
      cmocka_unit_test(test_rms_scale),               cmocka_unit_test(test_momentum_and_decay),
      cmocka_unit_test(test_other_tensors_take_adamw), cmocka_unit_test(test_step_without_tensor_table),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
