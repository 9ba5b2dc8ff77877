/*
** The bf16 convolutions that run on oneDNN's AMX kernels (conv_dnnl.c) against a double-precision
** reference: y and dx within a bf16 rounding plus fp32 sums, the weight gradient within its fp32
** sums, the same bits from run to run, a second batch size on the same plan (its slices rebuilt),
** a gradient added into the slab, the buffers shared by layers and bounded in large batches. On a
** CPU with AMX and libdnnl.so.2 installed the layers must run on oneDNN; elsewhere they run on
** lamp's own kernels, held to the same bounds. tests/CMakeLists.txt runs this program again with
** LAMP_CONV_BF16=widen, where no layer may run on oneDNN, and with LAMP_CONV_BF16=dnnl under
** LAMP_CPU_ISA=avx2, where it may not either and a warning says why.
*/
#include <dlfcn.h>
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
#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"
#include "base/log.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/ledger.h"

/* Whether oneDNN should take the layers here: AMX in /proc/cpuinfo, the library and its headers. */
static int expect_dnnl(void) {
#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
  const char *forced = getenv("LAMP_CONV_BF16");
  if (forced != NULL && forced[0] != '\0' && strcmp(forced, "auto") != 0 && strcmp(forced, "dnnl") != 0) return 0;
  if (!lamp_cpu_has(LAMP_ISA_AVX512BF16)) return 0; /* none with AMX lacks it; LAMP_CPU_ISA hides it */
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  int amx = 0;
  while (f != NULL && !amx && fgets(line, sizeof line, f) != NULL)
    amx = strncmp(line, "flags", 5) == 0 && strstr(line, " amx_bf16") != NULL;
  if (f != NULL) fclose(f);
  void *h = amx ? dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL) : NULL;
  if (h != NULL) dlclose(h);
  return h != NULL;
#endif
#endif
  return 0;
}

static uint32_t seed = 12345;

/* bf16 values in [-1, 1). */
static float next_value(void) {
  seed = seed * 1664525u + 1013904223u;
  return lamp_bf16_to_f32(lamp_f32_to_bf16((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f));
}

typedef struct geometry {
  size_t n, cin, cout, h, w, k, stride, pad;
} geometry;

static size_t out_size(size_t in, const geometry *g) { return (in + 2 * g->pad - g->k) / g->stride + 1; }

/* The layer's tensors, its arguments, and the double references with their magnitudes. */
typedef struct layer {
  geometry g;
  size_t oh, ow, nx, ny, nw;
  uint16_t *x, *y, *dy, *dx;
  float *w, *gw;
  double *y_ref, *y_mag, *dx_ref, *dx_mag, *gw_ref, *gw_mag;
  lamp_conv2d_args a;
} layer;

/* For each tap of output (s, o, i, j): its input index, or -1 in the padding. */
static long input_index(const layer *l, size_t s, size_t c, size_t i, size_t j, size_t ki, size_t kj) {
  long r = (long)(i * l->g.stride + ki) - (long)l->g.pad, q = (long)(j * l->g.stride + kj) - (long)l->g.pad;
  if (r < 0 || q < 0 || r >= (long)l->g.h || q >= (long)l->g.w) return -1;
  return (long)(((s * l->g.cin + c) * l->g.h + (size_t)r) * l->g.w + (size_t)q);
}

static void references(layer *l) {
  const geometry *g = &l->g;
  for (size_t s = 0; s < g->n; s++)
    for (size_t o = 0; o < g->cout; o++)
      for (size_t i = 0; i < l->oh; i++)
        for (size_t j = 0; j < l->ow; j++) {
          size_t yi = ((s * g->cout + o) * l->oh + i) * l->ow + j;
          double dyv = lamp_bf16_to_f32(l->dy[yi]);
          for (size_t c = 0; c < g->cin; c++)
            for (size_t ki = 0; ki < g->k; ki++)
              for (size_t kj = 0; kj < g->k; kj++) {
                long xi = input_index(l, s, c, i, j, ki, kj);
                if (xi < 0) continue;
                size_t wi = ((o * g->cin + c) * g->k + ki) * g->k + kj;
                double xv = lamp_bf16_to_f32(l->x[xi]), wv = l->w[wi];
                l->y_ref[yi] += xv * wv, l->y_mag[yi] += fabs(xv * wv);
                l->dx_ref[xi] += dyv * wv, l->dx_mag[xi] += fabs(dyv * wv);
                l->gw_ref[wi] += dyv * xv, l->gw_mag[wi] += fabs(dyv * xv);
              }
        }
}

static layer *layer_new(geometry g) {
  layer *l = calloc(1, sizeof *l);
  l->g = g;
  l->oh = out_size(g.h, &g), l->ow = out_size(g.w, &g);
  l->nx = g.n * g.cin * g.h * g.w, l->ny = g.n * g.cout * l->oh * l->ow, l->nw = g.cout * g.cin * g.k * g.k;
  l->x = calloc(l->nx, 2), l->dx = calloc(l->nx, 2), l->y = calloc(l->ny, 2), l->dy = calloc(l->ny, 2);
  l->w = calloc(l->nw, 4), l->gw = calloc(l->nw, 4);
  l->y_ref = calloc(l->ny, 8), l->y_mag = calloc(l->ny, 8), l->dx_ref = calloc(l->nx, 8);
  l->dx_mag = calloc(l->nx, 8), l->gw_ref = calloc(l->nw, 8), l->gw_mag = calloc(l->nw, 8);
  for (size_t k = 0; k < l->nx; k++) l->x[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < l->ny; k++) l->dy[k] = lamp_f32_to_bf16(next_value());
  for (size_t k = 0; k < l->nw; k++) l->w[k] = next_value();
  references(l);
  l->a = (lamp_conv2d_args){.shape = {.batch = g.n,
                                      .in_channels = g.cin,
                                      .out_channels = g.cout,
                                      .groups = 1,
                                      .height = g.h,
                                      .width = g.w,
                                      .kernel = g.k,
                                      .stride = g.stride,
                                      .padding = g.pad,
                                      .dilation = 1,
                                      .out_h = l->oh,
                                      .out_w = l->ow},
                            .compute = LAMP_BF16,
                            .x = l->x,
                            .x_dtype = LAMP_BF16,
                            .weight = l->w,
                            .operand_dtype = LAMP_F32,
                            .y = l->y,
                            .y_dtype = LAMP_BF16,
                            .dy = l->dy,
                            .dy_dtype = LAMP_BF16,
                            .dx = l->dx,
                            .dx_dtype = LAMP_BF16,
                            .grad_weight = l->gw,
                            .grad_dtype = LAMP_F32,
                            .overwrite_grads = 1};
  return l;
}

static void layer_free(layer *l) {
  void *p[] = {l->x, l->y, l->dy, l->dx, l->w, l->gw, l->y_ref, l->y_mag, l->dx_ref, l->dx_mag, l->gw_ref, l->gw_mag};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
  free(l);
}

/* One forward and one backward on *plan; the layer must run where expect_dnnl says. */
static void run(layer *l, void **plan) {
  assert_int_equal(lamp_conv2d_forward(LAMP_CPU, plan, &l->a), LAMP_OK);
  assert_int_equal(lamp_conv2d_backward(LAMP_CPU, plan, &l->a), LAMP_OK);
  const char *engine = lamp_cpu_conv2d_plan_engine(*plan);
  if (expect_dnnl()) {
    if (engine == NULL || strstr(engine, "amx") == NULL)
      fail_msg("the layer ran on %s, expected oneDNN's AMX", engine ? engine : "lamp's kernels");
  } else if (engine != NULL) {
    fail_msg("the layer ran on oneDNN (%s) with LAMP_CONV_BF16=%s", engine, getenv("LAMP_CONV_BF16"));
  }
}

/* Images [0, n) of y, dx and the weight gradient (plus `base` per element) against the references. */
static void check(const layer *l, size_t n, double base) {
  size_t ny = n * l->ny / l->g.n, nx = n * l->nx / l->g.n;
  for (size_t k = 0; k < ny; k++) {
    double got = lamp_bf16_to_f32(l->y[k]), want = l->y_ref[k];
    if (fabs(got - want) > fabs(want) / 256.0 + 1e-6 * l->y_mag[k] + 1e-30)
      fail_msg("y[%zu] = %.9g, reference %.9g", k, got, want);
  }
  for (size_t k = 0; k < nx; k++) {
    double got = lamp_bf16_to_f32(l->dx[k]), want = l->dx_ref[k];
    if (fabs(got - want) > fabs(want) / 256.0 + 1e-6 * l->dx_mag[k] + 1e-30)
      fail_msg("dx[%zu] = %.9g, reference %.9g", k, got, want);
  }
  for (size_t k = 0; n == l->g.n && k < l->nw; k++) {
    double got = l->gw[k] - base, want = l->gw_ref[k];
    if (fabs(got - want) > 1e-5 * l->gw_mag[k] + 1e-6 * fabs(base) + 1e-30)
      fail_msg("grad_weight[%zu] = %.9g, reference %.9g", k, got, want);
  }
}

static char warning[512];
static int warnings;

static void capture(lamp_log_level level, const char *line, void *userdata) {
  (void)userdata;
  if (level != LAMP_LOG_WARN) return;
  warnings++;
  snprintf(warning, sizeof warning, "%s", line);
}

static const geometry geometries[] = {
    {5, 16, 16, 8, 8, 3, 1, 1},   /* the small ResNet's blocks, an odd batch */
    {3, 32, 16, 7, 9, 3, 1, 1},   /* planes that are not square, fewer outputs than inputs */
    {4, 16, 32, 10, 10, 1, 2, 0}, /* a strided 1x1 projection */
    {2, 16, 32, 9, 9, 3, 2, 1},   /* a strided 3x3 whose last row and column see padding */
};

static void dnnl_matches_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof geometries / sizeof geometries[0]; i++) {
    layer *l = layer_new(geometries[i]);
    void *plan = NULL;
    run(l, &plan);
    check(l, l->g.n, 0.0);
    lamp_conv2d_plan_free(LAMP_CPU, plan);
    layer_free(l);
  }
}

/* Runs first: LAMP_CONV_BF16=dnnl where oneDNN cannot run warns once, on the first layer's call. */
static void forcing_dnnl_warns_where_it_cannot_run(void **state) {
  (void)state;
  const char *set = getenv("LAMP_CONV_BF16");
  int forced = set != NULL && strcmp(set, "dnnl") == 0;
  lamp_log_set_sink(capture, NULL);
  for (int i = 0; i < 2; i++) {
    layer *l = layer_new(geometries[0]);
    void *plan = NULL;
    run(l, &plan);
    lamp_conv2d_plan_free(LAMP_CPU, plan);
    layer_free(l);
  }
  lamp_log_set_sink(NULL, NULL);
  if (forced && !lamp_cpu_has(LAMP_ISA_AVX512BF16)) {
    assert_int_equal(warnings, 1);
    assert_string_equal(warning,
                        "warning: LAMP_CONV_BF16=dnnl: this CPU has no AVX512_BF16, so no AMX; using the "
                        "direct kernels");
  } else if (!forced || expect_dnnl()) {
    assert_int_equal(warnings, 0);
  }
}

/* The same call twice on one plan, and on a fresh one: the same bits. */
static void dnnl_is_deterministic(void **state) {
  (void)state;
  layer *l = layer_new(geometries[0]);
  uint16_t *y = malloc(l->ny * 2), *dx = malloc(l->nx * 2);
  float *gw = malloc(l->nw * 4);
  void *plan = NULL, *fresh = NULL;
  run(l, &plan);
  memcpy(y, l->y, l->ny * 2), memcpy(dx, l->dx, l->nx * 2), memcpy(gw, l->gw, l->nw * 4);
  for (int pass = 0; pass < 2; pass++) {
    run(l, pass == 0 ? &plan : &fresh);
    assert_memory_equal(y, l->y, l->ny * 2);
    assert_memory_equal(dx, l->dx, l->nx * 2);
    assert_memory_equal(gw, l->gw, l->nw * 4);
  }
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  lamp_conv2d_plan_free(LAMP_CPU, fresh);
  free(y), free(dx), free(gw);
  layer_free(l);
}

/* A smaller batch on the same plan (its slices made again for fewer images), then the whole batch
   again, its gradient added into a slab that holds 1 already. */
static void dnnl_batch_sizes_and_accumulation(void **state) {
  (void)state;
  layer *l = layer_new(geometries[1]);
  void *plan = NULL;
  run(l, &plan);
  l->a.shape.batch = 1;
  memset(l->y, 0, l->ny * 2), memset(l->dx, 0, l->nx * 2);
  run(l, &plan);
  check(l, 1, 0.0);
  l->a.shape.batch = l->g.n;
  l->a.overwrite_grads = 0;
  for (size_t k = 0; k < l->nw; k++) l->gw[k] = 1.0f;
  run(l, &plan);
  check(l, l->g.n, 1.0);
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  layer_free(l);
}

static size_t workspace_bytes(void) { return lamp_ledger_get(LAMP_CPU, LAMP_MEM_WORKSPACE).current; }

/* A second layer adds only its own weights and gradient buffers: the activations' NHWC buffers
   are shared between layers, and released with the last of them. */
static void layers_share_their_activation_buffers(void **state) {
  (void)state;
  if (!expect_dnnl()) skip();
  layer *l = layer_new((geometry){4, 16, 16, 28, 28, 3, 1, 1});
  void *first = NULL, *second = NULL;
  size_t before = workspace_bytes();
  run(l, &first);
  size_t one = workspace_bytes();
  run(l, &second);
  size_t two = workspace_bytes();
  if (two - one >= (one - before) / 2)
    fail_msg("workspace: %zu bytes before, %zu with one layer, %zu with two", before, one, two);
  lamp_conv2d_plan_free(LAMP_CPU, first);
  lamp_conv2d_plan_free(LAMP_CPU, second);
  assert_int_equal(workspace_bytes(), before);
  layer_free(l);
}

/* A batch of ten slices' worth (an evaluation's size): right, and the threads' buffers hold one
   slice of 64 images each, not a tenth of the batch per thread. */
static void large_batches_keep_the_threads_buffers_small(void **state) {
  (void)state;
  if (!expect_dnnl()) skip();
  layer *l = layer_new((geometry){640, 16, 16, 14, 14, 3, 1, 1});
  void *plan = NULL;
  size_t before = workspace_bytes(), threads = lamp_cpu_threads();
  run(l, &plan);
  check(l, l->g.n, 0.0);
  size_t image = 16 * 14 * 14 * 2, slices = 16, own = slices * 4 * l->nw * 4;
  size_t most = threads * (4 * 64 * image + (1u << 20)) + own; /* x, y, dy, dx and a scratchpad per thread */
  if (workspace_bytes() - before > most)
    fail_msg("workspace: %zu bytes for %zu images on %zu threads, expected at most %zu", workspace_bytes() - before,
             l->g.n, threads, most);
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  layer_free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forcing_dnnl_warns_where_it_cannot_run),
      cmocka_unit_test(dnnl_matches_reference),
      cmocka_unit_test(dnnl_is_deterministic),
      cmocka_unit_test(dnnl_batch_sizes_and_accumulation),
      cmocka_unit_test(layers_share_their_activation_buffers),
      cmocka_unit_test(large_batches_keep_the_threads_buffers_small),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
