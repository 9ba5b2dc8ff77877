#include "train/zero_shards.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "plugin/optim_pieces.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"
#include "train/trainer_internal.h"

/* ---- what a sharded run needs ----------------------------------------------------------------- */

static const char *precision_name(const lamp_trainer *t) { return lamp_precision_handle(t->config.precision)->desc->name; }

static lamp_status check_comm(const lamp_trainer *t) {
  lamp_comm *c = t->config.comm;
  int rs = lamp_comm_supports(c, "reduce_scatter"), ag = lamp_comm_supports(c, "all_gather");
  if (rs && ag) return LAMP_OK;
  return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: shard_optimizer needs a communicator with reduce_scatter and all_gather; '%s' has %s",
                    lamp_comm_handle(c)->desc->name, !rs && !ag ? "neither" : rs ? "no all_gather" : "no reduce_scatter");
}

/*
** The shards keep the fp32 values the optimizer updates: the fp32 weights, or the masters of
** 16-bit ones. A 16-bit policy without masters has no fp32 truth to shard, and stochastic
** rounding draws its random words by the index of a whole-slab conversion.
*/
static lamp_status check_policy(const lamp_trainer *t) {
  const lamp_precision_policy *p = &t->policy;
  if (p->weight_dtype == LAMP_F32) return LAMP_OK;
  const char *w = lamp_dtype_name((lamp_dtype)p->weight_dtype);
  if (!(p->flags & LAMP_POLICY_MASTER_WEIGHTS))
    return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: shard_optimizer shards fp32 weights or fp32 master weights; precision '%s' keeps %s weights without masters (set master_weights = 1)",
                      precision_name(t), w);
  if (p->flags & LAMP_POLICY_STOCHASTIC_ROUNDING)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: shard_optimizer does not support stochastic rounding (precision '%s'): its random words follow whole-slab element order",
                      precision_name(t));
  return LAMP_OK;
}

lamp_status lamp_zero_check(lamp_trainer *t) {
  if (!t->zero.on) return LAMP_OK;
  lamp_status st = check_comm(t);
  if (st == LAMP_OK && t->config.compress != LAMP_F32)
    st = lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: compress = %s cannot be combined with shard_optimizer: sharding reduce-scatters the fp32 gradients; use one or the other",
                    lamp_dtype_name(t->config.compress));
  if (st == LAMP_OK) st = check_policy(t);
  return st;
}

/* ---- the layout ----------------------------------------------------------------------------- */

size_t lamp_zero_shard_numel(const lamp_trainer *t) { return t->zero.on ? t->buckets.shard_numel : lamp_model_numel(t->model); }

/* Where this rank's piece of bucket k starts in the slab, and how many of its elements are
   parameters (the padded tail of the slab is none). */
static size_t piece_start(const lamp_trainer *t, const lamp_grad_bucket *k) {
  return k->offset + (size_t)t->zero.rank * k->piece;
}

static size_t piece_params(const lamp_trainer *t, const lamp_grad_bucket *k) {
  size_t start = piece_start(t, k), numel = lamp_model_numel(t->model);
  if (start >= numel) return 0;
  return numel - start < k->piece ? numel - start : k->piece;
}

/* The overlap [*lo, *hi) of the runs [a, a + na) and [b, b + nb); empty when *lo >= *hi. */
static void overlap(size_t a, size_t na, size_t b, size_t nb, size_t *lo, size_t *hi) {
  *lo = a > b ? a : b;
  *hi = a + na < b + nb ? a + na : b + nb;
}

/* Whether bucket k holds elements of a parameter read in fp32 (lamp_model_kept). */
static int holds_kept(const lamp_trainer *t, const lamp_grad_bucket *k) {
  for (size_t i = 0; i < lamp_model_n_params(t->model); i++) {
    const lamp_model_param *p = lamp_model_param_at(t->model, i);
    size_t lo, hi;
    overlap(p->offset, p->count, k->offset, k->count, &lo, &hi);
    if (lamp_model_kept(t->model, i) != NULL && lo < hi) return 1;
  }
  return 0;
}

/* The fp32 all-gather of the buckets that hold such parameters: room for the largest of them. */
static lamp_status alloc_wide(lamp_trainer *t) {
  size_t largest = 0;
  t->zero.kept_buckets = calloc(t->buckets.n ? t->buckets.n : 1, 1);
  if (t->zero.kept_buckets == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the shard layout");
  for (size_t i = 0; i < t->buckets.n; i++) {
    const lamp_grad_bucket *k = &t->buckets.buckets[i];
    t->zero.kept_buckets[i] = (unsigned char)holds_kept(t, k);
    if (t->zero.kept_buckets[i] && k->count > largest) largest = k->count;
  }
  if (largest == 0) return LAMP_OK;
  t->zero.wide = lamp_mem_alloc(t->config.device, LAMP_MEM_WORKSPACE, largest * sizeof(float));
  return t->zero.wide != NULL ? LAMP_OK : LAMP_ERR_SYSTEM;
}

/* The own pieces of a whole slab into a shard array. */
static lamp_status take_pieces(lamp_trainer *t, const float *whole, float *shard) {
  lamp_status st = LAMP_OK;
  for (size_t i = 0; st == LAMP_OK && i < t->buckets.n; i++) {
    const lamp_grad_bucket *k = &t->buckets.buckets[i];
    st = lamp_copy(t->config.device, shard + k->shard_offset, t->config.device, whole + piece_start(t, k),
                   k->piece * sizeof(float));
  }
  return st;
}

lamp_status lamp_zero_init(lamp_trainer *t) {
  lamp_zero_state *z = &t->zero;
  if (!z->on) return LAMP_OK;
  z->cut = calloc(t->n_segments ? t->n_segments : 1, sizeof *z->cut);
  if (z->cut == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the shard layout");
  lamp_tensor *master = lamp_model_master(t->model);
  if (master == NULL) return LAMP_OK; /* fp32 weights: updated in place, piece by piece */
  lamp_status st = alloc_wide(t);
  if (st != LAMP_OK) return st;
  size_t shard = t->buckets.shard_numel;
  z->master = lamp_mem_alloc(t->config.device, LAMP_MEM_MASTER, (shard ? shard : 1) * sizeof(float));
  if (z->master == NULL) return LAMP_ERR_SYSTEM;
  st = take_pieces(t, lamp_tensor_data(master), z->master);
  return st == LAMP_OK ? lamp_model_release_master(t->model) : st;
}

/* The whole-slab buffers of a checkpoint, if any. */
static void free_full(lamp_zero_state *z) {
  lamp_mem_free(z->full_master);
  z->full_master = NULL;
  for (uint32_t j = 0; j < LAMP_OPTIM_MAX_SLOTS; j++) {
    lamp_mem_free(z->full_slots[j]);
    z->full_slots[j] = NULL;
  }
}

void lamp_zero_free(lamp_zero_state *z) {
  lamp_mem_free(z->master);
  lamp_mem_free(z->wide);
  free(z->cut);
  free(z->kept_buckets);
  z->master = NULL;
  z->wide = NULL;
  z->cut = NULL;
  z->kept_buckets = NULL;
  free_full(z);
}

/* ---- the step ------------------------------------------------------------------------------- */

/* What a rank tells the others of its shard's gradients. */
typedef struct shard_facts {
  double sumsq;
  int32_t found_inf;
  int32_t unused;
} shard_facts;

lamp_status lamp_zero_combine_report(lamp_trainer *t) {
  int world = t->zero.world;
  shard_facts mine = {t->report_host->sumsq, t->report_host->found_inf, 0};
  shard_facts *all = calloc((size_t)world, sizeof *all);
  if (all == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the ranks' gradient checks");
  lamp_status st = lamp_comm_all_gather(t->config.comm, &mine, all, sizeof mine, LAMP_U8, LAMP_HOST);
  if (st == LAMP_OK) { /* in rank order: every rank adds the same numbers the same way */
    double sumsq = 0.0;
    int32_t found = 0;
    for (int r = 0; r < world; r++) {
      sumsq += all[r].sumsq;
      found |= all[r].found_inf != 0;
    }
    t->report_host->sumsq = sumsq;
    t->report_host->found_inf = found;
  }
  free(all);
  return st;
}

/* The optimizer over piece k: params, gradients and slots at the piece, no tensor table (a
   plugin that needs whole tensors refuses by itself). */
static lamp_status update_piece(lamp_trainer *t, const lamp_optim_step *whole, const lamp_grad_bucket *k, float *params) {
  size_t n = piece_params(t, k);
  if (n == 0) return LAMP_OK;
  float *slots[LAMP_OPTIM_MAX_SLOTS] = {0};
  for (uint32_t j = 0; j < t->n_slots; j++) slots[j] = t->slots[j] + k->shard_offset;
  lamp_optim_step step = *whole;
  step.n = n;
  step.params = params;
  step.grads = t->buckets.shard_grads + k->shard_offset;
  step.slots = slots;
  step.segments = t->zero.cut;
  step.n_segments = lamp_optim_cut_segments(t->segments, t->n_segments, piece_start(t, k), n, t->zero.cut);
  step.tensors = NULL;
  step.n_tensors = 0;
  step.weights_out = NULL;
  lamp_status st = lamp_optim_apply(t->config.optim, &step);
  if (st != LAMP_OK)
    return lamp_error_context(st, "Trainer: shard_optimizer steps optimizer '%s' over this rank's pieces of the slab, without whole tensors",
                              lamp_optim_handle(t->config.optim)->desc->name);
  return LAMP_OK;
}

/*
** A bucket holding parameters read in fp32 (BatchNorm's, under a 16-bit policy) gathers the fp32
** masters instead: the whole bucket is rounded into the weights here, as each rank would round
** its piece, and those parameters' values go to their fp32 slab.
*/
static lamp_status gather_wide(lamp_trainer *t, const lamp_grad_bucket *k, const float *params) {
  lamp_device dev = t->config.device;
  lamp_tensor *w = lamp_model_weights(t->model);
  lamp_status st = lamp_comm_all_gather(t->config.comm, params, t->zero.wide, k->piece, LAMP_F32, dev);
  if (st == LAMP_OK)
    st = lamp_convert(dev, (char *)lamp_tensor_data(w) + k->offset * lamp_dtype_size(w->dtype), w->dtype, t->zero.wide,
                      LAMP_F32, k->count);
  for (size_t i = 0; st == LAMP_OK && i < lamp_model_n_params(t->model); i++) {
    const lamp_model_param *p = lamp_model_param_at(t->model, i);
    float *kept = lamp_model_kept(t->model, i);
    size_t lo, hi;
    overlap(p->offset, p->count, k->offset, k->count, &lo, &hi);
    if (kept != NULL && lo < hi)
      st = lamp_copy(dev, kept + (lo - p->offset), dev, t->zero.wide + (lo - k->offset), (hi - lo) * sizeof(float));
  }
  return st;
}

/*
** Piece k in the weights' storage dtype, then everyone's. fp32 weights stepped in place (no
** masters) already hold the piece in this rank's block: gathered in place (comm.h), no copy.
** Otherwise the gradient piece, consumed by the update, is the send buffer, large enough for
** fp32; the conversion rounds to nearest, as the unsharded step's does.
*/
static lamp_status gather_piece(lamp_trainer *t, const lamp_grad_bucket *k, const float *params) {
  lamp_device dev = t->config.device;
  lamp_tensor *w = lamp_model_weights(t->model);
  size_t esize = lamp_dtype_size(w->dtype);
  float *block = (float *)lamp_tensor_data(w) + piece_start(t, k);
  if (w->dtype == LAMP_F32 && params == block)
    return lamp_comm_all_gather(t->config.comm, block, (float *)lamp_tensor_data(w) + k->offset, k->piece, LAMP_F32,
                                dev);
  void *send = t->buckets.shard_grads + k->shard_offset;
  lamp_status st = w->dtype == LAMP_F32 ? lamp_copy(dev, send, dev, params, k->piece * sizeof(float))
                                        : lamp_convert(dev, send, w->dtype, params, LAMP_F32, k->piece);
  if (st != LAMP_OK) return st;
  return lamp_comm_all_gather(t->config.comm, send, (char *)lamp_tensor_data(w) + k->offset * esize, k->piece, w->dtype,
                              dev);
}

lamp_status lamp_zero_step(lamp_trainer *t, lamp_optim_step *step) {
  lamp_zero_state *z = &t->zero;
  float *weights = z->master == NULL ? lamp_tensor_data(lamp_model_weights(t->model)) : NULL;
  lamp_status st = LAMP_OK;
  for (size_t i = 0; st == LAMP_OK && i < t->buckets.n; i++) {
    const lamp_grad_bucket *k = &t->buckets.buckets[i];
    float *params = z->master != NULL ? z->master + k->shard_offset : weights + piece_start(t, k);
    st = update_piece(t, step, k, params);
    if (st == LAMP_OK) st = z->kept_buckets != NULL && z->kept_buckets[i] ? gather_wide(t, k, params) : gather_piece(t, k, params);
  }
  return st;
}

/* ---- checkpoints ------------------------------------------------------------------------------ */

float *lamp_zero_params(lamp_trainer *t) {
  if (t->zero.on && t->zero.master != NULL) return t->zero.full_master;
  return lamp_model_trainable(t->model);
}

float *lamp_zero_slot(lamp_trainer *t, uint32_t k) { return t->zero.on ? t->zero.full_slots[k] : t->slots[k]; }

lamp_status lamp_zero_open_full(lamp_trainer *t) {
  lamp_zero_state *z = &t->zero;
  if (!z->on) return LAMP_OK;
  size_t bytes = lamp_model_slab_numel(t->model) * sizeof(float);
  if (bytes == 0) bytes = sizeof(float);
  if (z->master != NULL && (z->full_master = lamp_mem_alloc(t->config.device, LAMP_MEM_WORKSPACE, bytes)) == NULL)
    return lamp_error_context(LAMP_ERR_SYSTEM, "Trainer: the whole master weights for a checkpoint");
  for (uint32_t j = 0; j < t->n_slots; j++)
    if ((z->full_slots[j] = lamp_mem_alloc(t->config.device, LAMP_MEM_WORKSPACE, bytes)) == NULL)
      return lamp_error_context(LAMP_ERR_SYSTEM, "Trainer: the whole optimizer state for a checkpoint");
  return LAMP_OK;
}

void lamp_zero_close_full(lamp_trainer *t) { free_full(&t->zero); }

/* A shard array into its whole slab (every rank's pieces), bucket by bucket. */
static lamp_status gather_array(lamp_trainer *t, const float *shard, float *whole) {
  lamp_status st = LAMP_OK;
  for (size_t i = 0; st == LAMP_OK && i < t->buckets.n; i++) {
    const lamp_grad_bucket *k = &t->buckets.buckets[i];
    st = lamp_comm_all_gather(t->config.comm, shard + k->shard_offset, whole + k->offset, k->piece, LAMP_F32,
                              t->config.device);
  }
  return st;
}

lamp_status lamp_zero_gather_full(lamp_trainer *t) {
  lamp_zero_state *z = &t->zero;
  if (!z->on) return LAMP_OK;
  lamp_status st = z->master != NULL ? gather_array(t, z->master, z->full_master) : LAMP_OK;
  for (uint32_t j = 0; st == LAMP_OK && j < t->n_slots; j++) st = gather_array(t, t->slots[j], z->full_slots[j]);
  return st;
}

lamp_status lamp_zero_scatter_full(lamp_trainer *t) {
  lamp_zero_state *z = &t->zero;
  if (!z->on) return LAMP_OK;
  lamp_status st = LAMP_OK;
  for (uint32_t j = 0; st == LAMP_OK && j < t->n_slots; j++) st = take_pieces(t, z->full_slots[j], t->slots[j]);
  if (st != LAMP_OK || z->master == NULL) return st; /* fp32 weights: resumed in place */
  st = take_pieces(t, z->full_master, z->master);
  lamp_tensor *w = lamp_model_weights(t->model);
  if (st == LAMP_OK)
    st = lamp_convert(t->config.device, lamp_tensor_data(w), w->dtype, z->full_master, LAMP_F32, lamp_model_numel(t->model));
  return st == LAMP_OK ? lamp_model_load_kept(t->model, z->full_master) : st;
}
