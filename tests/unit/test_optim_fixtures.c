/*
** The optimizer plugins against PyTorch: every tests/data/optim/<case>.txt (written by
** tests/fixtures/make_optim_fixtures.py with torch 1.13; the format is described there) is
** replayed through lamp_optim_open / lamp_optim_slots / lamp_optim_apply, with core-style zeroed
** f32 slots and one segment per tensor, and the parameters are checked after every step:
** |got - want| <= 1e-6 * max(|want|, 1e-6). The largest relative error of each case is printed
** (about 1e-7: PyTorch's CPU add_(x, alpha) is a fused multiply-add, lamp's is not).
** Then what the fixtures cannot show: grad_scale, AdamW's late-training path (bc2 == 1 in fp32),
** Adam's option checks and its step checks.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

#include "optim_cuda_expect.h"

#define FIXTURE_DIR LAMP_TEST_DATA_DIR "/optim/"
#define REL_TOL 1e-6
#define TINY 1e-6
#define MAX_TENSORS 8
#define MAX_OPTS 8
#define MAX_STEPS 16

static const char *const cases[] = {
    "sgd_plain",     "sgd_momentum",  "sgd_nesterov", "sgd_momentum_wd", "sgd_dampening",
    "sgd_groups",    "adam_default",  "adam_amsgrad", "adam_wd",         "adam_groups",
    "adamw_default", "adamw_amsgrad", "adamw_wd",     "adamw_groups",
};

/* One fixture file, parsed. */
typedef struct fixture {
  char optimizer[32];
  char opt_names[MAX_OPTS][32];
  lamp_option opts[MAX_OPTS];
  size_t n_opts;
  size_t numel[MAX_TENSORS];
  float lr_mult[MAX_TENSORS], decay_mult[MAX_TENSORS];
  size_t n_tensors, n;
  float *init, *grads[MAX_STEPS], *params[MAX_STEPS];
  int steps;
} fixture;

/* ---- reading --------------------------------------------------------------------------------- */

/* Reads n floats from s into a fresh array. */
static float *read_values(const char *path, const char *s, size_t n) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) {
    char *end;
    v[i] = strtof(s, &end);
    if (end == s) fail_msg("%s: expected %zu values, found %zu", path, n, i);
    s = end;
  }
  while (*s == ' ' || *s == '\n') s++;
  if (*s != '\0') fail_msg("%s: more than %zu values on a line", path, n);
  return v;
}

static void read_hparams(fixture *f, const char *path, char *s) {
  for (char *tok = strtok(s, " \n"); tok != NULL; tok = strtok(NULL, " \n")) {
    char *eq = strchr(tok, '=');
    if (eq == NULL || f->n_opts == MAX_OPTS) fail_msg("%s: bad hparam '%s'", path, tok);
    *eq = '\0';
    snprintf(f->opt_names[f->n_opts], sizeof f->opt_names[0], "%s", tok);
    f->opts[f->n_opts] = (lamp_option){f->opt_names[f->n_opts], strtod(eq + 1, NULL)};
    f->n_opts++;
  }
}

/* Reads "<step> <values>" into slots[step - 1]. */
static void read_step(fixture *f, const char *path, const char *s, float **slots) {
  char *end;
  long step = strtol(s, &end, 10);
  if (step < 1 || step > MAX_STEPS || slots[step - 1] != NULL)
    fail_msg("%s: bad step number %ld", path, step);
  slots[step - 1] = read_values(path, end, f->n);
  if (step > f->steps) f->steps = (int)step;
}

/* In place: the options point into the fixture's own name buffers. */
static void load_fixture(fixture *f, const char *name) {
  char path[512];
  snprintf(path, sizeof path, FIXTURE_DIR "%s.txt", name);
  FILE *file = fopen(path, "r");
  if (file == NULL) fail_msg("cannot open %s", path);
  memset(f, 0, sizeof *f);
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, file) > 0) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char *rest = strchr(line, ' ');
    if (rest == NULL) fail_msg("%s: bad line '%s'", path, line);
    *rest++ = '\0';
    if (strcmp(line, "optimizer") == 0) {
      sscanf(rest, "%31s", f->optimizer);
    } else if (strcmp(line, "hparams") == 0) {
      read_hparams(f, path, rest);
    } else if (strcmp(line, "tensor") == 0) {
      if (f->n_tensors == MAX_TENSORS) fail_msg("%s: too many tensors", path);
      size_t k = f->n_tensors++;
      if (sscanf(rest, "%zu %f %f", &f->numel[k], &f->lr_mult[k], &f->decay_mult[k]) != 3)
        fail_msg("%s: bad tensor line", path);
      f->n += f->numel[k];
    } else if (strcmp(line, "init") == 0) {
      f->init = read_values(path, rest, f->n);
    } else if (strcmp(line, "grad") == 0) {
      read_step(f, path, rest, f->grads);
    } else if (strcmp(line, "param") == 0) {
      read_step(f, path, rest, f->params);
    } else {
      fail_msg("%s: unknown record '%s'", path, line);
    }
  }
  free(line);
  fclose(file);
  if (f->init == NULL || f->steps == 0) fail_msg("%s: no init or no steps", path);
  for (int k = 0; k < f->steps; k++)
    if (f->grads[k] == NULL || f->params[k] == NULL)
      fail_msg("%s: step %d incomplete", path, k + 1);
}

static void free_fixture(fixture *f) {
  free(f->init);
  for (int k = 0; k < MAX_STEPS; k++) {
    free(f->grads[k]);
    free(f->params[k]);
  }
}

/* ---- replaying ------------------------------------------------------------------------------- */

/* The optimizer and the buffers the core would give it. */
typedef struct replay {
  lamp_optim *o;
  float *p, *g;
  float *slots[LAMP_OPTIM_MAX_SLOTS];
  uint32_t n_slots;
  lamp_optim_segment segs[MAX_TENSORS];
  double lr;
} replay;

static replay replay_open(const fixture *f) {
  replay r;
  memset(&r, 0, sizeof r);
  if (lamp_optim_open(&r.o, f->optimizer, f->opts, f->n_opts) != LAMP_OK)
    fail_msg("opening %s: %s", f->optimizer, lamp_last_error());
  lamp_optim_slot decls[LAMP_OPTIM_MAX_SLOTS];
  assert_int_equal(lamp_optim_slots(r.o, decls, LAMP_OPTIM_MAX_SLOTS, &r.n_slots), LAMP_OK);
  for (uint32_t i = 0; i < r.n_slots; i++) {
    assert_int_equal(decls[i].dtype, LAMP_F32);
    r.slots[i] = calloc(f->n, sizeof(float));
    assert_non_null(r.slots[i]);
  }
  r.p = malloc(f->n * sizeof(float));
  r.g = malloc(f->n * sizeof(float));
  assert_non_null(r.p);
  assert_non_null(r.g);
  memcpy(r.p, f->init, f->n * sizeof(float));
  for (size_t k = 0, off = 0; k < f->n_tensors; off += f->numel[k], k++)
    r.segs[k] = (lamp_optim_segment){off, f->numel[k], f->lr_mult[k], f->decay_mult[k]};
  assert_int_equal(lamp_optim_hparam(r.o, "lr", &r.lr), 0);
  return r;
}

static void replay_step(replay *r, const fixture *f, uint64_t step, double grad_scale) {
  lamp_optim_step s = {.device = LAMP_CPU,
                       .n = f->n,
                       .params = r->p,
                       .grads = r->g,
                       .slots = r->slots,
                       .segments = r->segs,
                       .n_segments = f->n_tensors,
                       .step = step,
                       .lr = r->lr,
                       .grad_scale = grad_scale};
  if (lamp_optim_apply(r->o, &s) != LAMP_OK) fail_msg("step %d: %s", (int)step, lamp_last_error());
}

static void replay_close(replay *r) {
  lamp_optim_close(r->o);
  for (uint32_t i = 0; i < r->n_slots; i++) free(r->slots[i]);
  free(r->p);
  free(r->g);
}

/* Replays f with gradients multiplied by grad_mult and grad_scale applied; returns the largest
   relative error against PyTorch and leaves the final parameters in final (f->n floats). */
static double replay_fixture(const fixture *f, const char *name, float grad_mult, double grad_scale,
                             float *final) {
  replay r = replay_open(f);
  double worst = 0;
  for (int k = 0; k < f->steps; k++) {
    for (size_t i = 0; i < f->n; i++) r.g[i] = f->grads[k][i] * grad_mult;
    replay_step(&r, f, (uint64_t)k + 1, grad_scale);
    for (size_t i = 0; i < f->n; i++) {
      const double want = f->params[k][i], got = r.p[i];
      const double err = fabs(got - want) / fmax(fabs(want), TINY);
      if (!(err <= REL_TOL))
        fail_msg("%s, step %d, element %zu: got %.9g, want %.9g (relative error %.3g)", name, k + 1,
                 i, got, want, err);
      worst = fmax(worst, err);
    }
  }
  memcpy(final, r.p, f->n * sizeof(float));
  replay_close(&r);
  return worst;
}

static void test_fixtures_match_pytorch(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fixture f;
    load_fixture(&f, cases[c]);
    float *plain = malloc(f.n * sizeof(float)), *scaled = malloc(f.n * sizeof(float));
    assert_non_null(plain);
    assert_non_null(scaled);
    const double worst = replay_fixture(&f, cases[c], 1.0f, 1.0, plain);
    print_message("%-16s %s, %d steps over %zu elements: max relative error %.3g\n", cases[c],
                  f.optimizer, f.steps, f.n, worst);
    /* A loss scaled by 2^10 and grad_scale 2^-10 give the very same bits. */
    replay_fixture(&f, cases[c], 1024.0f, 1.0 / 1024, scaled);
    assert_memory_equal(plain, scaled, f.n * sizeof(float));
    free(plain);
    free(scaled);
    free_fixture(&f);
  }
}

/* The fixtures cover the cases the file's header promises. */
static void test_fixture_cases_cover_decay_mult(void **state) {
  (void)state;
  const char *with_bias[] = {"sgd_momentum_wd", "adam_wd", "adamw_wd"};
  for (size_t c = 0; c < 3; c++) {
    fixture f;
    load_fixture(&f, with_bias[c]);
    assert_int_equal(f.n_tensors, 3);
    assert_true(f.decay_mult[0] == 1.0f && f.decay_mult[1] == 0.0f);
    free_fixture(&f);
  }
}

/* ---- what fixtures cannot reach -------------------------------------------------------------- */

/* torch.optim.Adam / AdamW's formulas one element at a time, with PyTorch's roundings. */
static void reference_adam(int adamw, float *p, const float *grad, float *m, float *v, float *vmax,
                           size_t n, uint64_t t, double lr, double wd, double b1, double b2,
                           double eps, float gs) {
  const double bc1 = 1.0 - pow(b1, (double)t);
  const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * gs;
    if (adamw)
      p[i] *= (float)(1.0 - lr * wd);
    else
      g += (float)wd * p[i];
    m[i] = m[i] * (float)b1 + (float)(1.0 - b1) * g;
    v[i] = v[i] * (float)b2 + (float)(1.0 - b2) * g * g;
    float vh = v[i];
    if (vmax != NULL) vh = vmax[i] = fmaxf(vmax[i], v[i]);
    const float denom = sqrtf(vh) / bc2_sqrt + (float)eps;
    p[i] += (float)-(lr / bc1) * m[i] / denom;
  }
}

/* Slabs longer than the kernel's blocks, segment boundaries inside blocks, and step counters
   late enough that sqrt(1 - beta2^t) rounds to 1 (the kernel then skips that division). */
static void run_long_slab(const char *name, int amsgrad, uint64_t first_step) {
  enum { LEN = 45 };
  const int adamw = strcmp(name, "adamw") == 0;
  const lamp_option opts[] = {{"weight_decay", 0.05}, {"amsgrad", amsgrad}, {"beta2", 0.99}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, name, opts, 3), LAMP_OK);
  float p[LEN], want[LEN], g[LEN], m[LEN] = {0}, v[LEN] = {0}, vm[LEN] = {0};
  float rm[LEN] = {0}, rv[LEN] = {0}, rvm[LEN] = {0};
  for (size_t i = 0; i < LEN; i++) p[i] = want[i] = 0.1f * (float)i - 2.0f;
  float *slots[3] = {m, v, vm};
  const lamp_optim_segment segs[] = {
      {0, 11, 1.0f, 1.0f}, {11, 20, 0.5f, 0.0f}, {31, 14, 2.0f, 1.0f}};
  for (uint64_t k = first_step; k < first_step + 4; k++) {
    for (size_t i = 0; i < LEN; i++)
      g[i] = 0.01f * (float)((i * 7 + k * 3) % 11) - 0.05f * (float)(k % 3);
    lamp_optim_step step = {.device = LAMP_CPU, .n = LEN, .params = p, .grads = g,
                            .slots = slots, .segments = segs, .n_segments = 3, .step = k,
                            .lr = 0.01, .grad_scale = 0.5};
    assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
    for (size_t s = 0; s < 3; s++) {
      const size_t at = segs[s].offset;
      reference_adam(adamw, want + at, g + at, rm + at, rv + at, amsgrad ? rvm + at : NULL,
                     segs[s].count, k, 0.01 * segs[s].lr_mult, 0.05 * segs[s].decay_mult, 0.9, 0.99,
                     1e-8, 0.5f);
    }
  }
  assert_memory_equal(p, want, sizeof p);
  assert_memory_equal(m, rm, sizeof m);
  assert_memory_equal(v, rv, sizeof v);
  if (amsgrad) assert_memory_equal(vm, rvm, sizeof vm);
  lamp_optim_close(o);
}

static void test_long_slabs_match_reference(void **state) {
  (void)state;
  for (int amsgrad = 0; amsgrad <= 1; amsgrad++) {
    run_long_slab("adam", amsgrad, 1);
    run_long_slab("adamw", amsgrad, 1);
    run_long_slab("adam", amsgrad, 100000); /* 1 - 0.99^1e5 is 1 in fp32 */
    run_long_slab("adamw", amsgrad, 100000);
  }
}

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static void test_adam_slots_and_defaults(void **state) {
  (void)state;
  const char *names[] = {"adam", "adamw"};
  const double default_wd[] = {0.0, 0.01};
  for (int k = 0; k < 2; k++) {
    for (int amsgrad = 0; amsgrad <= 1; amsgrad++) {
      const lamp_option opt = {"amsgrad", amsgrad};
      lamp_optim *o = NULL;
      assert_int_equal(lamp_optim_open(&o, names[k], &opt, 1), LAMP_OK);
      assert_string_equal(lamp_optim_handle(o)->desc->name, names[k]);
      lamp_optim_slot slots[LAMP_OPTIM_MAX_SLOTS];
      uint32_t n = 0;
      assert_int_equal(lamp_optim_slots(o, slots, LAMP_OPTIM_MAX_SLOTS, &n), LAMP_OK);
      assert_int_equal(n, amsgrad ? 3 : 2);
      assert_string_equal(slots[0].name, "exp_avg");
      assert_string_equal(slots[1].name, "exp_avg_sq");
      if (amsgrad) assert_string_equal(slots[2].name, "max_exp_avg_sq");
      for (uint32_t i = 0; i < n; i++) assert_int_equal(slots[i].dtype, LAMP_F32);
      double v = 0;
      assert_int_equal(lamp_optim_hparam(o, "lr", &v), 0);
      assert_true(v == 1e-3);
      assert_int_equal(lamp_optim_hparam(o, "beta1", &v), 0);
      assert_true(v == 0.9);
      assert_int_equal(lamp_optim_hparam(o, "beta2", &v), 0);
      assert_true(v == 0.999);
      assert_int_equal(lamp_optim_hparam(o, "eps", &v), 0);
      assert_true(v == 1e-8);
      assert_int_equal(lamp_optim_hparam(o, "weight_decay", &v), 0);
      assert_true(v == default_wd[k]);
      const lamp_plugin *d = lamp_optim_handle(o)->desc;
      assert_int_equal(d->devices, OPTIM_DEVICES);
      assert_int_equal(d->dtypes, LAMP_BIT(LAMP_F32));
      lamp_optim_close(o);
    }
  }
}

static void test_adam_create_refusals(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  const lamp_option beta1[] = {{"beta1", 1}};
  assert_error(lamp_optim_open(&o, "adam", beta1, 1), LAMP_ERR_INVALID_ARG,
               "adam: option 'beta1' must be in [0, 1), got 1");
  const lamp_option beta2[] = {{"beta2", 1}};
  assert_error(lamp_optim_open(&o, "adamw", beta2, 1), LAMP_ERR_INVALID_ARG,
               "adamw: option 'beta2' must be in [0, 1), got 1");
  const lamp_option eps[] = {{"eps", 0}};
  assert_error(lamp_optim_open(&o, "adam", eps, 1), LAMP_ERR_INVALID_ARG,
               "adam: option 'eps' must be in (0, 1], got 0");
  const lamp_option half[] = {{"amsgrad", 0.5}};
  assert_error(lamp_optim_open(&o, "adamw", half, 1), LAMP_ERR_INVALID_ARG,
               "adamw: amsgrad must be 0 or 1, got 0.5");
  /* The declared ranges, checked by the core. */
  const lamp_option lr[] = {{"lr", -1}};
  assert_error(lamp_optim_open(&o, "adam", lr, 1), LAMP_ERR_INVALID_ARG,
               "adam: option 'lr' must be in [0, 1e+06], got -1");
  const lamp_option neg_beta[] = {{"beta1", -0.5}};
  assert_error(lamp_optim_open(&o, "adam", neg_beta, 1), LAMP_ERR_INVALID_ARG,
               "adam: option 'beta1' must be in [0, 1], got -0.5");
  assert_null(o);
  const lamp_option edge[] = {{"beta1", 0}, {"beta2", 0.9999999}, {"eps", 1}};
  assert_int_equal(lamp_optim_open(&o, "adam", edge, 3), LAMP_OK);
  lamp_optim_close(o);
}

static void test_adam_step_checks(void **state) {
  (void)state;
  const lamp_option opts[] = {{"amsgrad", 1}};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open(&o, "adamw", opts, 1), LAMP_OK);
  float p[4] = {0}, g[4] = {0}, m[4] = {0}, v[4] = {0}, vm[4] = {0};
  float *slots[3] = {m, v, NULL};
  const lamp_optim_segment whole[] = {{0, 4, 1, 1}};
  lamp_optim_step step = {.device = LAMP_CPU, .n = 4, .params = p, .grads = g, .slots = slots,
                          .segments = whole, .n_segments = 1, .step = 0, .lr = 0.1,
                          .grad_scale = 1};
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "adamw: step counter is 0; the first step is 1");
  step.step = 1;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "adamw: max_exp_avg_sq slot is missing");
  slots[2] = vm;
  assert_cuda_step_refused(o, &step, "adamw");
  step.device = LAMP_CPU;
  assert_int_equal(lamp_optim_apply(o, &step), LAMP_OK);
  lamp_optim_close(o);
}

int main(void) {
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixtures_match_pytorch),
      cmocka_unit_test(test_fixture_cases_cover_decay_mult),
      cmocka_unit_test(test_long_slabs_match_reference),
      cmocka_unit_test(test_adam_slots_and_defaults),
      cmocka_unit_test(test_adam_create_refusals),
      cmocka_unit_test(test_adam_step_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
