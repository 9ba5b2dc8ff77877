/*
** The fused unscale-and-check behind lamp_host.unscale_and_check: one pass that multiplies the
** gradients by 1/S and notes any inf/NaN. The check is on the product, so an overflow caused
** by the multiply itself (inv_scale > 1) is caught too. isfinite survives because the build
** never enables fast-math (see CMakeLists.txt).
*/
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"

#define BLOCK LAMP_CPU_BLOCK

/* Returns nonzero if any product is not finite. No early exit: every element is scaled. */
static int unscale_f32(float *g, size_t n, float inv_scale) {
  int bad = 0;
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    for (size_t j = 0; j < BLOCK; j++) {
      float v = g[i + j] * inv_scale;
      g[i + j] = v;
      bad |= !isfinite(v);
    }
  }
  for (; i < n; i++) {
    g[i] *= inv_scale;
    bad |= !isfinite(g[i]);
  }
  return bad;
}

/*
** inv_scale == 1 (bf16, fp32, or a scale of 1): a read-only pass is enough. It runs every step
** under a loss scaler, so it is written for SSE2, which every x86-64 has and the compiler does
** not reach on its own at -O2: a value is inf or NaN when its bits without the sign exceed
** those of the largest finite float, a signed integer compare on 16 floats at a time.
*/
static int check_f32(const float *g, size_t n) {
  int bad = 0;
  size_t i = 0;
#ifdef __SSE2__
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), max_finite = _mm_set1_epi32(0x7f7fffff);
  __m128i acc = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(g + i)), abs_mask);
    __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(g + i + 4)), abs_mask);
    __m128i c = _mm_and_si128(_mm_loadu_si128((const __m128i *)(g + i + 8)), abs_mask);
    __m128i d = _mm_and_si128(_mm_loadu_si128((const __m128i *)(g + i + 12)), abs_mask);
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpgt_epi32(a, max_finite), _mm_cmpgt_epi32(b, max_finite)),
                             _mm_or_si128(_mm_cmpgt_epi32(c, max_finite), _mm_cmpgt_epi32(d, max_finite)));
    acc = _mm_or_si128(acc, m);
  }
  bad = _mm_movemask_epi8(acc) != 0;
#endif
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) bad |= !isfinite(g[i + j]);
  for (; i < n; i++) bad |= !isfinite(g[i]);
  return bad;
}

typedef struct pass {
  float *g;
  float inv_scale;
  int bad[2]; /* per half */
} pass;

static void unscale_range(void *ctx, size_t part, size_t begin, size_t end) {
  pass *p = ctx;
  float *g = p->g + begin;
  p->bad[part] = p->inv_scale == 1.0f ? check_f32(g, end - begin) : unscale_f32(g, end - begin, p->inv_scale);
}

lamp_status lamp_cpu_unscale_and_check(float *g, size_t n, float inv_scale,
                                   int *found_inf) {
  lamp_status s = lamp_cpu_check_data("unscale_and_check", "g", g, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("unscale_and_check", "found_inf", found_inf, 1);
  if (s != LAMP_OK) return s;
  pass p = {g, inv_scale, {0, 0}};
  s = lamp_cpu_split_pass(n, unscale_range, &p);
  if (s != LAMP_OK) return s;
  if (p.bad[0] | p.bad[1]) *found_inf = 1; /* never cleared here: callers accumulate over several buffers */
  return LAMP_OK;
}
