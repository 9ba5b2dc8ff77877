/*
** lamp_conv2d_forward and lamp_conv2d_backward on the device against the CPU, NCHW, over
** strides, paddings, groups and dilations, in fp32, fp16 and bf16 (activations, weights and
** compute in one dtype, the autocast layout, plus 16-bit compute over fp32 activations). The
** weights and bias go in as the device takes them: in the compute dtype where it has
** LAMP_CAP_NATIVE_16BIT_GEMM, else as fp32 holding the compute dtype's values (the CPU's form).
**
** Each output is a sum of k products accumulated in fp32 on both sides, so the device's value
** lies within, as for GEMM (check_gemm.c),
**
**     2k * 2^-24 * sum |a| |b|  +  ulp_out(|ref| + that)
**
** of the CPU's: y with k = in/groups * kernel^2 (a = x, b = W), dx with k = out/groups *
** kernel^2 (dy, W), dW with k = batch * out_h * out_w (dy, x). The sums of |a||b| are computed
** here in double. The bias gradient is a sum in double on both sides: one rounding to fp32 and
** one to the gradient dtype apart. Gradients added into a slab (not overwritten) take one more
** fp32 rounding of |g0| + |v|. On the simulated device the CPU's own convolution runs: the same bits.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_ops.h"

typedef struct conv_case {
  lamp_conv2d_shape s;
  lamp_dtype compute, act, grad;
  int bias, overwrite;
} conv_case;

/* The weights (p[w32] fp32 with the compute dtype's values, p[w32 + 1] in the compute dtype) as
   the device takes them. */
static lamp_dtype operand_dtype(lamp_device d, const conv_case *cc) {
  return lamp_device_has(d, LAMP_CAP_NATIVE_16BIT_GEMM) ? cc->compute : LAMP_F32;
}

static lamp_conv2d_args args_of(lamp_device d, const conv_case *cc, void *const *p, int w32) {
  lamp_dtype op = operand_dtype(d, cc);
  return (lamp_conv2d_args){.shape = cc->s, .compute = cc->compute, .x_dtype = cc->act, .operand_dtype = op,
                            .weight = op == LAMP_F32 ? p[w32] : p[w32 + 1], .y_dtype = cc->act,
                            .dy_dtype = cc->act, .dx_dtype = cc->act, .grad_dtype = cc->grad,
                            .overwrite_grads = cc->overwrite, .x = p[0]};
}

/* p: x, w32, w16, b32, b16, y */
static lamp_status call_forward(lamp_device d, void *const *p, const void *args) {
  const conv_case *cc = args;
  lamp_conv2d_args a = args_of(d, cc, p, 1);
  a.bias = !cc->bias ? NULL : a.operand_dtype == LAMP_F32 ? p[3] : p[4];
  a.y = p[5];
  void *plan = NULL;
  lamp_status st = lamp_conv2d_forward(d, &plan, &a);
  lamp_conv2d_plan_free(d, plan);
  return st;
}

/* p: x, w32, w16, dy, dx, gw, gb */
static lamp_status call_backward(lamp_device d, void *const *p, const void *args) {
  const conv_case *cc = args;
  lamp_conv2d_args a = args_of(d, cc, p, 1);
  a.dy = p[3];
  a.dx = p[4];
  a.grad_weight = p[5];
  a.grad_bias = cc->bias ? p[6] : NULL;
  a.bias = cc->bias ? a.weight : NULL; /* never read by the backward: says that the layer has a bias */
  void *plan = NULL;
  lamp_status st = lamp_conv2d_backward(d, &plan, &a);
  lamp_conv2d_plan_free(d, plan);
  return st;
}

/* Sizes. */
static size_t nx(const lamp_conv2d_shape *s) { return s->batch * s->in_channels * s->height * s->width; }
static size_t ny(const lamp_conv2d_shape *s) { return s->batch * s->out_channels * s->out_h * s->out_w; }
static size_t nw(const lamp_conv2d_shape *s) {
  return s->out_channels * (s->in_channels / s->groups) * s->kernel * s->kernel;
}

/* The sums of |a||b| of every output of the three products, in double (dy NULL: the forward's only). */
typedef struct magnitudes {
  double *y, *dx, *dw;
} magnitudes;

static magnitudes magnitudes_of(const lamp_conv2d_shape *s, lamp_dtype act, const void *x, const void *dy,
                                const float *w) {
  magnitudes m = {check_alloc(ELEM_F64, ny(s)), check_alloc(ELEM_F64, nx(s)), check_alloc(ELEM_F64, nw(s))};
  check_elem e = check_elem_of(act);
  size_t cin_g = s->in_channels / s->groups, cout_g = s->out_channels / s->groups, k = s->kernel;
  for (size_t n = 0; n < s->batch; n++)
    for (size_t o = 0; o < s->out_channels; o++)
      for (size_t oh = 0; oh < s->out_h; oh++)
        for (size_t ow = 0; ow < s->out_w; ow++) {
          size_t yi = ((n * s->out_channels + o) * s->out_h + oh) * s->out_w + ow;
          double g = dy != NULL ? fabs(check_get(e, dy, yi)) : 0.0;
          for (size_t c = 0; c < cin_g; c++)
            for (size_t i = 0; i < k; i++)
              for (size_t j = 0; j < k; j++) {
                long ih = (long)(oh * s->stride + i * s->dilation) - (long)s->padding;
                long iw = (long)(ow * s->stride + j * s->dilation) - (long)s->padding;
                if (ih < 0 || iw < 0 || ih >= (long)s->height || iw >= (long)s->width) continue;
                size_t ci = (o / cout_g) * cin_g + c;
                size_t xi = ((n * s->in_channels + ci) * s->height + (size_t)ih) * s->width + (size_t)iw;
                size_t wi = ((o * cin_g + c) * k + i) * k + j;
                double xa = fabs(check_get(e, x, xi)), wa = fabs((double)w[wi]);
                m.y[yi] += xa * wa;
                m.dx[xi] += g * wa;
                m.dw[wi] += g * xa;
              }
        }
  return m;
}

/* The bound of every element of a result: 2k u mag + ulp(|cpu| + that), plus, where the result
   was added to a starting g0, the fp32 rounding of that sum. */
static double *bounds(check_elem out, lamp_dtype round_via, const void *cpu, const double *mag, size_t n, size_t k,
                      const float *g0) {
  double *b = check_alloc(ELEM_F64, n), u = 0x1p-24;
  for (size_t i = 0; i < n; i++) {
    double acc = 2.0 * (double)k * u * (mag != NULL ? mag[i] : 0.0), ref = fabs(check_get(out, cpu, i));
    b[i] = acc + check_ulp(round_via, ref + acc);
    if (g0 != NULL) b[i] += check_ulp(round_via, ref + fabs((double)g0[i]) + acc) + check_ulp(LAMP_F32, ref + acc);
  }
  return b;
}

static float *widened(lamp_dtype dtype, const void *src, size_t n) {
  float *out = check_alloc(ELEM_F32, n);
  for (size_t i = 0; i < n; i++) out[i] = (float)check_get(check_elem_of(dtype), src, i);
  return out;
}

static void run_forward(check_run *run, check_line *line, const conv_case *cc) {
  const lamp_conv2d_shape *s = &cc->s;
  void *x = check_random(run, cc->act, nx(s), 0, 0), *w16 = check_random(run, cc->compute, nw(s), 0, 0);
  void *b16 = check_random(run, cc->compute, s->out_channels, 0, 0);
  float *w32 = widened(cc->compute, w16, nw(s)), *b32 = widened(cc->compute, b16, s->out_channels);
  check_case c = {.op = "conv2d_forward", .call = call_forward, .args = cc};
  check_operand_add(&c, check_elem_of(cc->act), nx(s), ROLE_IN, x);
  check_operand_add(&c, ELEM_F32, nw(s), ROLE_IN, w32);
  check_operand_add(&c, check_elem_of(cc->compute), nw(s), ROLE_IN, w16);
  check_operand_add(&c, ELEM_F32, s->out_channels, ROLE_IN, b32);
  check_operand_add(&c, check_elem_of(cc->compute), s->out_channels, ROLE_IN, b16);
  check_operand_add(&c, check_elem_of(cc->act), ny(s), ROLE_OUT, NULL);
  if (check_case_run(run, &c) != 0) {
    check_line_fail(line, c.why);
  } else {
    magnitudes m = magnitudes_of(s, cc->act, x, NULL, w32);
    size_t k = (s->in_channels / s->groups) * s->kernel * s->kernel;
    double *by = bounds(check_elem_of(cc->act), cc->act, c.x[5].cpu, m.y, ny(s), k, NULL);
    if (cc->bias) /* the bias added in fp32 before the output's rounding */
      for (size_t i = 0; i < ny(s); i++) by[i] += check_ulp(LAMP_F32, 2.0 + m.y[i]);
    check_bounded(line, &c, 5, by);
    free(by);
    free(m.y);
    free(m.dx);
    free(m.dw);
  }
  check_case_free(&c);
  free(x);
  free(w16);
  free(b16);
  free(w32);
  free(b32);
}

static void run_backward(check_run *run, check_line *line, const conv_case *cc) {
  const lamp_conv2d_shape *s = &cc->s;
  void *x = check_random(run, cc->act, nx(s), 0, 0), *w16 = check_random(run, cc->compute, nw(s), 0, 0);
  void *dy = check_random(run, cc->act, ny(s), 0, 0);
  float *w32 = widened(cc->compute, w16, nw(s));
  float *gw0 = cc->overwrite ? NULL : check_random(run, LAMP_F32, nw(s), 0, 0);
  float *gb0 = cc->overwrite ? NULL : check_random(run, LAMP_F32, s->out_channels, 0, 0);
  int role = cc->overwrite ? ROLE_OUT : ROLE_INOUT;
  check_case c = {.op = "conv2d_backward", .call = call_backward, .args = cc};
  check_operand_add(&c, check_elem_of(cc->act), nx(s), ROLE_IN, x);
  check_operand_add(&c, ELEM_F32, nw(s), ROLE_IN, w32);
  check_operand_add(&c, check_elem_of(cc->compute), nw(s), ROLE_IN, w16);
  check_operand_add(&c, check_elem_of(cc->act), ny(s), ROLE_IN, dy);
  check_operand_add(&c, check_elem_of(cc->act), nx(s), ROLE_OUT, NULL);
  check_operand_add(&c, ELEM_F32, nw(s), role, gw0);
  int gb = check_operand_add(&c, ELEM_F32, s->out_channels, role, gb0);
  c.x[gb].absent = !cc->bias;
  if (check_case_run(run, &c) != 0) {
    check_line_fail(line, c.why);
  } else {
    magnitudes m = magnitudes_of(s, cc->act, x, dy, w32);
    size_t kk = s->kernel * s->kernel;
    double *bx = bounds(check_elem_of(cc->act), cc->act, c.x[4].cpu, m.dx, nx(s), (s->out_channels / s->groups) * kk,
                        NULL);
    double *bw = bounds(ELEM_F32, cc->grad, c.x[5].cpu, m.dw, nw(s), s->batch * s->out_h * s->out_w, gw0);
    check_bounded(line, &c, 4, bx);
    check_bounded(line, &c, 5, bw);
    if (cc->bias) {
      double *bb = bounds(ELEM_F32, cc->grad, c.x[6].cpu, NULL, s->out_channels, 0, gb0);
      for (size_t i = 0; i < s->out_channels; i++) bb[i] += check_ulp(LAMP_F32, fabs(check_get(ELEM_F32, c.x[6].cpu, i)));
      check_bounded(line, &c, 6, bb);
      free(bb);
    }
    free(bx);
    free(bw);
    free(m.y);
    free(m.dx);
    free(m.dw);
  }
  check_case_free(&c);
  free(x);
  free(w16);
  free(dy);
  free(w32);
  free(gw0);
  free(gb0);
}

/* batch, in, out, groups, height, width, kernel, stride, padding, dilation (out_h, out_w derived) */
static const lamp_conv2d_shape shapes[] = {
    {2, 3, 4, 1, 7, 7, 3, 1, 1, 1, 0, 0},   /* the CNN's 3x3, padding 1 */
    {2, 4, 6, 2, 8, 8, 3, 2, 1, 1, 0, 0},   /* stride 2, 2 groups */
    {1, 4, 4, 4, 9, 9, 3, 1, 2, 2, 0, 0},   /* depthwise, dilation 2 */
    {3, 8, 8, 1, 5, 5, 1, 1, 0, 1, 0, 0},   /* pointwise */
    {2, 3, 5, 1, 6, 5, 5, 2, 2, 1, 0, 0},   /* 5x5, odd width */
    {2, 6, 6, 3, 11, 10, 3, 3, 0, 2, 0, 0}, /* stride 3, dilation 2, 3 groups, no padding */
    {4, 16, 32, 1, 14, 14, 3, 1, 1, 1, 0, 0},
    {0, 3, 4, 1, 7, 7, 3, 1, 1, 1, 0, 0}, /* an empty batch */
};

static lamp_conv2d_shape with_out(lamp_conv2d_shape s) {
  size_t span = s.dilation * (s.kernel - 1) + 1;
  s.out_h = (s.height + 2 * s.padding - span) / s.stride + 1;
  s.out_w = (s.width + 2 * s.padding - span) / s.stride + 1;
  return s;
}

typedef struct conv_combo {
  lamp_dtype compute, act, grad;
} conv_combo;

static const conv_combo combos[] = {
    {LAMP_F32, LAMP_F32, LAMP_F32},
    {LAMP_F16, LAMP_F16, LAMP_F16},
    {LAMP_BF16, LAMP_BF16, LAMP_BF16},
    {LAMP_BF16, LAMP_F32, LAMP_F32}, /* 16-bit compute over fp32 activations, fp32 gradients */
};

void check_conv(check_run *run) {
  for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
    const conv_combo *co = &combos[ci];
    for (int backward = 0; backward < 2; backward++) {
      const char *op = backward ? "conv2d_backward" : "conv2d_forward";
      if (!check_selected(run, op)) continue;
      check_line line;
      check_line_begin(&line, 0, "%s %s,%s->%s", op, check_dtype_name(co->act), check_dtype_name(co->compute),
                       backward ? check_dtype_name(co->grad) : check_dtype_name(co->act));
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int variant = 0; variant < 2; variant++) {
          /* with and without a bias; the backward's second variant adds into the gradients */
          conv_case cc = {.s = with_out(shapes[i]), .compute = co->compute, .act = co->act, .grad = co->grad,
                          .bias = variant == 0, .overwrite = !backward || variant == 0};
          check_line_shape(&line, "%zux%zux%zux%zu/g%zu k%zu s%zu p%zu d%zu", cc.s.batch, cc.s.in_channels,
                           cc.s.height, cc.s.width, cc.s.groups, cc.s.kernel, cc.s.stride, cc.s.padding,
                           cc.s.dilation);
          if (backward) run_backward(run, &line, &cc);
          else run_forward(run, &line, &cc);
        }
      check_line_end(run, &line);
    }
  }
}
