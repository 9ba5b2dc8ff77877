/*
** The CPU's GEMM providers (core/backend/cpu/gemm_provider.h) one by one, through lamp_gemm_run:
** every provider this machine has against a naive loop in double, for every transpose pair, a
** padded stride and shapes whose cut into blocks leaves a remainder, in fp32 and (where the
** provider has it) with bf16 operands; the blocks give the same bits on one thread as on two; a
** provider that is not installed is refused with its reason. The process's choice is made with
** LAMP_GEMM=openblas here (set before anything asks), so the CPU then reads no bf16 natively;
** the choice without LAMP_GEMM is checked from outside (tests/cli/test_gemm_provider.sh).
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/gemm_provider.h"
#include "base/error.h"
#include "tensor/half.h"

/* Under AddressSanitizer (scripts/sanitize.sh) only OpenBLAS is tried: its leak check crashes
   at exit scanning the dynamic TLS of a dlopen'ed libdnnl or libblis (GCC 12's runtime on glibc
   2.36), so the sanitizer stage runs with LAMP_GEMM=openblas and this test opens no other. */
#if defined(__SANITIZE_ADDRESS__)
#define PROVIDERS_TRIED 1
#else
#define PROVIDERS_TRIED LAMP_GEMM_PROVIDERS
#endif

/* ---- data and the reference ----------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)(rng_state >> 40) / 16777216.0f - 0.5f;
}

typedef struct gcase {
  int trans_a, trans_b, m, n, k, pad;
  float alpha, beta;
} gcase;

/* 600 rows or columns: three blocks of the 256 the runner cuts, the last one short. */
static const gcase cases[] = {
    {0, 1, 128, 600, 300, 0, 1.0f, 0.0f}, {0, 0, 600, 70, 129, 3, 0.5f, 0.25f}, {1, 0, 600, 257, 128, 0, 1.0f, 1.0f},
    {1, 1, 33, 600, 65, 5, -1.0f, 0.5f},  {0, 0, 17, 9, 1024, 1, 1.0f, 0.0f},
};

typedef struct mats {
  int lda, ldb, ldc;
  float *a, *b, *c0, *c;
  uint16_t *a16, *b16;
} mats;

static void make(const gcase *t, mats *x) {
  int a_rows = t->trans_a ? t->k : t->m, a_cols = t->trans_a ? t->m : t->k;
  int b_rows = t->trans_b ? t->n : t->k, b_cols = t->trans_b ? t->k : t->n;
  x->lda = a_cols + t->pad, x->ldb = b_cols + t->pad, x->ldc = t->n + t->pad;
  size_t na = (size_t)a_rows * x->lda, nb = (size_t)b_rows * x->ldb, nc = (size_t)t->m * x->ldc;
  x->a = malloc(na * sizeof(float)), x->b = malloc(nb * sizeof(float));
  x->c0 = malloc(nc * sizeof(float)), x->c = malloc(nc * sizeof(float));
  x->a16 = malloc(na * sizeof(uint16_t)), x->b16 = malloc(nb * sizeof(uint16_t));
  assert_true(x->a && x->b && x->c0 && x->c && x->a16 && x->b16);
  for (size_t i = 0; i < na; i++) x->a[i] = uniform();
  for (size_t i = 0; i < nb; i++) x->b[i] = uniform();
  for (size_t i = 0; i < nc; i++) x->c0[i] = uniform();
  lamp_f32_to_bf16_n(x->a16, x->a, na);
  lamp_f32_to_bf16_n(x->b16, x->b, nb);
}

static void drop(mats *x) { free(x->a), free(x->b), free(x->c0), free(x->c), free(x->a16), free(x->b16); }

static float at_a(const gcase *t, const mats *x, int bf16, int i, int l) {
  size_t at = t->trans_a ? (size_t)l * x->lda + i : (size_t)i * x->lda + l;
  return bf16 ? lamp_bf16_to_f32(x->a16[at]) : x->a[at];
}

static float at_b(const gcase *t, const mats *x, int bf16, int l, int j) {
  size_t at = t->trans_b ? (size_t)j * x->ldb + l : (size_t)l * x->ldb + j;
  return bf16 ? lamp_bf16_to_f32(x->b16[at]) : x->b[at];
}

/* C (from c0) through p, checked element by element against the double loop: within 1e-5 of
   the magnitude sum |alpha a b| + |beta c|; the padding between rows untouched. */
static void run_and_check(const lamp_gemm_provider *p, const gcase *t, mats *x, int bf16) {
  memcpy(x->c, x->c0, (size_t)t->m * x->ldc * sizeof(float));
  assert_int_equal(lamp_gemm_run(p, bf16, t->trans_a, t->trans_b, t->m, t->n, t->k, t->alpha,
                                 bf16 ? (const void *)x->a16 : x->a, x->lda, bf16 ? (const void *)x->b16 : x->b, x->ldb,
                                 t->beta, x->c, x->ldc),
                   LAMP_OK);
  for (int i = 0; i < t->m; i++) {
    for (int j = 0; j < x->ldc; j++) {
      size_t at = (size_t)i * x->ldc + j;
      if (j >= t->n) {
        if (memcmp(&x->c[at], &x->c0[at], sizeof(float)) != 0) fail_msg("%s: padding C[%d,%d] written", p->name, i, j);
        continue;
      }
      double sum = 0.0, mag = 0.0;
      for (int l = 0; l < t->k; l++) {
        double ab = (double)at_a(t, x, bf16, i, l) * (double)at_b(t, x, bf16, l, j);
        sum += ab;
        mag += fabs(ab);
      }
      double want = t->alpha * sum + t->beta * (double)x->c0[at];
      double budget = 1e-5 * (fabs(t->alpha) * mag + fabs(t->beta * (double)x->c0[at])) + 1e-30;
      if (fabs((double)x->c[at] - want) > budget)
        fail_msg("%s %s (%d%d %dx%dx%d): C[%d,%d] = %.9g, expected %.9g", p->name, bf16 ? "bf16" : "f32", t->trans_a,
                 t->trans_b, t->m, t->n, t->k, i, j, (double)x->c[at], want);
    }
  }
}

/* ---- the process's choice (first: nothing has asked yet) ------------------------------------ */

static void lamp_gemm_chooses_what_it_names(void **state) {
  (void)state;
  lamp_gemm_choice c;
  assert_int_equal(lamp_gemm_choice_get(&c), LAMP_OK);
  assert_string_equal(c.f32->name, "openblas");
  assert_null(c.bf16);
  char text[128];
  lamp_gemm_choice_describe(text, sizeof text);
  assert_string_equal(text, "openblas");
  assert_false(lamp_device_has(LAMP_CPU, LAMP_CAP_NATIVE_BF16_GEMM));
  lamp_device_info info;
  assert_int_equal(lamp_device_describe(LAMP_CPU, 0, &info), LAMP_OK);
  assert_string_equal(info.gemm, "openblas");
}

/* ---- each provider ------------------------------------------------------------------------- */

static void an_unknown_provider_is_refused(void **state) {
  (void)state;
  const lamp_gemm_provider *p = NULL;
  assert_int_equal(lamp_gemm_provider_open("mkl", &p), LAMP_ERR_INVALID_USAGE);
  assert_string_equal(lamp_last_error(),
                      "gemm: LAMP_GEMM names an unknown provider 'mkl' (expected openblas, dnnl or blis)");
  assert_null(p);
}

/* The provider called name, or NULL when this machine lacks its library (the reason checked). */
static const lamp_gemm_provider *open_or_absent(const char *name) {
  const lamp_gemm_provider *p = NULL;
  if (lamp_gemm_provider_open(name, &p) == LAMP_OK) return p;
  char prefix[96];
  snprintf(prefix, sizeof prefix, "gemm: provider '%s' is not available: ", name);
  assert_true(strcmp(name, "openblas") != 0); /* linked: always there */
  assert_memory_equal(lamp_last_error(), prefix, strlen(prefix));
  print_message("%s\n", lamp_last_error());
  return NULL;
}

static void every_provider_computes_the_product(void **state) {
  (void)state;
  for (int i = 0; i < PROVIDERS_TRIED; i++) {
    const lamp_gemm_provider *p = open_or_absent(lamp_gemm_provider_name(i));
    if (p == NULL) continue;
    assert_string_equal(p->name, lamp_gemm_provider_name(i));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      mats x;
      make(&cases[c], &x);
      run_and_check(p, &cases[c], &x, 0);
      if (p->gemm_bf16 != NULL) run_and_check(p, &cases[c], &x, 1);
      drop(&x);
    }
  }
}

/* lamp's pool takes as many threads as OpenBLAS; the cut into blocks does not follow them. */
static void blocks_give_the_same_bits_on_one_thread_and_two(void **state) {
  (void)state;
  int threads = openblas_get_num_threads();
  for (int i = 0; i < PROVIDERS_TRIED; i++) {
    const lamp_gemm_provider *p = open_or_absent(lamp_gemm_provider_name(i));
    if (p == NULL || p->threads_itself) continue;
    for (int bf16 = 0; bf16 <= (p->gemm_bf16 != NULL); bf16++) {
      const gcase *t = &cases[2];
      mats x;
      make(t, &x);
      size_t nc = (size_t)t->m * x.ldc;
      float *one = malloc(nc * sizeof(float));
      assert_non_null(one);
      openblas_set_num_threads(1);
      run_and_check(p, t, &x, bf16);
      memcpy(one, x.c, nc * sizeof(float));
      openblas_set_num_threads(2);
      run_and_check(p, t, &x, bf16);
      openblas_set_num_threads(threads);
      if (memcmp(one, x.c, nc * sizeof(float)) != 0) fail_msg("%s: 1 and 2 threads differ", p->name);
      free(one);
      drop(&x);
    }
  }
}

int main(void) {
  setenv("LAMP_GEMM", "openblas", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lamp_gemm_chooses_what_it_names),
      cmocka_unit_test(an_unknown_provider_is_refused),
      cmocka_unit_test(every_provider_computes_the_product),
      cmocka_unit_test(blocks_give_the_same_bits_on_one_thread_and_two),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
