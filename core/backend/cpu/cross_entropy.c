/*
** Fused log-softmax + negative log-likelihood, in fp32 whatever the logits' dtype, stable for
** any logit range: each row is shifted by its maximum, so exp never overflows and the largest
** term is exactly 1. Per row r with z = x - max(x):
**
**     loss_r  = log(sum_c exp(z_c)) - z_label        (the sum and the log in double)
**     dlogits = (softmax - onehot) * grad_scale / rows
**
** A row is streamed through a stack chunk up to three times (max, sum, gradient), so any class
** count works without allocation. An inf or NaN logit gives a NaN loss, which the loss
** scaler's check then sees.
*/
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

typedef struct ce_row {
  float max;       /* the largest logit (NaN if any logit is NaN) */
  size_t argmax;   /* first index of the largest logit */
  double sum_exp;  /* sum of exp(x - max) */
} ce_row;

static void row_max(ce_row *row, const void *logits, lamp_dtype dtype, size_t first,
                    size_t classes) {
  float stage[LAMP_CPU_CHUNK];
  row->max = -INFINITY;
  row->argmax = 0;
  for (size_t c0 = 0; c0 < classes; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, classes - c0);
    const float *x = lamp_cpu_read(stage, logits, dtype, first + c0, len);
    lamp_cpu_argmax_fold(x, len, c0, &row->max, &row->argmax);
  }
}

static void row_sum_exp(ce_row *row, const void *logits, lamp_dtype dtype, size_t first,
                        size_t classes) {
  float stage[LAMP_CPU_CHUNK];
  double sum = 0.0;
  for (size_t c0 = 0; c0 < classes; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, classes - c0);
    const float *x = lamp_cpu_read(stage, logits, dtype, first + c0, len);
    for (size_t j = 0; j < len; j++) sum += expf(x[j] - row->max);
  }
  row->sum_exp = sum;
}

/* dlogits for one row: (exp(z) / sum - onehot) * coef, written in the gradient's dtype. */
static void row_gradient(const ce_row *row, const void *logits, lamp_dtype dtype, size_t first,
                         size_t classes, int32_t label, float coef, void *dlogits,
                         lamp_dtype d_dtype) {
  float in_stage[LAMP_CPU_CHUNK], out_stage[LAMP_CPU_CHUNK];
  for (size_t c0 = 0; c0 < classes; c0 += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, classes - c0);
    const float *x = lamp_cpu_read(in_stage, logits, dtype, first + c0, len);
    float *g = lamp_cpu_scratch(out_stage, dlogits, d_dtype, first + c0);
    for (size_t j = 0; j < len; j++) {
      float p = (float)(expf(x[j] - row->max) / row->sum_exp);
      float onehot = (size_t)label == c0 + j ? 1.0f : 0.0f;
      g[j] = (p - onehot) * coef;
    }
    lamp_cpu_commit(dlogits, d_dtype, first + c0, g, len);
  }
}

/* All labels are checked before anything is written, so a bad batch leaves outputs alone. */
static lamp_status check_labels(const int32_t *labels, size_t rows, size_t classes) {
  for (size_t r = 0; r < rows; r++) {
    if (labels[r] < 0 || (size_t)labels[r] >= classes) {
      return lamp_error(LAMP_ERR_INVALID_ARG, "cross_entropy: label %d at row %zu is outside [0, %zu)",
                        (int)labels[r], r, classes);
    }
  }
  return LAMP_OK;
}

static void cross_entropy_cpu(const void *logits, lamp_dtype dtype, const int32_t *labels,
                              size_t rows, size_t classes, float grad_scale, double *loss,
                              void *dlogits, lamp_dtype d_dtype, size_t *correct) {
  float coef = rows ? (float)((double)grad_scale / (double)rows) : 0.0f;
  double total = 0.0;
  size_t hits = 0;
  for (size_t r = 0; r < rows; r++) {
    size_t first = r * classes;
    ce_row row;
    row_max(&row, logits, dtype, first, classes);
    row_sum_exp(&row, logits, dtype, first, classes);
    double z_label = (double)(lamp_cpu_get(logits, dtype, first + (size_t)labels[r]) - row.max);
    total += log(row.sum_exp) - z_label;
    hits += row.argmax == (size_t)labels[r];
    if (dlogits != NULL)
      row_gradient(&row, logits, dtype, first, classes, labels[r], coef, dlogits, d_dtype);
  }
  *loss = rows ? total / (double)rows : 0.0; /* an empty batch has no loss to report */
  if (correct != NULL) *correct = hits;
}

static lamp_status check_args(const void *logits, lamp_dtype dtype, const int32_t *labels,
                              size_t rows, size_t classes, const double *loss,
                              const void *dlogits, lamp_dtype d_dtype) {
  lamp_status s = lamp_cpu_check_float("cross_entropy", "logits", dtype);
  if (s == LAMP_OK && dlogits != NULL) s = lamp_cpu_check_float("cross_entropy", "dlogits", d_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("cross_entropy", "loss", loss, 1);
  if (s == LAMP_OK) s = lamp_cpu_check_data("cross_entropy", "labels", labels, rows);
  if (s == LAMP_OK) s = lamp_cpu_check_data("cross_entropy", "logits", logits, rows * classes);
  if (s == LAMP_OK) s = check_labels(labels, rows, classes);
  return s;
}

lamp_status lamp_cpu_cross_entropy(const void *logits, lamp_dtype logits_dtype,
                               const int32_t *labels, size_t rows, size_t classes,
                               float grad_scale, double *loss, void *dlogits,
                               lamp_dtype dlogits_dtype, size_t *correct) {
  lamp_status s = check_args(logits, logits_dtype, labels, rows, classes, loss, dlogits,
                             dlogits_dtype);
  if (s != LAMP_OK) return s;
  cross_entropy_cpu(logits, logits_dtype, labels, rows, classes, grad_scale, loss, dlogits,
                    dlogits_dtype, correct);
  return LAMP_OK;
}
