/*
** Sequential runs a BatchNorm2d or a Residual that is followed by a ReLU as one fused operation
** (nn/fusion.h): one pass and one stored activation fewer. The reference ResNet is trained one
** step fused and unfused (each fusable layer wrapped alone in a Sequential, which does not fuse),
** under fp32, bf16 and fp16: outputs, loss, gradients and running statistics must
** agree bit for bit, through the combined backward and through backward_input followed by
** accumulate_grads, and the activation ledger must be smaller by exactly the outputs not stored
** (and, in the combined walk, where a BatchNorm applies its ReLU's mask itself, by the gradients
** at the BatchNorms' own outputs, never formed). The mask a BatchNorm recomputes from its input
** must also agree where a positive output rounds to 0 in a 16-bit format.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "nn/fusion.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "tensor/dtype.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"
#include "test_support.h"

static const lamp_model_config FP32 = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .seed = 5, .grad_dtype = LAMP_F32};
static const lamp_model_config BF16 = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .master_weights = 1, .seed = 5, .grad_dtype = LAMP_F32};
static const lamp_model_config F16 = {.device = LAMP_CPU, .weight_dtype = LAMP_F16, .compute_dtype = LAMP_F16, .activation_dtype = LAMP_F16, .master_weights = 1, .seed = 5, .grad_dtype = LAMP_F32};

#define BATCH 6

/* A layer alone in a Sequential: the same computation, but nothing for the parent to fuse. */
static lamp_layer *alone(lamp_layer *l, int wrap) { return wrap ? seq(1, (lamp_layer *[]){l}) : l; }

static lamp_layer *conv3(int64_t in, int64_t out) {
  lamp_layer *l;
  OK(lamp_conv2d_new(&l, in, out, 3, &(lamp_conv2d_options){.padding = 1, .no_bias = 1}));
  return l;
}

static lamp_layer *bn(int64_t c, int wrap) {
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, c, NULL));
  return alone(l, wrap);
}

/* relu(x + bn(conv(relu(bn(conv(x)))))); with a projection when the width changes. */
static lamp_layer *block(int64_t in, int64_t c, int wrap) {
  lamp_layer *body = seq(5, (lamp_layer *[]){conv3(in, c), bn(c, wrap), relu(), conv3(c, c), bn(c, 0)}), *r;
  lamp_layer *proj = in == c ? NULL : seq(2, (lamp_layer *[]){conv3(in, c), bn(c, 0)});
  OK(lamp_residual_new(&r, body, proj));
  lamp_layer_release(body);
  lamp_layer_release(proj);
  return alone(r, wrap);
}

/* The reference ResNet, plus a projecting block; the fused pairs store these outputs fewer per
   image: three of 4x8x8 (stem BatchNorm, block 1's inner BatchNorm, block 1) and two of 8x4x4. */
#define SAVED_PER_IMAGE (3 * 4 * 8 * 8 + 2 * 8 * 4 * 4)
/* The combined walk also forms no gradient at the outputs of the BatchNorms fused with a ReLU:
   two of 4x8x8 (stem, block 1's inner one) and one of 8x4x4 (block 2's inner one). */
#define GRADS_SAVED_PER_IMAGE (2 * 4 * 8 * 8 + 8 * 4 * 4)

static lamp_layer *net(int wrap) {
  lamp_layer *pool, *gap, *flat;
  OK(lamp_maxpool2d_new(&pool, 2, 0, 0));
  OK(lamp_global_avgpool_new(&gap));
  OK(lamp_flatten_new(&flat));
  return seq(10, (lamp_layer *[]){conv3(1, 4), bn(4, wrap), relu(), block(4, 4, wrap), relu(), pool,
                                  block(4, 8, wrap), relu(), gap, flat});
}

typedef struct run {
  lamp_model *m;
  lamp_layer *root;
  lamp_tensor *out, *grads, *buffers;
  double loss;
  size_t activations; /* ledger bytes after the step */
} run;

static lamp_tensor *copy_of(const lamp_tensor *t) {
  lamp_tensor *c = new_tensor(t->dtype, t->ndim, t->shape);
  memcpy(lamp_tensor_data(c), lamp_tensor_data(t), lamp_tensor_nbytes(t));
  return c;
}

/* One forward and backward of BATCH images; split: backward_input then accumulate_grads. */
static run step(const lamp_model_config *cfg, int wrap, int split) {
  size_t before = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current;
  run r = {.root = net(wrap)};
  OK(lamp_model_new(&r.m, r.root));
  OK(lamp_model_build(r.m, cfg));
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){BATCH, 1, 8, 8});
  lamp_tensor *labels = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  lamp_rng g;
  lamp_rng_seed(&g, 31);
  fill_uniform(x, &g, -1, 1);
  for (int i = 0; i < BATCH; i++) ((int32_t *)lamp_tensor_data(labels))[i] = i % 8;
  const lamp_tensor *y;
  OK(lamp_model_forward(r.m, x, 1, &y));
  lamp_tensor *dy = new_tensor(y->dtype, y->ndim, y->shape);
  lamp_loss *ce;
  OK(lamp_cross_entropy_new(&ce));
  lamp_exec ex = {.device = LAMP_CPU, .compute_dtype = cfg->compute_dtype, .activation_dtype = cfg->activation_dtype,
                  .training = 1, .grad_dtype = LAMP_F32};
  OK(ce->ops->forward_backward(ce, &ex, y, labels, 1.0f, &r.loss, dy, NULL));
  if (split) {
    OK(lamp_model_zero_grads(r.m));
    OK(r.root->ops->backward_input(r.root, &ex, x, y, dy, NULL));
    OK(r.root->ops->accumulate_grads(r.root, &ex, x, dy));
  } else {
    OK(lamp_model_backward_fresh(r.m, dy));
  }
  r.activations = lamp_ledger_get(LAMP_HOST, LAMP_MEM_ACTIVATIONS).current - before;
  r.out = copy_of(y);
  r.grads = copy_of(lamp_model_grads(r.m));
  r.buffers = copy_of(lamp_model_buffers(r.m));
  lamp_loss_release(ce);
  lamp_tensor_release(dy);
  lamp_tensor_release(x);
  lamp_tensor_release(labels);
  return r;
}

static void run_free(run *r) {
  lamp_tensor_release(r->out);
  lamp_tensor_release(r->grads);
  lamp_tensor_release(r->buffers);
  lamp_model_free(r->m);
  lamp_layer_release(r->root);
}

static void assert_same_bits(const lamp_tensor *a, const lamp_tensor *b, const char *what) {
  assert_int_equal(lamp_tensor_nbytes(a), lamp_tensor_nbytes(b));
  if (memcmp(lamp_tensor_data(a), lamp_tensor_data(b), lamp_tensor_nbytes(a)) != 0)
    fail_msg("%s differ between the fused and the unfused network", what);
}

static void check_policy(const lamp_model_config *cfg) {
  for (int split = 0; split < 2; split++) {
    run fused = step(cfg, 0, split), plain = step(cfg, 1, split);
    assert_true(isfinite(fused.loss));
    assert_memory_equal(&fused.loss, &plain.loss, sizeof fused.loss);
    assert_same_bits(fused.out, plain.out, "outputs");
    assert_same_bits(fused.grads, plain.grads, "gradients");
    assert_same_bits(fused.buffers, plain.buffers, "running statistics");
    size_t per_image = SAVED_PER_IMAGE + (split ? 0 : GRADS_SAVED_PER_IMAGE);
    size_t saved = (size_t)BATCH * per_image * lamp_dtype_size(cfg->activation_dtype);
    assert_int_equal(plain.activations - fused.activations, saved);
    run_free(&fused);
    run_free(&plain);
  }
}

static void test_fp32_same_bits(void **state) {
  (void)state;
  check_policy(&FP32);
}

static void test_bf16_same_bits(void **state) {
  (void)state;
  check_policy(&BF16);
}

static void test_fp16_same_bits(void **state) {
  (void)state;
  check_policy(&F16);
}

/*
** With weight 0, each of a BatchNorm's channels outputs its bias. Biases: half the format's zero
** bound, the bound itself (both stored as 0: the bound is a tie that goes to the even 0), the next
** float above (stored as the smallest subnormal), and 1. The fused backward recomputes the mask
** from x and must pass the gradient exactly where the stored output is > 0, as the unfused ReLU
** does: the bias gradient is 0, 0, BATCH, BATCH (dy = 1 at the pooled output).
*/
static lamp_tensor *edge_step(const lamp_model_config *cfg, float bound, int wrap, size_t *bias_offset) {
  lamp_layer *b, *gap, *flat;
  OK(lamp_batchnorm2d_new(&b, 4, NULL));
  OK(lamp_global_avgpool_new(&gap));
  OK(lamp_flatten_new(&flat));
  lamp_layer_retain(b);
  lamp_layer *root = seq(5, (lamp_layer *[]){conv3(1, 4), alone(b, wrap), relu(), gap, flat});
  lamp_model *m;
  OK(lamp_model_new(&m, root));
  OK(lamp_model_build(m, cfg));
  lamp_batchnorm_views v;
  OK(lamp_batchnorm2d_views(b, &v));
  const float bias[4] = {bound / 2, bound, nextafterf(bound, 1.0f), 1.0f};
  for (size_t k = 0; k < 4; k++) {
    ((float *)lamp_tensor_data(v.weight))[k] = 0.0f;
    ((float *)lamp_tensor_data(v.bias))[k] = bias[k];
  }
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    size_t len = strlen(p->name);
    if (len >= 4 && strcmp(p->name + len - 4, "bias") == 0) *bias_offset = p->offset;
  }
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){BATCH, 1, 8, 8});
  lamp_rng g;
  lamp_rng_seed(&g, 7);
  fill_uniform(x, &g, -1, 1);
  const lamp_tensor *y;
  OK(lamp_model_forward(m, x, 1, &y));
  lamp_tensor *dy = new_tensor(y->dtype, y->ndim, y->shape);
  for (size_t i = 0; i < lamp_tensor_numel(dy); i++) store_f32_as(dy->dtype, lamp_tensor_data(dy), i, 1.0f);
  OK(lamp_model_backward_fresh(m, dy));
  lamp_tensor *grads = copy_of(lamp_model_grads(m));
  lamp_tensor_release(dy);
  lamp_tensor_release(x);
  lamp_model_free(m);
  lamp_layer_release(root);
  lamp_layer_release(b);
  return grads;
}

static void check_zero_bound(const lamp_model_config *cfg, float bound) {
  size_t fused_bias = 0, plain_bias = 0;
  lamp_tensor *fused = edge_step(cfg, bound, 0, &fused_bias), *plain = edge_step(cfg, bound, 1, &plain_bias);
  assert_same_bits(fused, plain, "gradients");
  const float *gb = (const float *)lamp_tensor_data(fused) + fused_bias;
  const float want[4] = {0.0f, 0.0f, (float)BATCH, (float)BATCH};
  for (size_t k = 0; k < 4; k++)
    if (gb[k] != want[k])
      fail_msg("%s: bias gradient %zu is %g, expected %g", lamp_dtype_name(cfg->activation_dtype), k, (double)gb[k],
               (double)want[k]);
  lamp_tensor_release(fused);
  lamp_tensor_release(plain);
}

static void test_mask_where_outputs_round_to_zero(void **state) {
  (void)state;
  check_zero_bound(&F16, LAMP_F16_ZERO_BOUND);
  check_zero_bound(&BF16, LAMP_BF16_ZERO_BOUND);
  check_zero_bound(&FP32, 0.0f);
}

/* Only a BatchNorm2d or a Residual fuses, and only with a ReLU after it; a container does not. */
static void test_what_fuses(void **state) {
  (void)state;
  lamp_layer *r = relu(), *b = bn(4, 0), *l = linear(4, 4), *wrapped = bn(4, 1), *res = block(4, 4, 0);
  assert_true(lamp_layer_is_relu(r));
  assert_false(lamp_layer_is_relu(b));
  const lamp_fusion *f = lamp_fusion_with_relu(b, r);
  assert_non_null(f);
  assert_string_equal(f->name, "BatchNorm2d+ReLU");
  assert_non_null(f->backward);
  f = lamp_fusion_with_relu(res, r);
  assert_non_null(f);
  assert_string_equal(f->name, "Residual+ReLU");
  assert_null(f->backward); /* the pair goes back one by one */
  assert_null(lamp_fusion_with_relu(b, l));
  assert_null(lamp_fusion_with_relu(l, r));
  assert_null(lamp_fusion_with_relu(wrapped, r));
  assert_null(lamp_fusion_with_relu(r, r));
  lamp_layer_release(r);
  lamp_layer_release(b);
  lamp_layer_release(l);
  lamp_layer_release(wrapped);
  lamp_layer_release(res);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp32_same_bits),
      cmocka_unit_test(test_bf16_same_bits),
      cmocka_unit_test(test_fp16_same_bits),
      cmocka_unit_test(test_mask_where_outputs_round_to_zero),
      cmocka_unit_test(test_what_fuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
