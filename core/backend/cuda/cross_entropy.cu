/*
** Fused log-softmax + negative log-likelihood (backend.h: lamp_cross_entropy), in fp32 whatever
** the logits' dtype, with the loss and the correct count left in device memory: nothing comes
** back to the host, so a training step waits for nothing here.
**
** Two launches. ce_rows: one warp per row; lane l takes classes l, l + 32, ...; the row's
** maximum (and arg-max, for the count) and its sum of exp(x - max) in double are combined across
** the warp in a fixed tree, then each lane writes its classes' gradient; lane 0 leaves the row's
** loss and hit in scratch. ce_total: one block adds the rows' losses and hits in a fixed tree and
** writes the mean loss and the count. The per-element math is elementwise_math.h's (the CPU's
** formulas); the sums run in another order than the CPU's, so the loss may differ from the
** CPU's in its last bits, the same bits on every run.
**
** A label outside [0, classes) cannot be seen by the host before the launch (labels are device
** memory). Its row is skipped, ce_total leaves loss and count alone and records the first bad
** row in the fault record (faults.c), and the runtime reports it at its next wait with the
** CPU's message. Unlike the CPU, which checks every label before writing anything, the other
** rows' gradients are written.
*/
#include <limits.h>

#include "backend/cuda/launch.cuh"

#define FULL_WARP 0xffffffffu
#define WARPS_PER_BLOCK (LAMP_CUDA_THREADS / 32)
#define ROW_BAD (-1) /* row_state: label out of range; 0 a miss, 1 a hit */

static __device__ void warp_argmax(float *best, size_t *at) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float v = __shfl_xor_sync(FULL_WARP, *best, offset);
    size_t i = (size_t)__shfl_xor_sync(FULL_WARP, (unsigned long long)*at, offset);
    if (lamp_em_argmax_beats(v, i, *best, *at)) {
      *best = v;
      *at = i;
    }
  }
}

/* A butterfly of additions: each is commutative, so every lane ends with the same bits. */
static __device__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v = lamp_em_dadd(v, __shfl_xor_sync(FULL_WARP, v, offset));
  return v;
}

typedef struct ce_args {
  const void *logits;
  lamp_dtype dtype;
  const int32_t *labels;
  size_t rows, classes;
  float coef;
  void *dlogits;
  lamp_dtype d_dtype;
  double *row_loss;
  int8_t *row_state;
} ce_args;

static __global__ void ce_rows_kernel(ce_args a) {
  size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  size_t warps = (size_t)gridDim.x * WARPS_PER_BLOCK;
  for (size_t r = warp; r < a.rows; r += warps) { /* r and the label are the same across the warp */
    int32_t label = a.labels[r];
    if (label < 0 || (size_t)label >= a.classes) {
      if (lane == 0) a.row_state[r] = ROW_BAD;
      continue;
    }
    size_t first = r * a.classes;
    float max = -INFINITY;
    size_t at = LAMP_EM_NO_INDEX;
    for (size_t c = lane; c < a.classes; c += 32) {
      float v = lamp_em_load(a.logits, a.dtype, first + c);
      if (lamp_em_argmax_beats(v, c, max, at)) {
        max = v;
        at = c;
      }
    }
    warp_argmax(&max, &at);
    double sum = 0.0;
    for (size_t c = lane; c < a.classes; c += 32)
      sum = lamp_em_dadd(sum, (double)lamp_em_softmax_exp(lamp_em_load(a.logits, a.dtype, first + c) - max));
    sum = warp_sum(sum);
    if (a.dlogits != NULL) {
      for (size_t c = lane; c < a.classes; c += 32) {
        float x = lamp_em_load(a.logits, a.dtype, first + c);
        lamp_em_store(a.dlogits, a.d_dtype, first + c, lamp_em_ce_grad(x, max, sum, c == (size_t)label, a.coef));
      }
    }
    if (lane == 0) {
      a.row_loss[r] = lamp_em_ce_loss(sum, lamp_em_load(a.logits, a.dtype, first + (size_t)label), max);
      a.row_state[r] = (at == LAMP_EM_NO_INDEX ? 0 : at) == (size_t)label ? 1 : 0;
    }
  }
}

typedef struct ce_total_args {
  const double *row_loss;
  const int8_t *row_state;
  const int32_t *labels;
  size_t rows, classes;
  double *loss;
  size_t *correct;
  lamp_cuda_fault *fault;
} ce_total_args;

static __global__ void ce_total_kernel(ce_total_args a) {
  __shared__ double loss[LAMP_CUDA_THREADS];
  __shared__ unsigned long long hits[LAMP_CUDA_THREADS], bad[LAMP_CUDA_THREADS];
  unsigned t = threadIdx.x;
  double my_loss = 0.0;
  unsigned long long my_hits = 0, my_bad = ULLONG_MAX;
  for (size_t r = t; r < a.rows; r += LAMP_CUDA_THREADS) {
    int state = a.row_state[r];
    if (state == ROW_BAD) {
      if (r < my_bad) my_bad = r;
    } else {
      my_loss = lamp_em_dadd(my_loss, a.row_loss[r]);
      my_hits += (unsigned long long)state;
    }
  }
  loss[t] = my_loss;
  hits[t] = my_hits;
  bad[t] = my_bad;
  for (unsigned half = LAMP_CUDA_THREADS / 2; half > 0; half /= 2) {
    __syncthreads();
    if (t < half) {
      loss[t] = lamp_em_dadd(loss[t], loss[t + half]);
      hits[t] += hits[t + half];
      if (bad[t + half] < bad[t]) bad[t] = bad[t + half];
    }
  }
  if (t != 0) return;
  if (bad[0] != ULLONG_MAX) {
    lamp_cuda_fault_raise(a.fault, a.labels[bad[0]], bad[0], a.classes);
    return;
  }
  *a.loss = a.rows ? loss[0] / (double)a.rows : 0.0; /* an empty batch has no loss to report */
  if (a.correct != NULL) *a.correct = (size_t)hits[0];
}

static lamp_status check_args(const void *logits, lamp_dtype dtype, const int32_t *labels, size_t rows,
                              size_t classes, const double *loss, const void *dlogits, lamp_dtype d_dtype) {
  lamp_status s = lamp_cuda_check_float("cross_entropy", "logits", dtype);
  if (s == LAMP_OK && dlogits != NULL) s = lamp_cuda_check_float("cross_entropy", "dlogits", d_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("cross_entropy", "loss", loss, 1);
  if (s == LAMP_OK) s = lamp_cuda_check_data("cross_entropy", "labels", labels, rows);
  if (s == LAMP_OK) s = lamp_cuda_check_data("cross_entropy", "logits", logits, rows * classes);
  return s;
}

lamp_status lamp_cuda_cross_entropy(const void *logits, lamp_dtype logits_dtype, const int32_t *labels,
                                    size_t rows, size_t classes, float grad_scale, double *loss, void *dlogits,
                                    lamp_dtype dlogits_dtype, size_t *correct) {
  lamp_status s = check_args(logits, logits_dtype, labels, rows, classes, loss, dlogits, dlogits_dtype);
  if (s != LAMP_OK) return s;
  lamp_cuda_fault *fault = NULL;
  s = lamp_cuda_fault_record(&fault);
  if (s != LAMP_OK) return s;
  double *row_loss = NULL;
  int8_t *row_state = NULL;
  if (rows > 0) {
    void *scratch = NULL;
    s = lamp_cuda_scratch(rows * (sizeof(double) + 1), &scratch);
    if (s != LAMP_OK) return s;
    row_loss = (double *)scratch;
    row_state = (int8_t *)(row_loss + rows);
    size_t blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    ce_args a = {logits, logits_dtype, labels, rows, classes, lamp_em_ce_coef(grad_scale, rows), dlogits,
                 dlogits_dtype, row_loss, row_state};
    ce_rows_kernel<<<blocks > LAMP_CUDA_MAX_BLOCKS ? LAMP_CUDA_MAX_BLOCKS : (unsigned)blocks, LAMP_CUDA_THREADS, 0,
                     lamp_cuda_stream()>>>(a);
    s = lamp_cuda_launched("cross_entropy");
    if (s != LAMP_OK) return s;
  }
  ce_total_args t = {row_loss, row_state, labels, rows, classes, loss, correct, fault};
  ce_total_kernel<<<1, LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(t);
  return lamp_cuda_launched("cross_entropy");
}
