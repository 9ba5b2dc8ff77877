/*
** Private to the CPU backend: its operations (the table in backend.c points at them, and the tests
** of the CPU kernels call them directly), the kernels its coarse operations are built from, the
** thread pool and workspaces those plan with, and fp32 views of f32/f16/bf16 arrays. 16-bit data
** is widened a chunk at a time into a small stack buffer, so a kernel is written once, in fp32,
** with no per-element dtype switch and no allocation.
*/
#ifndef LAMP_BACKEND_CPU_BACKEND_H
#define LAMP_BACKEND_CPU_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Elements per inner block. GCC at -O2 only vectorises loops whose trip count it knows, so the
   hot loops run over fixed blocks of this many elements plus a scalar tail. */
#define LAMP_CPU_BLOCK 8

/* Floats in one stack staging buffer (2 KiB): big enough to amortise the conversion call,
   small enough to stay in L1 next to the data it is combined with. */
#define LAMP_CPU_CHUNK 512

/* The most threads a parallel loop runs on (and so the most per-worker workspaces a plan keeps). */
#define LAMP_CPU_MAX_WORKERS 16

/*
** How long the pool's threads poll for the next loop, or for the end of their own, before they
** sleep (parallel.c), in nanoseconds: long enough to cover the serial code between the loops of a
** step, short enough that an idle trainer (or another process on a busy machine: the poll yields
** the core every few microseconds) loses next to nothing. The MLP's step has a dozen loops with
** gaps of 40 to 320 us between them (the batch, the loss, bias and row sums), and on a virtual
** machine a sleeping helper is slow to wake (the host must deliver the wake-up to an idle vCPU):
** with a 100 us poll the helper started a GEMM's loop 76 us late on average, and the fp32 MLP ran
** 1.175x faster with this one (10 alternating pairs on a 2-core Zen 4).
*/
#define LAMP_CPU_SPIN_NS 1000000L

static inline size_t lamp_cpu_min(size_t a, size_t b) { return a < b ? a : b; }

/* ---- the operations of the table (see backend.h for their contracts) ------------------------- */

lamp_status lamp_cpu_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                          lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb, float beta,
                          void *c, lamp_dtype c_dtype, size_t ldc);
lamp_status lamp_cpu_convert(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n);
lamp_status lamp_cpu_fill(void *x, lamp_dtype dtype, size_t n, float value);
lamp_status lamp_cpu_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype, size_t rows,
                                   size_t cols);
lamp_status lamp_cpu_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols, float alpha,
                              float beta);
lamp_status lamp_cpu_relu_forward(void *y, const void *x, lamp_dtype dtype, size_t n);
lamp_status lamp_cpu_relu_backward(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n);
lamp_status lamp_cpu_cross_entropy(const void *logits, lamp_dtype logits_dtype, const int32_t *labels, size_t rows,
                                   size_t classes, float grad_scale, double *loss, void *dlogits,
                                   lamp_dtype dlogits_dtype, size_t *correct);
lamp_status lamp_cpu_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols);
lamp_status lamp_cpu_unscale_and_check(float *g, size_t n, float inv_scale, int *found_inf);
lamp_status lamp_cpu_round_through(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_cpu_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_cpu_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                      uint64_t stream);
lamp_status lamp_cpu_scale(float *x, size_t n, float alpha);
lamp_status lamp_cpu_axpy(float *y, const float *x, size_t n, float alpha);
lamp_status lamp_cpu_sum_squares(const float *x, size_t n, double *out);
lamp_status lamp_cpu_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n);
lamp_status lamp_cpu_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                         lamp_dtype b_dtype, size_t n, int relu);
lamp_status lamp_cpu_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const uint8_t *mask,
                                float scale, size_t n);
lamp_status lamp_cpu_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                     size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cpu_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cpu_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                     const lamp_conv_geom *g);
lamp_status lamp_cpu_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_cpu_conv2d_forward(void **plan, const lamp_conv2d_args *a);
lamp_status lamp_cpu_conv2d_backward(void **plan, const lamp_conv2d_args *a);
void lamp_cpu_conv2d_plan_free(void *plan);
/* The oneDNN implementation that runs this layer's bf16 products (conv_dnnl.c), NULL when lamp's own. */
const char *lamp_cpu_conv2d_plan_engine(const void *plan);
lamp_status lamp_cpu_batchnorm_forward(const lamp_batchnorm_args *a);
lamp_status lamp_cpu_batchnorm_backward(const lamp_batchnorm_args *a);
/* LAMP_CAP_NATIVE_BF16_GEMM where the chosen GEMM providers have a bf16 GEMM, else 0. */
unsigned lamp_cpu_caps_now(void);

/*
** A parameter gradient's sum v (fp32) into its slab g, produced in grad_dtype: written when
** `overwrite` (the first backward after the gradients were released), else added; fp32 exactly,
** a 16-bit sum rounded once to its dtype, then written or added in fp32 (accumulate.c).
*/
lamp_status lamp_cpu_add_grad(float *g, const float *v, size_t n, lamp_dtype grad_dtype, int overwrite);

/* ---- argument checks (checks.c): each returns LAMP_OK or records the error ------------------- */

/* "<fn>: dtype i32 not supported for <role> (expected f32, f16 or bf16)"; role may be NULL. */
lamp_status lamp_cpu_check_float(const char *fn, const char *role, lamp_dtype dtype);

/* "<fn>: dtype f32 not supported for <role> (expected f16 or bf16)". */
lamp_status lamp_cpu_check_half(const char *fn, const char *role, lamp_dtype dtype);

/* "<fn>: <name> is NULL" when ptr is NULL and the call has elements to touch. */
lamp_status lamp_cpu_check_data(const char *fn, const char *name, const void *ptr, size_t count);

/* ---- fp32 views of f32/f16/bf16 arrays (fp32_view.c) ----------------------------------------- */
/*
** `first` and `n` count elements of the array's own dtype; n <= LAMP_CPU_CHUNK whenever a stage
** is involved. For f32 data the views are the data itself and nothing is copied.
*/

/* Elements [first, first + n) of src as fp32, read-only: src itself or the widened stage. */
const float *lamp_cpu_read(float *stage, const void *src, lamp_dtype dtype, size_t first, size_t n);

/* The same elements as writable fp32: data itself or the widened stage; commit afterwards. */
float *lamp_cpu_edit(float *stage, void *data, lamp_dtype dtype, size_t first, size_t n);

/* Where to write n fp32 results destined for data[first...], without reading the data
   (it may hold anything, NaN included); commit afterwards. */
float *lamp_cpu_scratch(float *stage, void *data, lamp_dtype dtype, size_t first);

/* Stores values into data[first...], rounding to the dtype; nothing to do when values
   already is that memory (an f32 edit or scratch view). */
void lamp_cpu_commit(void *data, lamp_dtype dtype, size_t first, const float *values, size_t n);

/* One element as fp32 (for the odd single read, such as the label's logit). */
float lamp_cpu_get(const void *src, lamp_dtype dtype, size_t index);

/* Folds x[0..n) (element indices base...) into a running arg-max: the first maximum wins on
   ties, and NaN counts as the largest value (the first NaN wins), as in NumPy and PyTorch, so
   a NaN row is never reported as a clean prediction. Start from best = -INFINITY, index = 0. */
static inline void lamp_cpu_argmax_fold(const float *x, size_t n, size_t base, float *best, size_t *index) {
  float b = *best;
  size_t at = *index;
  for (size_t i = 0; i < n && !isnan(b); i++) {
    float v = x[i];
    if (v > b || isnan(v)) {
      b = v;
      at = base + i;
    }
  }
  *best = b;
  *index = at;
}

/* ---- threads and workspaces ------------------------------------------------------------------ */

/*
** fn(ctx, worker, task) for every task in [0, n_tasks), on up to lamp_cpu_threads() threads
** (worker < that count identifies the thread, for per-thread workspaces). Tasks are assigned
** statically, so results never depend on timing; GEMMs called inside run single-threaded.
** Returns the first failure, its message carried to the calling thread. Nested calls run serially.
*/
lamp_status lamp_cpu_parallel_for(size_t n_tasks, lamp_task_fn fn, void *ctx);

/* The threads a loop runs on: OpenBLAS's thread count, at most LAMP_CPU_MAX_WORKERS. */
size_t lamp_cpu_threads(void);

/* The pool's helpers stop polling for the next loop and sleep (called before OpenBLAS runs its
   own threads; a no-op inside a loop). */
void lamp_cpu_pool_sleep(void);

/*
** fn(ctx, part, begin, end) over [0, n): in one call for small n, else in two halves (part 0
** and 1) on two threads when OpenBLAS is allowed two (split.c). Only for elementwise passes,
** whose results cannot depend on the split.
*/
typedef void (*lamp_range_fn)(void *ctx, size_t part, size_t begin, size_t end);
lamp_status lamp_cpu_split_pass(size_t n, lamp_range_fn fn, void *ctx);

/* The calling thread's workspaces (workspace.c): one per purpose, kept and grown on demand,
   contents undefined; NULL with the error set. */
typedef enum lamp_cpu_ws {
  LAMP_CPU_WS_GEMM,      /* widened 16-bit GEMM operands */
  LAMP_CPU_WS_STAGE_IN,  /* a few 16-bit planes widened for an fp32 kernel (pool.c) */
  LAMP_CPU_WS_STAGE_OUT, /* its fp32 results before rounding */
  LAMP_CPU_WS_CHANNELS,  /* BatchNorm's per-channel coefficients and sums */
  LAMP_CPU_WS_COUNT
} lamp_cpu_ws;
void *lamp_cpu_workspace(lamp_cpu_ws which, size_t bytes);
void lamp_cpu_workspace_release(void);

/* dst = src converted, split across the pool's threads (large arrays; dst and src apart or
   equal); the same values bit for bit as lamp_cpu_convert. Not inside a parallel loop. */
lamp_status lamp_cpu_convert_parallel(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype,
                                      size_t n);

/* ---- oneDNN's bf16 convolution (conv_dnnl.c), used by conv2d.c ------------------------------- */

/*
** A layer's oneDNN state: NULL at first. lamp_cpu_conv_dnnl_takes says whether oneDNN runs this
** call (the forward, or the backward when `backward`): bf16 x, y, dy and dx, no bias, one group,
** LAMP_CONV_BF16 unset, auto or dnnl, libdnnl.so.2 present and an AMX implementation for the
** layer's three products (decided on its first call). It makes *layer and what the call needs.
*/
typedef struct lamp_conv_dnnl lamp_conv_dnnl;
int lamp_cpu_conv_dnnl_takes(lamp_conv_dnnl **layer, const lamp_conv2d_args *a, int backward);
lamp_status lamp_cpu_conv_dnnl_forward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a);
lamp_status lamp_cpu_conv_dnnl_backward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a);
const char *lamp_cpu_conv_dnnl_impl(const lamp_conv_dnnl *layer); /* NULL where oneDNN does not run it */
void lamp_cpu_conv_dnnl_free(lamp_conv_dnnl *layer);

/*
** 16-bit images (bf16 or fp16) between NCHW and NHWC (nhwc.c): for each of `images` images of
** `channels` planes of `pixels` elements, dst[p * channels + c] = src[c * pixels + p], and back.
** dst and src do not overlap. Data moves only: the bits are those of src.
*/
void lamp_cpu_nchw_to_nhwc16(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels);
void lamp_cpu_nhwc_to_nchw16(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels);

/* ---- convolution kernels (im2col.c, conv_direct.c), used by conv2d.c ------------------------- */

/*
** Columns of n_images images for a convolution as one GEMM operand:
** col[(c * kernel_h + i) * kernel_w + j][s * out_hw + p] = x_s[c][y(p) + i*dil - pad][x(p) + j*dil - pad]
** (0 outside the image), rows of ldcol elements, where image s starts at x + s * image_stride.
*/
lamp_status lamp_cpu_im2col(float *col, size_t ldcol, const float *x, size_t image_stride, size_t n_images,
                            const lamp_conv_geom *g);

/* The adjoint: x_s[...] += every column entry that im2col would read from there. */
lamp_status lamp_cpu_col2im(float *x, size_t image_stride, const float *col, size_t ldcol, size_t n_images,
                            const lamp_conv_geom *g);

/* dst[s * image_stride + c * plane + p] = src[c][s * plane + p] (+ bias[c] when bias is not NULL),
   rounded to dst_dtype: a [channels, n_images * plane] matrix back into NCHW images. */
lamp_status lamp_cpu_scatter_planes(void *dst, lamp_dtype dst_dtype, size_t image_stride, const float *src,
                                    const float *bias, size_t n_images, size_t channels, size_t plane);

/*
** Direct convolution of one image with a 3x3 kernel, stride 1, padding 1 (so out_h = height,
** out_w = width), where the CPU has AVX-512 or AVX2 with FMA (lamp_cpu_conv_direct_supported):
** out[o][p] = sum_r wt[r][o] * col[r][p] for o < n_out, with col the columns lamp_cpu_im2col would
** make for g, never formed. x: g->channels planes, contiguous; out rows ld_out apart; wt is
** [channels * kernel_h * kernel_w][ldw], ldw = lamp_cpu_conv_direct_width(n_out) (columns from
** n_out on are read, their results dropped: zero them); work holds lamp_cpu_conv_direct_work(g)
** floats. Sums are fp32, in order over r.
*/
int lamp_cpu_conv_direct_supported(const lamp_conv_geom *g);
size_t lamp_cpu_conv_direct_width(size_t n_out);
size_t lamp_cpu_conv_direct_work(const lamp_conv_geom *g);
lamp_status lamp_cpu_conv_direct(float *out, size_t ld_out, const float *x, const float *wt, size_t ldw, size_t n_out,
                                 const lamp_conv_geom *g, float *work);
/*
** Its weight gradient for one image, same geometry: gw[o][r] = sum_p dy[o][p] * col[r][p] for
** o < n_out (dy [n_out][plane]) and r < g->channels * 9, summed into the accumulator acc
** (lamp_cpu_conv_direct_grad_acc floats, written, or added to when `accumulate`), so that a
** batch's images add up there and are moved into gw once (lamp_cpu_conv_direct_grad_reduce).
** work holds lamp_cpu_conv_direct_grad_work floats. Pixels are summed in raster order, images in
** call order.
*/
size_t lamp_cpu_conv_direct_grad_acc(const lamp_conv_geom *g, size_t n_out);
size_t lamp_cpu_conv_direct_grad_work(const lamp_conv_geom *g, size_t n_out);
lamp_status lamp_cpu_conv_direct_grad(float *acc, const float *x, const float *dy, size_t n_out,
                                      const lamp_conv_geom *g, float *work, int accumulate);
/* gw[o][r] (+)= the accumulated sum for (o, r); gw's rows ldg apart, rows = g->channels * 9. */
lamp_status lamp_cpu_conv_direct_grad_reduce(float *gw, size_t ldg, const float *acc, size_t n_out, size_t rows,
                                             int accumulate);
/*
** The forward and lamp_cpu_conv_direct_grad with x in f32, f16 or bf16 (x_dtype), a 16-bit x
** widened exactly as lamp_cpu_convert does (the forward widens it into work; an fp32 x it reads
** in place).
*/
lamp_status lamp_cpu_conv_direct_typed(float *out, size_t ld_out, const void *x, lamp_dtype x_dtype, const float *wt,
                                       size_t ldw, size_t n_out, const lamp_conv_geom *g, float *work);
lamp_status lamp_cpu_conv_direct_grad_typed(float *acc, const void *x, lamp_dtype x_dtype, const float *dy,
                                            size_t n_out, const lamp_conv_geom *g, float *work, int accumulate);
/*
** The forward of a bf16 x multiplying the bf16 values as stored, in pairs of input channels, with
** the CPU's bf16 dot product (AVX512_BF16). lamp_cpu_conv_direct_bf16_dot() says whether callers
** should: where that instruction is fast (AMD's CPUs), or LAMP_CONV_BF16=pairs. The weights, wt
** of lamp_cpu_conv_direct holding bf16 values, are paired once per pass into wp
** (lamp_cpu_conv_direct_pairs uint32 elements) by lamp_cpu_conv_direct_pair_weights. The same
** products, each pair added as that instruction adds it (denormals read and written as zero), so
** the sums' bits differ from the fp32 order's; the same on every run and thread count. work holds
** lamp_cpu_conv_direct_work(g) floats.
*/
int lamp_cpu_conv_direct_bf16_dot(void);
size_t lamp_cpu_conv_direct_pairs(const lamp_conv_geom *g, size_t n_out);
lamp_status lamp_cpu_conv_direct_pair_weights(uint32_t *wp, const float *wt, size_t ldw, size_t n_out,
                                              const lamp_conv_geom *g);
lamp_status lamp_cpu_conv_direct_bf16(float *out, size_t ld_out, const uint16_t *x, const uint32_t *wp, size_t n_out,
                                      const lamp_conv_geom *g, float *work);
/*
** lamp_cpu_conv_direct_grad of bf16 x and dy as stored, on the same instruction: the pixels of each
** row summed two at a time (a pair's two products added as vdpbf16ps adds them), in raster order.
** work holds lamp_cpu_conv_direct_grad_work floats.
*/
lamp_status lamp_cpu_conv_direct_grad_bf16(float *acc, const uint16_t *x, const uint16_t *dy, size_t n_out,
                                           const lamp_conv_geom *g, float *work, int accumulate);

/* ---- per-channel kernels (channel.c), used by batchnorm.c and conv2d.c ----------------------- */
/*
** The inputs may be of any float dtype (a 16-bit input is widened exactly, a chunk at a time,
** never as a whole fp32 copy); arithmetic is fp32.
*/

/*
** Per-channel sums over [n, c, hw]: sum_a[k] = sum of (a - a_center[k]) over channel k without b;
** when b is not NULL, sum_a[k] = sum of a and sum_ab[k] = sum of (a - a_center[k]) (b - b_center[k])
** (a NULL center counts as 0). Each image row is summed in fp32, rows are added in double.
*/
lamp_status lamp_cpu_channel_reduce(const void *a, lamp_dtype a_dtype, const float *a_center, const void *b,
                                    lamp_dtype b_dtype, const float *b_center, size_t n, size_t c, size_t hw,
                                    double *sum_a, double *sum_ab);

/* y[i, k, :] = x[i, k, :] * scale[k] + shift[k], rounded to y_dtype; with `relu`, rectified on the
   way (lamp_relu_forward's rule), the same bits as the two passes one after the other. */
lamp_status lamp_cpu_channel_affine(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                    const float *scale, const float *shift, size_t n, size_t c, size_t hw, int relu);

/* out[i, k, :] = p[k] * a[i, k, :] + q[k] * b[i, k, :] + r[k], rounded to out_dtype as it is written
   (out must not overlap a or b unless all three are fp32). */
lamp_status lamp_cpu_channel_combine_typed(void *out, lamp_dtype out_dtype, const void *a, lamp_dtype a_dtype,
                                           const void *b, lamp_dtype b_dtype, const float *p, const float *q,
                                           const float *r, size_t n, size_t c, size_t hw);

/*
** The gradient mask of a ReLU that followed lamp_cpu_channel_affine(..., relu 1), recomputed from
** its input: element e of channel k passes where x[e] * scale[k] + shift[k] > zero_bound, the
** affine pass's own fp32 arithmetic, with zero_bound 0 for an fp32 output and the 16-bit formats'
** bounds (LAMP_F16_ZERO_BOUND, LAMP_BF16_ZERO_BOUND) for a 16-bit one: exactly where the stored
** output is > 0, which is where lamp_relu_backward passes the gradient.
*/
typedef struct lamp_relu_mask {
  const float *scale, *shift;
  float zero_bound;
} lamp_relu_mask;

/* channel_reduce (a_center NULL) and channel_combine_typed with `a` read through the mask taken
   from b (a masked-off element reads as +0): the same bits as lamp_relu_backward into a, then the
   unmasked kernel. */
lamp_status lamp_cpu_channel_reduce_masked(const void *a, lamp_dtype a_dtype, const void *b, lamp_dtype b_dtype,
                                           const float *b_center, const lamp_relu_mask *mask, size_t n, size_t c,
                                           size_t hw, double *sum_a, double *sum_ab);
lamp_status lamp_cpu_channel_combine_masked(void *out, lamp_dtype out_dtype, const void *a, lamp_dtype a_dtype,
                                            const void *b, lamp_dtype b_dtype, const float *p, const float *q,
                                            const float *r, const lamp_relu_mask *mask, size_t n, size_t c,
                                            size_t hw);

/* The processor's model name and the machine's physical memory (describe.c). */
lamp_status lamp_cpu_describe(int ordinal, lamp_device_info *out);

#endif
