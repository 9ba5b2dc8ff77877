/*
** Conv2d on NCHW tensors: weight [out, in/groups, k, k] (PyTorch's layout), bias [out].
**
** Each image and group is one GEMM: im2col lays the receptive fields of the image out as
** columns [K = in/groups * k * k, out_h * out_w], and
**     y_g [out/groups, plane] = W_g [out/groups, K] . col
**     dW_g += dy_g . col^T            dcol = W_g^T . dy_g, then col2im into dx.
** Per image, because NCHW holds an image's channels as exactly the [channels, plane] matrix
** a GEMM produces and consumes: the products are written straight into y and dx and dy is read
** in place, with no gather or scatter pass between layouts (which cost more than the wider
** GEMMs of several images at once saved). Images run in parallel (lamp_parallel_for, dealt
** statically), each worker with its own workspaces (sized once, reused across steps) and its
** own partial weight gradient, summed in worker order after.
** With stride 1 the input gradient is computed as a convolution of dy (see plan_transposed).
** The 3x3 / stride 1 / padding 1 convolutions (the small CNN's) skip the columns altogether
** where the backend has a direct kernel for them (lamp_conv_direct, AVX-512): the forward,
** the transposed input gradient and the weight gradient then read the planes themselves,
** sparing im2col's copies and the GEMM's packing of them, which cost as much as the products.
**
** Autocast follows Linear: the GEMMs see x, W, dy and the bias with the values of
** exec->compute_dtype (on the CPU kept widened to fp32, see operand.h) and accumulate in fp32;
** the output is rounded once to the activation dtype after the bias is added. W's operand copy
** made in forward is reused by the backward of the same step; x and dy are converted an image
** at a time inside the workers (under fp32 they are read in place).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/layer.h"
#include "nn/layer_util.h"
#include "nn/operand.h"
#include "tensor/dtype.h"

#define MAX_WORKERS 16

/* What one worker thread owns: its workspaces (sized before the parallel loop) and sums. */
typedef struct conv_worker {
  lamp_tensor *col, *out, *dy, *dx, *grad;
  lamp_tensor *acc;   /* the direct kernel's weight-gradient accumulator (lamp_conv_direct_grad_acc) */
  lamp_tensor *xs;   /* an image of x as an operand, when x is not an operand already */
  double *bias_sums; /* [out] */
  int busy;          /* ran a task in the current pass */
} conv_worker;

typedef struct conv2d {
  lamp_layer base;
  int64_t in, out, k, stride, pad, dil, groups;
  int has_bias;
  lamp_tensor *weight, *bias;   /* views of the weight slab */
  lamp_tensor *gweight, *gbias; /* views of the fp32 gradient slab */
  lamp_operand w_op, b_op;
  lamp_tensor *wt;              /* the flipped, transposed weights of the input-gradient convolution */
  lamp_tensor *wdir, *wdir_t;   /* W and wt per group as [K][16-padded outputs], for lamp_conv_direct */
  conv_worker workers[MAX_WORKERS];
} conv2d;

/* Sizes of one call, from the input shape. */
typedef struct conv_dims {
  size_t n, cin_g, cout_g, k_rows, t_rows, plane_in, plane_out, image_in, image_out;
  lamp_conv_geom geom;  /* of one group */
  lamp_conv_geom tgeom; /* the input gradient as a stride-1 convolution of dy (when `transposed`) */
  int transposed;
  int direct, tdirect;  /* the forward / the transposed input gradient run lamp_conv_direct */
} conv_dims;

/* "Conv2d(16 -> 32, 3x3)" */
static const char *name_of(const conv2d *c, char *buf, size_t size) {
  snprintf(buf, size, "Conv2d(%lld -> %lld, %lldx%lld)", (long long)c->in, (long long)c->out, (long long)c->k,
           (long long)c->k);
  return buf;
}

/* The output size along one axis, or -1 when the window does not fit. */
static int64_t out_size(const conv2d *c, int64_t in) {
  int64_t span = c->dil * (c->k - 1) + 1;
  if (in + 2 * c->pad < span) return -1;
  return (in + 2 * c->pad - span) / c->stride + 1;
}

/*
** With stride 1, the input gradient is itself a convolution: dy padded by dil*(k-1) - pad,
** with the kernel flipped and its in/out roles swapped. That replaces the scatter-add of
** col2im by a copy (im2col of dy) and a GEMM with a longer inner dimension.
*/
static void plan_transposed(const conv2d *c, conv_dims *d) {
  size_t k = (size_t)c->k, dil = (size_t)c->dil, pad = (size_t)c->pad;
  d->transposed = c->stride == 1 && pad <= dil * (k - 1);
  d->t_rows = d->cout_g * k * k;
  d->tgeom = (lamp_conv_geom){.channels = d->cout_g, .height = d->geom.out_h, .width = d->geom.out_w,
                              .kernel_h = k, .kernel_w = k, .stride_h = 1, .stride_w = 1,
                              .pad_h = dil * (k - 1) - pad, .pad_w = dil * (k - 1) - pad,
                              .dilation_h = dil, .dilation_w = dil,
                              .out_h = d->geom.height, .out_w = d->geom.width};
}

static lamp_status check_shape(const conv2d *c, int ndim, const int64_t *in, const char *what, conv_dims *d) {
  char name[64];
  if (ndim != 4 || in[0] < 0 || in[2] <= 0 || in[3] <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be [batch, channels, height, width]",
                      name_of(c, name, sizeof name), what);
  if (in[1] != c->in)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s has %lld channels, expected %lld",
                      name_of(c, name, sizeof name), what, (long long)in[1], (long long)c->in);
  int64_t oh = out_size(c, in[2]), ow = out_size(c, in[3]);
  if (oh <= 0 || ow <= 0)
    return lamp_error(LAMP_ERR_INVALID_ARG,
                      "%s: input %s is smaller than the kernel (%lld with dilation %lld) after padding %lld",
                      name_of(c, name, sizeof name), what, (long long)c->k, (long long)c->dil, (long long)c->pad);
  if (d == NULL) return LAMP_OK;
  size_t g = (size_t)c->groups, k = (size_t)c->k;
  d->n = (size_t)in[0];
  d->cin_g = (size_t)c->in / g;
  d->cout_g = (size_t)c->out / g;
  d->k_rows = d->cin_g * k * k;
  d->plane_in = (size_t)(in[2] * in[3]);
  d->plane_out = (size_t)(oh * ow);
  d->image_in = (size_t)c->in * d->plane_in;
  d->image_out = (size_t)c->out * d->plane_out;
  d->geom = (lamp_conv_geom){.channels = d->cin_g, .height = (size_t)in[2], .width = (size_t)in[3],
                             .kernel_h = k, .kernel_w = k, .stride_h = (size_t)c->stride,
                             .stride_w = (size_t)c->stride, .pad_h = (size_t)c->pad, .pad_w = (size_t)c->pad,
                             .dilation_h = (size_t)c->dil, .dilation_w = (size_t)c->dil,
                             .out_h = (size_t)oh, .out_w = (size_t)ow};
  plan_transposed(c, d);
  d->direct = lamp_conv_direct_supported(LAMP_CPU, &d->geom);
  d->tdirect = d->transposed && lamp_conv_direct_supported(LAMP_CPU, &d->tgeom);
  return LAMP_OK;
}

static lamp_status check_input(const conv2d *c, const lamp_tensor *x, conv_dims *d) {
  char what[128], name[64];
  lamp_tensor_describe(x, what, sizeof what);
  lamp_status st = check_shape(c, x->ndim, x->shape, what, d);
  if (st == LAMP_OK && !lamp_nn_is_activation(x))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: input %s must be a contiguous f32, f16 or bf16 tensor",
                      name_of(c, name, sizeof name), what);
  return st;
}

/* y, dy, dx: contiguous floating point, shaped [n, channels, plane]. */
static lamp_status check_like(const conv2d *c, const lamp_tensor *t, const char *role, size_t n, int64_t channels,
                              size_t plane) {
  char what[128], name[64];
  if (lamp_nn_is_activation(t) && t->ndim == 4 && (size_t)t->shape[0] == n && t->shape[1] == channels &&
      (size_t)(t->shape[2] * t->shape[3]) == plane)
    return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s %s, expected [%zu, %lld, ...] with %zu values per plane",
                    name_of(c, name, sizeof name), role, lamp_tensor_describe(t, what, sizeof what), n,
                    (long long)channels, plane);
}

static lamp_status check_bound(const conv2d *c) {
  char name[64];
  if (c->weight == NULL || (c->has_bias && c->bias == NULL))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: parameters are not bound (build a model first)",
                      name_of(c, name, sizeof name));
  return LAMP_OK;
}

static lamp_status conv_output_shape(const lamp_layer *layer, int ndim, const int64_t *in, int *out_ndim,
                                     int64_t *out) {
  const conv2d *c = (const conv2d *)layer;
  char what[128];
  lamp_nn_shape_text(ndim, in, what, sizeof what);
  lamp_status st = check_shape(c, ndim, in, what, NULL);
  if (st != LAMP_OK) return st;
  *out_ndim = 4;
  out[0] = in[0];
  out[1] = c->out;
  out[2] = out_size(c, in[2]);
  out[3] = out_size(c, in[3]);
  return LAMP_OK;
}

static size_t conv_param_count(const lamp_layer *layer) { return ((const conv2d *)layer)->has_bias ? 2 : 1; }

/* PyTorch's default (kaiming-uniform, a = sqrt(5)): weight and bias U(-1/sqrt(fan_in), ..). */
static lamp_status conv_param_decl(const lamp_layer *layer, size_t i, lamp_param_decl *out, char *name_buf,
                                   size_t name_size) {
  const conv2d *c = (const conv2d *)layer;
  (void)name_buf, (void)name_size;
  if (i >= conv_param_count(layer)) {
    char name[64];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: no parameter %zu", name_of(c, name, sizeof name), i);
  }
  *out = (lamp_param_decl){0};
  out->init = LAMP_INIT_UNIFORM;
  out->bound = 1.0 / sqrt((double)(c->in / c->groups * c->k * c->k));
  if (i == 0) {
    out->name = "weight";
    out->ndim = 4;
    out->shape[0] = c->out;
    out->shape[1] = c->in / c->groups;
    out->shape[2] = out->shape[3] = c->k;
    out->decay = 1;
  } else {
    out->name = "bias";
    out->ndim = 1;
    out->shape[0] = c->out;
  }
  return LAMP_OK;
}

static lamp_status conv_bind(lamp_layer *layer, size_t i, lamp_tensor *weight, lamp_tensor *grad) {
  conv2d *c = (conv2d *)layer;
  char name[64];
  lamp_param_decl d;
  lamp_status st = conv_param_decl(layer, i, &d, NULL, 0);
  if (st != LAMP_OK) return st;
  c->w_op.valid = c->b_op.valid = 0;
  return lamp_nn_bind_param(name_of(c, name, sizeof name), &d, i == 0 ? &c->weight : &c->bias,
                            i == 0 ? &c->gweight : &c->gbias, weight, grad);
}

/* *t holds at least n fp32 workspace elements. */
static lamp_status ensure_work(lamp_tensor **t, lamp_device device, size_t n) {
  int64_t shape[1] = {(int64_t)(n ? n : 1)};
  if (*t != NULL && lamp_tensor_numel(*t) >= n) return LAMP_OK;
  return lamp_tensor_ensure(t, LAMP_F32, device, 1, shape, LAMP_MEM_WORKSPACE);
}

static size_t esize(const lamp_tensor *t) { return lamp_dtype_size(t->dtype); }
static void *at(const lamp_tensor *t, size_t element) { return (char *)lamp_tensor_data(t) + element * esize(t); }

/* The workers of one parallel pass (no more than there are images). */
static size_t worker_count(const lamp_exec *exec, const conv_dims *d) {
  size_t n = lamp_backend_threads(exec->device);
  if (n > MAX_WORKERS) n = MAX_WORKERS;
  if (n > d->n) n = d->n;
  return n ? n : 1;
}

/* One pass's job, shared by its tasks (task s = image s, all groups). */
typedef struct conv_job {
  conv2d *c;
  const lamp_exec *exec;
  const conv_dims *d;
  const float *wd, *bd;            /* operands: W and the bias (compute dtype values, fp32) */
  const lamp_tensor *x;
  lamp_tensor *y;                  /* forward */
  const lamp_tensor *dy;           /* backward: as stored */
  lamp_tensor *dx;                 /* backward, may be NULL */
  int grads;
} conv_job;

/*
** Image s of t (x: `image` elements) as a GEMM operand: in place when t already is one (fp32
** under an fp32 policy), else converted into the worker's buffer. Image by image, so a 16-bit
** policy needs no fp32 copy of whole activations.
*/
static lamp_status image_operand(const conv_job *j, lamp_tensor *buf, const lamp_tensor *t, size_t image, size_t s,
                                 const float **out) {
  if (lamp_operand_in_place(j->exec, t->dtype)) {
    *out = (const float *)lamp_tensor_data(t) + s * image;
    return LAMP_OK;
  }
  *out = lamp_tensor_data(buf);
  return lamp_operand_fill(j->exec, lamp_tensor_data(buf), at(t, s * image), t->dtype, image);
}

/*
** Whether the direct kernels widen x themselves: a 16-bit x already in the compute dtype, whose
** operand is its exact fp32 widening, goes straight into their zero-bordered planes (one pass
** instead of a widened copy that is then copied again).
*/
static int widen_x_in_kernel(const lamp_exec *exec, const conv_dims *d, lamp_dtype t) {
  return d->direct && t != LAMP_F32 && t == exec->compute_dtype && lamp_operand_dtype(exec) == LAMP_F32;
}

static int widen_in_kernel(const conv_job *j) { return widen_x_in_kernel(j->exec, j->d, j->x->dtype); }

/* A 1x1 kernel with stride 1 and no padding: the columns are the input planes themselves. */
static int is_pointwise(const lamp_conv_geom *g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_h == 0 &&
         g->pad_w == 0;
}

/* The columns of one image's group planes x_g (ld image_in): im2col into col, or x_g itself. */
static lamp_status columns(lamp_device dev, float *col, const float *x_g, size_t image, const lamp_conv_geom *g,
                           const float **out) {
  if (is_pointwise(g)) {
    *out = x_g;
    return LAMP_OK;
  }
  *out = col;
  return lamp_im2col(dev, col, g->out_h * g->out_w, x_g, image, 1, g);
}

/*
** The weights of each group, w_g [rows, k_rows], as lamp_conv_direct reads them: transposed to
** [k_rows][width], width = rows rounded up to its block, the padding columns zero.
*/
static lamp_status direct_weights(lamp_tensor **t, const lamp_exec *exec, const float *w, size_t groups, size_t rows,
                                  size_t k_rows) {
  size_t width = lamp_conv_direct_width(rows);
  lamp_status st = ensure_work(t, exec->device, groups * k_rows * width);
  if (st != LAMP_OK) return st;
  float *dst = lamp_tensor_data(*t);
  for (size_t g = 0; g < groups; g++)
    for (size_t r = 0; r < k_rows; r++) {
      float *row = dst + (g * k_rows + r) * width;
      for (size_t o = 0; o < width; o++) row[o] = o < rows ? w[(g * rows + o) * k_rows + r] : 0.0f;
    }
  return LAMP_OK;
}

/* ---- forward ------------------------------------------------------------------------------- */

/* y_g[k][p] += bias[k]: the bias after the product, as a separate rounding (Linear's order). */
static void add_bias_planes(float *y, const float *bias, size_t channels, size_t plane) {
  for (size_t k = 0; k < channels; k++) {
    float b = bias[k];
    float *row = y + k * plane;
    for (size_t p = 0; p < plane; p++) row[p] += b;
  }
}

/*
** Image `s`: per group, im2col and one GEMM out[cout_g, plane] = W_g . col, written straight
** into y's planes (NCHW is [channels, plane] per image, the GEMM's own layout), so no scatter
** pass; a 16-bit y gets the fp32 product from the worker's buffer, rounded once.
*/
static lamp_status forward_task(void *ctx, size_t worker, size_t s) {
  const conv_job *j = ctx;
  const conv_dims *d = j->d;
  conv_worker *w = &j->c->workers[worker];
  lamp_device dev = j->exec->device;
  int direct = j->y->dtype == LAMP_F32, typed = widen_in_kernel(j);
  const float *xs = NULL, *col;
  lamp_status st = typed ? LAMP_OK : image_operand(j, w->xs, j->x, d->image_in, s, &xs);
  for (size_t g = 0; st == LAMP_OK && g < (size_t)j->c->groups; g++) {
    size_t first = s * d->image_out + g * d->cout_g * d->plane_out;
    const float *bias = j->bd != NULL ? j->bd + g * d->cout_g : NULL;
    float *dst = direct ? (float *)lamp_tensor_data(j->y) + first : lamp_tensor_data(w->out);
    if (d->direct) {
      size_t ldw = lamp_conv_direct_width(d->cout_g);
      const float *wg = (const float *)lamp_tensor_data(j->c->wdir) + g * d->k_rows * ldw;
      if (typed)
        st = lamp_conv_direct_typed(dev, dst, d->plane_out, at(j->x, s * d->image_in + g * d->cin_g * d->plane_in),
                                    j->x->dtype, wg, ldw, d->cout_g, &d->geom, lamp_tensor_data(w->col));
      else
        st = lamp_conv_direct(dev, dst, d->plane_out, xs + g * d->cin_g * d->plane_in, wg, ldw, d->cout_g, &d->geom,
                              lamp_tensor_data(w->col));
    } else {
      st = columns(dev, lamp_tensor_data(w->col), xs + g * d->cin_g * d->plane_in, d->image_in, &d->geom, &col);
      if (st == LAMP_OK)
        st = lamp_gemm(dev, 0, 0, d->cout_g, d->plane_out, d->k_rows, 1.0f, j->wd + g * d->cout_g * d->k_rows,
                       LAMP_F32, d->k_rows, col, LAMP_F32, d->plane_out, 0.0f, dst, LAMP_F32, d->plane_out);
    }
    if (st == LAMP_OK && direct && bias != NULL) add_bias_planes(dst, bias, d->cout_g, d->plane_out);
    if (st == LAMP_OK && !direct)
      st = lamp_scatter_planes(dev, at(j->y, first), j->y->dtype, 0, dst, bias, 1, d->cout_g, d->plane_out);
  }
  return st;
}

/* The operands of this step: W and the bias with the compute dtype's values, in fp32. */
static lamp_status forward_operands(conv2d *c, const lamp_exec *exec, int reuse, conv_job *j) {
  const void *p;
  lamp_status st = lamp_operand_get(&c->w_op, exec, c->weight, lamp_tensor_numel(c->weight), reuse, &p);
  j->wd = p;
  j->bd = NULL;
  if (st == LAMP_OK && c->has_bias) {
    st = lamp_operand_get(&c->b_op, exec, c->bias, (size_t)c->out, reuse, &p);
    j->bd = p;
  }
  return st;
}

static lamp_status conv_forward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, lamp_tensor *y) {
  conv2d *c = (conv2d *)layer;
  char name[64];
  conv_dims d;
  lamp_status st = check_bound(c);
  if (st == LAMP_OK) st = check_input(c, x, &d);
  if (st == LAMP_OK) st = check_like(c, y, "output", d.n, c->out, d.plane_out);
  if (st != LAMP_OK) return st;
  if (lamp_operand_dtype(exec) != LAMP_F32)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: 16-bit GEMM operands are not supported on %s",
                      name_of(c, name, sizeof name), lamp_device_name(exec->device));
  c->w_op.valid = c->b_op.valid = 0; /* a new step */
  if (d.n == 0) return LAMP_OK;
  conv_job j = {.c = c, .exec = exec, .d = &d, .x = x, .y = y};
  st = forward_operands(c, exec, 0, &j);
  if (st == LAMP_OK && d.direct) st = direct_weights(&c->wdir, exec, j.wd, (size_t)c->groups, d.cout_g, d.k_rows);
  size_t workers = worker_count(exec, &d);
  size_t col = d.direct ? lamp_conv_direct_work(&d.geom) : is_pointwise(&d.geom) ? 0 : d.k_rows * d.plane_out;
  for (size_t w = 0; st == LAMP_OK && w < workers; w++) {
    st = ensure_work(&c->workers[w].col, exec->device, col);
    if (st == LAMP_OK && y->dtype != LAMP_F32)
      st = ensure_work(&c->workers[w].out, exec->device, d.cout_g * d.plane_out);
    if (st == LAMP_OK && !lamp_operand_in_place(exec, x->dtype) && !widen_x_in_kernel(exec, &d, x->dtype))
      st = ensure_work(&c->workers[w].xs, exec->device, d.image_in);
  }
  if (st == LAMP_OK) st = lamp_parallel_for(exec->device, d.n, forward_task, &j);
  return st;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* W_g [cout_g, cin_g, k, k] -> Wt_g [cin_g, cout_g * k * k] with the kernel flipped. */
static lamp_status flip_weights(conv2d *c, const lamp_exec *exec, const conv_dims *d, const float *w) {
  size_t kk = (size_t)(c->k * c->k), g_n = (size_t)c->groups;
  lamp_status st = ensure_work(&c->wt, exec->device, lamp_tensor_numel(c->weight));
  if (st != LAMP_OK) return st;
  float *wt = lamp_tensor_data(c->wt);
  for (size_t g = 0; g < g_n; g++)
    for (size_t o = 0; o < d->cout_g; o++)
      for (size_t i = 0; i < d->cin_g; i++)
        for (size_t t = 0; t < kk; t++)
          wt[g * d->cin_g * d->t_rows + i * d->t_rows + o * kk + (kk - 1 - t)] =
              w[((g * d->cout_g + o) * d->cin_g + i) * kk + t];
  return LAMP_OK;
}

/*
** dy of image s, all channels [out, plane], as a GEMM operand (compute values, fp32): dy itself
** under fp32, else widened into the worker's buffer. The bias sums come from the stored values,
** before any rounding to the compute dtype.
*/
static lamp_status dy_operand(const conv_job *j, conv_worker *w, size_t s, const float **out) {
  const conv_dims *d = j->d;
  const lamp_exec *exec = j->exec;
  size_t first = s * d->image_out, out_ch = (size_t)j->c->out;
  int in_place = lamp_operand_in_place(exec, j->dy->dtype);
  float *buf = in_place ? NULL : lamp_tensor_data(w->dy);
  lamp_status st = LAMP_OK;
  if (in_place) *out = (const float *)lamp_tensor_data(j->dy) + first;
  else {
    st = lamp_convert(exec->device, buf, LAMP_F32, at(j->dy, first), j->dy->dtype, d->image_out);
    *out = buf;
  }
  if (st == LAMP_OK && j->grads && j->c->has_bias) {
    double sums[64];
    for (size_t c0 = 0; st == LAMP_OK && c0 < out_ch; c0 += 64) {
      size_t len = out_ch - c0 < 64 ? out_ch - c0 : 64;
      st = lamp_channel_reduce(exec->device, *out + c0 * d->plane_out, LAMP_F32, NULL, NULL, LAMP_F32, NULL, 1, len,
                               d->plane_out, sums, NULL);
      for (size_t k = 0; k < len; k++) w->bias_sums[c0 + k] += sums[k];
    }
  }
  if (st == LAMP_OK && !in_place && j->dy->dtype != exec->compute_dtype && exec->compute_dtype != LAMP_F32)
    st = lamp_round_through(exec->device, buf, buf, exec->compute_dtype, d->image_out);
  return st;
}

/* dx of image s, group g: the transposed convolution of dy, or W_g^T . dy_g folded by col2im,
   written straight into dx's planes when dx is fp32. */
static lamp_status input_gradient(const conv_job *j, conv_worker *w, size_t s, size_t g, const float *dys) {
  const conv_dims *d = j->d;
  lamp_device dev = j->exec->device;
  size_t first = s * d->image_in + g * d->cin_g * d->plane_in, n = d->cin_g * d->plane_in;
  int direct = j->dx->dtype == LAMP_F32;
  float *col = lamp_tensor_data(w->col);
  const float *dy_g = dys + g * d->cout_g * d->plane_out;
  lamp_status st;
  if (d->transposed) {
    const float *wt_g = (const float *)lamp_tensor_data(j->c->wt) + g * d->cin_g * d->t_rows;
    float *dst = direct ? (float *)lamp_tensor_data(j->dx) + first : lamp_tensor_data(w->out);
    const float *tcol;
    if (d->tdirect) {
      size_t ldw = lamp_conv_direct_width(d->cin_g);
      st = lamp_conv_direct(dev, dst, d->plane_in, dy_g,
                            (const float *)lamp_tensor_data(j->c->wdir_t) + g * d->t_rows * ldw, ldw, d->cin_g,
                            &d->tgeom, col);
    } else {
      st = columns(dev, col, dy_g, d->image_out, &d->tgeom, &tcol);
      if (st == LAMP_OK)
        st = lamp_gemm(dev, 0, 0, d->cin_g, d->plane_in, d->t_rows, 1.0f, wt_g, LAMP_F32, d->t_rows, tcol,
                       LAMP_F32, d->plane_in, 0.0f, dst, LAMP_F32, d->plane_in);
    }
    if (st == LAMP_OK && !direct) st = lamp_convert(dev, at(j->dx, first), j->dx->dtype, dst, LAMP_F32, n);
    return st;
  }
  float *dst = direct ? (float *)lamp_tensor_data(j->dx) + first : lamp_tensor_data(w->dx);
  st = lamp_gemm(dev, 1, 0, d->k_rows, d->plane_out, d->cout_g, 1.0f, j->wd + g * d->cout_g * d->k_rows, LAMP_F32,
                 d->k_rows, dy_g, LAMP_F32, d->plane_out, 0.0f, col, LAMP_F32, d->plane_out);
  if (st == LAMP_OK) { /* col2im adds: the planes start at zero */
    memset(dst, 0, n * sizeof *dst);
    st = lamp_col2im(dev, dst, d->image_in, col, d->plane_out, 1, &d->geom);
  }
  if (st == LAMP_OK && !direct) st = lamp_convert(dev, at(j->dx, first), j->dx->dtype, dst, LAMP_F32, n);
  return st;
}

/* Image `s`: this worker's dW partial sums (dW_g (+)= dy_g . col^T), and dx of the image. */
static lamp_status backward_task(void *ctx, size_t worker, size_t s) {
  const conv_job *j = ctx;
  const conv_dims *d = j->d;
  conv_worker *w = &j->c->workers[worker];
  lamp_device dev = j->exec->device;
  const float *xs = NULL, *dys = NULL, *col;
  lamp_status st = LAMP_OK;
  int typed = widen_in_kernel(j);
  if (j->grads && !typed) st = image_operand(j, w->xs, j->x, d->image_in, s, &xs);
  if (st == LAMP_OK) st = dy_operand(j, w, s, &dys);
  for (size_t g = 0; st == LAMP_OK && g < (size_t)j->c->groups; g++) {
    float *gw = j->grads ? (float *)lamp_tensor_data(w->grad) + g * d->cout_g * d->k_rows : NULL;
    float *acc = j->grads && d->direct
                     ? (float *)lamp_tensor_data(w->acc) + g * lamp_conv_direct_grad_acc(&d->geom, d->cout_g)
                     : NULL;
    if (j->grads && typed) {
      st = lamp_conv_direct_grad_typed(dev, acc, at(j->x, s * d->image_in + g * d->cin_g * d->plane_in), j->x->dtype,
                                       dys + g * d->cout_g * d->plane_out, d->cout_g, &d->geom,
                                       lamp_tensor_data(w->col), w->busy);
    } else if (j->grads && d->direct) {
      st = lamp_conv_direct_grad(dev, acc, xs + g * d->cin_g * d->plane_in, dys + g * d->cout_g * d->plane_out,
                                 d->cout_g, &d->geom, lamp_tensor_data(w->col), w->busy);
    } else if (j->grads) {
      st = columns(dev, lamp_tensor_data(w->col), xs + g * d->cin_g * d->plane_in, d->image_in, &d->geom, &col);
      if (st == LAMP_OK)
        st = lamp_gemm(dev, 0, 1, d->cout_g, d->k_rows, d->plane_out, 1.0f, dys + g * d->cout_g * d->plane_out,
                       LAMP_F32, d->plane_out, col, LAMP_F32, d->plane_out, w->busy ? 1.0f : 0.0f, gw, LAMP_F32,
                       d->k_rows);
    }
    if (st == LAMP_OK && j->dx != NULL) st = input_gradient(j, w, s, g, dys);
  }
  w->busy = 1;
  return st;
}

/* g (+)= v in exec->grad_dtype (fp32: exact; 16-bit: the sum rounded once, then added). */
static lamp_status add_grad(const lamp_exec *exec, float *g, const float *v, size_t n) {
  if (exec->grad_dtype == LAMP_F32) {
    if (exec->overwrite_grads) {
      memcpy(g, v, n * sizeof *g);
      return LAMP_OK;
    }
    return lamp_axpy(exec->device, g, v, n, 1.0f);
  }
  if (exec->overwrite_grads) return lamp_round_through(exec->device, g, v, exec->grad_dtype, n);
  return lamp_accumulate_rounded(exec->device, g, v, exec->grad_dtype, n);
}

/* Worker w's direct-kernel accumulators moved into sum (added when `accumulate`), group by group. */
static lamp_status add_direct_sums(conv2d *c, const lamp_exec *exec, const conv_dims *d, size_t w, float *sum,
                                   int accumulate) {
  size_t per_group = lamp_conv_direct_grad_acc(&d->geom, d->cout_g);
  const float *acc = lamp_tensor_data(c->workers[w].acc);
  lamp_status st = LAMP_OK;
  for (size_t g = 0; st == LAMP_OK && g < (size_t)c->groups; g++)
    st = lamp_conv_direct_grad_reduce(exec->device, sum + g * d->cout_g * d->k_rows, d->k_rows, acc + g * per_group,
                                      d->cout_g, d->k_rows, accumulate);
  return st;
}

/* The workers' partial sums, added in worker order into worker 0's buffer, then into the slab. */
static lamp_status finish_grads(conv2d *c, const lamp_exec *exec, const conv_dims *d, size_t workers) {
  size_t nw = lamp_tensor_numel(c->gweight), out = (size_t)c->out;
  float *sum = lamp_tensor_data(c->workers[0].grad);
  lamp_status st = LAMP_OK;
  if (!c->workers[0].busy) st = lamp_fill(exec->device, sum, LAMP_F32, nw, 0.0f); /* an empty batch */
  /* the other paths wrote worker 0's sums into its buffer already */
  for (size_t w = d->direct ? 0 : 1; st == LAMP_OK && w < workers; w++) {
    if (!c->workers[w].busy) continue;
    if (d->direct) st = add_direct_sums(c, exec, d, w, sum, w > 0);
    else st = lamp_axpy(exec->device, sum, lamp_tensor_data(c->workers[w].grad), nw, 1.0f);
  }
  if (st == LAMP_OK) st = add_grad(exec, lamp_tensor_data(c->gweight), sum, nw);
  if (st != LAMP_OK || !c->has_bias) return st;
  float sums[256];
  for (size_t o0 = 0; st == LAMP_OK && o0 < out; o0 += 256) {
    size_t len = out - o0 < 256 ? out - o0 : 256;
    for (size_t k = 0; k < len; k++) {
      double v = 0.0;
      for (size_t w = 0; w < workers; w++) v += c->workers[w].bias_sums[o0 + k];
      sums[k] = (float)v;
    }
    st = add_grad(exec, (float *)lamp_tensor_data(c->gbias) + o0, sums, len);
  }
  return st;
}

/* Workspaces of every worker, sized in this thread before the parallel loop. */
static lamp_status prepare_workers(conv2d *c, const lamp_exec *exec, const conv_dims *d, size_t workers,
                                   const lamp_tensor *x, const lamp_tensor *dy, const lamp_tensor *dx, int grads) {
  size_t col = !grads                     ? 0
               : d->direct                ? lamp_conv_direct_grad_work(&d->geom, d->cout_g)
               : is_pointwise(&d->geom)   ? 0
                                          : d->k_rows * d->plane_out;
  size_t out = 0, dxw = 0;
  if (dx != NULL && d->transposed) {
    size_t t = d->tdirect ? lamp_conv_direct_work(&d->tgeom) : is_pointwise(&d->tgeom) ? 0 : d->t_rows * d->plane_in;
    if (t > col) col = t;
    if (dx->dtype != LAMP_F32) out = d->cin_g * d->plane_in;
  } else if (dx != NULL) {
    if (d->k_rows * d->plane_out > col) col = d->k_rows * d->plane_out;
    if (dx->dtype != LAMP_F32) dxw = d->cin_g * d->plane_in;
  }
  lamp_status st = LAMP_OK;
  for (size_t w = 0; st == LAMP_OK && w < workers; w++) {
    conv_worker *cw = &c->workers[w];
    cw->busy = 0;
    st = ensure_work(&cw->col, exec->device, col);
    if (st == LAMP_OK && !lamp_operand_in_place(exec, dy->dtype)) st = ensure_work(&cw->dy, exec->device, d->image_out);
    if (st == LAMP_OK && out > 0) st = ensure_work(&cw->out, exec->device, out);
    if (st == LAMP_OK && dxw > 0) st = ensure_work(&cw->dx, exec->device, dxw);
    if (st == LAMP_OK && grads) st = ensure_work(&cw->grad, exec->device, lamp_tensor_numel(c->gweight));
    if (st == LAMP_OK && grads && d->direct)
      st = ensure_work(&cw->acc, exec->device, (size_t)c->groups * lamp_conv_direct_grad_acc(&d->geom, d->cout_g));
    if (st == LAMP_OK && grads && !lamp_operand_in_place(exec, x->dtype) && !widen_x_in_kernel(exec, d, x->dtype))
      st = ensure_work(&cw->xs, exec->device, d->image_in);
    if (st == LAMP_OK && grads && c->has_bias) memset(cw->bias_sums, 0, (size_t)c->out * sizeof *cw->bias_sums);
  }
  return st;
}

/*
** The backward pass over all images: dx when dx is not NULL, the parameter gradients when
** `grads`. One walk does both when both are wanted (the combined backward), so dy's
** operand is made once per image.
*/
static lamp_status backward_pass(conv2d *c, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *dy,
                                 lamp_tensor *dx, int grads) {
  conv_dims d;
  lamp_status st = check_bound(c);
  if (st == LAMP_OK) st = check_input(c, x, &d);
  if (st == LAMP_OK) st = check_like(c, dy, "output gradient", d.n, c->out, d.plane_out);
  if (st == LAMP_OK && dx != NULL) st = check_like(c, dx, "input gradient", d.n, c->in, d.plane_in);
  if (st != LAMP_OK) return st;
  conv_job j = {.c = c, .exec = exec, .d = &d, .x = x, .dy = dy, .dx = dx, .grads = grads};
  st = forward_operands(c, exec, 1, &j);
  if (st == LAMP_OK && dx != NULL && d.transposed) st = flip_weights(c, exec, &d, j.wd);
  if (st == LAMP_OK && dx != NULL && d.tdirect)
    st = direct_weights(&c->wdir_t, exec, lamp_tensor_data(c->wt), (size_t)c->groups, d.cin_g, d.t_rows);
  size_t workers = worker_count(exec, &d);
  if (st == LAMP_OK) st = prepare_workers(c, exec, &d, workers, x, dy, dx, grads);
  if (st == LAMP_OK && d.n > 0) st = lamp_parallel_for(exec->device, d.n, backward_task, &j);
  if (st == LAMP_OK && grads) st = finish_grads(c, exec, &d, workers);
  return st;
}

static lamp_status conv_backward_input(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                       const lamp_tensor *y, const lamp_tensor *dy, lamp_tensor *dx) {
  (void)y;
  if (dx == NULL) return LAMP_OK;
  return backward_pass((conv2d *)layer, exec, x, dy, dx, 0);
}

static lamp_status conv_accumulate_grads(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x,
                                         const lamp_tensor *dy) {
  return backward_pass((conv2d *)layer, exec, x, dy, NULL, 1);
}

/* Both in one walk; the gradients are announced once final (see layer.h). */
static lamp_status conv_backward(lamp_layer *layer, const lamp_exec *exec, const lamp_tensor *x, const lamp_tensor *y,
                                 const lamp_tensor *dy, lamp_tensor *dx, size_t first_param) {
  (void)y;
  lamp_status st = backward_pass((conv2d *)layer, exec, x, dy, dx, 1);
  if (st == LAMP_OK && exec->grads_ready != NULL) exec->grads_ready(exec->grads_ready_ctx, first_param);
  return st;
}

static void conv_describe(const lamp_layer *layer, char *buf, size_t size) {
  const conv2d *c = (const conv2d *)layer;
  char name[64];
  int n = snprintf(buf, size, "%s", name_of(c, name, sizeof name));
  /* the options that differ from the defaults, inside the parentheses */
  char extra[160] = "";
  size_t used = 0;
  if (c->stride != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", stride %lld", (long long)c->stride);
  if (c->pad != 0) used += (size_t)snprintf(extra + used, sizeof extra - used, ", padding %lld", (long long)c->pad);
  if (c->dil != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", dilation %lld", (long long)c->dil);
  if (c->groups != 1) used += (size_t)snprintf(extra + used, sizeof extra - used, ", groups %lld", (long long)c->groups);
  if (!c->has_bias) snprintf(extra + used, sizeof extra - used, ", no bias");
  if (n > 0 && (size_t)n < size) snprintf(buf + n - 1, size - (size_t)n + 1, "%s)", extra);
}

static void conv_destroy(lamp_layer *layer) {
  conv2d *c = (conv2d *)layer;
  lamp_tensor *ts[] = {c->weight, c->bias, c->gweight, c->gbias, c->wt, c->wdir, c->wdir_t};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lamp_tensor_release(ts[i]);
  for (size_t w = 0; w < MAX_WORKERS; w++) {
    conv_worker *cw = &c->workers[w];
    lamp_tensor *wts[] = {cw->col, cw->out, cw->dy, cw->dx, cw->grad, cw->acc, cw->xs};
    for (size_t i = 0; i < sizeof wts / sizeof wts[0]; i++) lamp_tensor_release(wts[i]);
  }
  free(c->workers[0].bias_sums);
  lamp_operand_free(&c->w_op);
  lamp_operand_free(&c->b_op);
  free(c);
}

static const lamp_layer_ops conv2d_ops = {
    .type = "Conv2d",
    .output_shape = conv_output_shape,
    .param_count = conv_param_count,
    .param_decl = conv_param_decl,
    .bind = conv_bind,
    .forward = conv_forward,
    .backward_input = conv_backward_input,
    .accumulate_grads = conv_accumulate_grads,
    .backward = conv_backward,
    .describe = conv_describe,
    .destroy = conv_destroy,
};

static lamp_status check_options(int64_t in, int64_t out, int64_t k, const lamp_conv2d_options *o) {
  char name[96];
  snprintf(name, sizeof name, "Conv2d(%lld -> %lld, %lldx%lld)", (long long)in, (long long)out, (long long)k,
           (long long)k);
  if (in <= 0 || out <= 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: channel counts must be positive", name);
  if (k <= 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel size must be positive", name);
  if (o->stride <= 0 || o->dilation <= 0 || o->groups <= 0 || o->padding < 0)
    return lamp_error(LAMP_ERR_INVALID_ARG,
                      "%s: stride %lld, dilation %lld and groups %lld must be positive, padding %lld not negative",
                      name, (long long)o->stride, (long long)o->dilation, (long long)o->groups, (long long)o->padding);
  if (in % o->groups != 0 || out % o->groups != 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: groups %lld must divide both channel counts", name,
                      (long long)o->groups);
  if (k > 4096 || o->stride > 4096 || o->dilation > 4096 || o->padding > 4096)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride, dilation and padding must be at most 4096", name);
  return LAMP_OK;
}

lamp_status lamp_conv2d_new(lamp_layer **out, int64_t in_channels, int64_t out_channels, int64_t kernel,
                            const lamp_conv2d_options *options) {
  *out = NULL;
  lamp_conv2d_options o = options != NULL ? *options : (lamp_conv2d_options){0};
  if (o.stride == 0) o.stride = 1;
  if (o.dilation == 0) o.dilation = 1;
  if (o.groups == 0) o.groups = 1;
  lamp_status st = check_options(in_channels, out_channels, kernel, &o);
  if (st != LAMP_OK) return st;
  conv2d *c = calloc(1, sizeof *c);
  double *sums = calloc((size_t)out_channels * MAX_WORKERS, sizeof *sums); /* one row per worker */
  if (c == NULL || sums == NULL) {
    free(c);
    free(sums);
    return lamp_error(LAMP_ERR_SYSTEM, "Conv2d: out of memory");
  }
  for (size_t w = 0; w < MAX_WORKERS; w++) c->workers[w].bias_sums = sums + w * (size_t)out_channels;
  c->base.ops = &conv2d_ops;
  c->base.refcount = 1;
  c->in = in_channels;
  c->out = out_channels;
  c->k = kernel;
  c->stride = o.stride;
  c->pad = o.padding;
  c->dil = o.dilation;
  c->groups = o.groups;
  c->has_bias = !o.no_bias;
  *out = &c->base;
  return LAMP_OK;
}
