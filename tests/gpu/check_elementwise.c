/*
** The elementwise kernels on the device against the CPU, bit for bit: each computes one
** correctly rounded fp32 operation per element (or none) and rounds once to its output dtype,
** so any two devices that follow backend.h agree exactly. That includes axpy: y + alpha * x
** is a rounded product, then a rounded sum; a device that fuses them (an FMA) differs in the
** last bit and fails here. The inputs start with the values that break kernels (signed zeros,
** infinities, NaN, 16-bit overflow, subnormals, ties; check_random) and then spread widely.
** Any NaN matches any NaN (payloads are not part of the contract); -0 does not match +0.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_ops.h"

static const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};
#define FOR_DTYPES(d) for (size_t d##_i = 0; d##_i < 3 && ((d = dtypes[d##_i]), 1); d##_i++)

static const size_t small_sizes[] = {1, 5, 18, 1000, 4099, 65537};
static const size_t large_sizes[] = {(1u << 22) + 3};

static size_t size_count(const check_run *run) {
  return sizeof small_sizes / sizeof *small_sizes + (run->full ? sizeof large_sizes / sizeof *large_sizes : 0);
}
static size_t size_at(size_t i) {
  size_t n_small = sizeof small_sizes / sizeof *small_sizes;
  return i < n_small ? small_sizes[i] : large_sizes[i - n_small];
}
/* Every element count of this run: the small ones, and with --full the large ones. */
#define FOR_SIZES(run, n) for (size_t n##_i = 0, n = 0; n##_i < size_count(run) && ((n = size_at(n##_i)), 1); n##_i++)

#define WIDE 30 /* spread of the random values: 2^-30 .. 2^30, past f16's range both ways */

/* Runs a case and compares its outputs bit for bit. */
static void run_bitwise(check_run *run, check_line *line, check_case *c) {
  if (check_case_run(run, c) != 0)
    check_line_fail(line, c->why);
  else
    for (int i = 0; i < c->n; i++)
      if (c->x[i].role != ROLE_IN && !c->x[i].absent) check_bitwise(line, c, i);
  check_case_free(c);
}

/* ---- convert, fill --------------------------------------------------------------------------- */

typedef struct conv_args {
  lamp_dtype dst, src;
  size_t n;
  float value;
} conv_args;

static lamp_status call_convert(lamp_device d, void *const *p, const void *args) {
  const conv_args *a = args;
  return lamp_convert(d, p[0], a->dst, p[1], a->src, a->n);
}

static lamp_status call_fill(lamp_device d, void *const *p, const void *args) {
  const conv_args *a = args;
  return lamp_fill(d, p[0], a->dst, a->n, a->value);
}

static void check_convert(check_run *run) {
  lamp_dtype dst, src;
  FOR_DTYPES(src) FOR_DTYPES(dst) {
    check_line line;
    check_line_begin(&line, 1, "convert %s->%s", check_dtype_name(src), check_dtype_name(dst));
    FOR_SIZES(run, n) {
      conv_args a = {dst, src, n, 0};
      void *x = check_random(run, src, n, 1, WIDE);
      check_case c = {.op = "convert", .call = call_convert, .args = &a};
      check_operand_add(&c, check_elem_of(dst), n, ROLE_OUT, NULL);
      check_operand_add(&c, check_elem_of(src), n, ROLE_IN, x);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(x);
    }
    check_line_end(run, &line);
  }
}

static void check_fill(check_run *run) {
  static const float values[] = {0.0f, -0.0f, 1.0f / 3.0f, 70000.0f, 1e-8f, -2.5e38f};
  lamp_dtype dt;
  FOR_DTYPES(dt) {
    check_line line;
    check_line_begin(&line, 1, "fill %s", check_dtype_name(dt));
    FOR_SIZES(run, n) {
      for (size_t v = 0; v < sizeof values / sizeof *values; v++) {
        conv_args a = {dt, dt, n, values[v]};
        check_case c = {.op = "fill", .call = call_fill, .args = &a};
        check_operand_add(&c, check_elem_of(dt), n, ROLE_OUT, NULL);
        check_line_shape(&line, "%zu", n);
        run_bitwise(run, &line, &c);
      }
    }
    check_line_end(run, &line);
  }
}

/* ---- add_bias_rows, relu forward and backward ------------------------------------------------ */

typedef struct rows_args {
  lamp_dtype y, x;
  size_t rows, cols;
} rows_args;

static const size_t row_shapes[][2] = {{1, 1}, {3, 10}, {128, 10}, {33, 1000}, {7, 4099}, {4096, 4096}, {65536, 10}};
#define SMALL_ROW_SHAPES 5
#define ROW_SHAPES(run) ((run)->full ? sizeof row_shapes / sizeof *row_shapes : SMALL_ROW_SHAPES)

static lamp_status call_bias(lamp_device d, void *const *p, const void *args) {
  const rows_args *a = args;
  return lamp_add_bias_rows(d, p[0], a->y, p[1], a->x, a->rows, a->cols);
}

static void check_bias(check_run *run) {
  lamp_dtype y, b;
  FOR_DTYPES(y) FOR_DTYPES(b) {
    check_line line;
    check_line_begin(&line, 1, "add_bias_rows y %s bias %s", check_dtype_name(y), check_dtype_name(b));
    for (size_t s = 0; s < ROW_SHAPES(run); s++) {
      rows_args a = {y, b, row_shapes[s][0], row_shapes[s][1]};
      void *yv = check_random(run, y, a.rows * a.cols, 1, 8), *bv = check_random(run, b, a.cols, 1, 8);
      check_case c = {.op = "add_bias_rows", .call = call_bias, .args = &a};
      check_operand_add(&c, check_elem_of(y), a.rows * a.cols, ROLE_INOUT, yv);
      check_operand_add(&c, check_elem_of(b), a.cols, ROLE_IN, bv);
      check_line_shape(&line, "%zux%zu", a.rows, a.cols);
      run_bitwise(run, &line, &c);
      free(yv);
      free(bv);
    }
    check_line_end(run, &line);
  }
}

typedef struct relu_args {
  lamp_dtype dt;
  size_t n;
  int alias; /* the output is the (first) input */
} relu_args;

static lamp_status call_relu(lamp_device d, void *const *p, const void *args) {
  const relu_args *a = args;
  return lamp_relu_forward(d, p[0], a->alias ? p[0] : p[1], a->dt, a->n);
}

static lamp_status call_relu_back(lamp_device d, void *const *p, const void *args) {
  const relu_args *a = args;
  return lamp_relu_backward(d, p[0], a->alias ? p[0] : p[1], p[2], a->dt, a->n);
}

static void check_relu(check_run *run, int backward) {
  lamp_dtype dt;
  FOR_DTYPES(dt) for (int alias = 0; alias < 2; alias++) {
    check_line line;
    check_line_begin(&line, 1, "relu_%s %s%s", backward ? "backward" : "forward", check_dtype_name(dt),
                     alias ? " in place" : "");
    FOR_SIZES(run, n) {
      relu_args a = {dt, n, alias};
      void *x = check_random(run, dt, n, 1, WIDE), *y = check_random(run, dt, n, 1, 4);
      check_case c = {.op = backward ? "relu_backward" : "relu_forward",
                      .call = backward ? call_relu_back : call_relu, .args = &a};
      check_operand_add(&c, check_elem_of(dt), n, alias ? ROLE_INOUT : ROLE_OUT, alias ? x : NULL);
      check_operand_add(&c, check_elem_of(dt), n, ROLE_IN, x);
      if (backward) check_operand_add(&c, check_elem_of(dt), n, ROLE_IN, y);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(x);
      free(y);
    }
    check_line_end(run, &line);
  }
}

/* ---- the fp32 vector updates ----------------------------------------------------------------- */
/* unscale_and_check, round_through, accumulate_rounded, round_stochastic, scale, axpy */

typedef struct vec_args {
  size_t n;
  float alpha;
  lamp_dtype via;
  int alias;
} vec_args;

static lamp_status call_unscale(lamp_device d, void *const *p, const void *args) {
  const vec_args *a = args;
  return lamp_unscale_and_check(d, p[0], a->n, a->alpha, p[1]);
}
static lamp_status call_round(lamp_device d, void *const *p, const void *args) {
  const vec_args *a = args;
  return lamp_round_through(d, p[0], a->alias ? p[0] : p[1], a->via, a->n);
}
static lamp_status call_accumulate(lamp_device d, void *const *p, const void *args) {
  const vec_args *a = args;
  return lamp_accumulate_rounded(d, p[0], p[1], a->via, a->n);
}
static lamp_status call_scale(lamp_device d, void *const *p, const void *args) {
  const vec_args *a = args;
  return lamp_scale(d, p[0], a->n, a->alpha);
}
static lamp_status call_axpy(lamp_device d, void *const *p, const void *args) {
  const vec_args *a = args;
  return lamp_axpy(d, p[0], p[1], a->n, a->alpha);
}

/* The gradients of an fp16 step: finite values, or one inf / NaN at a random place. */
static void check_unscale(check_run *run) {
  static const char *kinds[] = {"finite", "with inf", "with NaN"};
  for (int kind = 0; kind < 3; kind++) {
    check_line line;
    check_line_begin(&line, 1, "unscale_and_check %s", kinds[kind]);
    FOR_SIZES(run, n) {
      vec_args a = {n, 1.0f / 65536.0f, LAMP_F32, 0};
      float *g = check_alloc(ELEM_F32, n);
      for (size_t i = 0; i < n; i++) g[i] = check_wide(run, 20);
      if (kind) g[lamp_rng_below(&run->rng, n)] = kind == 1 ? -INFINITY : NAN;
      int flag = 0;
      check_case c = {.op = "unscale_and_check", .call = call_unscale, .args = &a};
      check_operand_add(&c, ELEM_F32, n, ROLE_INOUT, g);
      check_operand_add(&c, ELEM_I32, 1, ROLE_INOUT, &flag); /* callers zero it first */
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(g);
    }
    check_line_end(run, &line);
  }
}

static void check_rounding(check_run *run, int accumulate) {
  lamp_dtype via;
  FOR_DTYPES(via) for (int alias = 0; alias < 2 - accumulate; alias++) {
    check_line line;
    check_line_begin(&line, 1, "%s via %s%s", accumulate ? "accumulate_rounded" : "round_through",
                     check_dtype_name(via), alias ? " in place" : "");
    FOR_SIZES(run, n) {
      vec_args a = {n, 0, via, alias};
      float *src = check_random(run, LAMP_F32, n, 1, WIDE), *dst = check_random(run, LAMP_F32, n, 1, 4);
      check_case c = {.op = accumulate ? "accumulate_rounded" : "round_through",
                      .call = accumulate ? call_accumulate : call_round, .args = &a};
      if (accumulate || alias)
        check_operand_add(&c, ELEM_F32, n, ROLE_INOUT, alias ? src : dst);
      else
        check_operand_add(&c, ELEM_F32, n, ROLE_OUT, NULL);
      check_operand_add(&c, ELEM_F32, n, ROLE_IN, src);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(src);
      free(dst);
    }
    check_line_end(run, &line);
  }
}

/* round_stochastic: the device draws the CPU's words (seed, stream, element) and rounds as it does. */
typedef struct stochastic_args {
  size_t n;
  lamp_dtype dtype;
  uint64_t seed, stream;
} stochastic_args;

static lamp_status call_stochastic(lamp_device d, void *const *p, const void *args) {
  const stochastic_args *a = args;
  return lamp_round_stochastic(d, p[0], a->dtype, p[1], a->n, a->seed, a->stream);
}

static void check_stochastic(check_run *run) {
  static const lamp_dtype halves[] = {LAMP_F16, LAMP_BF16};
  for (int h = 0; h < 2; h++) {
    check_line line;
    check_line_begin(&line, 1, "round_stochastic f32->%s", check_dtype_name(halves[h]));
    FOR_SIZES(run, n) {
      stochastic_args a = {n, halves[h], lamp_rng_next(&run->rng), lamp_rng_next(&run->rng)};
      float *src = check_random(run, LAMP_F32, n, 1, WIDE);
      check_case c = {.op = "round_stochastic", .call = call_stochastic, .args = &a};
      check_operand_add(&c, halves[h] == LAMP_F16 ? ELEM_F16 : ELEM_BF16, n, ROLE_OUT, NULL);
      check_operand_add(&c, ELEM_F32, n, ROLE_IN, src);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(src);
    }
    check_line_end(run, &line);
  }
}

static void check_scale_axpy(check_run *run, int axpy) {
  check_line line;
  check_line_begin(&line, 1, "%s", axpy ? "axpy" : "scale");
  FOR_SIZES(run, n) {
    vec_args a = {n, check_wide(run, 3), LAMP_F32, 0};
    float *y = check_random(run, LAMP_F32, n, 1, 20), *x = check_random(run, LAMP_F32, n, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = check_wide(run, 20);
    check_case c = {.op = axpy ? "axpy" : "scale", .call = axpy ? call_axpy : call_scale, .args = &a};
    check_operand_add(&c, ELEM_F32, n, ROLE_INOUT, y);
    if (axpy) check_operand_add(&c, ELEM_F32, n, ROLE_IN, x);
    check_line_shape(&line, "%zu", n);
    run_bitwise(run, &line, &c);
    free(y);
    free(x);
  }
  check_line_end(run, &line);
}

/* ---- add_into, add (+ relu), apply_mask ------------------------------------------------------ */

typedef struct add_args {
  lamp_dtype y, a, b;
  size_t n;
  int relu, alias;
  float scale;
} add_args;

static lamp_status call_add_into(lamp_device d, void *const *p, const void *args) {
  const add_args *a = args;
  return lamp_add_into(d, p[0], a->y, p[1], a->a, a->n);
}
static lamp_status call_add(lamp_device d, void *const *p, const void *args) {
  const add_args *a = args;
  return lamp_add(d, p[0], a->y, a->alias ? p[0] : p[1], a->a, p[2], a->b, a->n, a->relu);
}
static lamp_status call_mask(lamp_device d, void *const *p, const void *args) {
  const add_args *a = args;
  return lamp_apply_mask(d, p[0], a->y, a->alias ? p[0] : p[1], a->a, p[2], a->scale, a->n);
}

static void check_add_into(check_run *run) {
  lamp_dtype y, x;
  FOR_DTYPES(y) FOR_DTYPES(x) {
    check_line line;
    check_line_begin(&line, 1, "add_into y %s x %s", check_dtype_name(y), check_dtype_name(x));
    FOR_SIZES(run, n) {
      add_args a = {y, x, x, n, 0, 0, 0};
      void *yv = check_random(run, y, n, 1, 12), *xv = check_random(run, x, n, 1, 12);
      check_case c = {.op = "add_into", .call = call_add_into, .args = &a};
      check_operand_add(&c, check_elem_of(y), n, ROLE_INOUT, yv);
      check_operand_add(&c, check_elem_of(x), n, ROLE_IN, xv);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(yv);
      free(xv);
    }
    check_line_end(run, &line);
  }
}

/* add: each dtype alone (also in place, y == a), and two mixes; with and without the ReLU. */
static void check_add(check_run *run) {
  static const lamp_dtype mixes[][3] = {{LAMP_F32, LAMP_F32, LAMP_F32},   {LAMP_F16, LAMP_F16, LAMP_F16},
                                        {LAMP_BF16, LAMP_BF16, LAMP_BF16}, {LAMP_F32, LAMP_F16, LAMP_BF16},
                                        {LAMP_BF16, LAMP_F32, LAMP_F16}};
  for (size_t m = 0; m < sizeof mixes / sizeof *mixes; m++)
    for (int relu = 0; relu < 2; relu++)
      for (int alias = 0; alias < (m < 3 ? 2 : 1); alias++) {
        const lamp_dtype *t = mixes[m];
        check_line line;
        check_line_begin(&line, 1, "add%s y %s a %s b %s%s", relu ? "+relu" : "", check_dtype_name(t[0]),
                         check_dtype_name(t[1]), check_dtype_name(t[2]), alias ? " y=a" : "");
        FOR_SIZES(run, n) {
          add_args a = {t[0], t[1], t[2], n, relu, alias, 0};
          void *av = check_random(run, t[1], n, 1, 12), *bv = check_random(run, t[2], n, 1, 12);
          check_case c = {.op = "add", .call = call_add, .args = &a};
          check_operand_add(&c, check_elem_of(t[0]), n, alias ? ROLE_INOUT : ROLE_OUT, alias ? av : NULL);
          check_operand_add(&c, check_elem_of(t[1]), n, ROLE_IN, av);
          check_operand_add(&c, check_elem_of(t[2]), n, ROLE_IN, bv);
          check_line_shape(&line, "%zu", n);
          run_bitwise(run, &line, &c);
          free(av);
          free(bv);
        }
        check_line_end(run, &line);
      }
}

static void check_mask(check_run *run) {
  lamp_dtype y, x;
  FOR_DTYPES(y) FOR_DTYPES(x) for (int alias = 0; alias < (x == y ? 2 : 1); alias++) {
    check_line line;
    check_line_begin(&line, 1, "apply_mask y %s x %s%s", check_dtype_name(y), check_dtype_name(x), alias ? " y=x" : "");
    FOR_SIZES(run, n) {
      add_args a = {y, x, x, n, 0, alias, 1.0f / 0.9f};
      void *xv = check_random(run, x, n, 1, 12);
      uint8_t *mask = check_alloc(ELEM_U8, n);
      for (size_t i = 0; i < n; i++) mask[i] = lamp_rng_below(&run->rng, 10) != 0;
      check_case c = {.op = "apply_mask", .call = call_mask, .args = &a};
      check_operand_add(&c, check_elem_of(y), n, alias ? ROLE_INOUT : ROLE_OUT, alias ? xv : NULL);
      check_operand_add(&c, check_elem_of(x), n, ROLE_IN, xv);
      check_operand_add(&c, ELEM_U8, n, ROLE_IN, mask);
      check_line_shape(&line, "%zu", n);
      run_bitwise(run, &line, &c);
      free(xv);
      free(mask);
    }
    check_line_end(run, &line);
  }
}

void check_elementwise(check_run *run) {
  if (check_selected(run, "convert")) check_convert(run);
  if (check_selected(run, "fill")) check_fill(run);
  if (check_selected(run, "add_bias_rows")) check_bias(run);
  if (check_selected(run, "relu_forward")) check_relu(run, 0);
  if (check_selected(run, "relu_backward")) check_relu(run, 1);
  if (check_selected(run, "unscale_and_check")) check_unscale(run);
  if (check_selected(run, "round_through")) check_rounding(run, 0);
  if (check_selected(run, "accumulate_rounded")) check_rounding(run, 1);
  if (check_selected(run, "round_stochastic")) check_stochastic(run);
  if (check_selected(run, "scale")) check_scale_axpy(run, 0);
  if (check_selected(run, "axpy")) check_scale_axpy(run, 1);
  if (check_selected(run, "add_into")) check_add_into(run);
  if (check_selected(run, "add")) check_add(run);
  if (check_selected(run, "apply_mask")) check_mask(run);
}
