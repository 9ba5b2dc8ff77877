/*
** check_ops' harness (check_ops.h): host arrays, running one case on the CPU and the device,
** the comparisons and the report lines.
*/
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "check_ops.h"
#include "tensor/half.h"
#include "tensor/memory.h"

/* ---- the run --------------------------------------------------------------------------------- */

int check_selected(const check_run *run, const char *op) {
  if (run->only == NULL) return 1;
  size_t len = strlen(op);
  for (const char *p = run->only; *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, op, n) == 0) return 1;
    if (end == NULL) break;
    p = end + 1;
  }
  return 0;
}

float check_uniform(check_run *run) { return (float)(2.0 * lamp_rng_uniform(&run->rng) - 1.0); }

float check_wide(check_run *run, int spread) {
  double e = (double)lamp_rng_below(&run->rng, (uint64_t)(2 * spread + 1)) - spread;
  double m = 1.0 + lamp_rng_uniform(&run->rng);
  return (float)((lamp_rng_below(&run->rng, 2) ? -m : m) * ldexp(1.0, (int)e));
}

/* ---- host arrays ----------------------------------------------------------------------------- */

check_elem check_elem_of(lamp_dtype dtype) {
  return dtype == LAMP_F16 ? ELEM_F16 : dtype == LAMP_BF16 ? ELEM_BF16 : ELEM_F32;
}

size_t check_elem_size(check_elem e) {
  static const size_t sizes[] = {4, 2, 2, 4, 8, sizeof(size_t), 1};
  return sizes[e];
}

const char *check_dtype_name(lamp_dtype dtype) {
  return dtype == LAMP_F16 ? "f16" : dtype == LAMP_BF16 ? "bf16" : "f32";
}

void *check_alloc(check_elem e, size_t n) {
  void *p = calloc(n ? n : 1, check_elem_size(e));
  if (p == NULL) {
    fprintf(stderr, "check_ops: out of host memory (%zu elements of %zu bytes)\n", n, check_elem_size(e));
    exit(1);
  }
  return p;
}

double check_get(check_elem e, const void *buf, size_t i) {
  switch (e) {
  case ELEM_F32: return ((const float *)buf)[i];
  case ELEM_F16: return lamp_f16_to_f32(((const uint16_t *)buf)[i]);
  case ELEM_BF16: return lamp_bf16_to_f32(((const uint16_t *)buf)[i]);
  case ELEM_I32: return ((const int32_t *)buf)[i];
  case ELEM_F64: return ((const double *)buf)[i];
  case ELEM_SIZE: return (double)((const size_t *)buf)[i];
  case ELEM_U8: return ((const uint8_t *)buf)[i];
  }
  return NAN;
}

void check_set(check_elem e, void *buf, size_t i, double v) {
  switch (e) {
  case ELEM_F32: ((float *)buf)[i] = (float)v; break;
  case ELEM_F16: ((uint16_t *)buf)[i] = lamp_f32_to_f16((float)v); break;
  case ELEM_BF16: ((uint16_t *)buf)[i] = lamp_f32_to_bf16((float)v); break;
  case ELEM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case ELEM_F64: ((double *)buf)[i] = v; break;
  case ELEM_SIZE: ((size_t *)buf)[i] = (size_t)v; break;
  case ELEM_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  }
}

/* Values where conversions, comparisons and rounding go wrong first. */
static const double specials[] = {
    0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, -65536.0, 1e-8, -6e-8, 3e-5,
    1.0 + 0x1p-11, 1.0 + 0x1p-8, 1.0 + 3 * 0x1p-11, 1.0 + 3 * 0x1p-8, 0x1p-130, -0x1p-149, 3.0e38,
};
#define N_SPECIALS (sizeof specials / sizeof specials[0])

void *check_random(check_run *run, lamp_dtype dtype, size_t n, int special, int spread) {
  check_elem e = check_elem_of(dtype);
  void *buf = check_alloc(e, n);
  size_t i = 0;
  if (special)
    for (; i < n && i < N_SPECIALS; i++) check_set(e, buf, i, specials[i]);
  for (; i < n; i++) check_set(e, buf, i, special ? check_wide(run, spread) : check_uniform(run));
  return buf;
}

double check_ulp(lamp_dtype dtype, double v) {
  int mant = dtype == LAMP_F16 ? 10 : dtype == LAMP_BF16 ? 7 : 23;
  int min_exp = dtype == LAMP_F16 ? -14 : -126;
  v = fabs(v);
  int exp = v > 0 && isfinite(v) ? ilogb(v) : min_exp;
  if (exp < min_exp) exp = min_exp;
  return ldexp(1.0, exp - mant);
}

/* ---- cases ----------------------------------------------------------------------------------- */

int check_operand_add(check_case *c, check_elem elem, size_t n, int role, const void *init) {
  if (c->n == CHECK_MAX_OPERANDS) {
    fprintf(stderr, "check_ops: %s: more than %d operands\n", c->op, CHECK_MAX_OPERANDS);
    exit(1);
  }
  check_operand *o = &c->x[c->n];
  memset(o, 0, sizeof *o);
  o->elem = elem;
  o->n = n;
  o->role = role;
  o->init = init;
  return c->n++;
}

static size_t operand_bytes(const check_operand *o) { return (o->n ? o->n : 1) * check_elem_size(o->elem); }

/* A host copy of the operand's starting values: its values, or the poison for an output. */
static void *starting_values(const check_operand *o) {
  void *p = check_alloc(o->elem, o->n);
  if (o->role == ROLE_OUT || o->init == NULL)
    memset(p, 0xff, operand_bytes(o));
  else
    memcpy(p, o->init, operand_bytes(o));
  return p;
}

static void fail(check_case *c, const char *what) {
  snprintf(c->why, sizeof c->why, "%s: %s", what, lamp_last_error());
}

/* The CPU's run: the operands are host arrays, the results stay in them. */
static int run_cpu(check_case *c) {
  void *p[CHECK_MAX_OPERANDS] = {0};
  for (int i = 0; i < c->n; i++)
    if (!c->x[i].absent) p[i] = starting_values(&c->x[i]);
  lamp_status st = c->call(LAMP_CPU, p, c->args);
  for (int i = 0; i < c->n; i++) {
    if (c->x[i].role != ROLE_IN) c->x[i].cpu = p[i];
    else free(p[i]);
  }
  if (st != LAMP_OK) fail(c, "on the CPU");
  return st != LAMP_OK;
}

/* One device run: fresh device memory holding the starting values; results into out[i]. */
static int run_device(check_run *run, check_case *c, void **out) {
  void *d[CHECK_MAX_OPERANDS] = {0};
  int bad = 0;
  for (int i = 0; i < c->n && !bad; i++) {
    if (c->x[i].absent) continue;
    size_t bytes = operand_bytes(&c->x[i]);
    d[i] = lamp_mem_alloc(run->device, LAMP_MEM_WORKSPACE, bytes);
    if (d[i] == NULL) {
      fail(c, "device allocation");
      bad = 1;
      break;
    }
    void *start = starting_values(&c->x[i]);
    if (lamp_copy(run->device, d[i], LAMP_HOST, start, bytes) != LAMP_OK) {
      fail(c, "upload");
      bad = 1;
    }
    free(start);
  }
  if (!bad && c->call(run->device, d, c->args) != LAMP_OK) {
    fail(c, "on the device");
    bad = 1;
  }
  if (!bad && lamp_synchronize(run->device) != LAMP_OK) {
    fail(c, "on the device (reported at synchronize)");
    bad = 1;
  }
  for (int i = 0; i < c->n; i++) {
    if (!bad && c->x[i].role != ROLE_IN && !c->x[i].absent) {
      out[i] = check_alloc(c->x[i].elem, c->x[i].n);
      if (lamp_copy(LAMP_HOST, out[i], run->device, d[i], operand_bytes(&c->x[i])) != LAMP_OK) {
        fail(c, "download");
        bad = 1;
      }
    }
    lamp_mem_free(d[i]);
  }
  return bad;
}

static void digest(check_run *run, const void *p, size_t bytes) {
  const unsigned char *b = p;
  uint64_t h = run->digest ? run->digest : 1469598103934665603ull;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
  run->digest = h;
}

/* Alters the largest element of the results so that every comparison must notice: a high
   mantissa bit flipped (a relative change of 1/8 or more), or 1 where every result is 0. */
static void perturb(check_case *c) {
  check_operand *o = NULL;
  size_t at = 0;
  double best = -1;
  for (int i = 0; i < c->n; i++) {
    check_operand *x = &c->x[i];
    if (x->role == ROLE_IN || x->absent || x->dev == NULL) continue;
    for (size_t j = 0; j < x->n; j++) {
      double v = fabs(check_get(x->elem, x->dev, j));
      if (isfinite(v) && v > best) best = v, o = x, at = j;
    }
  }
  if (o == NULL) return;
  unsigned char *e = (unsigned char *)o->dev + at * check_elem_size(o->elem);
  if (best == 0) {
    check_set(o->elem, o->dev, at, 1.0);
    return;
  }
  switch (o->elem) {
  case ELEM_F32: e[2] ^= 0x10; break;
  case ELEM_F16: e[1] ^= 0x01; break;
  case ELEM_BF16: e[0] ^= 0x20; break;
  case ELEM_F64: e[6] ^= 0x02; break;
  default: check_set(o->elem, o->dev, at, check_get(o->elem, o->dev, at) + 1); break;
  }
}

int check_case_run(check_run *run, check_case *c) {
  c->why[0] = '\0';
  if (run_cpu(c)) return 1;
  void *first[CHECK_MAX_OPERANDS] = {0}, *again[CHECK_MAX_OPERANDS] = {0};
  int bad = run_device(run, c, first) || run_device(run, c, again);
  for (int i = 0; i < c->n && !bad; i++) {
    if (first[i] == NULL) continue;
    size_t bytes = operand_bytes(&c->x[i]);
    digest(run, first[i], bytes);
    if (memcmp(first[i], again[i], bytes) != 0) {
      snprintf(c->why, sizeof c->why, "not deterministic: operand %d differs between two device runs", i);
      bad = 1;
    }
  }
  for (int i = 0; i < c->n; i++) {
    c->x[i].dev = first[i];
    free(again[i]);
  }
  if (!bad && run->perturb != NULL && !run->perturbed && strcmp(run->perturb, c->op) == 0) {
    perturb(c);
    run->perturbed = 1;
  }
  return bad;
}

void check_case_free(check_case *c) {
  for (int i = 0; i < c->n; i++) {
    free(c->x[i].cpu);
    free(c->x[i].dev);
    c->x[i].cpu = c->x[i].dev = NULL;
  }
  c->n = 0;
}

/* ---- lines and comparisons ------------------------------------------------------------------- */

void check_line_begin(check_line *l, int bitwise, const char *fmt, ...) {
  memset(l, 0, sizeof *l);
  l->bitwise = bitwise;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->op, sizeof l->op, fmt, ap);
  va_end(ap);
}

void check_line_shape(check_line *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->last, sizeof l->last, fmt, ap);
  va_end(ap);
  if (l->shapes++ == 0) memcpy(l->first, l->last, sizeof l->first);
}

void check_line_fail(check_line *l, const char *why) {
  if (!l->failed) snprintf(l->why, sizeof l->why, "%s (at %s)", why, l->last);
  l->failed = 1;
}

/* Records element j's error against its bound; the first failure keeps its details. */
static void record(check_line *l, size_t j, double got, double want, double bound) {
  int both_nan = isnan(got) && isnan(want);
  int same_inf = isinf(got) && isinf(want) && (got > 0) == (want > 0);
  double err = both_nan || same_inf ? 0.0 : fabs(got - want);
  /* -0 and +0 are equal as doubles; bit for bit they are not. */
  if (l->bitwise && got == 0 && want == 0 && signbit(got) != signbit(want)) err = INFINITY;
  if (isnan(err)) err = INFINITY;
  int ok = l->bitwise ? err == 0.0 : err <= bound;
  double ratio = err == 0.0 ? 0.0 : bound > 0 ? err / bound : INFINITY;
  if (bound > l->max_bound) l->max_bound = bound;
  if (ratio > l->worst_ratio) {
    l->worst_ratio = ratio;
    l->err = err;
    l->bound = bound;
  }
  if (!ok && !l->failed) {
    char why[200];
    snprintf(why, sizeof why, "element %zu: device %.9g, cpu %.9g", j, got, want);
    check_line_fail(l, why);
  }
}

void check_bitwise(check_line *l, const check_case *c, int i) {
  const check_operand *o = &c->x[i];
  for (size_t j = 0; j < o->n; j++) record(l, j, check_get(o->elem, o->dev, j), check_get(o->elem, o->cpu, j), 0.0);
}

void check_bounded(check_line *l, const check_case *c, int i, const double *bound) {
  const check_operand *o = &c->x[i];
  for (size_t j = 0; j < o->n; j++)
    record(l, j, check_get(o->elem, o->dev, j), check_get(o->elem, o->cpu, j), bound[j]);
}

void check_against(check_line *l, check_elem elem, const void *dev, const double *ref, const double *bound, size_t n,
                   size_t first) {
  for (size_t j = 0; j < n; j++) record(l, first + j, check_get(elem, dev, j), ref[j], bound[j]);
}

void check_line_end(check_run *run, check_line *l) {
  char shapes[80], err[24], bound[24];
  if (l->shapes <= 1)
    snprintf(shapes, sizeof shapes, "%s", l->first);
  else
    snprintf(shapes, sizeof shapes, "%s..%s (%d)", l->first, l->last, l->shapes);
  snprintf(err, sizeof err, "%.3g", l->err);
  if (l->bitwise)
    snprintf(bound, sizeof bound, "bitwise");
  else
    snprintf(bound, sizeof bound, "%.3g", l->worst_ratio > 0 ? l->bound : l->max_bound);
  printf("%-33s %-32s %9s %9s  %s%s%s\n", l->op, shapes, err, bound, l->failed ? "FAIL" : "ok",
         l->failed ? ": " : "", l->failed ? l->why : "");
  fflush(stdout);
  run->lines++;
  if (l->failed) run->failures++;
}
