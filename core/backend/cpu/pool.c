/*
** Max and average pooling over planes. Max pooling records the winning index per output so
** backward routes each gradient to exactly one input, as PyTorch does (the first maximum wins a
** tie; NaN counts as the largest value). Average pooling divides by the full window, padding
** included (count_include_pad = True, PyTorch's default), so backward spreads dy / window over
** the window's in-image elements.
*/
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

/* The input rows (or columns) of a window: [lo, hi) clipped to the image; o * stride - pad is
   the window's first row before clipping. */
static void window(size_t o, size_t stride, size_t pad, size_t kernel, size_t dil, size_t size, size_t *lo,
                   size_t *hi, size_t *step) {
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

static lamp_status check(const char *fn, lamp_device device, const lamp_conv_geom *g) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device(fn, device);
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
#include <pthread.h>

static int avx512; /* set once, by detect_avx512 */
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void detect_avx512(void) {
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
}

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
  pthread_once(&avx512_once, detect_avx512);
  if (!avx512) return 0;
  maxpool_plane_2x2_avx512(y, arg, x, g);
  return 1;
}
#else
static int maxpool_fast(float *y, int32_t *arg, const float *x, const lamp_conv_geom *g) {
  (void)y, (void)arg, (void)x, (void)g;
  return 0;
}
#endif

typedef struct pool_job {
  float *y;
  int32_t *argmax;
  const float *x;
  size_t n_planes, tasks;
  const lamp_conv_geom *g;
} pool_job;

static int is_2x2(const lamp_conv_geom *g) {
  return g->kernel_h == 2 && g->kernel_w == 2 && g->stride_h == 2 && g->stride_w == 2 && g->pad_h == 0 &&
         g->pad_w == 0 && g->dilation_h == 1 && g->dilation_w == 1;
}

static lamp_status maxpool_task(void *ctx, size_t worker, size_t t) {
  const pool_job *j = ctx;
  (void)worker;
  size_t tasks = j->tasks, in = j->g->height * j->g->width, out = j->g->out_h * j->g->out_w;
  for (size_t p = j->n_planes * t / tasks; p < j->n_planes * (t + 1) / tasks; p++) {
    if (is_2x2(j->g)) {
      if (!maxpool_fast(j->y + p * out, j->argmax + p * out, j->x + p * in, j->g))
        maxpool_plane_2x2(j->y + p * out, j->argmax + p * out, j->x + p * in, j->g);
    }
    else maxpool_plane(j->y + p * out, j->argmax + p * out, j->x + p * in, j->g);
  }
  return LAMP_OK;
}

lamp_status lamp_maxpool_forward(lamp_device device, float *y, int32_t *argmax, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_forward", device, g);
  if (s != LAMP_OK) return s;
  pool_job j = {y, argmax, x, n_planes, lamp_backend_threads(device), g};
  return lamp_parallel_for(device, j.tasks, maxpool_task, &j);
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

typedef struct pool_back_job {
  float *dx;
  const float *dy;
  const int32_t *argmax;
  size_t n_planes, tasks;
  const lamp_conv_geom *g;
} pool_back_job;

static lamp_status maxpool_backward_task(void *ctx, size_t worker, size_t t) {
  const pool_back_job *j = ctx;
  (void)worker;
  size_t in = j->g->height * j->g->width, out = j->g->out_h * j->g->out_w;
  for (size_t p = j->n_planes * t / j->tasks; p < j->n_planes * (t + 1) / j->tasks; p++)
    maxpool_backward_plane(j->dx + p * in, j->dy + p * out, j->argmax + p * out, j->g);
  return LAMP_OK;
}

lamp_status lamp_maxpool_backward(lamp_device device, float *dx, const float *dy, const int32_t *argmax,
                                  size_t n_planes, const lamp_conv_geom *g) {
  lamp_status s = check("maxpool_backward", device, g);
  if (s != LAMP_OK) return s;
  pool_back_job j = {dx, dy, argmax, n_planes, lamp_backend_threads(device), g};
  if (j.tasks > n_planes) j.tasks = n_planes ? n_planes : 1;
  return lamp_parallel_for(device, j.tasks, maxpool_backward_task, &j);
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

lamp_status lamp_avgpool_forward(lamp_device device, float *y, const float *x, size_t n_planes,
                                 const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_forward", device, g);
  if (s != LAMP_OK) return s;
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  for (size_t p = 0; p < n_planes; p++) avgpool_plane(y + p * out, x + p * in, g);
  return LAMP_OK;
}

lamp_status lamp_avgpool_backward(lamp_device device, float *dx, const float *dy, size_t n_planes,
                                  const lamp_conv_geom *g) {
  lamp_status s = check("avgpool_backward", device, g);
  if (s != LAMP_OK) return s;
  size_t in = g->height * g->width, out = g->out_h * g->out_w;
  memset(dx, 0, n_planes * in * sizeof *dx);
  for (size_t p = 0; p < n_planes; p++) avgpool_plane_backward(dx + p * in, dy + p * out, g);
  return LAMP_OK;
}
