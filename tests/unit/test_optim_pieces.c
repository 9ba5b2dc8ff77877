/*
** A LAMP_OPTIM_CAP_PIECEWISE optimizer's step on the CPU is cut into one piece per host thread
** (core/plugin/optim_pieces.c): tests/bad_plugins/piecelog.c shows the cut it was handed (each
** piece's size, where it starts, its segments and weights_out), a failing piece's message comes
** back as the plugin's, and sgd and adamw give the same bits cut as whole.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "base/error.h"
#include "tensor/rng.h"
#include "plugin/instance.h"
#include "plugin/optim_pieces.h"

#define OK(x) assert_int_equal((x), LAMP_OK)
#define PIECELOG LAMP_BAD_PLUGIN_DIR "/piecelog.so"

/* The host's threads, as lamp_cpu_threads reads them (OpenBLAS's count). */
static void use_threads(int n) {
  openblas_set_num_threads(n);
  if (lamp_host_threads() != (size_t)n) skip();
}

/* Three segments over n elements: lr_mult 1, 2, 3, the second decaying at half the rate. */
typedef struct slabs {
  size_t n;
  float *params, *grads, *slot[3];
  uint16_t *out;
  lamp_optim_segment seg[3];
  int64_t shape[3];
  lamp_optim_tensor tensors[3];
} slabs;

static void slabs_new(slabs *s, size_t n, size_t cut1, size_t cut2, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->params = calloc(n, sizeof(float));
  s->grads = calloc(n, sizeof(float));
  for (int i = 0; i < 3; i++) s->slot[i] = calloc(n, sizeof(float));
  s->out = calloc(n, sizeof(uint16_t));
  assert_true(s->params && s->grads && s->slot[0] && s->slot[1] && s->slot[2] && s->out);
  s->seg[0] = (lamp_optim_segment){0, cut1, 1.0f, 1.0f};
  s->seg[1] = (lamp_optim_segment){cut1, cut2 - cut1, 2.0f, 0.5f};
  s->seg[2] = (lamp_optim_segment){cut2, n - cut2, 3.0f, 0.0f};
  static const char *names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    s->shape[i] = (int64_t)s->seg[i].count;
    s->tensors[i] = (lamp_optim_tensor){names[i], 1, &s->shape[i], s->seg[i].offset, s->seg[i].count, (size_t)i};
  }
  lamp_rng g;
  lamp_rng_seed(&g, seed);
  for (size_t j = 0; j < n; j++) {
    s->params[j] = (float)(lamp_rng_uniform(&g) * 2.0 - 1.0);
    s->grads[j] = (float)(lamp_rng_uniform(&g) * 2.0 - 1.0);
  }
}

static void slabs_free(slabs *s) {
  free(s->params);
  free(s->grads);
  for (int i = 0; i < 3; i++) free(s->slot[i]);
  free(s->out);
}

static lamp_status apply(lamp_optim *o, slabs *s, uint64_t k, double lr, int with_out) {
  lamp_optim_step st = {.device = LAMP_CPU, .n = s->n, .params = s->params, .grads = s->grads, .slots = s->slot,
                        .segments = s->seg, .n_segments = 3, .step = k, .lr = lr, .grad_scale = 0.5,
                        .tensors = s->tensors, .n_tensors = 3};
  if (with_out) {
    st.weights_out = s->out;
    st.weights_out_dtype = LAMP_BF16;
  }
  return lamp_optim_apply(o, &st);
}

static lamp_optim *open_piecelog(void) {
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, PIECELOG, NULL, 0));
  assert_true(lamp_optim_caps(o) & LAMP_OPTIM_CAP_PIECEWISE);
  return o;
}

/* Element j saw a step of `size` elements starting at `start`, in its segment `k` of lr_mult m,
   with the tensor table only when the step was whole. */
static void assert_seen(const slabs *s, size_t j, size_t size, size_t start, unsigned k, unsigned m) {
  unsigned code = k + 100 * m + (size == s->n ? 1000 : 0);
  if (s->params[j] != (float)size || s->slot[0][j] != (float)(j - start) || s->out[j] != code)
    fail_msg("element %zu: step of %g elements, index %g, code %u; expected %zu, %zu, %u", j, (double)s->params[j],
             (double)s->slot[0][j], (unsigned)s->out[j], size, j - start, code);
}

/* 2 threads, 49157 elements: pieces [0, 24576) and [24576, 49157) (a multiple of 16 at n/2), each
   with the segments it overlaps renumbered from its start, weights_out at its start, no tensor
   table. */
static void test_cut_on_two_threads(void **state) {
  (void)state;
  use_threads(2);
  assert_int_equal(lamp_optim_piece_count(49157, 2), 2);
  slabs s;
  slabs_new(&s, 49157, 100, 30000, 1);
  lamp_optim *o = open_piecelog();
  OK(apply(o, &s, 1, 0.1, 1));
  for (size_t j = 0; j < s.n; j++) {
    if (j < 100) assert_seen(&s, j, 24576, 0, 0, 1);
    else if (j < 24576) assert_seen(&s, j, 24576, 0, 1, 2);
    else if (j < 30000) assert_seen(&s, j, 24581, 24576, 0, 2);
    else assert_seen(&s, j, 24581, 24576, 1, 3);
  }
  lamp_optim_close(o);
  slabs_free(&s);
}

/* One thread, or a slab too small to pay for a second one: the whole step, its own segments. */
static void test_whole_when_cutting_does_not_pay(void **state) {
  (void)state;
  use_threads(2);
  assert_int_equal(lamp_optim_piece_count(2 * LAMP_OPTIM_PIECE_MIN - 1, 2), 1);
  assert_int_equal(lamp_optim_piece_count(2 * LAMP_OPTIM_PIECE_MIN, 2), 2);
  assert_int_equal(lamp_optim_piece_count(100 * LAMP_OPTIM_PIECE_MIN, 2), 2);
  lamp_optim *o = open_piecelog();
  slabs s;
  slabs_new(&s, 2 * LAMP_OPTIM_PIECE_MIN - 1, 10, 20000, 2);
  OK(apply(o, &s, 1, 0.1, 1));
  for (size_t j = 0; j < s.n; j++) assert_seen(&s, j, s.n, 0, j < 10 ? 0 : j < 20000 ? 1 : 2, j < 10 ? 1 : j < 20000 ? 2 : 3);
  slabs_free(&s);
  use_threads(1);
  slabs_new(&s, 49157, 100, 30000, 3);
  OK(apply(o, &s, 1, 0.1, 1));
  for (size_t j = 0; j < s.n; j++) assert_seen(&s, j, s.n, 0, j < 100 ? 0 : j < 30000 ? 1 : 2, j < 100 ? 1 : j < 30000 ? 2 : 3);
  slabs_free(&s);
  lamp_optim_close(o);
}

/* Every piece fails at once: the message is the plugin's, as for a whole step. */
static void test_failing_pieces(void **state) {
  (void)state;
  use_threads(2);
  lamp_optim *o = open_piecelog();
  slabs s;
  slabs_new(&s, 49157, 100, 30000, 4);
  assert_int_equal(apply(o, &s, 1, -1.0, 0), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "piecelog: lr -1 is negative");
  OK(apply(o, &s, 1, 0.1, 0)); /* and the next step is clean */
  slabs_free(&s);
  lamp_optim_close(o);
}

/* sgd (momentum, nesterov, decay) and adamw (weights_out in bf16), 3 steps: cut on 2 threads the
   same bits as whole on one. */
static void same_bits(const char *name, const lamp_option *opts, size_t n_opts, int with_out) {
  slabs whole, cut;
  const size_t n = 100003;
  slabs_new(&whole, n, 777, 61000, 5);
  slabs_new(&cut, n, 777, 61000, 5);
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, name, opts, n_opts));
  assert_true(lamp_optim_caps(o) & LAMP_OPTIM_CAP_PIECEWISE);
  for (uint64_t k = 1; k <= 3; k++) {
    use_threads(1);
    OK(apply(o, &whole, k, 0.01, with_out));
    use_threads(2);
    OK(apply(o, &cut, k, 0.01, with_out));
  }
  assert_memory_equal(whole.params, cut.params, n * sizeof(float));
  for (int i = 0; i < 3; i++) assert_memory_equal(whole.slot[i], cut.slot[i], n * sizeof(float));
  assert_memory_equal(whole.out, cut.out, n * sizeof(uint16_t));
  slabs start;
  slabs_new(&start, n, 777, 61000, 5);
  assert_true(memcmp(whole.params, start.params, n * sizeof(float)) != 0); /* the steps moved them */
  slabs_free(&start);
  lamp_optim_close(o);
  slabs_free(&whole);
  slabs_free(&cut);
}

static void test_sgd_same_bits(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 0.01}, {"momentum", 0.9}, {"nesterov", 1}, {"weight_decay", 1e-2}};
  same_bits("sgd", opts, 4, 0);
}

static void test_adamw_same_bits(void **state) {
  (void)state;
  const lamp_option opts[] = {{"lr", 0.01}, {"weight_decay", 0.1}, {"amsgrad", 1}};
  same_bits("adamw", opts, 3, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cut_on_two_threads),
      cmocka_unit_test(test_whole_when_cutting_does_not_pay),
      cmocka_unit_test(test_failing_pieces),
      cmocka_unit_test(test_sgd_same_bits),
      cmocka_unit_test(test_adamw_same_bits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
