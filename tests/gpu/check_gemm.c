/*
** lamp_gemm on the device against the CPU. The reference is the CPU backend's sgemm over the
** operands widened to fp32 (exact), computed for every row of C, or for 64 rows spread over C
** when m*n*k is above 2^31 (the reference of a 4096^3 product on every row would cost the CPU
** more than the whole check may take; --sample-above=N moves that limit). The device's result must lie within
**
**     |alpha| * 2k * 2^-24 * sum_l |a_il| |b_lj|  +  2 * 2^-24 * |beta c_ij|  +  ulp_out(|ref| + that)
**
** of it: both sides accumulate k products in fp32 in some order (each within k * 2^-24 * sum|a||b|
** of the exact value), and the device rounds once more to C's dtype. The sums of |a||b| come
** from a second CPU product over the absolute values. C is poisoned (NaN) when beta == 0: the
** contract says C is not read then.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_ops.h"

typedef struct gemm_args {
  int ta, tb;
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  lamp_dtype at, bt, ct;
} gemm_args;

static lamp_status call_gemm(lamp_device d, void *const *p, const void *args) {
  const gemm_args *g = args;
  return lamp_gemm(d, g->ta, g->tb, g->m, g->n, g->k, g->alpha, p[0], g->at, g->lda, p[1], g->bt, g->ldb, g->beta,
                   p[2], g->ct, g->ldc);
}

typedef struct shape {
  size_t m, n, k, pad; /* pad: extra elements on every leading dimension */
} shape;

/* Small shapes run everywhere (the simulated device included); the large ones with --full. */
static const shape small_shapes[] = {
    {1, 1, 1, 0}, {1, 7, 3, 0}, {7, 1, 5, 2}, {5, 3, 1, 0}, {17, 33, 65, 3}, {64, 64, 64, 0}, {128, 10, 256, 0}, {127, 129, 131, 5},
};
static const shape large_shapes[] = {
    {128, 1024, 784, 0}, {784, 1024, 128, 0}, {1024, 1024, 1024, 0}, {4096, 10, 4096, 0}, {4096, 4096, 784, 0}, {4096, 4096, 4096, 0},
};

typedef struct combo {
  lamp_dtype a, b, c;
} combo;

/* Every input pair the layers use (same dtypes) plus mixed ones, into every output dtype; the
   large shapes take the ones training uses. */
static const combo all_combos[] = {
    {LAMP_F32, LAMP_F32, LAMP_F32},  {LAMP_F32, LAMP_F32, LAMP_F16},   {LAMP_F32, LAMP_F32, LAMP_BF16},
    {LAMP_F16, LAMP_F16, LAMP_F32},  {LAMP_F16, LAMP_F16, LAMP_F16},   {LAMP_F16, LAMP_F16, LAMP_BF16},
    {LAMP_BF16, LAMP_BF16, LAMP_F32}, {LAMP_BF16, LAMP_BF16, LAMP_F16}, {LAMP_BF16, LAMP_BF16, LAMP_BF16},
    {LAMP_F32, LAMP_F16, LAMP_F32},  {LAMP_BF16, LAMP_F32, LAMP_BF16}, {LAMP_F16, LAMP_BF16, LAMP_F16},
};
static int large_combo(const combo *c) {
  return c->a == c->b && (c->c == LAMP_F32 || c->c == c->a);
}

#define SAMPLED_ROWS 64

/* The rows of C the reference covers. */
static size_t pick_rows(const check_run *run, size_t m, size_t n, size_t k, size_t *rows) {
  if ((unsigned long long)m * n * k <= run->sample_above || m <= SAMPLED_ROWS) {
    for (size_t i = 0; i < m; i++) rows[i] = i;
    return m;
  }
  for (size_t i = 0; i < SAMPLED_ROWS; i++) rows[i] = i * (m - 1) / (SAMPLED_ROWS - 1);
  return SAMPLED_ROWS;
}

/* op(A)'s selected rows, widened to fp32, row-major [nrows, k]; with `absolute`, |values|. */
static float *gather_a(const gemm_args *g, const void *a, const size_t *rows, size_t nrows, int absolute) {
  float *out = check_alloc(ELEM_F32, nrows * g->k);
  check_elem e = check_elem_of(g->at);
  for (size_t r = 0; r < nrows; r++)
    for (size_t l = 0; l < g->k; l++) {
      size_t at = g->ta ? l * g->lda + rows[r] : rows[r] * g->lda + l;
      double v = check_get(e, a, at);
      out[r * g->k + l] = (float)(absolute ? fabs(v) : v);
    }
  return out;
}

/* B as stored, widened to fp32; with `absolute`, |values|. */
static float *widen_b(const gemm_args *g, const void *b, size_t count, int absolute) {
  float *out = check_alloc(ELEM_F32, count);
  check_elem e = check_elem_of(g->bt);
  for (size_t i = 0; i < count; i++) {
    double v = check_get(e, b, i);
    out[i] = (float)(absolute ? fabs(v) : v);
  }
  return out;
}

/* Compares the device's C with the CPU reference on the selected rows. */
static void compare(const check_run *run, check_line *line, const gemm_args *g, const void *a, const void *b, const void *c0,
                    const void *c_dev) {
  size_t *rows = malloc((g->m ? g->m : 1) * sizeof *rows);
  size_t nrows = pick_rows(run, g->m, g->n, g->k, rows);
  size_t b_count = (g->tb ? g->n : g->k) * g->ldb;
  float *ar = gather_a(g, a, rows, nrows, 0), *aa = gather_a(g, a, rows, nrows, 1);
  float *br = widen_b(g, b, b_count, 0), *ba = widen_b(g, b, b_count, 1);
  float *ref = check_alloc(ELEM_F32, nrows * g->n), *mag = check_alloc(ELEM_F32, nrows * g->n);
  check_elem ce = check_elem_of(g->ct);
  for (size_t r = 0; r < nrows && g->beta != 0; r++)
    for (size_t j = 0; j < g->n; j++) ref[r * g->n + j] = (float)check_get(ce, c0, rows[r] * g->ldc + j);
  lamp_status st = lamp_gemm(LAMP_CPU, 0, g->tb, nrows, g->n, g->k, g->alpha, ar, LAMP_F32, g->k, br, LAMP_F32,
                             g->ldb, g->beta, ref, LAMP_F32, g->n);
  if (st == LAMP_OK)
    st = lamp_gemm(LAMP_CPU, 0, g->tb, nrows, g->n, g->k, 1.0f, aa, LAMP_F32, g->k, ba, LAMP_F32, g->ldb, 0.0f, mag,
                   LAMP_F32, g->n);
  if (st != LAMP_OK) {
    check_line_fail(line, "the CPU reference failed");
  } else {
    double *want = malloc(g->n * sizeof *want), *bound = malloc(g->n * sizeof *bound);
    void *got = check_alloc(ce, g->n);
    /* The sums of |a||b| were computed in fp32 too: (1 + 2k * 2^-24) covers their own error. */
    double u = 0x1p-24, grow = 1.0 + 2.0 * (double)g->k * u;
    for (size_t r = 0; r < nrows; r++) {
      for (size_t j = 0; j < g->n; j++) {
        size_t at = rows[r] * g->ldc + j;
        double cterm = g->beta != 0 ? fabs((double)g->beta * check_get(ce, c0, at)) : 0.0;
        double acc = fabs((double)g->alpha) * 2.0 * (double)g->k * u * mag[r * g->n + j] * grow + 2.0 * u * cterm;
        want[j] = ref[r * g->n + j];
        bound[j] = acc + check_ulp(g->ct, fabs(want[j]) + acc);
        check_set(ce, got, j, check_get(ce, c_dev, at));
      }
      check_against(line, ce, got, want, bound, g->n, rows[r] * g->ldc);
    }
    free(want);
    free(bound);
    free(got);
  }
  free(rows);
  free(ar);
  free(aa);
  free(br);
  free(ba);
  free(ref);
  free(mag);
}

/* One product: A and B of the combo's dtypes filled from the random values, C fresh. */
static void run_one(check_run *run, check_line *line, const shape *s, int ta, int tb, const combo *co, float alpha,
                    float beta) {
  gemm_args g = {.ta = ta, .tb = tb, .m = s->m, .n = s->n, .k = s->k, .alpha = alpha, .beta = beta,
                 .at = co->a, .bt = co->b, .ct = co->c};
  g.lda = (ta ? s->m : s->k) + s->pad;
  g.ldb = (tb ? s->k : s->n) + s->pad;
  g.ldc = s->n + s->pad;
  size_t a_count = (ta ? s->k : s->m) * g.lda, b_count = (tb ? s->n : s->k) * g.ldb, c_count = s->m * g.ldc;
  void *a = check_random(run, co->a, a_count, 0, 0), *b = check_random(run, co->b, b_count, 0, 0);
  void *c0 = beta != 0 ? check_random(run, co->c, c_count, 0, 0) : NULL;
  check_case c = {.op = "gemm", .call = call_gemm, .args = &g};
  check_operand_add(&c, check_elem_of(co->a), a_count, ROLE_IN, a);
  check_operand_add(&c, check_elem_of(co->b), b_count, ROLE_IN, b);
  check_operand_add(&c, check_elem_of(co->c), c_count, beta != 0 ? ROLE_INOUT : ROLE_OUT, c0);
  check_line_shape(line, "%zux%zux%zu", s->m, s->n, s->k);
  if (check_case_run(run, &c) != 0)
    check_line_fail(line, c.why);
  else
    compare(run, line, &g, a, b, c0, c.x[2].dev);
  check_case_free(&c);
  free(a);
  free(b);
  free(c0);
}

void check_gemm(check_run *run) {
  if (!check_selected(run, "gemm")) return;
  static const char *trans_name[] = {"NN", "NT", "TN", "TT"};
  for (size_t ci = 0; ci < sizeof all_combos / sizeof all_combos[0]; ci++) {
    const combo *co = &all_combos[ci];
    for (int t = 0; t < 4; t++) {
      check_line line;
      check_line_begin(&line, 0, "gemm %s %s,%s->%s", trans_name[t], check_dtype_name(co->a), check_dtype_name(co->b),
                       check_dtype_name(co->c));
      for (size_t i = 0; i < sizeof small_shapes / sizeof small_shapes[0]; i++)
        run_one(run, &line, &small_shapes[i], t >> 1, t & 1, co, 1.0f, 0.0f);
      /* alpha and beta as gradient accumulation uses them (C += A B), on one shape */
      run_one(run, &line, &small_shapes[4], t >> 1, t & 1, co, 0.5f, 1.0f);
      if (run->full && large_combo(co))
        for (size_t i = 0; i < sizeof large_shapes / sizeof large_shapes[0]; i++)
          run_one(run, &line, &large_shapes[i], t >> 1, t & 1, co, 1.0f, 0.0f);
      check_line_end(run, &line);
    }
  }
}
