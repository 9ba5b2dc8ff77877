/*
** Max and average pooling over planes. Max pooling records the winning index per output so
** backward routes each gradient to exactly one input, as PyTorch does (the first maximum wins a
** tie; NaN counts as the largest value). Average pooling divides by the full window, padding
** included (count_include_pad = True, PyTorch's default), so backward spreads dy / window over
** the window's in-image elements.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"

/* The input rows (or columns) of a window: [lo, hi) clipped to the image; o * stride - pad is
   the window's first row before clipping. */
static void window(size_t o, size_t stride, size_t pad, size_t kernel, size_t dil, size_t size, size_t *lo, size_t *hi,
                   size_t *step) {
  /* first tap inside: t >= ceil((pad - o*stride) / dil) */
  size_t base = o * stride;
  size_t t0 = base >= pad ? 0 : (pad - base + dil - 1) / dil;
  size_t t1 = kernel;
  /* base + t*dil - pad < size  <=>  t*dil < size + pad - base */
  size_t limit = size + pad > base ? (size + pad - base + dil - 1) / dil : 0;
  if (t1 > limit) t1 = limit;
  if (t0 > t1) t0 = t1;
  *lo = base + t0 * dil - pad;
  *hi = t1 > t0 ? base + (t1 - 1) * dil - pad + 1 : *lo;
  *step = dil;
}

static void maxpool_plane(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float best = -INFINITY;
      int32_t at = -1;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) {
          float v = x[iy * g->width + ix];
          if (at < 0 || v > best || (isnan(v) && !isnan(best))) {
            best = v;
            at = (int32_t)(iy * g->width + ix);
          }
        }
      y[oy * g->out_w + ox] = best;
      arg[oy * g->out_w + ox] = at;
    }
  }
}

static lamp_status check(const char *fn, const lamp_conv_geom *g) {
  if (g->kernel_h == 0 || g->kernel_w == 0 || g->stride_h == 0 || g->stride_w == 0 || g->dilation_h == 0 ||
      g->dilation_w == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride and dilation must be positive", fn);
  if ((uint64_t)g->height * g->width > INT32_MAX)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: a plane of %zu x %zu does not fit 32-bit indices", fn, g->height,
                      g->width);
  return LAMP_OK;
}

/*
** The common 2x2 window with stride 2 and no padding, without the general window arithmetic:
** the window's four values in scan order, the same comparison as maxpool_plane (a later value
** wins only when larger, or NaN over a number), so the same winner.
*/
/* Bitwise, not short-circuit: no branch on the data. */
static inline int wins(float v, float best) { return (v > best) | ((v != v) & (best == best)); }

static void maxpool_plane_2x2(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  size_t w = g->width, ow = g->out_w;
  for (size_t oy = 0; oy < g->out_h; oy++) {
    const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
    float *yr = y + oy * ow;
    int32_t *ar = arg + oy * ow, base = (int32_t)(2 * oy * w), wi = (int32_t)w;
    /* selects rather than branches: which value wins is data, not predictable */
    for (size_t ox = 0; ox < ow; ox++) {
      int32_t first = base + (int32_t)(2 * ox);
      float best = r0[2 * ox], v = r0[2 * ox + 1];
      int m = wins(v, best);
      int32_t at = m ? first + 1 : first;
      best = m ? v : best;
      v = r1[2 * ox];
      m = wins(v, best);
      at = m ? first + wi : at;
      best = m ? v : best;
      v = r1[2 * ox + 1];
      m = wins(v, best);
      at = m ? first + wi + 1 : at;
      best = m ? v : best;
      yr[ox] = best;
      ar[ox] = at;
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* v replaces best where wins(v, best): larger, or NaN over a number. */
__attribute__((target("avx512f"))) static __mmask16 wins16(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
}

/*
** maxpool_plane_2x2 on 16 outputs at a time: a pair of input rows is loaded in 32-column
** pieces and split into even and odd columns; the four candidates are compared in the scalar
** scan order, so winner and index are the same.
*/
__attribute__((target("avx512f"))) static void maxpool_plane_2x2_avx512(float *y, int32_t *arg, const float *x,
                                                                        const lamp_conv_geom *g) {
  size_t w = g->width, ow = g->out_w;
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i twice = _mm512_slli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 1);
  for (size_t oy = 0; oy < g->out_h; oy++) {
    const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
    for (size_t ox = 0; ox < ow; ox += 16) {
      size_t n = lamp_cpu_min(16, ow - ox), cols = 2 * n;
      __mmask16 lo = (__mmask16)((1u << lamp_cpu_min(16, cols)) - 1u);
      __mmask16 hi = (__mmask16)((1u << (cols > 16 ? cols - 16 : 0)) - 1u), out = (__mmask16)((1u << n) - 1u);
      __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ox), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ox + 16);
      __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ox), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ox + 16);
      __m512 cand[4] = {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
                        _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
      __m512i first = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oy * w + 2 * ox)), twice);
      int32_t offset[4] = {0, 1, (int32_t)w, (int32_t)w + 1};
      __m512 best = cand[0];
      __m512i at = first;
      for (int t = 1; t < 4; t++) {
        __mmask16 m = wins16(cand[t], best);
        best = _mm512_mask_mov_ps(best, m, cand[t]);
        at = _mm512_mask_mov_epi32(at, m, _mm512_add_epi32(first, _mm512_set1_epi32(offset[t])));
      }
      _mm512_mask_storeu_ps(y + oy * ow + ox, out, best);
      _mm512_mask_storeu_epi32(arg + oy * ow + ox, out, at);
    }
  }
  _mm256_zeroupper(); /* the SSE code after this would run slowly behind dirty upper halves */
}

static int maxpool_fast(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  if (!lamp_cpu_has(LAMP_ISA_AVX512F)) return 0;
  maxpool_plane_2x2_avx512(y, arg, x, g);
  return 1;
}
#else
static int maxpool_fast(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  (void)y, (void)arg, (void)x, (void)g;
  return 0;
}
#endif

static int is_2x2(const lamp_conv_geom *g) {
  return g->kernel_h == 2 && g->kernel_w == 2 && g->stride_h == 2 && g->stride_w == 2 && g->pad_h == 0 &&
         g->pad_w == 0 && g->dilation_h == 1 && g->dilation_w == 1;
}

/*
** Backward of one plane. With 2x2 windows at stride 2 the windows tile the plane, so each
** window's four inputs are written (dy at the winner, 0 elsewhere) with no zeroing pass first;
** only the row and column an odd size leaves out are zeroed. Otherwise dx is zeroed and each
** dy added at its winner.
*/
static void maxpool_backward_plane(float *dx, const float *dy, const int32_t *arg, const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w, w = g->width;
  if (!is_2x2(g)) {
    memset(dx, 0, in * sizeof *dx);
    for (size_t k = 0; k < out; k++)
      if (arg[k] >= 0) dx[(size_t)arg[k]] += dy[k];
    return;
  }
  for (size_t oy = 0; oy < g->out_h; oy++) {
    float *r0 = dx + 2 * oy * w, *r1 = r0 + w;
    for (size_t ox = 0; ox < g->out_w; ox++) {
      r0[2 * ox] = r0[2 * ox + 1] = r1[2 * ox] = r1[2 * ox + 1] = 0.0f;
      dx[(size_t)arg[oy * g->out_w + ox]] = dy[oy * g->out_w + ox];
    }
    if (w % 2) r0[w - 1] = r1[w - 1] = 0.0f;
  }
  if (g->height % 2) memset(dx + (g->height - 1) * w, 0, w * sizeof *dx);
}

static void avgpool_plane(float *y, const float *x, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float sum = 0.0f;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) sum += x[iy * g->width + ix];
      y[oy * g->out_w + ox] = sum * inv;
    }
  }
}

static void avgpool_plane_backward(float *dx, const float *dy, const lamp_conv_geom *g) {
  float inv = 1.0f / (float)(g->kernel_h * g->kernel_w);
  for (size_t oy = 0; oy < g->out_h; oy++) {
    size_t y0, y1, sy;
    window(oy, g->stride_h, g->pad_h, g->kernel_h, g->dilation_h, g->height, &y0, &y1, &sy);
    for (size_t ox = 0; ox < g->out_w; ox++) {
      size_t x0, x1, sx;
      window(ox, g->stride_w, g->pad_w, g->kernel_w, g->dilation_w, g->width, &x0, &x1, &sx);
      float d = dy[oy * g->out_w + ox] * inv;
      for (size_t iy = y0; iy < y1; iy += sy)
        for (size_t ix = x0; ix < x1; ix += sx) dx[iy * g->width + ix] += d;
    }
  }
}

static int is_global(const lamp_conv_geom *g) {
  return g->out_h == 1 && g->out_w == 1 && g->kernel_h == g->height && g->kernel_w == g->width && g->pad_h == 0 &&
         g->pad_w == 0 && g->dilation_h == 1 && g->dilation_w == 1;
}

/*
** A global window (GlobalAvgPool: the window is the plane) sums each plane in element order, as
** avgpool_plane does, so the bits are the same, but 8 planes side by side: a plane's sum is one
** chain of dependent adds, which waits out each add's latency, and 8 independent chains keep the
** adder busy.
*/
#define GLOBAL_PLANES 8

static void global_avg_planes(float *y, const float *x, size_t n_planes, size_t in, float inv) {
  size_t p = 0;
  for (; p + GLOBAL_PLANES <= n_planes; p += GLOBAL_PLANES) {
    float sum[GLOBAL_PLANES] = {0};
    for (size_t i = 0; i < in; i++)
      for (size_t l = 0; l < GLOBAL_PLANES; l++) sum[l] += x[(p + l) * in + i];
    for (size_t l = 0; l < GLOBAL_PLANES; l++) y[p + l] = sum[l] * inv;
  }
  for (; p < n_planes; p++) {
    float sum = 0.0f;
    for (size_t i = 0; i < in; i++) sum += x[p * in + i];
    y[p] = sum * inv;
  }
}

/* ---- any float dtype, a task's planes a few at a time --------------------------------------- */
/*
** The kernels above run in fp32. A 16-bit input or gradient is widened into the worker's own
** workspace and the result rounded once to the output dtype: comparisons and averages of widened
** values are exact or fp32-rounded, as in PyTorch's CPU bf16 kernels, which accumulate in fp32.
** The planes are independent, so each task stages its own a few at a time (STAGE_ELEMENTS): the
** widened planes stay in the first-level cache between widening, pooling and rounding, and a
** pass is one parallel loop. Staging whole 1 MiB groups in three loops of their own (widen, pool,
** round) took 21 loops for the small ResNet's max pool and its widened planes through memory;
** the bf16 epoch runs about 2 % faster without them (docs/benchmarks.md).
*/

/* fp32 elements a staged run of planes may take on its larger side (32 KiB). */
#define STAGE_ELEMENTS 8192

typedef enum pool_kind { MAX_FORWARD, MAX_BACKWARD, AVG_FORWARD, AVG_BACKWARD } pool_kind;

/* One pass: `in` is read (x or dy), `out` written (y or dx); per plane, in_plane and out_plane
   elements. */
typedef struct pool_pass {
  pool_kind kind;
  void *out;
  lamp_dtype out_dtype;
  const void *in;
  lamp_dtype in_dtype;
  int32_t *argmax; /* written by MAX_FORWARD, read by MAX_BACKWARD */
  size_t in_plane, out_plane, planes, tasks;
  const lamp_conv_geom *g;
} pool_pass;

/* Planes [first, first + n) in fp32: out and in point at the first of them. */
static void run_planes(const pool_pass *p, float *out, const float *in, size_t first, size_t n) {
  const lamp_conv_geom *g = p->g;
  size_t ip = p->in_plane, op = p->out_plane;
  int32_t *arg = p->argmax != NULL ? p->argmax + first * (g->out_h * g->out_w) : NULL;
  switch (p->kind) {
  case MAX_FORWARD:
    for (size_t k = 0; k < n; k++) {
      float *y = out + k * op;
      int32_t *a = arg + k * op;
      const float *x = in + k * ip;
      if (!is_2x2(g)) maxpool_plane(y, a, x, g);
      else if (!maxpool_fast(y, a, x, g)) maxpool_plane_2x2(y, a, x, g);
    }
    return;
  case MAX_BACKWARD:
    for (size_t k = 0; k < n; k++) maxpool_backward_plane(out + k * op, in + k * ip, arg + k * ip, g);
    return;
  case AVG_FORWARD:
    if (is_global(g)) global_avg_planes(out, in, n, ip, 1.0f / (float)ip);
    else
      for (size_t k = 0; k < n; k++) avgpool_plane(out + k * op, in + k * ip, g);
    return;
  default:
    memset(out, 0, n * op * sizeof *out);
    for (size_t k = 0; k < n; k++) avgpool_plane_backward(out + k * op, in + k * ip, g);
    return;
  }
}

static char *element_at(const void *data, lamp_dtype dtype, size_t i) {
  return (char *)data + i * (dtype == LAMP_F32 ? 4 : 2);
}

/* Planes per staged run: as many as keep each side within STAGE_ELEMENTS, at least one. */
static size_t stage_planes(const pool_pass *p) {
  size_t larger = p->in_plane > p->out_plane ? p->in_plane : p->out_plane;
  size_t n = larger > 0 ? STAGE_ELEMENTS / larger : p->planes;
  return n > 0 ? n : 1;
}

/* Task t's planes: straight through when both sides are fp32, else staged a few at a time. */
static lamp_status pool_task(void *ctx, size_t worker, size_t t) {
  const pool_pass *p = ctx;
  (void)worker;
  size_t p0 = p->planes * t / p->tasks, p1 = p->planes * (t + 1) / p->tasks;
  if (p->in_dtype == LAMP_F32 && p->out_dtype == LAMP_F32) {
    run_planes(p, (float *)p->out + p0 * p->out_plane, (const float *)p->in + p0 * p->in_plane, p0, p1 - p0);
    return LAMP_OK;
  }
  size_t run = stage_planes(p);
  float *in32 = NULL, *out32 = NULL;
  if (p->in_dtype != LAMP_F32 && (in32 = lamp_cpu_workspace(LAMP_CPU_WS_STAGE_IN, run * p->in_plane * 4)) == NULL)
    return LAMP_ERR_SYSTEM;
  if (p->out_dtype != LAMP_F32 && (out32 = lamp_cpu_workspace(LAMP_CPU_WS_STAGE_OUT, run * p->out_plane * 4)) == NULL)
    return LAMP_ERR_SYSTEM;
  lamp_status st = LAMP_OK;
  for (size_t first = p0; st == LAMP_OK && first < p1; first += run) {
    size_t n = run < p1 - first ? run : p1 - first;
    const float *in = (const float *)p->in + first * p->in_plane;
    float *out = out32 != NULL ? out32 : (float *)p->out + first * p->out_plane;
    if (in32 != NULL) {
      st = lamp_cpu_convert(in32, LAMP_F32, element_at(p->in, p->in_dtype, first * p->in_plane), p->in_dtype,
                            n * p->in_plane);
      in = in32;
    }
    if (st != LAMP_OK) break;
    run_planes(p, out, in, first, n);
    if (out32 != NULL)
      st = lamp_cpu_convert(element_at(p->out, p->out_dtype, first * p->out_plane), p->out_dtype, out32, LAMP_F32,
                            n * p->out_plane);
  }
  return st;
}

static lamp_status pool_run(const char *fn, pool_pass *p, size_t planes) {
  lamp_status s = check(fn, p->g);
  if (s == LAMP_OK) s = lamp_cpu_check_float(fn, "input", p->in_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float(fn, "output", p->out_dtype);
  if (s != LAMP_OK) return s;
  p->planes = planes;
  p->tasks = lamp_cpu_threads() < planes ? lamp_cpu_threads() : planes;
  if (p->tasks == 0) p->tasks = 1;
  return lamp_cpu_parallel_for(p->tasks, pool_task, p);
}

lamp_status lamp_cpu_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                     size_t n_planes, const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  pool_pass p = {MAX_FORWARD, y, y_dtype, x, x_dtype, argmax, in, out, 0, 0, g};
  return pool_run("maxpool_forward", &p, n_planes);
}

lamp_status lamp_cpu_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  pool_pass p = {MAX_BACKWARD, dx, dx_dtype, dy, dy_dtype, (int32_t *)(uintptr_t)argmax, out, in, 0, 0, g};
  return pool_run("maxpool_backward", &p, n_planes);
}

lamp_status lamp_cpu_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                     const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  pool_pass p = {AVG_FORWARD, y, y_dtype, x, x_dtype, NULL, in, out, 0, 0, g};
  return pool_run("avgpool_forward", &p, n_planes);
}

lamp_status lamp_cpu_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      size_t n_planes, const lamp_conv_geom *g) {
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  pool_pass p = {AVG_BACKWARD, dx, dx_dtype, dy, dy_dtype, NULL, out, in, 0, 0, g};
  return pool_run("avgpool_backward", &p, n_planes);
}
