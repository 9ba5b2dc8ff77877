/*
** The coarse layer operations of pooling and BatchNorm on the device against the CPU: the GPU
** check's layer stage on CUDA (and, on the simulated device, a check of the checker).
**
** Every comparison is bitwise. The pools are elementwise over windows: the CUDA kernels scan a
** window as the CPU does and gather each backward sum in the CPU's order (outputs in increasing
** index). BatchNorm's statistics are sums, but the CUDA kernels reproduce the CPU's order exactly
** (core/backend/cuda/channel_math.h: each (image, channel) row in fp32 over the CPU's 8 lanes and
** tail, the rows folded in double in image order, the per-channel formulas in double as the CPU
** writes them), so the saved statistics, the running statistics, the parameter gradients and
** every output element must be the CPU's bits too; any NaN equals any NaN.
**
** Pools: x with the values that break comparisons (signed zeros, infinities, NaN, ties) over
** geometries with padding, dilation, uneven strides and windows of padding only, the backward from
** the CPU forward's winners. BatchNorm: training and inference, with and without the fused ReLU,
** per dtype, the backward from the CPU forward's saved statistics, gradients written and added.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_ops.h"

static const lamp_dtype pool_pairs[][2] = {
    {LAMP_F32, LAMP_F32}, {LAMP_F16, LAMP_F16}, {LAMP_BF16, LAMP_BF16}, {LAMP_BF16, LAMP_F32}};
#define N_POOL_PAIRS (sizeof pool_pairs / sizeof *pool_pairs)

static const lamp_dtype dtypes[] = {LAMP_F32, LAMP_F16, LAMP_BF16};

/* ---- pooling --------------------------------------------------------------------------------- */

typedef struct pool_shape {
  size_t planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
} pool_shape;

static const pool_shape pool_shapes[] = {
    {6, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1},      /* the 2x2 tiling */
    {5, 7, 5, 2, 2, 2, 2, 0, 0, 1, 1},      /* ... odd sizes */
    {4, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1},      /* ResNet's stem pool */
    {3, 10, 9, 3, 2, 2, 3, 1, 0, 2, 1},     /* dilation, uneven strides */
    {2, 3, 4, 3, 3, 1, 2, 2, 2, 1, 1},      /* windows of padding only */
    {2048, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1}, /* --full: grids of many blocks, kept to seconds on the CPU */
    {1024, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1},
};
#define SMALL_POOL_SHAPES 5
#define POOL_SHAPES(run) ((run)->full ? sizeof pool_shapes / sizeof *pool_shapes : SMALL_POOL_SHAPES)

static lamp_conv_geom geom_of(const pool_shape *s) {
  lamp_conv_geom g = {0, s->h, s->w, s->kh, s->kw, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, 0, 0};
  g.out_h = (s->h + 2 * s->ph - s->dh * (s->kh - 1) - 1) / s->sh + 1;
  g.out_w = (s->w + 2 * s->pw - s->dw * (s->kw - 1) - 1) / s->sw + 1;
  return g;
}

typedef struct pool_args {
  lamp_dtype xt, yt;
  size_t planes;
  lamp_conv_geom g;
} pool_args;

static lamp_status call_maxpool_forward(lamp_device d, void *const *p, const void *args) {
  const pool_args *a = args;
  return lamp_maxpool_forward(d, p[0], a->yt, p[1], p[2], a->xt, a->planes, &a->g);
}

static lamp_status call_maxpool_backward(lamp_device d, void *const *p, const void *args) {
  const pool_args *a = args;
  return lamp_maxpool_backward(d, p[0], a->xt, p[1], a->yt, p[2], a->planes, &a->g);
}

static lamp_status call_avgpool_forward(lamp_device d, void *const *p, const void *args) {
  const pool_args *a = args;
  return lamp_avgpool_forward(d, p[0], a->yt, p[1], a->xt, a->planes, &a->g);
}

static lamp_status call_avgpool_backward(lamp_device d, void *const *p, const void *args) {
  const pool_args *a = args;
  return lamp_avgpool_backward(d, p[0], a->xt, p[1], a->yt, a->planes, &a->g);
}

/* One case of `op` (forward: y [, argmax] from x; backward: dx from dy [, argmax]). */
static void pool_case(check_run *run, check_line *line, const char *op, int max, int backward, const pool_args *a) {
  size_t in = a->planes * a->g.height * a->g.width, out = a->planes * a->g.out_h * a->g.out_w;
  check_elem xe = check_elem_of(a->xt), ye = check_elem_of(a->yt);
  void *x = check_random(run, a->xt, in, 1, 6), *dy = check_random(run, a->yt, out, 1, 6);
  int32_t *argmax = check_alloc(ELEM_I32, out);
  if (max && backward) { /* the winners the forward found, from the CPU */
    void *y = check_alloc(ye, out);
    if (lamp_maxpool_forward(LAMP_CPU, y, a->yt, argmax, x, a->xt, a->planes, &a->g) != LAMP_OK) {
      check_line_fail(line, "the CPU forward for the winners failed");
      free(y);
      free(x), free(dy), free(argmax);
      return;
    }
    free(y);
  }
  check_case c = {.op = op, .args = a};
  if (!backward) {
    c.call = max ? call_maxpool_forward : call_avgpool_forward;
    check_operand_add(&c, ye, out, ROLE_OUT, NULL);
    if (max) check_operand_add(&c, ELEM_I32, out, ROLE_OUT, NULL);
    check_operand_add(&c, xe, in, ROLE_IN, x);
  } else {
    c.call = max ? call_maxpool_backward : call_avgpool_backward;
    check_operand_add(&c, xe, in, ROLE_OUT, NULL);
    check_operand_add(&c, ye, out, ROLE_IN, dy);
    if (max) check_operand_add(&c, ELEM_I32, out, ROLE_IN, argmax);
  }
  check_line_shape(line, "%zux%zux%zu", a->planes, a->g.height, a->g.width);
  if (check_case_run(run, &c) != 0) {
    check_line_fail(line, c.why);
  } else {
    check_bitwise(line, &c, 0);
    if (max && !backward) check_bitwise(line, &c, 1);
  }
  check_case_free(&c);
  free(x), free(dy), free(argmax);
}

static void check_pool(check_run *run, const char *op, int max, int backward) {
  for (size_t d = 0; d < N_POOL_PAIRS; d++) {
    check_line line;
    lamp_dtype xt = pool_pairs[d][0], yt = pool_pairs[d][1];
    check_line_begin(&line, 1, "%s %s->%s", op, check_dtype_name(backward ? yt : xt),
                     check_dtype_name(backward ? xt : yt));
    for (size_t s = 0; s < POOL_SHAPES(run); s++) {
      pool_args a = {xt, yt, pool_shapes[s].planes, geom_of(&pool_shapes[s])};
      pool_case(run, &line, op, max, backward, &a);
    }
    check_line_end(run, &line);
  }
}

/* ---- BatchNorm ------------------------------------------------------------------------------- */

/* --full adds 65536 rows (2048 blocks of the rows kernel) and long rows with a tail */
static const size_t bn_shapes[][3] = {{2, 3, 5}, {4, 8, 49}, {3, 4, 1037}, {1, 2, 2}, {32, 64, 784}, {512, 128, 49},
                                      {4, 16, 3025}};
#define SMALL_BN_SHAPES 4
#define BN_SHAPES(run) ((run)->full ? sizeof bn_shapes / sizeof *bn_shapes : SMALL_BN_SHAPES)

/* The case's fixed arguments; the operands' memory is filled in by the call. */
typedef struct bn_args {
  lamp_batchnorm_args a;
} bn_args;

/* forward operands: y, x, weight+bias [2c], running mean+var [2c], batches_tracked [1], saved [4c] */
static lamp_status call_bn_forward(lamp_device d, void *const *p, const void *args) {
  lamp_batchnorm_args a = ((const bn_args *)args)->a;
  size_t c = a.channels;
  a.y = p[0], a.x = p[1], a.weight = p[2], a.bias = (const float *)p[2] + c;
  a.running_mean = p[3], a.running_var = (float *)p[3] + c, a.batches_tracked = p[4], a.saved = p[5];
  return lamp_batchnorm_forward(d, &a);
}

/* backward operands: dx, dy, x, weight+bias [2c], saved [4c], grad weight+bias [2c] */
static lamp_status call_bn_backward(lamp_device d, void *const *p, const void *args) {
  lamp_batchnorm_args a = ((const bn_args *)args)->a;
  size_t c = a.channels;
  a.dx = p[0], a.dy = p[1], a.x = p[2], a.weight = p[3], a.bias = (const float *)p[3] + c, a.saved = p[4];
  a.grad_weight = p[5], a.grad_bias = (float *)p[5] + c;
  return lamp_batchnorm_backward(d, &a);
}

/* x per channel k about k/4 with spread about 1; the parameters and running statistics near their
   usual values. */
static void bn_inputs(check_run *run, const lamp_batchnorm_args *a, void *x, float *wb, float *running) {
  size_t c = a->channels, n = a->batch * c * a->plane;
  check_elem e = check_elem_of(a->x_dtype);
  for (size_t i = 0; i < n; i++) check_set(e, x, i, 0.25 * (double)(i / a->plane % c) + check_uniform(run));
  for (size_t k = 0; k < c; k++) {
    wb[k] = 1.0f + 0.5f * check_uniform(run);
    wb[c + k] = 0.5f * check_uniform(run);
    running[k] = 0.25f * check_uniform(run);
    running[c + k] = 1.0f + 0.5f * check_uniform(run);
  }
}

static void bn_case(check_run *run, check_line *line, int backward, lamp_batchnorm_args *a) {
  size_t c = a->channels, n = a->batch * c * a->plane;
  check_elem xe = check_elem_of(a->x_dtype), ye = check_elem_of(a->y_dtype);
  void *x = check_alloc(xe, n), *dy = check_random(run, a->y_dtype, n, 0, 0);
  float *wb = check_alloc(ELEM_F32, 2 * c), *running = check_alloc(ELEM_F32, 2 * c);
  float *saved = check_alloc(ELEM_F32, 4 * c), *grads = check_alloc(ELEM_F32, 2 * c), tracked = 7.0f;
  bn_inputs(run, a, x, wb, running);
  for (size_t k = 0; k < 2 * c; k++) grads[k] = check_uniform(run);
  bn_args args = {*a};
  check_case cs = {.op = backward ? "batchnorm_backward" : "batchnorm_forward", .args = &args};
  if (!backward) {
    cs.call = call_bn_forward;
    check_operand_add(&cs, ye, n, ROLE_OUT, NULL);
    check_operand_add(&cs, xe, n, ROLE_IN, x);
    check_operand_add(&cs, ELEM_F32, 2 * c, ROLE_IN, wb);
    check_operand_add(&cs, ELEM_F32, 2 * c, ROLE_INOUT, running);
    check_operand_add(&cs, ELEM_F32, 1, ROLE_INOUT, &tracked);
    check_operand_add(&cs, ELEM_F32, 4 * c, ROLE_OUT, NULL);
  } else { /* the saved statistics of a CPU forward of the same mode */
    lamp_batchnorm_args f = *a;
    void *y = check_alloc(ye, n);
    f.x = x, f.y = y, f.weight = wb, f.bias = wb + c, f.running_mean = running, f.running_var = running + c;
    f.batches_tracked = &tracked, f.saved = saved;
    lamp_status st = lamp_batchnorm_forward(LAMP_CPU, &f);
    free(y);
    if (st != LAMP_OK) {
      check_line_fail(line, "the CPU forward for the saved statistics failed");
      free(x), free(dy), free(wb), free(running), free(saved), free(grads);
      return;
    }
    cs.call = call_bn_backward;
    check_operand_add(&cs, xe, n, ROLE_OUT, NULL);
    check_operand_add(&cs, ye, n, ROLE_IN, dy);
    check_operand_add(&cs, xe, n, ROLE_IN, x);
    check_operand_add(&cs, ELEM_F32, 2 * c, ROLE_IN, wb);
    check_operand_add(&cs, ELEM_F32, 4 * c, ROLE_IN, saved);
    check_operand_add(&cs, ELEM_F32, 2 * c, a->overwrite_grads ? ROLE_OUT : ROLE_INOUT, grads);
  }
  check_line_shape(line, "%zux%zux%zu", a->batch, c, a->plane);
  if (check_case_run(run, &cs) != 0) {
    check_line_fail(line, cs.why);
  } else {
    for (int i = 0; i < cs.n; i++)
      if (cs.x[i].role != ROLE_IN) check_bitwise(line, &cs, i);
  }
  check_case_free(&cs);
  free(x), free(dy), free(wb), free(running), free(saved), free(grads);
}

static void check_batchnorm(check_run *run, int backward) {
  const char *op = backward ? "batchnorm_backward" : "batchnorm_forward";
  for (int training = 1; training >= 0; training--)
    for (int relu = 0; relu < 2; relu++)
      for (int d = 0; d < 3; d++) {
        check_line line;
        check_line_begin(&line, 1, "%s %s%s %s", op, training ? "train" : "eval", relu ? "+relu" : "",
                         check_dtype_name(dtypes[d]));
        for (size_t s = 0; s < BN_SHAPES(run); s++) {
          lamp_batchnorm_args a = {.batch = bn_shapes[s][0], .channels = bn_shapes[s][1], .plane = bn_shapes[s][2],
                                   .momentum = 0.1, .eps = 1e-5, .training = training, .relu = relu,
                                   .x_dtype = dtypes[d], .y_dtype = dtypes[d], .dy_dtype = dtypes[d],
                                   .dx_dtype = dtypes[d], .grad_dtype = dtypes[d], .overwrite_grads = (int)(s % 2)};
          bn_case(run, &line, backward, &a);
        }
        check_line_end(run, &line);
      }
}

void check_layers(check_run *run) {
  if (check_selected(run, "maxpool_forward")) check_pool(run, "maxpool_forward", 1, 0);
  if (check_selected(run, "maxpool_backward")) check_pool(run, "maxpool_backward", 1, 1);
  if (check_selected(run, "avgpool_forward")) check_pool(run, "avgpool_forward", 0, 0);
  if (check_selected(run, "avgpool_backward")) check_pool(run, "avgpool_backward", 0, 1);
  if (check_selected(run, "batchnorm_forward")) check_batchnorm(run, 0);
  if (check_selected(run, "batchnorm_backward")) check_batchnorm(run, 1);
}
