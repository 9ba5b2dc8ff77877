/*
** Rounding through a 16-bit format in fp32 storage: lamp_round_{f16,bf16}_n (dst = widen(round
** (src))) and lamp_add_rounded_{f16,bf16}_n (dst += widen(round(src))), whose AVX2 / F16C bodies
** and scalar tails must equal the scalar conversions (lamp_f32_to_f16 + lamp_f16_to_f32,
** lamp_f32_to_bf16 + lamp_bf16_to_f32) bit for bit, NaN payloads included. The values: every
** 16-bit pattern's float, the midpoints between adjacent 16-bit values and one fp32 ulp either
** side, random and strided fp32 patterns over the whole exponent range, ±0, ±inf, NaNs with
** payloads, fp32 subnormals. Every value goes through a vector lane (whole arrays padded to a
** multiple of 8) and through the scalar path (one element at a time); lengths 0..40 and a large
** one check the body/tail split and that nothing past the end is written; pointers are also
** one element off 32-byte alignment, and the plain form runs in place.
** Then the backend entry points lamp_round_through / lamp_accumulate_rounded (via f32, f16,
** bf16) and their exact error messages, and the CPU's lack of LAMP_CAP_NATIVE_16BIT_GEMM.
*/
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
#include "base/error.h"
#include "tensor/half.h"
#include "test_support.h"

#define FAILS(expr, code, message)                                                    \
  do {                                                                                \
    assert_int_equal((expr), (code));                                                 \
    assert_string_equal(lamp_last_error(), (message));                                \
  } while (0)

/* ---- helpers ----------------------------------------------------------------------------- */

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

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float ref_f16(float x) { return lamp_f16_to_f32(lamp_f32_to_f16(x)); }
static float ref_bf16(float x) { return lamp_bf16_to_f32(lamp_f32_to_bf16(x)); }

typedef struct format {
  const char *name;
  lamp_dtype dtype;
  void (*round)(float *dst, const float *src, size_t n);
  void (*add)(float *dst, const float *src, size_t n);
  float (*ref)(float x);
} format;

static const format FORMATS[2] = {
    {.name = "f16", .dtype = LAMP_F16, .round = lamp_round_f16_n, .add = lamp_add_rounded_f16_n, .ref = ref_f16},
    {.name = "bf16", .dtype = LAMP_BF16, .round = lamp_round_bf16_n, .add = lamp_add_rounded_bf16_n, .ref = ref_bf16},
};

/* Checks made, reported at the end of each test. */
static size_t n_checks;

/* got must be the plain form's result for src: the reference's exact bits. */
static void expect_round(const format *f, float got, float src, const char *where, size_t i) {
  n_checks++;
  uint32_t want = bits_of(f->ref(src));
  if (bits_of(got) != want)
    fail_msg("%s %s [%zu]: src 0x%08x -> 0x%08x, want 0x%08x", f->name, where, i, bits_of(src), bits_of(got),
             want);
}

/*
** got must be d + ref(src) as fp32 adds it. Exact bits, except where the sum of two NaNs is
** NaN: then which operand's payload survives depends on the operand order the compiler picked
** for the scalar add, so only NaN, a set quiet bit and (for inf - inf, where x86 gives its
** default NaN either way) the sign are required.
*/
static void expect_add(const format *f, float got, float d, float src, const char *where, size_t i) {
  n_checks++;
  float r = f->ref(src);
  float want = d + r;
  int ok;
  if (!isnan(want)) ok = bits_of(got) == bits_of(want);
  else if (isnan(r) && !isnan(d)) ok = bits_of(got) == bits_of(r); /* the one NaN, already quiet */
  else if (isnan(d) && !isnan(r)) ok = bits_of(got) == (bits_of(d) | 0x00400000u);
  else if (isnan(d)) ok = isnan(got) && (bits_of(got) & 0x00400000u);
  else ok = isnan(got) && (bits_of(got) & 0x00400000u) && signbit(got) == signbit(want); /* inf - inf */
  if (!ok)
    fail_msg("%s %s [%zu]: 0x%08x + round(0x%08x) = 0x%08x, want 0x%08x", f->name, where, i, bits_of(d),
             bits_of(src), bits_of(got), bits_of(want));
}

/* A growable list of fp32 values. */
typedef struct values {
  float *v;
  size_t n, cap;
} values;

static void push(values *s, float x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    assert_non_null(s->v);
  }
  s->v[s->n++] = x;
}

static void push_bits(values *s, uint32_t u) { push(s, float_of(u)); }

/* Pads to a multiple of 8 so that every value of a whole-array call lands in a vector lane. */
static void pad8(values *s) {
  for (size_t i = 0; s->n % 8 != 0; i++) push(s, s->v[i]);
}

/* ±0, ±inf, NaNs with payloads (signalling and quiet, payload in the high or only the low 16
   or 13 bits), fp32 subnormals, and the edges of both formats. */
static const uint32_t SPECIALS[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,                           /* ±0, ±inf */
    0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7f808000u, 0x7f801000u, 0x7f802000u, /* sNaN, low payload */
    0x7f810000u, 0xff810000u, 0x7fbfffffu, 0xffbfffffu, 0x7fa00000u, 0x7f81e000u, /* sNaN, high payload */
    0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0x7fffffffu, 0xffffffffu, 0x7fd55555u, /* qNaN */
    0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00400000u, 0x00008000u, /* fp32 subnormals */
    0x00007fffu, 0x00018000u, 0x0000ffffu, 0x00800000u, 0x80800000u,             /* ... and the smallest normal */
    0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f7e8000u,             /* bf16 overflow edge */
    0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u, 0xc77ff000u, /* f16 overflow edge */
    0x33000000u, 0x33000001u, 0x32ffffffu, 0x33400000u, 0x33800000u, 0xb3000001u, /* f16 half-subnormal */
    0x387fc000u, 0x387fe000u, 0x387fffffu, 0x38800000u, 0x3f800000u, 0x3f801000u, /* f16 subnormal/normal */
    0x3f808000u, 0x3f818000u, 0x3f800001u, 0xbf808000u, 0x40490fdbu, 0x3dcccccdu,
};
#define N_SPECIALS (sizeof SPECIALS / sizeof SPECIALS[0])

static void push_specials(values *s) {
  for (size_t i = 0; i < N_SPECIALS; i++) push_bits(s, SPECIALS[i]);
}

/* Every f16 and every bf16 pattern as a float (f16 NaNs come widened and quiet, bf16 NaNs with
   their bits, signalling ones included). */
static void push_all_16bit(values *s) {
  for (uint32_t h = 0; h <= 0xffffu; h++) push(s, lamp_f16_to_f32((uint16_t)h));
  for (uint32_t h = 0; h <= 0xffffu; h++) push(s, lamp_bf16_to_f32((uint16_t)h));
}

static void push_around(values *s, float m) {
  push(s, m);
  push(s, nextafterf(m, 0.0f));
  push(s, nextafterf(m, copysignf(INFINITY, m)));
}

/* The midpoint between each pair of adjacent finite f16 values (and, past 65504, the overflow
   threshold 65520, the midpoint to 2^16), both signs, with an fp32 ulp either side. */
static void push_f16_midpoints(values *s) {
  for (uint32_t h = 0; h < 0x7c00u; h++) {
    double lo = lamp_f16_to_f32((uint16_t)h), hi = h == 0x7bffu ? 65536.0 : lamp_f16_to_f32((uint16_t)(h + 1));
    float m = (float)((lo + hi) / 2); /* 12 significant bits at most: exact */
    assert_true((double)m == (lo + hi) / 2);
    push_around(s, m);
    push_around(s, -m);
  }
}

/* bf16: the midpoint of each pattern's interval is the pattern with 0x8000 below it; ±1 ulp is
   0x7fff / 0x8001. Taken for every pattern, so the NaN/inf ones give NaNs whose payload is only
   in the low 16 bits (which must stay NaN, not round to inf) and the largest finite one gives
   the overflow ties. */
static void push_bf16_midpoints(values *s) {
  for (uint32_t h = 0; h <= 0xffffu; h++) {
    push_bits(s, h << 16 | 0x8000u);
    push_bits(s, h << 16 | 0x7fffu);
    push_bits(s, h << 16 | 0x8001u);
  }
}

/* Uniform 32-bit patterns (every exponent, NaNs and subnormals included), fp32 subnormals, and
   a stride through all 2^32 patterns. */
static void push_random(values *s, uint64_t seed) {
  for (int i = 0; i < (1 << 18); i++) push_bits(s, (uint32_t)splitmix64(&seed));
  for (int i = 0; i < 4096; i++) {
    uint32_t u = (uint32_t)splitmix64(&seed);
    push_bits(s, (u & 0x807fffffu)); /* subnormal or zero */
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 16381) push_bits(s, (uint32_t)u);
}

/* A finite or infinite dst value for the accumulating form, by index: zeros of both signs,
   ordinary, huge, tiny and subnormal values, infinities, once in a while NaN. */
static float addend(size_t i) {
  static const uint32_t table[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0xc0600000u, 0x0d800000u, 0x477fe000u,
                                   0x00000001u, 0x80000003u, 0x38800000u, 0xb8000000u, 0x7f800000u, 0xff800000u,
                                   0x3eaaaaabu, 0xc47a0000u, 0x7f7fffffu, 0x7fc00005u};
  uint64_t s = i;
  if (i % 3 == 0) return float_of(table[(i / 3) % (sizeof table / sizeof table[0])]);
  uint32_t u = (uint32_t)splitmix64(&s);
  if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu; /* finite */
  return float_of(u);
}

/* ---- whole value sets through every path -------------------------------------------------- */

/*
** Runs the value set through f: out of place aligned, out of place and in place one element
** off alignment, accumulating (off alignment), and one element at a time (the scalar path,
** for both forms).
*/
static void check_set(const format *f, const values *s) {
  size_t n = s->n;
  assert_int_equal(n % 8, 0);
  float *src = malloc((n + 8) * sizeof *src), *dst = malloc((n + 8) * sizeof *dst);
  assert_non_null(src);
  assert_non_null(dst);

  /* aligned (malloc gives 16 bytes at least; the vector loads are unaligned ones anyway) */
  f->round(dst, s->v, n);
  for (size_t i = 0; i < n; i++) expect_round(f, dst[i], s->v[i], "round", i);

  /* one element off */
  memcpy(src + 1, s->v, n * sizeof *src);
  f->round(dst + 1, src + 1, n);
  for (size_t i = 0; i < n; i++) expect_round(f, dst[1 + i], s->v[i], "round+1", i);

  /* in place */
  f->round(src + 1, src + 1, n);
  for (size_t i = 0; i < n; i++) expect_round(f, src[1 + i], s->v[i], "round in place", i);

  /* accumulating */
  for (size_t i = 0; i < n; i++) dst[1 + i] = addend(i);
  f->add(dst + 1, s->v, n);
  for (size_t i = 0; i < n; i++) expect_add(f, dst[1 + i], addend(i), s->v[i], "add", i);

  /* the scalar path, value by value */
  for (size_t i = 0; i < n; i++) {
    float one;
    f->round(&one, &s->v[i], 1);
    expect_round(f, one, s->v[i], "round n=1", i);
    one = addend(i);
    f->add(&one, &s->v[i], 1);
    expect_add(f, one, addend(i), s->v[i], "add n=1", i);
  }
  free(src);
  free(dst);
}

static void check_both_formats(void (*fill)(values *)) {
  values s = {0};
  fill(&s);
  pad8(&s);
  n_checks = 0;
  for (int k = 0; k < 2; k++) check_set(&FORMATS[k], &s);
  print_message("%zu values, %zu checks\n", s.n, n_checks);
  free(s.v);
}

static void fill_all_16bit(values *s) { push_all_16bit(s); }
static void fill_midpoints(values *s) {
  push_f16_midpoints(s);
  push_bf16_midpoints(s);
}
static void fill_random(values *s) { push_random(s, 0x1234abcdull); }
static void fill_specials(values *s) {
  push_specials(s);
  for (uint32_t u = 1; u < 0x800000u; u += 4099) { /* fp32 subnormals, both signs */
    push_bits(s, u);
    push_bits(s, u | 0x80000000u);
  }
}

static void round_every_16bit_value(void **state) {
  (void)state;
  check_both_formats(fill_all_16bit);
}

static void round_midpoints_and_neighbours(void **state) {
  (void)state;
  check_both_formats(fill_midpoints);
}

static void round_random_and_strided_patterns(void **state) {
  (void)state;
  check_both_formats(fill_random);
}

static void round_specials_nans_subnormals(void **state) {
  (void)state;
  check_both_formats(fill_specials);
}

/* A few values pinned by hand, so a reference that went wrong with the kernels would show. */
static void round_known_values(void **state) {
  (void)state;
  static const struct {
    uint32_t in, f16, bf16;
  } cases[] = {
      {0x3f801000u, 0x3f800000u, 0x3f800000u}, /* 1 + 2^-11: f16 tie to even (down), bf16 down */
      {0x3f803000u, 0x3f804000u, 0x3f800000u}, /* 1 + 3*2^-11: f16 tie to even (up) */
      {0x3f808000u, 0x3f808000u, 0x3f800000u}, /* bf16 tie, even is down */
      {0x3f818000u, 0x3f818000u, 0x3f820000u}, /* bf16 tie, even is up */
      {0x477ff000u, 0x7f800000u, 0x47800000u}, /* 65520: f16 inf */
      {0x477fefffu, 0x477fe000u, 0x47800000u}, /* just below: 65504 */
      {0x7f7fffffu, 0x7f800000u, 0x7f800000u}, /* FLT_MAX: inf in both */
      {0x33000000u, 0x00000000u, 0x33000000u}, /* 2^-25: f16 tie to +0 */
      {0x33000001u, 0x33800000u, 0x33000000u}, /* just above: smallest f16 subnormal 2^-24 */
      {0xb3000001u, 0xb3800000u, 0xb3000000u},
      {0x00000001u, 0x00000000u, 0x00000000u}, /* fp32 subnormal */
      {0x80008000u, 0x80000000u, 0x80000000u}, /* -subnormal bf16 tie to -0 */
      {0x00018000u, 0x00000000u, 0x00020000u}, /* subnormal bf16 tie to even, up */
      {0x7f800001u, 0x7fc00000u, 0x7fc00000u}, /* sNaN, payload only in the low bits: quiet NaN */
      {0xff810000u, 0xffc10000u, 0xffc10000u}, /* top payload kept, quieted, sign kept */
      {0x7f802000u, 0x7fc02000u, 0x7fc00000u}, /* f16 keeps payload bit 13 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    float x = float_of(cases[i].in), a[9], b[9];
    for (int k = 0; k < 9; k++) a[k] = x; /* 8 vector lanes + 1 tail */
    lamp_round_f16_n(b, a, 9);
    for (int k = 0; k < 9; k++)
      if (bits_of(b[k]) != cases[i].f16)
        fail_msg("f16 0x%08x -> 0x%08x, want 0x%08x", cases[i].in, bits_of(b[k]), cases[i].f16);
    lamp_round_bf16_n(b, a, 9);
    for (int k = 0; k < 9; k++)
      if (bits_of(b[k]) != cases[i].bf16)
        fail_msg("bf16 0x%08x -> 0x%08x, want 0x%08x", cases[i].in, bits_of(b[k]), cases[i].bf16);
  }
}

/* ---- lengths, tails, alignment, bounds ---------------------------------------------------- */

#define GUARD 0x7fa5a5a5u /* a signalling NaN no kernel writes */

/*
** Every length 0..40 and two large ones (vector body + every tail length), at alignment
** offsets 0 and 1 (for src and dst independently), from several starting points of a mixed
** value list so each value meets several lane positions; the elements before and after the
** range must keep their guard.
*/
static void lengths_tails_alignment(void **state) {
  (void)state;
  values mix = {0};
  push_specials(&mix);
  uint64_t seed = 7;
  for (int i = 0; i < 2000; i++) {
    uint32_t u = (uint32_t)splitmix64(&seed);
    push_bits(&mix, i % 2 ? u : (u & 0x3fffffffu) | 0x38000000u); /* half of them near the f16 range */
  }
  const size_t lengths[] = {1000, 1029};
  size_t cap = 1100;
  float *src = malloc((cap + 4) * sizeof *src), *dst = malloc((cap + 4) * sizeof *dst);
  assert_non_null(src);
  assert_non_null(dst);
  n_checks = 0;
  for (int k = 0; k < 2; k++) {
    const format *f = &FORMATS[k];
    for (size_t li = 0; li < 41 + 2; li++) {
      size_t n = li < 41 ? li : lengths[li - 41];
      for (size_t start = 0; start < 40; start += 13) {
        const float *v = mix.v + start;
        for (int so = 0; so < 2; so++)
          for (int d_o = 0; d_o < 2; d_o++) {
            float *s = src + so, *d = dst + 1 + d_o;
            memcpy(s, v, n * sizeof *s);
            /* plain */
            for (size_t i = 0; i < cap + 4; i++) dst[i] = float_of(GUARD);
            f->round(d, s, n);
            for (size_t i = 0; i < n; i++) expect_round(f, d[i], v[i], "round len", i);
            assert_int_equal(bits_of(d[-1]), GUARD);
            assert_int_equal(bits_of(d[n]), GUARD);
            /* accumulating */
            for (size_t i = 0; i < n; i++) d[i] = addend(i);
            f->add(d, s, n);
            for (size_t i = 0; i < n; i++) expect_add(f, d[i], addend(i), v[i], "add len", i);
            assert_int_equal(bits_of(d[-1]), GUARD);
            assert_int_equal(bits_of(d[n]), GUARD);
          }
        /* in place, guard on both sides */
        float *p = dst + 1;
        for (size_t i = 0; i < cap + 4; i++) dst[i] = float_of(GUARD);
        memcpy(p, v, n * sizeof *p);
        f->round(p, p, n);
        for (size_t i = 0; i < n; i++) expect_round(f, p[i], v[i], "round in place len", i);
        assert_int_equal(bits_of(p[-1]), GUARD);
        assert_int_equal(bits_of(p[n]), GUARD);
      }
    }
    /* n == 0 touches nothing, NULL included */
    f->round(NULL, NULL, 0);
    f->add(NULL, NULL, 0);
  }
  print_message("%zu checks\n", n_checks);
  free(src);
  free(dst);
  free(mix.v);
}

/* ---- the backend entry points -------------------------------------------------------------- */

/* via f16/bf16: the same bits as the half.h kernels; via f32: a copy, NaN payloads and all. */
static void round_through_matches_kernels(void **state) {
  (void)state;
  values s = {0};
  push_specials(&s);
  push_random(&s, 99);
  size_t n = s.n;
  float *dst = malloc(n * sizeof *dst), *want = malloc(n * sizeof *want);
  assert_non_null(dst);
  assert_non_null(want);
  for (int k = 0; k < 2; k++) {
    const format *f = &FORMATS[k];
    assert_int_equal(lamp_round_through(LAMP_CPU, dst, s.v, f->dtype, n), LAMP_OK);
    f->round(want, s.v, n);
    assert_memory_equal(dst, want, n * sizeof *dst);
    for (size_t i = 0; i < n; i++) expect_round(f, dst[i], s.v[i], "round_through", i);
    /* in place, one element off alignment */
    memcpy(dst, s.v, n * sizeof *dst);
    assert_int_equal(lamp_round_through(LAMP_CPU, dst + 1, dst + 1, f->dtype, n - 1), LAMP_OK);
    assert_int_equal(bits_of(dst[0]), bits_of(s.v[0]));
    for (size_t i = 1; i < n; i++) expect_round(f, dst[i], s.v[i], "round_through in place", i);
  }
  /* via f32: an exact copy (signalling NaNs keep their bits), in place a no-op */
  memset(dst, 0, n * sizeof *dst);
  assert_int_equal(lamp_round_through(LAMP_CPU, dst, s.v, LAMP_F32, n), LAMP_OK);
  assert_memory_equal(dst, s.v, n * sizeof *dst);
  assert_int_equal(lamp_round_through(LAMP_CPU, dst, dst, LAMP_F32, n), LAMP_OK);
  assert_memory_equal(dst, s.v, n * sizeof *dst);
  /* n == 0: nothing read or written, NULL allowed */
  assert_int_equal(lamp_round_through(LAMP_CPU, NULL, NULL, LAMP_F16, 0), LAMP_OK);
  /* A slab large enough to be rounded in two halves on two threads: the same bits throughout,
     the cut (at an element multiple of 16) included, and nothing written past the end. */
  const size_t big = 1000003;
  float *in = malloc(big * sizeof *in), *out = malloc((big + 1) * sizeof *out), *ref = malloc(big * sizeof *ref);
  assert_non_null(in);
  assert_non_null(out);
  assert_non_null(ref);
  for (size_t i = 0; i < big; i++) in[i] = s.v[i % n];
  for (int k = 0; k < 2; k++) {
    const format *f = &FORMATS[k];
    out[big] = float_of(GUARD);
    assert_int_equal(lamp_round_through(LAMP_CPU, out, in, f->dtype, big), LAMP_OK);
    f->round(ref, in, big);
    assert_memory_equal(out, ref, big * sizeof *out);
    assert_int_equal(bits_of(out[big]), GUARD);
  }
  free(in);
  free(out);
  free(ref);
  assert_int_equal(lamp_round_through(LAMP_CPU, NULL, NULL, LAMP_F32, 0), LAMP_OK);
  free(dst);
  free(want);
  free(s.v);
}

/* dst += round(src): via f16/bf16 the half.h kernels' bits; via f32 a plain fp32 add. Lengths
   0..40 and a large one cover the f32 path's blocks of 8 and its tail. */
static void accumulate_rounded_matches_kernels(void **state) {
  (void)state;
  values s = {0};
  push_specials(&s);
  push_random(&s, 5);
  size_t n = s.n;
  float *dst = malloc(n * sizeof *dst), *want = malloc(n * sizeof *want);
  assert_non_null(dst);
  assert_non_null(want);
  n_checks = 0;
  for (int k = 0; k < 2; k++) {
    const format *f = &FORMATS[k];
    for (size_t i = 0; i < n; i++) dst[i] = want[i] = addend(i);
    assert_int_equal(lamp_accumulate_rounded(LAMP_CPU, dst, s.v, f->dtype, n), LAMP_OK);
    f->add(want, s.v, n);
    assert_memory_equal(dst, want, n * sizeof *dst);
    for (size_t i = 0; i < n; i++) expect_add(f, dst[i], addend(i), s.v[i], "accumulate_rounded", i);
  }
  for (size_t len = 0; len <= 41; len++) {
    size_t m = len <= 40 ? len : 1003;
    for (int off = 0; off < 2; off++) {
      for (size_t i = 0; i < m + 1; i++) dst[i] = addend(i + 1);
      dst[off + m] = float_of(GUARD);
      assert_int_equal(lamp_accumulate_rounded(LAMP_CPU, dst + off, s.v + off, LAMP_F32, m), LAMP_OK);
      for (size_t i = 0; i < m; i++) {
        float a = addend(off + i + 1), b = s.v[off + i], want_sum = a + b, got = dst[off + i];
        n_checks++;
        if (isnan(want_sum) ? !isnan(got) : bits_of(got) != bits_of(want_sum))
          fail_msg("f32 [%zu]: 0x%08x + 0x%08x = 0x%08x, want 0x%08x", i, bits_of(a), bits_of(b), bits_of(got),
                   bits_of(want_sum));
      }
      assert_int_equal(bits_of(dst[off + m]), GUARD);
    }
  }
  assert_int_equal(lamp_accumulate_rounded(LAMP_CPU, NULL, NULL, LAMP_BF16, 0), LAMP_OK);
  assert_int_equal(lamp_accumulate_rounded(LAMP_CPU, NULL, NULL, LAMP_F32, 0), LAMP_OK);
  print_message("%zu checks\n", n_checks);
  free(dst);
  free(want);
  free(s.v);
}

/* Unsupported device first, then the dtype, then NULL data; dst untouched on every failure. */
static void backend_errors(void **state) {
  (void)state;
  float src[4] = {1.0f, 2.0f, 3.0f, 4.0f}, dst[4] = {9.0f, 9.0f, 9.0f, 9.0f};
  FAILS(lamp_round_through(LAMP_CUDA, dst, src, LAMP_F16, 4), LAMP_ERR_UNSUPPORTED,
        "round_through: " LAMP_TEST_CUDA_UNAVAILABLE);
  FAILS(lamp_accumulate_rounded(LAMP_CUDA, dst, src, LAMP_BF16, 4), LAMP_ERR_UNSUPPORTED,
        "accumulate_rounded: " LAMP_TEST_CUDA_UNAVAILABLE);
  FAILS(lamp_round_through(LAMP_CUDA, dst, src, LAMP_I32, 4), LAMP_ERR_UNSUPPORTED,
        "round_through: " LAMP_TEST_CUDA_UNAVAILABLE);
  FAILS(lamp_round_through(LAMP_CPU, dst, src, LAMP_I32, 4), LAMP_ERR_UNSUPPORTED,
        "round_through: dtype i32 not supported for via (expected f32, f16 or bf16)");
  FAILS(lamp_accumulate_rounded(LAMP_CPU, dst, src, LAMP_U8, 4), LAMP_ERR_UNSUPPORTED,
        "accumulate_rounded: dtype u8 not supported for via (expected f32, f16 or bf16)");
  FAILS(lamp_round_through(LAMP_CPU, NULL, NULL, LAMP_I32, 4), LAMP_ERR_UNSUPPORTED,
        "round_through: dtype i32 not supported for via (expected f32, f16 or bf16)");
  FAILS(lamp_round_through(LAMP_CPU, NULL, src, LAMP_F16, 4), LAMP_ERR_INVALID_ARG, "round_through: dst is NULL");
  FAILS(lamp_round_through(LAMP_CPU, dst, NULL, LAMP_F32, 4), LAMP_ERR_INVALID_ARG, "round_through: src is NULL");
  FAILS(lamp_round_through(LAMP_CPU, NULL, NULL, LAMP_BF16, 1), LAMP_ERR_INVALID_ARG, "round_through: dst is NULL");
  FAILS(lamp_accumulate_rounded(LAMP_CPU, NULL, src, LAMP_BF16, 4), LAMP_ERR_INVALID_ARG,
        "accumulate_rounded: dst is NULL");
  FAILS(lamp_accumulate_rounded(LAMP_CPU, dst, NULL, LAMP_F16, 4), LAMP_ERR_INVALID_ARG,
        "accumulate_rounded: src is NULL");
  FAILS(lamp_accumulate_rounded(LAMP_CPU, dst, NULL, LAMP_F32, 1), LAMP_ERR_INVALID_ARG,
        "accumulate_rounded: src is NULL");
  for (int i = 0; i < 4; i++) assert_true(dst[i] == 9.0f);
}

/* The CPU runs no 16-bit GEMM: layers keep their 16-bit operands widened to fp32. */
static void cpu_has_no_native_16bit_gemm(void **state) {
  (void)state;
  assert_false(lamp_device_has(LAMP_CPU, LAMP_CAP_NATIVE_16BIT_GEMM));
  assert_true(lamp_device_has(LAMP_CPU, LAMP_CAP_HOST_VIEW));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_every_16bit_value),
      cmocka_unit_test(round_midpoints_and_neighbours),
      cmocka_unit_test(round_random_and_strided_patterns),
      cmocka_unit_test(round_specials_nans_subnormals),
      cmocka_unit_test(round_known_values),
      cmocka_unit_test(lengths_tails_alignment),
      cmocka_unit_test(round_through_matches_kernels),
      cmocka_unit_test(accumulate_rounded_matches_kernels),
      cmocka_unit_test(backend_errors),
      cmocka_unit_test(cpu_has_no_native_16bit_gemm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
