/*
** Convolution on the CPU (the coarse operation of backend.h), NCHW.
**
** Each image and group is one GEMM: im2col lays the receptive fields of the image out as
** columns [K = in/groups * k * k, out_h * out_w], and
**     y_g [out/groups, plane] = W_g [out/groups, K] . col
**     dW_g += dy_g . col^T            dcol = W_g^T . dy_g, then col2im into dx.
** Per image, because NCHW holds an image's channels as exactly the [channels, plane] matrix
** a GEMM produces and consumes: the products are written straight into y and dx and dy is read
** in place, with no gather or scatter pass between layouts (which cost more than the wider
** GEMMs of several images at once saved). Images run in parallel (lamp_cpu_parallel_for, dealt
** statically), each worker with its own workspaces (sized once, kept in the plan, reused across
** steps) and its own partial weight gradient, summed in worker order after.
** With stride 1 the input gradient is computed as a convolution of dy (see plan_transposed).
** The 3x3 / stride 1 / padding 1 convolutions (the small CNN's) skip the columns altogether
** where the CPU has AVX-512 or AVX2 with FMA (conv_direct.c): the forward, the transposed input
** gradient and the weight gradient then read the planes themselves, sparing im2col's copies and
** the GEMM's packing of them, which cost as much as the products. In bf16, where the CPU's
** AVX512_BF16 dot product is fast (AMD's), the forward, the transposed input gradient and the
** weight gradient read x and dy as stored and multiply bf16 pairs (lamp_cpu_conv_direct_bf16_dot),
** the weights paired once per pass; dy is not widened at all.
**
** Operands: W and the bias arrive as fp32 holding the compute dtype's values (this backend has
** no 16-bit GEMM); x and dy are made so an image at a time inside the workers (under fp32 they
** are read in place), so a 16-bit policy needs no fp32 copy of whole activations.
*/
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

/* What one worker thread owns: its workspaces (sized before the parallel loop) and sums. */
typedef struct conv_worker {
  lamp_tensor *col, *out, *dy, *dx, *grad;
  lamp_tensor *acc;  /* the direct kernel's weight-gradient accumulator */
  lamp_tensor *xs;   /* an image of x as an operand, when x is not an operand already */
  double *bias_sums; /* [out] */
  int busy;          /* ran a task in the current pass */
} conv_worker;

/* One layer's state across calls. */
typedef struct conv_plan {
  size_t out_channels; /* what bias_sums were sized for */
  lamp_tensor *wt;            /* the flipped, transposed weights of the input-gradient convolution */
  lamp_tensor *wdir, *wdir_t; /* W and wt per group as [K][16-padded outputs], for the direct kernel */
  lamp_tensor *wpair, *wpair_t; /* the same as the bf16 pair kernel's weight pairs */
  lamp_conv_dnnl *dnnl;         /* oneDNN's primitives, where they run this layer in bf16 */
  conv_worker workers[LAMP_CPU_MAX_WORKERS];
} conv_plan;

/* Sizes of one call. */
typedef struct conv_dims {
  size_t n, groups, cout, cin_g, cout_g, kk, k_rows, t_rows, plane_in, plane_out, image_in, image_out;
  lamp_conv_geom geom;  /* of one group */
  lamp_conv_geom tgeom; /* the input gradient as a stride-1 convolution of dy (when `transposed`) */
  int transposed;
  int direct, tdirect; /* the forward / the transposed input gradient run the direct kernel */
} conv_dims;

/*
** With stride 1, the input gradient is itself a convolution: dy padded by dil*(k-1) - pad,
** with the kernel flipped and its in/out roles swapped. That replaces the scatter-add of
** col2im by a copy (im2col of dy) and a GEMM with a longer inner dimension.
*/
static void plan_transposed(const lamp_conv2d_shape *s, conv_dims *d) {
  size_t k = s->kernel, dil = s->dilation, pad = s->padding;
  d->transposed = s->stride == 1 && pad <= dil * (k - 1);
  d->t_rows = d->cout_g * k * k;
  d->tgeom = (lamp_conv_geom){.channels = d->cout_g, .height = d->geom.out_h, .width = d->geom.out_w,
                              .kernel_h = k, .kernel_w = k, .stride_h = 1, .stride_w = 1,
                              .pad_h = dil * (k - 1) - pad, .pad_w = dil * (k - 1) - pad,
                              .dilation_h = dil, .dilation_w = dil,
                              .out_h = d->geom.height, .out_w = d->geom.width};
}

static lamp_status dims_of(const lamp_conv2d_shape *s, conv_dims *d) {
  if (s->groups == 0 || s->in_channels % s->groups || s->out_channels % s->groups || s->kernel == 0 ||
      s->stride == 0 || s->dilation == 0 || s->out_h == 0 || s->out_w == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "conv2d: inconsistent shape (in %zu, out %zu, groups %zu, kernel %zu)",
                      s->in_channels, s->out_channels, s->groups, s->kernel);
  size_t k = s->kernel;
  d->n = s->batch;
  d->groups = s->groups;
  d->cout = s->out_channels;
  d->cin_g = s->in_channels / s->groups;
  d->cout_g = s->out_channels / s->groups;
  d->kk = k * k;
  d->k_rows = d->cin_g * k * k;
  d->plane_in = s->height * s->width;
  d->plane_out = s->out_h * s->out_w;
  d->image_in = s->in_channels * d->plane_in;
  d->image_out = s->out_channels * d->plane_out;
  d->geom = (lamp_conv_geom){.channels = d->cin_g, .height = s->height, .width = s->width, .kernel_h = k,
                             .kernel_w = k, .stride_h = s->stride, .stride_w = s->stride, .pad_h = s->padding,
                             .pad_w = s->padding, .dilation_h = s->dilation, .dilation_w = s->dilation,
                             .out_h = s->out_h, .out_w = s->out_w};
  plan_transposed(s, d);
  d->direct = lamp_cpu_conv_direct_supported(&d->geom);
  d->tdirect = d->transposed && lamp_cpu_conv_direct_supported(&d->tgeom);
  return LAMP_OK;
}

/* The plan of this layer, made on its first call. */
static lamp_status plan_of(void **slot, size_t out_channels, conv_plan **out) {
  conv_plan *p = *slot;
  if (p != NULL && p->out_channels != out_channels)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "conv2d: a plan made for %zu output channels used with %zu",
                      p->out_channels, out_channels);
  if (p == NULL) {
    p = calloc(1, sizeof *p);
    double *sums = calloc(out_channels * LAMP_CPU_MAX_WORKERS, sizeof *sums); /* one row per worker */
    if (p == NULL || sums == NULL) {
      free(p);
      free(sums);
      return lamp_error(LAMP_ERR_SYSTEM, "conv2d: out of memory for a plan");
    }
    p->out_channels = out_channels;
    for (size_t w = 0; w < LAMP_CPU_MAX_WORKERS; w++) p->workers[w].bias_sums = sums + w * out_channels;
    *slot = p;
  }
  *out = p;
  return LAMP_OK;
}

void lamp_cpu_conv2d_plan_free(void *plan) {
  conv_plan *p = plan;
  if (p == NULL) return;
  lamp_tensor *ts[] = {p->wt, p->wdir, p->wdir_t, p->wpair, p->wpair_t};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lamp_tensor_release(ts[i]);
  for (size_t w = 0; w < LAMP_CPU_MAX_WORKERS; w++) {
    conv_worker *cw = &p->workers[w];
    lamp_tensor *wts[] = {cw->col, cw->out, cw->dy, cw->dx, cw->grad, cw->acc, cw->xs};
    for (size_t i = 0; i < sizeof wts / sizeof wts[0]; i++) lamp_tensor_release(wts[i]);
  }
  lamp_cpu_conv_dnnl_free(p->dnnl);
  free(p->workers[0].bias_sums);
  free(p);
}

const char *lamp_cpu_conv2d_plan_engine(const void *plan) {
  const conv_plan *p = plan;
  return p != NULL ? lamp_cpu_conv_dnnl_impl(p->dnnl) : NULL;
}

/* *t holds at least n fp32 workspace elements. */
static lamp_status ensure_work(lamp_tensor **t, size_t n) {
  int64_t shape[1] = {(int64_t)(n ? n : 1)};
  if (*t != NULL && lamp_tensor_numel(*t) >= n) return LAMP_OK;
  return lamp_tensor_ensure(t, LAMP_F32, LAMP_CPU, 1, shape, LAMP_MEM_WORKSPACE);
}

static float *f32(const lamp_tensor *t) { return lamp_tensor_data(t); }
static const void *at(const void *data, lamp_dtype dtype, size_t element) {
  return (const char *)data + element * lamp_dtype_size(dtype);
}

/* The workers of one parallel pass (no more than there are images). */
static size_t worker_count(const conv_dims *d) {
  size_t n = lamp_cpu_threads();
  if (n > LAMP_CPU_MAX_WORKERS) n = LAMP_CPU_MAX_WORKERS;
  if (n > d->n) n = d->n;
  return n ? n : 1;
}

/* ---- operands ------------------------------------------------------------------------------ */

/* A tensor of this dtype is a GEMM operand as it is (fp32 with fp32 values). */
static int in_place(lamp_dtype compute, lamp_dtype dtype) { return dtype == compute && dtype == LAMP_F32; }

/* dst = n values of src rounded to the compute dtype, widened to fp32: one conversion when src is
   in the compute dtype already, else a widening and a rounding. */
static lamp_status operand_fill(float *dst, const void *src, lamp_dtype src_dtype, lamp_dtype compute, size_t n) {
  if (src_dtype == compute) return lamp_cpu_convert(dst, LAMP_F32, src, src_dtype, n);
  if (src_dtype != LAMP_F32) {
    lamp_status st = lamp_cpu_convert(dst, LAMP_F32, src, src_dtype, n);
    if (st != LAMP_OK) return st;
    src = dst;
  }
  return lamp_cpu_round_through(dst, src, compute, n);
}

/* One pass's job, shared by its tasks (task s = image s, all groups). */
typedef struct conv_job {
  conv_plan *p;
  const lamp_conv2d_args *a;
  const conv_dims *d;
  int grads;
} conv_job;

/* Image s of t (`image` elements each) as an operand: in place, or converted into buf. */
static lamp_status image_operand(const conv_job *j, lamp_tensor *buf, const void *t, lamp_dtype dtype, size_t image,
                                 size_t s, const float **out) {
  if (in_place(j->a->compute, dtype)) {
    *out = (const float *)t + s * image;
    return LAMP_OK;
  }
  *out = f32(buf);
  return operand_fill(f32(buf), at(t, dtype, s * image), dtype, j->a->compute, image);
}

/*
** Whether the direct kernels widen x themselves: a 16-bit x already in the compute dtype, whose
** operand is its exact fp32 widening, goes straight into their planes (one pass instead of a
** widened copy that is then copied again).
*/
static int widen_x_in_kernel(const lamp_conv2d_args *a, const conv_dims *d) {
  return d->direct && a->x_dtype != LAMP_F32 && a->x_dtype == a->compute;
}

/* A 1x1 kernel with stride 1 and no padding: the columns are the input planes themselves. */
static int is_pointwise(const lamp_conv_geom *g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_h == 0 &&
         g->pad_w == 0;
}

/* The columns of one image's group planes x_g (ld image_in): im2col into col, or x_g itself. */
static lamp_status columns(float *col, const float *x_g, size_t image, const lamp_conv_geom *g, const float **out) {
  if (is_pointwise(g)) {
    *out = x_g;
    return LAMP_OK;
  }
  *out = col;
  return lamp_cpu_im2col(col, g->out_h * g->out_w, x_g, image, 1, g);
}

/*
** The weights of each group, w_g [rows, k_rows], as the direct kernel reads them: transposed to
** [k_rows][width], width = rows rounded up to its block, the padding columns zero.
*/
static lamp_status direct_weights(lamp_tensor **t, const float *w, size_t groups, size_t rows, size_t k_rows) {
  size_t width = lamp_cpu_conv_direct_width(rows);
  lamp_status st = ensure_work(t, groups * k_rows * width);
  if (st != LAMP_OK) return st;
  float *dst = f32(*t);
  for (size_t g = 0; g < groups; g++)
    for (size_t r = 0; r < k_rows; r++) {
      float *row = dst + (g * k_rows + r) * width;
      for (size_t o = 0; o < width; o++) row[o] = o < rows ? w[(g * rows + o) * k_rows + r] : 0.0f;
    }
  return LAMP_OK;
}

/*
** Whether the direct kernel multiplies bf16 pairs for an operand stored as `stored` (x in the
** forward, dy in the input gradient): stored in bf16, the compute dtype, where the CPU's pair
** kernel is chosen (lamp_cpu_conv_direct_bf16_dot).
*/
static int pairs_for(const lamp_conv2d_args *a, lamp_dtype stored) {
  return stored == LAMP_BF16 && a->compute == LAMP_BF16 && lamp_cpu_conv_direct_bf16_dot();
}

/* The input gradient runs the pair kernel on dy as stored. */
static int pair_input_gradient(const lamp_conv2d_args *a, const conv_dims *d) {
  return d->transposed && d->tdirect && pairs_for(a, a->dy_dtype);
}

/* The direct kernel's weights of each group (direct_weights) as bf16 pairs, once per pass. */
static lamp_status paired_weights(lamp_tensor **t, const lamp_tensor *wdir, size_t groups, size_t rows,
                                  size_t k_rows, const lamp_conv_geom *g) {
  size_t width = lamp_cpu_conv_direct_width(rows), per_group = lamp_cpu_conv_direct_pairs(g, rows);
  lamp_status st = ensure_work(t, groups * per_group); /* uint32 pairs in a float-sized slot each */
  uint32_t *dst = st == LAMP_OK ? lamp_tensor_data(*t) : NULL;
  for (size_t gi = 0; st == LAMP_OK && gi < groups; gi++)
    st = lamp_cpu_conv_direct_pair_weights(dst + gi * per_group, f32(wdir) + gi * k_rows * width, width, rows, g);
  return st;
}

static lamp_status check_args(const char *fn, const lamp_conv2d_args *a, conv_dims *d) {
  lamp_status st = dims_of(&a->shape, d);
  if (st == LAMP_OK && a->operand_dtype != LAMP_F32)
    st = lamp_error(LAMP_ERR_UNSUPPORTED, "%s: 16-bit GEMM operands (%s) are not supported on cpu", fn,
                    lamp_dtype_name(a->operand_dtype));
  if (st == LAMP_OK) st = lamp_cpu_check_float(fn, "x", a->x_dtype);
  if (st == LAMP_OK) st = lamp_cpu_check_float(fn, "compute", a->compute);
  return st;
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
  const lamp_conv2d_args *a = j->a;
  conv_worker *w = &j->p->workers[worker];
  int direct = a->y_dtype == LAMP_F32, typed = widen_x_in_kernel(a, d);
  const float *xs = NULL, *col, *wd = a->weight, *bd = a->bias;
  lamp_status st = typed ? LAMP_OK : image_operand(j, w->xs, a->x, a->x_dtype, d->image_in, s, &xs);
  for (size_t g = 0; st == LAMP_OK && g < d->groups; g++) {
    size_t first = s * d->image_out + g * d->cout_g * d->plane_out;
    const float *bias = bd != NULL ? bd + g * d->cout_g : NULL;
    float *dst = direct ? (float *)a->y + first : f32(w->out);
    if (d->direct) {
      size_t ldw = lamp_cpu_conv_direct_width(d->cout_g);
      const float *wg = f32(j->p->wdir) + g * d->k_rows * ldw;
      if (typed && pairs_for(a, a->x_dtype))
        st = lamp_cpu_conv_direct_bf16(dst, d->plane_out,
                                       at(a->x, a->x_dtype, s * d->image_in + g * d->cin_g * d->plane_in),
                                       (const uint32_t *)lamp_tensor_data(j->p->wpair) +
                                           g * lamp_cpu_conv_direct_pairs(&d->geom, d->cout_g),
                                       d->cout_g, &d->geom, f32(w->col));
      else if (typed)
        st = lamp_cpu_conv_direct_typed(dst, d->plane_out, at(a->x, a->x_dtype, s * d->image_in + g * d->cin_g * d->plane_in),
                                        a->x_dtype, wg, ldw, d->cout_g, &d->geom, f32(w->col));
      else
        st = lamp_cpu_conv_direct(dst, d->plane_out, xs + g * d->cin_g * d->plane_in, wg, ldw, d->cout_g, &d->geom,
                                  f32(w->col));
    } else {
      st = columns(f32(w->col), xs + g * d->cin_g * d->plane_in, d->image_in, &d->geom, &col);
      if (st == LAMP_OK)
        st = lamp_cpu_gemm(0, 0, d->cout_g, d->plane_out, d->k_rows, 1.0f, wd + g * d->cout_g * d->k_rows, LAMP_F32,
                           d->k_rows, col, LAMP_F32, d->plane_out, 0.0f, dst, LAMP_F32, d->plane_out);
    }
    if (st == LAMP_OK && direct && bias != NULL) add_bias_planes(dst, bias, d->cout_g, d->plane_out);
    if (st == LAMP_OK && !direct)
      st = lamp_cpu_scatter_planes((char *)a->y + first * lamp_dtype_size(a->y_dtype), a->y_dtype, 0, dst, bias, 1,
                                   d->cout_g, d->plane_out);
  }
  return st;
}

lamp_status lamp_cpu_conv2d_forward(void **plan, const lamp_conv2d_args *a) {
  conv_dims d;
  conv_plan *p;
  lamp_status st = check_args("conv2d_forward", a, &d);
  if (st == LAMP_OK) st = lamp_cpu_check_float("conv2d_forward", "y", a->y_dtype);
  if (st == LAMP_OK) st = plan_of(plan, d.cout, &p);
  if (st != LAMP_OK || d.n == 0) return st;
  if (lamp_cpu_conv_dnnl_takes(&p->dnnl, a, 0)) return lamp_cpu_conv_dnnl_forward(p->dnnl, a);
  conv_job j = {.p = p, .a = a, .d = &d};
  if (d.direct) st = direct_weights(&p->wdir, a->weight, d.groups, d.cout_g, d.k_rows);
  if (st == LAMP_OK && d.direct && pairs_for(a, a->x_dtype))
    st = paired_weights(&p->wpair, p->wdir, d.groups, d.cout_g, d.k_rows, &d.geom);
  size_t workers = worker_count(&d);
  size_t col = d.direct ? lamp_cpu_conv_direct_work(&d.geom) : is_pointwise(&d.geom) ? 0 : d.k_rows * d.plane_out;
  for (size_t w = 0; st == LAMP_OK && w < workers; w++) {
    st = ensure_work(&p->workers[w].col, col);
    if (st == LAMP_OK && a->y_dtype != LAMP_F32) st = ensure_work(&p->workers[w].out, d.cout_g * d.plane_out);
    if (st == LAMP_OK && !in_place(a->compute, a->x_dtype) && !widen_x_in_kernel(a, &d))
      st = ensure_work(&p->workers[w].xs, d.image_in);
  }
  if (st == LAMP_OK) st = lamp_cpu_parallel_for(d.n, forward_task, &j);
  return st;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* W_g [cout_g, cin_g, k, k] -> Wt_g [cin_g, cout_g * k * k] with the kernel flipped. */
static lamp_status flip_weights(conv_plan *p, const conv_dims *d, const float *w) {
  size_t kk = d->kk;
  lamp_status st = ensure_work(&p->wt, d->cout * d->k_rows);
  if (st != LAMP_OK) return st;
  float *wt = f32(p->wt);
  for (size_t g = 0; g < d->groups; g++)
    for (size_t o = 0; o < d->cout_g; o++)
      for (size_t i = 0; i < d->cin_g; i++)
        for (size_t t = 0; t < kk; t++)
          wt[g * d->cin_g * d->t_rows + i * d->t_rows + o * kk + (kk - 1 - t)] =
              w[((g * d->cout_g + o) * d->cin_g + i) * kk + t];
  return LAMP_OK;
}

/*
** dy of image s, all channels [out, plane], as a GEMM operand (compute values, fp32) where a
** kernel `needs` it: dy itself under fp32, else widened into the worker's buffer (*out NULL when
** not needed: the bf16 pair kernels read dy as stored). The bias sums come from the stored values,
** before any rounding to the compute dtype (widened or not, the same sums: channel_reduce widens
** exactly).
*/
static lamp_status dy_operand(const conv_job *j, conv_worker *w, size_t s, int needed, const float **out) {
  const conv_dims *d = j->d;
  const lamp_conv2d_args *a = j->a;
  int direct = in_place(a->compute, a->dy_dtype);
  const void *stored = at(a->dy, a->dy_dtype, s * d->image_out), *sums_from = stored;
  lamp_dtype sums_dtype = a->dy_dtype;
  float *buf = needed && !direct ? f32(w->dy) : NULL;
  lamp_status st = LAMP_OK;
  *out = needed && direct ? stored : buf;
  if (buf != NULL) {
    st = lamp_cpu_convert(buf, LAMP_F32, stored, a->dy_dtype, d->image_out);
    sums_from = buf, sums_dtype = LAMP_F32;
  }
  if (st == LAMP_OK && j->grads && a->grad_bias != NULL) {
    double sums[64];
    for (size_t c0 = 0; st == LAMP_OK && c0 < d->cout; c0 += 64) {
      size_t len = d->cout - c0 < 64 ? d->cout - c0 : 64;
      st = lamp_cpu_channel_reduce(at(sums_from, sums_dtype, c0 * d->plane_out), sums_dtype, NULL, NULL, LAMP_F32,
                                   NULL, 1, len, d->plane_out, sums, NULL);
      for (size_t k = 0; k < len; k++) w->bias_sums[c0 + k] += sums[k];
    }
  }
  if (st == LAMP_OK && buf != NULL && a->dy_dtype != a->compute && a->compute != LAMP_F32)
    st = lamp_cpu_round_through(buf, buf, a->compute, d->image_out);
  return st;
}

/* dx of image s, group g: the transposed convolution of dy, or W_g^T . dy_g folded by col2im,
   written straight into dx's planes when dx is fp32. */
static lamp_status input_gradient(const conv_job *j, conv_worker *w, size_t s, size_t g, const float *dys) {
  const conv_dims *d = j->d;
  const lamp_conv2d_args *a = j->a;
  size_t first = s * d->image_in + g * d->cin_g * d->plane_in, n = d->cin_g * d->plane_in;
  int direct = a->dx_dtype == LAMP_F32;
  float *col = f32(w->col);
  const float *dy_g = dys != NULL ? dys + g * d->cout_g * d->plane_out : NULL; /* NULL: the pair kernel's */
  void *dx_at = (char *)a->dx + first * lamp_dtype_size(a->dx_dtype);
  lamp_status st;
  if (d->transposed) {
    const float *wt_g = f32(j->p->wt) + g * d->cin_g * d->t_rows;
    float *dst = direct ? (float *)a->dx + first : f32(w->out);
    const float *tcol;
    if (d->tdirect) {
      size_t ldw = lamp_cpu_conv_direct_width(d->cin_g);
      const float *wt_d = f32(j->p->wdir_t) + g * d->t_rows * ldw;
      if (pair_input_gradient(a, d))
        st = lamp_cpu_conv_direct_bf16(dst, d->plane_in,
                                       at(a->dy, a->dy_dtype, s * d->image_out + g * d->cout_g * d->plane_out),
                                       (const uint32_t *)lamp_tensor_data(j->p->wpair_t) +
                                           g * lamp_cpu_conv_direct_pairs(&d->tgeom, d->cin_g),
                                       d->cin_g, &d->tgeom, col);
      else
        st = lamp_cpu_conv_direct(dst, d->plane_in, dy_g, wt_d, ldw, d->cin_g, &d->tgeom, col);
    } else {
      st = columns(col, dy_g, d->image_out, &d->tgeom, &tcol);
      if (st == LAMP_OK)
        st = lamp_cpu_gemm(0, 0, d->cin_g, d->plane_in, d->t_rows, 1.0f, wt_g, LAMP_F32, d->t_rows, tcol, LAMP_F32,
                           d->plane_in, 0.0f, dst, LAMP_F32, d->plane_in);
    }
    if (st == LAMP_OK && !direct) st = lamp_cpu_convert(dx_at, a->dx_dtype, dst, LAMP_F32, n);
    return st;
  }
  float *dst = direct ? (float *)a->dx + first : f32(w->dx);
  st = lamp_cpu_gemm(1, 0, d->k_rows, d->plane_out, d->cout_g, 1.0f, (const float *)a->weight + g * d->cout_g * d->k_rows,
                     LAMP_F32, d->k_rows, dy_g, LAMP_F32, d->plane_out, 0.0f, col, LAMP_F32, d->plane_out);
  if (st == LAMP_OK) { /* col2im adds: the planes start at zero */
    memset(dst, 0, n * sizeof *dst);
    st = lamp_cpu_col2im(dst, d->image_in, col, d->plane_out, 1, &d->geom);
  }
  if (st == LAMP_OK && !direct) st = lamp_cpu_convert(dx_at, a->dx_dtype, dst, LAMP_F32, n);
  return st;
}

/* Image `s`: this worker's dW partial sums (dW_g (+)= dy_g . col^T), and dx of the image. */
static lamp_status backward_task(void *ctx, size_t worker, size_t s) {
  const conv_job *j = ctx;
  const conv_dims *d = j->d;
  const lamp_conv2d_args *a = j->a;
  conv_worker *w = &j->p->workers[worker];
  const float *xs = NULL, *dys = NULL, *col;
  lamp_status st = LAMP_OK;
  int typed = widen_x_in_kernel(a, d);
  int pair_grads = j->grads && typed && pairs_for(a, a->x_dtype) && pairs_for(a, a->dy_dtype);
  int dy_needed = (j->grads && !pair_grads) || (a->dx != NULL && !pair_input_gradient(a, d));
  if (j->grads && !typed) st = image_operand(j, w->xs, a->x, a->x_dtype, d->image_in, s, &xs);
  if (st == LAMP_OK) st = dy_operand(j, w, s, dy_needed, &dys);
  for (size_t g = 0; st == LAMP_OK && g < d->groups; g++) {
    float *gw = j->grads ? f32(w->grad) + g * d->cout_g * d->k_rows : NULL;
    float *acc = j->grads && d->direct ? f32(w->acc) + g * lamp_cpu_conv_direct_grad_acc(&d->geom, d->cout_g) : NULL;
    if (pair_grads) {
      st = lamp_cpu_conv_direct_grad_bf16(acc, at(a->x, a->x_dtype, s * d->image_in + g * d->cin_g * d->plane_in),
                                          at(a->dy, a->dy_dtype, s * d->image_out + g * d->cout_g * d->plane_out),
                                          d->cout_g, &d->geom, f32(w->col), w->busy);
    } else if (j->grads && typed) {
      st = lamp_cpu_conv_direct_grad_typed(acc, at(a->x, a->x_dtype, s * d->image_in + g * d->cin_g * d->plane_in),
                                           a->x_dtype, dys + g * d->cout_g * d->plane_out, d->cout_g, &d->geom,
                                           f32(w->col), w->busy);
    } else if (j->grads && d->direct) {
      st = lamp_cpu_conv_direct_grad(acc, xs + g * d->cin_g * d->plane_in, dys + g * d->cout_g * d->plane_out,
                                     d->cout_g, &d->geom, f32(w->col), w->busy);
    } else if (j->grads) {
      st = columns(f32(w->col), xs + g * d->cin_g * d->plane_in, d->image_in, &d->geom, &col);
      if (st == LAMP_OK)
        st = lamp_cpu_gemm(0, 1, d->cout_g, d->k_rows, d->plane_out, 1.0f, dys + g * d->cout_g * d->plane_out,
                           LAMP_F32, d->plane_out, col, LAMP_F32, d->plane_out, w->busy ? 1.0f : 0.0f, gw, LAMP_F32,
                           d->k_rows);
    }
    if (st == LAMP_OK && a->dx != NULL) st = input_gradient(j, w, s, g, dys);
  }
  w->busy = 1;
  return st;
}

/* Worker w's direct-kernel accumulators moved into sum (added when `accumulate`), group by group. */
static lamp_status add_direct_sums(conv_plan *p, const conv_dims *d, size_t w, float *sum, int accumulate) {
  size_t per_group = lamp_cpu_conv_direct_grad_acc(&d->geom, d->cout_g);
  const float *acc = f32(p->workers[w].acc);
  lamp_status st = LAMP_OK;
  for (size_t g = 0; st == LAMP_OK && g < d->groups; g++)
    st = lamp_cpu_conv_direct_grad_reduce(sum + g * d->cout_g * d->k_rows, d->k_rows, acc + g * per_group, d->cout_g,
                                          d->k_rows, accumulate);
  return st;
}

/* The workers' partial sums, added in worker order into worker 0's buffer, then into the slab. */
static lamp_status finish_grads(conv_plan *p, const lamp_conv2d_args *a, const conv_dims *d, size_t workers) {
  size_t nw = d->cout * d->k_rows, out = d->cout;
  float *sum = f32(p->workers[0].grad);
  lamp_status st = LAMP_OK;
  if (!p->workers[0].busy) st = lamp_cpu_fill(sum, LAMP_F32, nw, 0.0f); /* an empty batch */
  /* the other paths wrote worker 0's sums into its buffer already */
  for (size_t w = d->direct ? 0 : 1; st == LAMP_OK && w < workers; w++) {
    if (!p->workers[w].busy) continue;
    if (d->direct) st = add_direct_sums(p, d, w, sum, w > 0);
    else st = lamp_cpu_axpy(sum, f32(p->workers[w].grad), nw, 1.0f);
  }
  if (st == LAMP_OK) st = lamp_cpu_add_grad(a->grad_weight, sum, nw, a->grad_dtype, a->overwrite_grads);
  if (st != LAMP_OK || a->grad_bias == NULL) return st;
  float sums[256];
  for (size_t o0 = 0; st == LAMP_OK && o0 < out; o0 += 256) {
    size_t len = out - o0 < 256 ? out - o0 : 256;
    for (size_t k = 0; k < len; k++) {
      double v = 0.0;
      for (size_t w = 0; w < workers; w++) v += p->workers[w].bias_sums[o0 + k];
      sums[k] = (float)v;
    }
    st = lamp_cpu_add_grad(a->grad_bias + o0, sums, len, a->grad_dtype, a->overwrite_grads);
  }
  return st;
}

/* Workspaces of every worker, sized in this thread before the parallel loop. */
static lamp_status prepare_workers(conv_plan *p, const lamp_conv2d_args *a, const conv_dims *d, size_t workers,
                                   int grads) {
  size_t col = !grads                   ? 0
               : d->direct              ? lamp_cpu_conv_direct_grad_work(&d->geom, d->cout_g)
               : is_pointwise(&d->geom) ? 0
                                        : d->k_rows * d->plane_out;
  size_t out = 0, dxw = 0;
  if (a->dx != NULL && d->transposed) {
    size_t t = d->tdirect ? lamp_cpu_conv_direct_work(&d->tgeom) : is_pointwise(&d->tgeom) ? 0 : d->t_rows * d->plane_in;
    if (t > col) col = t;
    if (a->dx_dtype != LAMP_F32) out = d->cin_g * d->plane_in;
  } else if (a->dx != NULL) {
    if (d->k_rows * d->plane_out > col) col = d->k_rows * d->plane_out;
    if (a->dx_dtype != LAMP_F32) dxw = d->cin_g * d->plane_in;
  }
  lamp_status st = LAMP_OK;
  for (size_t w = 0; st == LAMP_OK && w < workers; w++) {
    conv_worker *cw = &p->workers[w];
    cw->busy = 0;
    st = ensure_work(&cw->col, col);
    if (st == LAMP_OK && !in_place(a->compute, a->dy_dtype)) st = ensure_work(&cw->dy, d->image_out);
    if (st == LAMP_OK && out > 0) st = ensure_work(&cw->out, out);
    if (st == LAMP_OK && dxw > 0) st = ensure_work(&cw->dx, dxw);
    if (st == LAMP_OK && grads) st = ensure_work(&cw->grad, d->cout * d->k_rows);
    if (st == LAMP_OK && grads && d->direct)
      st = ensure_work(&cw->acc, d->groups * lamp_cpu_conv_direct_grad_acc(&d->geom, d->cout_g));
    if (st == LAMP_OK && grads && !in_place(a->compute, a->x_dtype) && !widen_x_in_kernel(a, d))
      st = ensure_work(&cw->xs, d->image_in);
    if (st == LAMP_OK && grads && a->grad_bias != NULL) memset(cw->bias_sums, 0, d->cout * sizeof *cw->bias_sums);
  }
  return st;
}

/*
** The backward pass over all images: dx when dx is not NULL, the parameter gradients when
** grad_weight is. One walk does both when both are wanted, so dy's operand is made once per image.
*/
lamp_status lamp_cpu_conv2d_backward(void **plan, const lamp_conv2d_args *a) {
  conv_dims d;
  conv_plan *p;
  int grads = a->grad_weight != NULL;
  lamp_status st = check_args("conv2d_backward", a, &d);
  if (st == LAMP_OK) st = lamp_cpu_check_float("conv2d_backward", "dy", a->dy_dtype);
  if (st == LAMP_OK && a->dx != NULL) st = lamp_cpu_check_float("conv2d_backward", "dx", a->dx_dtype);
  if (st == LAMP_OK && grads) st = lamp_cpu_check_float("conv2d_backward", "grad", a->grad_dtype);
  if (st == LAMP_OK) st = plan_of(plan, d.cout, &p);
  if (st != LAMP_OK) return st;
  if (lamp_cpu_conv_dnnl_takes(&p->dnnl, a, 1)) return lamp_cpu_conv_dnnl_backward(p->dnnl, a);
  conv_job j = {.p = p, .a = a, .d = &d, .grads = grads};
  if (a->dx != NULL && d.transposed) st = flip_weights(p, &d, a->weight);
  if (st == LAMP_OK && a->dx != NULL && d.tdirect) st = direct_weights(&p->wdir_t, f32(p->wt), d.groups, d.cin_g, d.t_rows);
  if (st == LAMP_OK && a->dx != NULL && pair_input_gradient(a, &d))
    st = paired_weights(&p->wpair_t, p->wdir_t, d.groups, d.cin_g, d.t_rows, &d.tgeom);
  size_t workers = worker_count(&d);
  if (st == LAMP_OK) st = prepare_workers(p, a, &d, workers, grads);
  if (st == LAMP_OK && d.n > 0) st = lamp_cpu_parallel_for(d.n, backward_task, &j);
  if (st == LAMP_OK && grads) st = finish_grads(p, a, &d, workers);
  return st;
}
