/*
** The fp16 loss scaler through the instance API, step by step:
**   - against an independent copy of PyTorch's torch._amp_update_scale_ (hysteresis 1, no
**     floor), on tables of found-inf sequences, and with the real defaults;
**   - never grown to inf; hysteresis; min_scale (its floor and its error); a static scale;
**   - every option's validation message; the checkpoint state round trip and its errors;
** and bf16 and fp32, which have no scaler.
**
** Sequences are strings, one character a step: '.' a clean step, 'X' inf/NaN found.
*/
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "plugin/instance.h"

#define countof(a) (sizeof(a) / sizeof((a)[0]))

/* Bytes of the fp16 scaler state: an 8-byte tag, the scale as a double, three 64-bit counters. */
#define STATE_BYTES 40

static void assert_error(lamp_status st, lamp_status code, const char *expected) {
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static lamp_precision *open_ok(const char *name, const lamp_option *opts, size_t n) {
  lamp_precision *p = NULL;
  lamp_status st = lamp_precision_open(&p, name, opts, n);
  if (st != LAMP_OK) fail_msg("opening %s: %s", name, lamp_last_error());
  return p;
}

static lamp_scaler_stats stats_of(lamp_precision *p) {
  lamp_scaler_stats stats;
  memset(&stats, 0xff, sizeof stats);
  stats.struct_size = sizeof stats;
  assert_int_equal(lamp_precision_stats(p, &stats), LAMP_OK);
  assert_int_equal(stats.struct_size, sizeof stats);
  return stats;
}

/* One update that must succeed; returns its skip flag. */
static int update_ok(lamp_precision *p, int found_inf) {
  int skip = -1;
  lamp_status st = lamp_precision_update(p, found_inf, &skip);
  if (st != LAMP_OK) fail_msg("update(found_inf=%d): %s", found_inf, lamp_last_error());
  return skip;
}

/* The plugin's scale, tracker, skip count and skip flag after one step, against the expected ones. */
static void check_step(lamp_precision *p, const char *what, size_t step, int skip, double scale,
                       uint64_t tracker, uint64_t skipped, int want_skip) {
  lamp_scaler_stats s = stats_of(p);
  double loss_scale = lamp_precision_loss_scale(p);
  if (loss_scale != scale || s.scale != scale || s.growth_tracker != tracker ||
      s.skipped_steps != skipped || skip != want_skip)
    fail_msg("%s, step %zu: scale %a (stats %a) tracker %llu skipped %llu skip %d; "
             "expected scale %a tracker %llu skipped %llu skip %d",
             what, step, loss_scale, s.scale, (unsigned long long)s.growth_tracker,
             (unsigned long long)s.skipped_steps, skip, scale, (unsigned long long)tracker,
             (unsigned long long)skipped, want_skip);
}

/* ---- PyTorch's rules ------------------------------------------------------------------------- */

/*
** torch._amp_update_scale_ (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp, and the CUDA
** kernel alike): the scale is an fp32 tensor, the tracker an int32 one, and the factors are
** doubles, so each product is formed in double and rounded to fp32 once.
*/
typedef struct torch_scaler {
  float scale;
  int32_t growth_tracker;
  double growth_factor, backoff_factor;
  int32_t growth_interval;
  uint64_t skipped; /* what the training loop counts: GradScaler.step skips iff found_inf */
} torch_scaler;

static int torch_update(torch_scaler *t, int found_inf) {
  if (found_inf) {
    t->scale = (float)(t->scale * t->backoff_factor);
    t->growth_tracker = 0;
    t->skipped++;
    return 1;
  }
  int32_t successful = t->growth_tracker + 1;
  if (successful == t->growth_interval) {
    float grown = (float)(t->scale * t->growth_factor);
    if (isfinite(grown)) t->scale = grown; /* never past fp32 bounds to inf */
    t->growth_tracker = 0;
  } else {
    t->growth_tracker = successful;
  }
  return 0;
}

/* Feeds `flags` `repeat` times to the plugin and to t, comparing after every step. */
static void follow_torch(lamp_precision *p, torch_scaler *t, const char *what, const char *flags,
                         int repeat) {
  size_t step = 0;
  for (int r = 0; r < repeat; r++)
    for (const char *f = flags; *f; f++) {
      int found_inf = *f == 'X';
      int skip = update_ok(p, found_inf);
      int want_skip = torch_update(t, found_inf);
      check_step(p, what, ++step, skip, t->scale, (uint64_t)t->growth_tracker, t->skipped, want_skip);
    }
}

static const struct torch_case {
  const char *name;
  double init, growth, backoff;
  int32_t interval;
  const char *flags;
  int repeat;
} torch_cases[] = {
    {"grows every 3 clean steps", 1024, 2, 0.5, 3, "..........", 1},
    {"long clean run", 1, 2, 0.5, 3, "...................", 15},
    {"alternating", 1024, 2, 0.5, 3, "X.", 20},
    {"two clean steps between overflows: never grows", 1024, 2, 0.5, 3, "..X", 10},
    {"three clean steps between overflows", 1024, 2, 0.5, 3, "...X", 10},
    {"bursts", 65536, 2, 0.5, 3, "XXXX.......", 6},
    {"interval 1: grows on every clean step", 8, 2, 0.5, 1, "...X.X..XX", 3},
    {"backs off below 1 (no floor)", 4, 2, 0.5, 5, "XXXXXXXX....", 2},
    {"into fp32 subnormals", 1, 2, 0.5, 2, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX....", 3},
    {"saturates below inf", 0x1p120, 2, 0.5, 2, "..", 20},
    {"from FLT_MAX", FLT_MAX, 2, 0.5, 1, "....X....", 2},
    {"growth 3, backoff 0.25", 1000, 3, 0.25, 2, "...X..XX.....X", 4},
    /* Factors that fp32 cannot hold: PyTorch multiplies by the double. */
    {"growth 1.1, backoff 0.9", 65536, 1.1, 0.9, 2, ".....X...XX......", 6},
    {"growth 1.3, backoff 0.3", 1234.5, 1.3, 0.3, 2, "....X.X.......", 6},
    {"growth 1.01, backoff 0.99", 65536, 1.01, 0.99, 1, ".........X", 8},
};

static void test_matches_torch(void **state) {
  (void)state;
  for (size_t i = 0; i < countof(torch_cases); i++) {
    const struct torch_case *c = &torch_cases[i];
    const lamp_option opts[] = {{"init_scale", c->init},       {"growth_factor", c->growth},
                                {"backoff_factor", c->backoff}, {"growth_interval", c->interval},
                                {"hysteresis", 1},              {"min_scale", 0}};
    lamp_precision *p = open_ok("fp16", opts, countof(opts));
    torch_scaler t = {(float)c->init, 0, c->growth, c->backoff, c->interval, 0};
    check_step(p, c->name, 0, 0, t.scale, 0, 0, 0);
    follow_torch(p, &t, c->name, c->flags, c->repeat);
    lamp_precision_close(p);
  }
}

/* No options at all: 2^16, x2 after 2000 clean steps, x0.5 on an overflow. */
static void test_defaults(void **state) {
  (void)state;
  lamp_precision *p = open_ok("fp16", NULL, 0);
  check_step(p, "defaults", 0, 0, 65536, 0, 0, 0);
  torch_scaler t = {65536, 0, 2.0, 0.5, 2000, 0};
  char clean[2000];
  memset(clean, '.', sizeof clean - 1);
  clean[sizeof clean - 1] = '\0'; /* 1999 clean steps */
  follow_torch(p, &t, "defaults", clean, 1);
  check_step(p, "defaults, 1999 clean steps", 1999, 0, 65536, 1999, 0, 0);
  check_step(p, "defaults, 2000 clean steps", 2000, update_ok(p, 0), 131072, 0, 0, 0);
  check_step(p, "defaults, then an overflow", 2001, update_ok(p, 1), 65536, 0, 1, 1);
  lamp_precision_close(p);

  p = open_ok("fp16", NULL, 0);
  check_step(p, "defaults, an overflow first", 1, update_ok(p, 1), 32768, 0, 1, 1);
  /* 2500 clean steps (one growth) and an overflow, over and over: the default floor 1 is never
     reached, so PyTorch's rules hold throughout. */
  static char grow_then_overflow[2502];
  memset(grow_then_overflow, '.', 2500);
  grow_then_overflow[2500] = 'X';
  t = (torch_scaler){32768, 0, 2.0, 0.5, 2000, 1};
  follow_torch(p, &t, "defaults, grow then overflow", grow_then_overflow, 4);
  check_step(p, "defaults, 4 rounds", 10005, 0, 32768, 0, 5, 0);
  lamp_precision_close(p);
}

/* At 2^127 a x2 growth would be inf: the scale stays, and the tracker still restarts. */
static void test_never_grows_to_inf(void **state) {
  (void)state;
  const struct {
    double init, growth;
  } cases[] = {{0x1p127, 2}, {FLT_MAX, 2}, {FLT_MAX, 1.000001}, {0x1p120, 65536}};
  for (size_t i = 0; i < countof(cases); i++) {
    const lamp_option opts[] = {
        {"init_scale", cases[i].init}, {"growth_factor", cases[i].growth}, {"growth_interval", 1}};
    lamp_precision *p = open_ok("fp16", opts, countof(opts));
    double want = (float)cases[i].init;
    for (size_t step = 1; step <= 10; step++) {
      check_step(p, "near FLT_MAX", step, update_ok(p, 0), want, 0, 0, 0);
      assert_true(isfinite(lamp_precision_loss_scale(p)));
    }
    lamp_precision_close(p);
  }
}

/* ---- hysteresis, min_scale, a static scale --------------------------------------------------- */

/* A sequence and the scale and tracker expected after each step. */
typedef struct scripted_case {
  const char *name;
  lamp_option opts[6];
  size_t n_opts;
  const char *flags;
  double scale[24];
  uint64_t tracker[24];
} scripted_case;

static void run_scripted(const scripted_case *c) {
  lamp_precision *p = open_ok("fp16", c->opts, c->n_opts);
  uint64_t skipped = 0;
  for (size_t i = 0; c->flags[i]; i++) {
    int found_inf = c->flags[i] == 'X';
    skipped += (uint64_t)found_inf;
    check_step(p, c->name, i + 1, update_ok(p, found_inf), c->scale[i], c->tracker[i], skipped,
               found_inf);
  }
  lamp_precision_close(p);
}

/* Each runs with growth 2, backoff 0.5, interval 3 and no floor. */
#define HYST(h, init) \
  {{"hysteresis", h}, {"init_scale", init}, {"growth_interval", 3}, {"min_scale", 0}}, 4

static const scripted_case hysteresis_cases[] = {
    {"hysteresis 1 backs off at once", HYST(1, 1024), "XX...X",
     {512, 256, 256, 256, 512, 256},
     {0, 0, 1, 2, 0, 0}},
    /* The first overflow is tolerated (its tracker still restarts), the second backs off, and
       so does every later one until a growth refills the hysteresis. */
    {"hysteresis 2", HYST(2, 1024), "XXX...XX.X",
     {1024, 512, 256, 256, 256, 512, 512, 256, 256, 128},
     {0, 0, 0, 1, 2, 0, 0, 0, 1, 0}},
    /* Clean steps without a growth refill nothing: overflows count since the scale last grew. */
    {"hysteresis 3, clean steps between", HYST(3, 64), "X..X..X..X.X",
     {64, 64, 64, 64, 64, 64, 32, 32, 32, 16, 16, 8},
     {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 0}},
    {"hysteresis 2, refilled by each growth", HYST(2, 100), "X...X...XX...XXX",
     {100, 100, 100, 200, 200, 200, 200, 400, 400, 200, 200, 200, 400, 400, 200, 100},
     {0, 1, 2, 0, 0, 1, 2, 0, 0, 0, 1, 2, 0, 0, 0, 0}},
    {"hysteresis 4, a burst", HYST(4, 4096), "XXXXXX...X",
     {4096, 4096, 4096, 2048, 1024, 512, 512, 512, 1024, 1024},
     {0, 0, 0, 0, 0, 0, 1, 2, 0, 0}},
};

static void test_hysteresis(void **state) {
  (void)state;
  for (size_t i = 0; i < countof(hysteresis_cases); i++) run_scripted(&hysteresis_cases[i]);
}

/* Overflows until the floor, and the error of the one after it; the scaler is left as it was. */
static void overflow_to_floor(const lamp_option *opts, size_t n, const double *scales, size_t n_scales,
                              const char *message) {
  lamp_precision *p = open_ok("fp16", opts, n);
  for (size_t i = 0; i < n_scales; i++)
    check_step(p, "to the floor", i + 1, update_ok(p, 1), scales[i], 0, i + 1, 1);
  int skip = -1;
  assert_error(lamp_precision_update(p, 1, &skip), LAMP_ERR_NUMERIC, message);
  check_step(p, "at the floor", n_scales + 1, skip, scales[n_scales - 1], 0, n_scales + 1, 1);
  lamp_precision_close(p);
}

static void test_min_scale(void **state) {
  (void)state;
  const lamp_option four[] = {{"min_scale", 1}, {"init_scale", 4}, {"backoff_factor", 0.5}};
  overflow_to_floor(four, countof(four), (const double[]){2, 1}, 2,
                    "fp16: gradients overflow at the minimum loss scale 1 (min_scale); training cannot "
                    "continue (3 steps skipped; lower the learning rate, or lower min_scale)");

  /* The default floor 1 caps a backoff that would pass it: 3 -> 1.5 -> 1, not 0.75. */
  const lamp_option three[] = {{"init_scale", 3}};
  overflow_to_floor(three, countof(three), (const double[]){1.5, 1}, 2,
                    "fp16: gradients overflow at the minimum loss scale 1 (min_scale); training cannot "
                    "continue (3 steps skipped; lower the learning rate, or lower min_scale)");

  /* A fractional floor, reached by a backoff of 0.25. */
  const lamp_option quarter[] = {{"init_scale", 100}, {"backoff_factor", 0.25}, {"min_scale", 2.5}};
  overflow_to_floor(quarter, countof(quarter), (const double[]){25, 6.25, 2.5}, 3,
                    "fp16: gradients overflow at the minimum loss scale 2.5 (min_scale); training "
                    "cannot continue (4 steps skipped; lower the learning rate, or lower min_scale)");

  /* Starting at the floor: the first overflow already stops. */
  const lamp_option at_floor[] = {{"init_scale", 1}};
  lamp_precision *p = open_ok("fp16", at_floor, 1);
  int skip = -1;
  assert_error(lamp_precision_update(p, 1, &skip), LAMP_ERR_NUMERIC,
               "fp16: gradients overflow at the minimum loss scale 1 (min_scale); training cannot "
               "continue (1 steps skipped; lower the learning rate, or lower min_scale)");
  assert_int_equal(skip, 1);
  lamp_precision_close(p);

  /* Growth lifts the scale off the floor again, and hysteresis delays reaching it. */
  const scripted_case lifted = {"off the floor",
                                {{"init_scale", 2}, {"growth_interval", 2}, {"hysteresis", 2}}, 3,
                                "XX..X.X",
                                {2, 1, 1, 2, 2, 2, 1},
                                {0, 0, 1, 0, 0, 1, 0}};
  run_scripted(&lifted);
  p = open_ok("fp16", lifted.opts, lifted.n_opts);
  for (const char *f = lifted.flags; *f; f++) update_ok(p, *f == 'X');
  assert_error(lamp_precision_update(p, 1, &skip), LAMP_ERR_NUMERIC,
               "fp16: gradients overflow at the minimum loss scale 1 (min_scale); training cannot "
               "continue (5 steps skipped; lower the learning rate, or lower min_scale)");
  lamp_precision_close(p);
}

/* dynamic = 0: the scale never moves, overflowing steps are skipped and counted, never an error. */
static void test_static_scale(void **state) {
  (void)state;
  const struct {
    lamp_option opts[3];
    double scale;
  } cases[] = {
      {{{"dynamic", 0}, {"init_scale", 1024}, {"growth_interval", 1}}, 1024},
      {{{"dynamic", 0}, {"init_scale", 1}, {"min_scale", 1}}, 1}, /* at the floor: no error */
      {{{"dynamic", 0}, {"init_scale", 128}, {"hysteresis", 2}}, 128},
  };
  const char *flags = "..X..XX...XXXX.X..";
  for (size_t i = 0; i < countof(cases); i++) {
    lamp_precision *p = open_ok("fp16", cases[i].opts, countof(cases[i].opts));
    uint64_t skipped = 0;
    for (size_t s = 0; flags[s]; s++) {
      int found_inf = flags[s] == 'X';
      skipped += (uint64_t)found_inf;
      check_step(p, "static", s + 1, update_ok(p, found_inf), cases[i].scale, 0, skipped, found_inf);
    }
    lamp_precision_close(p);
  }
}

/* ---- options --------------------------------------------------------------------------------- */

static void test_option_validation(void **state) {
  (void)state;
  const struct {
    lamp_option opts[2];
    size_t n;
    const char *message;
  } cases[] = {
      {{{"init_scale", -1}}, 1, "fp16: option 'init_scale' must be in [0, 3.40282e+38], got -1"},
      {{{"init_scale", 1e39}}, 1, "fp16: option 'init_scale' must be in [0, 3.40282e+38], got 1e+39"},
      {{{"init_scale", NAN}}, 1, "fp16: option 'init_scale' must be in [0, 3.40282e+38], got nan"},
      {{{"init_scale", 0}}, 1, "fp16: option 'init_scale' must be in (0, 3.40282e+38], got 0"},
      {{{"init_scale", 1e-50}, {"min_scale", 0}}, 2, /* 0 in fp32 */
       "fp16: option 'init_scale' must be in (0, 3.40282e+38], got 1e-50"},
      {{{"growth_factor", 1}}, 1, "fp16: option 'growth_factor' must be in (1, 65536], got 1"},
      {{{"growth_factor", 0.5}}, 1, "fp16: option 'growth_factor' must be in [1, 65536], got 0.5"},
      {{{"growth_factor", 65537}}, 1, "fp16: option 'growth_factor' must be in [1, 65536], got 65537"},
      {{{"backoff_factor", 1}}, 1, "fp16: option 'backoff_factor' must be in (0, 1), got 1"},
      {{{"backoff_factor", 0}}, 1, "fp16: option 'backoff_factor' must be in (0, 1), got 0"},
      {{{"backoff_factor", -0.5}}, 1, "fp16: option 'backoff_factor' must be in [0, 1], got -0.5"},
      {{{"growth_interval", 0}}, 1, "fp16: option 'growth_interval' must be in [1, 1e+09], got 0"},
      {{{"growth_interval", 2.5}}, 1,
       "fp16: option 'growth_interval' must be an integer in [1, 1e+09], got 2.5"},
      {{{"hysteresis", 0}}, 1, "fp16: option 'hysteresis' must be in [1, 1e+06], got 0"},
      {{{"hysteresis", 1.5}}, 1, "fp16: option 'hysteresis' must be an integer in [1, 1e+06], got 1.5"},
      {{{"min_scale", -1}}, 1, "fp16: option 'min_scale' must be in [0, 3.40282e+38], got -1"},
      {{{"init_scale", 4}, {"min_scale", 8}}, 2,
       "fp16: option 'min_scale' (8) must not exceed init_scale (4)"},
      {{{"init_scale", 0.5}}, 1, "fp16: option 'min_scale' (1) must not exceed init_scale (0.5)"},
      {{{"loss_scale", 128}}, 1,
       "fp16: unknown option 'loss_scale'; valid options: init_scale, growth_factor, backoff_factor, "
       "growth_interval, hysteresis, min_scale, dynamic, master_weights, stochastic_rounding"},
      {{{"dynamic", 2}}, 1, "fp16: option 'dynamic' must be in [0, 1], got 2"},
      {{{"hysteresis", 2}, {"hysteresis", 3}}, 2, "fp16: option 'hysteresis' given twice"},
  };
  for (size_t i = 0; i < countof(cases); i++) {
    lamp_precision *p = NULL;
    assert_error(lamp_precision_open(&p, "fp16", cases[i].opts, cases[i].n), LAMP_ERR_INVALID_ARG,
                 cases[i].message);
    assert_null(p);
  }

  /* The edges that are allowed. */
  const lamp_option edges[][2] = {
      {{"init_scale", FLT_MAX}, {"growth_factor", 65536}},
      {{"init_scale", 0x1p-149}, {"min_scale", 0}},
      {{"backoff_factor", 0.999999}, {"growth_factor", 1.000001}},
      {{"growth_interval", 1e9}, {"hysteresis", 1e6}},
      {{"init_scale", 1}, {"min_scale", 1}},
      {{"dynamic", 0}, {"master_weights", 0}},
  };
  for (size_t i = 0; i < countof(edges); i++) lamp_precision_close(open_ok("fp16", edges[i], 2));
}

/* ---- checkpoint state ------------------------------------------------------------------------ */

static size_t state_size(lamp_precision *p) {
  size_t size = 0;
  assert_int_equal(lamp_precision_save_state(p, NULL, &size), LAMP_OK);
  return size;
}

static void test_state_round_trip(void **state) {
  (void)state;
  const lamp_option opts[] = {{"init_scale", 1024}, {"growth_interval", 3}, {"hysteresis", 2},
                              {"min_scale", 0}};
  lamp_precision *a = open_ok("fp16", opts, countof(opts));
  /* Afterwards: scale 1024, tracker 2, one overflow of the two tolerated used, 1 skipped. */
  for (const char *f = "..X.."; *f; f++) update_ok(a, *f == 'X');
  check_step(a, "before saving", 5, 0, 1024, 2, 1, 0);

  size_t size = state_size(a);
  assert_int_equal(size, STATE_BYTES);
  unsigned char buf[STATE_BYTES + 8];
  memset(buf, 0xa5, sizeof buf);
  size_t got = sizeof buf;
  assert_int_equal(lamp_precision_save_state(a, buf, &got), LAMP_OK);
  assert_int_equal(got, STATE_BYTES);

  lamp_precision *b = open_ok("fp16", opts, countof(opts));
  assert_int_equal(lamp_precision_load_state(b, buf, got), LAMP_OK);
  check_step(b, "after loading", 5, 0, 1024, 2, 1, 0);

  /* Both go on alike: the overflow backs off at once (the hysteresis was used), the clean steps
     grow and refill it, and the next overflow is tolerated again. A fresh scaler would have
     tolerated the first one. */
  static const char cont[] = "X...X.X..XX";
  static const double scales[] = {512, 512, 512, 1024, 1024, 1024, 512, 512, 512, 256, 128};
  static const uint64_t trackers[] = {0, 1, 2, 0, 0, 1, 0, 1, 2, 0, 0};
  uint64_t skipped = 1;
  for (size_t i = 0; cont[i]; i++) {
    int found_inf = cont[i] == 'X';
    skipped += (uint64_t)found_inf;
    check_step(a, "saved", i + 6, update_ok(a, found_inf), scales[i], trackers[i], skipped, found_inf);
    check_step(b, "loaded", i + 6, update_ok(b, found_inf), scales[i], trackers[i], skipped, found_inf);
  }
  lamp_precision *fresh = open_ok("fp16", opts, countof(opts));
  check_step(fresh, "fresh", 1, update_ok(fresh, 1), 1024, 0, 1, 1);
  lamp_precision_close(fresh);

  /* A state saved from a scale grown by a non-dyadic factor comes back bit for bit. */
  const lamp_option odd[] = {{"init_scale", 1000}, {"growth_factor", 1.1}, {"growth_interval", 1}};
  lamp_precision *c = open_ok("fp16", odd, countof(odd));
  for (int i = 0; i < 7; i++) update_ok(c, 0);
  got = sizeof buf;
  assert_int_equal(lamp_precision_save_state(c, buf, &got), LAMP_OK);
  lamp_precision *d = open_ok("fp16", odd, countof(odd));
  assert_int_equal(lamp_precision_load_state(d, buf, got), LAMP_OK);
  assert_true(lamp_precision_loss_scale(d) == lamp_precision_loss_scale(c));
  update_ok(c, 0);
  update_ok(d, 0);
  assert_true(lamp_precision_loss_scale(d) == lamp_precision_loss_scale(c));
  lamp_precision_close(c);
  lamp_precision_close(d);

  lamp_precision_close(a);
  lamp_precision_close(b);
}

static void test_state_errors(void **state) {
  (void)state;
  lamp_precision *a = open_ok("fp16", NULL, 0);
  update_ok(a, 1);
  unsigned char buf[STATE_BYTES];
  size_t size = STATE_BYTES - 1;
  assert_error(lamp_precision_save_state(a, buf, &size), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state needs 40 bytes, got 39");
  size = sizeof buf;
  assert_int_equal(lamp_precision_save_state(a, buf, &size), LAMP_OK);

  lamp_precision *b = open_ok("fp16", NULL, 0);
  assert_error(lamp_precision_load_state(b, buf, STATE_BYTES - 1), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state is 39 bytes, expected 40");
  assert_error(lamp_precision_load_state(b, buf, 0), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state is 0 bytes, expected 40");
  unsigned char longer[STATE_BYTES + 1] = {0};
  memcpy(longer, buf, sizeof buf);
  assert_error(lamp_precision_load_state(b, longer, sizeof longer), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state is 41 bytes, expected 40");

  /* Right size, wrong contents. */
  unsigned char foreign[STATE_BYTES];
  memcpy(foreign, buf, sizeof foreign);
  memcpy(foreign, "bf16sc1", 8);
  assert_error(lamp_precision_load_state(b, foreign, sizeof foreign), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state was not written by fp16");
  memset(foreign, 0, sizeof foreign);
  assert_error(lamp_precision_load_state(b, foreign, sizeof foreign), LAMP_ERR_INVALID_ARG,
               "fp16: scaler state was not written by fp16");
  const struct {
    double scale;
    const char *message;
  } bad_scales[] = {
      {0, "fp16: saved loss scale 0 is not a positive fp32 value"},
      {-2, "fp16: saved loss scale -2 is not a positive fp32 value"},
      {1e39, "fp16: saved loss scale 1e+39 is not a positive fp32 value"},
      {INFINITY, "fp16: saved loss scale inf is not a positive fp32 value"},
      {NAN, "fp16: saved loss scale nan is not a positive fp32 value"},
  };
  for (size_t i = 0; i < countof(bad_scales); i++) {
    memcpy(foreign, buf, sizeof foreign);
    memcpy(foreign + 8, &bad_scales[i].scale, sizeof(double)); /* the scale follows the tag */
    assert_error(lamp_precision_load_state(b, foreign, sizeof foreign), LAMP_ERR_INVALID_ARG,
                 bad_scales[i].message);
  }
  /* None of the failures touched the scaler. */
  check_step(b, "after failed loads", 0, 0, 65536, 0, 0, 0);
  assert_int_equal(lamp_precision_load_state(b, buf, sizeof buf), LAMP_OK);
  check_step(b, "after the good load", 1, 1, 32768, 0, 1, 1);

  /* fp16 state into a plugin without any. */
  lamp_precision *bf = open_ok("bf16", NULL, 0);
  assert_error(lamp_precision_load_state(bf, buf, sizeof buf), LAMP_ERR_INVALID_USAGE,
               "bf16: has no scaler state, the checkpoint holds 40 bytes");
  lamp_precision_close(bf);
  lamp_precision_close(a);
  lamp_precision_close(b);
}

/* bf16 and fp32: scale 1, never a skip, nothing to save. */
static void test_no_scaler(void **state) {
  (void)state;
  const char *names[] = {"bf16", "fp32"};
  for (size_t i = 0; i < countof(names); i++) {
    lamp_precision *p = open_ok(names[i], NULL, 0);
    for (const char *f = "..X.XX..X"; *f; f++) {
      assert_int_equal(update_ok(p, *f == 'X'), 0);
      assert_true(lamp_precision_loss_scale(p) == 1.0);
      lamp_scaler_stats s = stats_of(p);
      assert_true(s.scale == 1.0);
      assert_int_equal(s.skipped_steps, 0);
      assert_int_equal(s.growth_tracker, 0);
    }
    size_t size = 99;
    assert_int_equal(lamp_precision_save_state(p, NULL, &size), LAMP_OK);
    assert_int_equal(size, 0);
    assert_int_equal(lamp_precision_load_state(p, NULL, 0), LAMP_OK);
    lamp_precision_close(p);
  }
}

int main(void) {
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_torch),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_never_grows_to_inf),
      cmocka_unit_test(test_hysteresis),
      cmocka_unit_test(test_min_scale),
      cmocka_unit_test(test_static_scale),
      cmocka_unit_test(test_option_validation),
      cmocka_unit_test(test_state_round_trip),
      cmocka_unit_test(test_state_errors),
      cmocka_unit_test(test_no_scaler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
