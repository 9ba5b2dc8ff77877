/*
** The direct 3x3 convolution (lamp_conv_direct) against a plain reference, over plane shapes
** that exercise every edge of its pixel blocks: planes narrower than a vector, blocks that wrap
** onto the next row (or several), blocks that end part-way, 1-pixel rows and columns, output
** counts that are not multiples of 16. The forward sums in order over (c, i, j) with fused
** multiply-adds, so the reference does exactly that with fmaf and must agree bit for bit; taps in
** the zero border add +-0, which changes no sum, and the reference skips them. A bf16 input on a
** CPU with AVX512_BF16, where the pair kernel is chosen (AMD's CPUs, or LAMP_CONV_BF16=pairs), is
** summed in channel pairs (reference_pairs), also bit for bit. The weight gradient is a
** reassociation and is checked against a double-precision sum; its bf16 pair kernel, bit for bit
** (reference_grad_pairs). Conv2d's bf16 y and dx are its fp32 y and dx rounded once.
** tests/CMakeLists.txt runs this program again with LAMP_CONV_BF16 set to pairs, to widen and to a
** bad value.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"
#include "base/log.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

typedef struct shape {
  size_t channels, h, w, n_out;
} shape;

static const shape shapes[] = {
    {1, 1, 1, 1},   {2, 3, 5, 3},   {3, 7, 7, 16},  {2, 5, 16, 17}, {2, 4, 17, 5},  {1, 9, 1, 2},
    {3, 2, 33, 20}, {2, 6, 3, 1},   {4, 14, 14, 32}, {3, 28, 28, 16}, {1, 28, 28, 16}, {2, 15, 31, 33},
};

static uint32_t rng_state = 12345u;

/* Values in [-1, 1) with a few bits of mantissa, some of them zero. */
static float next_value(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  uint32_t r = rng_state >> 8;
  if (r % 11 == 0) return 0.0f;
  return (float)((int32_t)(r % 4096) - 2048) / 2048.0f;
}

static lamp_conv_geom geometry(const shape *s) {
  lamp_conv_geom g = {.channels = s->channels, .height = s->h, .width = s->w, .kernel_h = 3, .kernel_w = 3,
                      .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dilation_h = 1, .dilation_w = 1,
                      .out_h = s->h, .out_w = s->w};
  return g;
}

/* x[c][y + i - 1][x + j - 1], or NaN for a tap in the zero border (never used). */
static int tap(const float *x, const shape *s, size_t c, size_t p, size_t i, size_t j, float *v) {
  ptrdiff_t y = (ptrdiff_t)(p / s->w) + (ptrdiff_t)i - 1, xx = (ptrdiff_t)(p % s->w) + (ptrdiff_t)j - 1;
  if (y < 0 || xx < 0 || y >= (ptrdiff_t)s->h || xx >= (ptrdiff_t)s->w) return 0;
  *v = x[(c * s->h + (size_t)y) * s->w + (size_t)xx];
  return 1;
}

/* out[o][p] = fmaf over (c, i, j) in order of wt[(c * 3 + i) * 3 + j][o] * tap. */
static float reference_output(const float *x, const float *wt, size_t ldw, const shape *s, size_t o, size_t p) {
  float acc = 0.0f, v;
  for (size_t c = 0; c < s->channels; c++)
    for (size_t i = 0; i < 3; i++)
      for (size_t j = 0; j < 3; j++)
        if (tap(x, s, c, p, i, j, &v)) acc = fmaf(wt[((c * 3 + i) * 3 + j) * ldw + o], v, acc);
  return acc;
}

/*
** The same where the kernel multiplies bf16 pairs of input channels (lamp_cpu_conv_direct_bf16_dot):
** vdpbf16ps as its manual defines it, per pair of channels (2c, 2c + 1) and tap, in order over
** (c / 2, i, j), the odd channel's product added first and then the even one's, each a rounded
** fp32 addition of an exact product (a missing odd channel and the border add 0). The test's
** values have no denormals, which the instruction would read and write as zero.
*/
static float reference_pairs(const float *x, const float *wt, size_t ldw, const shape *s, size_t o, size_t p) {
  volatile float acc = 0.0f; /* each addition rounded on its own, never contracted */
  for (size_t c = 0; c < s->channels; c += 2)
    for (size_t i = 0; i < 3; i++)
      for (size_t j = 0; j < 3; j++) {
        float even = 0.0f, odd = 0.0f, v;
        if (c + 1 < s->channels && tap(x, s, c + 1, p, i, j, &v)) odd = wt[(((c + 1) * 3 + i) * 3 + j) * ldw + o] * v;
        if (tap(x, s, c, p, i, j, &v)) even = wt[((c * 3 + i) * 3 + j) * ldw + o] * v;
        acc = acc + odd;
        acc = acc + even;
      }
  return acc;
}

#define GUARD 12345.0f

static void check_forward(const shape *s, lamp_dtype dtype) {
  lamp_conv_geom g = geometry(s);
  size_t plane = s->h * s->w, ld_out = plane + 3, ldw = lamp_cpu_conv_direct_width(s->n_out);
  size_t nx = s->channels * plane, nw = s->channels * 9 * ldw, nout = s->n_out * ld_out + 16;
  float *x = malloc(nx * sizeof *x), *wt = calloc(nw, sizeof *wt), *out = malloc(nout * sizeof *out);
  float *work = malloc((lamp_cpu_conv_direct_work(&g) + 1) * sizeof *work);
  uint16_t *x16 = malloc(nx * sizeof *x16);
  assert_non_null(x), assert_non_null(wt), assert_non_null(out), assert_non_null(work), assert_non_null(x16);
  for (size_t k = 0; k < nx; k++) x[k] = next_value();
  if (dtype != LAMP_F32) { /* the reference reads the 16-bit values widened */
    if (dtype == LAMP_F16) lamp_f32_to_f16_n(x16, x, nx), lamp_f16_to_f32_n(x, x16, nx);
    else lamp_f32_to_bf16_n(x16, x, nx), lamp_bf16_to_f32_n(x, x16, nx);
  }
  int pairs = dtype == LAMP_BF16 && lamp_cpu_conv_direct_bf16_dot();
  for (size_t r = 0; r < s->channels * 9; r++)
    for (size_t o = 0; o < s->n_out; o++) /* bf16 weights where the kernel multiplies bf16 */
      wt[r * ldw + o] = pairs ? lamp_bf16_to_f32(lamp_f32_to_bf16(next_value())) : next_value();
  for (size_t k = 0; k < nout; k++) out[k] = GUARD;
  const void *input = dtype == LAMP_F32 ? (const void *)x : (const void *)x16;
  if (pairs) {
    uint32_t *wp = malloc(lamp_cpu_conv_direct_pairs(&g, s->n_out) * sizeof *wp);
    assert_non_null(wp);
    assert_int_equal(lamp_cpu_conv_direct_pair_weights(wp, wt, ldw, s->n_out, &g), LAMP_OK);
    assert_int_equal(lamp_cpu_conv_direct_bf16(out, ld_out, x16, wp, s->n_out, &g, work), LAMP_OK);
    free(wp);
  } else {
    assert_int_equal(lamp_cpu_conv_direct_typed(out, ld_out, input, dtype, wt, ldw, s->n_out, &g, work), LAMP_OK);
  }
  for (size_t o = 0; o < s->n_out; o++) {
    for (size_t p = 0; p < plane; p++) {
      float want = pairs ? reference_pairs(x, wt, ldw, s, o, p) : reference_output(x, wt, ldw, s, o, p);
      float got = out[o * ld_out + p];
      if (memcmp(&want, &got, sizeof want) != 0)
        fail_msg("%zux%zux%zu -> %zu (%s): out[%zu][%zu] = %.9g, reference %.9g", s->channels, s->h, s->w,
                 s->n_out, lamp_dtype_name(dtype), o, p, (double)got, (double)want);
    }
    for (size_t p = plane; p < ld_out; p++) assert_true(out[o * ld_out + p] == GUARD); /* row gaps untouched */
  }
  for (size_t k = s->n_out * ld_out; k < nout; k++) assert_true(out[k] == GUARD); /* no padded output written */
  free(x), free(wt), free(out), free(work), free(x16);
}

static void forward_matches_reference_bit_for_bit(void **state) {
  (void)state;
  lamp_conv_geom probe = geometry(&shapes[0]);
  if (!lamp_cpu_conv_direct_supported(&probe)) skip();
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    check_forward(&shapes[k], LAMP_F32);
    check_forward(&shapes[k], LAMP_BF16);
    check_forward(&shapes[k], LAMP_F16);
  }
}

/* gw[o][r] against a double sum; the tolerance is relative to the sum of |terms|. */
static void check_gradient(const shape *s) {
  lamp_conv_geom g = geometry(s);
  size_t plane = s->h * s->w, rows = s->channels * 9, nx = s->channels * plane;
  float *x = malloc(nx * sizeof *x), *dy = malloc(s->n_out * plane * sizeof *dy);
  float *acc = malloc(lamp_cpu_conv_direct_grad_acc(&g, s->n_out) * sizeof *acc);
  float *work = aligned_alloc(64, (lamp_cpu_conv_direct_grad_work(&g, s->n_out) * sizeof(float) + 63) / 64 * 64);
  float *gw = malloc(s->n_out * rows * sizeof *gw);
  assert_non_null(x), assert_non_null(dy), assert_non_null(acc), assert_non_null(work), assert_non_null(gw);
  for (size_t k = 0; k < nx; k++) x[k] = next_value();
  for (size_t k = 0; k < s->n_out * plane; k++) dy[k] = next_value();
  /* twice, accumulating: the sums are those of two identical images */
  assert_int_equal(lamp_cpu_conv_direct_grad(acc, x, dy, s->n_out, &g, work, 0), LAMP_OK);
  assert_int_equal(lamp_cpu_conv_direct_grad(acc, x, dy, s->n_out, &g, work, 1), LAMP_OK);
  assert_int_equal(lamp_cpu_conv_direct_grad_reduce(gw, rows, acc, s->n_out, rows, 0), LAMP_OK);
  for (size_t o = 0; o < s->n_out; o++)
    for (size_t r = 0; r < rows; r++) {
      size_t c = r / 9, i = r / 3 % 3, j = r % 3;
      double sum = 0.0, mag = 0.0;
      float v;
      for (size_t p = 0; p < plane; p++)
        if (tap(x, s, c, p, i, j, &v)) {
          sum += 2.0 * (double)dy[o * plane + p] * (double)v;
          mag += 2.0 * fabs((double)dy[o * plane + p] * (double)v);
        }
      double got = gw[o * rows + r];
      if (fabs(got - sum) > 1e-6 * mag + 1e-30)
        fail_msg("%zux%zux%zu -> %zu: gw[%zu][%zu] = %.9g, reference %.9g", s->channels, s->h, s->w, s->n_out, o,
                 r, got, sum);
    }
  free(x), free(dy), free(acc), free(work), free(gw);
}

/*
** The bf16 pair kernel's weight gradient (lamp_cpu_conv_direct_grad_bf16) bit for bit: per row,
** pixel pairs (2k, 2k + 1) in order, each vdpbf16ps adding the second pixel's product and then the
** first's, each a rounded fp32 addition of an exact product (products of the border and of a
** missing second pixel are 0 and change nothing). Two identical images: the second image's sum
** is added to the first's.
*/
static float reference_grad_pairs(const float *x, const float *dy, const shape *s, size_t o, size_t r) {
  size_t c = r / 9, i = r / 3 % 3, j = r % 3;
  volatile float acc = 0.0f;
  float v;
  for (size_t y = 0; y < s->h; y++)
    for (size_t k = 0; 2 * k < s->w; k++) {
      size_t p = y * s->w + 2 * k;
      float first = 0.0f, second = 0.0f;
      if (2 * k + 1 < s->w && tap(x, s, c, p + 1, i, j, &v)) second = dy[o * s->h * s->w + p + 1] * v;
      if (tap(x, s, c, p, i, j, &v)) first = dy[o * s->h * s->w + p] * v;
      acc = acc + second;
      acc = acc + first;
    }
  return acc;
}

static void check_gradient_pairs(const shape *s) {
  lamp_conv_geom g = geometry(s);
  size_t plane = s->h * s->w, rows = s->channels * 9, nx = s->channels * plane, ny = s->n_out * plane;
  float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
  uint16_t *x16 = malloc(nx * sizeof *x16), *dy16 = malloc(ny * sizeof *dy16);
  float *acc = malloc(lamp_cpu_conv_direct_grad_acc(&g, s->n_out) * sizeof *acc);
  float *work = aligned_alloc(64, (lamp_cpu_conv_direct_grad_work(&g, s->n_out) * sizeof(float) + 63) / 64 * 64);
  float *gw = malloc(s->n_out * rows * sizeof *gw);
  assert_non_null(x), assert_non_null(dy), assert_non_null(x16), assert_non_null(dy16);
  assert_non_null(acc), assert_non_null(work), assert_non_null(gw);
  for (size_t k = 0; k < nx; k++) x[k] = next_value();
  for (size_t k = 0; k < ny; k++) dy[k] = next_value();
  lamp_f32_to_bf16_n(x16, x, nx), lamp_bf16_to_f32_n(x, x16, nx);
  lamp_f32_to_bf16_n(dy16, dy, ny), lamp_bf16_to_f32_n(dy, dy16, ny);
  assert_int_equal(lamp_cpu_conv_direct_grad_bf16(acc, x16, dy16, s->n_out, &g, work, 0), LAMP_OK);
  assert_int_equal(lamp_cpu_conv_direct_grad_bf16(acc, x16, dy16, s->n_out, &g, work, 1), LAMP_OK);
  assert_int_equal(lamp_cpu_conv_direct_grad_reduce(gw, rows, acc, s->n_out, rows, 0), LAMP_OK);
  for (size_t o = 0; o < s->n_out; o++)
    for (size_t r = 0; r < rows; r++) {
      float one = reference_grad_pairs(x, dy, s, o, r), want = one + one, got = gw[o * rows + r];
      if (memcmp(&want, &got, sizeof want) != 0)
        fail_msg("%zux%zux%zu -> %zu (bf16 pairs): gw[%zu][%zu] = %.9g, reference %.9g", s->channels, s->h, s->w,
                 s->n_out, o, r, (double)got, (double)want);
    }
  free(x), free(dy), free(x16), free(dy16), free(acc), free(work), free(gw);
}

static void bf16_gradient_pairs_match_reference_bit_for_bit(void **state) {
  (void)state;
  lamp_conv_geom probe = geometry(&shapes[0]);
  if (!lamp_cpu_has(LAMP_ISA_AVX512F) || !lamp_cpu_has(LAMP_ISA_AVX512BF16)) {
    assert_int_equal(lamp_cpu_conv_direct_grad_bf16(NULL, NULL, NULL, 1, &probe, NULL, 0), LAMP_ERR_UNSUPPORTED);
    assert_string_equal(lamp_last_error(), "conv_direct_grad_bf16: needs the 3x3 same geometry and AVX512_BF16");
    skip();
  }
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) check_gradient_pairs(&shapes[k]);
}

static void gradient_matches_reference(void **state) {
  (void)state;
  lamp_conv_geom probe = geometry(&shapes[0]);
  if (!lamp_cpu_conv_direct_supported(&probe)) skip();
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) check_gradient(&shapes[k]);
}

/*
** Conv2d's input gradient in bf16 (x, dy and dx bf16, compute bf16), which runs the transposed
** convolution on dy as stored: dx against a double sum over the same bf16 values, within fp32
** rounding of the sum's magnitude and dx's own rounding to bf16, for 2 images and an odd channel
** count (a lone last channel in the bf16 pairs).
*/
static void conv2d_bf16_input_gradient(void **state) {
  (void)state;
  enum { N = 2, CIN = 3, COUT = 5, H = 9, W = 7 };
  size_t plane = H * W, nx = N * CIN * plane, ny = N * COUT * plane, nw = COUT * CIN * 9;
  uint16_t *dy = malloc(ny * sizeof *dy), *dx = malloc(nx * sizeof *dx), *x = calloc(nx, sizeof *x);
  float *w = malloc(nw * sizeof *w);
  assert_non_null(dy), assert_non_null(dx), assert_non_null(x), assert_non_null(w);
  for (size_t k = 0; k < ny; k++) dy[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < nw; k++) w[k] = lamp_bf16_to_f32(lamp_f32_to_bf16(next_value()));
  lamp_conv2d_args a = {.shape = {.batch = N, .in_channels = CIN, .out_channels = COUT, .groups = 1, .height = H,
                                  .width = W, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .out_h = H,
                                  .out_w = W},
                        .compute = LAMP_BF16, .x = x, .x_dtype = LAMP_BF16, .weight = w, .operand_dtype = LAMP_F32,
                        .dy = dy, .dy_dtype = LAMP_BF16, .dx = dx, .dx_dtype = LAMP_BF16};
  void *plan = NULL;
  assert_int_equal(lamp_conv2d_backward(LAMP_CPU, &plan, &a), LAMP_OK);
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  for (size_t s = 0; s < N; s++)
    for (size_t c = 0; c < CIN; c++)
      for (size_t y = 0; y < H; y++)
        for (size_t xx = 0; xx < W; xx++) {
          double sum = 0.0, mag = 0.0;
          for (size_t o = 0; o < COUT; o++)
            for (size_t i = 0; i < 3; i++)
              for (size_t j = 0; j < 3; j++) { /* dx[c][y][x] += w[o][c][i][j] * dy[o][y - i + 1][x - j + 1] */
                ptrdiff_t yy = (ptrdiff_t)y - (ptrdiff_t)i + 1, xj = (ptrdiff_t)xx - (ptrdiff_t)j + 1;
                if (yy < 0 || xj < 0 || yy >= H || xj >= W) continue;
                double term = (double)w[((o * CIN + c) * 3 + i) * 3 + j] *
                              (double)lamp_bf16_to_f32(dy[(s * COUT + o) * plane + (size_t)yy * W + (size_t)xj]);
                sum += term, mag += fabs(term);
              }
          double got = lamp_bf16_to_f32(dx[(s * CIN + c) * plane + y * W + xx]);
          if (fabs(got - sum) > 1e-6 * mag + fabs(sum) / 256.0 + 1e-30)
            fail_msg("dx[%zu][%zu][%zu][%zu] = %.9g, reference %.9g", s, c, y, xx, got, sum);
        }
  free(dy), free(dx), free(x), free(w);
}

/* Channels [c0, c0 + count) of each of n images of `channels` planes, into dst (n x count planes). */
static void take_channels(uint16_t *dst, const uint16_t *src, size_t n, size_t channels, size_t c0, size_t count,
                          size_t plane) {
  for (size_t s = 0; s < n; s++)
    memcpy(dst + s * count * plane, src + (s * channels + c0) * plane, count * plane * sizeof *dst);
}

/* n bf16 values against those of the layer run alone: the same bits on the same kernel, else
   within a bf16 rounding (oneDNN takes ungrouped layers on AMX, conv_dnnl.c). */
static void same_16bit(const uint16_t *got, const uint16_t *alone, size_t n, int same_kernel, const char *what) {
  for (size_t k = 0; k < n; k++) {
    float a = lamp_bf16_to_f32(got[k]), b = lamp_bf16_to_f32(alone[k]);
    if (same_kernel ? got[k] != alone[k] : fabsf(a - b) > fabsf(b) / 64.0f + 1e-3f)
      fail_msg("%s[%zu]: %.9g, alone %.9g", what, k, a, b);
  }
}

/*
** Conv2d in bf16 with 2 groups against each group run alone as an ungrouped layer on its slices of
** x, W and dy: y, dx and the weight gradient the same bits (within a rounding where oneDNN takes
** the ungrouped layer). Catches a group reading another group's weights (their pairs are laid out
** once per pass, group after group).
*/
static void conv2d_bf16_groups_match_each_group_alone(void **state) {
  (void)state;
  enum { N = 2, G = 2, CIN_G = 3, COUT_G = 5, H = 6, W = 7 };
  enum { CIN = G * CIN_G, COUT = G * COUT_G, PLANE = H * W, NW = COUT * CIN_G * 9 };
  static uint16_t x[N * CIN * PLANE], dy[N * COUT * PLANE], y[N * COUT * PLANE], dx[N * CIN * PLANE];
  static uint16_t xg[N * CIN_G * PLANE], dyg[N * COUT_G * PLANE], yg[N * COUT_G * PLANE], dxg[N * CIN_G * PLANE];
  static uint16_t part[N * COUT_G * PLANE];
  static float w[NW], gw[NW], gwg[NW / G];
  for (size_t k = 0; k < N * CIN * PLANE; k++) x[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < N * COUT * PLANE; k++) dy[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < NW; k++) w[k] = lamp_bf16_to_f32(lamp_f32_to_bf16(next_value()));
  lamp_conv2d_args a = {.shape = {.batch = N, .in_channels = CIN, .out_channels = COUT, .groups = G, .height = H,
                                  .width = W, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .out_h = H,
                                  .out_w = W},
                        .compute = LAMP_BF16, .x = x, .x_dtype = LAMP_BF16, .weight = w, .operand_dtype = LAMP_F32,
                        .y = y, .y_dtype = LAMP_BF16, .dy = dy, .dy_dtype = LAMP_BF16, .dx = dx,
                        .dx_dtype = LAMP_BF16, .grad_weight = gw, .grad_dtype = LAMP_F32, .overwrite_grads = 1};
  void *plan = NULL;
  assert_int_equal(lamp_conv2d_forward(LAMP_CPU, &plan, &a), LAMP_OK);
  assert_int_equal(lamp_conv2d_backward(LAMP_CPU, &plan, &a), LAMP_OK);
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  for (size_t g = 0; g < G; g++) {
    lamp_conv2d_args b = a;
    b.shape.in_channels = CIN_G, b.shape.out_channels = COUT_G, b.shape.groups = 1;
    b.x = xg, b.dy = dyg, b.y = yg, b.dx = dxg, b.weight = w + g * NW / G, b.grad_weight = gwg;
    take_channels(xg, x, N, CIN, g * CIN_G, CIN_G, PLANE);
    take_channels(dyg, dy, N, COUT, g * COUT_G, COUT_G, PLANE);
    plan = NULL;
    assert_int_equal(lamp_conv2d_forward(LAMP_CPU, &plan, &b), LAMP_OK);
    assert_int_equal(lamp_conv2d_backward(LAMP_CPU, &plan, &b), LAMP_OK);
    int same_kernel = lamp_cpu_conv2d_plan_engine(plan) == NULL; /* else oneDNN's AMX sums, in another order */
    lamp_conv2d_plan_free(LAMP_CPU, plan);
    take_channels(part, y, N, COUT, g * COUT_G, COUT_G, PLANE);
    same_16bit(part, yg, N * COUT_G * PLANE, same_kernel, "y");
    take_channels(part, dx, N, CIN, g * CIN_G, CIN_G, PLANE);
    same_16bit(part, dxg, N * CIN_G * PLANE, same_kernel, "dx");
    for (size_t k = 0; k < NW / G; k++)
      if (same_kernel ? memcmp(&gw[g * NW / G + k], &gwg[k], sizeof gwg[k]) != 0
                      : fabsf(gw[g * NW / G + k] - gwg[k]) > 1e-5f * (1.0f + fabsf(gwg[k])) * N * PLANE)
        fail_msg("group %zu: grad_weight[%zu] %.9g, alone %.9g", g, k, gw[g * NW / G + k], gwg[k]);
  }
}

/*
** Conv2d in bf16 (the pair kernel where it is chosen): a bf16 y and dx are the fp32 ones of the same
** layer rounded once, with and without a bias (added before the rounding).
*/
static void conv2d_bf16_outputs_are_the_fp32_ones_rounded(void **state) {
  (void)state;
  enum { N = 2, CIN = 3, COUT = 20, H = 5, W = 9, PLANE = H * W, NW = COUT * CIN * 9 };
  static uint16_t x[N * CIN * PLANE], dy[N * COUT * PLANE], y16[N * COUT * PLANE], dx16[N * CIN * PLANE];
  static float y32[N * COUT * PLANE], dx32[N * CIN * PLANE], w[NW], bias[COUT];
  for (size_t k = 0; k < N * CIN * PLANE; k++) x[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < N * COUT * PLANE; k++) dy[k] = lamp_f32_to_bf16(next_value() * 1.01f);
  for (size_t k = 0; k < NW; k++) w[k] = lamp_bf16_to_f32(lamp_f32_to_bf16(next_value()));
  for (size_t k = 0; k < COUT; k++) bias[k] = next_value() / 3.0f;
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    lamp_conv2d_args a = {.shape = {.batch = N, .in_channels = CIN, .out_channels = COUT, .groups = 1,
                                    .height = H, .width = W, .kernel = 3, .stride = 1, .padding = 1,
                                    .dilation = 1, .out_h = H, .out_w = W},
                          .compute = LAMP_BF16, .x = x, .x_dtype = LAMP_BF16, .weight = w,
                          .bias = with_bias ? bias : NULL, .operand_dtype = LAMP_F32, .y = y32,
                          .y_dtype = LAMP_F32, .dy = dy, .dy_dtype = LAMP_BF16, .dx = dx32, .dx_dtype = LAMP_F32};
    lamp_conv2d_args b = a;
    b.y = y16, b.y_dtype = LAMP_BF16, b.dx = dx16, b.dx_dtype = LAMP_BF16;
    void *plan = NULL, *plan16 = NULL;
    assert_int_equal(lamp_conv2d_forward(LAMP_CPU, &plan, &a), LAMP_OK);
    assert_int_equal(lamp_conv2d_backward(LAMP_CPU, &plan, &a), LAMP_OK);
    assert_int_equal(lamp_conv2d_forward(LAMP_CPU, &plan16, &b), LAMP_OK);
    assert_int_equal(lamp_conv2d_backward(LAMP_CPU, &plan16, &b), LAMP_OK);
    lamp_conv2d_plan_free(LAMP_CPU, plan);
    lamp_conv2d_plan_free(LAMP_CPU, plan16);
    for (size_t k = 0; k < N * COUT * PLANE; k++)
      if (y16[k] != lamp_f32_to_bf16(y32[k]))
        fail_msg("bias %d: y[%zu] = 0x%04x, the fp32 y rounded 0x%04x", with_bias, k, y16[k], lamp_f32_to_bf16(y32[k]));
    for (size_t k = 0; k < N * CIN * PLANE; k++)
      if (dx16[k] != lamp_f32_to_bf16(dx32[k]))
        fail_msg("dx[%zu] = 0x%04x, the fp32 dx rounded 0x%04x", k, dx16[k], lamp_f32_to_bf16(dx32[k]));
  }
}

static char warning[512];
static int warnings;

static void capture(lamp_log_level level, const char *line, void *userdata) {
  (void)userdata;
  if (level != LAMP_LOG_WARN) return;
  warnings++;
  snprintf(warning, sizeof warning, "%s", line);
}

/* Runs first: the choice is made, and a bad setting warned about, at the first question. */
static void bf16_kernel_follows_the_setting(void **state) {
  (void)state;
  const char *set = getenv("LAMP_CONV_BF16");
  int can = lamp_cpu_has(LAMP_ISA_AVX512F) && lamp_cpu_has(LAMP_ISA_AVX512BF16);
  int by_default = can && lamp_cpu_vendor() == LAMP_VENDOR_AMD;
  int unset = set == NULL || set[0] == '\0' || strcmp(set, "auto") == 0 || strcmp(set, "dnnl") == 0;
  int pairs = !unset && strcmp(set, "pairs") == 0, widen = !unset && strcmp(set, "widen") == 0;
  lamp_log_set_sink(capture, NULL);
  int got = lamp_cpu_conv_direct_bf16_dot();
  assert_int_equal(lamp_cpu_conv_direct_bf16_dot(), got);
  lamp_log_set_sink(NULL, NULL);
  assert_int_equal(got, pairs ? can : widen ? 0 : by_default);
  char want[256] = "";
  if (pairs && !can) snprintf(want, sizeof want, "warning: LAMP_CONV_BF16=pairs: this CPU has no AVX512_BF16; widening bf16");
  if (!unset && !pairs && !widen)
    snprintf(want, sizeof want, "warning: LAMP_CONV_BF16: expected auto, dnnl, pairs or widen, found '%s'; using auto", set);
  assert_int_equal(warnings, want[0] != '\0'); /* once, however often it is asked */
  if (want[0] != '\0') assert_string_equal(warning, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bf16_kernel_follows_the_setting),
      cmocka_unit_test(forward_matches_reference_bit_for_bit),
      cmocka_unit_test(gradient_matches_reference),
      cmocka_unit_test(bf16_gradient_pairs_match_reference_bit_for_bit),
      cmocka_unit_test(conv2d_bf16_input_gradient),
      cmocka_unit_test(conv2d_bf16_groups_match_each_group_alone),
      cmocka_unit_test(conv2d_bf16_outputs_are_the_fp32_ones_rounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
