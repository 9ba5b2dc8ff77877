/*
** The CUDA steps' per-thread code on the host: lamp_sgd_thread and lamp_adam_thread
** (plugins/optim/{sgd,adam}_update.h) are what the kernels run for each (block, thread); run here
** for every block and thread of the launch the CUDA step would make, over segments that start
** and end inside chunks, empty ones, and a slab ending mid-chunk, they must give the CPU step's
** parameters, state and 16-bit weights bit for bit. What the GPU adds (its arithmetic, built with
** --fmad=false) is compared by build/tests/gpu/optim_bitwise where a GPU is.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

#include "../../plugins/optim/adam_update.h"
#include "../../plugins/optim/sgd_update.h"

/* Three chunks and a bit; segments crossing chunk and thread boundaries, two empty. */
#define N (3 * LAMP_OPTIM_CHUNK + 777)
static const lamp_optim_segment segments[] = {
    {0, 1000, 1.0f, 1.0f},    {1000, 0, 3.0f, 0.0f},    {1000, 1, 0.5f, 0.0f},
    {1001, 3000, 2.0f, 1.0f}, {4001, 2, 1.0f, 0.5f},    {4003, 0, 1.0f, 1.0f},
    {4003, N - 4003, 0.25f, 1.0f},
};
#define N_SEGMENTS (sizeof segments / sizeof segments[0])

typedef struct slabs {
  float p[N], g[N], slot[3][N];
  uint16_t out[N];
} slabs;

static void fill(slabs *s, uint32_t seed) {
  uint32_t r = seed;
  for (size_t i = 0; i < N; i++) {
    r = r * 1664525u + 1013904223u;
    s->p[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 4.0f;
    r = r * 1664525u + 1013904223u;
    s->g[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
  }
  memset(s->slot, 0, sizeof s->slot);
  memset(s->out, 0, sizeof s->out);
}

static size_t grid(void) { return (N + LAMP_OPTIM_CHUNK - 1) / LAMP_OPTIM_CHUNK; }

/* One step through the plugin's CPU path. */
static void cpu_step(lamp_optim *o, slabs *s, uint64_t t, double lr, double grad_scale,
                     lamp_dtype out) {
  float *slots[3] = {s->slot[0], s->slot[1], s->slot[2]};
  lamp_optim_step st = {.device = LAMP_CPU, .n = N, .params = s->p, .grads = s->g,
                        .slots = slots, .segments = segments, .n_segments = N_SEGMENTS,
                        .step = t, .lr = lr, .grad_scale = grad_scale,
                        .weights_out = s->out, .weights_out_dtype = out};
  assert_int_equal(lamp_optim_apply(o, &st), LAMP_OK);
}

static void assert_same(const slabs *a, const slabs *b, const char *what, uint64_t t) {
  if (memcmp(a, b, sizeof *a) == 0) return;
  for (size_t i = 0; i < N; i++)
    if (memcmp(&a->p[i], &b->p[i], sizeof a->p[i]) != 0 || a->out[i] != b->out[i])
      fail_msg("%s step %llu: element %zu differs (params %a vs %a)", what, (unsigned long long)t, i,
               (double)a->p[i], (double)b->p[i]);
  fail_msg("%s step %llu: the state slots differ", what, (unsigned long long)t);
}

static void test_sgd_threads_match_cpu_step(void **state) {
  (void)state;
  static const struct {
    double momentum, dampening, nesterov, weight_decay;
  } cases[] = {{0, 0, 0, 0}, {0.9, 0, 0, 1e-2}, {0.9, 0, 1, 5e-4}, {0.8, 0.3, 0, 0}};
  static slabs cpu, dev;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const lamp_option opts[] = {{"momentum", cases[c].momentum},
                                {"dampening", cases[c].dampening},
                                {"nesterov", cases[c].nesterov},
                                {"weight_decay", cases[c].weight_decay}};
    lamp_optim *o = NULL;
    assert_int_equal(lamp_optim_open(&o, "sgd", opts, 4), LAMP_OK);
    fill(&cpu, 7 + (uint32_t)c);
    fill(&dev, 7 + (uint32_t)c);
    for (uint64_t t = 1; t <= 3; t++) {
      const double lr = 0.1 / (double)t, grad_scale = 1.0 / (double)(t + 1);
      const lamp_dtype out = t == 2 ? LAMP_BF16 : LAMP_F16;
      cpu_step(o, &cpu, t, lr, grad_scale, out);
      const float momentum = (float)cases[c].momentum;
      const lamp_sgd_scalars s = {.lr = lr, .grad_scale = grad_scale,
                                  .weight_decay = cases[c].weight_decay, .momentum = momentum,
                                  .damp_keep = (float)(1.0 - cases[c].dampening)};
      const unsigned flags = lamp_sgd_step_flags(momentum, cases[c].nesterov == 1.0, t);
      const lamp_sgd_slabs a = {.p = dev.p, .grad = dev.g,
                                .buf = (flags & LAMP_SGD_MOMENTUM) ? dev.slot[0] : NULL,
                                .out = dev.out, .out_bf16 = out == LAMP_BF16, .n = N,
                                .seg = segments, .n_seg = N_SEGMENTS};
      for (size_t b = 0; b < grid(); b++)
        for (size_t th = 0; th < LAMP_OPTIM_THREADS; th++) lamp_sgd_thread(&a, &s, flags, b, th);
      assert_same(&dev, &cpu, "sgd", t);
    }
    lamp_optim_close(o);
  }
}

static void run_adam(const char *name, int adamw, double weight_decay, int amsgrad,
                     uint64_t first_step) {
  static slabs cpu, dev;
  const lamp_option opts[] = {{"weight_decay", weight_decay}, {"amsgrad", amsgrad},
                              {"beta2", 0.99}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, name, opts, 3), LAMP_OK);
  fill(&cpu, 99);
  fill(&dev, 99);
  for (uint64_t t = first_step; t < first_step + 3; t++) {
    const double lr = 1e-3 * (double)(t % 5 + 1), grad_scale = 0.5;
    const lamp_dtype out = t % 2 ? LAMP_BF16 : LAMP_F16;
    cpu_step(o, &cpu, t, lr, grad_scale, out);
    const lamp_adam_scalars s =
        lamp_adam_step_scalars(0.9, 0.99, 1e-8, weight_decay, adamw, t, lr, grad_scale);
    const unsigned flags = lamp_adam_step_flags(&s, amsgrad);
    const lamp_adam_slabs a = {.p = dev.p, .grad = dev.g, .m = dev.slot[0], .v = dev.slot[1],
                               .vmax = amsgrad ? dev.slot[2] : NULL, .out = dev.out,
                               .out_bf16 = out == LAMP_BF16, .n = N, .seg = segments,
                               .n_seg = N_SEGMENTS};
    for (size_t b = 0; b < grid(); b++)
      for (size_t th = 0; th < LAMP_OPTIM_THREADS; th++)
        lamp_adam_thread(&a, &s, flags, b, th, adamw);
    assert_same(&dev, &cpu, name, t);
  }
  lamp_optim_close(o);
}

static void test_adam_threads_match_cpu_step(void **state) {
  (void)state;
  for (int amsgrad = 0; amsgrad <= 1; amsgrad++) {
    run_adam("adam", 0, 0.0, amsgrad, 1);
    run_adam("adam", 0, 0.05, amsgrad, 1);
    run_adam("adamw", 1, 0.1, amsgrad, 1);
    run_adam("adamw", 1, 0.1, amsgrad, 100000); /* bias correction 1 in fp32: UNIT_BC2 */
  }
}

/* The segment search the threads start with, on the edges. */
static void test_find_segment(void **state) {
  (void)state;
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 0), 0);
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 999), 0);
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 1000), 2); /* past the empty 1 */
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 1001), 3);
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 4002), 4);
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, 4003), 6); /* past the empty 5 */
  assert_int_equal(lamp_optim_find_segment(segments, N_SEGMENTS, N - 1), 6);
  assert_int_equal(lamp_optim_chunk_end(grid() - 1, N), N);
  assert_int_equal(lamp_optim_chunk_end(0, N), LAMP_OPTIM_CHUNK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_find_segment),
      cmocka_unit_test(test_sgd_threads_match_cpu_step),
      cmocka_unit_test(test_adam_threads_match_cpu_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
