/*
** The model: the parameter table and its slabs (offsets in declaration order, identical in
** the weight, master and gradient slabs, and really where the layers read and write),
** seeded initialisation, the memory ledger, bf16 weights with fp32 masters, exact error
** messages, zeroing and accumulating gradients, describe, and a steady state that allocates
** nothing.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/ledger.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "test_support.h"

#define FAILS(expr, code, message)                                                    \
  do {                                                                                \
    assert_int_equal((expr), (code));                                                 \
    assert_string_equal(lamp_last_error(), (message));                                \
  } while (0)

static const lamp_model_config FP32_CFG = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .master_weights = 0, .seed = 42, .grad_dtype = LAMP_F32};
static const lamp_model_config BF16_CFG = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .master_weights = 1, .seed = 42, .grad_dtype = LAMP_F32};

/* ---- helpers ---------------------------------------------------------------------------- */

/* Linear(d0 -> d1), ReLU, ..., Linear(d[n-2] -> d[n-1]). */
static lamp_layer *mlp(size_t n, const int64_t *d) {
  lamp_layer *children[16];
  size_t k = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (i > 0) children[k++] = relu();
    children[k++] = linear(d[i], d[i + 1]);
  }
  return seq(k, children);
}

static lamp_model *model_of(lamp_layer *root, const lamp_model_config *cfg) {
  lamp_model *m;
  OK(lamp_model_new(&m, root));
  lamp_layer_release(root);
  if (cfg != NULL) OK(lamp_model_build(m, cfg));
  return m;
}

static size_t ledger(lamp_mem_tag tag) { return lamp_ledger_get(LAMP_HOST, tag).current; }

/* ---- the parameter table ---------------------------------------------------------------- */

static void test_param_table_mlp(void **state) {
  (void)state;
  lamp_model *m = model_of(mlp(4, (int64_t[]){784, 1024, 1024, 10}), &FP32_CFG);
  assert_int_equal(lamp_model_numel(m), 1863690);
  assert_int_equal(lamp_model_n_params(m), 6);
  const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
    int decay;
  } want[6] = {{"0.weight", 2, {1024, 784}, 1}, {"0.bias", 1, {1024}, 0},  {"2.weight", 2, {1024, 1024}, 1},
               {"2.bias", 1, {1024}, 0},        {"4.weight", 2, {10, 1024}, 1}, {"4.bias", 1, {10}, 0}};
  size_t offset = 0;
  for (size_t i = 0; i < 6; i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    assert_string_equal(p->name, want[i].name);
    assert_int_equal(p->ndim, want[i].ndim);
    size_t count = 1;
    for (int d = 0; d < p->ndim; d++) {
      assert_int_equal(p->shape[d], want[i].shape[d]);
      count *= (size_t)want[i].shape[d];
    }
    assert_int_equal(p->offset, offset); /* packed in declaration order, no padding */
    assert_int_equal(p->count, count);
    assert_int_equal(p->decay, want[i].decay);
    offset += count;
  }
  assert_null(lamp_model_param_at(m, 6));
  assert_int_equal(offset, lamp_model_numel(m));
  assert_int_equal(lamp_tensor_numel(lamp_model_weights(m)), offset);
  assert_int_equal(lamp_tensor_numel(lamp_model_grads(m)), offset);
  assert_int_equal(lamp_model_weights(m)->dtype, LAMP_F32);
  assert_int_equal(lamp_model_grads(m)->dtype, LAMP_F32);
  assert_null(lamp_model_master(m));
  /* fp32 without masters: the optimizer updates the weights themselves */
  assert_ptr_equal(lamp_model_trainable(m), lamp_tensor_data(lamp_model_weights(m)));
  assert_true(lamp_model_is_built(m));
  assert_int_equal(lamp_model_get_config(m)->seed, 42);
  lamp_model_free(m);
}

/*
** The views the layers got really sit at the table's offsets in every slab: forward reads
** the weights there, backward writes the gradients there, and with masters a sync carries an
** edit of the master slab to the same place in the weights.
*/
enum { T_B = 2 };

static void naive_two_layer(const float *theta, const lamp_model *m, const float *x, double *y) {
  const float *w0 = theta + lamp_model_param_at(m, 0)->offset, *b0 = theta + lamp_model_param_at(m, 1)->offset;
  const float *w1 = theta + lamp_model_param_at(m, 2)->offset, *b1 = theta + lamp_model_param_at(m, 3)->offset;
  for (int r = 0; r < T_B; r++) {
    float h[2];
    for (int o = 0; o < 2; o++) {
      double z = b0[o];
      for (int i = 0; i < 3; i++) z += (double)x[r * 3 + i] * w0[o * 3 + i];
      h[o] = z > 0 ? (float)z : 0.0f;
    }
    for (int o = 0; o < 2; o++) {
      double z = b1[o];
      for (int i = 0; i < 2; i++) z += (double)h[i] * w1[o * 2 + i];
      y[r * 2 + o] = z;
    }
  }
}

static void test_views_sit_at_table_offsets(void **state) {
  (void)state;
  lamp_model *m = model_of(mlp(3, (int64_t[]){3, 2, 2}), &FP32_CFG);
  float *theta = lamp_model_trainable(m);
  for (size_t i = 0; i < lamp_model_numel(m); i++) theta[i] = 0.1f * (float)(i % 7) - 0.2f;
  /* [B, 1, 3]: the trailing dimensions flatten into the 3 features */
  lamp_tensor *x = new_tensor(LAMP_F32, 3, (int64_t[]){T_B, 1, 3});
  const float xv[T_B * 3] = {0.5f, -1.0f, 0.25f, 1.5f, 0.75f, -0.5f};
  memcpy(fp(x), xv, sizeof xv);
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 1, &y));
  double want[T_B * 2];
  naive_two_layer(theta, m, xv, want);
  for (int i = 0; i < T_B * 2; i++) assert_near(fp(y)[i], want[i], 1e-6);

  /* dy = 1 on the output's bias gradient: d(4.bias)[o] = sum over rows of dy[r, o] */
  lamp_tensor *dy = new_tensor(LAMP_F32, 2, (int64_t[]){T_B, 2});
  const float dyv[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  memcpy(fp(dy), dyv, sizeof dyv);
  OK(lamp_model_zero_grads(m));
  OK(lamp_model_backward(m, dy));
  const float *g = fp(lamp_model_grads(m));
  const lamp_model_param *b1 = lamp_model_param_at(m, 3);
  assert_string_equal(b1->name, "2.bias");
  assert_near(g[b1->offset + 0], 1.0 + 3.0, 1e-6);
  assert_near(g[b1->offset + 1], 2.0 + 4.0, 1e-6);
  /* d(2.weight)[o, i] = sum_r dy[r, o] h[r, i], with h from the first layer */
  const lamp_model_param *w1 = lamp_model_param_at(m, 2);
  const float *w0 = theta + lamp_model_param_at(m, 0)->offset, *b0 = theta + lamp_model_param_at(m, 1)->offset;
  for (int o = 0; o < 2; o++)
    for (int i = 0; i < 2; i++) {
      double s = 0.0;
      for (int r = 0; r < T_B; r++) {
        double z = b0[i];
        for (int k = 0; k < 3; k++) z += (double)xv[r * 3 + k] * w0[i * 3 + k];
        s += dyv[r * 2 + o] * (z > 0 ? z : 0.0);
      }
      assert_near(g[w1->offset + (size_t)(o * 2 + i)], s, 1e-5);
    }
  lamp_tensor_release(dy);
  lamp_tensor_release(x);
  lamp_model_free(m);
}

/* With bf16 weights: forward (fp32 compute) sees exactly the rounded masters, at the same offsets. */
static void test_master_offsets_match_weights(void **state) {
  (void)state;
  const lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .master_weights = 1, .seed = 3, .grad_dtype = LAMP_F32};
  lamp_model *m = model_of(mlp(3, (int64_t[]){3, 2, 2}), &cfg);
  float *master = fp(lamp_model_master(m));
  assert_ptr_equal(lamp_model_trainable(m), master);
  for (size_t i = 0; i < lamp_model_numel(m); i++) master[i] = 0.1f * (float)(i % 5) - 0.15f;
  OK(lamp_model_sync_weights(m));
  float rounded[64];
  for (size_t i = 0; i < lamp_model_numel(m); i++) rounded[i] = lamp_bf16_to_f32(lamp_f32_to_bf16(master[i]));
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){T_B, 3});
  const float xv[T_B * 3] = {0.5f, -1.0f, 0.25f, 1.5f, 0.75f, -0.5f};
  memcpy(fp(x), xv, sizeof xv);
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 0, &y));
  double want[T_B * 2];
  naive_two_layer(rounded, m, xv, want);
  for (int i = 0; i < T_B * 2; i++) assert_near(fp(y)[i], want[i], 1e-6);
  lamp_tensor_release(x);
  lamp_model_free(m);
}

/* ---- initialisation --------------------------------------------------------------------- */

static void test_seed_reproduces_weights(void **state) {
  (void)state;
  const int64_t d[] = {20, 16, 4};
  lamp_model_config other = FP32_CFG;
  other.seed = 43;
  lamp_model *a = model_of(mlp(3, d), &FP32_CFG), *b = model_of(mlp(3, d), &FP32_CFG), *c = model_of(mlp(3, d), &other);
  size_t n = lamp_model_numel(a);
  assert_memory_equal(lamp_model_trainable(a), lamp_model_trainable(b), n * sizeof(float));
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) differ += lamp_model_trainable(a)[i] != lamp_model_trainable(c)[i];
  assert_int_equal(differ, n);
  /* the same seed draws the same fp32 values under the bf16 policy (into the masters) */
  lamp_model *h = model_of(mlp(3, d), &BF16_CFG);
  assert_memory_equal(lamp_model_trainable(a), lamp_model_trainable(h), n * sizeof(float));
  lamp_model_free(a);
  lamp_model_free(b);
  lamp_model_free(c);
  lamp_model_free(h);
}

/* PyTorch's default: weight and bias of Linear(in, out) uniform in +-1/sqrt(in). */
static void test_init_bound(void **state) {
  (void)state;
  const int64_t d[] = {784, 256, 10};
  lamp_model *m = model_of(mlp(3, d), &FP32_CFG);
  const float *theta = lamp_model_trainable(m);
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    float bound = (float)(1.0 / sqrt((double)d[i / 2]));
    double lo = INFINITY, hi = -INFINITY, mean = 0.0;
    for (size_t k = 0; k < p->count; k++) {
      float v = theta[p->offset + k];
      if (!(fabsf(v) <= bound)) fail_msg("%s[%zu] = %g is outside +-%g", p->name, k, v, bound);
      lo = fmin(lo, v);
      hi = fmax(hi, v);
      mean += v;
    }
    mean /= (double)p->count;
    /* it fills the interval (with 10+ draws the extremes get within 40% of the bound) */
    assert_true(hi > 0.6 * bound && lo < -0.6 * bound);
    /* mean of n uniforms has standard deviation bound / sqrt(3 n): 5 sigma */
    assert_true(fabs(mean) < 5.0 * bound / sqrt(3.0 * (double)p->count));
  }
  lamp_model_free(m);
}

/* ---- memory ----------------------------------------------------------------------------- */

static void check_ledger(const lamp_model_config *cfg, size_t weight_bytes, size_t master_bytes) {
  size_t p0 = ledger(LAMP_MEM_PARAMS), g0 = ledger(LAMP_MEM_GRADS), m0 = ledger(LAMP_MEM_MASTER);
  lamp_layer *root = mlp(4, (int64_t[]){784, 1024, 1024, 10});
  lamp_layer_retain(root); /* the user keeps the layers: the slabs must still go with the model */
  lamp_model *m = model_of(root, cfg);
  size_t n = lamp_model_numel(m);
  assert_int_equal(ledger(LAMP_MEM_PARAMS) - p0, n * weight_bytes);
  assert_int_equal(ledger(LAMP_MEM_GRADS) - g0, n * 4);
  assert_int_equal(ledger(LAMP_MEM_MASTER) - m0, n * master_bytes);
  lamp_model_free(m);
  assert_int_equal(ledger(LAMP_MEM_PARAMS), p0);
  assert_int_equal(ledger(LAMP_MEM_GRADS), g0);
  assert_int_equal(ledger(LAMP_MEM_MASTER), m0);
  /* and the layers, unbound, can go into a new model */
  lamp_model *again = model_of(root, cfg);
  assert_int_equal(lamp_model_numel(again), n);
  lamp_model_free(again);
}

static void test_ledger_fp32(void **state) {
  (void)state;
  check_ledger(&FP32_CFG, 4, 0);
}

static void test_ledger_bf16_with_masters(void **state) {
  (void)state;
  check_ledger(&BF16_CFG, 2, 4);
}

/* ---- bf16 weights and fp32 masters ------------------------------------------------------ */

static void assert_weights_are_rounded_masters(lamp_model *m) {
  const uint16_t *w = lamp_tensor_data(lamp_model_weights(m));
  const float *master = fp(lamp_model_master(m));
  for (size_t i = 0; i < lamp_model_numel(m); i++)
    if (w[i] != lamp_f32_to_bf16(master[i]))
      fail_msg("weight %zu is 0x%04x, round(master %.9g) is 0x%04x", i, w[i], master[i], lamp_f32_to_bf16(master[i]));
}

static void test_bf16_weights_follow_masters(void **state) {
  (void)state;
  lamp_model *m = model_of(mlp(3, (int64_t[]){50, 30, 10}), &BF16_CFG);
  assert_int_equal(lamp_model_weights(m)->dtype, LAMP_BF16);
  assert_int_equal(lamp_model_master(m)->dtype, LAMP_F32);
  assert_ptr_equal(lamp_model_trainable(m), fp(lamp_model_master(m)));
  assert_weights_are_rounded_masters(m);
  /* an optimizer step on the masters reaches the weights through sync */
  float *master = lamp_model_trainable(m);
  for (size_t i = 0; i < lamp_model_numel(m); i++) master[i] = master[i] * 3.0f + 1e-3f * (float)i;
  master[7] = 0.1234567f;
  OK(lamp_model_sync_weights(m));
  assert_weights_are_rounded_masters(m);
  assert_int_equal(((uint16_t *)lamp_tensor_data(lamp_model_weights(m)))[7], lamp_f32_to_bf16(0.1234567f));
  lamp_model_free(m);
}

/*
** 16-bit weights without masters: the optimizer works on a staging slab that begin_update
** reloads from the rounded weights, so an update below half the 16-bit spacing is lost.
*/
static void test_bf16_without_masters_loses_small_updates(void **state) {
  (void)state;
  lamp_model_config cfg = BF16_CFG;
  cfg.master_weights = 0;
  size_t workspace_before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current;
  lamp_model *m = model_of(mlp(2, (int64_t[]){4, 3}), &cfg);
  size_t n = lamp_model_numel(m);
  assert_null(lamp_model_master(m));
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current - workspace_before, n * sizeof(float));
  const uint16_t *w = lamp_tensor_data(lamp_model_weights(m));
  uint16_t before = w[0];
  float *p = lamp_model_trainable(m);
  for (int step = 0; step < 100; step++) {
    OK(lamp_model_begin_update(m));
    assert_true(p[0] == lamp_bf16_to_f32(w[0]));
    p[0] += 1e-4f * fabsf(p[0]); /* far below half a bf16 spacing (2^-9 relative) */
    OK(lamp_model_sync_weights(m));
  }
  assert_int_equal(w[0], before);
  lamp_model_free(m);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_build_errors(void **state) {
  (void)state;
  lamp_model *m = model_of(mlp(2, (int64_t[]){4, 2}), NULL);
  lamp_model_config bad = FP32_CFG;
  bad.grad_dtype = LAMP_U8;
  FAILS(lamp_model_build(m, &bad), LAMP_ERR_INVALID_ARG, "model: gradient dtype u8 is not f32, f16 or bf16");
  bad = FP32_CFG;
  bad.compute_dtype = LAMP_I32;
  FAILS(lamp_model_build(m, &bad), LAMP_ERR_INVALID_ARG, "model: compute dtype i32 is not f32, f16 or bf16");
  assert_false(lamp_model_is_built(m));
  OK(lamp_model_build(m, &FP32_CFG));
  FAILS(lamp_model_build(m, &FP32_CFG), LAMP_ERR_INVALID_USAGE, "model: already built");
  assert_true(lamp_model_is_built(m));
  lamp_model_free(m);
}

/* A layer belongs to one model at a time; the refused model stays unbuilt and leaks nothing. */
static void test_layer_in_two_models(void **state) {
  (void)state;
  lamp_layer *shared = linear(2, 2);
  lamp_model *a, *b;
  OK(lamp_model_new(&a, shared));
  OK(lamp_model_new(&b, shared));
  OK(lamp_model_build(a, &FP32_CFG));
  size_t p0 = ledger(LAMP_MEM_PARAMS);
  FAILS(lamp_model_build(b, &FP32_CFG), LAMP_ERR_INVALID_USAGE,
        "Linear(2 -> 2): weight is already bound (a layer belongs to one model, once)");
  assert_false(lamp_model_is_built(b));
  assert_int_equal(ledger(LAMP_MEM_PARAMS), p0);
  lamp_model_free(a);
  OK(lamp_model_build(b, &FP32_CFG)); /* free once more */
  lamp_model_free(b);
  lamp_layer_release(shared);
}

static void test_forward_backward_errors(void **state) {
  (void)state;
  lamp_model *m = model_of(mlp(4, (int64_t[]){784, 1024, 1024, 10}), NULL);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){128, 100});
  lamp_tensor *good = new_tensor(LAMP_F32, 4, (int64_t[]){8, 1, 28, 28});
  lamp_tensor *dy = new_tensor(LAMP_F32, 2, (int64_t[]){8, 5});
  const lamp_tensor *y;
  FAILS(lamp_model_forward(m, good, 1, &y), LAMP_ERR_INVALID_USAGE, "model: forward before lamp_model_build");
  assert_null(y);
  OK(lamp_model_build(m, &FP32_CFG));
  FAILS(lamp_model_backward(m, dy), LAMP_ERR_INVALID_USAGE, "model: backward without a successful forward");
  /* output_shape sees shapes, not dtypes, so the model's check names the shape alone */
  FAILS(lamp_model_forward(m, x, 1, &y), LAMP_ERR_INVALID_ARG,
        "Linear(784 -> 1024): input [128, 100] has 100 features, expected 784");
  FAILS(lamp_model_backward(m, dy), LAMP_ERR_INVALID_USAGE, "model: backward without a successful forward");
  OK(lamp_model_forward(m, good, 1, &y));
  assert_int_equal(y->ndim, 2);
  assert_int_equal(y->shape[0], 8);
  assert_int_equal(y->shape[1], 10);
  FAILS(lamp_model_backward(m, dy), LAMP_ERR_INVALID_ARG, "model: dy f32[8, 5] does not match the output f32[8, 10]");
  lamp_tensor_release(x);
  lamp_tensor_release(good);
  lamp_tensor_release(dy);
  lamp_model_free(m);
}

/* Called directly, the layer sees the tensor and names its dtype too. */
static void test_linear_feature_mismatch(void **state) {
  (void)state;
  lamp_model *m = model_of(linear(784, 10), &FP32_CFG);
  lamp_layer *l = lamp_model_root(m);
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){128, 100});
  lamp_tensor *y = new_tensor(LAMP_F32, 2, (int64_t[]){128, 10});
  const lamp_exec exec = {.device = LAMP_CPU, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .training = 1, .grad_dtype = LAMP_F32};
  FAILS(l->ops->forward(l, &exec, x, y), LAMP_ERR_INVALID_ARG,
        "Linear(784 -> 10): input f32[128, 100] has 100 features, expected 784");
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  FAILS(l->ops->output_shape(l, 1, (int64_t[]){784}, &nd, shape), LAMP_ERR_INVALID_ARG,
        "Linear(784 -> 10): input [784] needs a batch dimension and features");
  lamp_layer *unbound = linear(3, 2);
  lamp_tensor *x3 = new_tensor(LAMP_F32, 2, (int64_t[]){1, 3}), *y2 = new_tensor(LAMP_F32, 2, (int64_t[]){1, 2});
  FAILS(unbound->ops->forward(unbound, &exec, x3, y2), LAMP_ERR_INVALID_USAGE,
        "Linear(3 -> 2): parameters are not bound (build a model first)");
  lamp_layer *s;
  FAILS(lamp_sequential_new(&s, NULL, 0), LAMP_ERR_INVALID_ARG, "Sequential: needs at least one child");
  FAILS(lamp_linear_new(&s, 0, 3, 1), LAMP_ERR_INVALID_ARG, "Linear(0 -> 3): feature counts must be positive");
  lamp_layer_release(unbound);
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_tensor_release(x3);
  lamp_tensor_release(y2);
  lamp_model_free(m);
}

/* ---- gradients -------------------------------------------------------------------------- */

typedef struct step_fixture {
  lamp_model *m;
  lamp_tensor *x, *dy;
} step_fixture;

static step_fixture step_fixture_new(const lamp_model_config *cfg, int64_t batch) {
  step_fixture f;
  f.m = model_of(mlp(4, (int64_t[]){12, 16, 8, 5}), cfg);
  f.x = new_tensor(LAMP_F32, 2, (int64_t[]){batch, 12});
  f.dy = new_tensor(cfg->activation_dtype, 2, (int64_t[]){batch, 5});
  lamp_rng r;
  lamp_rng_seed(&r, 99);
  fill_uniform(f.x, &r, -1, 1);
  lamp_tensor *dy32 = new_tensor(LAMP_F32, 2, (int64_t[]){batch, 5});
  fill_uniform(dy32, &r, -1, 1);
  if (cfg->activation_dtype == LAMP_F32) memcpy(fp(f.dy), fp(dy32), lamp_tensor_nbytes(dy32));
  else lamp_f32_to_bf16_n(lamp_tensor_data(f.dy), fp(dy32), (size_t)batch * 5);
  lamp_tensor_release(dy32);
  return f;
}

static void step_fixture_free(step_fixture *f) {
  lamp_tensor_release(f->x);
  lamp_tensor_release(f->dy);
  lamp_model_free(f->m);
}

static void step(step_fixture *f) {
  const lamp_tensor *y;
  OK(lamp_model_forward(f->m, f->x, 1, &y));
  OK(lamp_model_backward(f->m, f->dy));
}

static void test_zero_grads(void **state) {
  (void)state;
  step_fixture f = step_fixture_new(&FP32_CFG, 6);
  step(&f);
  const float *g = fp(lamp_model_grads(f.m));
  size_t n = lamp_model_numel(f.m), nonzero = 0;
  for (size_t i = 0; i < n; i++) nonzero += g[i] != 0.0f;
  assert_true(nonzero > n / 2);
  OK(lamp_model_zero_grads(f.m));
  for (size_t i = 0; i < n; i++) assert_true(g[i] == 0.0f);
  step_fixture_free(&f);
}

/* Two backward passes without zeroing add up: twice the gradient of one (fp32 adds of equal
   values are exact unless BLAS splits the sum, hence the small relative tolerance). */
static void test_gradient_accumulation(void **state) {
  (void)state;
  step_fixture f = step_fixture_new(&FP32_CFG, 6);
  size_t n = lamp_model_numel(f.m);
  float *once = malloc(n * sizeof *once);
  OK(lamp_model_zero_grads(f.m));
  step(&f);
  memcpy(once, fp(lamp_model_grads(f.m)), n * sizeof *once);
  OK(lamp_model_backward(f.m, f.dy)); /* the same forward, a second micro-step's worth */
  const float *g = fp(lamp_model_grads(f.m));
  for (size_t i = 0; i < n; i++) assert_near(g[i], 2.0 * once[i], 1e-6 * (1.0 + fabs(once[i])));
  /* zeroing and stepping again reproduces the single gradient exactly */
  OK(lamp_model_zero_grads(f.m));
  step(&f);
  assert_memory_equal(g, once, n * sizeof *once);
  free(once);
  step_fixture_free(&f);
}

/* ---- 16-bit parameter gradients ---------------------------------------------------------- */

/* Widths whose weight and bias counts (221, 17, 153, 9, 45, 5) are not multiples of 8, so the
   rounding kernels run their vector bodies and their tails. */
static const int64_t G16_DIMS[4] = {13, 17, 9, 5};

/* x [rows, 13] in f32 and dy [rows, 5] in the activation dtype, from a seed; dy scaled. */
static void g16_batch(const lamp_model_config *cfg, int64_t rows, uint64_t seed, double dy_scale, lamp_tensor **x,
                      lamp_tensor **dy) {
  lamp_rng r;
  lamp_rng_seed(&r, seed);
  *x = new_tensor(LAMP_F32, 2, (int64_t[]){rows, G16_DIMS[0]});
  fill_uniform(*x, &r, -1, 1);
  *dy = new_tensor(cfg->activation_dtype, 2, (int64_t[]){rows, G16_DIMS[3]});
  for (size_t i = 0; i < (size_t)rows * (size_t)G16_DIMS[3]; i++)
    store_f32_as(cfg->activation_dtype, lamp_tensor_data(*dy), i,
                 (float)(dy_scale * (2.0 * lamp_rng_uniform(&r) - 1.0)));
}

static float round16(lamp_dtype dtype, float v) {
  return dtype == LAMP_F16 ? lamp_f16_to_f32(lamp_f32_to_f16(v)) : lamp_bf16_to_f32(lamp_f32_to_bf16(v));
}

static void fill_grads(lamp_model *m, float v) {
  float *g = fp(lamp_model_grads(m));
  for (size_t i = 0; i < lamp_model_numel(m); i++) g[i] = v;
}

static void fwd_bwd(lamp_model *m, const lamp_tensor *x, const lamp_tensor *dy, int fresh) {
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 1, &y));
  OK(fresh ? lamp_model_backward_fresh(m, dy) : lamp_model_backward(m, dy));
}

static uint32_t f32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

/*
** Gradients produced in a 16-bit grad_dtype: the same model and data under grad_dtype f32
** give the per-batch fp32 gradients g1 and g2 (each from a fresh backward); the 16-bit model,
** fresh on batch 1 and accumulating batch 2, must hold exactly round16(g1) + round16(g2),
** added in fp32. The second batch has another row count and tiny dy, so that fp16 rounds many
** of its gradients into subnormals or to zero. Both fresh backwards start from a NaN-filled
** slab: every element must be overwritten.
*/
static void check_16bit_grads(const lamp_model_config *cfg16) {
  lamp_dtype gd = cfg16->grad_dtype;
  lamp_model_config cfg32 = *cfg16;
  cfg32.grad_dtype = LAMP_F32;
  lamp_model *ref = model_of(mlp(4, G16_DIMS), &cfg32), *m = model_of(mlp(4, G16_DIMS), cfg16);
  size_t n = lamp_model_numel(m);
  assert_int_equal(n, 13 * 17 + 17 + 17 * 9 + 9 + 9 * 5 + 5);
  assert_memory_equal(lamp_tensor_data(lamp_model_weights(ref)), lamp_tensor_data(lamp_model_weights(m)),
                      lamp_tensor_nbytes(lamp_model_weights(m)));
  lamp_tensor *x1, *dy1, *x2, *dy2;
  g16_batch(cfg16, 6, 11, 1.0, &x1, &dy1);
  g16_batch(cfg16, 9, 12, 2e-6, &x2, &dy2);
  float *g1 = malloc(n * sizeof *g1), *g2 = malloc(n * sizeof *g2);
  assert_non_null(g1);
  assert_non_null(g2);
  const float *g = fp(lamp_model_grads(m)), *gref = fp(lamp_model_grads(ref));

  fill_grads(ref, NAN);
  fwd_bwd(ref, x1, dy1, 1);
  memcpy(g1, gref, n * sizeof *g1);
  fill_grads(ref, NAN);
  fwd_bwd(ref, x2, dy2, 1);
  memcpy(g2, gref, n * sizeof *g2);
  size_t changed = 0, flushed = 0, subnormal = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(g1[i]) || !isfinite(g2[i])) fail_msg("fp32 gradient %zu: %g, %g", i, g1[i], g2[i]);
    float r = round16(gd, g2[i]);
    changed += r != g2[i];
    flushed += r == 0.0f && g2[i] != 0.0f;
    subnormal += r != 0.0f && fabsf(r) < 6.103515625e-05f; /* below fp16's smallest normal */
  }
  /* the comparison below would be vacuous if rounding changed nothing */
  assert_true(changed > n / 2);
  print_message("%s: %zu of %zu batch-2 gradients changed by rounding, %zu flushed to zero, %zu below 2^-14\n",
                lamp_dtype_name(gd), changed, n, flushed, subnormal);
  if (gd == LAMP_F16) assert_true(flushed > 0 && subnormal > 0);

  fill_grads(m, NAN);
  fwd_bwd(m, x1, dy1, 1);
  for (size_t i = 0; i < n; i++) {
    float want = round16(gd, g1[i]);
    if (f32_bits(g[i]) != f32_bits(want))
      fail_msg("%s fresh: grad %zu = %.9g (0x%08x), want round(%.9g) = %.9g", lamp_dtype_name(gd), i, g[i],
               f32_bits(g[i]), g1[i], want);
  }
  fwd_bwd(m, x2, dy2, 0);
  for (size_t i = 0; i < n; i++) {
    float want = round16(gd, g1[i]) + round16(gd, g2[i]);
    if (f32_bits(g[i]) != f32_bits(want))
      fail_msg("%s accumulated: grad %zu = %.9g (0x%08x), want round(%.9g) + round(%.9g) = %.9g",
               lamp_dtype_name(gd), i, g[i], f32_bits(g[i]), g1[i], g2[i], want);
  }
  /* a third micro-step, batch 1 again: one more rounded term */
  fwd_bwd(m, x1, dy1, 0);
  for (size_t i = 0; i < n; i++) {
    float want = round16(gd, g1[i]) + round16(gd, g2[i]) + round16(gd, g1[i]);
    if (f32_bits(g[i]) != f32_bits(want))
      fail_msg("%s third step: grad %zu = %.9g, want %.9g", lamp_dtype_name(gd), i, g[i], want);
  }
  /* zeroing then accumulating is the fresh result, up to the sign of zero (0 + -0 = +0) */
  OK(lamp_model_zero_grads(m));
  fwd_bwd(m, x2, dy2, 0);
  for (size_t i = 0; i < n; i++)
    if (!(g[i] == round16(gd, g2[i])))
      fail_msg("%s after zeroing: grad %zu = %.9g, want %.9g", lamp_dtype_name(gd), i, g[i], round16(gd, g2[i]));
  /* and a fresh backward starts over */
  fill_grads(m, NAN);
  fwd_bwd(m, x2, dy2, 1);
  for (size_t i = 0; i < n; i++)
    if (f32_bits(g[i]) != f32_bits(round16(gd, g2[i])))
      fail_msg("%s fresh again: grad %zu = %.9g", lamp_dtype_name(gd), i, g[i]);

  free(g1);
  free(g2);
  lamp_tensor_release(x1);
  lamp_tensor_release(dy1);
  lamp_tensor_release(x2);
  lamp_tensor_release(dy2);
  lamp_model_free(ref);
  lamp_model_free(m);
}

static void test_f16_grads_fp32_compute(void **state) {
  (void)state;
  check_16bit_grads(&(lamp_model_config){.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32,
                                         .activation_dtype = LAMP_F32, .master_weights = 0, .seed = 7,
                                         .grad_dtype = LAMP_F16});
}

static void test_bf16_grads_fp32_compute(void **state) {
  (void)state;
  check_16bit_grads(&(lamp_model_config){.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32,
                                         .activation_dtype = LAMP_F32, .master_weights = 0, .seed = 7,
                                         .grad_dtype = LAMP_BF16});
}

/* The whole 16-bit policies: 16-bit weights with masters, compute and activations. */
static void test_f16_grads_f16_policy(void **state) {
  (void)state;
  check_16bit_grads(&(lamp_model_config){.device = LAMP_CPU, .weight_dtype = LAMP_F16, .compute_dtype = LAMP_F16,
                                         .activation_dtype = LAMP_F16, .master_weights = 1, .seed = 8,
                                         .grad_dtype = LAMP_F16});
}

static void test_bf16_grads_bf16_policy(void **state) {
  (void)state;
  check_16bit_grads(&(lamp_model_config){.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16,
                                         .activation_dtype = LAMP_BF16, .master_weights = 1, .seed = 8,
                                         .grad_dtype = LAMP_BF16});
}

/* An empty batch: a fresh backward still owes zeros everywhere (the slab held NaN), a plain
   one leaves the slab as it was; under every grad dtype. */
static void test_empty_batch_fresh_backward(void **state) {
  (void)state;
  const lamp_dtype gds[3] = {LAMP_F32, LAMP_F16, LAMP_BF16};
  for (int k = 0; k < 3; k++) {
    lamp_model_config cfg = FP32_CFG;
    cfg.grad_dtype = gds[k];
    lamp_model *m = model_of(mlp(4, G16_DIMS), &cfg);
    size_t n = lamp_model_numel(m);
    const float *g = fp(lamp_model_grads(m));
    lamp_tensor *x, *dy;
    g16_batch(&cfg, 0, 1, 1.0, &x, &dy);
    fill_grads(m, NAN);
    fwd_bwd(m, x, dy, 1);
    for (size_t i = 0; i < n; i++)
      if (f32_bits(g[i]) != 0u)
        fail_msg("%s: grad %zu = %g after an empty fresh backward", lamp_dtype_name(gds[k]), i, g[i]);
    fill_grads(m, 1.5f);
    fwd_bwd(m, x, dy, 0);
    for (size_t i = 0; i < n; i++)
      if (g[i] != 1.5f) fail_msg("%s: grad %zu = %g after an empty backward", lamp_dtype_name(gds[k]), i, g[i]);
    lamp_tensor_release(x);
    lamp_tensor_release(dy);
    lamp_model_free(m);
  }
}

/* ---- describe --------------------------------------------------------------------------- */

static void test_describe(void **state) {
  (void)state;
  lamp_layer *nobias;
  OK(lamp_linear_new(&nobias, 10, 3, 0));
  lamp_layer *inner = seq(2, (lamp_layer *[]){linear(784, 10), relu()});
  lamp_layer *net = seq(2, (lamp_layer *[]){inner, nobias});
  char buf[1024];
  net->ops->describe(net, buf, sizeof buf);
  assert_string_equal(buf,
                      "Sequential {\n"
                      "  [input -> (1) -> (2) -> output]\n"
                      "  (1): Sequential {\n"
                      "    [input -> (1) -> (2) -> output]\n"
                      "    (1): Linear(784 -> 10)\n"
                      "    (2): ReLU\n"
                      "  }\n"
                      "  (2): Linear(10 -> 3) without bias\n"
                      "}");
  /* a short buffer truncates, terminated */
  char small[16];
  net->ops->describe(net, small, sizeof small);
  assert_string_equal(small, "Sequential {\n  ");
  lamp_layer_release(net);
}

/* ---- steady state ----------------------------------------------------------------------- */

/* After a warm-up step, further steps allocate nothing: no tag's current or peak moves. */
static void check_steady_state(const lamp_model_config *cfg) {
  step_fixture f = step_fixture_new(cfg, 32);
  step(&f);
  lamp_ledger_entry before[LAMP_MEM_TAG_COUNT + 1];
  lamp_ledger_reset_peaks();
  for (int t = 0; t <= LAMP_MEM_TAG_COUNT; t++) before[t] = lamp_ledger_get(LAMP_HOST, (lamp_mem_tag)t);
  for (int i = 0; i < 3; i++) step(&f);
  for (int t = 0; t <= LAMP_MEM_TAG_COUNT; t++) {
    lamp_ledger_entry now = lamp_ledger_get(LAMP_HOST, (lamp_mem_tag)t);
    if (now.current != before[t].current || now.peak != before[t].peak)
      fail_msg("%s: current %zu -> %zu, peak %zu -> %zu", lamp_mem_tag_name((lamp_mem_tag)t), before[t].current,
               now.current, before[t].peak, now.peak);
  }
  step_fixture_free(&f);
}

static void test_steady_state_fp32(void **state) {
  (void)state;
  check_steady_state(&FP32_CFG);
}

static void test_steady_state_bf16(void **state) {
  (void)state;
  check_steady_state(&BF16_CFG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_param_table_mlp),
      cmocka_unit_test(test_views_sit_at_table_offsets),
      cmocka_unit_test(test_master_offsets_match_weights),
      cmocka_unit_test(test_seed_reproduces_weights),
      cmocka_unit_test(test_init_bound),
      cmocka_unit_test(test_ledger_fp32),
      cmocka_unit_test(test_ledger_bf16_with_masters),
      cmocka_unit_test(test_bf16_weights_follow_masters),
      cmocka_unit_test(test_bf16_without_masters_loses_small_updates),
    cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_layer_in_two_models),
      cmocka_unit_test(test_forward_backward_errors),
      cmocka_unit_test(test_linear_feature_mismatch),
      cmocka_unit_test(test_zero_grads),
      cmocka_unit_test(test_gradient_accumulation),
      cmocka_unit_test(test_f16_grads_fp32_compute),
      cmocka_unit_test(test_bf16_grads_fp32_compute),
      cmocka_unit_test(test_f16_grads_f16_policy),
      cmocka_unit_test(test_bf16_grads_bf16_policy),
      cmocka_unit_test(test_empty_batch_fresh_backward),
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_steady_state_fp32),
      cmocka_unit_test(test_steady_state_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
