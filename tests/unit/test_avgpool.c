/*
** Average pooling on the CPU runs its planes on the pool's threads, and a global window
** (GlobalAvgPool) sums 8 planes side by side. Neither may change a bit: every output must equal
** the plain reference (each window summed in scan order in fp32, times 1 / window), for plane
** counts that are and are not multiples of 8, on 1 and 2 threads, from fp32 and bf16 inputs.
*/
#include <cblas.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

#define MAX_PLANES 37
#define MAX_PLANE (14 * 14)

static uint32_t rng_state = 7u;

/* Values of mixed magnitude, so a reordered sum would round differently. */
static float next_value(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  float v = (float)((int32_t)(rng_state >> 9) - (1 << 22)) / (float)(1 << 12);
  return (rng_state & 0x100u) ? v * 1e-3f : v;
}

static lamp_conv_geom global_geom(size_t h, size_t w) {
  return (lamp_conv_geom){.channels = 1,
                          .height = h,
                          .width = w,
                          .kernel_h = h,
                          .kernel_w = w,
                          .stride_h = 1,
                          .stride_w = 1,
                          .dilation_h = 1,
                          .dilation_w = 1,
                          .out_h = 1,
                          .out_w = 1};
}

static lamp_conv_geom window_geom(void) { /* 3x3, stride 2, padding 1 over 14x14 */
  return (lamp_conv_geom){.channels = 1,
                          .height = 14,
                          .width = 14,
                          .kernel_h = 3,
                          .kernel_w = 3,
                          .stride_h = 2,
                          .stride_w = 2,
                          .pad_h = 1,
                          .pad_w = 1,
                          .dilation_h = 1,
                          .dilation_w = 1,
                          .out_h = 7,
                          .out_w = 7};
}

/* The reference: each window's in-image taps in scan order, one fp32 sum, times 1 / window. */
static void reference_forward(float *y, const float *x, size_t planes, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  for (size_t p = 0; p < planes; p++)
    for (size_t oy = 0; oy < g->out_h; oy++)
      for (size_t ox = 0; ox < g->out_w; ox++) {
        float sum = 0.0f;
        for (size_t ky = 0; ky < g->kernel_h; ky++)
          for (size_t kx = 0; kx < g->kernel_w; kx++) {
            long iy = (long)(oy * g->stride_h + ky) - (long)g->pad_h;
            long ix = (long)(ox * g->stride_w + kx) - (long)g->pad_w;
            if (iy < 0 || ix < 0 || iy >= (long)g->height || ix >= (long)g->width) continue;
            sum += x[p * g->height * g->width + (size_t)iy * g->width + (size_t)ix];
          }
        y[(p * g->out_h + oy) * g->out_w + ox] = sum * inv;
      }
}

/* dx: zero, then each output's dy / window added to its window's taps, windows in scan order. */
static void reference_backward(float *dx, const float *dy, size_t planes, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  memset(dx, 0, planes * g->height * g->width * sizeof *dx);
  for (size_t p = 0; p < planes; p++)
    for (size_t oy = 0; oy < g->out_h; oy++)
      for (size_t ox = 0; ox < g->out_w; ox++) {
        float d = dy[(p * g->out_h + oy) * g->out_w + ox] * inv;
        for (size_t ky = 0; ky < g->kernel_h; ky++)
          for (size_t kx = 0; kx < g->kernel_w; kx++) {
            long iy = (long)(oy * g->stride_h + ky) - (long)g->pad_h;
            long ix = (long)(ox * g->stride_w + kx) - (long)g->pad_w;
            if (iy < 0 || ix < 0 || iy >= (long)g->height || ix >= (long)g->width) continue;
            dx[p * g->height * g->width + (size_t)iy * g->width + (size_t)ix] += d;
          }
      }
}

typedef struct buffers {
  float x[MAX_PLANES * MAX_PLANE], y[MAX_PLANES * MAX_PLANE], want[MAX_PLANES * MAX_PLANE];
  uint16_t x16[MAX_PLANES * MAX_PLANE], y16[MAX_PLANES * MAX_PLANE];
} buffers;

static void check_forward(buffers *b, size_t planes, const lamp_conv_geom *g, lamp_dtype x_dtype) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  for (size_t i = 0; i < planes * in; i++) {
    b->x16[i] = lamp_f32_to_bf16(next_value());
    b->x[i] = x_dtype == LAMP_BF16 ? lamp_bf16_to_f32(b->x16[i]) : next_value();
  }
  reference_forward(b->want, b->x, planes, g);
  const void *x = x_dtype == LAMP_BF16 ? (const void *)b->x16 : (const void *)b->x;
  assert_int_equal(lamp_cpu_avgpool_forward(b->y, LAMP_F32, x, x_dtype, planes, g), LAMP_OK);
  for (size_t i = 0; i < planes * out; i++)
    if (memcmp(&b->y[i], &b->want[i], sizeof b->y[i]) != 0)
      fail_msg("avgpool forward, %zu planes of %zux%zu, %s input, %zu threads: output %zu is %a, expected %a", planes,
               g->height, g->width, lamp_dtype_name(x_dtype), lamp_cpu_threads(), i, b->y[i], b->want[i]);
}

static void check_backward(buffers *b, size_t planes, const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  for (size_t i = 0; i < planes * out; i++) b->x[i] = next_value();
  for (size_t i = 0; i < planes * in; i++) b->y[i] = 1.0f; /* stale values the kernel must clear */
  reference_backward(b->want, b->x, planes, g);
  assert_int_equal(lamp_cpu_avgpool_backward(b->y, LAMP_F32, b->x, LAMP_F32, planes, g), LAMP_OK);
  for (size_t i = 0; i < planes * in; i++)
    if (memcmp(&b->y[i], &b->want[i], sizeof b->y[i]) != 0)
      fail_msg("avgpool backward, %zu planes of %zux%zu, %zu threads: element %zu is %a, expected %a", planes,
               g->height, g->width, lamp_cpu_threads(), i, b->y[i], b->want[i]);
}

static const size_t plane_counts[] = {1, 8, 13, 16, MAX_PLANES};

static void for_each_thread_count(void (*check)(buffers *, size_t)) {
  buffers *b = malloc(sizeof *b);
  assert_non_null(b);
  int threads = openblas_get_num_threads();
  for (int t = 1; t <= 2; t++) {
    openblas_set_num_threads(t);
    for (size_t i = 0; i < sizeof plane_counts / sizeof plane_counts[0]; i++) check(b, plane_counts[i]);
  }
  openblas_set_num_threads(threads);
  free(b);
}

static void global_forward(buffers *b, size_t planes) {
  lamp_conv_geom square = global_geom(14, 14), odd = global_geom(3, 5), one = global_geom(1, 1);
  check_forward(b, planes, &square, LAMP_F32);
  check_forward(b, planes, &square, LAMP_BF16);
  check_forward(b, planes, &odd, LAMP_F32);
  check_forward(b, planes, &one, LAMP_F32);
}

static void windowed_forward(buffers *b, size_t planes) {
  lamp_conv_geom g = window_geom();
  check_forward(b, planes, &g, LAMP_F32);
  check_forward(b, planes, &g, LAMP_BF16);
}

static void both_backward(buffers *b, size_t planes) {
  lamp_conv_geom global = global_geom(14, 14), windowed = window_geom();
  check_backward(b, planes, &global);
  check_backward(b, planes, &windowed);
}

static void test_global_forward_matches_scan_order(void **state) {
  (void)state;
  for_each_thread_count(global_forward);
}

static void test_windowed_forward_matches_scan_order(void **state) {
  (void)state;
  for_each_thread_count(windowed_forward);
}

static void test_backward_matches_reference(void **state) {
  (void)state;
  for_each_thread_count(both_backward);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_global_forward_matches_scan_order),
      cmocka_unit_test(test_windowed_forward_matches_scan_order),
      cmocka_unit_test(test_backward_matches_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
