/*
** Reductions: the bias gradient (sum over rows), the squared norm, row arg-max, and the loss
** scaler's unscale-and-check. None uses atomics on floats and every launch geometry depends
** only on the sizes, so each result is the same bits on every run.
*/
#include "backend/cuda/launch.cuh"

#define FULL_WARP 0xffffffffu
#define WARPS_PER_BLOCK (LAMP_CUDA_THREADS / 32)

/* ---- sum_rows ------------------------------------------------------------------------------ */

/* One thread per column, rows added in order in fp32: the CPU's order, so the CPU's bits. The
   threads of a warp read adjacent columns of a row, so the loads coalesce. */
static __global__ void sum_rows_kernel(float *out, const void *dy, lamp_dtype dtype, size_t rows, size_t cols,
                                       float alpha, float beta) {
  LAMP_GRID_STRIDE(c, cols) {
    float sum = lamp_em_column_sum(dy, dtype, rows, cols, c);
    out[c] = lamp_em_blend(beta == 0.0f ? 0.0f : out[c], sum, alpha, beta);
  }
}

lamp_status lamp_cuda_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols,
                               float alpha, float beta) {
  lamp_status s = lamp_cuda_check_float("sum_rows", "dy", dy_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("sum_rows", "out", out, cols);
  if (s == LAMP_OK) s = lamp_cuda_check_data("sum_rows", "dy", dy, rows * cols);
  if (s != LAMP_OK || cols == 0) return s;
  sum_rows_kernel<<<lamp_cuda_blocks(cols), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(out, dy, dy_dtype, rows,
                                                                                          cols, alpha, beta);
  return lamp_cuda_launched("sum_rows");
}

/* ---- sum_squares --------------------------------------------------------------------------- */

/* A block's LAMP_CUDA_THREADS values summed in a fixed tree; the total is in s[0]. */
static __device__ void block_sum(double *s) {
  for (unsigned half = LAMP_CUDA_THREADS / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half) s[threadIdx.x] = lamp_em_dadd(s[threadIdx.x], s[threadIdx.x + half]);
  }
  __syncthreads();
}

/* Pass 1: each block's share of x[i]^2 in double (squares of floats are exact in double). */
static __global__ void squares_partial_kernel(const float *x, size_t n, double *partial) {
  __shared__ double s[LAMP_CUDA_THREADS];
  double acc = 0.0;
  LAMP_GRID_STRIDE(i, n) acc = lamp_em_dadd(acc, lamp_em_dmul((double)x[i], (double)x[i]));
  s[threadIdx.x] = acc;
  block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

/* Pass 2: one block adds the partials. */
static __global__ void squares_total_kernel(const double *partial, unsigned count, double *out) {
  __shared__ double s[LAMP_CUDA_THREADS];
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += LAMP_CUDA_THREADS) acc = lamp_em_dadd(acc, partial[i]);
  s[threadIdx.x] = acc;
  block_sum(s);
  if (threadIdx.x == 0) *out = s[0];
}

/* Blocks of pass 1: about 16 elements a thread, at most 1024 partials. */
static unsigned squares_blocks(size_t n) {
  size_t per_block = (size_t)LAMP_CUDA_THREADS * 16, blocks = (n + per_block - 1) / per_block;
  return blocks < 1 ? 1u : blocks > 1024 ? 1024u : (unsigned)blocks;
}

lamp_status lamp_cuda_sum_squares(const float *x, size_t n, double *out) {
  lamp_status s = lamp_cuda_check_data("sum_squares", "x", x, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("sum_squares", "out", out, 1);
  if (s != LAMP_OK) return s;
  unsigned blocks = n ? squares_blocks(n) : 0;
  double *partial = NULL;
  if (blocks > 0) {
    s = lamp_cuda_scratch(blocks * sizeof(double), (void **)&partial);
    if (s != LAMP_OK) return s;
    squares_partial_kernel<<<blocks, LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(x, n, partial);
    s = lamp_cuda_launched("sum_squares");
    if (s != LAMP_OK) return s;
  }
  squares_total_kernel<<<1, LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(partial, blocks, out);
  return lamp_cuda_launched("sum_squares");
}

/* ---- argmax_rows --------------------------------------------------------------------------- */

/* (best, at) combined across the warp (a butterfly: every lane ends with the answer). The
   ordering of lamp_em_argmax_beats makes the tree's shape irrelevant to the result. */
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

/* One warp per row; lane l folds columns l, l + 32, ... */
static __global__ void argmax_rows_kernel(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols) {
  size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  size_t warps = (size_t)gridDim.x * WARPS_PER_BLOCK;
  for (size_t r = warp; r < rows; r += warps) { /* the same r across a warp: the shuffles see every lane */
    float best = -INFINITY;
    size_t at = LAMP_EM_NO_INDEX;
    for (size_t c = lane; c < cols; c += 32) {
      float v = lamp_em_load(x, dtype, r * cols + c);
      if (lamp_em_argmax_beats(v, c, best, at)) {
        best = v;
        at = c;
      }
    }
    warp_argmax(&best, &at);
    if (lane == 0) out[r] = at == LAMP_EM_NO_INDEX ? 0 : (int32_t)at;
  }
}

static unsigned row_blocks(size_t rows) {
  size_t blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
  return blocks > LAMP_CUDA_MAX_BLOCKS ? LAMP_CUDA_MAX_BLOCKS : (unsigned)blocks;
}

lamp_status lamp_cuda_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols) {
  lamp_status s = lamp_cuda_check_float("argmax_rows", NULL, dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_data("argmax_rows", "out", out, rows);
  if (s == LAMP_OK) s = lamp_cuda_check_data("argmax_rows", "x", x, rows * cols);
  if (s != LAMP_OK) return s;
  if (rows > 0 && cols == 0) {
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "argmax_rows: rows of 0 columns have no arg-max");
  }
  if (cols > INT32_MAX) {
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "argmax_rows: %zu columns exceed the int32 index range", cols);
  }
  if (rows == 0) return LAMP_OK;
  argmax_rows_kernel<<<row_blocks(rows), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(out, x, dtype, rows, cols);
  return lamp_cuda_launched("argmax_rows");
}

/* ---- unscale_and_check --------------------------------------------------------------------- */

/* g *= inv_scale when `unscale` (else read only: a scale of 1 must leave the bits alone, NaN
   payloads included, as the CPU's check-only pass does); any non-finite product sets the flag.
   Every thread that saw one stores the same 1, so the race is harmless and needs no atomic. */
static __global__ void unscale_kernel(float *g, size_t n, float inv_scale, int unscale, int *found_inf) {
  int bad = 0;
  LAMP_GRID_STRIDE(i, n) {
    float v = g[i];
    if (unscale) {
      v = lamp_em_mul(v, inv_scale);
      g[i] = v;
    }
    bad |= !lamp_em_isfinite(v);
  }
  if (bad) *found_inf = 1;
}

lamp_status lamp_cuda_unscale_and_check(float *g, size_t n, float inv_scale, int *found_inf) {
  lamp_status s = lamp_cuda_check_data("unscale_and_check", "g", g, n);
  if (s == LAMP_OK) s = lamp_cuda_check_data("unscale_and_check", "found_inf", found_inf, 1);
  if (s != LAMP_OK || n == 0) return s;
  unscale_kernel<<<lamp_cuda_blocks(n), LAMP_CUDA_THREADS, 0, lamp_cuda_stream()>>>(g, n, inv_scale,
                                                                                      inv_scale != 1.0f, found_inf);
  return lamp_cuda_launched("unscale_and_check");
}
