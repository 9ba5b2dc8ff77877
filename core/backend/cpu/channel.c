/*
** Per-channel kernels over [n, c, hw] (BatchNorm's statistics, normalisation and input
** gradient, and a convolution's bias gradient). Each image row of a channel is reduced in fp32
** over fixed blocks (vectorised), then folded into a double per channel: rows are short (a
** plane), so the fp32 part carries only a few hundred terms, and the many rows add in double.
*/
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/half_avx512.h"

#define BLOCK LAMP_CPU_BLOCK

/* a read through a ReLU's mask taken from b (lamp_relu_mask), when `masked` (a constant once
   inlined); a masked-off element reads as +0, as lamp_relu_backward writes it. */
static inline __attribute__((always_inline)) float through_mask(float a, float b, float ms, float mq, float mz,
                                                                int masked) {
  if (!masked) return a;
  return b * ms + mq > mz ? a : 0.0f;
}

typedef struct reduce_job {
  const void *a, *b; /* b may be NULL */
  lamp_dtype a_dtype, b_dtype;
  const float *a_center, *b_center;
  size_t n, c, hw;
  double *sum_a, *sum_ab;
  const lamp_relu_mask *mask; /* a read through it (b is then set), or NULL */
} reduce_job;

/*
** One image row, elements [first, first + hw): without b, sum = the sum of (a - ca); with b,
** sum = the sum of a and dot = the sum of (a - ca)(b - cb), a read through the mask when
** `masked`, each with its own accumulators (the bits of two separate passes), reading a once.
** Lane l of fixed blocks takes elements l, l + BLOCK, ... of the row's whole blocks, the last
** hw % BLOCK elements are summed on their own, then the lanes are added to them in order.
** 16-bit rows are widened a chunk at a time; LAMP_CPU_CHUNK is a multiple of BLOCK, so the
** blocks and the tail, and the bits, are those of one pass over the whole row.
*/
static inline __attribute__((always_inline)) void sum_row(const reduce_job *j, size_t first, float ca, float cb,
                                                          float ms, float mq, float mz, int masked, float *sum,
                                                          float *dot) {
  float stage_a[LAMP_CPU_CHUNK], stage_b[LAMP_CPU_CHUNK];
  float acc[BLOCK] = {0}, accd[BLOCK] = {0}, s = 0.0f, d = 0.0f;
  int same = j->b == j->a && j->b_dtype == j->a_dtype;
  for (size_t c0 = 0; c0 < j->hw; c0 += LAMP_CPU_CHUNK) {
    size_t n = lamp_cpu_min(LAMP_CPU_CHUNK, j->hw - c0), i = 0;
    const float *a = lamp_cpu_read(stage_a, j->a, j->a_dtype, first + c0, n);
    if (j->b == NULL) {
      for (; i + BLOCK <= n; i += BLOCK)
        for (size_t l = 0; l < BLOCK; l++) acc[l] += a[i + l] - ca;
      for (; i < n; i++) s += a[i] - ca;
      continue;
    }
    const float *b = same ? a : lamp_cpu_read(stage_b, j->b, j->b_dtype, first + c0, n);
    for (; i + BLOCK <= n; i += BLOCK)
      for (size_t l = 0; l < BLOCK; l++) {
        float av = through_mask(a[i + l], b[i + l], ms, mq, mz, masked);
        acc[l] += av - 0.0f;
        accd[l] += (av - ca) * (b[i + l] - cb);
      }
    for (; i < n; i++) {
      float av = through_mask(a[i], b[i], ms, mq, mz, masked);
      s += av - 0.0f;
      d += (av - ca) * (b[i] - cb);
    }
  }
  for (size_t l = 0; l < BLOCK; l++) {
    s += acc[l];
    d += accd[l];
  }
  *sum = s;
  *dot = d;
}

/*
** A channel's rows lie a whole image apart, and a row is short (a 14 x 14 bf16 plane is seven
** cache lines), so the hardware prefetcher, which follows a stream for some lines before it runs
** ahead, never gets going: each row waited on memory. The reduction asks for the row AHEAD
** images on while it sums this one. The small ResNet in bf16 trains 6 to 12 % faster with it;
** 2 rows ahead gained less than 4, and 8 no more.
*/
#define AHEAD 4

static inline __attribute__((always_inline)) void prefetch_row(const void *data, lamp_dtype dtype, size_t first,
                                                               size_t n) {
  size_t size = lamp_dtype_size(dtype);
  const char *p = (const char *)data + first * size, *end = p + n * size;
  for (; p < end; p += 64) __builtin_prefetch(p, 0, 3);
}

/* Channel k's rows over every image, folded in image order. */
static inline __attribute__((always_inline)) void reduce_rows(const reduce_job *j, size_t k, double *sum_a,
                                                              double *sum_ab) {
  double sa = 0.0, sab = 0.0;
  float ca = j->a_center != NULL ? j->a_center[k] : 0.0f, cb = j->b_center != NULL ? j->b_center[k] : 0.0f;
  const lamp_relu_mask *m = j->mask;
  for (size_t i = 0; i < j->n; i++) {
    size_t first = (i * j->c + k) * j->hw;
    float s, d;
    if (i + AHEAD < j->n) {
      prefetch_row(j->a, j->a_dtype, first + AHEAD * j->c * j->hw, j->hw);
      if (j->b != NULL && j->b != j->a) prefetch_row(j->b, j->b_dtype, first + AHEAD * j->c * j->hw, j->hw);
    }
    if (j->b == NULL) sum_row(j, first, ca, 0.0f, 0.0f, 0.0f, 0.0f, 0, &s, &d);
    else if (m != NULL) sum_row(j, first, ca, cb, m->scale[k], m->shift[k], m->zero_bound, 1, &s, &d);
    else sum_row(j, first, ca, cb, 0.0f, 0.0f, 0.0f, 0, &s, &d);
    sa += s;
    sab += d;
  }
  *sum_a = sa;
  *sum_ab = sab;
}

static void reduce_rows_sse(const reduce_job *j, size_t k, double *sum_a, double *sum_ab) {
  reduce_rows(j, k, sum_a, sum_ab);
}

#if defined(__x86_64__) || defined(__i386__)
/*
** The same loops 8 lanes wide. Every lane sums what it sums in the SSE build, in the same order,
** and the build never contracts a * b + c into a fused multiply-add (ISO C mode), so the bits
** agree; BatchNorm's statistics run faster by about a quarter. vzeroupper on the way out (see
** tests/unit/test_vector_state.c).
*/
__attribute__((target("avx2"))) static void reduce_rows_avx2(const reduce_job *j, size_t k, double *sum_a,
                                                             double *sum_ab) {
  reduce_rows(j, k, sum_a, sum_ab);
  _mm256_zeroupper();
}
#endif

/* One channel over every image: a task of its own, so the sums never depend on the threads. */
static lamp_status reduce_channel(void *ctx, size_t worker, size_t k) {
  const reduce_job *j = ctx;
  (void)worker;
  double sa, sab;
#if defined(__x86_64__) || defined(__i386__)
  if (lamp_cpu_has(LAMP_ISA_AVX2)) reduce_rows_avx2(j, k, &sa, &sab);
  else reduce_rows_sse(j, k, &sa, &sab);
#else
  reduce_rows_sse(j, k, &sa, &sab);
#endif
  j->sum_a[k] = sa;
  if (j->b != NULL) j->sum_ab[k] = sab;
  return LAMP_OK;
}

/* Work below this many elements stays on the calling thread (a thread costs ~20 us). */
#define PARALLEL_MIN 32768

static lamp_status run_reduce(reduce_job *j) {
  if (j->n * j->c * j->hw < PARALLEL_MIN) {
    for (size_t k = 0; k < j->c; k++) reduce_channel(j, 0, k);
    return LAMP_OK;
  }
  return lamp_cpu_parallel_for(j->c, reduce_channel, j);
}

static lamp_status check_inputs(const char *fn, lamp_dtype a_dtype, const void *b, lamp_dtype b_dtype) {
  lamp_status s = lamp_cpu_check_float(fn, "a", a_dtype);
  if (s == LAMP_OK && b != NULL) s = lamp_cpu_check_float(fn, "b", b_dtype);
  return s;
}

lamp_status lamp_cpu_channel_reduce(const void *a, lamp_dtype a_dtype, const float *a_center, const void *b,
                                    lamp_dtype b_dtype, const float *b_center, size_t n, size_t c, size_t hw,
                                    double *sum_a, double *sum_ab) {
  lamp_status s = check_inputs("channel_reduce", a_dtype, b, b_dtype);
  if (s != LAMP_OK) return s;
  reduce_job j = {a, b, a_dtype, b_dtype, a_center, b_center, n, c, hw, sum_a, sum_ab, NULL};
  return run_reduce(&j);
}

lamp_status lamp_cpu_channel_reduce_masked(const void *a, lamp_dtype a_dtype, const void *b, lamp_dtype b_dtype,
                                           const float *b_center, const lamp_relu_mask *mask, size_t n, size_t c,
                                           size_t hw, double *sum_a, double *sum_ab) {
  if (b == NULL || mask == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "channel_reduce_masked: the mask's input b and the mask are required");
  lamp_status s = check_inputs("channel_reduce_masked", a_dtype, b, b_dtype);
  if (s != LAMP_OK) return s;
  reduce_job j = {a, b, a_dtype, b_dtype, NULL, b_center, n, c, hw, sum_a, sum_ab, mask};
  return run_reduce(&j);
}

typedef struct affine_job {
  void *y;
  const void *x, *a, *b;
  lamp_dtype y_dtype, x_dtype, a_dtype, b_dtype;
  const float *scale, *shift, *p, *q, *r;
  size_t n, c, hw, tasks;
  int relu;
  const lamp_relu_mask *mask; /* combine: a read through it, or NULL */
} affine_job;

/* ReLU's rule (lamp_relu_forward): v <= 0 gives +0, NaN passes through. */
static inline float rectify(float v) { return v <= 0.0f ? 0.0f : v; }

/* The images [i0, i1) of task t when n images are dealt into `tasks` contiguous ranges. */
static void image_range(size_t n, size_t tasks, size_t t, size_t *i0, size_t *i1) {
  *i0 = n * t / tasks;
  *i1 = n * (t + 1) / tasks;
}

static size_t task_count(size_t n, size_t elements) {
  size_t threads = lamp_cpu_threads();
  if (elements < PARALLEL_MIN || threads < 2) return 1;
  return threads < n ? threads : n;
}

/* out = in * sc + sh, rectified when `relu` (a constant once inlined: each form is its own
   loop); blocks go through a local array, so out may alias in and the loop still vectorises (the
   compiler need not prove the pointers apart). */
static inline __attribute__((always_inline)) void affine_row(float *out, const float *in, float sc, float sh, size_t n,
                                                             int relu) {
  size_t e = 0;
  for (; e + BLOCK <= n; e += BLOCK) {
    float v[BLOCK];
    for (size_t k = 0; k < BLOCK; k++) v[k] = in[e + k] * sc + sh;
    if (relu)
      for (size_t k = 0; k < BLOCK; k++) v[k] = rectify(v[k]);
    for (size_t k = 0; k < BLOCK; k++) out[e + k] = v[k];
  }
  for (; e < n; e++) out[e] = relu ? rectify(in[e] * sc + sh) : in[e] * sc + sh;
}

/* yv = av + bv, rectified when `relu` (constant once inlined); yv may be av (each block is read
   whole before it is written). */
static inline __attribute__((always_inline)) void add_chunk(float *yv, const float *av, const float *bv, size_t len,
                                                            int relu) {
  size_t e = 0;
  for (; e + BLOCK <= len; e += BLOCK) {
    float out[BLOCK];
    for (size_t v = 0; v < BLOCK; v++) out[v] = av[e + v] + bv[e + v];
    if (relu)
      for (size_t v = 0; v < BLOCK; v++) out[v] = rectify(out[v]);
    for (size_t v = 0; v < BLOCK; v++) yv[e + v] = out[v];
  }
  for (; e < len; e++) yv[e] = relu ? rectify(av[e] + bv[e]) : av[e] + bv[e];
}

#if defined(__x86_64__) || defined(__i386__)
/*
** bf16 rows with AVX-512 (the affine map, the combine and the addition below), the values widened
** and rounded back in registers: through fp32 stages, the conversions took more of a bf16 ResNet
** step than the arithmetic. The same fp32 products and sums (never fused), and the same rounding,
** so the same bits. Taken when every operand is bf16 and the CPU has AVX-512.
*/
static int bf16_in_registers(lamp_dtype a, lamp_dtype b, lamp_dtype y) {
  return a == LAMP_BF16 && b == LAMP_BF16 && y == LAMP_BF16 && lamp_cpu_has(LAMP_ISA_AVX512F);
}

/* rectify on 16 lanes, when `relu` */
__attribute__((target("avx512f"))) static inline __m512 rectify16(__m512 v, int relu) {
  if (!relu) return v;
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_setzero_ps());
}

__attribute__((target("avx512f"))) static inline __m512 affine16(__m512 x, __m512 scale, __m512 shift, int relu) {
  return rectify16(_mm512_add_ps(_mm512_mul_ps(x, scale), shift), relu);
}

__attribute__((target("avx512f"))) static void affine_rows_bf16_avx512(const affine_job *j, size_t i0, size_t i1) {
  for (size_t i = i0; i < i1; i++)
    for (size_t k = 0; k < j->c; k++) {
      size_t row = (i * j->c + k) * j->hw, e = 0;
      const uint16_t *x = (const uint16_t *)j->x + row;
      uint16_t *y = (uint16_t *)j->y + row;
      __m512 sc = _mm512_set1_ps(j->scale[k]), sh = _mm512_set1_ps(j->shift[k]);
      for (; e + 16 <= j->hw; e += 16) lamp_bf16x16_store(y + e, affine16(lamp_bf16x16_load(x + e), sc, sh, j->relu));
      if (e < j->hw)
        lamp_bf16x16_store_n(y + e, affine16(lamp_bf16x16_load_n(x + e, j->hw - e), sc, sh, j->relu), j->hw - e);
    }
  _mm256_zeroupper();
}
#endif

static lamp_status affine_task(void *ctx, size_t worker, size_t t) {
  const affine_job *j = ctx;
  (void)worker;
  size_t i0, i1;
  image_range(j->n, j->tasks, t, &i0, &i1);
#if defined(__x86_64__) || defined(__i386__)
  if (bf16_in_registers(j->x_dtype, j->x_dtype, j->y_dtype)) {
    affine_rows_bf16_avx512(j, i0, i1);
    return LAMP_OK;
  }
#endif
  float stage[LAMP_CPU_CHUNK], stage_x[LAMP_CPU_CHUNK];
  for (size_t i = i0; i < i1; i++)
    for (size_t k = 0; k < j->c; k++) {
      size_t row = (i * j->c + k) * j->hw;
      float sc = j->scale[k], sh = j->shift[k];
      for (size_t p = 0; p < j->hw; p += LAMP_CPU_CHUNK) {
        size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, j->hw - p);
        const float *in = lamp_cpu_read(stage_x, j->x, j->x_dtype, row + p, len);
        float *out = lamp_cpu_scratch(stage, j->y, j->y_dtype, row + p);
        if (j->relu) {
          affine_row(out, in, sc, sh, len, 1);
        } else {
          affine_row(out, in, sc, sh, len, 0);
        }
        lamp_cpu_commit(j->y, j->y_dtype, row + p, out, len);
      }
    }
  return LAMP_OK;
}

lamp_status lamp_cpu_channel_affine(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const float *scale,
                                    const float *shift, size_t n, size_t c, size_t hw, int relu) {
  lamp_status s = lamp_cpu_check_float("channel_affine", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("channel_affine", "x", x_dtype);
  if (s != LAMP_OK) return s;
  affine_job j = {.y = y,
                  .y_dtype = y_dtype,
                  .x = x,
                  .x_dtype = x_dtype,
                  .scale = scale,
                  .shift = shift,
                  .n = n,
                  .c = c,
                  .hw = hw,
                  .tasks = task_count(n, n * c * hw),
                  .relu = relu != 0};
  return lamp_cpu_parallel_for(j.tasks, affine_task, &j);
}

/* o = pk * a + qk * b + rk, a read through the mask when `masked` (a constant once inlined). */
static inline __attribute__((always_inline)) void combine_row(float *o, const float *ra, const float *rb, float pk,
                                                              float qk, float rk, size_t len, float ms, float mq,
                                                              float mz, int masked) {
  size_t e = 0;
  for (; e + BLOCK <= len; e += BLOCK) { /* through a local block: o may alias a or b */
    float v[BLOCK];
    for (size_t k = 0; k < BLOCK; k++)
      v[k] = pk * through_mask(ra[e + k], rb[e + k], ms, mq, mz, masked) + qk * rb[e + k] + rk;
    for (size_t k = 0; k < BLOCK; k++) o[e + k] = v[k];
  }
  for (; e < len; e++) o[e] = pk * through_mask(ra[e], rb[e], ms, mq, mz, masked) + qk * rb[e] + rk;
}

#if defined(__x86_64__) || defined(__i386__)
/* pk * a + qk * b + rk, a read through the mask when `masked`: combine_row's steps, in its order. */
__attribute__((target("avx512f"))) static inline __m512 combine16(__m512 a, __m512 b, const __m512 *coef, int masked) {
  if (masked)
    a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_add_ps(_mm512_mul_ps(b, coef[3]), coef[4]), coef[5], _CMP_GT_OQ),
                            a);
  return _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(coef[0], a), _mm512_mul_ps(coef[1], b)), coef[2]);
}

__attribute__((target("avx512f"))) static void combine_rows_bf16_avx512(const affine_job *j, size_t i0, size_t i1) {
  const lamp_relu_mask *m = j->mask;
  for (size_t i = i0; i < i1; i++)
    for (size_t k = 0; k < j->c; k++) {
      size_t row = (i * j->c + k) * j->hw, e = 0, left;
      const uint16_t *a = (const uint16_t *)j->a + row, *b = (const uint16_t *)j->b + row;
      uint16_t *o = (uint16_t *)j->y + row;
      /* p, q, r, then the mask's scale, shift and zero bound */
      __m512 coef[6] = {_mm512_set1_ps(j->p[k]),
                        _mm512_set1_ps(j->q[k]),
                        _mm512_set1_ps(j->r[k]),
                        _mm512_set1_ps(m != NULL ? m->scale[k] : 0.0f),
                        _mm512_set1_ps(m != NULL ? m->shift[k] : 0.0f),
                        _mm512_set1_ps(m != NULL ? m->zero_bound : 0.0f)};
      for (; e + 16 <= j->hw; e += 16)
        lamp_bf16x16_store(o + e, combine16(lamp_bf16x16_load(a + e), lamp_bf16x16_load(b + e), coef, m != NULL));
      if ((left = j->hw - e) > 0)
        lamp_bf16x16_store_n(
            o + e, combine16(lamp_bf16x16_load_n(a + e, left), lamp_bf16x16_load_n(b + e, left), coef, m != NULL),
            left);
    }
  _mm256_zeroupper();
}

#endif

/* Rows a chunk at a time through the stage when y is 16-bit (rounded once, as lamp_convert of
   the fp32 result would), in place when y is fp32. */
static lamp_status combine_task(void *ctx, size_t worker, size_t t) {
  const affine_job *j = ctx;
  const lamp_relu_mask *m = j->mask;
  (void)worker;
  size_t i0, i1;
  image_range(j->n, j->tasks, t, &i0, &i1);
#if defined(__x86_64__) || defined(__i386__)
  if (bf16_in_registers(j->a_dtype, j->b_dtype, j->y_dtype)) {
    combine_rows_bf16_avx512(j, i0, i1);
    return LAMP_OK;
  }
#endif
  float stage[LAMP_CPU_CHUNK], stage_a[LAMP_CPU_CHUNK], stage_b[LAMP_CPU_CHUNK];
  for (size_t i = i0; i < i1; i++)
    for (size_t k = 0; k < j->c; k++) {
      size_t row = (i * j->c + k) * j->hw;
      float pk = j->p[k], qk = j->q[k], rk = j->r[k];
      for (size_t p0 = 0; p0 < j->hw; p0 += LAMP_CPU_CHUNK) {
        size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, j->hw - p0);
        const float *ra = lamp_cpu_read(stage_a, j->a, j->a_dtype, row + p0, len);
        const float *rb = lamp_cpu_read(stage_b, j->b, j->b_dtype, row + p0, len);
        float *o = lamp_cpu_scratch(stage, j->y, j->y_dtype, row + p0);
        if (m != NULL) combine_row(o, ra, rb, pk, qk, rk, len, m->scale[k], m->shift[k], m->zero_bound, 1);
        else combine_row(o, ra, rb, pk, qk, rk, len, 0.0f, 0.0f, 0.0f, 0);
        lamp_cpu_commit(j->y, j->y_dtype, row + p0, o, len);
      }
    }
  return LAMP_OK;
}

static lamp_status run_combine(const char *fn, void *out, lamp_dtype out_dtype, const void *a, lamp_dtype a_dtype,
                               const void *b, lamp_dtype b_dtype, const float *p, const float *q, const float *r,
                               const lamp_relu_mask *mask, size_t n, size_t c, size_t hw) {
  lamp_status s = lamp_cpu_check_float(fn, "out", out_dtype);
  if (s == LAMP_OK) s = check_inputs(fn, a_dtype, b, b_dtype);
  if (s != LAMP_OK) return s;
  affine_job j = {.y = out,
                  .y_dtype = out_dtype,
                  .a = a,
                  .a_dtype = a_dtype,
                  .b = b,
                  .b_dtype = b_dtype,
                  .p = p,
                  .q = q,
                  .r = r,
                  .n = n,
                  .c = c,
                  .hw = hw,
                  .tasks = task_count(n, n * c * hw),
                  .mask = mask};
  return lamp_cpu_parallel_for(j.tasks, combine_task, &j);
}

lamp_status lamp_cpu_channel_combine_typed(void *out, lamp_dtype out_dtype, const void *a, lamp_dtype a_dtype,
                                           const void *b, lamp_dtype b_dtype, const float *p, const float *q,
                                           const float *r, size_t n, size_t c, size_t hw) {
  return run_combine("channel_combine", out, out_dtype, a, a_dtype, b, b_dtype, p, q, r, NULL, n, c, hw);
}

lamp_status lamp_cpu_channel_combine_masked(void *out, lamp_dtype out_dtype, const void *a, lamp_dtype a_dtype,
                                            const void *b, lamp_dtype b_dtype, const float *p, const float *q,
                                            const float *r, const lamp_relu_mask *mask, size_t n, size_t c, size_t hw) {
  if (mask == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "channel_combine_masked: the mask is required");
  return run_combine("channel_combine_masked", out, out_dtype, a, a_dtype, b, b_dtype, p, q, r, mask, n, c, hw);
}

/* ---- y = a + b ---------------------------------------------------------------------------- */

typedef struct add_job {
  void *y;
  lamp_dtype y_dtype;
  const void *a, *b;
  lamp_dtype a_dtype, b_dtype;
  size_t n, tasks;
  int relu;
} add_job;

#if defined(__x86_64__) || defined(__i386__)
/* y = a + b, rectified when `relu`; 16 lanes are read before they
   are written, so y may alias a or b. */
__attribute__((target("avx512f"))) static void add_bf16_avx512(const add_job *j, size_t i0, size_t i1) {
  const uint16_t *a = j->a, *b = j->b;
  uint16_t *y = j->y;
  size_t i = i0;
  for (; i + 16 <= i1; i += 16)
    lamp_bf16x16_store(y + i, rectify16(_mm512_add_ps(lamp_bf16x16_load(a + i), lamp_bf16x16_load(b + i)), j->relu));
  if (i < i1)
    lamp_bf16x16_store_n(
        y + i,
        rectify16(_mm512_add_ps(lamp_bf16x16_load_n(a + i, i1 - i), lamp_bf16x16_load_n(b + i, i1 - i)), j->relu),
        i1 - i);
  _mm256_zeroupper();
}

#endif

/* A chunk is read whole before y is written, so y may alias a (y += b) or b exactly. */
static lamp_status add_task(void *ctx, size_t worker, size_t t) {
  const add_job *j = ctx;
  (void)worker;
  size_t end = j->n * (t + 1) / j->tasks;
#if defined(__x86_64__) || defined(__i386__)
  if (bf16_in_registers(j->a_dtype, j->b_dtype, j->y_dtype)) {
    add_bf16_avx512(j, j->n * t / j->tasks, end);
    return LAMP_OK;
  }
#endif
  float ys[LAMP_CPU_CHUNK], as[LAMP_CPU_CHUNK], bs[LAMP_CPU_CHUNK];
  for (size_t i = j->n * t / j->tasks; i < end; i += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, end - i);
    const float *av = lamp_cpu_read(as, j->a, j->a_dtype, i, len);
    const float *bv = lamp_cpu_read(bs, j->b, j->b_dtype, i, len);
    float *yv = lamp_cpu_scratch(ys, j->y, j->y_dtype, i);
    if (j->relu) add_chunk(yv, av, bv, len, 1);
    else add_chunk(yv, av, bv, len, 0);
    lamp_cpu_commit(j->y, j->y_dtype, i, yv, len);
  }
  return LAMP_OK;
}

lamp_status lamp_cpu_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                         lamp_dtype b_dtype, size_t n, int relu) {
  lamp_status s = lamp_cpu_check_float("add", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("add", "a", a_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("add", "b", b_dtype);
  if (s != LAMP_OK) return s;
  add_job j = {y, y_dtype, a, b, a_dtype, b_dtype, n, task_count(n, n), relu != 0};
  return lamp_cpu_parallel_for(j.tasks, add_task, &j);
}

lamp_status lamp_cpu_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n) {
  return lamp_cpu_add(y, y_dtype, y, y_dtype, x, x_dtype, n, 0);
}

/* ---- dtype conversion split across the threads ---------------------------------------- */

typedef struct convert_job {
  void *dst;
  const void *src;
  lamp_dtype dst_dtype, src_dtype;
  size_t n, tasks;
} convert_job;

/* Task t converts [n t / T, n (t + 1) / T) rounded down to 64 elements (the last runs to n):
   elementwise, so the result is lamp_convert's bit for bit. */
static lamp_status convert_task(void *ctx, size_t worker, size_t t) {
  const convert_job *j = ctx;
  (void)worker;
  size_t i0 = j->n * t / j->tasks / 64 * 64;
  size_t i1 = t + 1 == j->tasks ? j->n : j->n * (t + 1) / j->tasks / 64 * 64;
  if (i1 <= i0) return LAMP_OK;
  size_t ds = lamp_dtype_size(j->dst_dtype), ss = lamp_dtype_size(j->src_dtype);
  return lamp_cpu_convert((char *)j->dst + i0 * ds, j->dst_dtype, (const char *)j->src + i0 * ss, j->src_dtype,
                          i1 - i0);
}

lamp_status lamp_cpu_convert_parallel(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype,
                                      size_t n) {
  convert_job j = {dst, src, dst_dtype, src_dtype, n, task_count(n, n)};
  if (j.tasks <= 1 || dst == src) return lamp_cpu_convert(dst, dst_dtype, src, src_dtype, n);
  return lamp_cpu_parallel_for(j.tasks, convert_task, &j);
}

/* ---- y = mask ? x * scale : 0 ------------------------------------------------------------- */

lamp_status lamp_cpu_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const uint8_t *mask,
                                float scale, size_t n) {
  lamp_status s = lamp_cpu_check_float("apply_mask", "y", y_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_float("apply_mask", "x", x_dtype);
  if (s != LAMP_OK) return s;
  float xs[LAMP_CPU_CHUNK], ys[LAMP_CPU_CHUNK];
  for (size_t i = 0; i < n; i += LAMP_CPU_CHUNK) {
    size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, n - i);
    const float *xv = lamp_cpu_read(xs, x, x_dtype, i, len);
    float *yv = lamp_cpu_scratch(ys, y, y_dtype, i);
    for (size_t j = 0; j < len; j++) yv[j] = mask[i + j] ? xv[j] * scale : 0.0f;
    lamp_cpu_commit(y, y_dtype, i, yv, len);
  }
  return LAMP_OK;
}
