/*
** The simulated device's operations: each copies its arguments into a closure, replaces every
** device pointer there by its host view (on the calling thread, so a host pointer handed to the
** device fails at once, naming the operation and the argument), and queues the CPU backend's
** operation on the copy. Structs passed by pointer (geometry, conv and BatchNorm arguments) are
** copied by value: the caller may free or reuse them as soon as the call returns.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim_impl.h"
#include "base/error.h"

/* The CPU backend is what the device runs. */
#define CPU lamp_cpu_backend

/* Points member `m` of closure `c` (a device pointer of any type) at its host view, or returns
   the error from the enclosing function (lamp_sim_arg's message names op and m). */
#define HOST(op, c, m)                                                                  \
  do {                                                                                  \
    void *host_;                                                                        \
    if (lamp_sim_arg((op), #m, (c).m, &host_) != LAMP_OK) return LAMP_ERR_INVALID_ARG; \
    (c).m = host_;                                                                      \
  } while (0)

#define QUEUE(fn, call) lamp_sim_enqueue((fn), &(call), sizeof(call), NULL)

/* A NULL struct argument, refused here: the queued copy is made now. */
static lamp_status null_arg(const char *op, const char *name) {
  return lamp_error(LAMP_ERR_INVALID_ARG, "sim: %s: argument %s is NULL", op, name);
}

/* ---- copies ---------------------------------------------------------------------------------- */

typedef struct move_call {
  void *dst;
  const void *src;
  size_t bytes;
} move_call;

static lamp_status run_move(const void *p) {
  const move_call *c = p;
  memmove(c->dst, c->src, c->bytes);
  return LAMP_OK;
}

lamp_status lamp_sim_upload(void *dst, const void *host_src, size_t bytes) {
  move_call c = {dst, host_src, bytes};
  HOST("upload", c, dst);
  return lamp_sim_run_and_wait(run_move, &c, sizeof c);
}

lamp_status lamp_sim_upload_async(void *dst, const void *host_src, size_t bytes) {
  move_call c = {dst, host_src, bytes};
  lamp_status st = lamp_sim_refuse_in_capture("upload_async");
  if (st != LAMP_OK) return st;
  HOST("upload_async", c, dst);
  return QUEUE(run_move, c);
}

lamp_status lamp_sim_download(void *host_dst, const void *src, size_t bytes) {
  move_call c = {host_dst, src, bytes};
  HOST("download", c, src);
  return lamp_sim_run_and_wait(run_move, &c, sizeof c);
}

lamp_status lamp_sim_copy(void *dst, const void *src, size_t bytes) {
  move_call c = {dst, src, bytes};
  HOST("copy", c, dst);
  HOST("copy", c, src);
  return QUEUE(run_move, c);
}

/* ---- kernels (a closure's members are its operation's parameters, in order) ------------------ */

typedef struct gemm_call {
  int trans_a, trans_b;
  size_t m, n, k;
  float alpha;
  const void *a;
  lamp_dtype a_dtype;
  size_t lda;
  const void *b;
  lamp_dtype b_dtype;
  size_t ldb;
  float beta;
  void *c;
  lamp_dtype c_dtype;
  size_t ldc;
} gemm_call;

static lamp_status run_gemm(const void *p) {
  const gemm_call *g = p;
  return CPU.gemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a, g->a_dtype, g->lda, g->b, g->b_dtype,
                  g->ldb, g->beta, g->c, g->c_dtype, g->ldc);
}

lamp_status lamp_sim_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                          lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb, float beta,
                          void *c, lamp_dtype c_dtype, size_t ldc) {
  gemm_call g = {trans_a, trans_b, m, n, k, alpha, a, a_dtype, lda, b, b_dtype, ldb, beta, c, c_dtype, ldc};
  HOST("gemm", g, a);
  HOST("gemm", g, b);
  HOST("gemm", g, c);
  return QUEUE(run_gemm, g);
}

typedef struct convert_call {
  void *dst;
  lamp_dtype dst_dtype;
  const void *src;
  lamp_dtype src_dtype;
  size_t n;
} convert_call;

static lamp_status run_convert(const void *p) {
  const convert_call *c = p;
  return CPU.convert(c->dst, c->dst_dtype, c->src, c->src_dtype, c->n);
}

lamp_status lamp_sim_convert(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n) {
  convert_call c = {dst, dst_dtype, src, src_dtype, n};
  HOST("convert", c, dst);
  HOST("convert", c, src);
  return QUEUE(run_convert, c);
}

typedef struct fill_call {
  void *x;
  lamp_dtype dtype;
  size_t n;
  float value;
} fill_call;

static lamp_status run_fill(const void *p) {
  const fill_call *c = p;
  return CPU.fill(c->x, c->dtype, c->n, c->value);
}

lamp_status lamp_sim_fill(void *x, lamp_dtype dtype, size_t n, float value) {
  fill_call c = {x, dtype, n, value};
  HOST("fill", c, x);
  return QUEUE(run_fill, c);
}

typedef struct bias_rows_call {
  void *y;
  lamp_dtype y_dtype;
  const void *bias;
  lamp_dtype bias_dtype;
  size_t rows, cols;
} bias_rows_call;

static lamp_status run_add_bias_rows(const void *p) {
  const bias_rows_call *c = p;
  return CPU.add_bias_rows(c->y, c->y_dtype, c->bias, c->bias_dtype, c->rows, c->cols);
}

lamp_status lamp_sim_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype, size_t rows,
                                   size_t cols) {
  bias_rows_call c = {y, y_dtype, bias, bias_dtype, rows, cols};
  HOST("add_bias_rows", c, y);
  HOST("add_bias_rows", c, bias);
  return QUEUE(run_add_bias_rows, c);
}

typedef struct sum_rows_call {
  float *out;
  const void *dy;
  lamp_dtype dy_dtype;
  size_t rows, cols;
  float alpha, beta;
} sum_rows_call;

static lamp_status run_sum_rows(const void *p) {
  const sum_rows_call *c = p;
  return CPU.sum_rows(c->out, c->dy, c->dy_dtype, c->rows, c->cols, c->alpha, c->beta);
}

lamp_status lamp_sim_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols, float alpha,
                              float beta) {
  sum_rows_call c = {out, dy, dy_dtype, rows, cols, alpha, beta};
  HOST("sum_rows", c, out);
  HOST("sum_rows", c, dy);
  return QUEUE(run_sum_rows, c);
}

typedef struct relu_forward_call {
  void *y;
  const void *x;
  lamp_dtype dtype;
  size_t n;
} relu_forward_call;

static lamp_status run_relu_forward(const void *p) {
  const relu_forward_call *c = p;
  return CPU.relu_forward(c->y, c->x, c->dtype, c->n);
}

lamp_status lamp_sim_relu_forward(void *y, const void *x, lamp_dtype dtype, size_t n) {
  relu_forward_call c = {y, x, dtype, n};
  HOST("relu_forward", c, y);
  HOST("relu_forward", c, x);
  return QUEUE(run_relu_forward, c);
}

typedef struct relu_backward_call {
  void *dx;
  const void *dy, *y;
  lamp_dtype dtype;
  size_t n;
} relu_backward_call;

static lamp_status run_relu_backward(const void *p) {
  const relu_backward_call *c = p;
  return CPU.relu_backward(c->dx, c->dy, c->y, c->dtype, c->n);
}

lamp_status lamp_sim_relu_backward(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n) {
  relu_backward_call c = {dx, dy, y, dtype, n};
  HOST("relu_backward", c, dx);
  HOST("relu_backward", c, dy);
  HOST("relu_backward", c, y);
  return QUEUE(run_relu_backward, c);
}

typedef struct cross_entropy_call {
  const void *logits;
  lamp_dtype logits_dtype;
  const int32_t *labels;
  size_t rows, classes;
  float grad_scale;
  double *loss;
  void *dlogits;
  lamp_dtype dlogits_dtype;
  size_t *correct;
} cross_entropy_call;

static lamp_status run_cross_entropy(const void *p) {
  const cross_entropy_call *c = p;
  return CPU.cross_entropy(c->logits, c->logits_dtype, c->labels, c->rows, c->classes, c->grad_scale, c->loss,
                           c->dlogits, c->dlogits_dtype, c->correct);
}

lamp_status lamp_sim_cross_entropy(const void *logits, lamp_dtype logits_dtype, const int32_t *labels, size_t rows,
                                   size_t classes, float grad_scale, double *loss, void *dlogits,
                                   lamp_dtype dlogits_dtype, size_t *correct) {
  cross_entropy_call c = {logits, logits_dtype, labels, rows, classes, grad_scale, loss, dlogits, dlogits_dtype,
                          correct};
  HOST("cross_entropy", c, logits);
  HOST("cross_entropy", c, labels);
  HOST("cross_entropy", c, loss);
  HOST("cross_entropy", c, dlogits);
  HOST("cross_entropy", c, correct);
  return QUEUE(run_cross_entropy, c);
}

typedef struct argmax_rows_call {
  int32_t *out;
  const void *x;
  lamp_dtype dtype;
  size_t rows, cols;
} argmax_rows_call;

static lamp_status run_argmax_rows(const void *p) {
  const argmax_rows_call *c = p;
  return CPU.argmax_rows(c->out, c->x, c->dtype, c->rows, c->cols);
}

lamp_status lamp_sim_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols) {
  argmax_rows_call c = {out, x, dtype, rows, cols};
  HOST("argmax_rows", c, out);
  HOST("argmax_rows", c, x);
  return QUEUE(run_argmax_rows, c);
}

typedef struct unscale_call {
  float *g;
  size_t n;
  float inv_scale;
  int *found_inf;
} unscale_call;

static lamp_status run_unscale_and_check(const void *p) {
  const unscale_call *c = p;
  return CPU.unscale_and_check(c->g, c->n, c->inv_scale, c->found_inf);
}

lamp_status lamp_sim_unscale_and_check(float *g, size_t n, float inv_scale, int *found_inf) {
  unscale_call c = {g, n, inv_scale, found_inf};
  HOST("unscale_and_check", c, g);
  HOST("unscale_and_check", c, found_inf);
  return QUEUE(run_unscale_and_check, c);
}

/* round_through and accumulate_rounded share their parameters. */
typedef struct rounded_call {
  float *dst;
  const float *src;
  lamp_dtype via;
  size_t n;
} rounded_call;

static lamp_status run_round_through(const void *p) {
  const rounded_call *c = p;
  return CPU.round_through(c->dst, c->src, c->via, c->n);
}

static lamp_status run_accumulate_rounded(const void *p) {
  const rounded_call *c = p;
  return CPU.accumulate_rounded(c->dst, c->src, c->via, c->n);
}

lamp_status lamp_sim_round_through(float *dst, const float *src, lamp_dtype via, size_t n) {
  rounded_call c = {dst, src, via, n};
  HOST("round_through", c, dst);
  HOST("round_through", c, src);
  return QUEUE(run_round_through, c);
}

lamp_status lamp_sim_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n) {
  rounded_call c = {dst, src, via, n};
  HOST("accumulate_rounded", c, dst);
  HOST("accumulate_rounded", c, src);
  return QUEUE(run_accumulate_rounded, c);
}

typedef struct stochastic_call {
  void *dst;
  lamp_dtype dst_dtype;
  const float *src;
  size_t n;
  uint64_t seed, stream;
} stochastic_call;

static lamp_status run_round_stochastic(const void *p) {
  const stochastic_call *c = p;
  return CPU.round_stochastic(c->dst, c->dst_dtype, c->src, c->n, c->seed, c->stream);
}

lamp_status lamp_sim_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                      uint64_t stream) {
  stochastic_call c = {dst, dst_dtype, src, n, seed, stream};
  HOST("round_stochastic", c, dst);
  HOST("round_stochastic", c, src);
  return QUEUE(run_round_stochastic, c);
}

typedef struct scale_call {
  float *x;
  size_t n;
  float alpha;
} scale_call;

static lamp_status run_scale(const void *p) {
  const scale_call *c = p;
  return CPU.scale(c->x, c->n, c->alpha);
}

lamp_status lamp_sim_scale(float *x, size_t n, float alpha) {
  scale_call c = {x, n, alpha};
  HOST("scale", c, x);
  return QUEUE(run_scale, c);
}

typedef struct axpy_call {
  float *y;
  const float *x;
  size_t n;
  float alpha;
} axpy_call;

static lamp_status run_axpy(const void *p) {
  const axpy_call *c = p;
  return CPU.axpy(c->y, c->x, c->n, c->alpha);
}

lamp_status lamp_sim_axpy(float *y, const float *x, size_t n, float alpha) {
  axpy_call c = {y, x, n, alpha};
  HOST("axpy", c, y);
  HOST("axpy", c, x);
  return QUEUE(run_axpy, c);
}

typedef struct sum_squares_call {
  const float *x;
  size_t n;
  double *out;
} sum_squares_call;

static lamp_status run_sum_squares(const void *p) {
  const sum_squares_call *c = p;
  return CPU.sum_squares(c->x, c->n, c->out);
}

lamp_status lamp_sim_sum_squares(const float *x, size_t n, double *out) {
  sum_squares_call c = {x, n, out};
  HOST("sum_squares", c, x);
  HOST("sum_squares", c, out);
  return QUEUE(run_sum_squares, c);
}

typedef struct add_into_call {
  void *y;
  lamp_dtype y_dtype;
  const void *x;
  lamp_dtype x_dtype;
  size_t n;
} add_into_call;

static lamp_status run_add_into(const void *p) {
  const add_into_call *c = p;
  return CPU.add_into(c->y, c->y_dtype, c->x, c->x_dtype, c->n);
}

lamp_status lamp_sim_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n) {
  add_into_call c = {y, y_dtype, x, x_dtype, n};
  HOST("add_into", c, y);
  HOST("add_into", c, x);
  return QUEUE(run_add_into, c);
}

typedef struct add_call {
  void *y;
  lamp_dtype y_dtype;
  const void *a;
  lamp_dtype a_dtype;
  const void *b;
  lamp_dtype b_dtype;
  size_t n;
  int relu;
} add_call;

static lamp_status run_add(const void *p) {
  const add_call *c = p;
  return CPU.add(c->y, c->y_dtype, c->a, c->a_dtype, c->b, c->b_dtype, c->n, c->relu);
}

lamp_status lamp_sim_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                         lamp_dtype b_dtype, size_t n, int relu) {
  add_call c = {y, y_dtype, a, a_dtype, b, b_dtype, n, relu};
  HOST("add", c, y);
  HOST("add", c, a);
  HOST("add", c, b);
  return QUEUE(run_add, c);
}

typedef struct mask_call {
  void *y;
  lamp_dtype y_dtype;
  const void *x;
  lamp_dtype x_dtype;
  const uint8_t *mask;
  float scale;
  size_t n;
} mask_call;

static lamp_status run_apply_mask(const void *p) {
  const mask_call *c = p;
  return CPU.apply_mask(c->y, c->y_dtype, c->x, c->x_dtype, c->mask, c->scale, c->n);
}

lamp_status lamp_sim_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const uint8_t *mask,
                                float scale, size_t n) {
  mask_call c = {y, y_dtype, x, x_dtype, mask, scale, n};
  HOST("apply_mask", c, y);
  HOST("apply_mask", c, x);
  HOST("apply_mask", c, mask);
  return QUEUE(run_apply_mask, c);
}

/* ---- coarse layer operations ----------------------------------------------------------------- */

/* Pooling: the geometry is copied (the caller's may be gone when the pass runs). */
typedef struct maxpool_forward_call {
  void *y;
  lamp_dtype y_dtype;
  int32_t *argmax;
  const void *x;
  lamp_dtype x_dtype;
  size_t n_planes;
  lamp_conv_geom g;
} maxpool_forward_call;

static lamp_status run_maxpool_forward(const void *p) {
  const maxpool_forward_call *c = p;
  return CPU.maxpool_forward(c->y, c->y_dtype, c->argmax, c->x, c->x_dtype, c->n_planes, &c->g);
}

lamp_status lamp_sim_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                     size_t n_planes, const lamp_conv_geom *g) {
  if (g == NULL) return null_arg("maxpool_forward", "g");
  maxpool_forward_call c = {y, y_dtype, argmax, x, x_dtype, n_planes, *g};
  HOST("maxpool_forward", c, y);
  HOST("maxpool_forward", c, argmax);
  HOST("maxpool_forward", c, x);
  return QUEUE(run_maxpool_forward, c);
}

typedef struct maxpool_backward_call {
  void *dx;
  lamp_dtype dx_dtype;
  const void *dy;
  lamp_dtype dy_dtype;
  const int32_t *argmax;
  size_t n_planes;
  lamp_conv_geom g;
} maxpool_backward_call;

static lamp_status run_maxpool_backward(const void *p) {
  const maxpool_backward_call *c = p;
  return CPU.maxpool_backward(c->dx, c->dx_dtype, c->dy, c->dy_dtype, c->argmax, c->n_planes, &c->g);
}

lamp_status lamp_sim_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g) {
  if (g == NULL) return null_arg("maxpool_backward", "g");
  maxpool_backward_call c = {dx, dx_dtype, dy, dy_dtype, argmax, n_planes, *g};
  HOST("maxpool_backward", c, dx);
  HOST("maxpool_backward", c, dy);
  HOST("maxpool_backward", c, argmax);
  return QUEUE(run_maxpool_backward, c);
}

typedef struct avgpool_forward_call {
  void *y;
  lamp_dtype y_dtype;
  const void *x;
  lamp_dtype x_dtype;
  size_t n_planes;
  lamp_conv_geom g;
} avgpool_forward_call;

static lamp_status run_avgpool_forward(const void *p) {
  const avgpool_forward_call *c = p;
  return CPU.avgpool_forward(c->y, c->y_dtype, c->x, c->x_dtype, c->n_planes, &c->g);
}

lamp_status lamp_sim_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                     const lamp_conv_geom *g) {
  if (g == NULL) return null_arg("avgpool_forward", "g");
  avgpool_forward_call c = {y, y_dtype, x, x_dtype, n_planes, *g};
  HOST("avgpool_forward", c, y);
  HOST("avgpool_forward", c, x);
  return QUEUE(run_avgpool_forward, c);
}

typedef struct avgpool_backward_call {
  void *dx;
  lamp_dtype dx_dtype;
  const void *dy;
  lamp_dtype dy_dtype;
  size_t n_planes;
  lamp_conv_geom g;
} avgpool_backward_call;

static lamp_status run_avgpool_backward(const void *p) {
  const avgpool_backward_call *c = p;
  return CPU.avgpool_backward(c->dx, c->dx_dtype, c->dy, c->dy_dtype, c->n_planes, &c->g);
}

lamp_status lamp_sim_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      size_t n_planes, const lamp_conv_geom *g) {
  if (g == NULL) return null_arg("avgpool_backward", "g");
  avgpool_backward_call c = {dx, dx_dtype, dy, dy_dtype, n_planes, *g};
  HOST("avgpool_backward", c, dx);
  HOST("avgpool_backward", c, dy);
  return QUEUE(run_avgpool_backward, c);
}

/*
** A layer's conv plan as the caller holds it: a box made on the calling thread at the first call,
** so the caller's slot is written at once and never by the worker; the CPU plan inside is made,
** used and freed on the worker alone, and so is `widened`: the layer's 16-bit weight and bias
** operands widened to fp32 (the native-16 table, backend.c), which the CPU's convolution reads.
*/
typedef struct sim_plan {
  void *cpu_plan;
  float *widened; /* weight, then bias; `capacity` floats */
  size_t capacity;
} sim_plan;

typedef struct conv_call {
  sim_plan *plan;
  int widen; /* the native-16 table: 16-bit operands are widened here */
  lamp_conv2d_args a;
} conv_call;

/*
** The arguments the CPU's convolution gets: c's own where its operands are fp32; else a copy
** whose weight and bias point at their exact fp32 widening in the plan, as a device reading
** 16-bit operands natively would widen them in its own registers.
*/
static lamp_status cpu_args(const conv_call *c, lamp_conv2d_args *out) {
  *out = c->a;
  if (!c->widen || c->a.operand_dtype == LAMP_F32) return LAMP_OK; /* else the CPU's refusal */
  const lamp_conv2d_shape *s = &c->a.shape;
  if (s->groups == 0) return LAMP_OK; /* the CPU refuses the shape, naming it */
  size_t n_weight = s->out_channels * (s->in_channels / s->groups) * s->kernel * s->kernel;
  size_t n_bias = c->a.bias != NULL ? s->out_channels : 0;
  sim_plan *plan = c->plan;
  if (n_weight + n_bias > plan->capacity) {
    float *bigger = realloc(plan->widened, (n_weight + n_bias) * sizeof(float));
    if (bigger == NULL)
      return lamp_error(LAMP_ERR_SYSTEM, "sim: conv2d: out of host memory widening %zu operand values",
                        n_weight + n_bias);
    plan->widened = bigger;
    plan->capacity = n_weight + n_bias;
  }
  lamp_status st = CPU.convert(plan->widened, LAMP_F32, c->a.weight, c->a.operand_dtype, n_weight);
  if (st == LAMP_OK && n_bias > 0)
    st = CPU.convert(plan->widened + n_weight, LAMP_F32, c->a.bias, c->a.operand_dtype, n_bias);
  if (st != LAMP_OK) return st;
  out->weight = plan->widened;
  out->bias = n_bias > 0 ? plan->widened + n_weight : NULL;
  out->operand_dtype = LAMP_F32;
  return LAMP_OK;
}

static lamp_status run_conv2d_forward(const void *p) {
  const conv_call *c = p;
  lamp_conv2d_args a;
  lamp_status st = cpu_args(c, &a);
  return st == LAMP_OK ? CPU.conv2d_forward(&c->plan->cpu_plan, &a) : st;
}

static lamp_status run_conv2d_backward(const void *p) {
  const conv_call *c = p;
  lamp_conv2d_args a;
  lamp_status st = cpu_args(c, &a);
  return st == LAMP_OK ? CPU.conv2d_backward(&c->plan->cpu_plan, &a) : st;
}

/* The closure of a conv call: the arguments copied with host views, the plan boxed. */
static lamp_status conv_call_of(const char *op, void **plan, const lamp_conv2d_args *a, int widen, conv_call *c) {
  if (plan == NULL) return null_arg(op, "plan");
  if (a == NULL) return null_arg(op, "a");
  c->widen = widen;
  c->a = *a;
  HOST(op, c->a, x);
  HOST(op, c->a, weight);
  HOST(op, c->a, bias);
  HOST(op, c->a, y);
  HOST(op, c->a, dy);
  HOST(op, c->a, dx);
  HOST(op, c->a, grad_weight);
  HOST(op, c->a, grad_bias);
  if (*plan == NULL && (*plan = calloc(1, sizeof(sim_plan))) == NULL)
    return lamp_error(LAMP_ERR_SYSTEM, "sim: %s: out of host memory for a plan", op);
  c->plan = *plan;
  return LAMP_OK;
}

static lamp_status queue_conv(const char *op, lamp_sim_fn fn, void **plan, const lamp_conv2d_args *a, int widen) {
  conv_call c;
  lamp_status st = conv_call_of(op, plan, a, widen, &c);
  return st == LAMP_OK ? QUEUE(fn, c) : st;
}

lamp_status lamp_sim_conv2d_forward(void **plan, const lamp_conv2d_args *a) {
  return queue_conv("conv2d_forward", run_conv2d_forward, plan, a, 0);
}

lamp_status lamp_sim_conv2d_backward(void **plan, const lamp_conv2d_args *a) {
  return queue_conv("conv2d_backward", run_conv2d_backward, plan, a, 0);
}

lamp_status lamp_sim_native16_conv2d_forward(void **plan, const lamp_conv2d_args *a) {
  return queue_conv("conv2d_forward", run_conv2d_forward, plan, a, 1);
}

lamp_status lamp_sim_native16_conv2d_backward(void **plan, const lamp_conv2d_args *a) {
  return queue_conv("conv2d_backward", run_conv2d_backward, plan, a, 1);
}

static lamp_status run_conv2d_plan_free(const void *p) {
  sim_plan *box;
  memcpy(&box, p, sizeof box);
  CPU.conv2d_plan_free(box->cpu_plan);
  free(box->widened);
  free(box);
  return LAMP_OK;
}

/* Queued: work queued before it may still use the plan. */
void lamp_sim_conv2d_plan_free(void *plan) {
  if (plan != NULL) lamp_sim_enqueue_or_run(run_conv2d_plan_free, &plan, sizeof plan);
}

static lamp_status run_batchnorm_forward(const void *p) { return CPU.batchnorm_forward(p); }
static lamp_status run_batchnorm_backward(const void *p) { return CPU.batchnorm_backward(p); }

/* The arguments copied into c with host views. */
static lamp_status batchnorm_call_of(const char *op, const lamp_batchnorm_args *a, lamp_batchnorm_args *c) {
  if (a == NULL) return null_arg(op, "a");
  *c = *a;
  HOST(op, *c, x);
  HOST(op, *c, y);
  HOST(op, *c, weight);
  HOST(op, *c, bias);
  HOST(op, *c, running_mean);
  HOST(op, *c, running_var);
  HOST(op, *c, batches_tracked);
  HOST(op, *c, saved);
  HOST(op, *c, dy);
  HOST(op, *c, dx);
  HOST(op, *c, grad_weight);
  HOST(op, *c, grad_bias);
  return LAMP_OK;
}

lamp_status lamp_sim_batchnorm_forward(const lamp_batchnorm_args *a) {
  lamp_batchnorm_args c;
  lamp_status st = batchnorm_call_of("batchnorm_forward", a, &c);
  return st == LAMP_OK ? QUEUE(run_batchnorm_forward, c) : st;
}

lamp_status lamp_sim_batchnorm_backward(const lamp_batchnorm_args *a) {
  lamp_batchnorm_args c;
  lamp_status st = batchnorm_call_of("batchnorm_backward", a, &c);
  return st == LAMP_OK ? QUEUE(run_batchnorm_backward, c) : st;
}
