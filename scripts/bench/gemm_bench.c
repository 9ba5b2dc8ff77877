/*
** gemm_bench: GFLOP/s of each GEMM provider (core/backend/cpu/gemm_provider.h) on the eight GEMMs
** of one step of the reference MLP (784-1024-1024-10, batch 128), called as core/nn/linear.c calls
** them (row-major; scripts/bench/gemm.sh builds and runs it):
**
**     forward   Y  = X W^T      gemm(0, 1, m = 128, n = out, k = in)
**     backward  dX = dY W       gemm(0, 0, m = 128, n = in,  k = out)   (not for the first layer)
**     backward  dW += dY^T X    gemm(1, 0, m = out, n = in,  k = 128)   beta = 1
**
** for 1 and 2 threads (OpenBLAS's own, the pool's blocks for the others: lamp_gemm_run), with
** fp32 operands and with bf16 operands: natively where the provider has a bf16 GEMM, else
** widened to fp32 first (timed with the product, as lamp's CPU backend does it). Each repeat runs every (shape, provider, threads, dtype) once, one after the other,
** so a load that comes and goes during the run hits every provider alike; each figure is the
** median over the repeats, and "step" is the median of each repeat's summed time of the eight.
** Every provider's first result is checked against OpenBLAS's (relative max-norm difference).
**
**   gemm_bench [--repeat=R] [--min-ms=T] [--threads=1,2] [--providers=openblas,dnnl,blis]
**              [--clock=wall|cpu]     (1-thread runs timed by the wall clock, default, or CPU time)
*/
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/gemm_provider.h"
#include "base/error.h"
#include "tensor/half.h"

/* ---- the shapes ------------------------------------------------------------------------------ */

typedef struct shape {
  const char *name;
  int trans_a, trans_b, m, n, k;
  float beta;
} shape;

/* Named by pass and by the layer's in->out. */
static const shape shapes[] = {
    {"Y784>1k", 0, 1, 128, 1024, 784, 0.0f},  {"Y1k>1k", 0, 1, 128, 1024, 1024, 0.0f},
    {"Y1k>10", 0, 1, 128, 10, 1024, 0.0f},    {"dX1k>1k", 0, 0, 128, 1024, 1024, 0.0f},
    {"dX1k>10", 0, 0, 128, 1024, 10, 0.0f},   {"dW784>1k", 1, 0, 1024, 784, 128, 1.0f},
    {"dW1k>1k", 1, 0, 1024, 1024, 128, 1.0f}, {"dW1k>10", 1, 0, 10, 1024, 128, 1.0f},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static size_t a_elems(const shape *s) { return (size_t)s->m * (size_t)s->k; }
static size_t b_elems(const shape *s) { return (size_t)s->k * (size_t)s->n; }
static int lda_of(const shape *s) { return s->trans_a ? s->m : s->k; }
static int ldb_of(const shape *s) { return s->trans_b ? s->k : s->n; }
static double flops(const shape *s) { return 2.0 * s->m * s->n * s->k; }

/* ---- one configuration ----------------------------------------------------------------------- */

typedef struct config {
  const lamp_gemm_provider *p;
  int threads, bf16;
  double *seconds; /* [repeat][shape]: one call's time */
  double check;    /* relative difference to OpenBLAS, worst over the shapes */
} config;

typedef struct operands {
  float *a, *b, *c, *a32, *b32;
  uint16_t *a16, *b16;
} operands;

/* The clock of 1-thread runs: wall time, or with --clock=cpu this thread's CPU time, which a
   loaded machine's preemptions do not inflate (2-thread runs always take wall time). */
static clockid_t one_thread_clock = CLOCK_MONOTONIC;

static double now(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void call(const config *c, const shape *s, operands *o) {
  lamp_status st;
  if (!c->bf16 || c->p->gemm_bf16 != NULL) {
    st = lamp_gemm_run(c->p, c->bf16, s->trans_a, s->trans_b, s->m, s->n, s->k, 1.0f, c->bf16 ? (void *)o->a16 : o->a,
                       lda_of(s), c->bf16 ? (void *)o->b16 : o->b, ldb_of(s), s->beta, o->c, s->n);
  } else {
    lamp_bf16_to_f32_n(o->a32, o->a16, a_elems(s));
    lamp_bf16_to_f32_n(o->b32, o->b16, b_elems(s));
    st = lamp_gemm_run(c->p, 0, s->trans_a, s->trans_b, s->m, s->n, s->k, 1.0f, o->a32, lda_of(s), o->b32, ldb_of(s),
                       s->beta, o->c, s->n);
  }
  if (st != LAMP_OK) {
    fprintf(stderr, "gemm_bench: %s\n", lamp_last_error());
    exit(1);
  }
}

/* One call's time: as many calls as fill min_s, after one warm-up call. */
static double time_call(const config *c, const shape *s, operands *o, double min_s) {
  openblas_set_num_threads(c->threads); /* lamp's pool uses as many threads as OpenBLAS */
  call(c, s, o);
  clockid_t clock = c->threads == 1 ? one_thread_clock : CLOCK_MONOTONIC;
  int calls = 0;
  double start = now(clock), t;
  do {
    call(c, s, o);
    calls++;
  } while ((t = now(clock) - start) < min_s);
  return t / calls;
}

/* C from zero with beta 0 (the accumulating shapes' beta = 1 would add to earlier results). */
static void result(const config *c, const shape *s, operands *o, float *out) {
  openblas_set_num_threads(c->threads);
  shape once = *s;
  once.beta = 0.0f;
  call(c, &once, o);
  memcpy(out, o->c, (size_t)s->m * (size_t)s->n * sizeof(float));
}

static double rel_diff(const float *x, const float *ref, size_t n) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)x[i] - (double)ref[i]));
    r = fmax(r, fabs((double)ref[i]));
  }
  return r > 0.0 ? d / r : d;
}

/* ---- statistics and output ------------------------------------------------------------------- */

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double shape_median(const config *c, size_t si, int repeat) {
  double v[repeat];
  for (int r = 0; r < repeat; r++) v[r] = c->seconds[(size_t)r * N_SHAPES + si];
  return median(v, repeat);
}

static double step_median(const config *c, int repeat) {
  double v[repeat];
  for (int r = 0; r < repeat; r++) {
    v[r] = 0.0;
    for (size_t si = 0; si < N_SHAPES; si++) v[r] += c->seconds[(size_t)r * N_SHAPES + si];
  }
  return median(v, repeat);
}

static void print_table(config *cfg, int n_cfg, int repeat) {
  double step_flops = 0.0;
  for (size_t si = 0; si < N_SHAPES; si++) step_flops += flops(&shapes[si]);
  printf("%-18s", "GFLOP/s, median");
  for (size_t si = 0; si < N_SHAPES; si++) printf(" %8s", shapes[si].name);
  printf(" %8s %9s\n", "step", "vs ref");
  for (int i = 0; i < n_cfg; i++) {
    char head[32];
    snprintf(head, sizeof head, "%s %s %dt", cfg[i].p->name, cfg[i].bf16 ? "bf16" : "f32", cfg[i].threads);
    printf("%-18s", head);
    for (size_t si = 0; si < N_SHAPES; si++)
      printf(" %8.1f", flops(&shapes[si]) / shape_median(&cfg[i], si, repeat) * 1e-9);
    printf(" %8.1f %9.1e\n", step_flops / step_median(&cfg[i], repeat) * 1e-9, cfg[i].check);
  }
}

/* ---- the run ------------------------------------------------------------------------------- */

static float *filled(size_t n, unsigned seed) {
  float *x = malloc(n * sizeof *x);
  if (x == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return x;
}

static int list_has(const char *list, const char *item) {
  size_t n = strlen(item);
  for (const char *p = list; (p = strstr(p, item)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
  return 0;
}

int main(int argc, char **argv) {
  int repeat = 7;
  double min_s = 0.02;
  const char *threads = "1,2", *wanted = "openblas,dnnl,blis";
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--repeat=", 9) == 0) repeat = atoi(argv[i] + 9);
    else if (strncmp(argv[i], "--min-ms=", 9) == 0) min_s = atof(argv[i] + 9) * 1e-3;
    else if (strncmp(argv[i], "--threads=", 10) == 0) threads = argv[i] + 10;
    else if (strncmp(argv[i], "--providers=", 12) == 0) wanted = argv[i] + 12;
    else if (strcmp(argv[i], "--clock=cpu") == 0) one_thread_clock = CLOCK_THREAD_CPUTIME_ID;
    else if (strcmp(argv[i], "--clock=wall") == 0) one_thread_clock = CLOCK_MONOTONIC;
    else {
      fprintf(stderr, "gemm_bench: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  config cfg[2 * 2 * LAMP_GEMM_PROVIDERS];
  int n_cfg = 0;
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    for (int pi = 0; pi < LAMP_GEMM_PROVIDERS; pi++) {
      const lamp_gemm_provider *p;
      const char *name = lamp_gemm_provider_name(pi);
      if (!list_has(wanted, name)) continue;
      if (lamp_gemm_provider_open(name, &p) != LAMP_OK) {
        if (!bf16) printf("skipped: %s\n", lamp_last_error());
        continue;
      }
      for (int t = 1; t <= 2; t++) {
        if (!list_has(threads, t == 1 ? "1" : "2")) continue;
        cfg[n_cfg++] = (config){p, t, bf16, calloc((size_t)repeat * N_SHAPES, sizeof(double)), 0.0};
      }
    }
  }
  operands o = {0};
  size_t most = 1024 * 1024;
  o.a = filled(most, 1), o.b = filled(most, 2), o.c = filled(most, 3);
  o.a32 = filled(most, 4), o.b32 = filled(most, 5);
  o.a16 = malloc(most * sizeof *o.a16), o.b16 = malloc(most * sizeof *o.b16);
  float *ref = malloc(most * sizeof *ref), *got = malloc(most * sizeof *got);
  if (o.a16 == NULL || o.b16 == NULL || ref == NULL || got == NULL) return 1;
  lamp_f32_to_bf16_n(o.a16, o.a, most);
  lamp_f32_to_bf16_n(o.b16, o.b, most);
  const lamp_gemm_provider *openblas;
  if (lamp_gemm_provider_open("openblas", &openblas) != LAMP_OK) return 1;
  for (int i = 0; i < n_cfg; i++) {
    config ob = {openblas, 1, cfg[i].bf16, NULL, 0.0};
    for (size_t si = 0; si < N_SHAPES; si++) {
      result(&ob, &shapes[si], &o, ref);
      result(&cfg[i], &shapes[si], &o, got);
      double d = rel_diff(got, ref, (size_t)shapes[si].m * (size_t)shapes[si].n);
      if (d > cfg[i].check) cfg[i].check = d;
    }
  }
  for (int r = 0; r < repeat; r++)
    for (size_t si = 0; si < N_SHAPES; si++)
      for (int j = 0; j < n_cfg; j++) { /* each repeat starts the round one configuration later */
        int i = (j + r) % n_cfg;
        cfg[i].seconds[(size_t)r * N_SHAPES + si] = time_call(&cfg[i], &shapes[si], &o, min_s);
      }
  print_table(cfg, n_cfg, repeat);
  for (int i = 0; i < n_cfg; i++) free(cfg[i].seconds);
  free(o.a), free(o.b), free(o.c), free(o.a32), free(o.b32), free(o.a16), free(o.b16), free(ref), free(got);
  return 0;
}
