/*
** The CUDA kernels' per-element math (core/backend/cuda/elementwise_math.h, and stochastic_math.h
** for stochastic rounding and its generator), compiled here as
** plain C on the CPU, against the CPU backend's operations (lamp_X(LAMP_CPU, ...)) bit for bit:
** the CPU proof that the device kernels compute the CPU's values (they run only on a GPU).
**
** Values: every fp16 and bf16 pattern; every 16-bit value as a float, the midpoints between
** neighbours (ties) and one fp32 ulp either side; ±0, ±inf, NaNs with payloads (quiet and
** signalling), fp32 subnormals, FLT_MAX; random fp32 patterns over the whole range. The
** reductions are checked through the device's own combining order, simulated lane by lane:
** arg-max exactly, sum_rows exactly, cross-entropy's count exactly and its loss and gradient to
** the rounding a different summation order allows. Then the fault record's protocol and message
** (core/backend/cuda/fault_record.h), by which a label out of range found on the device becomes
** the CPU's error.
*/
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda/elementwise_math.h"
#include "backend/cuda/fault_record.h"
#include "backend/cuda/stochastic_math.h"
#include "base/error.h"
#include "tensor/half.h"
#include "tensor/stochastic_round.h"

static const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};

/* ---- helpers ------------------------------------------------------------------------------- */

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* A value in [lo, hi). */
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(next_u32() >> 8) * 0x1p-24f; }

#define ASSERT_SAME_BITS(got, want, what, i, input)                                                     \
  do {                                                                                                 \
    uint32_t g_ = bits_of(got), w_ = bits_of(want);                                                    \
    if (g_ != w_)                                                                                      \
      fail_msg("%s: element %zu (input 0x%08x): device math 0x%08x, cpu 0x%08x", what, (size_t)(i),    \
               (unsigned)(input), (unsigned)g_, (unsigned)w_);                                         \
  } while (0)

/* The same for arithmetic results: any NaN matches any NaN. Which operand's payload a NaN sum
   keeps depends on the order the compiler gives a commutative operation (the sanitizer build
   swaps some), and a GPU returns its canonical NaN; the value is the same, the bits need not be. */
#define ASSERT_SAME_VALUE(got, want, what, i, input)                                                    \
  do {                                                                                                 \
    float gv_ = (got), wv_ = (want);                                                                   \
    if (!(lamp_em_isnan(gv_) && lamp_em_isnan(wv_))) ASSERT_SAME_BITS(gv_, wv_, what, i, input);      \
  } while (0)

/* The edge and sweep values every elementwise check runs over (allocated, *count set). */
static float *value_set(size_t *count) {
  size_t cap = 65536 * 8 + (1u << 20) + 64, n = 0;
  float *v = malloc(cap * sizeof *v);
  assert_non_null(v);
  static const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7fc00001u,
      0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu, 0xffffffffu, 0x7f802000u, 0x7fa00000u,
      0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0xff7fffffu,
      0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x33000000u, 0x33000001u, 0xb3000000u, 0x38800000u,
      0x387fffffu, 0x3f800000u, 0xbf800000u, 0x7f7f8000u, 0x7f7f7fffu, 0x3f808000u, 0x3f818000u};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) v[n++] = float_of(specials[i]);
  for (uint32_t h = 0; h < 65536; h++) {
    float f = lamp_f16_to_f32((uint16_t)h);
    v[n++] = f;
    uint32_t e = (h >> 10) & 0x1fu;
    if (e != 0x1fu && (h & 0x7fffu) != 0x7bffu) { /* the tie with the next fp16 up, and its neighbours */
      float mid = (float)(((double)f + (double)lamp_f16_to_f32((uint16_t)(h + 1))) / 2.0);
      v[n++] = mid;
      v[n++] = nextafterf(mid, INFINITY);
      v[n++] = nextafterf(mid, -INFINITY);
    }
    v[n++] = float_of(h << 16);            /* the bf16 value */
    v[n++] = float_of((h << 16) | 0x8000u); /* its tie with the next, and the neighbours */
    v[n++] = float_of((h << 16) | 0x7fffu);
    v[n++] = float_of((h << 16) | 0x8001u);
  }
  for (size_t i = 0; i < (1u << 20); i++) v[n++] = float_of(next_u32());
  *count = n;
  return v;
}

/* ---- conversions ----------------------------------------------------------------------------- */

static void widening_matches_every_pattern(void **state) {
  (void)state;
  uint16_t h[65536];
  float cpu_f16[65536], cpu_bf16[65536];
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  assert_int_equal(lamp_convert(LAMP_CPU, cpu_f16, LAMP_F32, h, LAMP_F16, 65536), LAMP_OK);
  assert_int_equal(lamp_convert(LAMP_CPU, cpu_bf16, LAMP_F32, h, LAMP_BF16, 65536), LAMP_OK);
  for (uint32_t i = 0; i < 65536; i++) {
    ASSERT_SAME_BITS(lamp_em_f16_to_f32(h[i]), cpu_f16[i], "f16 -> f32", i, i);
    ASSERT_SAME_BITS(lamp_em_f16_to_f32(h[i]), lamp_f16_to_f32(h[i]), "f16 -> f32 (scalar)", i, i);
    ASSERT_SAME_BITS(lamp_em_bf16_to_f32(h[i]), cpu_bf16[i], "bf16 -> f32", i, i);
    assert_true(bits_of(lamp_em_load(h, LAMP_F16, i)) == bits_of(cpu_f16[i]));
    assert_true(bits_of(lamp_em_load(h, LAMP_BF16, i)) == bits_of(cpu_bf16[i]));
  }
}

static void narrowing_matches_on_edges_and_sweep(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  uint16_t *cpu = malloc(n * sizeof *cpu), *dev = malloc(n * sizeof *dev);
  assert_non_null(cpu);
  assert_non_null(dev);
  for (int d = 1; d < 3; d++) {
    lamp_dtype t = dtypes[d];
    assert_int_equal(lamp_convert(LAMP_CPU, cpu, t, v, LAMP_F32, n), LAMP_OK);
    for (size_t i = 0; i < n; i++) lamp_em_store(dev, t, i, v[i]);
    for (size_t i = 0; i < n; i++) {
      uint16_t scalar = t == LAMP_F16 ? lamp_f32_to_f16(v[i]) : lamp_f32_to_bf16(v[i]);
      if (dev[i] != cpu[i] || dev[i] != scalar)
        fail_msg("f32 -> %s: 0x%08x gives 0x%04x, cpu 0x%04x", t == LAMP_F16 ? "f16" : "bf16",
                 (unsigned)bits_of(v[i]), dev[i], cpu[i]);
    }
  }
  /* A strided sweep over all 2^32 patterns (every exponent, sign and NaN class). */
  for (uint64_t u = 0; u < (1ull << 32); u += 257) {
    float x = float_of((uint32_t)u);
    if (lamp_em_f32_to_f16(x) != lamp_f32_to_f16(x)) fail_msg("f32 -> f16: 0x%08x", (unsigned)u);
    if (lamp_em_f32_to_bf16(x) != lamp_f32_to_bf16(x)) fail_msg("f32 -> bf16: 0x%08x", (unsigned)u);
  }
  free(cpu);
  free(dev);
  free(v);
}

/* f16 <-> bf16 and the same-dtype copies, as lamp_convert does them (through fp32). */
static void convert_between_16bit_dtypes(void **state) {
  (void)state;
  uint16_t h[65536], cpu[65536];
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (int s = 1; s < 3; s++) {
    lamp_dtype src = dtypes[s], dst = dtypes[3 - s];
    assert_int_equal(lamp_convert(LAMP_CPU, cpu, dst, h, src, 65536), LAMP_OK);
    for (uint32_t i = 0; i < 65536; i++) {
      uint16_t got[2] = {0, 0}; /* room for a float as far as the compiler can tell */
      lamp_em_store(got, dst, 0, lamp_em_load(h, src, i));
      if (got[0] != cpu[i]) fail_msg("convert 0x%04x: device math 0x%04x, cpu 0x%04x", (unsigned)i, got[0], cpu[i]);
    }
  }
}

static void fill_rounds_like_the_cpu(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  for (size_t i = 0; i < n; i += 7) {
    for (int d = 0; d < 3; d++) {
      uint32_t cpu[3] = {0, 0, 0}, dev[3] = {0, 0, 0};
      assert_int_equal(lamp_fill(LAMP_CPU, cpu, dtypes[d], 3, v[i]), LAMP_OK);
      for (size_t j = 0; j < 3; j++) lamp_em_store(dev, dtypes[d], j, v[i]);
      assert_memory_equal(dev, cpu, sizeof cpu);
    }
  }
  free(v);
}

/* ---- rounding helpers ------------------------------------------------------------------------ */

static void rounding_helpers_match(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  float *cpu = malloc(n * sizeof *cpu), *acc = malloc(n * sizeof *acc);
  assert_non_null(cpu);
  assert_non_null(acc);
  for (int d = 0; d < 3; d++) {
    assert_int_equal(lamp_round_through(LAMP_CPU, cpu, v, dtypes[d], n), LAMP_OK);
    for (size_t i = 0; i < n; i++) ASSERT_SAME_BITS(lamp_em_round_via(v[i], dtypes[d]), cpu[i], "round_through", i, bits_of(v[i]));
    for (size_t i = 0; i < n; i++) acc[i] = uniform(-4.0f, 4.0f);
    memcpy(cpu, acc, n * sizeof *cpu);
    assert_int_equal(lamp_accumulate_rounded(LAMP_CPU, cpu, v, dtypes[d], n), LAMP_OK);
    for (size_t i = 0; i < n; i++) {
      float want = cpu[i], got = lamp_em_add(acc[i], lamp_em_round_via(v[i], dtypes[d]));
      ASSERT_SAME_BITS(got, want, "accumulate_rounded", i, bits_of(v[i]));
    }
  }
  free(acc);
  free(cpu);
  free(v);
}

/* ---- ReLU ------------------------------------------------------------------------------------- */

/* Stochastic rounding (stochastic_math.h against tensor/philox.h and tensor/stochastic_round.h):
   each value with the extreme words and a random one, then a whole array the way the kernel walks
   it (counter by counter, four elements each) against lamp_round_stochastic on the CPU. */
static void stochastic_rounding_matches(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  for (size_t i = 0; i < n; i++) {
    const uint32_t words[3] = {0u, 0xffffffffu, next_u32()};
    for (int k = 0; k < 3; k++) {
      if (lamp_em_f32_to_bf16_sr(v[i], words[k]) != lamp_f32_to_bf16_sr(v[i], words[k]))
        fail_msg("bf16 stochastic rounding of 0x%08x with r %08x differs", (unsigned)bits_of(v[i]), (unsigned)words[k]);
      if (lamp_em_f32_to_f16_sr(v[i], words[k]) != lamp_f32_to_f16_sr(v[i], words[k]))
        fail_msg("fp16 stochastic rounding of 0x%08x with r %08x differs", (unsigned)bits_of(v[i]), (unsigned)words[k]);
    }
  }
  uint16_t *cpu = malloc(n * sizeof *cpu), *dev = malloc(n * sizeof *dev);
  assert_non_null(cpu);
  assert_non_null(dev);
  for (int d = 1; d < 3; d++) {
    lamp_dtype t = dtypes[d];
    assert_int_equal(lamp_round_stochastic(LAMP_CPU, cpu, t, v, n, 0xfeedfacecafebeefull, 123456789), LAMP_OK);
    memset(dev, 0, n * sizeof *dev);
    for (uint64_t block = 0; block < (n + 63) / 64 * 16; block++) {
      uint32_t words[4];
      lamp_em_philox_block(words, 0xfeedfacecafebeefull, 123456789, block);
      for (int w = 0; w < 4; w++) {
        uint64_t i = lamp_em_philox_element(block, w);
        if (i < n) dev[i] = lamp_em_round_sr(v[i], words[w], t);
      }
    }
    for (size_t i = 0; i < n; i++)
      if (dev[i] != cpu[i])
        fail_msg("round_stochastic to %s: element %zu (input 0x%08x): device math %04x, cpu %04x", t == LAMP_F16 ? "f16" : "bf16",
                 i, (unsigned)bits_of(v[i]), dev[i], cpu[i]);
  }
  free(cpu);
  free(dev);
  free(v);
}

static void relu_matches(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  float *y = malloc(n * sizeof *y), *dy = malloc(n * sizeof *dy);
  assert_non_null(y);
  assert_non_null(dy);
  assert_int_equal(lamp_relu_forward(LAMP_CPU, y, v, LAMP_F32, n), LAMP_OK);
  for (size_t i = 0; i < n; i++) ASSERT_SAME_BITS(lamp_em_relu(v[i]), y[i], "relu f32", i, bits_of(v[i]));
  for (size_t i = 0; i < n; i++) dy[i] = float_of(next_u32());
  assert_int_equal(lamp_relu_backward(LAMP_CPU, y, dy, v, LAMP_F32, n), LAMP_OK);
  for (size_t i = 0; i < n; i++) ASSERT_SAME_BITS(lamp_em_relu_grad(dy[i], v[i]), y[i], "relu_backward f32", i, bits_of(v[i]));
  /* 16-bit: every pattern forward, every pattern as y backward (on the bits). */
  uint16_t x16[65536], out16[65536], dy16[65536];
  for (uint32_t i = 0; i < 65536; i++) {
    x16[i] = (uint16_t)i;
    dy16[i] = (uint16_t)next_u32();
  }
  for (int d = 1; d < 3; d++) {
    uint16_t inf = lamp_em_inf_bits(dtypes[d]);
    assert_int_equal(lamp_relu_forward(LAMP_CPU, out16, x16, dtypes[d], 65536), LAMP_OK);
    for (uint32_t i = 0; i < 65536; i++) {
      assert_int_equal(lamp_em_relu_bits(x16[i], inf), out16[i]);
      /* and the bit form is the fp32 rule on the widened value, rounded back (a signalling NaN
         aside, which the bit form passes unquieted, as the CPU does) */
      uint16_t via_f32[2] = {0, 0};
      lamp_em_store(via_f32, dtypes[d], 0, lamp_em_relu(lamp_em_load(x16, dtypes[d], i)));
      if (!lamp_em_isnan(lamp_em_load(x16, dtypes[d], i))) assert_int_equal(out16[i], via_f32[0]);
    }
    assert_int_equal(lamp_relu_backward(LAMP_CPU, out16, dy16, x16, dtypes[d], 65536), LAMP_OK);
    for (uint32_t i = 0; i < 65536; i++) assert_int_equal(lamp_em_relu_grad_bits(dy16[i], x16[i], inf), out16[i]);
  }
  free(dy);
  free(y);
  free(v);
}

/* ---- sums, Dropout, vector updates ---------------------------------------------------------- */

/*
** Results of arithmetic: the same bits, except that two NaNs count as equal. Which NaN an x86
** addition returns when both operands are NaN depends on the operand order the compiler picks
** (the CPU's vectorised loop and a scalar one may differ), and a GPU returns the canonical NaN:
** NaN-ness is the contract, its payload is not.
*/
static void assert_same_values(const void *dev, const void *cpu, lamp_dtype t, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    float a = lamp_em_load(dev, t, i), b = lamp_em_load(cpu, t, i);
    if (bits_of(a) != bits_of(b) && !(lamp_em_isnan(a) && lamp_em_isnan(b)))
      fail_msg("%s: element %zu: device math %a (0x%08x), cpu %a (0x%08x)", what, i, (double)a, (unsigned)bits_of(a),
               (double)b, (unsigned)bits_of(b));
  }
}

/* Arrays of n values of any dtype, filled from the edge set and random values. */
static void fill_input(void *x, lamp_dtype t, const float *v, size_t nv, size_t n) {
  for (size_t i = 0; i < n; i++) lamp_em_store(x, t, i, (i & 1) ? v[next_u32() % nv] : uniform(-100.0f, 100.0f));
}

static void add_and_mask_match(void **state) {
  (void)state;
  size_t nv;
  float *v = value_set(&nv);
  enum { N = 4099 };
  static float a[N], b[N], y_cpu[N], y_dev[N];
  static uint8_t mask[N];
  for (int ya = 0; ya < 3; ya++)
    for (int aa = 0; aa < 3; aa++)
      for (int bb = 0; bb < 3; bb++) {
        lamp_dtype yt = dtypes[ya], at = dtypes[aa], bt = dtypes[bb];
        fill_input(a, at, v, nv, N);
        fill_input(b, bt, v, nv, N);
        for (int relu = 0; relu < 2; relu++) {
          assert_int_equal(lamp_add(LAMP_CPU, y_cpu, yt, a, at, b, bt, N, relu), LAMP_OK);
          for (size_t i = 0; i < N; i++)
            lamp_em_store(y_dev, yt, i, lamp_em_sum(lamp_em_load(a, at, i), lamp_em_load(b, bt, i), relu));
          assert_same_values(y_dev, y_cpu, yt, N, relu ? "add (relu)" : "add");
        }
        if (bb == 0) { /* apply_mask and add_bias_rows: y and x dtypes */
          for (size_t i = 0; i < N; i++) mask[i] = (uint8_t)(next_u32() & 1);
          float scale = uniform(0.5f, 3.0f);
          assert_int_equal(lamp_apply_mask(LAMP_CPU, y_cpu, yt, a, at, mask, scale, N), LAMP_OK);
          for (size_t i = 0; i < N; i++) lamp_em_store(y_dev, yt, i, lamp_em_masked(mask[i], lamp_em_load(a, at, i), scale));
          assert_same_values(y_dev, y_cpu, yt, N, "apply_mask");
          size_t rows = 17, cols = 241;
          fill_input(y_cpu, yt, v, nv, rows * cols);
          memcpy(y_dev, y_cpu, sizeof y_cpu);
          assert_int_equal(lamp_add_bias_rows(LAMP_CPU, y_cpu, yt, a, at, rows, cols), LAMP_OK);
          for (size_t i = 0; i < rows * cols; i++)
            lamp_em_store(y_dev, yt, i, lamp_em_add(lamp_em_load(y_dev, yt, i), lamp_em_load(a, at, i % cols)));
          assert_same_values(y_dev, y_cpu, yt, rows * cols, "add_bias_rows");
        }
      }
  free(v);
}

static void vector_updates_match(void **state) {
  (void)state;
  size_t n;
  float *v = value_set(&n);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *dev = malloc(n * sizeof *dev);
  assert_non_null(x);
  assert_non_null(y);
  assert_non_null(dev);
  const float alphas[] = {0.37f, -3.0f, 1.0f, 0x1p-130f, 1e30f, 0.0f};
  for (size_t k = 0; k < sizeof alphas / sizeof *alphas; k++) {
    float alpha = alphas[k];
    memcpy(x, v, n * sizeof *x);
    assert_int_equal(lamp_scale(LAMP_CPU, x, n, alpha), LAMP_OK);
    for (size_t i = 0; i < n; i++) ASSERT_SAME_VALUE(lamp_em_mul(v[i], alpha), x[i], "scale", i, bits_of(v[i]));
    for (size_t i = 0; i < n; i++) y[i] = dev[i] = float_of(next_u32());
    assert_int_equal(lamp_axpy(LAMP_CPU, y, v, n, alpha), LAMP_OK);
    for (size_t i = 0; i < n; i++) ASSERT_SAME_VALUE(lamp_em_axpy(dev[i], alpha, v[i]), y[i], "axpy", i, bits_of(v[i]));
    /* unscale_and_check: the values and the flag (a scale of 1 writes nothing) */
    int found_cpu = 0, found_dev = 0;
    memcpy(x, v, n * sizeof *x);
    assert_int_equal(lamp_unscale_and_check(LAMP_CPU, x, n, alpha, &found_cpu), LAMP_OK);
    for (size_t i = 0; i < n; i++) {
      float g = alpha == 1.0f ? v[i] : lamp_em_mul(v[i], alpha);
      ASSERT_SAME_VALUE(g, x[i], "unscale_and_check", i, bits_of(v[i]));
      found_dev |= !lamp_em_isfinite(g);
    }
    assert_int_equal(found_dev, found_cpu);
  }
  /* the flag on an all-finite slab stays clear */
  int found = 0;
  for (size_t i = 0; i < 1000; i++) x[i] = uniform(-1.0f, 1.0f);
  assert_int_equal(lamp_unscale_and_check(LAMP_CPU, x, 1000, 0.5f, &found), LAMP_OK);
  for (size_t i = 0; i < 1000; i++) assert_true(lamp_em_isfinite(x[i]));
  assert_int_equal(found, 0);
  free(dev);
  free(y);
  free(x);
  free(v);
}

static void sum_rows_matches_column_order(void **state) {
  (void)state;
  enum { ROWS = 37, COLS = 1031 };
  static float dy[ROWS * COLS], cpu[COLS], dev[COLS];
  size_t nv;
  float *v = value_set(&nv);
  const float ab[][2] = {{1.0f, 0.0f}, {0.25f, 1.0f}, {-2.0f, 0.5f}};
  for (int d = 0; d < 3; d++) {
    for (size_t i = 0; i < ROWS * COLS; i++) lamp_em_store(dy, dtypes[d], i, uniform(-3.0f, 3.0f));
    lamp_em_store(dy, dtypes[d], 5, v[3]); /* a column with inf, one with NaN */
    lamp_em_store(dy, dtypes[d], COLS + 9, v[4]);
    for (size_t k = 0; k < 3; k++) {
      float alpha = ab[k][0], beta = ab[k][1];
      for (size_t c = 0; c < COLS; c++) cpu[c] = dev[c] = beta == 0.0f ? NAN : uniform(-1.0f, 1.0f);
      assert_int_equal(lamp_sum_rows(LAMP_CPU, cpu, dy, dtypes[d], ROWS, COLS, alpha, beta), LAMP_OK);
      for (size_t c = 0; c < COLS; c++)
        dev[c] = lamp_em_blend(beta == 0.0f ? 0.0f : dev[c], lamp_em_column_sum(dy, dtypes[d], ROWS, COLS, c), alpha, beta);
      for (size_t c = 0; c < COLS; c++) ASSERT_SAME_BITS(dev[c], cpu[c], "sum_rows", c, 0);
    }
  }
  free(v);
}

/* ---- arg-max and cross-entropy, through the device's lane structure ------------------------- */

/* argmax_rows_kernel on one row: 32 lanes fold strided columns, then the xor butterfly. */
static size_t device_argmax(const void *x, lamp_dtype t, size_t first, size_t cols, float *max) {
  float best[32];
  size_t at[32];
  for (size_t l = 0; l < 32; l++) {
    best[l] = -INFINITY;
    at[l] = LAMP_EM_NO_INDEX;
    for (size_t c = l; c < cols; c += 32) {
      float v = lamp_em_load(x, t, first + c);
      if (lamp_em_argmax_beats(v, c, best[l], at[l])) {
        best[l] = v;
        at[l] = c;
      }
    }
  }
  for (size_t offset = 16; offset > 0; offset /= 2) {
    float nb[32];
    size_t na[32];
    for (size_t l = 0; l < 32; l++) {
      nb[l] = best[l];
      na[l] = at[l];
      if (lamp_em_argmax_beats(best[l ^ offset], at[l ^ offset], best[l], at[l])) {
        nb[l] = best[l ^ offset];
        na[l] = at[l ^ offset];
      }
    }
    memcpy(best, nb, sizeof nb);
    memcpy(at, na, sizeof na);
  }
  for (size_t l = 1; l < 32; l++) assert_true(at[l] == at[0]); /* every lane agrees */
  *max = best[0];
  return at[0] == LAMP_EM_NO_INDEX ? 0 : at[0];
}

/* A row of `cols` logits with ties, -0/+0, -inf, and (by `kind`) NaNs. */
static void special_row(float *row, size_t cols, unsigned kind) {
  for (size_t c = 0; c < cols; c++) row[c] = (float)(next_u32() % 7) - 3.0f; /* many ties */
  if (kind % 5 == 1) row[next_u32() % cols] = NAN;
  if (kind % 5 == 2) {
    row[next_u32() % cols] = NAN;
    row[next_u32() % cols] = -NAN;
  }
  if (kind % 5 == 3)
    for (size_t c = 0; c < cols; c++) row[c] = (c & 1) ? -0.0f : 0.0f;
  if (kind % 5 == 4)
    for (size_t c = 0; c < cols; c++) row[c] = -INFINITY;
}

static void argmax_matches_through_lanes(void **state) {
  (void)state;
  static float x[200];
  static uint16_t x16[200];
  for (unsigned trial = 0; trial < 4000; trial++) {
    size_t cols = 1 + next_u32() % 200;
    special_row(x, cols, trial);
    for (int d = 0; d < 3; d++) {
      const void *data = x;
      if (d > 0) {
        for (size_t c = 0; c < cols; c++) lamp_em_store(x16, dtypes[d], c, x[c]);
        data = x16;
      }
      int32_t cpu = -1;
      assert_int_equal(lamp_argmax_rows(LAMP_CPU, &cpu, data, dtypes[d], 1, cols), LAMP_OK);
      float max;
      assert_int_equal((int32_t)device_argmax(data, dtypes[d], 0, cols, &max), cpu);
    }
  }
}

/* ce_rows_kernel and ce_total_kernel on the host: per-lane double sums, the butterfly, the
   per-row loss, then the block's tree over rows (256 threads). */
static void device_cross_entropy(const void *logits, lamp_dtype t, const int32_t *labels, size_t rows,
                                 size_t classes, float grad_scale, double *loss, void *dlogits, lamp_dtype dt,
                                 size_t *correct) {
  float coef = lamp_em_ce_coef(grad_scale, rows);
  double *row_loss = calloc(rows, sizeof *row_loss);
  int *hit = calloc(rows, sizeof *hit);
  assert_non_null(row_loss);
  assert_non_null(hit);
  for (size_t r = 0; r < rows; r++) {
    size_t first = r * classes;
    float max;
    size_t at = device_argmax(logits, t, first, classes, &max);
    double sum[32];
    for (size_t l = 0; l < 32; l++) {
      sum[l] = 0.0;
      for (size_t c = l; c < classes; c += 32)
        sum[l] = lamp_em_dadd(sum[l], (double)lamp_em_softmax_exp(lamp_em_load(logits, t, first + c) - max));
    }
    for (size_t offset = 16; offset > 0; offset /= 2) {
      double ns[32];
      for (size_t l = 0; l < 32; l++) ns[l] = lamp_em_dadd(sum[l], sum[l ^ offset]);
      memcpy(sum, ns, sizeof ns);
    }
    if (dlogits != NULL)
      for (size_t c = 0; c < classes; c++)
        lamp_em_store(dlogits, dt, first + c,
                      lamp_em_ce_grad(lamp_em_load(logits, t, first + c), max, sum[c % 32], c == (size_t)labels[r], coef));
    row_loss[r] = lamp_em_ce_loss(sum[0], lamp_em_load(logits, t, first + (size_t)labels[r]), max);
    hit[r] = at == (size_t)labels[r];
  }
  double part[256];
  size_t hits = 0;
  for (size_t th = 0; th < 256; th++) {
    part[th] = 0.0;
    for (size_t r = th; r < rows; r += 256) {
      part[th] = lamp_em_dadd(part[th], row_loss[r]);
      hits += (size_t)hit[r];
    }
  }
  for (size_t half = 128; half > 0; half /= 2)
    for (size_t th = 0; th < half; th++) part[th] = lamp_em_dadd(part[th], part[th + half]);
  *loss = rows ? part[0] / (double)rows : 0.0;
  *correct = hits;
  free(hit);
  free(row_loss);
}

static int ulps_apart(float a, float b) {
  if (lamp_em_isnan(a) || lamp_em_isnan(b)) return lamp_em_isnan(a) && lamp_em_isnan(b) ? 0 : 1000;
  int32_t ia = (int32_t)bits_of(a), ib = (int32_t)bits_of(b);
  if (ia < 0) ia = (int32_t)0x80000000u - ia;
  if (ib < 0) ib = (int32_t)0x80000000u - ib;
  int64_t d = (int64_t)ia - ib;
  return (int)(d < 0 ? -d : d);
}

static void cross_entropy_matches_through_lanes(void **state) {
  (void)state;
  const size_t shapes[][2] = {{1, 1}, {3, 10}, {128, 10}, {7, 33}, {64, 100}, {5, 1000}};
  size_t identical = 0, total = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    size_t rows = shapes[s][0], classes = shapes[s][1], n = rows * classes;
    float *x = malloc(n * sizeof *x), *cpu_g = malloc(n * sizeof *cpu_g), *dev_g = malloc(n * sizeof *dev_g);
    int32_t *labels = malloc(rows * sizeof *labels);
    assert_non_null(x);
    assert_non_null(cpu_g);
    assert_non_null(dev_g);
    assert_non_null(labels);
    for (int d = 0; d < 3; d++)
      for (int g = 0; g < 3; g++) {
        for (size_t i = 0; i < n; i++) lamp_em_store(x, dtypes[d], i, uniform(-8.0f, 8.0f));
        for (size_t r = 0; r < rows; r++) labels[r] = (int32_t)(next_u32() % classes);
        double cpu_loss = -1.0, dev_loss = -2.0;
        size_t cpu_hits = 99, dev_hits = 98;
        assert_int_equal(lamp_cross_entropy(LAMP_CPU, x, dtypes[d], labels, rows, classes, 1024.0f, &cpu_loss,
                                            cpu_g, dtypes[g], &cpu_hits),
                         LAMP_OK);
        device_cross_entropy(x, dtypes[d], labels, rows, classes, 1024.0f, &dev_loss, dev_g, dtypes[g], &dev_hits);
        assert_int_equal(dev_hits, cpu_hits);
        assert_true(fabs(dev_loss - cpu_loss) <= 1e-12 * fabs(cpu_loss) + 1e-15);
        for (size_t i = 0; i < n; i++) {
          float a = lamp_em_load(dev_g, dtypes[g], i), b = lamp_em_load(cpu_g, dtypes[g], i);
          if (ulps_apart(a, b) > 1) fail_msg("cross_entropy dlogits[%zu]: %a vs cpu %a", i, (double)a, (double)b);
          identical += bits_of(a) == bits_of(b);
          total++;
        }
      }
    free(labels);
    free(dev_g);
    free(cpu_g);
    free(x);
  }
  /* only a sum's last bits may differ: nearly every gradient element is the CPU's exactly */
  assert_true(identical * 1000 >= total * 999);
}

/*
** The device's exp for the softmax, (float)exp((double)z), against glibc's expf, which the CPU
** uses: at most 1 ulp apart and equal for all but a small fraction of arguments (the rate is
** printed; about 1e-4 when this was written).
*/
static void softmax_exp_is_within_an_ulp_of_expf(void **state) {
  (void)state;
  size_t differ = 0, total = 0;
  for (uint32_t u = 0x80000000u; u <= 0xc2d00000u; u += 61) { /* z in [-104, -0] */
    float z = float_of(u), a = lamp_em_exp_rounded(z), b = expf(z);
    if (ulps_apart(a, b) > 1) fail_msg("exp(%a): %a vs expf %a", (double)z, (double)a, (double)b);
    differ += bits_of(a) != bits_of(b);
    total++;
  }
  print_message("softmax exp: %zu of %zu arguments differ from expf by 1 ulp\n", differ, total);
  assert_true(differ * 1000 < total);
  assert_true(bits_of(lamp_em_softmax_exp(-1.5f)) == bits_of(expf(-1.5f))); /* the host build uses expf */
}

/* ---- the fault record ---------------------------------------------------------------------- */

/* The first fault since the last report wins, is taken once, and reads as the CPU's error. */
static void fault_record_reports_the_first_fault_in_the_cpu_words(void **state) {
  (void)state;
  lamp_cuda_fault f;
  memset((void *)&f, 0, sizeof f);
  int label = 0;
  size_t row = 0, classes = 0;
  assert_int_equal(lamp_cuda_fault_take(&f, &label, &row, &classes), 0);
  lamp_cuda_fault_raise(&f, 12, 3, 10);
  lamp_cuda_fault_raise(&f, -1, 7, 10); /* a later launch's fault, while the first is pending */
  assert_int_equal(lamp_cuda_fault_take(&f, &label, &row, &classes), 1);
  assert_int_equal(label, 12);
  assert_int_equal(row, 3);
  assert_int_equal(classes, 10);
  assert_int_equal(lamp_cuda_fault_take(&f, &label, &row, &classes), 0);
  lamp_cuda_fault_raise(&f, -1, 0, 5); /* after the report, the next one is recorded */
  assert_int_equal(lamp_cuda_fault_take(&f, &label, &row, &classes), 1);
  assert_int_equal(label, -1);
  assert_int_equal(row, 0);
  assert_int_equal(classes, 5);

  float logits[4 * 10] = {0};
  int32_t labels[4] = {1, 2, 3, 12};
  double loss = 0.0;
  assert_int_equal(lamp_cross_entropy(LAMP_CPU, logits, LAMP_F32, labels, 4, 10, 1.0f, &loss, NULL, LAMP_F32, NULL),
                   LAMP_ERR_INVALID_ARG);
  char message[128];
  snprintf(message, sizeof message, LAMP_CUDA_FAULT_LABEL_FORMAT, 12, (size_t)3, (size_t)10);
  assert_string_equal(lamp_last_error(), message);
  assert_string_equal(message, "cross_entropy: label 12 at row 3 is outside [0, 10)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(widening_matches_every_pattern),
      cmocka_unit_test(narrowing_matches_on_edges_and_sweep),
      cmocka_unit_test(convert_between_16bit_dtypes),
      cmocka_unit_test(fill_rounds_like_the_cpu),
      cmocka_unit_test(rounding_helpers_match),
      cmocka_unit_test(stochastic_rounding_matches),
      cmocka_unit_test(relu_matches),
      cmocka_unit_test(add_and_mask_match),
      cmocka_unit_test(vector_updates_match),
      cmocka_unit_test(sum_rows_matches_column_order),
      cmocka_unit_test(argmax_matches_through_lanes),
      cmocka_unit_test(cross_entropy_matches_through_lanes),
      cmocka_unit_test(softmax_exp_is_within_an_ulp_of_expf),
      cmocka_unit_test(fault_record_reports_the_first_fault_in_the_cpu_words),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
