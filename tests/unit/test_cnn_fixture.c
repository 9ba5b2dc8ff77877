/*
** A small residual CNN against PyTorch (tests/fixtures/make_conv_fixtures.py wrote the
** reference values into tests/data/conv/): the same network with the same weights, one
** training-mode step on the same batch; logits, loss, every parameter gradient, the input
** gradient and the running statistics after the step.
**
** fp32: 1e-4 relative (to each tensor's largest magnitude, plus 1e-4 of the element): the two
** implementations sum in different orders (im2col GEMMs vs mkldnn, fp32 vs double statistics),
** which moves results by a few 1e-7 relative per layer; the backward chain through six
** BatchNorms amplifies that to ~1e-6..1e-5 at most.
**
** bf16 (bf16 weights from fp32 masters, bf16 compute and activations; BatchNorm in fp32)
** against the same step under torch.autocast(bfloat16) (*_bf16.txt). Against fp32 that step is
** far off: every GEMM operand is rounded to bf16 (relative error up to 2^-9, half of bf16's
** 2^-8 spacing), and the backward through six BatchNorms, whose input gradient subtracts
** per-channel means of 24..384 values, amplifies those roundings into 1..26 % relative L2
** errors of the early gradients, in PyTorch and in lamp alike (measured: PyTorch's bf16 dx is
** 13.4 % from its fp32 dx). But both round the SAME operands the same way (x and W to bf16,
** nearest even) and both store activations in bf16, so they differ only in how each kernel
** reaches its rounded output (summation order, where a bias or a residual is added, mkldnn's
** bf16 BatchNorm against lamp's fp32 one): at most one or two different 2^-9 roundings per
** layer, independent from layer to layer: over the ~8 layers of a forward sqrt(16) * 2^-9 ~
** 0.8 %, over the ~16 of forward plus backward ~ 1.2 % relative L2 (measured: at most 1.2 %,
** typically 0.6 %). Hence logits
** and loss within 2 % (relative to the logits' scale) and every gradient tensor within 4 % in
** relative L2 norm, with a floor of 1e-3 of the largest gradient for gradients that are 0 in
** exact arithmetic (a conv bias before a BatchNorm). A transposed kernel or a dropped term is
** off by O(1). The running statistics come from bf16 activations: within 2 % of fp32's.
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
#include "tensor/tensor.h"
#include "test_support.h"

/* bf16 tolerances: see the comment at the top. */
#define BF16_RTOL 0.02
#define BF16_NORM 0.04

/* ---- the fixture files --------------------------------------------------------------------- */

typedef struct record {
  char name[96];
  size_t n;
  double *v;
} record;

typedef struct records {
  record r[64];
  size_t n;
} records;

static void load(records *rs, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/conv/%s", LAMP_TEST_DATA_DIR, file);
  FILE *f = fopen(path, "r");
  if (f == NULL) fail_msg("cannot open %s (run tests/fixtures/make_conv_fixtures.py)", path);
  rs->n = 0;
  char name[96];
  size_t n;
  while (fscanf(f, "%95s %zu", name, &n) == 2) {
    assert_true(rs->n < 64);
    record *r = &rs->r[rs->n++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->n = n;
    r->v = malloc((n ? n : 1) * sizeof *r->v);
    for (size_t i = 0; i < n; i++) assert_int_equal(fscanf(f, "%lf", &r->v[i]), 1);
  }
  fclose(f);
}

static const record *find(const records *rs, const char *name) {
  for (size_t i = 0; i < rs->n; i++)
    if (strcmp(rs->r[i].name, name) == 0) return &rs->r[i];
  fail_msg("fixture record %s is missing", name);
  return NULL;
}

static void unload(records *rs) {
  for (size_t i = 0; i < rs->n; i++) free(rs->r[i].v);
}

/* ---- the network (make_conv_fixtures.py's, layer for layer) -------------------------------- */

static lamp_layer *conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int bias) {
  lamp_layer *l;
  OK(lamp_conv2d_new(&l, in, out, k, &(lamp_conv2d_options){.stride = stride, .padding = pad, .no_bias = !bias}));
  return l;
}

static lamp_layer *bn(int64_t c) {
  lamp_layer *l;
  OK(lamp_batchnorm2d_new(&l, c, NULL));
  return l;
}

static lamp_layer *residual(lamp_layer *block, lamp_layer *projection) {
  lamp_layer *l;
  OK(lamp_residual_new(&l, block, projection));
  lamp_layer_release(block);
  lamp_layer_release(projection);
  return l;
}

static lamp_layer *fixture_net(void) {
  lamp_layer *pool, *gap, *flat;
  OK(lamp_maxpool2d_new(&pool, 2, 0, 0));
  OK(lamp_global_avgpool_new(&gap));
  OK(lamp_flatten_new(&flat));
  lamp_layer *b1 = seq(5, (lamp_layer *[]){conv(8, 8, 3, 1, 1, 0), bn(8), relu(), conv(8, 8, 3, 1, 1, 0), bn(8)});
  lamp_layer *b2 = seq(5, (lamp_layer *[]){conv(8, 16, 3, 2, 1, 0), bn(16), relu(), conv(16, 16, 3, 1, 1, 0), bn(16)});
  lamp_layer *p2 = seq(2, (lamp_layer *[]){conv(8, 16, 1, 2, 0, 0), bn(16)});
  return seq(11, (lamp_layer *[]){conv(3, 8, 3, 1, 1, 1), bn(8), relu(), residual(b1, NULL), relu(), pool,
                                  residual(b2, p2), relu(), gap, flat, linear(16, 5)});
}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct result {
  float *logits, *dx, *grads, *buffers;
  double loss;
} result;

/* |got - want| <= rtol (scale + |want|) + atol, scale the tensor's largest magnitude. */
static void compare_rel(const float *got, const double *want, size_t n, double rtol, double atol, const char *what) {
  double scale = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > rtol * (scale + fabs(want[i])) + atol)
      fail_msg("%s[%zu]: got %.8g, want %.8g (scale %.3g)", what, i, got[i], want[i], scale);
}

/* ||got - want|| <= rtol ||want|| + atol sqrt(n). */
static void compare_norm(const float *got, const double *want, size_t n, double rtol, double atol, const char *what) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; i++) {
    diff += pow(got[i] - want[i], 2);
    ref += want[i] * want[i];
  }
  if (getenv("LAMP_TEST_VERBOSE")) fprintf(stderr, "%-28s rel L2 %.4g\n", what, sqrt(diff / ref));
  if (sqrt(diff) > rtol * sqrt(ref) + atol * sqrt((double)n) && !getenv("LAMP_TEST_VERBOSE"))
    fail_msg("%s: relative L2 error %.4g exceeds %.3g", what, sqrt(diff / ref), rtol);
}

/* Builds the network under `cfg`, loads the fixture's weights, runs one training step. */
static result run_step(const lamp_model_config *cfg, const records *in, const records *params) {
  lamp_model *m;
  OK(lamp_model_new(&m, fixture_net()));
  lamp_layer_release(lamp_model_root(m)); /* the model holds the only reference now */
  OK(lamp_model_build(m, cfg));
  assert_int_equal(lamp_model_n_params(m), params->n);
  float *theta = lamp_model_trainable(m);
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    const record *r = find(params, p->name);
    assert_int_equal(r->n, p->count);
    for (size_t k = 0; k < p->count; k++) theta[p->offset + k] = (float)r->v[k];
  }
  OK(lamp_model_sync_weights(m));
  const record *xr = find(in, "x"), *lr = find(in, "labels");
  lamp_tensor *x = new_tensor(LAMP_F32, 4, (int64_t[]){6, 3, 8, 8}), *labels = new_tensor(LAMP_I32, 1, (int64_t[]){6});
  lamp_tensor *dx = new_tensor(LAMP_F32, 4, (int64_t[]){6, 3, 8, 8}), *dlogits = new_tensor(cfg->activation_dtype, 2, (int64_t[]){6, 5});
  for (size_t i = 0; i < xr->n; i++) fp(x)[i] = (float)xr->v[i];
  for (size_t i = 0; i < 6; i++) ((int32_t *)lamp_tensor_data(labels))[i] = (int32_t)lr->v[i];
  lamp_loss *ce;
  OK(lamp_cross_entropy_new(&ce));
  lamp_exec ex = {.device = LAMP_CPU, .compute_dtype = cfg->compute_dtype, .activation_dtype = cfg->activation_dtype,
                  .training = 1, .grad_dtype = LAMP_F32};
  const lamp_tensor *y;
  result res;
  OK(lamp_model_forward(m, x, 1, &y));
  OK(ce->ops->forward_backward(ce, &ex, y, labels, 1.0f, &res.loss, dlogits, NULL));
  res.logits = malloc(30 * sizeof(float));
  for (size_t i = 0; i < 30; i++) res.logits[i] = load_as_f32(y->dtype, lamp_tensor_data(y), i);
  OK(lamp_model_backward_fresh(m, dlogits));
  /* dx: the model gives the root no input gradient, so ask the root itself (same forward state) */
  lamp_layer *root = lamp_model_root(m);
  lamp_tensor *dx_act = new_tensor(cfg->activation_dtype, 4, (int64_t[]){6, 3, 8, 8});
  OK(root->ops->backward_input(root, &ex, x, y, dlogits, dx_act));
  res.dx = malloc(lamp_tensor_numel(dx) * sizeof(float));
  for (size_t i = 0; i < lamp_tensor_numel(dx); i++) res.dx[i] = load_as_f32(dx_act->dtype, lamp_tensor_data(dx_act), i);
  res.grads = malloc(lamp_model_numel(m) * sizeof(float));
  memcpy(res.grads, fp(lamp_model_grads(m)), lamp_model_numel(m) * sizeof(float));
  size_t nb = lamp_tensor_numel(lamp_model_buffers(m));
  res.buffers = malloc(nb * sizeof(float));
  memcpy(res.buffers, fp(lamp_model_buffers(m)), nb * sizeof(float));
  lamp_tensor *ts[] = {x, labels, dx, dlogits, dx_act};
  for (int i = 0; i < 5; i++) lamp_tensor_release(ts[i]);
  lamp_loss_release(ce);
  lamp_model_free(m);
  return res;
}

static lamp_model *table_model(void) {
  lamp_model *m;
  OK(lamp_model_new(&m, fixture_net()));
  lamp_layer_release(lamp_model_root(m));
  lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .seed = 1, .grad_dtype = LAMP_F32};
  OK(lamp_model_build(m, &cfg));
  return m;
}

static void check_against_torch(const lamp_model_config *cfg, int bf16) {
  records in, params, expected, grads, buffers;
  load(&in, "input.txt");
  load(&params, "params.txt");
  load(&expected, bf16 ? "expected_bf16.txt" : "expected.txt");
  load(&grads, bf16 ? "grads_bf16.txt" : "grads.txt");
  load(&buffers, "buffers.txt");
  result r = run_step(cfg, &in, &params);
  lamp_model *m = table_model();
  const record *logits = find(&expected, "logits"), *loss = find(&expected, "loss"), *dx = find(&expected, "dx");
  double gscale = 0; /* the largest gradient anywhere: the floor for gradients that are 0 in exact arithmetic */
  for (size_t i = 0; i < grads.n; i++)
    for (size_t k = 0; k < grads.r[i].n; k++) gscale = fmax(gscale, fabs(grads.r[i].v[k]));
  if (!bf16) {
    compare_rel(r.logits, logits->v, 30, 1e-4, 0, "logits");
    assert_near(r.loss, loss->v[0], 1e-4 * loss->v[0]);
    compare_rel(r.dx, dx->v, dx->n, 1e-4, 0, "dx");
  } else {
    compare_rel(r.logits, logits->v, 30, BF16_RTOL, 0, "logits (bf16)");
    assert_near(r.loss, loss->v[0], BF16_RTOL * loss->v[0]);
    compare_norm(r.dx, dx->v, dx->n, BF16_NORM, 0, "dx (bf16)");
  }
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    const record *g = find(&grads, p->name);
    assert_int_equal(g->n, p->count);
    if (!bf16) compare_rel(r.grads + p->offset, g->v, p->count, 1e-4, 1e-6 * gscale, p->name);
    else compare_norm(r.grads + p->offset, g->v, p->count, BF16_NORM, 1e-3 * gscale, p->name);
  }
  /* the running statistics after one step: fp32 statistics under every policy */
  assert_int_equal(lamp_model_n_buffers(m), buffers.n);
  for (size_t i = 0; i < lamp_model_n_buffers(m); i++) {
    const lamp_model_buffer *b = lamp_model_buffer_at(m, i);
    const record *want = find(&buffers, b->name);
    assert_int_equal(want->n, b->count);
    compare_rel(r.buffers + b->offset, want->v, b->count, bf16 ? BF16_RTOL : 1e-4, 0, b->name);
  }
  free(r.logits);
  free(r.dx);
  free(r.grads);
  free(r.buffers);
  lamp_model_free(m);
  records *all[] = {&in, &params, &expected, &grads, &buffers};
  for (int i = 0; i < 5; i++) unload(all[i]);
}

static void test_fp32_matches_torch(void **state) {
  (void)state;
  lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_F32, .compute_dtype = LAMP_F32, .activation_dtype = LAMP_F32, .seed = 1, .grad_dtype = LAMP_F32};
  check_against_torch(&cfg, 0);
}

static void test_bf16_matches_torch_autocast(void **state) {
  (void)state;
  lamp_model_config cfg = {.device = LAMP_CPU, .weight_dtype = LAMP_BF16, .compute_dtype = LAMP_BF16, .activation_dtype = LAMP_BF16, .master_weights = 1, .seed = 1, .grad_dtype = LAMP_F32};
  check_against_torch(&cfg, 1);
}

/* The parameter and buffer tables carry torch's names in torch's order. */
static void test_names_match_torch(void **state) {
  (void)state;
  records params, buffers;
  load(&params, "params.txt");
  load(&buffers, "buffers.txt");
  lamp_model *m = table_model();
  assert_int_equal(lamp_model_n_params(m), params.n);
  for (size_t i = 0; i < params.n; i++) assert_string_equal(lamp_model_param_at(m, i)->name, params.r[i].name);
  assert_int_equal(lamp_model_n_buffers(m), buffers.n);
  for (size_t i = 0; i < buffers.n; i++) assert_string_equal(lamp_model_buffer_at(m, i)->name, buffers.r[i].name);
  lamp_model_free(m);
  unload(&params);
  unload(&buffers);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_match_torch),
      cmocka_unit_test(test_fp32_matches_torch),
      cmocka_unit_test(test_bf16_matches_torch_autocast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
