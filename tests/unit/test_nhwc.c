/*
** The 16-bit moves between NCHW and NHWC (lamp_cpu_nchw_to_nhwc16 and lamp_cpu_nhwc_to_nchw16,
** nhwc.c): every element lands where the layouts say, for channel and pixel counts that fill the
** AVX-512 body's 16 lanes and pairs, leave remainders, or are below one pair; nothing is written
** past dst; and the two directions undo each other. tests/CMakeLists.txt runs this again with
** AVX-512 hidden, which tests the plain C body.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/cpu_backend.h"

#define GUARD 64 /* elements of canary after dst */
#define CANARY 0xA5A5u

static const size_t channel_counts[] = {1, 2, 3, 15, 16, 17, 32, 33, 64};
static const size_t pixel_counts[] = {1, 2, 5, 7, 16, 17, 31, 49, 196};

/* Distinct values, so a misplaced element cannot match by chance (up to 65,536 elements). */
static uint16_t *numbered(size_t n) {
  uint16_t *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = (uint16_t)(i * 40503u + 7u);
  return v;
}

static uint16_t *guarded(size_t n) {
  uint16_t *v = malloc((n + GUARD) * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n + GUARD; i++) v[i] = CANARY;
  return v;
}

static void assert_guard_intact(const uint16_t *v, size_t n) {
  for (size_t i = n; i < n + GUARD; i++) assert_int_equal(v[i], CANARY);
}

static void check_shape(size_t images, size_t channels, size_t pixels) {
  size_t n = images * channels * pixels;
  uint16_t *nchw = numbered(n), *nhwc = guarded(n), *back = guarded(n);
  lamp_cpu_nchw_to_nhwc16(nhwc, nchw, images, channels, pixels);
  for (size_t i = 0; i < images; i++)
    for (size_t c = 0; c < channels; c++)
      for (size_t p = 0; p < pixels; p++) {
        size_t image = i * channels * pixels;
        if (nhwc[image + p * channels + c] != nchw[image + c * pixels + p])
          fail_msg("%zux%zux%zu: image %zu channel %zu pixel %zu misplaced", images, channels, pixels, i, c, p);
      }
  assert_guard_intact(nhwc, n);
  lamp_cpu_nhwc_to_nchw16(back, nhwc, images, channels, pixels);
  assert_memory_equal(back, nchw, n * sizeof *back);
  assert_guard_intact(back, n);
  free(nchw);
  free(nhwc);
  free(back);
}

static void test_every_element_lands_where_the_layouts_say(void **state) {
  (void)state;
  for (size_t a = 0; a < sizeof channel_counts / sizeof channel_counts[0]; a++)
    for (size_t b = 0; b < sizeof pixel_counts / sizeof pixel_counts[0]; b++)
      for (size_t images = 1; images <= 3; images += 2) check_shape(images, channel_counts[a], pixel_counts[b]);
}

/* The ResNet's layers, as oneDNN's slices of 64 images see them. */
static void test_the_resnet_shapes(void **state) {
  (void)state;
  check_shape(2, 16, 784);
  check_shape(3, 32, 196);
  check_shape(5, 64, 49);
}

/* NHWC to NCHW on its own, from data that did not come from the other direction. */
static void test_nhwc_to_nchw_alone(void **state) {
  (void)state;
  const size_t images = 2, channels = 33, pixels = 17, n = images * channels * pixels;
  uint16_t *nhwc = numbered(n), *nchw = guarded(n);
  lamp_cpu_nhwc_to_nchw16(nchw, nhwc, images, channels, pixels);
  for (size_t i = 0; i < images; i++)
    for (size_t c = 0; c < channels; c++)
      for (size_t p = 0; p < pixels; p++) {
        size_t image = i * channels * pixels;
        assert_int_equal(nchw[image + c * pixels + p], nhwc[image + p * channels + c]);
      }
  assert_guard_intact(nchw, n);
  free(nhwc);
  free(nchw);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_element_lands_where_the_layouts_say),
      cmocka_unit_test(test_the_resnet_shapes),
      cmocka_unit_test(test_nhwc_to_nchw_alone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
