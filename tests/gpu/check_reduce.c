/*
** The reductions on the device against the CPU. A device may sum in another order, so these are
** compared within bounds (u = 2^-24, fp32's unit roundoff):
**
**   sum_rows      |alpha| (2 rows + 2) u sum_r |dy_rc| + 4 u |beta out_c| + ulp(result): each
**                 side's fp32 sum of `rows` terms is within rows * u * sum|dy| of the exact one;
**   sum_squares   2 n 2^-53 sum x^2: backend.h says the sum is accumulated in double (the squares
**                 of floats are exact in double), so a device summing in fp32 fails here;
**   cross_entropy the mean loss within the mean over rows of u (2 classes + 8 + 4 (|z_label| +
**                 log(classes) + 1)): an fp32 sum of `classes` exponentials, exp and log within a
**                 few ulps on each side; dlogits within coef (p (2 classes + 8) u + 2 u) + ulp_out,
**                 coef = grad_scale / rows, p the softmax probability; the correct count exactly;
**   argmax_rows   exactly (first index on ties, NaN the largest).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_ops.h"

#define U 0x1p-24

static const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};

static const size_t row_shapes[][2] = {{1, 1}, {3, 10}, {128, 10}, {33, 1000}, {7, 4099}, {4096, 4096}, {65536, 10}};
#define SMALL_ROW_SHAPES 5
#define ROW_SHAPES(run) ((run)->full ? sizeof row_shapes / sizeof *row_shapes : SMALL_ROW_SHAPES)

/* ---- sum_rows -------------------------------------------------------------------------------- */

typedef struct sum_rows_args {
  lamp_dtype dt;
  size_t rows, cols;
  float alpha, beta;
} sum_rows_args;

static lamp_status call_sum_rows(lamp_device d, void *const *p, const void *args) {
  const sum_rows_args *a = args;
  return lamp_sum_rows(d, p[0], p[1], a->dt, a->rows, a->cols, a->alpha, a->beta);
}

static void sum_rows_case(check_run *run, check_line *line, lamp_dtype dt, size_t rows, size_t cols, float alpha,
                          float beta) {
  sum_rows_args a = {dt, rows, cols, alpha, beta};
  void *dy = check_random(run, dt, rows * cols, 0, 0);
  float *out = check_random(run, LAMP_F32, cols, 0, 0);
  check_case c = {.op = "sum_rows", .call = call_sum_rows, .args = &a};
  check_operand_add(&c, ELEM_F32, cols, beta != 0 ? ROLE_INOUT : ROLE_OUT, beta != 0 ? out : NULL);
  check_operand_add(&c, check_elem_of(dt), rows * cols, ROLE_IN, dy);
  check_line_shape(line, "%zux%zu", rows, cols);
  if (check_case_run(run, &c) != 0) {
    check_line_fail(line, c.why);
  } else {
    double *bound = malloc(cols * sizeof *bound);
    for (size_t j = 0; j < cols; j++) {
      double s = 0;
      for (size_t r = 0; r < rows; r++) s += fabs(check_get(check_elem_of(dt), dy, r * cols + j));
      double acc = fabs(alpha) * (2.0 * (double)rows + 2.0) * U * s + (beta != 0 ? 4.0 * U * fabs(beta * out[j]) : 0);
      bound[j] = acc + check_ulp(LAMP_F32, fabs(check_get(ELEM_F32, c.x[0].cpu, j)) + acc);
    }
    check_bounded(line, &c, 0, bound);
    free(bound);
  }
  check_case_free(&c);
  free(dy);
  free(out);
}

static void check_sum_rows(check_run *run) {
  for (int d = 0; d < 3; d++)
    for (int accumulate = 0; accumulate < 2; accumulate++) {
      check_line line;
      check_line_begin(&line, 0, "sum_rows %s%s", check_dtype_name(dtypes[d]), accumulate ? " beta=1" : "");
      for (size_t s = 0; s < ROW_SHAPES(run); s++)
        sum_rows_case(run, &line, dtypes[d], row_shapes[s][0], row_shapes[s][1], accumulate ? 0.5f : 1.0f,
                      accumulate ? 1.0f : 0.0f);
      check_line_end(run, &line);
    }
}

/* ---- sum_squares ----------------------------------------------------------------------------- */

typedef struct squares_args {
  size_t n;
} squares_args;

static lamp_status call_squares(lamp_device d, void *const *p, const void *args) {
  const squares_args *a = args;
  return lamp_sum_squares(d, p[0], a->n, p[1]);
}

static void check_sum_squares(check_run *run) {
  static const size_t sizes[] = {1, 5, 18, 1000, 4099, 65537, (1u << 22) + 3};
  check_line line;
  check_line_begin(&line, 0, "sum_squares");
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes - (run->full ? 0 : 1); i++) {
    size_t n = sizes[i];
    squares_args a = {n};
    float *x = check_alloc(ELEM_F32, n);
    double s = 0;
    for (size_t j = 0; j < n; j++) {
      x[j] = check_wide(run, 20);
      s += (double)x[j] * x[j];
    }
    check_case c = {.op = "sum_squares", .call = call_squares, .args = &a};
    check_operand_add(&c, ELEM_F32, n, ROLE_IN, x);
    check_operand_add(&c, ELEM_F64, 1, ROLE_OUT, NULL);
    check_line_shape(&line, "%zu", n);
    if (check_case_run(run, &c) != 0) {
      check_line_fail(&line, c.why);
    } else {
      double bound = 2.0 * (double)n * 0x1p-53 * s;
      check_bounded(&line, &c, 1, &bound);
    }
    check_case_free(&c);
    free(x);
  }
  check_line_end(run, &line);
}

/* ---- cross_entropy --------------------------------------------------------------------------- */

typedef struct ce_args {
  lamp_dtype lt, dt;
  size_t rows, classes;
  float grad_scale;
} ce_args;

static lamp_status call_ce(lamp_device d, void *const *p, const void *args) {
  const ce_args *a = args;
  return lamp_cross_entropy(d, p[0], a->lt, p[1], a->rows, a->classes, a->grad_scale, p[2], p[3], a->dt, p[4]);
}

/* The bounds of the loss (one value) and of dlogits, from the logits and the CPU's results. */
static void ce_bounds(const ce_args *a, const void *logits, const int32_t *labels, const void *dref, double *loss_bound,
                      double *dbound) {
  double coef = (double)a->grad_scale / (double)a->rows, total = 0;
  check_elem le = check_elem_of(a->lt), de = check_elem_of(a->dt);
  for (size_t r = 0; r < a->rows; r++) {
    double max = -INFINITY;
    for (size_t j = 0; j < a->classes; j++) max = fmax(max, check_get(le, logits, r * a->classes + j));
    double z_label = fabs(check_get(le, logits, r * a->classes + (size_t)labels[r]) - max);
    total += U * (2.0 * (double)a->classes + 8.0 + 4.0 * (z_label + log((double)a->classes) + 1.0));
    for (size_t j = 0; dbound != NULL && j < a->classes; j++) {
      double ref = check_get(de, dref, r * a->classes + j);
      double p = fmin(1.0, fabs(ref / coef) + ((size_t)labels[r] == j));
      double acc = fabs(coef) * (p * (2.0 * (double)a->classes + 8.0) * U + 2.0 * U);
      dbound[r * a->classes + j] = acc + check_ulp(a->dt, fabs(ref) + acc);
    }
  }
  *loss_bound = total / (double)a->rows;
}

static void ce_case(check_run *run, check_line *line, const ce_args *a, int with_grad, int with_correct) {
  size_t n = a->rows * a->classes;
  void *logits = check_alloc(check_elem_of(a->lt), n);
  for (size_t i = 0; i < n; i++) check_set(check_elem_of(a->lt), logits, i, 8.0 * check_uniform(run));
  int32_t *labels = check_alloc(ELEM_I32, a->rows);
  for (size_t r = 0; r < a->rows; r++) labels[r] = (int32_t)lamp_rng_below(&run->rng, a->classes);
  check_case c = {.op = "cross_entropy", .call = call_ce, .args = a};
  check_operand_add(&c, check_elem_of(a->lt), n, ROLE_IN, logits);
  check_operand_add(&c, ELEM_I32, a->rows, ROLE_IN, labels);
  check_operand_add(&c, ELEM_F64, 1, ROLE_OUT, NULL);
  int d = check_operand_add(&c, check_elem_of(a->dt), n, ROLE_OUT, NULL);
  c.x[d].absent = !with_grad;
  int k = check_operand_add(&c, ELEM_SIZE, 1, ROLE_OUT, NULL);
  c.x[k].absent = !with_correct;
  check_line_shape(line, "%zux%zu", a->rows, a->classes);
  if (check_case_run(run, &c) != 0) {
    check_line_fail(line, c.why);
  } else {
    double loss_bound, *dbound = with_grad ? malloc(n * sizeof *dbound) : NULL;
    ce_bounds(a, logits, labels, with_grad ? c.x[d].cpu : NULL, &loss_bound, dbound);
    check_bounded(line, &c, 2, &loss_bound);
    if (with_grad) check_bounded(line, &c, d, dbound);
    if (with_correct) {
      double exact = 0;
      check_bounded(line, &c, k, &exact);
    }
    free(dbound);
  }
  check_case_free(&c);
  free(logits);
  free(labels);
}

static void check_cross_entropy(check_run *run) {
  for (int l = 0; l < 3; l++)
    for (int g = 0; g < 3; g++) {
      check_line line;
      check_line_begin(&line, 0, "cross_entropy %s->%s", check_dtype_name(dtypes[l]), check_dtype_name(dtypes[g]));
      for (size_t s = 0; s < ROW_SHAPES(run); s++) {
        if (row_shapes[s][1] == 4096) continue; /* 4096 classes x 4096 rows adds nothing to 65536 x 10 */
        ce_args a = {dtypes[l], dtypes[g], row_shapes[s][0], row_shapes[s][1], 1.0f};
        ce_case(run, &line, &a, 1, 1);
        a.grad_scale = 65536.0f; /* the fp16 scaler's first scale */
        ce_case(run, &line, &a, 1, g == 0);
        if (g == 0) ce_case(run, &line, &a, 0, 1); /* evaluation: loss and count only */
      }
      check_line_end(run, &line);
    }
}

/* ---- argmax_rows ----------------------------------------------------------------------------- */

typedef struct argmax_args {
  lamp_dtype dt;
  size_t rows, cols;
} argmax_args;

static lamp_status call_argmax(lamp_device d, void *const *p, const void *args) {
  const argmax_args *a = args;
  return lamp_argmax_rows(d, p[0], p[1], a->dt, a->rows, a->cols);
}

/* Few distinct values (ties everywhere), and a NaN or -inf in some rows. */
static void check_argmax(check_run *run) {
  for (int d = 0; d < 3; d++) {
    check_line line;
    check_line_begin(&line, 1, "argmax_rows %s", check_dtype_name(dtypes[d]));
    for (size_t s = 0; s < ROW_SHAPES(run); s++) {
      argmax_args a = {dtypes[d], row_shapes[s][0], row_shapes[s][1]};
      size_t n = a.rows * a.cols;
      check_elem e = check_elem_of(a.dt);
      void *x = check_alloc(e, n);
      for (size_t i = 0; i < n; i++) check_set(e, x, i, floor(4.0 * check_uniform(run)));
      for (size_t r = 0; r < a.rows; r += 3)
        check_set(e, x, r * a.cols + lamp_rng_below(&run->rng, a.cols), r % 2 ? NAN : -INFINITY);
      check_case c = {.op = "argmax_rows", .call = call_argmax, .args = &a};
      check_operand_add(&c, ELEM_I32, a.rows, ROLE_OUT, NULL);
      check_operand_add(&c, e, n, ROLE_IN, x);
      check_line_shape(&line, "%zux%zu", a.rows, a.cols);
      if (check_case_run(run, &c) != 0)
        check_line_fail(&line, c.why);
      else
        check_bitwise(&line, &c, 0);
      check_case_free(&c);
      free(x);
    }
    check_line_end(run, &line);
  }
}

void check_reductions(check_run *run) {
  if (check_selected(run, "sum_rows")) check_sum_rows(run);
  if (check_selected(run, "sum_squares")) check_sum_squares(run);
  if (check_selected(run, "cross_entropy")) check_cross_entropy(run);
  if (check_selected(run, "argmax_rows")) check_argmax(run);
}
