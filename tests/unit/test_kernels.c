/*
** The CPU kernels other than GEMM, each against a naive loop written here, for every dtype it
** accepts. Lengths are odd and cross the backend's 8-element blocks and 512-element chunks, so
** the vector body, the scalar tail and the chunk seams are all exercised. Inputs include
** inf, NaN, -0 and subnormals where the kernel must treat them specially.
*/
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "test_support.h"

static const lamp_dtype float_dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};
#define N_DTYPES 3

/* ---- data helpers -------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float uniform(float lo, float hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)(rng_state >> 40) / 16777216.0f;
}

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* An array of n elements in a float dtype; values are set and read as fp32. */
typedef struct buffer {
  void *data;
  lamp_dtype dtype;
  size_t n;
} buffer;

static buffer make_buffer(lamp_dtype dtype, size_t n) {
  buffer b = {calloc(n + 1, lamp_dtype_size(dtype)), dtype, n};
  assert_non_null(b.data);
  return b;
}

static void set_value(buffer *b, size_t i, float v) { store_f32_as(b->dtype, b->data, i, v); }

static float get_value(const buffer *b, size_t i) { return load_as_f32(b->dtype, b->data, i); }

/* v rounded to the dtype and widened back: what a kernel storing v in that dtype leaves. */
static float rounded(lamp_dtype dtype, float v) {
  if (dtype == LAMP_F16) return lamp_f16_to_f32(lamp_f32_to_f16(v));
  if (dtype == LAMP_BF16) return lamp_bf16_to_f32(lamp_f32_to_bf16(v));
  return v;
}

/* Same value, bit for bit (any NaN matches any NaN of the same sign). */
static int same(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) && !signbit(a) == !signbit(b);
  return bits_of(a) == bits_of(b);
}

static void fill_random(buffer *b, float lo, float hi) {
  for (size_t i = 0; i < b->n; i++) set_value(b, i, uniform(lo, hi));
}

/* Values every elementwise kernel must handle, then random ones. */
static const float specials[] = {0.0f,      -0.0f,     1.0f,    -1.0f,   65504.0f, -65520.0f,
                                 1e-8f,     -1e-8f,    3e38f,   -3e38f,  1e-40f,   -1e-40f,
                                 INFINITY,  -INFINITY, NAN,     -NAN,    0.5f,     -0.25f};
#define N_SPECIALS (sizeof specials / sizeof specials[0])

static void fill_with_specials(buffer *b) {
  fill_random(b, -4.0f, 4.0f);
  for (size_t i = 0; i < N_SPECIALS && i < b->n; i++) set_value(b, i * 7 % b->n, specials[i]);
}

static void free_buffer(buffer *b) { free(b->data); }

/* ---- convert and fill ------------------------------------------------------------------- */

static void convert_matches_scalar_rounding(void **state) {
  (void)state;
  const size_t n = 1037;
  for (int s = 0; s < N_DTYPES; s++) {
    for (int d = 0; d < N_DTYPES; d++) {
      buffer src = make_buffer(float_dtypes[s], n), dst = make_buffer(float_dtypes[d], n);
      fill_with_specials(&src);
      assert_int_equal(lamp_convert(LAMP_CPU, dst.data, dst.dtype, src.data, src.dtype, n), LAMP_OK);
      for (size_t i = 0; i < n; i++) {
        float want = rounded(dst.dtype, get_value(&src, i));
        if (!same(get_value(&dst, i), want))
          fail_msg("%s -> %s at %zu: %a vs %a", lamp_dtype_name(src.dtype), lamp_dtype_name(dst.dtype),
                   i, (double)get_value(&dst, i), (double)want);
      }
      free_buffer(&src);
      free_buffer(&dst);
    }
  }
}

static void convert_same_dtype_copies_bits_even_in_place(void **state) {
  (void)state;
  uint16_t h[9] = {0x7c01, 0xfe00, 0x0001, 0x8000, 0x3c00, 0x7bff, 0xfc00, 0x1234, 0xffff}, out[9];
  assert_int_equal(lamp_convert(LAMP_CPU, out, LAMP_F16, h, LAMP_F16, 9), LAMP_OK);
  assert_memory_equal(out, h, sizeof h); /* a signalling NaN is copied, not converted */
  assert_int_equal(lamp_convert(LAMP_CPU, h, LAMP_BF16, h, LAMP_BF16, 9), LAMP_OK);
  assert_memory_equal(out, h, sizeof h);
}

static void convert_errors(void **state) {
  (void)state;
  float x[2] = {0};
  assert_int_equal(lamp_convert(LAMP_CPU, x, LAMP_I32, x, LAMP_F32, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "convert: dtype i32 not supported for dst (expected f32, f16 or bf16)");
  assert_int_equal(lamp_convert(LAMP_CPU, x, LAMP_F32, x, LAMP_U8, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "convert: dtype u8 not supported for src (expected f32, f16 or bf16)");
  assert_int_equal(lamp_convert(LAMP_CPU, x, LAMP_F32, NULL, LAMP_F16, 2), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "convert: src is NULL");
  assert_int_equal(lamp_convert(LAMP_CPU, NULL, LAMP_F32, NULL, LAMP_F16, 0), LAMP_OK);
}

static void fill_rounds_once_per_dtype(void **state) {
  (void)state;
  const float values[] = {0.1f, -0.0f, 70000.0f, NAN, 1e-30f};
  for (int d = 0; d < N_DTYPES; d++) {
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
      buffer x = make_buffer(float_dtypes[d], 1001);
      assert_int_equal(lamp_fill(LAMP_CPU, x.data, x.dtype, x.n, values[v]), LAMP_OK);
      for (size_t i = 0; i < x.n; i++) assert_true(same(get_value(&x, i), rounded(x.dtype, values[v])));
      free_buffer(&x);
    }
  }
}

/* ---- bias --------------------------------------------------------------------------------- */

/* The kernel adds in fp32 and rounds once, so the naive loop must agree bit for bit. */
static void add_bias_rows_matches_naive(void **state) {
  (void)state;
  const size_t rows = 5, cols = 1100; /* crosses two chunk seams */
  for (int yd = 0; yd < N_DTYPES; yd++) {
    for (int bd = 0; bd < N_DTYPES; bd++) {
      buffer y = make_buffer(float_dtypes[yd], rows * cols), bias = make_buffer(float_dtypes[bd], cols);
      fill_random(&y, -3.0f, 3.0f);
      fill_random(&bias, -1.0f, 1.0f);
      float *want = malloc(rows * cols * sizeof *want);
      assert_non_null(want);
      for (size_t i = 0; i < rows * cols; i++)
        want[i] = rounded(y.dtype, get_value(&y, i) + get_value(&bias, i % cols));
      assert_int_equal(lamp_add_bias_rows(LAMP_CPU, y.data, y.dtype, bias.data, bias.dtype, rows, cols), LAMP_OK);
      for (size_t i = 0; i < rows * cols; i++) assert_true(same(get_value(&y, i), want[i]));
      free(want);
      free_buffer(&y);
      free_buffer(&bias);
    }
  }
}

/* ---- ReLU ------------------------------------------------------------------------------------ */

/* max(x, 0) with NaN passing through (and -0 -> +0), on the widened value. */
static float naive_relu(float x) { return x <= 0.0f ? 0.0f : x; }

static void relu_forward_matches_naive(void **state) {
  (void)state;
  for (int d = 0; d < N_DTYPES; d++) {
    buffer x = make_buffer(float_dtypes[d], 1003), y = make_buffer(float_dtypes[d], 1003);
    fill_with_specials(&x);
    assert_int_equal(lamp_relu_forward(LAMP_CPU, y.data, x.data, x.dtype, x.n), LAMP_OK);
    for (size_t i = 0; i < x.n; i++) {
      if (!same(get_value(&y, i), naive_relu(get_value(&x, i))))
        fail_msg("%s relu(%a) = %a", lamp_dtype_name(x.dtype), (double)get_value(&x, i), (double)get_value(&y, i));
    }
    /* In place gives the same. */
    assert_int_equal(lamp_relu_forward(LAMP_CPU, x.data, x.data, x.dtype, x.n), LAMP_OK);
    assert_memory_equal(x.data, y.data, x.n * lamp_dtype_size(x.dtype));
    free_buffer(&x);
    free_buffer(&y);
  }
}

static void relu_backward_matches_naive(void **state) {
  (void)state;
  for (int d = 0; d < N_DTYPES; d++) {
    buffer x = make_buffer(float_dtypes[d], 1003), y = make_buffer(float_dtypes[d], 1003);
    buffer dy = make_buffer(float_dtypes[d], 1003), dx = make_buffer(float_dtypes[d], 1003);
    fill_with_specials(&x);
    fill_with_specials(&dy);
    assert_int_equal(lamp_relu_forward(LAMP_CPU, y.data, x.data, x.dtype, x.n), LAMP_OK);
    assert_int_equal(lamp_relu_backward(LAMP_CPU, dx.data, dy.data, y.data, y.dtype, y.n), LAMP_OK);
    for (size_t i = 0; i < y.n; i++) {
      float want = get_value(&y, i) > 0.0f ? get_value(&dy, i) : 0.0f;
      if (!same(get_value(&dx, i), want))
        fail_msg("%s relu' at y=%a, dy=%a gives %a", lamp_dtype_name(y.dtype), (double)get_value(&y, i),
                 (double)get_value(&dy, i), (double)get_value(&dx, i));
    }
    /* dx may alias dy. */
    assert_int_equal(lamp_relu_backward(LAMP_CPU, dy.data, dy.data, y.data, y.dtype, y.n), LAMP_OK);
    assert_memory_equal(dy.data, dx.data, dy.n * lamp_dtype_size(dy.dtype));
    free_buffer(&x);
    free_buffer(&y);
    free_buffer(&dy);
    free_buffer(&dx);
  }
}

/* Every 16-bit pattern, so the bit-level ReLU agrees with the fp32 rule on all NaN payloads,
   infinities, zeros and subnormals. */
static void relu_16bit_all_patterns(void **state) {
  (void)state;
  static uint16_t x[65536], y[65536], dy[65536], dx[65536];
  for (int d = 1; d < N_DTYPES; d++) {
    buffer xb = {x, float_dtypes[d], 65536}, yb = {y, float_dtypes[d], 65536};
    for (uint32_t i = 0; i < 65536; i++) {
      x[i] = (uint16_t)i;
      dy[i] = 0x3c00; /* any marker value */
    }
    assert_int_equal(lamp_relu_forward(LAMP_CPU, y, x, xb.dtype, 65536), LAMP_OK);
    assert_int_equal(lamp_relu_backward(LAMP_CPU, dx, dy, x, xb.dtype, 65536), LAMP_OK);
    for (uint32_t i = 0; i < 65536; i++) {
      float v = get_value(&xb, i);
      if (!same(get_value(&yb, i), naive_relu(v))) fail_msg("%s relu(%04x) = %04x", lamp_dtype_name(xb.dtype), i, y[i]);
      if (dx[i] != (v > 0.0f ? 0x3c00 : 0)) fail_msg("%s relu'(y=%04x) = %04x", lamp_dtype_name(xb.dtype), i, dx[i]);
    }
  }
}

static void relu_errors(void **state) {
  (void)state;
  float x[2] = {0};
  assert_int_equal(lamp_relu_forward(LAMP_CPU, x, x, LAMP_I32, 2), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(), "relu_forward: dtype i32 not supported (expected f32, f16 or bf16)");
  assert_int_equal(lamp_relu_backward(LAMP_CPU, x, x, NULL, LAMP_F32, 2), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "relu_backward: y is NULL");
}

/* ---- fp32 vector updates ------------------------------------------------------------------ */

static void scale_and_axpy_match_naive(void **state) {
  (void)state;
  const size_t n = 1001;
  buffer x = make_buffer(LAMP_F32, n), y = make_buffer(LAMP_F32, n);
  fill_with_specials(&x);
  fill_random(&y, -2.0f, 2.0f);
  float *xs = x.data, *ys = y.data, want[1001];
  for (size_t i = 0; i < n; i++) want[i] = ys[i] + -0.75f * xs[i];
  assert_int_equal(lamp_axpy(LAMP_CPU, ys, xs, n, -0.75f), LAMP_OK);
  for (size_t i = 0; i < n; i++) assert_true(same(ys[i], want[i]));
  for (size_t i = 0; i < n; i++) want[i] = xs[i] * 0.3f;
  assert_int_equal(lamp_scale(LAMP_CPU, xs, n, 0.3f), LAMP_OK);
  for (size_t i = 0; i < n; i++) assert_true(same(xs[i], want[i]));
  /* y += 2 y when x aliases y. */
  for (size_t i = 0; i < n; i++) want[i] = ys[i] + 2.0f * ys[i];
  assert_int_equal(lamp_axpy(LAMP_CPU, ys, ys, n, 2.0f), LAMP_OK);
  for (size_t i = 0; i < n; i++) assert_true(same(ys[i], want[i]));
  free_buffer(&x);
  free_buffer(&y);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static void sum_rows_matches_naive(void **state) {
  (void)state;
  const size_t rows = 37, cols = 1030;
  const float betas[] = {0.0f, 2.0f};
  for (int d = 0; d < N_DTYPES; d++) {
    for (int b = 0; b < 2; b++) {
      buffer dy = make_buffer(float_dtypes[d], rows * cols);
      fill_random(&dy, -1.0f, 1.0f);
      float out[1030];
      for (size_t c = 0; c < cols; c++) out[c] = betas[b] == 0.0f ? NAN : uniform(-1.0f, 1.0f);
      double want[1030], mag[1030];
      for (size_t c = 0; c < cols; c++) {
        double sum = 0.0, abs_sum = 0.0;
        for (size_t r = 0; r < rows; r++) {
          sum += get_value(&dy, r * cols + c);
          abs_sum += fabs(get_value(&dy, r * cols + c));
        }
        double old = betas[b] == 0.0f ? 0.0 : (double)betas[b] * out[c];
        want[c] = old + 0.5 * sum;
        mag[c] = fabs(old) + 0.5 * abs_sum;
      }
      assert_int_equal(lamp_sum_rows(LAMP_CPU, out, dy.data, dy.dtype, rows, cols, 0.5f, betas[b]), LAMP_OK);
      for (size_t c = 0; c < cols; c++) {
        if (!(fabs(out[c] - want[c]) <= 1e-5 * mag[c] + 1e-30))
          fail_msg("%s beta=%g col %zu: %.9g vs %.9g", lamp_dtype_name(dy.dtype), (double)betas[b], c,
                   (double)out[c], want[c]);
      }
      free_buffer(&dy);
    }
  }
}

static void sum_squares_matches_naive(void **state) {
  (void)state;
  const size_t lengths[] = {0, 1, 7, 8, 9, 1001};
  buffer x = make_buffer(LAMP_F32, 1001);
  fill_random(&x, -100.0f, 100.0f);
  const float *xs = x.data;
  for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
    double want = 0.0, got = -1.0;
    for (size_t i = 0; i < lengths[l]; i++) want += (double)xs[i] * xs[i];
    assert_int_equal(lamp_sum_squares(LAMP_CPU, xs, lengths[l], &got), LAMP_OK);
    assert_true(fabs(got - want) <= 1e-13 * want);
  }
  /* Accumulated in double: 1 + 2^-40 is exactly 1 in float, but not here. */
  float tiny[2] = {1.0f, 0x1p-20f};
  double got;
  assert_int_equal(lamp_sum_squares(LAMP_CPU, tiny, 2, &got), LAMP_OK);
  assert_true(got == 1.0 + 0x1p-40);
  free_buffer(&x);
}

static size_t naive_argmax(const buffer *x, size_t first, size_t cols) {
  size_t best = 0;
  for (size_t c = 0; c < cols; c++) {
    float v = get_value(x, first + c), b = get_value(x, first + best);
    if (isnan(b)) break;
    if (v > b || isnan(v)) best = c;
  }
  return best;
}

static void argmax_rows_matches_naive(void **state) {
  (void)state;
  const size_t rows = 6, cols = 1100;
  for (int d = 0; d < N_DTYPES; d++) {
    buffer x = make_buffer(float_dtypes[d], rows * cols);
    fill_random(&x, -5.0f, 5.0f);
    set_value(&x, 0 * cols + 700, 9.0f); /* row 0: a tie, the first wins */
    set_value(&x, 0 * cols + 900, 9.0f);
    for (size_t c = 0; c < cols; c++) set_value(&x, 1 * cols + c, -INFINITY); /* row 1: all -inf */
    set_value(&x, 2 * cols + 600, NAN); /* row 2: NaN counts as the largest */
    set_value(&x, 2 * cols + 601, INFINITY);
    set_value(&x, 3 * cols + 1099, 100.0f); /* row 3: the very last column */
    int32_t out[6];
    assert_int_equal(lamp_argmax_rows(LAMP_CPU, out, x.data, x.dtype, rows, cols), LAMP_OK);
    for (size_t r = 0; r < rows; r++) assert_int_equal(out[r], naive_argmax(&x, r * cols, cols));
    assert_int_equal(out[0], 700);
    assert_int_equal(out[1], 0);
    assert_int_equal(out[2], 600);
    assert_int_equal(out[3], 1099);
    free_buffer(&x);
  }
}

/* ---- cross entropy ------------------------------------------------------------------------- */

/* Two rows by hand: [1, 2, 3] with label 2, and a tie [0, 0, 0] with label 1, whose arg-max is
   the first max (0), so one row of two is correct. */
static void cross_entropy_hand_example(void **state) {
  (void)state;
  const float logits[6] = {1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f};
  const int32_t labels[2] = {2, 1};
  /* lse(1,2,3) = 3 + log(1 + e^-1 + e^-2) = 3.40760596444; lse(0,0,0) = log 3. */
  const double loss0 = 0.40760596444438, loss1 = 1.09861228866811;
  const double p0[3] = {0.09003057317038, 0.24472847105480, 0.66524095577482};
  const double want_grad[6] = {p0[0] / 2, p0[1] / 2, (p0[2] - 1) / 2, 1.0 / 6, -1.0 / 3, 1.0 / 6};
  double loss = 0.0;
  size_t correct = 99;
  float grad[6];
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, labels, 2, 3, 1.0f, &loss, grad,
                                      LAMP_F32, &correct), LAMP_OK);
  assert_true(fabs(loss - (loss0 + loss1) / 2) < 1e-6);
  assert_int_equal(correct, 1);
  for (int i = 0; i < 6; i++) assert_true(fabs(grad[i] - want_grad[i]) < 1e-7);
  /* grad_scale multiplies the gradient (the loss scaler's S), not the reported loss. */
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, labels, 2, 3, 1024.0f, &loss,
                                      grad, LAMP_F32, NULL), LAMP_OK);
  assert_true(fabs(loss - (loss0 + loss1) / 2) < 1e-6);
  for (int i = 0; i < 6; i++) assert_true(fabs(grad[i] - 1024 * want_grad[i]) < 1024 * 1e-7);
  /* Shifting every logit by 1000 changes nothing: the row maximum is subtracted first. */
  const float big[6] = {1001.0f, 1002.0f, 1003.0f, -1000.0f, -1000.0f, -1000.0f};
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, big, LAMP_F32, labels, 2, 3, 1.0f, &loss, grad,
                                      LAMP_F32, NULL), LAMP_OK);
  assert_true(fabs(loss - (loss0 + loss1) / 2) < 1e-6);
  for (int i = 0; i < 6; i++) assert_true(fabs(grad[i] - want_grad[i]) < 1e-7);
}

/* Naive log-softmax in double for one row; returns the row's loss and fills the gradient. */
static double naive_ce_row(const buffer *x, size_t first, size_t classes, int32_t label,
                           double coef, double *grad) {
  double max = -INFINITY, sum = 0.0;
  for (size_t c = 0; c < classes; c++) max = fmax(max, get_value(x, first + c));
  for (size_t c = 0; c < classes; c++) sum += exp(get_value(x, first + c) - max);
  for (size_t c = 0; c < classes; c++)
    grad[c] = (exp(get_value(x, first + c) - max) / sum - (c == (size_t)label)) * coef;
  return log(sum) - (get_value(x, first + (size_t)label) - max);
}

static void check_gradient(lamp_dtype dtype, float got, double want, double coef) {
  double budget = 1e-5 * fabs(want) + 1e-7 * coef; /* fp32 softmax against double */
  if (dtype == LAMP_F32) {
    if (!(fabs(got - want) <= budget)) fail_msg("dlogits f32 %.9g vs %.9g", (double)got, want);
    return;
  }
  /* 16-bit: the rounded naive value, or its neighbour where fp32 error crosses a midpoint. */
  float near = rounded(dtype, (float)want);
  float spacing = dtype == LAMP_F16 ? 0x1p-10f : 0x1p-7f;
  if (!(fabs(got - near) <= fabs(near) * spacing + budget + (dtype == LAMP_F16 ? 0x1p-24 : 0)))
    fail_msg("dlogits %s %.9g vs %.9g", lamp_dtype_name(dtype), (double)got, want);
}

static void cross_entropy_matches_naive_for_all_dtypes(void **state) {
  (void)state;
  const size_t rows = 9, classes = 1030;
  const float grad_scale = 65536.0f;
  for (int ld = 0; ld < N_DTYPES; ld++) {
    for (int gd = 0; gd < N_DTYPES; gd++) {
      buffer x = make_buffer(float_dtypes[ld], rows * classes), g = make_buffer(float_dtypes[gd], rows * classes);
      fill_random(&x, -8.0f, 8.0f);
      int32_t labels[9];
      for (size_t r = 0; r < rows; r++) labels[r] = (int32_t)((r * 331) % classes);
      set_value(&x, 4 * classes + (size_t)labels[4], 50.0f); /* a confident, correct row */
      double loss = 0.0, want_loss = 0.0, coef = grad_scale / (double)rows;
      size_t correct = 0, want_correct = 0;
      double *want_grad = malloc(rows * classes * sizeof *want_grad);
      assert_non_null(want_grad);
      for (size_t r = 0; r < rows; r++) {
        want_loss += naive_ce_row(&x, r * classes, classes, labels[r], coef, want_grad + r * classes);
        want_correct += naive_argmax(&x, r * classes, classes) == (size_t)labels[r];
      }
      want_loss /= (double)rows;
      assert_int_equal(lamp_cross_entropy(LAMP_CPU, x.data, x.dtype, labels, rows, classes, grad_scale,
                                          &loss, g.data, g.dtype, &correct), LAMP_OK);
      assert_true(fabs(loss - want_loss) <= 1e-5 * want_loss);
      assert_int_equal(correct, want_correct);
      assert_true(correct >= 1);
      for (size_t i = 0; i < rows * classes; i++) check_gradient(g.dtype, get_value(&g, i), want_grad[i], coef);
      free(want_grad);
      free_buffer(&x);
      free_buffer(&g);
    }
  }
}

static void cross_entropy_bad_label_is_named(void **state) {
  (void)state;
  float logits[40] = {0}, grad[40];
  int32_t labels[4] = {0, 9, 3, 12};
  double loss = -1.0;
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, labels, 4, 10, 1.0f, &loss, grad,
                                      LAMP_F32, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "cross_entropy: label 12 at row 3 is outside [0, 10)");
  assert_true(loss == -1.0); /* nothing written */
  labels[3] = 0;
  labels[1] = -1;
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, labels, 4, 10, 1.0f, &loss, NULL,
                                      LAMP_F32, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "cross_entropy: label -1 at row 1 is outside [0, 10)");
}

/* An overflowed logit must surface as a non-finite loss, for the loss scaler to see. */
static void cross_entropy_propagates_inf_and_nan(void **state) {
  (void)state;
  float logits[3] = {1.0f, INFINITY, 0.0f};
  int32_t label = 0;
  double loss = 0.0;
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, &label, 1, 3, 1.0f, &loss, NULL,
                                      LAMP_F32, NULL), LAMP_OK);
  assert_false(isfinite(loss));
  logits[1] = NAN;
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, &label, 1, 3, 1.0f, &loss, NULL,
                                      LAMP_F32, NULL), LAMP_OK);
  assert_true(isnan(loss));
}

/* ---- unscale and check -------------------------------------------------------------------- */

static void unscale_clean_input(void **state) {
  (void)state;
  const size_t n = 1001;
  float g[1001], want[1001];
  for (size_t i = 0; i < n; i++) want[i] = (g[i] = uniform(-1e4f, 1e4f)) * 0x1p-16f;
  int found = 0;
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, n, 0x1p-16f, &found), LAMP_OK);
  assert_int_equal(found, 0);
  for (size_t i = 0; i < n; i++) assert_true(same(g[i], want[i]));
  /* Never cleared: a flag raised by an earlier buffer survives a clean one. */
  found = 1;
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, n, 0.5f, &found), LAMP_OK);
  assert_int_equal(found, 1);
  /* inv_scale == 1 leaves the values as they are. */
  memcpy(want, g, sizeof g);
  found = 0;
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, n, 1.0f, &found), LAMP_OK);
  assert_int_equal(found, 0);
  assert_memory_equal(g, want, sizeof g);
}

static void unscale_finds_each_non_finite(void **state) {
  (void)state;
  const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
  const size_t positions[] = {0, 5, 8, 500, 999, 1000}; /* block body, block seam, scalar tail */
  const float inv_scales[] = {0.25f, 1.0f};
  for (size_t b = 0; b < 4; b++)
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++)
      for (size_t s = 0; s < 2; s++) {
        float g[1001];
        for (size_t i = 0; i < 1001; i++) g[i] = 4.0f;
        g[positions[p]] = bad[b];
        int found = 0;
        assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, 1001, inv_scales[s], &found), LAMP_OK);
        assert_int_equal(found, 1);
        for (size_t i = 0; i < 1001; i++) /* every other element is still scaled */
          if (i != positions[p]) assert_true(g[i] == 4.0f * inv_scales[s]);
      }
  /* A product that overflows is caught too (inv_scale > 1 after the scale fell below 1). */
  float g[3] = {1.0f, 3e38f, 2.0f};
  int found = 0;
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, 3, 4.0f, &found), LAMP_OK);
  assert_int_equal(found, 1);
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, 3, 1.0f, NULL), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "unscale_and_check: found_inf is NULL");
}

/* Slabs large enough to be split over two threads (split.c): a non-finite value in either half,
   at the cut or at the very end is found, and every element is scaled exactly once. */
static void unscale_large_slab_both_halves(void **state) {
  (void)state;
  const size_t n = 1000003, cut = (n / 2) & ~(size_t)15;
  const size_t positions[] = {0, cut - 1, cut, n - 1};
  float *g = malloc(n * sizeof *g);
  assert_non_null(g);
  for (size_t p = 0; p <= 4; p++) {
    for (size_t i = 0; i < n; i++) g[i] = (float)(i % 97) - 48.0f;
    if (p < 4) g[positions[p]] = p % 2 ? NAN : -INFINITY;
    for (int s = 0; s < 2; s++) {
      int found = 0;
      assert_int_equal(lamp_unscale_and_check(LAMP_CPU, g, n, s ? 1.0f : 0.5f, &found), LAMP_OK);
      assert_int_equal(found, p < 4);
    }
    for (size_t i = 0; i < n; i++)
      if (p == 4 || i != positions[p]) assert_true(g[i] == ((float)(i % 97) - 48.0f) * 0.5f);
  }
  free(g);
}

/* ---- every kernel refuses a device this process cannot use, by name, with the reason -------- */

#define ASSERT_UNSUPPORTED(call, name)                                                           \
  do {                                                                                           \
    assert_int_equal((call), LAMP_ERR_UNSUPPORTED);                                              \
    assert_string_equal(lamp_last_error(), name ": " LAMP_TEST_CUDA_UNAVAILABLE);                \
  } while (0)

static void other_devices_are_unsupported(void **state) {
  (void)state;
  float f[4] = {0};
  int32_t i32[4] = {0};
  double d = 0.0;
  int found = 0;
  size_t correct = 0;
  ASSERT_UNSUPPORTED(lamp_convert(LAMP_CUDA, f, LAMP_F32, f, LAMP_F32, 1), "convert");
  ASSERT_UNSUPPORTED(lamp_fill(LAMP_CUDA, f, LAMP_F32, 1, 0.0f), "fill");
  ASSERT_UNSUPPORTED(lamp_add_bias_rows(LAMP_CUDA, f, LAMP_F32, f, LAMP_F32, 1, 1), "add_bias_rows");
  ASSERT_UNSUPPORTED(lamp_sum_rows(LAMP_CUDA, f, f, LAMP_F32, 1, 1, 1.0f, 0.0f), "sum_rows");
  ASSERT_UNSUPPORTED(lamp_relu_forward(LAMP_CUDA, f, f, LAMP_F32, 1), "relu_forward");
  ASSERT_UNSUPPORTED(lamp_relu_backward(LAMP_CUDA, f, f, f, LAMP_F32, 1), "relu_backward");
  ASSERT_UNSUPPORTED(lamp_cross_entropy(LAMP_CUDA, f, LAMP_F32, i32, 1, 1, 1.0f, &d, NULL, LAMP_F32, &correct),
                     "cross_entropy");
  ASSERT_UNSUPPORTED(lamp_argmax_rows(LAMP_CUDA, i32, f, LAMP_F32, 1, 1), "argmax_rows");
  ASSERT_UNSUPPORTED(lamp_unscale_and_check(LAMP_CUDA, f, 1, 1.0f, &found), "unscale_and_check");
  ASSERT_UNSUPPORTED(lamp_scale(LAMP_CUDA, f, 1, 1.0f), "scale");
  ASSERT_UNSUPPORTED(lamp_axpy(LAMP_CUDA, f, f, 1, 1.0f), "axpy");
  ASSERT_UNSUPPORTED(lamp_sum_squares(LAMP_CUDA, f, 1, &d), "sum_squares");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(convert_matches_scalar_rounding),
      cmocka_unit_test(convert_same_dtype_copies_bits_even_in_place),
      cmocka_unit_test(convert_errors),
      cmocka_unit_test(fill_rounds_once_per_dtype),
      cmocka_unit_test(add_bias_rows_matches_naive),
      cmocka_unit_test(relu_forward_matches_naive),
      cmocka_unit_test(relu_backward_matches_naive),
      cmocka_unit_test(relu_16bit_all_patterns),
      cmocka_unit_test(relu_errors),
      cmocka_unit_test(scale_and_axpy_match_naive),
      cmocka_unit_test(sum_rows_matches_naive),
      cmocka_unit_test(sum_squares_matches_naive),
      cmocka_unit_test(argmax_rows_matches_naive),
      cmocka_unit_test(cross_entropy_hand_example),
      cmocka_unit_test(cross_entropy_matches_naive_for_all_dtypes),
      cmocka_unit_test(cross_entropy_bad_label_is_named),
      cmocka_unit_test(cross_entropy_propagates_inf_and_nan),
      cmocka_unit_test(unscale_clean_input),
      cmocka_unit_test(unscale_finds_each_non_finite),
      cmocka_unit_test(unscale_large_slab_both_halves),
      cmocka_unit_test(other_devices_are_unsupported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
