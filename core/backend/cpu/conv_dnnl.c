/*
** bf16 convolutions on oneDNN's AMX kernels (libdnnl.so.2, opened at run time, its C API as
** declared by Debian's libdnnl-dev; a build without those headers leaves conv2d.c on its own
** kernels). On a Xeon with AMX, oneDNN multiplies bf16 on the tiles at 3 to 9 times the rate of
** lamp's direct 3x3 kernels, which widen bf16 to fp32 there (docs/benchmarks.md); elsewhere
** oneDNN has no AMX and lamp's kernels are as fast, so a layer is taken only when oneDNN reports
** an AMX implementation for its forward, its input gradient and its weight gradient alike.
**
** A batch is cut into one slice of images per thread, or into slices of about SLICE_IMAGES when
** that makes more. Each slice has its own primitives and stream (built for its image count and
** rebuilt when that changes: oneDNN's primitive cache makes a rebuild cheap) and runs on one
** thread, with oneDNN's OpenMP held to 1 thread (as in gemm_provider.c) and that thread's
** buffers. lamp's tensors are NCHW; oneDNN's AMX convolution wants NHWC, so each slice moves x
** and dy in and y and dx out with lamp's own kernels (nhwc.c: oneDNN's reorder took as long as
** the convolutions on the ResNet's layers), and the weights with oneDNN's reorders. Every
** primitive takes the thread's scratchpad (user mode), so threads never share oneDNN's own.
**
** Numerics: the bf16 products are exact and summed in fp32 in the tiles' order (denormal inputs
** and results flushed, as AMX defines), y and dx rounded to bf16 by oneDNN (to nearest even);
** each slice's weight gradient is an fp32 sum, and the slices' sums are added in slice order.
** The same bits from run to run at one thread count.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"
#include "base/log.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define LAMP_HAVE_DNNL_CONV 1
#endif
#endif
#endif

/* What LAMP_CONV_BF16 says, read once, as conv_direct.c reads it: whether oneDNN may take bf16
   convolutions ("auto", unset or "dnnl") and whether it was asked for by name. */
static pthread_once_t setting_once = PTHREAD_ONCE_INIT;
static int allowed, forced;

static void read_setting(void) {
  const char *set = getenv("LAMP_CONV_BF16");
  forced = set != NULL && strcmp(set, "dnnl") == 0;
  allowed = forced || set == NULL || set[0] == '\0' || strcmp(set, "auto") == 0;
}

static int dnnl_allowed(void) {
  pthread_once(&setting_once, read_setting);
  return allowed;
}

static int dnnl_forced(void) {
  pthread_once(&setting_once, read_setting);
  return forced;
}

#ifdef LAMP_HAVE_DNNL_CONV

/* ---- the library ----------------------------------------------------------------------------- */

/* The functions lamp calls, typed by the header's own declarations. */
#define DNNL_FUNCTIONS(X) \
  X(dnnl_engine_create) \
  X(dnnl_stream_create) \
  X(dnnl_stream_destroy) \
  X(dnnl_memory_desc_init_by_tag) \
  X(dnnl_memory_desc_get_size) \
  X(dnnl_memory_create) \
  X(dnnl_memory_destroy) \
  X(dnnl_convolution_forward_desc_init) \
  X(dnnl_convolution_backward_data_desc_init) \
  X(dnnl_convolution_backward_weights_desc_init) \
  X(dnnl_primitive_attr_create) \
  X(dnnl_primitive_attr_set_scratchpad_mode) \
  X(dnnl_primitive_desc_create) \
  X(dnnl_reorder_primitive_desc_create) \
  X(dnnl_primitive_desc_query) \
  X(dnnl_primitive_desc_query_md) \
  X(dnnl_primitive_desc_destroy) \
  X(dnnl_primitive_create) \
  X(dnnl_primitive_execute) \
  X(dnnl_primitive_destroy)

#define DNNL_POINTER(name) __typeof__(name) *name;
static struct {
  DNNL_FUNCTIONS(DNNL_POINTER)
  void (*omp_set_num_threads)(int); /* libgomp's, which libdnnl links */
  dnnl_engine_t engine;
  dnnl_primitive_attr_t attr; /* the scratchpad is the caller's */
  int ready;
  char why[256]; /* why not, when not ready */
} dn;
#undef DNNL_POINTER

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(dn.why, sizeof dn.why, "%s", dlerror());
    return;
  }
  const char *missing = NULL;
#define DNNL_RESOLVE(name) \
  if ((*(void **)&dn.name = dlsym(h, #name)) == NULL && missing == NULL) missing = #name;
  DNNL_FUNCTIONS(DNNL_RESOLVE)
#undef DNNL_RESOLVE
  if ((*(void **)&dn.omp_set_num_threads = dlsym(h, "omp_set_num_threads")) == NULL && missing == NULL)
    missing = "omp_set_num_threads";
  if (missing != NULL) {
    snprintf(dn.why, sizeof dn.why, "libdnnl.so.2 has no symbol %s", missing);
    return;
  }
  if (dn.dnnl_engine_create(&dn.engine, dnnl_cpu, 0) != dnnl_success ||
      dn.dnnl_primitive_attr_create(&dn.attr) != dnnl_success ||
      dn.dnnl_primitive_attr_set_scratchpad_mode(dn.attr, dnnl_scratchpad_mode_user) != dnnl_success) {
    snprintf(dn.why, sizeof dn.why, "libdnnl.so.2 could not make a CPU engine");
    return;
  }
  dn.ready = 1;
}

static _Thread_local int single_thread; /* this thread's OpenMP count is set to 1 */

static void on_this_thread(void) {
  if (single_thread) return;
  dn.omp_set_num_threads(1);
  single_thread = 1;
}

static lamp_status failed(const char *what, dnnl_status_t s) {
  return lamp_error(LAMP_ERR_SYSTEM, "conv2d: oneDNN's %s failed (dnnl_status_t %d)", what, (int)s);
}

/* ---- one slice's primitives ------------------------------------------------------------------ */

enum { FWD, BWD_DATA, BWD_WEIGHTS, W_FWD, W_BWD, DW_OUT, PRIMITIVES };

/* The memory layouts a slice's primitives read and write. */
enum { MD_X_NHWC, MD_Y_NHWC, MD_W_OIHW, MD_W_FWD, MD_W_BWD, MD_DW, MD_SCRATCH, MDS };

/*
** A slice's buffers. x, y, dy and dx in NHWC and the scratchpad belong to the thread that runs
** the slice and serve every slice and layer it runs (one at a time), so they cost one slice of
** the largest layer per thread; the weights in the two layouts and dW, in oneDNN's layout and
** in lamp's, are the layer's own.
*/
enum {
  BUF_X,
  BUF_Y,
  BUF_DY,
  BUF_DX,
  BUF_SCRATCH,
  SHARED_BUFS,
  BUF_W_FWD = SHARED_BUFS,
  BUF_W_BWD,
  BUF_DW,
  BUF_DW_OIHW,
  BUFS
};

static struct { lamp_tensor *buf[SHARED_BUFS]; } shared[LAMP_CPU_MAX_WORKERS];
static size_t live_layers; /* the threads' buffers are released with the last layer */

/* The images of a slice where a batch allows: larger batches (an evaluation's) are cut into more
   slices than threads, so the threads' buffers stay at this many images. */
#define SLICE_IMAGES 64

typedef struct slice {
  size_t worker;  /* the thread running it now, whose buffers it uses */
  int64_t images; /* what the primitives were made for; 0: not made */
  dnnl_primitive_t prim[PRIMITIVES];
  dnnl_memory_desc_t md[MDS];
  size_t bytes[BUFS];     /* what the primitives need of each buffer */
  lamp_tensor *buf[BUFS]; /* the layer's own, from SHARED_BUFS on */
  dnnl_stream_t stream;
} slice;

struct lamp_conv_dnnl {
  int verdict;   /* 0 undecided, 1 oneDNN runs this layer on AMX, -1 it does not */
  char impl[96]; /* the forward's implementation, as oneDNN names it */
  slice slices[LAMP_CPU_MAX_WORKERS];
};

static void slice_clear(slice *s) {
  for (int i = 0; i < PRIMITIVES; i++)
    if (s->prim[i] != NULL) dn.dnnl_primitive_destroy(s->prim[i]);
  memset(s->prim, 0, sizeof s->prim);
  s->images = 0;
}

static dnnl_status_t md_of(dnnl_memory_desc_t *md, int64_t a, int64_t b, int64_t c, int64_t d, dnnl_data_type_t type,
                           dnnl_format_tag_t tag) {
  dnnl_dims_t dims = {a, b, c, d};
  return dn.dnnl_memory_desc_init_by_tag(md, 4, dims, type, tag);
}

static size_t scratch_of(const_dnnl_primitive_desc_t pd) {
  return dn.dnnl_memory_desc_get_size(dn.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
}

static dnnl_status_t reorder_of(dnnl_primitive_t *prim, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                size_t *scratch) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dn.dnnl_reorder_primitive_desc_create(&pd, from, dn.engine, to, dn.engine, dn.attr);
  if (st != dnnl_success) return st;
  if (scratch_of(pd) > *scratch) *scratch = scratch_of(pd);
  st = dn.dnnl_primitive_create(prim, pd);
  dn.dnnl_primitive_desc_destroy(pd);
  return st;
}

static int is_amx(const char *impl) { return impl != NULL && strstr(impl, "amx") != NULL; }

/*
** The three convolutions of `images` images (x and y in NHWC, the weights as oneDNN lays them
** out). *amx tells whether oneDNN runs all three on AMX; when it does not, nothing is made.
*/
static dnnl_status_t make_convolutions(slice *s, const lamp_conv2d_shape *sh, int64_t images, char *impl_out,
                                       size_t impl_size, int *amx, size_t *scratch) {
  int64_t c = (int64_t)sh->in_channels, k = (int64_t)sh->out_channels, kh = (int64_t)sh->kernel;
  int64_t stride = (int64_t)sh->stride, pad = (int64_t)sh->padding;
  dnnl_memory_desc_t x_md, y_md, w_any, dw_any;
  dnnl_dims_t strides = {stride, stride}, pad_l = {pad, pad};
  /* the right padding that gives oneDNN this shape's output size */
  dnnl_dims_t pad_r = {((int64_t)sh->out_h - 1) * stride + kh - (int64_t)sh->height - pad,
                       ((int64_t)sh->out_w - 1) * stride + kh - (int64_t)sh->width - pad};
  dnnl_status_t st = md_of(&x_md, images, c, (int64_t)sh->height, (int64_t)sh->width, dnnl_bf16, dnnl_nhwc);
  if (st == dnnl_success) st = md_of(&y_md, images, k, (int64_t)sh->out_h, (int64_t)sh->out_w, dnnl_bf16, dnnl_nhwc);
  if (st == dnnl_success) st = md_of(&w_any, k, c, kh, kh, dnnl_bf16, dnnl_format_tag_any);
  if (st == dnnl_success) st = md_of(&dw_any, k, c, kh, kh, dnnl_f32, dnnl_format_tag_any);
  dnnl_convolution_desc_t fwd, bwd_data, bwd_weights;
  if (st == dnnl_success)
    st = dn.dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct, &x_md, &w_any,
                                               NULL, &y_md, strides, pad_l, pad_r);
  if (st == dnnl_success)
    st = dn.dnnl_convolution_backward_data_desc_init(&bwd_data, dnnl_convolution_direct, &x_md, &w_any, &y_md, strides,
                                                     pad_l, pad_r);
  if (st == dnnl_success)
    st = dn.dnnl_convolution_backward_weights_desc_init(&bwd_weights, dnnl_convolution_direct, &x_md, &dw_any, NULL,
                                                        &y_md, strides, pad_l, pad_r);
  dnnl_primitive_desc_t pd[3] = {NULL, NULL, NULL};
  if (st == dnnl_success) st = dn.dnnl_primitive_desc_create(&pd[0], &fwd, dn.attr, dn.engine, NULL);
  if (st == dnnl_success) st = dn.dnnl_primitive_desc_create(&pd[1], &bwd_data, dn.attr, dn.engine, pd[0]);
  if (st == dnnl_success) st = dn.dnnl_primitive_desc_create(&pd[2], &bwd_weights, dn.attr, dn.engine, pd[0]);
  const char *impl[3] = {NULL, NULL, NULL};
  for (int i = 0; st == dnnl_success && i < 3; i++)
    st = dn.dnnl_primitive_desc_query(pd[i], dnnl_query_impl_info_str, 0, &impl[i]);
  *amx = st == dnnl_success && is_amx(impl[0]) && is_amx(impl[1]) && is_amx(impl[2]);
  if (st == dnnl_success) snprintf(impl_out, impl_size, "%s", impl[0]);
  if (st == dnnl_success && *amx) {
    s->md[MD_X_NHWC] = x_md;
    s->md[MD_Y_NHWC] = y_md;
    s->md[MD_W_FWD] = *dn.dnnl_primitive_desc_query_md(pd[0], dnnl_query_weights_md, 0);
    s->md[MD_W_BWD] = *dn.dnnl_primitive_desc_query_md(pd[1], dnnl_query_weights_md, 0);
    s->md[MD_DW] = *dn.dnnl_primitive_desc_query_md(pd[2], dnnl_query_diff_weights_md, 0);
    static const int which[3] = {FWD, BWD_DATA, BWD_WEIGHTS};
    for (int i = 0; st == dnnl_success && i < 3; i++) {
      if (scratch_of(pd[i]) > *scratch) *scratch = scratch_of(pd[i]);
      st = dn.dnnl_primitive_create(&s->prim[which[i]], pd[i]);
    }
  }
  for (int i = 0; i < 3; i++)
    if (pd[i] != NULL) dn.dnnl_primitive_desc_destroy(pd[i]);
  return st;
}

/* *t holds at least `bytes` bytes of workspace. */
static lamp_status ensure_bytes(lamp_tensor **t, size_t bytes) {
  size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  int64_t shape[1] = {(int64_t)(floats ? floats : 1)};
  if (*t != NULL && lamp_tensor_nbytes(*t) >= bytes) return LAMP_OK;
  return lamp_tensor_ensure(t, LAMP_F32, LAMP_CPU, 1, shape, LAMP_MEM_WORKSPACE);
}

/* The weights' reorders between lamp's layout (OIHW) and the convolutions'. The images move
   between NCHW and NHWC in lamp's own kernels (nhwc.c), which run faster than oneDNN's reorder. */
static dnnl_status_t make_reorders(slice *s, const lamp_conv2d_shape *sh, size_t *scratch) {
  int64_t c = (int64_t)sh->in_channels, k = (int64_t)sh->out_channels, kh = (int64_t)sh->kernel;
  dnnl_memory_desc_t *md = s->md;
  dnnl_status_t st = md_of(&md[MD_W_OIHW], k, c, kh, kh, dnnl_f32, dnnl_oihw);
  if (st == dnnl_success) st = reorder_of(&s->prim[W_FWD], &md[MD_W_OIHW], &md[MD_W_FWD], scratch);
  if (st == dnnl_success) st = reorder_of(&s->prim[W_BWD], &md[MD_W_OIHW], &md[MD_W_BWD], scratch);
  if (st == dnnl_success) st = reorder_of(&s->prim[DW_OUT], &md[MD_DW], &md[MD_W_OIHW], scratch);
  dnnl_dims_t bytes = {(int64_t)(*scratch ? *scratch : 1)};
  if (st == dnnl_success) st = dn.dnnl_memory_desc_init_by_tag(&md[MD_SCRATCH], 1, bytes, dnnl_u8, dnnl_a);
  if (st == dnnl_success && s->stream == NULL)
    st = dn.dnnl_stream_create(&s->stream, dn.engine, dnnl_stream_default_flags);
  return st;
}

/*
** Slice s made for `images` images of the layer's shape (rebuilt when made for another count).
** *amx 0: oneDNN has no AMX implementation of this layer (nothing made).
*/
static lamp_status slice_make(lamp_conv_dnnl *layer, slice *s, const lamp_conv2d_shape *sh, int64_t images, int *amx) {
  *amx = 1;
  if (s->images == images) return LAMP_OK;
  slice_clear(s);
  size_t scratch = 0;
  dnnl_status_t st = make_convolutions(s, sh, images, layer->impl, sizeof layer->impl, amx, &scratch);
  if (st == dnnl_success && *amx) st = make_reorders(s, sh, &scratch);
  if (st != dnnl_success || !*amx) {
    slice_clear(s);
    return st == dnnl_success ? LAMP_OK : failed("set-up", st);
  }
  const dnnl_memory_desc_t *md = s->md;
  size_t *bytes = s->bytes;
  bytes[BUF_X] = bytes[BUF_DX] = dn.dnnl_memory_desc_get_size(&md[MD_X_NHWC]);
  bytes[BUF_Y] = bytes[BUF_DY] = dn.dnnl_memory_desc_get_size(&md[MD_Y_NHWC]);
  bytes[BUF_SCRATCH] = scratch;
  bytes[BUF_W_FWD] = dn.dnnl_memory_desc_get_size(&md[MD_W_FWD]);
  bytes[BUF_W_BWD] = dn.dnnl_memory_desc_get_size(&md[MD_W_BWD]);
  bytes[BUF_DW] = dn.dnnl_memory_desc_get_size(&md[MD_DW]);
  bytes[BUF_DW_OIHW] = dn.dnnl_memory_desc_get_size(&md[MD_W_OIHW]);
  lamp_status ls = LAMP_OK;
  for (int i = SHARED_BUFS; ls == LAMP_OK && i < BUFS; i++) ls = ensure_bytes(&s->buf[i], bytes[i]);
  if (ls != LAMP_OK) {
    slice_clear(s);
    return ls;
  }
  s->images = images;
  return LAMP_OK;
}

/* ---- running them ---------------------------------------------------------------------------- */

static void *buf(const slice *s, int i) {
  return lamp_tensor_data(i < SHARED_BUFS ? shared[s->worker].buf[i] : s->buf[i]);
}

/* One argument of an execution: its name, its layout and where its data is. */
typedef struct arg {
  int name;
  const dnnl_memory_desc_t *md;
  const void *data;
} arg;

/* Primitive `which` of slice s run on its stream with n arguments and its scratchpad. */
static lamp_status run(slice *s, int which, const arg *args, int n, const char *what) {
  arg all[4];
  dnnl_memory_t mem[4] = {NULL};
  dnnl_exec_arg_t exec[4];
  dnnl_status_t st = dnnl_success;
  int made = 0;
  memcpy(all, args, (size_t)n * sizeof *args);
  all[n] = (arg){DNNL_ARG_SCRATCHPAD, &s->md[MD_SCRATCH], buf(s, BUF_SCRATCH)};
  for (int i = 0; st == dnnl_success && i <= n; i++) {
    st = dn.dnnl_memory_create(&mem[i], all[i].md, dn.engine, (void *)(uintptr_t)all[i].data);
    exec[i] = (dnnl_exec_arg_t){all[i].name, mem[i]};
    made += st == dnnl_success;
  }
  if (st == dnnl_success) st = dn.dnnl_primitive_execute(s->prim[which], s->stream, n + 1, exec);
  for (int i = 0; i < made; i++) dn.dnnl_memory_destroy(mem[i]);
  return st == dnnl_success ? LAMP_OK : failed(what, st);
}

static lamp_status reorder(slice *s, int which, int from, const void *src, int to, const void *dst, const char *what) {
  arg args[2] = {{DNNL_ARG_FROM, &s->md[from], src}, {DNNL_ARG_TO, &s->md[to], dst}};
  return run(s, which, args, 2, what);
}

/* Where image `s` of a bf16 tensor of `image` elements per image starts. */
static const void *image_at(const void *t, size_t image, size_t s) { return (const char *)t + image * s * 2; }

/* One pass's job: the call, the layer, and how its images are cut into slices. */
typedef struct job {
  lamp_conv_dnnl *layer;
  const lamp_conv2d_args *a;
  size_t slices, image_in, image_out;
  int grads;
} job;

static size_t first_image(const job *j, size_t t) { return j->a->shape.batch * t / j->slices; }

static job job_of(lamp_conv_dnnl *layer, const lamp_conv2d_args *a, int grads) {
  size_t slices = lamp_cpu_threads(), by_size = (a->shape.batch + SLICE_IMAGES - 1) / SLICE_IMAGES;
  if (by_size > slices) slices = by_size;
  if (slices > LAMP_CPU_MAX_WORKERS) slices = LAMP_CPU_MAX_WORKERS;
  if (slices > a->shape.batch) slices = a->shape.batch;
  return (job){layer,
               a,
               slices ? slices : 1,
               a->shape.in_channels * a->shape.height * a->shape.width,
               a->shape.out_channels * a->shape.out_h * a->shape.out_w,
               grads};
}

/* Where image `s` of a bf16 tensor of `image` elements per image starts, to be written. */
static void *image_to(void *t, size_t image, size_t s) { return (char *)t + image * s * 2; }

/* The slice's images of x (NCHW) into its NHWC buffer; dy the same. */
static void x_to_nhwc(const job *j, slice *s, size_t first) {
  const lamp_conv2d_shape *sh = &j->a->shape;
  lamp_cpu_nchw_to_nhwc16(buf(s, BUF_X), image_at(j->a->x, j->image_in, first), (size_t)s->images, sh->in_channels,
                          sh->height * sh->width);
}

static void dy_to_nhwc(const job *j, slice *s, size_t first) {
  const lamp_conv2d_shape *sh = &j->a->shape;
  lamp_cpu_nchw_to_nhwc16(buf(s, BUF_DY), image_at(j->a->dy, j->image_out, first), (size_t)s->images, sh->out_channels,
                          sh->out_h * sh->out_w);
}

/* The slice's y and dx from its NHWC buffers into the NCHW tensors. */
static void y_to_nchw(const job *j, slice *s, size_t first) {
  const lamp_conv2d_shape *sh = &j->a->shape;
  lamp_cpu_nhwc_to_nchw16(image_to(j->a->y, j->image_out, first), buf(s, BUF_Y), (size_t)s->images, sh->out_channels,
                          sh->out_h * sh->out_w);
}

static void dx_to_nchw(const job *j, slice *s, size_t first) {
  const lamp_conv2d_shape *sh = &j->a->shape;
  lamp_cpu_nhwc_to_nchw16(image_to(j->a->dx, j->image_in, first), buf(s, BUF_DX), (size_t)s->images, sh->in_channels,
                          sh->height * sh->width);
}

static lamp_status forward_task(void *ctx, size_t worker, size_t t) {
  const job *j = ctx;
  const lamp_conv2d_args *a = j->a;
  slice *s = &j->layer->slices[t];
  s->worker = worker;
  size_t first = first_image(j, t);
  on_this_thread();
  lamp_status st = reorder(s, W_FWD, MD_W_OIHW, a->weight, MD_W_FWD, buf(s, BUF_W_FWD), "weight reorder");
  if (st == LAMP_OK) {
    x_to_nhwc(j, s, first);
    arg args[3] = {{DNNL_ARG_SRC, &s->md[MD_X_NHWC], buf(s, BUF_X)},
                   {DNNL_ARG_WEIGHTS, &s->md[MD_W_FWD], buf(s, BUF_W_FWD)},
                   {DNNL_ARG_DST, &s->md[MD_Y_NHWC], buf(s, BUF_Y)}};
    st = run(s, FWD, args, 3, "forward convolution");
  }
  if (st == LAMP_OK) y_to_nchw(j, s, first);
  return st;
}

/* Slice t's input gradient and its share of the weight gradient. */
static lamp_status backward_task(void *ctx, size_t worker, size_t t) {
  const job *j = ctx;
  const lamp_conv2d_args *a = j->a;
  slice *s = &j->layer->slices[t];
  s->worker = worker;
  size_t first = first_image(j, t);
  on_this_thread();
  dy_to_nhwc(j, s, first);
  lamp_status st = LAMP_OK;
  if (a->dx != NULL) {
    st = reorder(s, W_BWD, MD_W_OIHW, a->weight, MD_W_BWD, buf(s, BUF_W_BWD), "weight reorder");
    arg args[3] = {{DNNL_ARG_DIFF_DST, &s->md[MD_Y_NHWC], buf(s, BUF_DY)},
                   {DNNL_ARG_WEIGHTS, &s->md[MD_W_BWD], buf(s, BUF_W_BWD)},
                   {DNNL_ARG_DIFF_SRC, &s->md[MD_X_NHWC], buf(s, BUF_DX)}};
    if (st == LAMP_OK) st = run(s, BWD_DATA, args, 3, "input-gradient convolution");
    if (st == LAMP_OK) dx_to_nchw(j, s, first);
  }
  if (st == LAMP_OK && j->grads) {
    x_to_nhwc(j, s, first);
    arg args[3] = {{DNNL_ARG_SRC, &s->md[MD_X_NHWC], buf(s, BUF_X)},
                   {DNNL_ARG_DIFF_DST, &s->md[MD_Y_NHWC], buf(s, BUF_DY)},
                   {DNNL_ARG_DIFF_WEIGHTS, &s->md[MD_DW], buf(s, BUF_DW)}};
    st = run(s, BWD_WEIGHTS, args, 3, "weight-gradient convolution");
    if (st == LAMP_OK)
      st = reorder(s, DW_OUT, MD_DW, buf(s, BUF_DW), MD_W_OIHW, buf(s, BUF_DW_OIHW), "weight-gradient reorder");
  }
  return st;
}

/* The slices' weight gradients added in slice order, then into the slab. */
static lamp_status finish_grads(const job *j) {
  const lamp_conv2d_args *a = j->a;
  size_t nw = a->shape.out_channels * a->shape.in_channels * a->shape.kernel * a->shape.kernel;
  float *sum = buf(&j->layer->slices[0], BUF_DW_OIHW);
  lamp_status st = LAMP_OK;
  for (size_t t = 1; st == LAMP_OK && t < j->slices; t++)
    st = lamp_cpu_axpy(sum, buf(&j->layer->slices[t], BUF_DW_OIHW), nw, 1.0f);
  if (st == LAMP_OK) st = lamp_cpu_add_grad(a->grad_weight, sum, nw, a->grad_dtype, a->overwrite_grads);
  return st;
}

lamp_status lamp_cpu_conv_dnnl_forward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a) {
  job j = job_of(layer, a, 0);
  return lamp_cpu_parallel_for(j.slices, forward_task, &j);
}

lamp_status lamp_cpu_conv_dnnl_backward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a) {
  job j = job_of(layer, a, a->grad_weight != NULL);
  lamp_status st = lamp_cpu_parallel_for(j.slices, backward_task, &j);
  if (st == LAMP_OK && j.grads) st = finish_grads(&j);
  return st;
}

/* ---- which layers ---------------------------------------------------------------------------- */

/* The call is one this file serves: bf16 through and through, no bias, no groups, some images. */
static int call_fits(const lamp_conv2d_args *a, int backward) {
  const lamp_conv2d_shape *s = &a->shape;
  if (a->compute != LAMP_BF16 || a->x_dtype != LAMP_BF16 || a->bias != NULL || a->operand_dtype != LAMP_F32) return 0;
  if (s->batch == 0 || s->groups != 1 || s->dilation != 1 || s->padding >= s->kernel) return 0;
  if (!backward) return a->y_dtype == LAMP_BF16;
  return a->dy_dtype == LAMP_BF16 && (a->dx == NULL || a->dx_dtype == LAMP_BF16);
}

static pthread_once_t why_once = PTHREAD_ONCE_INIT;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void warn_no_isa(void) {
  lamp_log(LAMP_LOG_WARN, NULL,
           "LAMP_CONV_BF16=dnnl: this CPU has no AVX512_BF16, so no AMX; using the direct kernels");
}

static void warn_unavailable(void) {
  lamp_log(LAMP_LOG_WARN, NULL,
           "LAMP_CONV_BF16=dnnl: oneDNN's convolution is not available: %s; using the direct kernels", dn.why);
}

/*
** The slices of this call made and the shared buffers it uses sized (in this thread, before the
** parallel loop); 0 when oneDNN has no AMX implementation for one of them, which for the first
** call decides the layer.
*/
static int slices_made(lamp_conv_dnnl *layer, const lamp_conv2d_args *a, int backward) {
  job j = job_of(layer, a, 0);
  lamp_status st = LAMP_OK;
  int amx = 1;
  /* the threads' buffers this pass uses, and the most bytes of each that a slice needs */
  int uses[SHARED_BUFS] = {[BUF_X] = !backward || a->grad_weight != NULL,
                           [BUF_Y] = !backward,
                           [BUF_DY] = backward,
                           [BUF_DX] = backward && a->dx != NULL,
                           [BUF_SCRATCH] = 1};
  size_t most[SHARED_BUFS] = {0}, threads = lamp_cpu_threads();
  if (threads > LAMP_CPU_MAX_WORKERS) threads = LAMP_CPU_MAX_WORKERS;
  on_this_thread();
  for (size_t t = 0; st == LAMP_OK && amx && t < j.slices; t++) {
    slice *s = &layer->slices[t];
    st = slice_make(layer, s, &a->shape, (int64_t)(first_image(&j, t + 1) - first_image(&j, t)), &amx);
    for (int i = 0; i < SHARED_BUFS; i++)
      if (s->bytes[i] > most[i]) most[i] = s->bytes[i];
  }
  for (size_t w = 0; st == LAMP_OK && amx && w < threads; w++)
    for (int i = 0; st == LAMP_OK && i < SHARED_BUFS; i++)
      if (uses[i]) st = ensure_bytes(&shared[w].buf[i], most[i]);
  if (st != LAMP_OK) lamp_log(LAMP_LOG_DEBUG, NULL, "conv2d: oneDNN declined a layer: %s", lamp_last_error());
  if (layer->verdict == 0 && st == LAMP_OK && !amx && dnnl_forced())
    lamp_log(LAMP_LOG_WARN, NULL,
             "LAMP_CONV_BF16=dnnl: oneDNN runs a layer as %s, not on AMX; using the direct kernels", layer->impl);
  if (layer->verdict == 0) layer->verdict = st == LAMP_OK && amx ? 1 : -1;
  return st == LAMP_OK && amx;
}

int lamp_cpu_conv_dnnl_takes(lamp_conv_dnnl **slot, const lamp_conv2d_args *a, int backward) {
  lamp_conv_dnnl *layer = *slot;
  if (layer != NULL && layer->verdict < 0) return 0;
  if (!call_fits(a, backward) || !dnnl_allowed()) return 0;
  /* every AMX CPU has AVX512_BF16; without it (or under LAMP_CPU_ISA) lamp's kernels run */
  if (!lamp_cpu_has(LAMP_ISA_AVX512BF16)) {
    if (dnnl_forced()) pthread_once(&isa_once, warn_no_isa);
    return 0;
  }
  pthread_once(&load_once, load);
  if (!dn.ready) {
    if (dnnl_forced()) pthread_once(&why_once, warn_unavailable);
    return 0;
  }
  if (layer == NULL) {
    if ((layer = calloc(1, sizeof *layer)) == NULL) return 0; /* the direct kernels need no more memory */
    live_layers++;
    *slot = layer;
  }
  return slices_made(layer, a, backward);
}

const char *lamp_cpu_conv_dnnl_impl(const lamp_conv_dnnl *layer) {
  return layer != NULL && layer->verdict > 0 ? layer->impl : NULL;
}

void lamp_cpu_conv_dnnl_free(lamp_conv_dnnl *layer) {
  if (layer == NULL) return;
  for (size_t t = 0; t < LAMP_CPU_MAX_WORKERS; t++) {
    slice *s = &layer->slices[t];
    slice_clear(s);
    for (int i = 0; i < BUFS; i++) lamp_tensor_release(s->buf[i]);
    if (s->stream != NULL) dn.dnnl_stream_destroy(s->stream);
  }
  free(layer);
  if (--live_layers > 0) return;
  for (size_t t = 0; t < LAMP_CPU_MAX_WORKERS; t++)
    for (int i = 0; i < SHARED_BUFS; i++) {
      lamp_tensor_release(shared[t].buf[i]);
      shared[t].buf[i] = NULL;
    }
}

#else /* no oneDNN headers at build time */

struct lamp_conv_dnnl {
  int unused;
};

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;

static void warn_no_headers(void) {
  lamp_log(LAMP_LOG_WARN, NULL,
           "LAMP_CONV_BF16=dnnl: lamp was built without oneDNN's headers "
           "(oneapi/dnnl/dnnl.h); using the direct kernels");
}

int lamp_cpu_conv_dnnl_takes(lamp_conv_dnnl **layer, const lamp_conv2d_args *a, int backward) {
  (void)layer, (void)a, (void)backward;
  if (dnnl_allowed() && dnnl_forced()) pthread_once(&warn_once, warn_no_headers);
  return 0;
}

lamp_status lamp_cpu_conv_dnnl_forward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a) {
  (void)layer, (void)a;
  return lamp_error(LAMP_ERR_INTERNAL, "conv2d: oneDNN's convolution is not in this build");
}

lamp_status lamp_cpu_conv_dnnl_backward(lamp_conv_dnnl *layer, const lamp_conv2d_args *a) {
  (void)layer, (void)a;
  return lamp_error(LAMP_ERR_INTERNAL, "conv2d: oneDNN's convolution is not in this build");
}

const char *lamp_cpu_conv_dnnl_impl(const lamp_conv_dnnl *layer) {
  (void)layer;
  return NULL;
}

void lamp_cpu_conv_dnnl_free(lamp_conv_dnnl *layer) { free(layer); }

#endif
