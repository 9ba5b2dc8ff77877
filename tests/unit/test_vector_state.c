/*
** Every kernel compiled for AVX, AVX2 or AVX-512 must leave the upper halves of the vector
** registers clean (vzeroupper) before it returns or calls out. The rest of lamp is SSE code, and
** behind dirty upper halves SSE runs several times slower: the fp16 loss over 10 classes,
** after a conversion of a 10-element row left them dirty, took 0.65 ms a step instead of 20 us.
** Nothing in the results shows it, so this test reads the state itself: XGETBV with ECX = 1
** returns XINUSE, whose bit 2 (upper YMM halves) and bit 6 (upper ZMM halves) are set while
** those registers hold anything. Each case cleans the state, runs one kernel with a length that
** ends in a scalar tail (and one without), and checks both bits.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "tensor/half.h"

#if defined(__x86_64__)

#define XINUSE_YMM_HI 0x04u /* bit 2: AVX state (upper halves of ymm0-15) */
#define XINUSE_ZMM_HI 0x40u /* bit 6: ZMM_Hi256 (upper halves of zmm0-15) */

static unsigned xinuse(void) {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  (void)hi;
  return lo;
}

static void clean_state(void) { __asm__ volatile("vzeroupper"); }
#else
static unsigned xinuse(void) { return 0; }
static void clean_state(void) {}
#define XINUSE_YMM_HI 0u
#define XINUSE_ZMM_HI 0u
#endif

/* No XGETBV(1) or no AVX: nothing can be left dirty, or nothing can be seen. */
#define REQUIRE_STATE() \
  if (!lamp_cpu_has(LAMP_ISA_XGETBV1)) skip()

/* Asserts the upper halves are clean, naming the kernel when they are not. */
static void check_clean(const char *kernel, size_t n) {
  unsigned dirty = xinuse() & (XINUSE_YMM_HI | XINUSE_ZMM_HI);
  if (dirty != 0) fail_msg("%s (n = %zu) left the upper vector halves dirty (XINUSE bits %#x)", kernel, n, dirty);
}

#define LENGTHS {10, 16, 37, 1003}
#define MAX_N 1003

static float f32_in[MAX_N], f32_out[MAX_N];
static uint16_t u16[MAX_N];

static void fill_inputs(void) {
  for (size_t i = 0; i < MAX_N; i++) {
    f32_in[i] = (float)i * 0.37f - 100.0f;
    u16[i] = (uint16_t)(0x3c00u + (i & 0x3ffu)); /* f16 1.0 ... 2.0; as bf16, small normals */
  }
}

static void conversions_leave_clean_state(void **state) {
  (void)state;
  REQUIRE_STATE();
  fill_inputs();
  const size_t lengths[] = LENGTHS;
  for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
    size_t n = lengths[k];
#define RUN(call, name) \
  clean_state();        \
  call;                 \
  check_clean(name, n);
    RUN(lamp_f32_to_f16_n(u16, f32_in, n), "lamp_f32_to_f16_n")
    RUN(lamp_f16_to_f32_n(f32_out, u16, n), "lamp_f16_to_f32_n")
    RUN(lamp_f32_to_bf16_n(u16, f32_in, n), "lamp_f32_to_bf16_n")
    RUN(lamp_bf16_to_f32_n(f32_out, u16, n), "lamp_bf16_to_f32_n")
    RUN(lamp_round_f16_n(f32_out, f32_in, n), "lamp_round_f16_n")
    RUN(lamp_round_bf16_n(f32_out, f32_in, n), "lamp_round_bf16_n")
    RUN(lamp_add_rounded_f16_n(f32_out, f32_in, n), "lamp_add_rounded_f16_n")
    RUN(lamp_add_rounded_bf16_n(f32_out, f32_in, n), "lamp_add_rounded_bf16_n")
    RUN(assert_int_equal(lamp_convert(LAMP_CPU, u16, LAMP_F16, f32_in, LAMP_F32, n), LAMP_OK), "lamp_convert")
  }
}

static void sum_squares_leaves_clean_state(void **state) {
  (void)state;
  REQUIRE_STATE();
  fill_inputs();
  const size_t lengths[] = LENGTHS;
  for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
    size_t n = lengths[k];
    double sum;
    clean_state();
    assert_int_equal(lamp_sum_squares(LAMP_CPU, f32_in, n, &sum), LAMP_OK);
    check_clean("lamp_sum_squares", n);
  }
}

/* BatchNorm's per-channel sums (an AVX2 build that calls out to the 16-bit widening) on one
   small image, rows with and without tails, f32 and f16 inputs; the calling thread runs them. */
static void channel_reduce_leaves_clean_state(void **state) {
  (void)state;
  REQUIRE_STATE();
  fill_inputs();
  const size_t lengths[] = LENGTHS;
  const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16};
  for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++)
    for (size_t d = 0; d < 2; d++) {
      size_t hw = lengths[k];
      const void *x = dtypes[d] == LAMP_F32 ? (const void *)f32_in : (const void *)u16;
      double sum, dot;
      clean_state();
      assert_int_equal(lamp_cpu_channel_reduce(x, dtypes[d], NULL, x, dtypes[d], NULL, 1, 1, hw, &sum, &dot),
                       LAMP_OK);
      check_clean("lamp_channel_reduce", hw);
    }
}

/* Four 6x6 planes: the calling thread (worker 0) pools some of them itself. */
static void maxpool_leaves_clean_state(void **state) {
  (void)state;
  REQUIRE_STATE();
  fill_inputs();
  lamp_conv_geom g = {.channels = 1, .height = 6, .width = 6, .kernel_h = 2, .kernel_w = 2, .stride_h = 2,
                      .stride_w = 2, .dilation_h = 1, .dilation_w = 1, .out_h = 3, .out_w = 3};
  int32_t arg[4 * 9];
  clean_state();
  assert_int_equal(lamp_maxpool_forward(LAMP_CPU, f32_out, LAMP_F32, arg, f32_in, LAMP_F32, 4, &g), LAMP_OK);
  check_clean("lamp_maxpool_forward", 4 * 36);
}

/* The direct 3x3 convolution and its weight gradient, fp32 and f16 input, and the bf16 pair
   kernel, where supported. */
static void direct_conv_leaves_clean_state(void **state) {
  (void)state;
  REQUIRE_STATE();
  fill_inputs();
  lamp_conv_geom g = {.channels = 2, .height = 5, .width = 7, .kernel_h = 3, .kernel_w = 3, .stride_h = 1,
                      .stride_w = 1, .pad_h = 1, .pad_w = 1, .dilation_h = 1, .dilation_w = 1, .out_h = 5, .out_w = 7};
  if (!lamp_cpu_conv_direct_supported(&g)) skip();
  size_t n_out = 3, ldw = lamp_cpu_conv_direct_width(n_out), plane = 35;
  static float wt[2 * 9 * 16], out[3 * 35], gw[3 * 18], acc[18 * 16], work[2 * 7 * 9 + 35 * 16 + 16];
  assert_true(ldw <= 16 && lamp_cpu_conv_direct_work(&g) <= sizeof work / sizeof *work);
  assert_true(lamp_cpu_conv_direct_grad_work(&g, n_out) <= sizeof work / sizeof *work);
  assert_true(lamp_cpu_conv_direct_grad_acc(&g, n_out) <= sizeof acc / sizeof *acc);
  for (size_t i = 0; i < sizeof wt / sizeof *wt; i++) wt[i] = (float)(i % 7) * 0.25f;
  const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16};
  for (size_t d = 0; d < 2; d++) {
    const void *x = dtypes[d] == LAMP_F32 ? (const void *)f32_in : (const void *)u16;
    clean_state();
    assert_int_equal(lamp_cpu_conv_direct_typed(out, plane, x, dtypes[d], wt, ldw, n_out, &g, work), LAMP_OK);
    check_clean("lamp_conv_direct_typed", 2 * plane);
    clean_state();
    assert_int_equal(lamp_cpu_conv_direct_grad_typed(acc, x, dtypes[d], f32_in, n_out, &g, work, 0),
                     LAMP_OK);
    check_clean("lamp_conv_direct_grad_typed", 2 * plane);
    clean_state();
    assert_int_equal(lamp_cpu_conv_direct_grad_reduce(gw, 18, acc, n_out, 18, 0), LAMP_OK);
    check_clean("lamp_conv_direct_grad_reduce", 3 * 18);
  }
  if (!lamp_cpu_has(LAMP_ISA_AVX512BF16)) return;
  static uint32_t wp[2 * 9 * 16];
  assert_true(lamp_cpu_conv_direct_pairs(&g, n_out) <= sizeof wp / sizeof *wp);
  assert_int_equal(lamp_cpu_conv_direct_pair_weights(wp, wt, ldw, n_out, &g), LAMP_OK);
  clean_state();
  assert_int_equal(lamp_cpu_conv_direct_bf16(out, plane, u16, wp, n_out, &g, work), LAMP_OK);
  check_clean("lamp_conv_direct_bf16", 2 * plane);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(conversions_leave_clean_state),
      cmocka_unit_test(sum_squares_leaves_clean_state),
      cmocka_unit_test(channel_reduce_leaves_clean_state),
      cmocka_unit_test(maxpool_leaves_clean_state),
      cmocka_unit_test(direct_conv_leaves_clean_state),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
