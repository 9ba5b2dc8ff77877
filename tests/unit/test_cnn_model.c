/*
** The CNN layers inside a model: the buffer slab and its table, BatchNorm's fp32 parameters and
** statistics under the 16-bit policies (keep_f32), activation memory that grows linearly with
** the batch, a steady state that allocates nothing, the printed tree with parameter counts,
** and Dropout's masks reproducible from the model's seed. The network is the small ResNet of
** scripts/lib/resnet.lua (the one the PyTorch twin of the recipe builds with --arch cnn).
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
#include "tensor/half.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"
#include "test_support.h"

static const lamp_model_config FP32 = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .seed = 9, .grad_dtype = LAMP_F32};
static const lamp_model_config BF16 = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .master_weights = 1, .seed = 9, .grad_dtype = LAMP_F32};
static const lamp_model_config F16 = {.device = LAMP_CPU, .weight_dtype = LAMP_F16, .compute_dtype = LAMP_F16, .activation_dtype = LAMP_F16, .master_weights = 1, .seed = 9, .grad_dtype = LAMP_F32};
static const lamp_model_config BF16_NO_MASTERS = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .master_weights = 0, .seed = 9, .grad_dtype = LAMP_F32};

/* ---- the reference ResNet ------------------------------------------------------------------ */

static lamp_layer *conv3(int64_t in, int64_t out) {
  lamp_layer *l;
  OK(lamp_conv2d_new(&l, in, out, 3, &(lamp_conv2d_options){.padding = 1, .no_bias = 1}));
  return l;
}

static lamp_layer *bn(int64_t c) {
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, c, NULL));
  return l;
}

static lamp_layer *block(int64_t c) {
  lamp_layer *body = seq(5, (lamp_layer *[]){conv3(c, c), bn(c), relu(), conv3(c, c), bn(c)}), *r;
  OK(lamp_residual_new(&r, body, NULL));
  lamp_layer_release(body);
  return r;
}

static lamp_layer *resnet(void) {
  lamp_layer *pool, *gap, *flat;
  OK(lamp_maxpool2d_new(&pool, 2, 0, 0));
  OK(lamp_global_avgpool_new(&gap));
  OK(lamp_flatten_new(&flat));
  return seq(14, (lamp_layer *[]){conv3(1, 16), bn(16), relu(), block(16), relu(), pool, conv3(16, 32), bn(32), relu(),
                                  block(32), relu(), gap, flat, linear(32, 10)});
}

static lamp_model *model_of(lamp_layer *root, const lamp_model_config *cfg) {
  lamp_model *m;
  OK(lamp_model_new(&m, root));
  lamp_layer_release(root);
  OK(lamp_model_build(m, cfg));
  return m;
}

/* One training step's forward and backward on a batch of random images. */
typedef struct rig {
  lamp_model *m;
  lamp_loss *ce;
  lamp_tensor *x, *labels, *dlogits;
} rig;

static rig rig_new(const lamp_model_config *cfg, int64_t batch) {
  rig r = {.m = model_of(resnet(), cfg)};
  OK(lamp_cross_entropy_new(&r.ce));
  r.x = new_tensor(LAMP_F32, 4, (int64_t[]){batch, 1, 28, 28});
  r.labels = new_tensor(LAMP_I32, 1, (int64_t[]){batch});
  r.dlogits = new_tensor(cfg->activation_dtype, 2, (int64_t[]){batch, 10});
  lamp_rng g;
  lamp_rng_seed(&g, 77);
  fill_uniform(r.x, &g, 0, 1);
  for (int64_t i = 0; i < batch; i++) ((int32_t *)lamp_tensor_data(r.labels))[i] = (int32_t)(i % 10);
  return r;
}

static void rig_step(rig *r, const lamp_model_config *cfg) {
  lamp_exec ex = {.device = LAMP_CPU, .compute_dtype = cfg->compute_dtype, .activation_dtype = cfg->activation_dtype, .training = 1, .grad_dtype = LAMP_F32};
  const lamp_tensor *y;
  double loss;
  OK(lamp_model_forward(r->m, r->x, 1, &y));
  OK(r->ce->ops->forward_backward(r->ce, &ex, y, r->labels, 1.0f, &loss, r->dlogits, NULL));
  assert_true(isfinite(loss));
  OK(lamp_model_backward_fresh(r->m, r->dlogits));
}

static void rig_free(rig *r) {
  lamp_tensor_release(r->x);
  lamp_tensor_release(r->labels);
  lamp_tensor_release(r->dlogits);
  lamp_loss_release(r->ce);
  lamp_model_free(r->m);
}

/* ---- buffers ------------------------------------------------------------------------------- */

static void test_buffer_table(void **state) {
  (void)state;
  size_t p0 = lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current;
  lamp_model *m = model_of(resnet(), &FP32);
  /* 6 BatchNorms x (running_mean, running_var, num_batches_tracked) */
  assert_int_equal(lamp_model_n_buffers(m), 18);
  const lamp_model_buffer *b = lamp_model_buffer_at(m, 0);
  assert_string_equal(b->name, "1.running_mean");
  assert_string_equal(lamp_model_buffer_at(m, 3)->name, "3.block.1.running_mean");
  assert_string_equal(lamp_model_buffer_at(m, 17)->name, "9.block.4.num_batches_tracked");
  assert_null(lamp_model_buffer_at(m, 18));
  size_t offset = 0;
  for (size_t i = 0; i < 18; i++) { /* packed in order, initialised like PyTorch's */
    b = lamp_model_buffer_at(m, i);
    assert_int_equal(b->offset, offset);
    const float *v = fp(lamp_model_buffers(m)) + b->offset;
    float want = strstr(b->name, "running_var") ? 1.0f : 0.0f;
    for (size_t k = 0; k < b->count; k++) assert_true(v[k] == want);
    offset += b->count;
  }
  lamp_tensor *slab = lamp_model_buffers(m);
  assert_int_equal(slab->dtype, LAMP_F32);
  assert_int_equal(lamp_tensor_numel(slab), offset);
  assert_int_equal(offset, 2 * (16 * 3 + 32 * 3) + 6);
  /* parameters and buffers are charged to params */
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_PARAMS).current - p0, (lamp_model_numel(m) + offset) * 4);
  /* the table's parameters: BatchNorm's are fp32-only and do not decay */
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    int is_bn = p->ndim == 1 && strcmp(p->name, "13.bias") != 0;
    assert_int_equal(p->keep_f32, is_bn);
    if (is_bn) assert_int_equal(p->decay, 0);
  }
  lamp_model_free(m);
  /* a model without BatchNorm has no buffer slab */
  m = model_of(seq(2, (lamp_layer *[]){linear(4, 3), relu()}), &FP32);
  assert_int_equal(lamp_model_n_buffers(m), 0);
  assert_null(lamp_model_buffers(m));
  lamp_model_free(m);
}

/* A training step moves the running statistics in the slab; evaluation does not. */
static void test_buffers_move_in_training_only(void **state) {
  (void)state;
  rig r = rig_new(&FP32, 8);
  size_t n = lamp_tensor_numel(lamp_model_buffers(r.m));
  float *before = malloc(n * sizeof *before);
  memcpy(before, fp(lamp_model_buffers(r.m)), n * sizeof *before);
  const lamp_tensor *y;
  OK(lamp_model_forward(r.m, r.x, 0, &y));
  assert_memory_equal(before, fp(lamp_model_buffers(r.m)), n * sizeof *before);
  rig_step(&r, &FP32);
  assert_true(memcmp(before, fp(lamp_model_buffers(r.m)), n * sizeof *before) != 0);
  const lamp_model_buffer *count = lamp_model_buffer_at(r.m, 2);
  assert_string_equal(count->name, "1.num_batches_tracked");
  assert_true(fp(lamp_model_buffers(r.m))[count->offset] == 1.0f);
  free(before);
  rig_free(&r);
}

/* ---- BatchNorm under 16-bit policies ------------------------------------------------------- */

/*
** Under fp16 and bf16 a BatchNorm reads fp32 weight and bias (views into the masters or, without
** masters, into the fp32 copy the optimizer updates), its running statistics are fp32, and its
** output is the fp32 computation of the 16-bit input, rounded once. The weight is set to
** 1 + 2^-12, which neither 16-bit format can hold: the output shows it was read unrounded.
*/
static void check_bn_policy(const lamp_model_config *cfg) {
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, 3, NULL));
  lamp_model *m = model_of(l, cfg);
  lamp_batchnorm_views v;
  OK(lamp_batchnorm2d_views(l, &v));
  assert_int_equal(v.weight->dtype, LAMP_F32);
  assert_int_equal(v.bias->dtype, LAMP_F32);
  assert_int_equal(v.running_mean->dtype, LAMP_F32);
  assert_int_equal(v.running_var->dtype, LAMP_F32);
  assert_ptr_equal(lamp_tensor_data(v.weight), lamp_model_trainable(m)); /* the fp32 slab the optimizer updates */
  const float w = 1.0f + 0x1p-12f, b = 0x1p-13f;
  for (int c = 0; c < 3; c++) {
    lamp_model_trainable(m)[c] = w;
    lamp_model_trainable(m)[3 + c] = b;
  }
  OK(lamp_model_begin_update(m)); /* what a trainer does around the optimizer step */
  OK(lamp_model_sync_weights(m));
  assert_true(fp(v.weight)[0] == w); /* not reloaded from, nor rounded to, 16 bits */
  /* a 16-bit input, as the layer before it would hand over */
  enum { N = 4, C = 3, HW = 10 };
  lamp_tensor *x = new_tensor(cfg->activation_dtype, 4, (int64_t[]){N, C, 2, 5});
  lamp_rng g;
  lamp_rng_seed(&g, 5);
  float xs[N * C * HW];
  for (int i = 0; i < N * C * HW; i++) {
    store_f32_as(x->dtype, lamp_tensor_data(x), (size_t)i, (float)(3.0 + lamp_rng_uniform(&g)));
    xs[i] = load_as_f32(x->dtype, lamp_tensor_data(x), (size_t)i);
  }
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 1, &y));
  assert_int_equal(y->dtype, cfg->activation_dtype);
  for (int c = 0; c < C; c++) {
    double mean = 0, var = 0;
    for (int n = 0; n < N; n++)
      for (int p = 0; p < HW; p++) mean += xs[(n * C + c) * HW + p];
    mean /= N * HW;
    for (int n = 0; n < N; n++)
      for (int p = 0; p < HW; p++) var += pow(xs[(n * C + c) * HW + p] - mean, 2);
    /* statistics of the widened input in fp32: ~1e-7 relative; 16-bit statistics would be off
       by ~1e-3 (the mean is ~3.5, where bf16's spacing is 2^-6) */
    assert_near(fp(v.running_mean)[c], 0.1 * mean, 1e-6);
    assert_near(fp(v.running_var)[c], 0.9 + 0.1 * var / (N * HW - 1), 1e-6);
    for (int n = 0; n < N; n++)
      for (int p = 0; p < HW; p++) {
        int i = (n * C + c) * HW + p;
        double want = (xs[i] - mean) / sqrt(var / (N * HW) + 1e-5) * w + b;
        /* one rounding to the 16-bit output: half an ulp, 2^-9 (bf16) or 2^-12 (fp16) relative,
           plus fp32 arithmetic; the weight's 2^-12 shows at fp16's resolution */
        double tol = (cfg->activation_dtype == LAMP_BF16 ? 0x1p-8 : 0x1p-11) * fabs(want) + 1e-5;
        assert_near(load_as_f32(y->dtype, lamp_tensor_data(y), (size_t)i), want, tol);
      }
  }
  lamp_tensor_release(x);
  lamp_model_free(m);
}

static void test_bn_fp32_under_bf16(void **state) {
  (void)state;
  check_bn_policy(&BF16);
}

static void test_bn_fp32_under_fp16(void **state) {
  (void)state;
  check_bn_policy(&F16);
}

static void test_bn_fp32_under_bf16_without_masters(void **state) {
  (void)state;
  check_bn_policy(&BF16_NO_MASTERS);
}

/* The whole ResNet trains a step under each policy; BatchNorm views stay fp32 throughout. */
static void test_resnet_steps_under_policies(void **state) {
  (void)state;
  const lamp_model_config *cfgs[] = {&FP32, &BF16, &F16, &BF16_NO_MASTERS};
  for (int i = 0; i < 4; i++) {
    rig r = rig_new(cfgs[i], 4);
    rig_step(&r, cfgs[i]);
    lamp_layer *root = lamp_model_root(r.m);
    lamp_batchnorm_views v;
    OK(lamp_batchnorm2d_views(root->ops->child(root, 1), &v));
    assert_int_equal(v.weight->dtype, LAMP_F32);
    double norm = 0;
    for (size_t k = 0; k < lamp_model_numel(r.m); k++) norm += pow(fp(lamp_model_grads(r.m))[k], 2);
    assert_true(norm > 0 && isfinite(norm));
    rig_free(&r);
  }
}

/* ---- memory ------------------------------------------------------------------------------ */

static size_t activation_bytes(int64_t batch) {
  size_t a0 = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current;
  rig r = rig_new(&FP32, batch);
  rig_step(&r, &FP32);
  size_t used = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current - a0;
  rig_free(&r);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current, a0); /* all returned */
  return used;
}

/* Activation memory grows linearly with the batch: 4x the batch, 4x the activation bytes. */
static void test_activations_linear_in_batch(void **state) {
  (void)state;
  size_t a32 = activation_bytes(32), a128 = activation_bytes(128);
  double ratio = (double)a128 / (double)a32;
  if (fabs(ratio - 4.0) > 0.01) fail_msg("activations: %zu bytes at batch 32, %zu at 128 (ratio %.4f)", a32, a128, ratio);
  /* ~ 1.5 MB per image: 28x28x16 planes dominate; a sanity bound, not a budget */
  assert_true(a128 > 100u << 20 && a128 < 400u << 20);
}

/* After a warm-up step nothing is allocated: no tag's current or peak bytes move. */
static void test_steady_state(void **state) {
  (void)state;
  rig r = rig_new(&FP32, 16);
  rig_step(&r, &FP32);
  lamp_ledger_entry before[LAMP_MEM_TAG_COUNT + 1];
  lamp_ledger_reset_peaks();
  for (int t = 0; t <= LAMP_MEM_TAG_COUNT; t++) before[t] = lamp_ledger_get(LAMP_HOST, (lamp_mem_tag)t);
  for (int i = 0; i < 2; i++) rig_step(&r, &FP32);
  for (int t = 0; t <= LAMP_MEM_TAG_COUNT; t++) {
    lamp_ledger_entry now = lamp_ledger_get(LAMP_HOST, (lamp_mem_tag)t);
    if (now.current != before[t].current || now.peak != before[t].peak)
      fail_msg("%s: current %zu -> %zu, peak %zu -> %zu", lamp_mem_tag_name((lamp_mem_tag)t), before[t].current,
               now.current, before[t].peak, now.peak);
  }
  rig_free(&r);
}

/* ---- the printed tree ------------------------------------------------------------------------ */

static void test_summary(void **state) {
  (void)state;
  lamp_layer *net = resnet();
  size_t numel;
  OK(lamp_layer_param_numel(net, &numel));
  assert_int_equal(numel, 28410); /* torch: sum(p.numel() for p in model.parameters()) */
  char buf[8192];
  lamp_layer_summary(net, buf, sizeof buf);
  assert_non_null(strstr(buf, "total parameters: 28,410"));
  assert_non_null(strstr(buf, "(1): Conv2d(1 -> 16, 3x3, padding 1, no bias)"));
  assert_non_null(strstr(buf, "(4): Residual"));
  assert_non_null(strstr(buf, "      (1): Conv2d(16 -> 16, 3x3, padding 1, no bias)"));
  assert_non_null(strstr(buf, "(14): Linear(32 -> 10)"));
  /* each line ends with the layer's count: the residual block of 16 channels has 4,672 */
  const char *line = strstr(buf, "(4): Residual");
  const char *end = strchr(line, '\n');
  assert_true(end - line > 5 && strncmp(end - 5, "4,672", 5) == 0);
  lamp_layer_release(net);
}

/* ---- Dropout through the model ------------------------------------------------------------ */

static void test_dropout_reproducible_from_seed(void **state) {
  (void)state;
  float out[3][40];
  for (int k = 0; k < 3; k++) {
    lamp_layer *d1, *d2;
    OK(lamp_dropout_new(&d1, 0.5));
    OK(lamp_dropout_new(&d2, 0.5));
    lamp_model_config cfg = FP32;
    cfg.seed = k == 2 ? 10 : 9;
    lamp_model *m = model_of(seq(3, (lamp_layer *[]){d1, linear(20, 20), d2}), &cfg);
    lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){2, 20});
    for (int i = 0; i < 40; i++) fp(x)[i] = 1.0f;
    const lamp_tensor *y;
    OK(lamp_model_forward(m, x, 1, &y));
    memcpy(out[k], fp(y), sizeof out[k]);
    /* the next forward draws new masks */
    OK(lamp_model_forward(m, x, 1, &y));
    assert_true(memcmp(out[k], fp(y), sizeof out[k]) != 0);
    lamp_tensor_release(x);
    lamp_model_free(m);
  }
  assert_memory_equal(out[0], out[1], sizeof out[0]); /* same seed, same masks */
  assert_true(memcmp(out[0], out[2], sizeof out[0]) != 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffer_table),
      cmocka_unit_test(test_buffers_move_in_training_only),
      cmocka_unit_test(test_bn_fp32_under_bf16),
      cmocka_unit_test(test_bn_fp32_under_fp16),
      cmocka_unit_test(test_bn_fp32_under_bf16_without_masters),
      cmocka_unit_test(test_resnet_steps_under_policies),
      cmocka_unit_test(test_activations_linear_in_batch),
      cmocka_unit_test(test_steady_state),
      cmocka_unit_test(test_summary),
      cmocka_unit_test(test_dropout_reproducible_from_seed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
