/*
** The fused 16-bit weight refresh (ABI 1.2, lamp_optim_step.weights_out): the rounding the
** optimizer headers share with the device (plugins/optim/optim_kernel.h) against the core's
** conversions, the CPU steps of sgd, adam and adamw writing weights_out (the same parameters as
** without it, and exactly the core's conversion of them), which plugins the core asks for it
** (LAMP_OPTIM_CAP_WEIGHTS_OUT, never a plugin built before 1.2), and the refusals.
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
#include "tensor/half.h"

#include "../../plugins/optim/optim_kernel.h"
#include "../../plugins/optim/optim_step.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/*
** Every pattern of the top 16 bits (sign, exponent, the mantissa bits both formats keep and
** some they drop) with low halves at and around every rounding boundary: the ties, one either
** side, and the NaN payloads.
*/
static void test_rounding_matches_core(void **state) {
  (void)state;
  static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000,
                                  0x2001, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff,
                                  0x5a5a, 0xa5a5};
  for (uint32_t hi = 0; hi <= 0xffffu; hi++) {
    for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
      const float x = bits_float(hi << 16 | lows[k]);
      if (lamp_optim_to_f16(x) != lamp_f32_to_f16(x))
        fail_msg("f16 of 0x%08x: 0x%04x, core 0x%04x", (unsigned)(hi << 16 | lows[k]),
                 lamp_optim_to_f16(x), lamp_f32_to_f16(x));
      if (lamp_optim_to_bf16(x) != lamp_f32_to_bf16(x))
        fail_msg("bf16 of 0x%08x: 0x%04x, core 0x%04x", (unsigned)(hi << 16 | lows[k]),
                 lamp_optim_to_bf16(x), lamp_f32_to_bf16(x));
    }
  }
}

/*
** The CPU step's vectorised rounding (optim_step.h: VCVTNEPS2BF16, AVX2 or F16C where the CPU has
** them) on the same patterns, laid out 5 elements off the 16-element blocks, so that blocks mix
** subnormals with normal numbers: every element must be the core's scalar rounding.
*/
static void test_cpu_rounding_matches_core(void **state) {
  (void)state;
  static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff, 0x5a5a};
  enum { LOWS = sizeof lows / sizeof lows[0], SKEW = 5, COUNT = 65536 * LOWS + SKEW };
  float *x = malloc(COUNT * sizeof *x);
  uint16_t *out = malloc(COUNT * sizeof *out);
  assert_non_null(x);
  assert_non_null(out);
  for (size_t i = 0; i < SKEW; i++) x[i] = 1.0f;
  for (uint32_t hi = 0; hi <= 0xffffu; hi++)
    for (size_t k = 0; k < LOWS; k++) x[SKEW + hi * LOWS + k] = bits_float(hi << 16 | lows[k]);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    lamp_optim_cpu_round_out(out, x, COUNT, bf16);
    for (size_t i = 0; i < COUNT; i++) {
      uint16_t want = bf16 ? lamp_f32_to_bf16(x[i]) : lamp_f32_to_f16(x[i]);
      if (out[i] != want)
        fail_msg("%s of 0x%08x (element %zu): 0x%04x, core 0x%04x", bf16 ? "bf16" : "f16",
                 (unsigned)lamp_optim_float_bits(x[i]), i, out[i], want);
    }
  }
  free(x);
  free(out);
}

static void test_caps(void **state) {
  (void)state;
  static const char *const built_in[] = {"sgd", "adam", "adamw"};
  for (size_t i = 0; i < 3; i++) {
    lamp_optim *o = NULL;
    assert_int_equal(lamp_optim_open(&o, built_in[i], NULL, 0), LAMP_OK);
    assert_int_equal(lamp_optim_caps(o), LAMP_OPTIM_CAP_WEIGHTS_OUT | LAMP_OPTIM_CAP_PIECEWISE);
    lamp_optim_close(o);
  }
  /* Built against 1.1: the word after its table is not its caps. */
  lamp_optim *old = NULL;
  assert_int_equal(lamp_optim_open(&old, BAD("optim11"), NULL, 0), LAMP_OK);
  assert_int_equal(lamp_optim_caps(old), 0);
  lamp_optim_close(old);
  /* Built against 1.2 without the cap. */
  lamp_optim *fake = NULL;
  assert_int_equal(lamp_optim_open(&fake, BAD("devcpu"), NULL, 0), LAMP_OK);
  assert_int_equal(lamp_optim_caps(fake), 0);
  lamp_optim_close(fake);
}

/* Longer than the CPU step's chunk, odd, in segments of their own multipliers. */
#define N 5003
static const lamp_optim_segment segments[] = {
    {0, 2500, 1.0f, 1.0f}, {2500, 3, 0.5f, 0.0f}, {2503, 2500, 2.0f, 1.0f}};

typedef struct slabs {
  float params[N], grads[N], slot[LAMP_OPTIM_MAX_SLOTS][N];
  float *slot_ptr[LAMP_OPTIM_MAX_SLOTS];
  uint16_t out[N];
} slabs;

static void fill(slabs *s) {
  uint32_t r = 12345;
  for (size_t i = 0; i < N; i++) {
    r = r * 1664525u + 1013904223u;
    s->params[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 4.0f;
    r = r * 1664525u + 1013904223u;
    s->grads[i] = ((float)(r >> 8) / 16777216.0f - 0.5f);
  }
  memset(s->slot, 0, sizeof s->slot);
  for (size_t k = 0; k < LAMP_OPTIM_MAX_SLOTS; k++) s->slot_ptr[k] = s->slot[k];
  memset(s->out, 0xff, sizeof s->out);
}

/* Three steps, writing weights_out in `dtype` (F32: none). */
static void three_steps(const char *name, const lamp_option *opts, size_t n_opts, slabs *s,
                        lamp_dtype dtype) {
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, name, opts, n_opts), LAMP_OK);
  fill(s);
  for (uint64_t t = 1; t <= 3; t++) {
    lamp_optim_step step = {.device = LAMP_CPU, .n = N, .params = s->params, .grads = s->grads,
                            .slots = s->slot_ptr, .segments = segments, .n_segments = 3,
                            .step = t, .lr = 0.05 / (double)t, .grad_scale = 0.5};
    if (dtype != LAMP_F32) {
      step.weights_out = s->out;
      step.weights_out_dtype = dtype;
    }
    assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
  }
  lamp_optim_close(o);
}

static void test_cpu_steps_write_the_core_rounding(void **state) {
  (void)state;
  static const struct {
    const char *name;
    lamp_option opts[3];
    size_t n_opts;
  } cases[] = {
      {"sgd", {{"momentum", 0.9}, {"weight_decay", 0.01}}, 2},
      {"sgd", {{"momentum", 0.9}, {"nesterov", 1}}, 2},
      {"adam", {{"weight_decay", 0.01}, {"amsgrad", 1}}, 2},
      {"adamw", {{"weight_decay", 0.1}}, 1},
  };
  static slabs plain, fused;
  static uint16_t want[N];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    three_steps(cases[c].name, cases[c].opts, cases[c].n_opts, &plain, LAMP_F32);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
      three_steps(cases[c].name, cases[c].opts, cases[c].n_opts, &fused, bf16 ? LAMP_BF16 : LAMP_F16);
      assert_memory_equal(fused.params, plain.params, sizeof plain.params);
      assert_memory_equal(fused.slot, plain.slot, sizeof plain.slot);
      if (bf16)
        lamp_f32_to_bf16_n(want, plain.params, N);
      else
        lamp_f32_to_f16_n(want, plain.params, N);
      assert_memory_equal(fused.out, want, sizeof want);
    }
  }
}

static void test_refusals(void **state) {
  (void)state;
  static slabs s;
  fill(&s);
  lamp_optim_step step = {.device = LAMP_CPU, .n = N, .params = s.params, .grads = s.grads,
                          .slots = s.slot_ptr, .segments = segments, .n_segments = 3, .step = 1,
                          .lr = 0.1, .grad_scale = 1.0, .weights_out = s.out,
                          .weights_out_dtype = LAMP_F32};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "sgd", NULL, 0), LAMP_OK);
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INTERNAL,
               "sgd: step weights_out dtype must be f16 or bf16, got 0");
  lamp_optim_close(o);

  lamp_optim *old = NULL;
  assert_int_equal(lamp_optim_open(&old, BAD("optim11"), NULL, 0), LAMP_OK);
  step.weights_out_dtype = LAMP_BF16;
  assert_error(lamp_optim_apply(old, &step), LAMP_ERR_INTERNAL,
               "optim11: step given weights_out, but the plugin does not write it (no "
               "LAMP_OPTIM_CAP_WEIGHTS_OUT)");
  step.weights_out = NULL; /* as the trainer calls it: the 1.1 plugin just steps */
  assert_int_equal(lamp_optim_apply(old, &step), LAMP_OK);
  lamp_optim_close(old);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rounding_matches_core),
      cmocka_unit_test(test_cpu_rounding_matches_core),
      cmocka_unit_test(test_caps),
      cmocka_unit_test(test_cpu_steps_write_the_core_rounding),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
