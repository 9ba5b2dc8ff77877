/*
** Convolution on CUDA (the coarse operation of backend.h), NCHW, through cuDNN's graph API.
**
** Each of the three products (forward, backward-data, backward-filter) is a one-operation graph
** whose execution plan is made on the layer's first call of it and kept in the layer's plan,
** keyed by the shape, the compute dtype and the operands' alignment, a few keys per product
** (conv_cache.h). cuDNN is opened on the first convolution (cudnn_lib.h).
**
** Numerics, as the CPU (core/backend/cpu/conv2d.c): cuDNN reads x, dy and W in the compute
** dtype (converted into scratch where they arrive in another) and accumulates in fp32
** (CUDNN_DATA_FLOAT compute type). The products are written in fp32 where an engine can do that
** from 16-bit operands, so the bias is added to the fp32 product and y, dx and the gradients are
** each rounded once, as on the CPU; where no engine can (checked when the plan is made), cuDNN
** writes the compute dtype and the result takes that rounding first.
**
** Engines (lamp_cuda_conv_engine_acceptable): only deterministic ones (no NONDETERMINISTIC note: the same bits
** on every run); under fp32 none that notes TENSOR_CORE or DOWN_CONVERT_INPUTS, since on this
** generation those are TF32, which rounds fp32 operands to 10 mantissa bits (lamp's fp32 is true
** fp32, as its GEMM); never REDUCED_PRECISION_REDUCTION (16-bit partial sums: fp32 accumulation
** is the contract), FFT or WINOGRAD (their transforms add rounding beyond a direct product's, so
** the GEMM-like error bound of the GPU check would not hold).
**
** Memory: the converted operands, the fp32 results and cuDNN's workspace share one request of
** the module's scratch buffer per call (charged to the ledger as workspace by memory.c).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/conv_cache.h"
#include "backend/cuda/conv_kernels.h"
#include "backend/cuda/cudnn_lib.h"
#include "backend/cuda/kernels.h"

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER, CONV_OPS };
enum { UID_X = 1, UID_W = 2, UID_Y = 3 }; /* of each graph: its input, weights and output side */
#define MAX_DESCS 8

typedef lamp_conv_key conv_key;

/* One product's plan for one key, and every descriptor it was made from (destroyed with it). */
typedef struct conv_op {
  lamp_conv_way way;
  cudnnBackendDescriptor_t descs[MAX_DESCS];
  size_t n_descs;
  cudnnBackendDescriptor_t plan;
  int64_t workspace;
  lamp_dtype out_dtype; /* what cuDNN writes: fp32, or the compute dtype */
} conv_op;

typedef struct conv_plan {
  conv_op ops[CONV_OPS][LAMP_CONV_CACHE_WAYS];
  uint64_t calls; /* the clock of the ways' last use */
} conv_plan;

static const char *const op_what[CONV_OPS] = {"forward", "backward-data", "backward-filter"};

/* ---- arguments (the CPU's checks and words, core/backend/cpu/conv2d.c) --------------------- */

static lamp_status check_shape(const lamp_conv2d_shape *s) {
  if (s->groups == 0 || s->in_channels % s->groups || s->out_channels % s->groups || s->kernel == 0 ||
      s->stride == 0 || s->dilation == 0 || s->out_h == 0 || s->out_w == 0)
    return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG,
                                "conv2d: inconsistent shape (in %zu, out %zu, groups %zu, kernel %zu)", s->in_channels,
                                s->out_channels, s->groups, s->kernel);
  return LAMP_OK;
}

static lamp_status check_common(const char *fn, const lamp_conv2d_args *a) {
  lamp_status s = check_shape(&a->shape);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "x", a->x_dtype);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "compute", a->compute);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "operand", a->operand_dtype);
  return s;
}

/* ---- sizes --------------------------------------------------------------------------------- */

static size_t x_count(const lamp_conv2d_shape *s) { return s->batch * s->in_channels * s->height * s->width; }
static size_t y_count(const lamp_conv2d_shape *s) { return s->batch * s->out_channels * s->out_h * s->out_w; }
static size_t w_count(const lamp_conv2d_shape *s) {
  return s->out_channels * (s->in_channels / s->groups) * s->kernel * s->kernel;
}

/* Scratch regions start on 256-byte boundaries. */
static size_t region(size_t bytes) { return (bytes + 255u) & ~(size_t)255u; }

/* ---- descriptors ---------------------------------------------------------------------------- */

/* What building a plan needs at hand. */
typedef struct builder {
  const char *fn;
  const lamp_cudnn_api *api;
  cudnnHandle_t handle;
  conv_op *op;
} builder;

static cudnnDataType_t cudnn_type(lamp_dtype dtype) {
  return dtype == LAMP_F16 ? CUDNN_DATA_HALF : dtype == LAMP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static lamp_status check(const builder *b, cudnnStatus_t st, const char *what) {
  return lamp_cudnn_status(b->api, st, b->fn, what);
}

/* A new descriptor, owned by the op (destroyed with it). */
static lamp_status create(const builder *b, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
  if (b->op->n_descs == MAX_DESCS)
    return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: cudnn: more than %d descriptors for a plan", b->fn, MAX_DESCS);
  lamp_status s = check(b, b->api->BackendCreateDescriptor(type, out), "cudnnBackendCreateDescriptor");
  if (s == LAMP_OK) b->op->descs[b->op->n_descs++] = *out;
  return s;
}

static lamp_status set(const builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                       cudnnBackendAttributeType_t type, int64_t count, const void *value) {
  return check(b, b->api->BackendSetAttribute(d, name, type, count, value), "cudnnBackendSetAttribute");
}

/* A packed NCHW tensor [n, c, h, w] of `dtype`. */
static lamp_status tensor(const builder *b, int64_t uid, lamp_dtype dtype, size_t n, size_t c, size_t h, size_t w,
                          int aligned, cudnnBackendDescriptor_t *out) {
  int64_t dims[4] = {(int64_t)n, (int64_t)c, (int64_t)h, (int64_t)w};
  int64_t strides[4] = {(int64_t)(c * h * w), (int64_t)(h * w), (int64_t)w, 1};
  int64_t alignment = aligned ? 16 : (int64_t)lamp_cuda_dtype_size(dtype);
  cudnnDataType_t type = cudnn_type(dtype);
  lamp_status s = create(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (s == LAMP_OK) s = check(b, b->api->BackendFinalize(*out), "finalizing a tensor");
  return s;
}

/* Cross-correlation (PyTorch's convolution) with fp32 accumulation. */
static lamp_status convolution(const builder *b, const lamp_conv2d_shape *sh, cudnnBackendDescriptor_t *out) {
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t dims = 2, stride[2] = {(int64_t)sh->stride, (int64_t)sh->stride};
  int64_t pad[2] = {(int64_t)sh->padding, (int64_t)sh->padding};
  int64_t dil[2] = {(int64_t)sh->dilation, (int64_t)sh->dilation};
  lamp_status s = create(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  if (s == LAMP_OK) s = set(b, *out, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  if (s == LAMP_OK) s = check(b, b->api->BackendFinalize(*out), "finalizing a convolution");
  return s;
}

/* The attribute names of one operation kind: its descriptor type, then conv, x, w, y (or dx,
   dy, dw in that kind's roles), alpha, beta. */
typedef struct op_names {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t conv, x, w, y, alpha, beta;
} op_names;

static const op_names names[CONV_OPS] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

/*
** The operation graph of one product: x, w and y tensors in the compute dtype but for the
** product's output, which is `out` (UIDs: x, w, y whatever the roles). Its output is written
** (alpha 1, beta 0).
*/
static lamp_status graph(const builder *b, int kind, const conv_key *k, lamp_dtype out, cudnnBackendDescriptor_t *g) {
  const lamp_conv2d_shape *sh = &k->shape;
  lamp_dtype io = k->compute;
  lamp_dtype xt = kind == CONV_BWD_DATA ? out : io, wt = kind == CONV_BWD_FILTER ? out : io,
             yt = kind == CONV_FWD ? out : io;
  cudnnBackendDescriptor_t x, w, y, conv, op;
  float alpha = 1.0f, beta = 0.0f;
  const op_names *n = &names[kind];
  lamp_status s = tensor(b, UID_X, xt, sh->batch, sh->in_channels, sh->height, sh->width, k->aligned, &x);
  if (s == LAMP_OK)
    s = tensor(b, UID_W, wt, sh->out_channels, sh->in_channels / sh->groups, sh->kernel, sh->kernel, k->aligned, &w);
  if (s == LAMP_OK) s = tensor(b, UID_Y, yt, sh->batch, sh->out_channels, sh->out_h, sh->out_w, k->aligned, &y);
  if (s == LAMP_OK) s = convolution(b, sh, &conv);
  if (s == LAMP_OK) s = create(b, n->type, &op);
  if (s == LAMP_OK) s = set(b, op, n->conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  if (s == LAMP_OK) s = set(b, op, n->x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (s == LAMP_OK) s = set(b, op, n->w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
  if (s == LAMP_OK) s = set(b, op, n->y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  if (s == LAMP_OK) s = set(b, op, n->alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  if (s == LAMP_OK) s = set(b, op, n->beta, CUDNN_TYPE_FLOAT, 1, &beta);
  if (s == LAMP_OK) s = check(b, b->api->BackendFinalize(op), "finalizing a convolution operation");
  if (s == LAMP_OK) s = create(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, g);
  if (s == LAMP_OK) s = set(b, *g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  if (s == LAMP_OK) s = set(b, *g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->handle);
  if (s == LAMP_OK) s = check(b, b->api->BackendFinalize(*g), "finalizing an operation graph");
  return s;
}

static const char *compute_name(lamp_dtype d) { return d == LAMP_F16 ? "f16" : d == LAMP_BF16 ? "bf16" : "f32"; }

/* ---- engines -------------------------------------------------------------------------------- */

int lamp_cuda_conv_engine_acceptable(const cudnnBackendNumericalNote_t *notes, int64_t count, lamp_dtype compute) {
  for (int64_t i = 0; i < count; i++) switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      case CUDNN_NUMERICAL_NOTE_FFT:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return 0;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        if (compute == LAMP_F32) return 0;
        break;
      default: break;
    }
  return 1;
}

/* The numerical notes of an engine configuration's engine; a configuration whose notes cannot be
   read is not used (the caller skips it on any failure, so none is reported). */
static cudnnStatus_t notes_of(const builder *b, cudnnBackendDescriptor_t cfg, cudnnBackendNumericalNote_t *notes,
                              int64_t *count) {
  cudnnBackendDescriptor_t engine = NULL;
  int64_t got = 0;
  cudnnStatus_t st = b->api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = b->api->BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine);
  if (st == CUDNN_STATUS_SUCCESS)
    st = b->api->BackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, count, notes);
  b->api->BackendDestroyDescriptor(engine);
  return st;
}

/* An execution plan of cfg, or CUDNN's refusal (not reported: the caller tries the next). */
static cudnnStatus_t try_plan(const builder *b, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *out) {
  cudnnBackendDescriptor_t plan = NULL;
  cudnnStatus_t st = b->api->BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = b->api->BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->handle);
  if (st == CUDNN_STATUS_SUCCESS)
    st = b->api->BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfg);
  if (st == CUDNN_STATUS_SUCCESS) st = b->api->BackendFinalize(plan);
  if (st != CUDNN_STATUS_SUCCESS) {
    b->api->BackendDestroyDescriptor(plan);
    return st;
  }
  *out = plan;
  return st;
}

#define MAX_CONFIGS 64

/* The first acceptable engine configuration of the heuristics in `mode` that makes a plan. */
static lamp_status plan_from_heuristics(const builder *b, cudnnBackendDescriptor_t g, cudnnBackendHeurMode_t mode,
                                        lamp_dtype compute, int *found) {
  cudnnBackendDescriptor_t heur = NULL, cfgs[MAX_CONFIGS] = {0};
  int64_t count = 0;
  *found = 0;
  lamp_status s = check(b, b->api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur),
                        "cudnnBackendCreateDescriptor");
  if (s != LAMP_OK) return s;
  s = set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  if (s == LAMP_OK) s = set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  /* A graph no engine supports fails here; that is "none found", not an error. */
  if (s == LAMP_OK && b->api->BackendFinalize(heur) != CUDNN_STATUS_SUCCESS) {
    b->api->BackendDestroyDescriptor(heur);
    return LAMP_OK;
  }
  int64_t made = 0;
  for (; s == LAMP_OK && made < MAX_CONFIGS; made++)
    s = check(b, b->api->BackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]),
              "cudnnBackendCreateDescriptor");
  if (s == LAMP_OK)
    s = check(b, b->api->BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             MAX_CONFIGS, &count, cfgs),
              "reading the heuristics' results");
  for (int64_t i = 0; s == LAMP_OK && !*found && i < count && i < MAX_CONFIGS; i++) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n_notes = 0;
    if (notes_of(b, cfgs[i], notes, &n_notes) != CUDNN_STATUS_SUCCESS ||
        !lamp_cuda_conv_engine_acceptable(notes, n_notes, compute))
      continue;
    if (try_plan(b, cfgs[i], &b->op->plan) != CUDNN_STATUS_SUCCESS) continue;
    *found = 1;
    b->op->descs[b->op->n_descs++] = cfgs[i]; /* the plan refers to it: kept as long as the plan */
    cfgs[i] = NULL;
  }
  for (int64_t i = 0; i < made; i++)
    if (cfgs[i] != NULL) b->api->BackendDestroyDescriptor(cfgs[i]);
  b->api->BackendDestroyDescriptor(heur);
  return s;
}

static void op_clear(const lamp_cudnn_api *api, conv_op *op) {
  if (op->plan != NULL) api->BackendDestroyDescriptor(op->plan);
  for (size_t i = op->n_descs; i-- > 0;) api->BackendDestroyDescriptor(op->descs[i]);
  memset(op, 0, sizeof *op);
}

/*
** The plan of one product for key k: with an fp32 output if an acceptable engine writes one,
** else with the compute dtype's. Heuristics INSTANT first, then FALLBACK (which lists more
** engines, some the fast modes leave out).
*/
static lamp_status build(const builder *b, int kind, const conv_key *k) {
  static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_FALLBACK};
  lamp_dtype outs[2] = {LAMP_F32, k->compute};
  int found = 0;
  lamp_status s = LAMP_OK;
  for (int o = 0; s == LAMP_OK && !found && o < (k->compute == LAMP_F32 ? 1 : 2); o++)
    for (int m = 0; s == LAMP_OK && !found && m < 2; m++) {
      cudnnBackendDescriptor_t g = NULL;
      op_clear(b->api, b->op);
      s = graph(b, kind, k, outs[o], &g);
      if (s == LAMP_OK) s = plan_from_heuristics(b, g, modes[m], k->compute, &found);
      if (found) b->op->out_dtype = outs[o];
    }
  if (s == LAMP_OK && !found)
    s = lamp_cuda_svc->error(LAMP_ERR_UNSUPPORTED,
                             "%s: cudnn: no deterministic engine for the %s convolution (%s, in %zu, out %zu, groups "
                             "%zu, kernel %zu, stride %zu, padding %zu, dilation %zu)",
                             b->fn, op_what[kind], compute_name(k->compute), k->shape.in_channels,
                             k->shape.out_channels, k->shape.groups, k->shape.kernel, k->shape.stride,
                             k->shape.padding, k->shape.dilation);
  if (s == LAMP_OK)
    s = check(b, b->api->BackendGetAttribute(b->op->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                             1, &(int64_t){0}, &b->op->workspace),
              "reading a plan's workspace size");
  if (s != LAMP_OK) {
    op_clear(b->api, b->op);
    return s;
  }
  b->op->way.key = *k;
  b->op->way.built = 1;
  return LAMP_OK;
}

/* The layer's plan (made on its first call) with product `kind` ready for key k. */
static lamp_status op_for(const builder *base, void **slot, int kind, const conv_key *k, conv_op **out) {
  conv_plan *p = *slot;
  if (p == NULL) {
    p = calloc(1, sizeof *p);
    if (p == NULL) return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "%s: out of memory for a plan", base->fn);
    *slot = p;
  }
  const lamp_conv_way *ways[LAMP_CONV_CACHE_WAYS];
  for (size_t i = 0; i < LAMP_CONV_CACHE_WAYS; i++) ways[i] = &p->ops[kind][i].way;
  int hit = 0;
  conv_op *op = &p->ops[kind][lamp_cuda_conv_pick(ways, LAMP_CONV_CACHE_WAYS, k, &hit)];
  lamp_status s = LAMP_OK;
  if (!hit) {
    builder b = *base;
    b.op = op;
    s = build(&b, kind, k); /* clears what the way held first */
  }
  if (s == LAMP_OK) op->way.used = ++p->calls;
  *out = op;
  return s;
}

void lamp_cuda_conv2d_plan_free(void *plan) {
  conv_plan *p = plan;
  if (p == NULL) return;
  const lamp_cudnn_api *api = NULL;
  /* A plan holds descriptors only if the library was opened, so this finds it open. */
  if (lamp_cudnn_api_get("conv2d_plan_free", &api) == LAMP_OK)
    for (int i = 0; i < CONV_OPS; i++)
      for (int w = 0; w < LAMP_CONV_CACHE_WAYS; w++) op_clear(api, &p->ops[i][w]);
  free(p);
}

/* ---- execution ------------------------------------------------------------------------------ */

static lamp_status execute(const builder *b, const conv_op *op, void *x, void *w, void *y, void *workspace) {
  int64_t uids[3] = {UID_X, UID_W, UID_Y};
  void *ptrs[3] = {x, w, y};
  cudnnBackendDescriptor_t pack = NULL;
  lamp_status s = check(b, b->api->BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack),
                        "cudnnBackendCreateDescriptor");
  if (s != LAMP_OK) return s;
  s = set(b, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  if (s == LAMP_OK) s = set(b, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  if (s == LAMP_OK) s = set(b, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (s == LAMP_OK) s = check(b, b->api->BackendFinalize(pack), "finalizing a variant pack");
  if (s == LAMP_OK) s = check(b, b->api->BackendExecute(b->handle, op->plan, pack), "cudnnBackendExecute");
  b->api->BackendDestroyDescriptor(pack);
  return s;
}

/* Carves regions out of one scratch request. */
typedef struct carver {
  char *base;
  size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
  if (bytes == 0) return NULL;
  void *p = c->base + c->used;
  c->used += region(bytes);
  return p;
}

/* src as the compute dtype: itself, or converted into dst. */
static lamp_status operand(const void *src, lamp_dtype dtype, lamp_dtype compute, void *dst, size_t n,
                           const void **out) {
  if (dtype == compute) {
    *out = src;
    return LAMP_OK;
  }
  *out = dst;
  return lamp_cuda_convert(dst, compute, src, dtype, n);
}

static size_t operand_bytes(lamp_dtype dtype, lamp_dtype compute, size_t n) {
  return dtype == compute ? 0 : region(n * lamp_cuda_dtype_size(compute));
}

/* The handle and the table; the key of this call. */
static lamp_status begin(const char *fn, const lamp_conv2d_args *a, const void *const *ptrs, size_t n_ptrs,
                         builder *b, conv_key *k) {
  *k = lamp_cuda_conv_key(&a->shape, a->compute, ptrs, n_ptrs);
  memset(b, 0, sizeof *b);
  b->fn = fn;
  return lamp_cudnn_handle(fn, &b->api, &b->handle);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

lamp_status lamp_cuda_conv2d_forward(void **plan, const lamp_conv2d_args *a) {
  const char *fn = "conv2d_forward";
  lamp_status s = check_common(fn, a);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "y", a->y_dtype);
  if (s != LAMP_OK || a->shape.batch == 0) return s;
  const lamp_conv2d_shape *sh = &a->shape;
  size_t nx = x_count(sh), nw = w_count(sh), ny = y_count(sh);
  builder b;
  conv_key k;
  conv_op *op;
  const void *ptrs[] = {a->x, a->weight, a->y};
  s = begin(fn, a, ptrs, 3, &b, &k);
  if (s == LAMP_OK) s = op_for(&b, plan, CONV_FWD, &k, &op);
  if (s != LAMP_OK) return s;
  /* cuDNN writes y itself when it holds what cuDNN writes and no bias is added after. */
  int direct = op->out_dtype == a->y_dtype && a->bias == NULL;
  size_t bytes = operand_bytes(a->x_dtype, a->compute, nx) + operand_bytes(a->operand_dtype, a->compute, nw) +
                 (direct ? 0 : region(ny * lamp_cuda_dtype_size(op->out_dtype))) + region((size_t)op->workspace);
  carver c = {NULL, 0};
  if (bytes > 0) s = lamp_cuda_scratch(bytes, (void **)&c.base);
  const void *x = NULL, *w = NULL;
  if (s == LAMP_OK) s = operand(a->x, a->x_dtype, a->compute, carve(&c, operand_bytes(a->x_dtype, a->compute, nx)), nx, &x);
  if (s == LAMP_OK)
    s = operand(a->weight, a->operand_dtype, a->compute, carve(&c, operand_bytes(a->operand_dtype, a->compute, nw)), nw,
                &w);
  if (s != LAMP_OK) return s;
  void *out = direct ? a->y : carve(&c, ny * lamp_cuda_dtype_size(op->out_dtype));
  void *ws = carve(&c, (size_t)op->workspace);
  s = execute(&b, op, (void *)x, (void *)w, out, ws);
  if (s != LAMP_OK || direct) return s;
  if (a->bias == NULL) return lamp_cuda_convert(a->y, a->y_dtype, out, op->out_dtype, ny);
  return lamp_cuda_conv_bias_forward(a->y, a->y_dtype, out, op->out_dtype, a->bias, a->operand_dtype, sh->batch,
                                     sh->out_channels, sh->out_h * sh->out_w);
}

/* Writes (overwrite) or adds v (fp32) into the fp32 slab g, rounded through grad_dtype: the CPU's
   lamp_cpu_add_grad. */
static lamp_status add_grad(float *g, const float *v, size_t n, lamp_dtype grad_dtype, int overwrite) {
  if (grad_dtype == LAMP_F32) {
    if (overwrite) return lamp_cuda_convert(g, LAMP_F32, v, LAMP_F32, n);
    return lamp_cuda_axpy(g, v, n, 1.0f);
  }
  if (overwrite) return lamp_cuda_round_through(g, v, grad_dtype, n);
  return lamp_cuda_accumulate_rounded(g, v, grad_dtype, n);
}

/* An empty batch: zero gradients where they are written, nothing where they are added. */
static lamp_status empty_backward(const lamp_conv2d_args *a) {
  lamp_status s = LAMP_OK;
  if (a->grad_weight != NULL && a->overwrite_grads) s = lamp_cuda_fill(a->grad_weight, LAMP_F32, w_count(&a->shape), 0.0f);
  if (s == LAMP_OK && a->grad_weight != NULL && a->grad_bias != NULL && a->overwrite_grads)
    s = lamp_cuda_fill(a->grad_bias, LAMP_F32, a->shape.out_channels, 0.0f);
  return s;
}

lamp_status lamp_cuda_conv2d_backward(void **plan, const lamp_conv2d_args *a) {
  const char *fn = "conv2d_backward";
  int grads = a->grad_weight != NULL, bias_grad = grads && a->grad_bias != NULL;
  lamp_status s = check_common(fn, a);
  if (s == LAMP_OK) s = lamp_cuda_check_float(fn, "dy", a->dy_dtype);
  if (s == LAMP_OK && a->dx != NULL) s = lamp_cuda_check_float(fn, "dx", a->dx_dtype);
  if (s == LAMP_OK && grads) s = lamp_cuda_check_float(fn, "grad", a->grad_dtype);
  if (s != LAMP_OK) return s;
  if (a->shape.batch == 0) return empty_backward(a);
  if (a->dx == NULL && !grads) return LAMP_OK;
  const lamp_conv2d_shape *sh = &a->shape;
  size_t nx = x_count(sh), nw = w_count(sh), ny = y_count(sh);
  builder b;
  conv_key k;
  conv_op *dop = NULL, *fop = NULL;
  const void *ptrs[] = {a->x, a->weight, a->dy, a->dx};
  s = begin(fn, a, ptrs, 4, &b, &k);
  if (s == LAMP_OK && a->dx != NULL) s = op_for(&b, plan, CONV_BWD_DATA, &k, &dop);
  if (s == LAMP_OK && grads) s = op_for(&b, plan, CONV_BWD_FILTER, &k, &fop);
  if (s != LAMP_OK) return s;
  int dx_direct = dop != NULL && dop->out_dtype == a->dx_dtype;
  size_t dx_bytes = dop != NULL && !dx_direct ? region(nx * lamp_cuda_dtype_size(dop->out_dtype)) : 0;
  size_t dw_bytes = fop != NULL ? region(nw * sizeof(float)) : 0; /* fp32 even when cuDNN writes 16-bit */
  size_t dw16_bytes = fop != NULL && fop->out_dtype != LAMP_F32 ? region(nw * lamp_cuda_dtype_size(fop->out_dtype)) : 0;
  int64_t ws = max64(dop != NULL ? dop->workspace : 0, fop != NULL ? fop->workspace : 0);
  size_t bytes = operand_bytes(a->dy_dtype, a->compute, ny) +
                 (dop != NULL ? operand_bytes(a->operand_dtype, a->compute, nw) : 0) +
                 (fop != NULL ? operand_bytes(a->x_dtype, a->compute, nx) : 0) + dx_bytes + dw_bytes + dw16_bytes +
                 (bias_grad ? region(sh->out_channels * sizeof(float)) : 0) + region((size_t)ws);
  carver c = {NULL, 0};
  if (bytes > 0) s = lamp_cuda_scratch(bytes, (void **)&c.base);
  const void *dy = NULL, *w = NULL, *x = NULL;
  if (s == LAMP_OK)
    s = operand(a->dy, a->dy_dtype, a->compute, carve(&c, operand_bytes(a->dy_dtype, a->compute, ny)), ny, &dy);
  if (s == LAMP_OK && dop != NULL)
    s = operand(a->weight, a->operand_dtype, a->compute, carve(&c, operand_bytes(a->operand_dtype, a->compute, nw)),
                nw, &w);
  if (s == LAMP_OK && fop != NULL)
    s = operand(a->x, a->x_dtype, a->compute, carve(&c, operand_bytes(a->x_dtype, a->compute, nx)), nx, &x);
  if (s != LAMP_OK) return s;
  void *dx_out = dx_direct ? a->dx : carve(&c, dx_bytes);
  float *dw = carve(&c, dw_bytes);
  void *dw16 = carve(&c, dw16_bytes);
  float *bsum = bias_grad ? carve(&c, sh->out_channels * sizeof(float)) : NULL;
  void *work = carve(&c, (size_t)ws);
  if (dop != NULL) {
    s = execute(&b, dop, dx_out, (void *)w, (void *)dy, work);
    if (s == LAMP_OK && !dx_direct) s = lamp_cuda_convert(a->dx, a->dx_dtype, dx_out, dop->out_dtype, nx);
  }
  if (s == LAMP_OK && fop != NULL) {
    s = execute(&b, fop, (void *)x, dw16 != NULL ? dw16 : dw, (void *)dy, work);
    if (s == LAMP_OK && dw16 != NULL) s = lamp_cuda_convert(dw, LAMP_F32, dw16, fop->out_dtype, nw);
    if (s == LAMP_OK) s = add_grad(a->grad_weight, dw, nw, a->grad_dtype, a->overwrite_grads);
  }
  /* The bias sums come from dy as stored, before any rounding to the compute dtype (the CPU's). */
  if (s == LAMP_OK && bias_grad)
    s = lamp_cuda_conv_bias_sums(bsum, a->dy, a->dy_dtype, sh->batch, sh->out_channels, sh->out_h * sh->out_w);
  if (s == LAMP_OK && bias_grad) s = add_grad(a->grad_bias, bsum, sh->out_channels, a->grad_dtype, a->overwrite_grads);
  return s;
}
