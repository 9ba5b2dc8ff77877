/*
** The model: a root layer and the flat slabs its parameters live in.
**
** Parameters are packed in declaration order without padding, at the same element offsets
** in every slab (weights, fp32 masters, fp32 gradients), so the optimizer, the gradient
** all-reduce and the checkpoint code can each treat a slab as one flat array and still find
** any parameter by its table entry.
*/
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/fits.h"
#include "nn/model.h"
#include "nn/scratch.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"
#include "tensor/rng.h"

/* How parameter i is initialised; kept beside the public table, which does not carry it. */
typedef struct param_init {
  lamp_init_kind kind;
  double bound;
} param_init;

struct lamp_model {
  lamp_layer *root;
  int built;
  lamp_model_config config;
  lamp_model_param *params;
  param_init *inits;
  size_t n_params;
  size_t n_bound; /* parameters bound into the layers, unbound again on failure and free */
  size_t numel;
  size_t slab_numel;     /* numel rounded up to config.slab_multiple */
  lamp_tensor *weights, *master, *grads;
  lamp_tensor *staging;  /* fp32 copy for the optimizer when 16-bit weights have no masters */
  lamp_tensor *bound;    /* the slab the layers read their weights from (see bind_param) */
  int weights_stale;     /* the 16-bit slab lags the masters; refreshed when asked for */
  lamp_model_buffer *buffers;
  lamp_init_kind *buffer_inits;
  size_t n_buffers;
  size_t n_buffers_bound;
  size_t buffer_numel;
  lamp_tensor *buffer_slab; /* fp32 [buffer_numel], NULL without buffers */
  int has_keep_f32;      /* some parameter is read in fp32 under every policy */
  /* Sharded with 16-bit weights: the keep_f32 parameters' fp32 values, packed (each rank keeps
     only its share of the masters, and the layers read these); kept_at[i] is parameter i's
     offset there. NULL otherwise. */
  lamp_tensor *kept;
  size_t *kept_at;
  uint64_t forwards;     /* training forwards so far: Dropout's masks derive from it */
  uint64_t rng_streams;  /* stochastic layers seen in the current forward */
  unsigned host_slot;    /* the next forwards' exec.host_slot */
  lamp_tensor *y;        /* output buffer, reused across batches */
  const lamp_tensor *x;  /* borrowed input of the last forward, for backward */
  lamp_scratch *scratch; /* what every nn.Recompute of the model shares (recompute.c) */
  lamp_exec exec;        /* of the last forward */
  int fits_ndim;         /* the last input shape whose layer outputs were found to fit (0: none) */
  int64_t fits_shape[LAMP_MAX_DIMS];
};

lamp_status lamp_model_new(lamp_model **out, lamp_layer *root) {
  *out = NULL;
  if (root == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "model: the root layer is NULL");
  lamp_model *m = calloc(1, sizeof *m);
  if (m == NULL || lamp_scratch_new(&m->scratch) != LAMP_OK) {
    free(m);
    return lamp_error(LAMP_ERR_SYSTEM, "model: out of memory");
  }
  m->root = lamp_layer_retain(root);
  *out = m;
  return LAMP_OK;
}

/* Hands the layers' views back, so the slabs really go when the model does. */
static void unbind_all(lamp_model *m) {
  for (size_t i = 0; i < m->n_bound; i++) m->root->ops->bind(m->root, i, NULL, NULL);
  m->n_bound = 0;
  for (size_t i = 0; i < m->n_buffers_bound; i++) m->root->ops->bind_buffer(m->root, i, NULL);
  m->n_buffers_bound = 0;
}

/* Undoes a build, complete or partial. */
static void teardown(lamp_model *m) {
  unbind_all(m);
  lamp_tensor_release(m->weights);
  lamp_tensor_release(m->master);
  lamp_tensor_release(m->grads);
  lamp_tensor_release(m->staging);
  lamp_tensor_release(m->buffer_slab);
  lamp_tensor_release(m->kept);
  free(m->kept_at);
  m->kept_at = NULL;
  m->weights = m->master = m->grads = m->staging = m->bound = m->buffer_slab = m->kept = NULL;
  m->weights_stale = 0;
  free(m->params);
  free(m->inits);
  free(m->buffers);
  free(m->buffer_inits);
  m->params = NULL;
  m->inits = NULL;
  m->buffers = NULL;
  m->buffer_inits = NULL;
  m->n_params = m->numel = m->slab_numel = 0;
  m->n_buffers = m->buffer_numel = 0;
  m->has_keep_f32 = 0;
  m->built = 0;
}

void lamp_model_free(lamp_model *model) {
  if (model == NULL) return;
  teardown(model);
  lamp_tensor_release(model->y);
  lamp_layer_release(model->root);
  lamp_scratch_free(model->scratch);
  free(model);
}

static lamp_status check_config(const lamp_model_config *c) {
  const lamp_dtype dtypes[4] = {c->weight_dtype, c->compute_dtype, c->activation_dtype, c->grad_dtype};
  const char *roles[4] = {"weight", "compute", "activation", "gradient"};
  for (int i = 0; i < 4; i++)
    if (!lamp_dtype_is_float(dtypes[i]))
      return lamp_error(LAMP_ERR_INVALID_ARG, "model: %s dtype %s is not f32, f16 or bf16", roles[i],
                        lamp_dtype_name(dtypes[i]));
  return LAMP_OK;
}

/* Table entry i from the root's declaration i; *offset advances past it. */
static lamp_status collect_param(lamp_model *m, size_t i, size_t *offset) {
  lamp_model_param *p = &m->params[i];
  lamp_param_decl decl;
  lamp_status st = m->root->ops->param_decl(m->root, i, &decl, p->name, sizeof p->name);
  if (st != LAMP_OK) return st;
  if (decl.name != p->name) {
    if (strlen(decl.name) >= sizeof p->name)
      return lamp_error(LAMP_ERR_INVALID_ARG, "model: parameter name %s is longer than %zu characters", decl.name,
                        sizeof p->name - 1);
    strcpy(p->name, decl.name);
  }
  if (decl.ndim < 0 || decl.ndim > LAMP_MAX_DIMS)
    return lamp_error(LAMP_ERR_INTERNAL, "model: parameter %s has %d dimensions", p->name, decl.ndim);
  if (!lamp_shape_numel(decl.ndim, decl.shape, &p->count)) return lamp_error_context(LAMP_ERR_INVALID_ARG, "model: parameter %s", p->name);
  if (p->count > SIZE_MAX / 4 - *offset)
    return lamp_error(LAMP_ERR_INVALID_ARG, "model: parameters overflow the address space at %s", p->name);
  p->offset = *offset;
  p->ndim = decl.ndim;
  memcpy(p->shape, decl.shape, sizeof p->shape);
  p->decay = decl.decay;
  p->keep_f32 = decl.keep_f32 != 0;
  m->has_keep_f32 |= p->keep_f32;
  m->inits[i] = (param_init){decl.init, decl.bound};
  *offset += p->count;
  return LAMP_OK;
}

static lamp_status collect_params(lamp_model *m) {
  size_t n = m->root->ops->param_count(m->root);
  m->params = calloc(n ? n : 1, sizeof *m->params);
  m->inits = calloc(n ? n : 1, sizeof *m->inits);
  if (m->params == NULL || m->inits == NULL) return lamp_error(LAMP_ERR_SYSTEM, "model: out of memory");
  m->n_params = n;
  size_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    lamp_status st = collect_param(m, i, &offset);
    if (st != LAMP_OK) return st;
  }
  m->numel = offset;
  return LAMP_OK;
}

/* Buffer table entry i from the root's declaration i; *offset advances past it. */
static lamp_status collect_buffer(lamp_model *m, size_t i, size_t *offset) {
  lamp_model_buffer *b = &m->buffers[i];
  lamp_buffer_decl decl;
  lamp_status st = m->root->ops->buffer_decl(m->root, i, &decl, b->name, sizeof b->name);
  if (st != LAMP_OK) return st;
  if (decl.name != b->name) {
    if (strlen(decl.name) >= sizeof b->name)
      return lamp_error(LAMP_ERR_INVALID_ARG, "model: buffer name %s is longer than %zu characters", decl.name,
                        sizeof b->name - 1);
    strcpy(b->name, decl.name);
  }
  if (decl.ndim < 0 || decl.ndim > LAMP_MAX_DIMS)
    return lamp_error(LAMP_ERR_INTERNAL, "model: buffer %s has %d dimensions", b->name, decl.ndim);
  if (decl.init != LAMP_INIT_ZEROS && decl.init != LAMP_INIT_ONES)
    return lamp_error(LAMP_ERR_INTERNAL, "model: buffer %s must start as zeros or ones", b->name);
  if (!lamp_shape_numel(decl.ndim, decl.shape, &b->count)) return lamp_error_context(LAMP_ERR_INVALID_ARG, "model: buffer %s", b->name);
  if (b->count > SIZE_MAX / 4 - *offset)
    return lamp_error(LAMP_ERR_INVALID_ARG, "model: buffers overflow the address space at %s", b->name);
  b->offset = *offset;
  b->ndim = decl.ndim;
  memcpy(b->shape, decl.shape, sizeof b->shape);
  m->buffer_inits[i] = decl.init;
  *offset += b->count;
  return LAMP_OK;
}

static lamp_status collect_buffers(lamp_model *m) {
  size_t n = lamp_layer_buffer_count(m->root);
  if (n == 0) return LAMP_OK;
  m->buffers = calloc(n, sizeof *m->buffers);
  m->buffer_inits = calloc(n, sizeof *m->buffer_inits);
  if (m->buffers == NULL || m->buffer_inits == NULL) return lamp_error(LAMP_ERR_SYSTEM, "model: out of memory");
  m->n_buffers = n;
  size_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    lamp_status st = collect_buffer(m, i, &offset);
    if (st != LAMP_OK) return st;
  }
  m->buffer_numel = offset;
  return LAMP_OK;
}

/* One fp32 slab for every buffer, initialised (zeros or ones) and bound into the layers. Buffers
   are never 16-bit: running statistics stay fp32 under every policy. */
static lamp_status build_buffers(lamp_model *m) {
  if (m->n_buffers == 0) return LAMP_OK;
  int64_t shape[1] = {(int64_t)m->buffer_numel};
  lamp_status st = lamp_tensor_new(&m->buffer_slab, LAMP_F32, m->config.device, 1, shape, LAMP_MEM_PARAMS);
  for (size_t i = 0; st == LAMP_OK && i < m->n_buffers; i++) {
    const lamp_model_buffer *b = &m->buffers[i];
    float *v = (float *)lamp_tensor_data(m->buffer_slab) + b->offset;
    st = lamp_fill(m->config.device, v, LAMP_F32, b->count, m->buffer_inits[i] == LAMP_INIT_ONES ? 1.0f : 0.0f);
    lamp_tensor *view = NULL;
    if (st == LAMP_OK) st = lamp_tensor_view(&view, m->buffer_slab, b->offset, b->ndim, b->shape);
    if (st == LAMP_OK) st = m->root->ops->bind_buffer(m->root, i, view);
    lamp_tensor_release(view);
    if (st == LAMP_OK) m->n_buffers_bound = i + 1;
  }
  return st;
}

/* The slabs' length: a sharded run cuts them into equal pieces per rank, so it rounds them up
   (lamp_mem_alloc zero-fills the tail, which no parameter uses). */
static size_t padded_numel(const lamp_model *m) {
  size_t k = m->config.slab_multiple > 1 ? (size_t)m->config.slab_multiple : 1;
  return (m->numel + k - 1) / k * k;
}

/* The packed fp32 slab of the keep_f32 parameters, for a sharded model with 16-bit weights. */
static lamp_status alloc_kept(lamp_model *m) {
  m->kept_at = calloc(m->n_params, sizeof *m->kept_at);
  if (m->kept_at == NULL) return lamp_error(LAMP_ERR_SYSTEM, "model: out of memory");
  size_t n = 0;
  for (size_t i = 0; i < m->n_params; i++)
    if (m->params[i].keep_f32) {
      m->kept_at[i] = n;
      n += m->params[i].count;
    }
  int64_t shape[1] = {(int64_t)(n ? n : 1)};
  return lamp_tensor_new(&m->kept, LAMP_F32, m->config.device, 1, shape, LAMP_MEM_PARAMS);
}

static lamp_status alloc_slabs(lamp_model *m) {
  const lamp_model_config *c = &m->config;
  m->slab_numel = padded_numel(m);
  int64_t shape[1] = {(int64_t)m->slab_numel};
  lamp_status st = lamp_tensor_new(&m->weights, c->weight_dtype, c->device, 1, shape, LAMP_MEM_PARAMS);
  if (st == LAMP_OK && c->master_weights)
    st = lamp_tensor_new(&m->master, LAMP_F32, c->device, 1, shape, LAMP_MEM_MASTER);
  if (st == LAMP_OK) st = lamp_tensor_new(&m->grads, LAMP_F32, c->device, 1, shape, LAMP_MEM_GRADS);
  /* 16-bit weights without masters: the optimizer still needs fp32 to work on, but only for
     the duration of a step; the result is rounded back, so updates below the 16-bit spacing
     are lost, which is exactly what a policy without masters means. */
  if (st == LAMP_OK && c->weight_dtype != LAMP_F32 && !c->master_weights)
    st = lamp_tensor_new(&m->staging, LAMP_F32, c->device, 1, shape, LAMP_MEM_WORKSPACE);
  if (st == LAMP_OK && c->slab_multiple > 1 && c->weight_dtype != LAMP_F32 && m->has_keep_f32) st = alloc_kept(m);
  return st;
}

/*
** Draws every parameter in declaration order from one generator, in double, on the host, and
** copies them into the fp32 slab the optimizer owns; 16-bit weights are then rounded from it by
** sync_weights. The same seed thus gives the same fp32 values under every precision policy, on
** every device.
*/
static lamp_status draw_params(const lamp_model *m, float *dst) {
  lamp_rng rng;
  lamp_rng_seed(&rng, m->config.seed);
  for (size_t i = 0; i < m->n_params; i++) {
    float *v = dst + m->params[i].offset;
    const param_init *init = &m->inits[i];
    for (size_t k = 0; k < m->params[i].count; k++) {
      switch (init->kind) {
      case LAMP_INIT_ZEROS: v[k] = 0.0f; break;
      case LAMP_INIT_ONES: v[k] = 1.0f; break;
      case LAMP_INIT_UNIFORM: v[k] = (float)(init->bound * (2.0 * lamp_rng_uniform(&rng) - 1.0)); break;
      default:
        return lamp_error(LAMP_ERR_INTERNAL, "model: parameter %s has unknown init kind %d", m->params[i].name,
                          (int)init->kind);
      }
    }
  }
  return LAMP_OK;
}

static lamp_status init_params(lamp_model *m) {
  size_t bytes = m->numel * sizeof(float);
  float *host = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, bytes);
  if (host == NULL) return lamp_error_context(LAMP_ERR_SYSTEM, "model: initial parameters");
  lamp_status st = draw_params(m, host);
  if (st == LAMP_OK) st = lamp_copy(m->config.device, lamp_model_trainable(m), LAMP_HOST, host, bytes);
  lamp_mem_free(host);
  return st == LAMP_OK ? lamp_model_sync_weights(m) : st;
}

/*
** The slab parameter p is read from: the one every layer reads, except that a keep_f32
** parameter (a norm weight) never reads a 16-bit slab. It reads the fp32 slab the optimizer
** updates instead: the masters, or without masters the staging slab, which for such
** parameters is then the only copy that counts (lamp_model_begin_update leaves it alone).
*/
static lamp_tensor *slab_for_param(const lamp_model *m, const lamp_model_param *p) {
  if (!p->keep_f32 || m->bound->dtype == LAMP_F32) return m->bound;
  if (m->kept != NULL) return m->kept; /* sharded: the masters are not whole */
  return m->master != NULL ? m->master : m->staging;
}

/* Gives parameter i its weight and gradient views; the layer retains them, we drop ours. */
static lamp_status bind_param(lamp_model *m, size_t i) {
  const lamp_model_param *p = &m->params[i];
  lamp_tensor *w = NULL, *g = NULL, *slab = slab_for_param(m, p);
  size_t at = slab == m->kept && m->kept != NULL ? m->kept_at[i] : p->offset;
  lamp_status st = lamp_tensor_view(&w, slab, at, p->ndim, p->shape);
  if (st == LAMP_OK) st = lamp_tensor_view(&g, m->grads, p->offset, p->ndim, p->shape);
  if (st == LAMP_OK) st = m->root->ops->bind(m->root, i, w, g);
  lamp_tensor_release(w);
  lamp_tensor_release(g);
  if (st == LAMP_OK) m->n_bound = i + 1;
  return st;
}

/*
** Which slab the layers read. Where the device has no 16-bit GEMM (the CPU), a 16-bit operand
** is widened to fp32 before every GEMM anyway; so when the masters exist and the weights are
** stored in the compute dtype, the layers read the masters and round them to the compute dtype
** as they widen: one pass per step instead of rounding into the 16-bit slab and widening it
** again. The values the GEMM sees are the same; the 16-bit slab is refreshed only when asked.
** Where the GEMM reads bf16 natively (oneDNN's on a CPU with AVX512_BF16) nothing is widened:
** the layers read the bf16 slab, which the optimizer writes as it updates the masters
** (weights_out), instead of rounding the masters into operands at every forward (one pass over
** the masters less per step: the bf16 MLP 1.07x faster in 34 alternating pairs on a Zen 4).
** Not under stochastic rounding: the layers must see the weights as it rounded them, not the
** masters rounded to nearest.
*/
static lamp_tensor *slab_for_layers(const lamp_model *m) {
  const lamp_model_config *c = &m->config;
  if (c->slab_multiple > 1) return m->weights; /* the masters go: the shards keep them */
  if (m->master != NULL && c->weight_dtype == c->compute_dtype && !c->stochastic_rounding &&
      !lamp_device_has(c->device, LAMP_CAP_NATIVE_16BIT_GEMM) &&
      !(c->compute_dtype == LAMP_BF16 && lamp_device_has(c->device, LAMP_CAP_NATIVE_BF16_GEMM)))
    return m->master;
  return m->weights;
}

/* The layer that declares parameter i of `layer`: children declare theirs in child order. */
static const lamp_layer *owner_of_param(const lamp_layer *layer, size_t i) {
  for (;;) {
    size_t kids = layer->ops->child_count != NULL ? layer->ops->child_count(layer) : 0;
    const lamp_layer *next = NULL;
    for (size_t k = 0; k < kids && next == NULL; k++) {
      const lamp_layer *c = layer->ops->child(layer, k);
      size_t n = c->ops->param_count(c);
      if (i < n) next = c;
      else i -= n;
    }
    if (next == NULL) return layer;
    layer = next;
  }
}

/* Bytes a parameter takes in the slabs: its weight, its fp32 gradient, an fp32 master or
   staging copy when the weights are not the fp32 values the optimizer updates. */
static uint64_t bytes_per_param(const lamp_model_config *c) {
  uint64_t b = lamp_dtype_size(c->weight_dtype) + sizeof(float);
  if (c->master_weights || c->weight_dtype != LAMP_F32) b += sizeof(float);
  return b;
}

/* Before any slab is allocated: the slabs must fit in memory. The message names the layer
   holding the largest parameter, the likeliest culprit (nn.Linear(1e9, 1e9)). */
static lamp_status check_slabs_fit(const lamp_model *m) {
  uint64_t bytes = lamp_size_mul_add(m->numel, bytes_per_param(&m->config),
                                     lamp_size_mul_add(m->buffer_numel, sizeof(float), 0));
  size_t big = 0;
  for (size_t i = 1; i < m->n_params; i++)
    if (m->params[i].count > m->params[big].count) big = i;
  const lamp_layer *owner = m->n_params ? owner_of_param(m->root, big) : m->root;
  char desc[256];
  owner->ops->describe(owner, desc, sizeof desc);
  desc[strcspn(desc, "\n")] = '\0'; /* a container describes its children on further lines */
  size_t owner_numel = 0;
  if (lamp_layer_param_numel(owner, &owner_numel) != LAMP_OK) owner_numel = 0;
  return lamp_check_fits(m->config.device, bytes, NULL,
                         "model: a model of %zu parameters and %zu buffer values (its largest layer, %s, has %zu)",
                         m->numel, m->buffer_numel, desc, owner_numel);
}

static lamp_status build_steps(lamp_model *m) {
  lamp_status st = collect_params(m);
  if (st == LAMP_OK) st = collect_buffers(m);
  if (st == LAMP_OK) st = check_slabs_fit(m);
  if (st == LAMP_OK) st = alloc_slabs(m);
  if (st == LAMP_OK) m->bound = slab_for_layers(m);
  if (st == LAMP_OK) st = init_params(m);
  for (size_t i = 0; st == LAMP_OK && i < m->n_params; i++) st = bind_param(m, i);
  if (st == LAMP_OK) st = build_buffers(m);
  return st;
}

lamp_status lamp_model_build(lamp_model *model, const lamp_model_config *config) {
  if (model->built) return lamp_error(LAMP_ERR_INVALID_USAGE, "model: already built");
  lamp_status st = check_config(config);
  if (st != LAMP_OK) return st;
  model->config = *config;
  st = build_steps(model);
  if (st != LAMP_OK) {
    teardown(model);
    return st;
  }
  model->built = 1;
  return LAMP_OK;
}

int lamp_model_is_built(const lamp_model *model) { return model->built; }
const lamp_model_config *lamp_model_get_config(const lamp_model *model) {
  return model->built ? &model->config : NULL;
}
lamp_layer *lamp_model_root(const lamp_model *model) { return model->root; }

size_t lamp_model_numel(const lamp_model *model) { return model->numel; }
size_t lamp_model_n_params(const lamp_model *model) { return model->n_params; }
const lamp_model_param *lamp_model_param_at(const lamp_model *model, size_t i) {
  return i < model->n_params ? &model->params[i] : NULL;
}

lamp_tensor *lamp_model_weights(lamp_model *model) {
  if (model->weights_stale && model->master != NULL &&
      lamp_convert(model->config.device, lamp_tensor_data(model->weights), model->weights->dtype,
                   lamp_tensor_data(model->master), LAMP_F32, model->numel) == LAMP_OK)
    model->weights_stale = 0;
  return model->weights;
}
lamp_tensor *lamp_model_master(const lamp_model *model) { return model->master; }
size_t lamp_model_slab_numel(const lamp_model *model) { return model->slab_numel; }

lamp_status lamp_model_release_master(lamp_model *model) {
  if (model->config.slab_multiple <= 1)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "model: release_master needs a model built for sharding (slab_multiple > 1)");
  lamp_tensor_release(model->master);
  model->master = NULL;
  return LAMP_OK;
}
lamp_tensor *lamp_model_grads(const lamp_model *model) { return model->grads; }

float *lamp_model_trainable(const lamp_model *model) {
  if (model->master != NULL) return lamp_tensor_data(model->master);
  if (model->staging != NULL) return lamp_tensor_data(model->staging);
  if (model->weights != NULL && model->weights->dtype == LAMP_F32) return lamp_tensor_data(model->weights);
  return NULL;
}

static lamp_status require_built(const lamp_model *model, const char *what) {
  if (model->weights == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "model: %s before lamp_model_build", what);
  return LAMP_OK;
}

lamp_status lamp_model_load_kept(lamp_model *model, const float *fp32) {
  lamp_status st = LAMP_OK;
  for (size_t i = 0; model->kept != NULL && st == LAMP_OK && i < model->n_params; i++) {
    const lamp_model_param *p = &model->params[i];
    if (p->keep_f32)
      st = lamp_copy(model->config.device, (float *)lamp_tensor_data(model->kept) + model->kept_at[i],
                     model->config.device, fp32 + p->offset, p->count * sizeof(float));
  }
  return st;
}

float *lamp_model_kept(const lamp_model *model, size_t i) {
  if (model->kept == NULL || i >= model->n_params || !model->params[i].keep_f32) return NULL;
  return (float *)lamp_tensor_data(model->kept) + model->kept_at[i];
}

lamp_status lamp_model_sync_weights(lamp_model *model) {
  lamp_status st = require_built(model, "sync_weights");
  if (st == LAMP_OK && model->kept != NULL && model->master != NULL) /* sharded: the initial values */
    st = lamp_model_load_kept(model, lamp_tensor_data(model->master));
  if (st != LAMP_OK) return st;
  if (model->bound == model->master && model->master != NULL) { /* the layers read the masters */
    model->weights_stale = 1;
    return LAMP_OK;
  }
  lamp_tensor *src = model->master != NULL ? model->master : model->staging;
  if (src == NULL) return LAMP_OK;
  return lamp_convert(model->config.device, lamp_tensor_data(model->weights), model->weights->dtype,
                      lamp_tensor_data(src), LAMP_F32, model->numel);
}

lamp_status lamp_model_update_weights(lamp_model *model, uint64_t seed, uint64_t step) {
  lamp_status st = require_built(model, "update_weights");
  if (st != LAMP_OK) return st;
  if (!model->config.stochastic_rounding || step == 0 || model->weights->dtype == LAMP_F32)
    return lamp_model_sync_weights(model);
  /* the layers read the 16-bit slab (slab_for_layers), so there is always one to round into */
  lamp_tensor *src = model->master != NULL ? model->master : model->staging;
  return lamp_round_stochastic(model->config.device, lamp_tensor_data(model->weights), model->weights->dtype,
                               lamp_tensor_data(src), model->numel, seed, step);
}

void *lamp_model_weights_out(const lamp_model *model, lamp_dtype *dtype) {
  *dtype = LAMP_F32;
  if (model->weights == NULL || model->weights->dtype == LAMP_F32) return NULL;
  if (model->config.stochastic_rounding) return NULL; /* the core's own rounding, not the plugin's */
  if (model->bound == model->master && model->master != NULL) return NULL; /* sync converts nothing */
  if (model->master == NULL && model->staging == NULL) return NULL;
  *dtype = model->weights->dtype;
  return lamp_tensor_data(model->weights);
}

lamp_status lamp_model_begin_update(lamp_model *model) {
  lamp_status st = require_built(model, "begin_update");
  if (st != LAMP_OK || model->staging == NULL) return st;
  lamp_device dev = model->config.device;
  if (!model->has_keep_f32)
    return lamp_convert(dev, lamp_tensor_data(model->staging), LAMP_F32, lamp_tensor_data(model->weights),
                        model->weights->dtype, model->numel);
  /* keep_f32 parameters live in the staging slab itself (see slab_for_param): reloading them
     from their 16-bit copy would round them. */
  size_t esize = lamp_dtype_size(model->weights->dtype);
  for (size_t i = 0; st == LAMP_OK && i < model->n_params; i++) {
    const lamp_model_param *p = &model->params[i];
    if (p->keep_f32) continue;
    st = lamp_convert(dev, (float *)lamp_tensor_data(model->staging) + p->offset, LAMP_F32,
                      (const char *)lamp_tensor_data(model->weights) + p->offset * esize, model->weights->dtype,
                      p->count);
  }
  return st;
}

lamp_tensor *lamp_model_buffers(const lamp_model *model) { return model->buffer_slab; }
size_t lamp_model_n_buffers(const lamp_model *model) { return model->n_buffers; }
uint64_t lamp_model_forward_index(const lamp_model *model) { return model->forwards; }
void lamp_model_set_forward_index(lamp_model *model, uint64_t index) { model->forwards = index; }
void lamp_model_set_host_slot(lamp_model *model, unsigned slot) { model->host_slot = slot; }
const lamp_model_buffer *lamp_model_buffer_at(const lamp_model *model, size_t i) {
  return i < model->n_buffers ? &model->buffers[i] : NULL;
}

lamp_status lamp_model_zero_grads(lamp_model *model) {
  lamp_status st = require_built(model, "zero_grads");
  if (st != LAMP_OK) return st;
  return lamp_fill(model->config.device, lamp_tensor_data(model->grads), LAMP_F32, model->numel, 0.0f);
}

/* What a forward keeps of each layer's output, in bytes, and the largest one. */
typedef struct output_tally {
  size_t esize;
  uint64_t total, largest;
  const lamp_layer *which;
} output_tally;

/*
** Tallies the outputs the leaves of `layer` produce for an input of shape in (*out_nd, out: the
** layer's output shape). A Sequential chains its children; another container hands each child
** the same input (Residual's block and projection). Containers keep little of their own, so only
** the leaves count: a lower bound of what the forward allocates.
*/
static lamp_status tally_outputs(const lamp_layer *layer, int nd, const int64_t *in, output_tally *t, int *out_nd,
                                 int64_t *out) {
  lamp_status st = layer->ops->output_shape(layer, nd, in, out_nd, out);
  if (st != LAMP_OK) return st;
  size_t kids = layer->ops->child_count != NULL ? layer->ops->child_count(layer) : 0;
  int chain = strcmp(layer->ops->type, "Sequential") == 0;
  int cur_nd = nd;
  int64_t cur[LAMP_MAX_DIMS];
  memcpy(cur, in, (size_t)nd * sizeof *cur);
  for (size_t k = 0; k < kids; k++) {
    int child_nd;
    int64_t child_out[LAMP_MAX_DIMS];
    st = tally_outputs(layer->ops->child(layer, k), cur_nd, cur, t, &child_nd, child_out);
    if (st != LAMP_OK) return st;
    if (chain) {
      cur_nd = child_nd;
      memcpy(cur, child_out, (size_t)child_nd * sizeof *cur);
    }
  }
  if (kids > 0) return LAMP_OK;
  size_t numel;
  uint64_t bytes = lamp_shape_numel(*out_nd, out, &numel) ? lamp_size_mul_add(numel, t->esize, 0) : UINT64_MAX;
  t->total = lamp_size_mul_add(1, t->total, bytes);
  if (t->which == NULL || bytes > t->largest) {
    t->largest = bytes;
    t->which = layer;
  }
  return LAMP_OK;
}

/* Before the first forward of each input shape: a batch whose layer outputs cannot fit in memory
   is refused, naming the layer with the largest output, instead of failing in the allocator. */
static lamp_status check_outputs_fit(lamp_model *m, const lamp_tensor *x) {
  if (m->fits_ndim == x->ndim && memcmp(m->fits_shape, x->shape, (size_t)x->ndim * sizeof *x->shape) == 0) return LAMP_OK;
  output_tally t = {.esize = lamp_dtype_size(m->exec.activation_dtype)};
  int nd;
  int64_t out[LAMP_MAX_DIMS];
  lamp_status st = tally_outputs(m->root, x->ndim, x->shape, &t, &nd, out);
  if (st != LAMP_OK || t.which == NULL) return st;
  char desc[256], input[128];
  t.which->ops->describe(t.which, desc, sizeof desc);
  desc[strcspn(desc, "\n")] = '\0';
  st = lamp_check_fits(m->config.device, t.total, "; use a smaller batch",
                       "model: a forward of %s (its largest layer output, %llu bytes, is %s's)",
                       lamp_tensor_describe(x, input, sizeof input), (unsigned long long)t.largest, desc);
  if (st != LAMP_OK) return st;
  m->fits_ndim = x->ndim;
  memcpy(m->fits_shape, x->shape, (size_t)x->ndim * sizeof *x->shape);
  return LAMP_OK;
}

lamp_status lamp_model_forward(lamp_model *model, const lamp_tensor *x, int training, const lamp_tensor **y) {
  *y = NULL;
  model->x = NULL;
  if (!model->built) return lamp_error(LAMP_ERR_INVALID_USAGE, "model: forward before lamp_model_build");
  if (x->device != model->config.device)
    return lamp_error(LAMP_ERR_INVALID_ARG, "model: input is on %s, the model on %s", lamp_device_name(x->device),
                      lamp_device_name(model->config.device));
  model->exec = (lamp_exec){.device = model->config.device,
                            .compute_dtype = model->config.compute_dtype,
                            .activation_dtype = model->config.activation_dtype,
                            .training = training,
                            .grad_dtype = model->config.grad_dtype,
                            .seed = model->config.seed,
                            .forward_index = model->forwards,
                            .rng_streams = &model->rng_streams,
                            .host_slot = model->host_slot,
                            .scratch = model->scratch};
  model->rng_streams = 0;
  if (training) model->forwards++;
  lamp_layer *root = model->root;
  int nd;
  int64_t shape[LAMP_MAX_DIMS];
  lamp_status st = root->ops->output_shape(root, x->ndim, x->shape, &nd, shape);
  if (st == LAMP_OK) st = check_outputs_fit(model, x);
  if (st == LAMP_OK)
    st = lamp_tensor_ensure(&model->y, model->exec.activation_dtype, model->exec.device, nd, shape,
                            LAMP_MEM_ACTIVATIONS);
  if (st == LAMP_OK) st = root->ops->forward(root, &model->exec, x, model->y);
  if (st != LAMP_OK) return st;
  model->x = x;
  *y = model->y;
  return LAMP_OK;
}

static int same_shape(const lamp_tensor *a, const lamp_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

lamp_status lamp_model_backward(lamp_model *model, const lamp_tensor *dy) {
  return lamp_model_backward_ex(model, dy, 0, NULL, NULL);
}

lamp_status lamp_model_backward_fresh(lamp_model *model, const lamp_tensor *dy) {
  return lamp_model_backward_ex(model, dy, 1, NULL, NULL);
}

lamp_status lamp_model_backward_ex(lamp_model *model, const lamp_tensor *dy, int overwrite,
                                   void (*grads_ready)(void *ctx, size_t first_param), void *ctx) {
  if (!model->built) return lamp_error(LAMP_ERR_INVALID_USAGE, "model: backward before lamp_model_build");
  if (model->x == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "model: backward without a successful forward");
  if (!same_shape(dy, model->y)) {
    char a[128], b[128];
    return lamp_error(LAMP_ERR_INVALID_ARG, "model: dy %s does not match the output %s",
                      lamp_tensor_describe(dy, a, sizeof a), lamp_tensor_describe(model->y, b, sizeof b));
  }
  lamp_layer *root = model->root;
  lamp_exec exec = model->exec;
  exec.overwrite_grads = overwrite;
  exec.grads_ready = grads_ready;
  exec.grads_ready_ctx = ctx;
  lamp_status st;
  if (root->ops->backward != NULL) { /* layer by layer, announcing gradients as they complete */
    st = root->ops->backward(root, &exec, model->x, model->y, dy, NULL, 0);
  } else {
    st = root->ops->backward_input(root, &model->exec, model->x, model->y, dy, NULL);
    if (st == LAMP_OK && root->ops->accumulate_grads != NULL)
      st = root->ops->accumulate_grads(root, &exec, model->x, dy);
  }
  if (st == LAMP_OK && grads_ready != NULL) grads_ready(ctx, 0);
  return st;
}
