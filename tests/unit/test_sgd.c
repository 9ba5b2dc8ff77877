/*
** sgd.so through the loader and the instance API, against hand-computed torch.optim.SGD steps;
** then the fp32 and single plugins' behaviour through the same API.
**
** Three steps on p0 = [1, -2, 0.5, 0.25] with gradients
**     g1 = [0.1, -0.2, 0.3, 0.4], g2 = [0.05, 0.1, -0.3, 0.2], g3 = [-0.1, 0.2, 0.1, -0.4]
** and lr 0.1. For example with momentum 0.9, element 0:
**     buf = 0.1                -> p = 1 - 0.01 = 0.99
**     buf = 0.09 + 0.05 = 0.14 -> p = 0.99 - 0.014 = 0.976
**     buf = 0.126 - 0.1 = 0.026 -> p = 0.976 - 0.0026 = 0.9734
** and with Nesterov the applied gradient is g + 0.9 * buf: 0.19, 0.176, -0.0766 -> 0.97106.
** The other expected values were worked out the same way in fp32.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

#include "optim_cuda_expect.h"

#define N 4

static const float p0[N] = {1.0f, -2.0f, 0.5f, 0.25f};
static const float grads[3][N] = {
    {0.1f, -0.2f, 0.3f, 0.4f}, {0.05f, 0.1f, -0.3f, 0.2f}, {-0.1f, 0.2f, 0.1f, -0.4f}};

typedef struct run {
  float p[N];
  float buf[N];
  uint32_t n_slots;
} run;

static void assert_close(const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-6 * fmax(1.0, fabs(want[i]));
    if (fabs((double)got[i] - want[i]) > tol)
      fail_msg("element %zu: got %.9g, want %.9g", i, (double)got[i], (double)want[i]);
  }
}

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

/* Opens sgd with opts and takes three steps over `segments`. */
static run three_steps(const lamp_option *opts, size_t n_opts, const lamp_optim_segment *segments,
                       size_t n_segments, double grad_scale, float grad_mult) {
  run r;
  memcpy(r.p, p0, sizeof r.p);
  memset(r.buf, 0, sizeof r.buf);
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "sgd", opts, n_opts), LAMP_OK);
  lamp_optim_slot slots[4];
  assert_int_equal(lamp_optim_slots(o, slots, 4, &r.n_slots), LAMP_OK);
  float *slot_ptrs[1] = {r.buf};
  for (uint64_t k = 0; k < 3; k++) {
    float g[N];
    for (size_t i = 0; i < N; i++) g[i] = grads[k][i] * grad_mult;
    lamp_optim_step step = {.device = LAMP_CPU,
                            .n = N,
                            .params = r.p,
                            .grads = g,
                            .slots = slot_ptrs,
                            .segments = segments,
                            .n_segments = n_segments,
                            .step = k + 1,
                            .lr = 0.1,
                            .grad_scale = grad_scale};
    assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
  }
  lamp_optim_close(o);
  return r;
}

static const lamp_optim_segment whole[] = {{0, N, 1.0f, 1.0f}};

static run simple(const lamp_option *opts, size_t n_opts) {
  return three_steps(opts, n_opts, whole, 1, 1.0, 1.0f);
}

/* ---- sgd ------------------------------------------------------------------------------------- */

static void test_plain(void **state) {
  (void)state;
  run r = simple(NULL, 0);
  const float want[N] = {0.995000005f, -2.00999999f, 0.49000001f, 0.230000004f};
  assert_close(r.p, want, N);
  assert_int_equal(r.n_slots, 0);
}

static void test_momentum(void **state) {
  (void)state;
  const lamp_option opts[] = {{"momentum", 0.9}};
  run r = simple(opts, 1);
  const float want[N] = {0.973399997f, -1.98479998f, 0.465700001f, 0.143599987f};
  const float buf[N] = {0.0260000005f, 0.128000021f, 0.0729999989f, 0.104000002f};
  assert_close(r.p, want, N);
  assert_close(r.buf, buf, N);
  assert_int_equal(r.n_slots, 1);
}

static void test_dampening(void **state) {
  (void)state;
  const lamp_option opts[] = {{"momentum", 0.9}, {"dampening", 0.5}};
  run r = simple(opts, 2);
  const float want[N] = {0.973150015f, -1.96529996f, 0.442200005f, 0.1426f};
  const float buf[N] = {0.0534999929f, -0.0169999897f, 0.158000007f, 0.213999972f};
  assert_close(r.p, want, N);
  assert_close(r.buf, buf, N);
}

static void test_nesterov(void **state) {
  (void)state;
  const lamp_option opts[] = {{"momentum", 0.9}, {"nesterov", 1}};
  run r = simple(opts, 2);
  const float want[N] = {0.971059978f, -1.99632001f, 0.459129989f, 0.134240001f};
  const float buf[N] = {0.0260000005f, 0.128000021f, 0.0729999989f, 0.104000002f};
  assert_close(r.p, want, N);
  assert_close(r.buf, buf, N);
}

static void test_weight_decay(void **state) {
  (void)state;
  const lamp_option opts[] = {{"weight_decay", 0.01}};
  run r = simple(opts, 1);
  const float want[N] = {0.992027998f, -2.00403595f, 0.48853147f, 0.229350716f};
  assert_close(r.p, want, N);

  const lamp_option opts2[] = {{"weight_decay", 0.1}, {"momentum", 0.9}};
  r = simple(opts2, 2);
  const float want2[N] = {0.918208003f, -1.87421596f, 0.438726485f, 0.131410733f};
  const float buf2[N] = {0.289919972f, -0.401840001f, 0.201235011f, 0.157642484f};
  assert_close(r.p, want2, N);
  assert_close(r.buf, buf2, N);
}

/* Two parameter groups: the second at half the learning rate and without decay (a bias). */
static void test_segments(void **state) {
  (void)state;
  const lamp_option opts[] = {{"weight_decay", 0.1}, {"momentum", 0.9}};
  const lamp_optim_segment segs[] = {{0, 2, 1.0f, 1.0f}, {2, 2, 0.5f, 0.0f}};
  run r = three_steps(opts, 2, segs, 2, 1.0, 1.0f);
  const float want[N] = {0.918208003f, -1.87421596f, 0.482850015f, 0.196800008f};
  const float buf[N] = {0.289919972f, -0.401840001f, 0.0729999989f, 0.104000002f};
  assert_close(r.p, want, N);
  assert_close(r.buf, buf, N);
}

/* Gradients of a loss scaled by 1024 with grad_scale 1/1024: the plain result exactly. */
static void test_grad_scale(void **state) {
  (void)state;
  run r = three_steps(NULL, 0, whole, 1, 1.0 / 1024, 1024.0f);
  const float want[N] = {0.995000005f, -2.00999999f, 0.49000001f, 0.230000004f};
  assert_memory_equal(r.p, want, sizeof want);
}

/* The reference formulas, one element at a time, for the long-slab check below. */
static void reference_step(float *p, const float *grad, float *buf, size_t n, uint64_t step,
                           float lr, float gs, float wd, float m, float damp, int nesterov) {
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * gs;
    if (wd != 0.0f) g += wd * p[i];
    if (m != 0.0f) {
      buf[i] = step == 1 ? g : m * buf[i] + (1.0f - damp) * g;
      g = nesterov ? g + m * buf[i] : buf[i];
    }
    p[i] -= lr * g;
  }
}

/* Slabs longer than the kernel's blocks, with segment boundaries inside blocks. */
static void test_long_slabs_match_reference(void **state) {
  (void)state;
  enum { LEN = 37 };
  const lamp_option opts[] = {{"momentum", 0.8}, {"weight_decay", 0.05}, {"nesterov", 1}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "sgd", opts, 3), LAMP_OK);
  float p[LEN], want[LEN], g[LEN], buf[LEN] = {0}, ref_buf[LEN] = {0};
  for (size_t i = 0; i < LEN; i++) p[i] = want[i] = 0.1f * (float)i - 1.0f;
  float *slots[1] = {buf};
  const lamp_optim_segment segs[] = {
      {0, 11, 1.0f, 1.0f}, {11, 20, 0.5f, 0.0f}, {31, 6, 2.0f, 1.0f}};
  for (uint64_t k = 1; k <= 3; k++) {
    for (size_t i = 0; i < LEN; i++) g[i] = 0.01f * (float)((i * 7 + k * 3) % 11) - 0.05f;
    lamp_optim_step step = {.device = LAMP_CPU,
                            .n = LEN,
                            .params = p,
                            .grads = g,
                            .slots = slots,
                            .segments = segs,
                            .n_segments = 3,
                            .step = k,
                            .lr = 0.05,
                            .grad_scale = 0.5};
    assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
    for (size_t s = 0; s < 3; s++)
      reference_step(want + segs[s].offset, g + segs[s].offset, ref_buf + segs[s].offset,
                     segs[s].count, k, 0.05f * segs[s].lr_mult, 0.5f, 0.05f * segs[s].decay_mult,
                     0.8f, 0.0f, 1);
  }
  assert_close(p, want, LEN);
  assert_close(buf, ref_buf, LEN);
  lamp_optim_close(o);
}

static void test_slots_and_hparams(void **state) {
  (void)state;
  const lamp_option opts[] = {{"momentum", 0.5}, {"lr", 0.25}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "sgd", opts, 2), LAMP_OK);
  lamp_optim_slot slots[2];
  uint32_t n = 0;
  assert_int_equal(lamp_optim_slots(o, slots, 2, &n), LAMP_OK);
  assert_int_equal(n, 1);
  assert_string_equal(slots[0].name, "momentum_buffer");
  assert_int_equal(slots[0].dtype, LAMP_F32);
  double v = 0;
  assert_int_equal(lamp_optim_hparam(o, "lr", &v), 0);
  assert_true(v == 0.25);
  assert_int_equal(lamp_optim_hparam(o, "weight_decay", &v), 0);
  assert_true(v == 0.0);
  assert_int_equal(lamp_optim_hparam(o, "beta1", &v), -1);
  assert_string_equal(lamp_optim_handle(o)->desc->name, "sgd");
  lamp_optim_close(o);
}

static void test_create_refusals(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  const lamp_option nesterov_only[] = {{"nesterov", 1}};
  assert_error(lamp_optim_open(&o, "sgd", nesterov_only, 1), LAMP_ERR_INVALID_ARG,
               "sgd: nesterov requires momentum > 0 and dampening 0, got momentum 0 and "
               "dampening 0");
  const lamp_option nesterov_damp[] = {{"nesterov", 1}, {"momentum", 0.9}, {"dampening", 0.1}};
  assert_error(lamp_optim_open(&o, "sgd", nesterov_damp, 3), LAMP_ERR_INVALID_ARG,
               "sgd: nesterov requires momentum > 0 and dampening 0, got momentum 0.9 and "
               "dampening 0.1");
  const lamp_option half[] = {{"nesterov", 0.5}};
  assert_error(lamp_optim_open(&o, "sgd", half, 1), LAMP_ERR_INVALID_ARG,
               "sgd: nesterov must be 0 or 1, got 0.5");
  const lamp_option one[] = {{"momentum", 1}};
  assert_error(lamp_optim_open(&o, "sgd", one, 1), LAMP_ERR_INVALID_ARG,
               "sgd: momentum must be below 1, got 1");
  assert_null(o);
}

static void test_step_checks(void **state) {
  (void)state;
  const lamp_option opts[] = {{"momentum", 0.9}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "sgd", opts, 1), LAMP_OK);
  float p[N] = {0}, g[N] = {0}, buf[N] = {0};
  float *slots[1] = {buf};
  const lamp_optim_segment gap[] = {{0, 2, 1, 1}, {3, 1, 1, 1}};
  lamp_optim_step step = {.device = LAMP_CPU,
                          .n = N,
                          .params = p,
                          .grads = g,
                          .slots = slots,
                          .segments = gap,
                          .n_segments = 2,
                          .step = 1,
                          .lr = 0.1,
                          .grad_scale = 1};
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "sgd: step segment 1 starts at 3, expected 2");
  const lamp_optim_segment short_[] = {{0, 3, 1, 1}};
  step.segments = short_;
  step.n_segments = 1;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "sgd: step segments cover 3 of 4 elements");
  step.segments = whole;
  step.step = 0;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "sgd: step counter is 0; the first step is 1");
  step.step = 1;
  step.slots = NULL;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "sgd: momentum_buffer slot is missing");
  step.slots = slots;
  assert_cuda_step_refused(o, &step, "sgd");
  step.device = LAMP_CPU;
  assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
  lamp_optim_close(o);
}

/* ---- fp32 and single ------------------------------------------------------------------------- */

static void test_fp32_policy(void **state) {
  (void)state;
  lamp_precision *p = NULL;
  assert_int_equal(lamp_precision_open(&p, "fp32", NULL, 0), LAMP_OK);
  lamp_precision_policy pol;
  assert_int_equal(lamp_precision_policy_get(p, &pol), LAMP_OK);
  assert_int_equal(pol.struct_size, sizeof pol);
  assert_int_equal(pol.weight_dtype, LAMP_F32);
  assert_int_equal(pol.compute_dtype, LAMP_F32);
  assert_int_equal(pol.activation_dtype, LAMP_F32);
  assert_int_equal(pol.grad_dtype, LAMP_F32);
  assert_int_equal(pol.accum_dtype, LAMP_F32);
  assert_int_equal(pol.flags, 0);
  assert_true(lamp_precision_loss_scale(p) == 1.0);
  int skip = 1;
  assert_int_equal(lamp_precision_update(p, 0, &skip), LAMP_OK);
  assert_int_equal(skip, 0);
  assert_int_equal(lamp_precision_update(p, 1, &skip), LAMP_OK); /* never skips */
  assert_int_equal(skip, 0);
  lamp_scaler_stats stats;
  assert_int_equal(lamp_precision_stats(p, &stats), LAMP_OK);
  assert_true(stats.scale == 1.0);
  assert_int_equal(stats.skipped_steps, 0);
  size_t size = 7;
  assert_int_equal(lamp_precision_save_state(p, NULL, &size), LAMP_OK);
  assert_int_equal(size, 0);
  assert_string_equal(lamp_precision_handle(p)->desc->name, "fp32");
  lamp_precision_close(p);

  const lamp_option opt = {"scale", 2};
  assert_error(lamp_precision_open(&p, "fp32", &opt, 1), LAMP_ERR_INVALID_ARG,
               "fp32: unknown option 'scale'; this plugin takes no options");
}

static void test_single_collectives(void **state) {
  (void)state;
  lamp_comm *c = NULL;
  assert_int_equal(lamp_comm_open(&c, "single", NULL, 0), LAMP_OK);
  assert_int_equal(lamp_comm_rank(c), 0);
  assert_int_equal(lamp_comm_size(c), 1);
  float x[3] = {1, 2, 3};
  assert_int_equal(lamp_comm_all_reduce(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU), LAMP_OK);
  assert_int_equal(lamp_comm_broadcast(c, x, 3, LAMP_F32, 0, LAMP_CPU), LAMP_OK);
  assert_int_equal(lamp_comm_barrier(c), LAMP_OK);
  assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);

  assert_error(lamp_comm_broadcast(c, x, 3, LAMP_F32, 1, LAMP_CPU), LAMP_ERR_INVALID_ARG,
               "single: broadcast: root 1 out of range for 1 rank");
  assert_error(lamp_comm_all_reduce(c, NULL, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU),
               LAMP_ERR_INVALID_ARG, "single: all_reduce: NULL buffer for 4 elements");
  assert_error(lamp_comm_all_reduce(c, x, 3, LAMP_F32, (lamp_reduce_op)9, LAMP_CPU),
               LAMP_ERR_INVALID_ARG, "single: all_reduce: unknown reduce op 9");
  assert_error(lamp_comm_all_reduce(c, x, 3, (lamp_dtype)42, LAMP_REDUCE_SUM, LAMP_CPU),
               LAMP_ERR_INVALID_ARG, "single: all_reduce: unknown dtype 42");
  /* The previous message does not leak into a later success. */
  assert_int_equal(lamp_comm_all_reduce(c, NULL, 0, LAMP_F32, LAMP_REDUCE_MAX, LAMP_CPU), LAMP_OK);

  assert_true(lamp_comm_supports(c, "all_reduce_start"));
  assert_true(lamp_comm_supports(c, "all_gather"));
  assert_false(lamp_comm_supports(c, "alltoall"));
  lamp_request *req = NULL;
  assert_int_equal(lamp_comm_all_reduce_start(c, x, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU, &req),
                   LAMP_OK);
  assert_int_equal(lamp_comm_wait(c, req), LAMP_OK);
  float y[3] = {0};
  assert_int_equal(lamp_comm_all_gather(c, x, y, 3, LAMP_F32, LAMP_CPU), LAMP_OK);
  assert_memory_equal(x, y, sizeof x);
  lamp_comm_close(c);
}

static void test_single_timeout_option(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_COMM, "single", &h), LAMP_OK);
  assert_int_equal(h->desc->n_params, 1);
  double v = 0;
  assert_int_equal(lamp_params_resolve(h->desc, NULL, 0, &v), LAMP_OK);
  assert_true(v == 1800.0);
  lamp_comm *c = NULL;
  const lamp_option zero = {"timeout", 0};
  assert_error(lamp_comm_open(&c, "single", &zero, 1), LAMP_ERR_INVALID_ARG,
               "single: option 'timeout' must be in [1, 604800], got 0");
  const lamp_option minute = {"timeout", 60};
  assert_int_equal(lamp_comm_open(&c, "single", &minute, 1), LAMP_OK);
  lamp_comm_close(c);
}

int main(void) {
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain),
      cmocka_unit_test(test_momentum),
      cmocka_unit_test(test_dampening),
      cmocka_unit_test(test_nesterov),
      cmocka_unit_test(test_weight_decay),
      cmocka_unit_test(test_segments),
      cmocka_unit_test(test_grad_scale),
      cmocka_unit_test(test_long_slabs_match_reference),
      cmocka_unit_test(test_slots_and_hparams),
      cmocka_unit_test(test_create_refusals),
      cmocka_unit_test(test_step_checks),
      cmocka_unit_test(test_fp32_policy),
      cmocka_unit_test(test_single_collectives),
      cmocka_unit_test(test_single_timeout_option),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
