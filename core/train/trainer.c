#include "train/trainer.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "nn/fits.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"
#include "train/agree.h"
#include "train/grad_buckets.h"
#include "train/progress.h"
#include "train/trainer_internal.h"

/* ---- construction ------------------------------------------------------------------------ */

static lamp_status check_config(const lamp_trainer_config *c) {
  if (c->model == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'model' is required");
  if (c->loss == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'loss' is required");
  if (c->precision == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'precision' is required");
  if (c->comm == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'comm' is required");
  if (c->optim == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'optim' is required");
  if (c->accum < 1 || c->accum > LAMP_TRAINER_MAX_ACCUM)
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'accum' must be an integer in [1, %d], got %d", LAMP_TRAINER_MAX_ACCUM,
                      c->accum);
  if (!(c->bucket_mb >= 0.0) || isinf(c->bucket_mb))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'bucket_mb' must be a finite number >= 0 (0: 25), got %g", c->bucket_mb);
  if ((unsigned)c->graphs > LAMP_GRAPHS_OFF)
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'graphs' must be auto (0), on (1) or off (2), got %d", (int)c->graphs);
  if (!(c->clip >= 0.0) || isinf(c->clip))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'clip' must be a finite number >= 0 (0 disables), got %g", c->clip);
  if (c->metrics != NULL && c->metrics[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: 'metrics' must name a file, got an empty string");
  return lamp_schedule_validate(&c->schedule);
}

/* What this core can execute: float dtypes everywhere, an fp32 accumulation buffer. */
static lamp_status check_policy(const lamp_trainer *t) {
  const lamp_precision_policy *p = &t->policy;
  const char *name = lamp_precision_handle(t->config.precision)->desc->name;
  const uint32_t dtypes[4] = {p->weight_dtype, p->compute_dtype, p->activation_dtype, p->grad_dtype};
  const char *roles[4] = {"weight", "compute", "activation", "gradient"};
  for (int i = 0; i < 4; i++)
    if (!lamp_dtype_is_float((lamp_dtype)dtypes[i]))
      return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: policy's %s dtype %s is not f32, f16 or bf16", name, roles[i],
                        lamp_dtype_name((lamp_dtype)dtypes[i]));
  if (p->accum_dtype != LAMP_F32)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: policy's gradient accumulation dtype %s is not supported (this core accumulates in f32)",
                      name, lamp_dtype_name((lamp_dtype)p->accum_dtype));
  const uint32_t known = LAMP_POLICY_MASTER_WEIGHTS | LAMP_POLICY_LOSS_SCALING | LAMP_POLICY_STOCHASTIC_ROUNDING;
  if (p->flags & ~known) /* a later minor's request: training without it would not be what was asked */
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: policy flags 0x%x include 0x%x, which this core (plugin ABI %d.%d) does not know",
                      name, (unsigned)p->flags, (unsigned)(p->flags & ~known), LAMP_ABI_MAJOR, LAMP_ABI_MINOR);
  unsigned minor = lamp_precision_handle(t->config.precision)->desc->abi_minor;
  if ((p->flags & LAMP_POLICY_STOCHASTIC_ROUNDING) && minor < 4) /* the bit meant nothing before 1.4 */
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: policy sets flag 0x%x, stochastic rounding since plugin ABI 1.4, but the plugin was built for ABI %d.%u",
                      name, (unsigned)LAMP_POLICY_STOCHASTIC_ROUNDING, LAMP_ABI_MAJOR, minor);
  if ((p->flags & LAMP_POLICY_STOCHASTIC_ROUNDING) && p->weight_dtype == LAMP_F32)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: policy asks for stochastic rounding with f32 weights; it rounds fp32 values into f16 or bf16 weights, and f32 weights have nothing to round",
                      name);
  return LAMP_OK;
}

/*
** The run device must have a backend, and every plugin must run on it: declare it, or declare the
** CPU where the device's memory has a host view. The Trainer's device becomes the run device.
*/
static lamp_status check_device(const lamp_trainer_config *c) {
  lamp_status st = lamp_device_check(c->device);
  if (st == LAMP_OK) st = lamp_plugin_check_device(lamp_precision_handle(c->precision), c->device);
  if (st == LAMP_OK) st = lamp_plugin_check_device(lamp_comm_handle(c->comm), c->device);
  if (st == LAMP_OK) st = lamp_plugin_check_device(lamp_optim_handle(c->optim), c->device);
  if (st == LAMP_OK) st = lamp_set_run_device(c->device);
  return st != LAMP_OK ? lamp_error_context(st, "Trainer") : st;
}

static lamp_status build_model(lamp_trainer *t) {
  t->policy.struct_size = sizeof t->policy;
  lamp_status st = lamp_precision_policy_get(t->config.precision, &t->policy);
  if (st == LAMP_OK) st = check_policy(t);
  if (st != LAMP_OK) return st;
  lamp_model_config mc = {
      .device = t->config.device,
      .weight_dtype = (lamp_dtype)t->policy.weight_dtype,
      .compute_dtype = (lamp_dtype)t->policy.compute_dtype,
      .activation_dtype = (lamp_dtype)t->policy.activation_dtype,
      .master_weights = (t->policy.flags & LAMP_POLICY_MASTER_WEIGHTS) != 0,
      .seed = t->config.seed,
      .grad_dtype = (lamp_dtype)t->policy.grad_dtype,
      .stochastic_rounding = (t->policy.flags & LAMP_POLICY_STOCHASTIC_ROUNDING) != 0,
      .slab_multiple = t->zero.on ? t->zero.world : 1,
  };
  st = lamp_model_new(&t->model, t->config.model);
  if (st != LAMP_OK) return st;
  return lamp_model_build(t->model, &mc);
}

static uint32_t fnv1a(uint32_t h, const void *bytes, size_t n) {
  for (const unsigned char *p = bytes; n > 0; p++, n--) h = (h ^ *p) * 16777619u;
  return h;
}

/* How many of the optimizer's hyper-parameters are compared one by one; the rest share a field. */
#define AGREE_HPARAMS 12

static void precision_facts(lamp_trainer *t, lamp_agree *a) {
  const lamp_precision_policy *p = &t->policy;
  char scale[32];
  lamp_agree_add(a, "the precision plugin", "%s", lamp_precision_handle(t->config.precision)->desc->name);
  lamp_agree_add(a, "the precision policy", "weights %s, compute %s, activations %s, gradients %s%s%s%s",
                 lamp_dtype_name((lamp_dtype)p->weight_dtype), lamp_dtype_name((lamp_dtype)p->compute_dtype),
                 lamp_dtype_name((lamp_dtype)p->activation_dtype), lamp_dtype_name((lamp_dtype)p->grad_dtype),
                 (p->flags & LAMP_POLICY_MASTER_WEIGHTS) ? ", masters" : "",
                 (p->flags & LAMP_POLICY_LOSS_SCALING) ? ", loss scaling" : "",
                 (p->flags & LAMP_POLICY_STOCHASTIC_ROUNDING) ? ", stochastic rounding" : "");
  lamp_agree_add(a, "the initial loss scale", "%s",
                 lamp_agree_number(lamp_precision_loss_scale(t->config.precision), scale, sizeof scale));
}

/* A text option's value as the ranks compare it: itself, or where it would not fit a field, its
   start and a fingerprint of the whole. */
static const char *option_text_fact(const char *v, char *buf, size_t size) {
  if (strlen(v) < 40) return v;
  snprintf(buf, size, "%.24s... (fingerprint %08x)", v, (unsigned)fnv1a(2166136261u, v, strlen(v)));
  return buf;
}

/* The i-th option, numbers first, then texts (ABI 1.4): its name and its value's text. */
static const char *optimizer_option(lamp_trainer *t, uint32_t i, char *text, size_t size) {
  const lamp_plugin *d = lamp_optim_handle(t->config.optim)->desc;
  if (i < d->n_params) {
    double v = 0.0;
    (void)lamp_optim_hparam(t->config.optim, d->params[i].name, &v);
    lamp_agree_number(v, text, size);
    return d->params[i].name;
  }
  uint32_t n_text;
  const lamp_text_param *tp = lamp_plugin_text_params(d, &n_text);
  const char *name = tp[i - d->n_params].name;
  char buf[LAMP_AGREE_TEXT];
  snprintf(text, size, "%s", option_text_fact(lamp_optim_text(t->config.optim, name), buf, sizeof buf));
  return name;
}

/* Field names live in `names` (the check reads them after this returns). */
static void optimizer_facts(lamp_trainer *t, lamp_agree *a, char names[][64]) {
  const lamp_plugin *d = lamp_optim_handle(t->config.optim)->desc;
  uint32_t n_text;
  (void)lamp_plugin_text_params(d, &n_text);
  uint32_t n = d->n_params + n_text;
  lamp_agree_add(a, "the optimizer", "%s", d->name);
  char rest[LAMP_AGREE_TEXT] = "";
  for (uint32_t i = 0; i < n; i++) {
    char text[LAMP_AGREE_TEXT];
    const char *name = optimizer_option(t, i, text, sizeof text);
    if (i < AGREE_HPARAMS) {
      snprintf(names[i], 64, "the optimizer's '%.40s'", name);
      lamp_agree_add(a, names[i], "%s", text);
    } else { /* what does not fit is cut, as lamp_agree_add would cut it */
      size_t used = strlen(rest);
      size_t sep = used ? 2 : 0, len = strlen(text);
      if (used + sep + len >= sizeof rest) len = used + sep < sizeof rest ? sizeof rest - 1 - used - sep : 0;
      if (used + sep < sizeof rest) {
        memcpy(rest + used, ", ", sep);
        memcpy(rest + used + sep, text, len);
        rest[used + sep + len] = '\0';
      }
    }
  }
  if (n > AGREE_HPARAMS) lamp_agree_add(a, "the optimizer's further hyper-parameters", "%s", rest);
}

static void model_facts(lamp_trainer *t, lamp_agree *a) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < lamp_model_n_params(t->model); i++) {
    const lamp_model_param *p = lamp_model_param_at(t->model, i);
    h = fnv1a(h, p->name, strlen(p->name) + 1);
    h = fnv1a(h, p->shape, (size_t)p->ndim * sizeof *p->shape);
  }
  lamp_agree_add(a, "the model", "%zu parameters in %zu tensors", lamp_model_numel(t->model), lamp_model_n_params(t->model));
  lamp_agree_add(a, "the model's parameter names and shapes", "fingerprint %08x", (unsigned)h);
}

static void step_facts(lamp_trainer *t, lamp_agree *a) {
  const lamp_trainer_config *c = &t->config;
  const lamp_schedule *s = &c->schedule;
  char clip[32], bucket[32], min_lr[32], gamma[32];
  lamp_agree_add(a, "accum", "%d", c->accum);
  lamp_agree_add(a, "clip", "%s", lamp_agree_number(c->clip, clip, sizeof clip));
  lamp_agree_add(a, "the schedule", "%s (total %llu, warmup %llu, min_lr %s, step_size %llu, gamma %s)",
                 lamp_schedule_name(s->kind), (unsigned long long)s->total, (unsigned long long)s->warmup,
                 lamp_agree_number(s->min_lr, min_lr, sizeof min_lr), (unsigned long long)s->step_size,
                 lamp_agree_number(s->gamma, gamma, sizeof gamma));
  lamp_agree_add(a, "bucket_mb", "%s", lamp_agree_number(c->bucket_mb > 0.0 ? c->bucket_mb : 25.0, bucket, sizeof bucket));
  lamp_agree_add(a, "compress", "%s", c->compress == LAMP_F32 ? "none" : lamp_dtype_name(c->compress));
  lamp_agree_add(a, "max_skipped", "%lld", (long long)c->max_skipped);
  lamp_agree_add(a, "shard_optimizer", "%s", c->shard_optimizer ? "true" : "false");
}

/*
** Every rank must build the same step (DDP checks its model at construction too): the plugins,
** the model and every setting that changes what a step computes. It is also the first
** collective, so a rank that never got this far (a missing plugin, a crash) is reported here, by
** name, instead of leaving the others waiting in a broadcast that may look complete.
*/
static lamp_status check_ranks_agree(lamp_trainer *t) {
  lamp_agree a;
  char names[AGREE_HPARAMS][64];
  lamp_agree_init(&a);
  precision_facts(t, &a);
  optimizer_facts(t, &a, names);
  model_facts(t, &a);
  step_facts(t, &a);
  return lamp_agree_check(&a, t->config.comm, "Trainer", "the same model and settings",
                          "every rank must build the same Trainer");
}

/*
** Buffers (BatchNorm's running statistics) drift apart under DDP, each rank normalising its own
** shard: like DDP's broadcast_buffers, rank 0's are the ones that count, at the start and
** whenever the model is evaluated or saved.
*/
static lamp_status broadcast_buffers(lamp_trainer *t) {
  lamp_tensor *b = lamp_model_buffers(t->model);
  if (t->stats.world == 1 || b == NULL) return LAMP_OK;
  return lamp_comm_broadcast(t->config.comm, lamp_tensor_data(b), lamp_tensor_numel(b), LAMP_F32, 0, t->config.device);
}

/* DDP starts from identical parameters: rank 0's initialisation wins. Under stochastic rounding
   the ranks also round with rank 0's seed, so that their 16-bit weights stay identical. */
static lamp_status broadcast_initial_parameters(lamp_trainer *t) {
  if (lamp_comm_size(t->config.comm) == 1) return LAMP_OK;
  lamp_status agree = check_ranks_agree(t);
  if (agree != LAMP_OK) return agree;
  lamp_status st = LAMP_OK;
  if (t->policy.flags & LAMP_POLICY_STOCHASTIC_ROUNDING)
    st = lamp_comm_broadcast(t->config.comm, &t->rounding_seed, sizeof t->rounding_seed, LAMP_U8, 0, LAMP_HOST);
  if (st == LAMP_OK)
    st = lamp_comm_broadcast(t->config.comm, lamp_model_trainable(t->model), lamp_model_numel(t->model), LAMP_F32, 0,
                             t->config.device);
  if (st == LAMP_OK) st = broadcast_buffers(t);
  if (st != LAMP_OK) return st;
  return lamp_model_sync_weights(t->model);
}

/* The model's slabs are in memory already; the optimizer's state must fit beside them. */
static lamp_status check_state_fits(const lamp_trainer *t) {
  size_t n = lamp_zero_shard_numel(t);
  uint64_t model_bytes = 0;
  const lamp_tensor *slabs[4] = {lamp_model_weights(t->model), lamp_model_grads(t->model), lamp_model_master(t->model),
                                 lamp_model_buffers(t->model)};
  for (int i = 0; i < 4; i++)
    if (slabs[i] != NULL) model_bytes = lamp_size_mul_add(1, model_bytes, lamp_tensor_nbytes(slabs[i]));
  uint64_t bytes = lamp_size_mul_add(n, (uint64_t)t->n_slots * sizeof(float), model_bytes);
  return lamp_check_fits(t->config.device, bytes, NULL,
                         "Trainer: the model (%llu bytes) with the state of optimizer '%s' (%u fp32 values per parameter, %zu parameters%s)",
                         (unsigned long long)model_bytes, lamp_optim_handle(t->config.optim)->desc->name, (unsigned)t->n_slots, n,
                         t->zero.on ? " in this rank's shard" : "");
}

/* The slots were checked when the optimizer was opened (count and dtype): allocate them. */
static lamp_status allocate_optimizer_state(lamp_trainer *t) {
  lamp_status st = lamp_optim_slots(t->config.optim, t->slot_decls, LAMP_OPTIM_MAX_SLOTS, &t->n_slots);
  if (st == LAMP_OK) st = check_state_fits(t);
  if (st != LAMP_OK) return st;
  size_t n = lamp_zero_shard_numel(t);
  for (uint32_t i = 0; i < t->n_slots; i++) {
    t->slots[i] = lamp_mem_alloc(t->config.device, LAMP_MEM_OPTIM_STATE, (n ? n : 1) * sizeof(float));
    if (t->slots[i] == NULL) return LAMP_ERR_SYSTEM;
  }
  return LAMP_OK;
}

/* The step report on the device and its host copy: a few scalars and one loss per micro-step;
   and the host copies of a group's batches. */
static lamp_status allocate_report(lamp_trainer *t) {
  t->report_bytes = sizeof(lamp_step_report) + (size_t)t->config.accum * sizeof(double);
  t->report = lamp_mem_alloc(t->config.device, LAMP_MEM_WORKSPACE, t->report_bytes);
  t->report_host = calloc(1, t->report_bytes);
  t->staged = calloc((size_t)t->config.accum, sizeof *t->staged);
  if (t->report_host == NULL || t->staged == NULL)
    return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the step report");
  return t->report == NULL ? LAMP_ERR_SYSTEM : LAMP_OK;
}

/* One segment per parameter tensor: the decay flag and lr multiplier travel with it. The tensor
   table beside it names and shapes each one, pointing into the model's own records. */
static lamp_status build_segments(lamp_trainer *t) {
  size_t n = lamp_model_n_params(t->model);
  t->segments = calloc(n ? n : 1, sizeof *t->segments);
  t->tensors = calloc(n ? n : 1, sizeof *t->tensors);
  if (t->segments == NULL || t->tensors == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory");
  for (size_t i = 0; i < n; i++) {
    const lamp_model_param *p = lamp_model_param_at(t->model, i);
    t->segments[i] = (lamp_optim_segment){p->offset, p->count, 1.0f, p->decay ? 1.0f : 0.0f};
    t->tensors[i] = (lamp_optim_tensor){p->name, (uint32_t)p->ndim, p->shape, p->offset, p->count, i};
  }
  t->n_segments = n;
  return LAMP_OK;
}

/*
** Graphs by default where the device records them and one rank trains: a multi-rank step runs the
** communicator's collectives, which may stage through the host (MPI), and are not recorded.
*/
static lamp_status init_graphs(lamp_trainer *t) {
  const lamp_trainer_config *c = &t->config;
  int can = lamp_device_has(c->device, LAMP_CAP_GRAPHS);
  if (c->graphs == LAMP_GRAPHS_ON && !can)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: graphs = true needs a device that records graphs (cuda); %s does not",
                      lamp_device_name(c->device));
  if (c->graphs == LAMP_GRAPHS_ON && t->stats.world > 1)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: graphs = true needs a single rank, this run has %d: a step of several ranks runs the communicator's collectives, which are not recorded",
                      t->stats.world);
  int on = c->graphs != LAMP_GRAPHS_OFF && can && t->stats.world == 1;
  return lamp_step_graphs_init(&t->graphs, c->device, c->accum, on, c->graphs == LAMP_GRAPHS_ON);
}

static void log_start(const lamp_trainer *t) {
  size_t numel = lamp_model_numel(t->model);
  lamp_log(LAMP_LOG_INFO, "trainer", "%zu parameters; weights %s, compute %s, activations %s%s%s; %d rank%s, accum %d, lr %g (%s)",
           numel, lamp_dtype_name((lamp_dtype)t->policy.weight_dtype),
           lamp_dtype_name((lamp_dtype)t->policy.compute_dtype),
           lamp_dtype_name((lamp_dtype)t->policy.activation_dtype),
           (t->policy.flags & LAMP_POLICY_MASTER_WEIGHTS) ? ", fp32 master weights" : "",
           (t->policy.flags & LAMP_POLICY_STOCHASTIC_ROUNDING) ? ", stochastic rounding" : "",
           t->stats.world, t->stats.world == 1 ? "" : "s", t->config.accum, t->base_lr,
           lamp_schedule_name(t->config.schedule.kind));
  if (t->zero.on)
    lamp_log(LAMP_LOG_INFO, "trainer", "shard_optimizer: the optimizer state%s sharded over %d ranks, %zu of %zu elements on each",
             t->zero.master != NULL ? " and the fp32 master weights" : "", t->stats.world, lamp_zero_shard_numel(t),
             lamp_model_numel(t->model));
}

lamp_status lamp_trainer_new(lamp_trainer **out, const lamp_trainer_config *config) {
  *out = NULL;
  lamp_status st = check_config(config);
  if (st == LAMP_OK) st = check_device(config);
  if (st != LAMP_OK) return st;
  lamp_trainer *t = calloc(1, sizeof *t);
  if (t == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory");
  t->config = *config;
  t->config.metrics = NULL; /* the caller's string: the metrics file keeps its own copy */
  lamp_layer_retain(config->model);
  lamp_loss_retain(config->loss);
  if (lamp_optim_hparam(config->optim, "lr", &t->base_lr) != 0) t->base_lr = 0.0; /* an optimizer without lr */
  t->stats.world = lamp_comm_size(config->comm);
  t->rounding_seed = config->seed;
  lamp_log_set_rank(lamp_comm_rank(config->comm)); /* progress and info lines on rank 0 only */
  t->stats.loss_scale = 1.0;
  t->zero.on = config->shard_optimizer && t->stats.world > 1;
  t->zero.rank = lamp_comm_rank(config->comm);
  t->zero.world = t->stats.world;
  if (config->shard_optimizer && t->stats.world == 1)
    lamp_log(LAMP_LOG_INFO, "trainer", "shard_optimizer with 1 rank: nothing to shard, the optimizer state stays whole");
  double bucket_mb = config->bucket_mb > 0.0 ? config->bucket_mb : 25.0;
  /* The metrics file before the first collective: a rank 0 that cannot write it stops there, and
     the others hear of it as of any rank that never arrived. */
  if ((st = lamp_trainer_metrics_open(t, config->metrics)) != LAMP_OK || (st = build_model(t)) != LAMP_OK ||
      (st = broadcast_initial_parameters(t)) != LAMP_OK || (st = lamp_zero_check(t)) != LAMP_OK ||
      (st = lamp_grad_buckets_init(&t->buckets, t->model, config->comm, config->device,
                                   (size_t)(bucket_mb * 1048576.0), config->compress, t->zero.on)) != LAMP_OK ||
      (st = allocate_optimizer_state(t)) != LAMP_OK || (st = allocate_report(t)) != LAMP_OK ||
      (st = build_segments(t)) != LAMP_OK || (st = lamp_zero_init(t)) != LAMP_OK || (st = init_graphs(t)) != LAMP_OK) {
    lamp_trainer_free(t);
    return st;
  }
  log_start(t);
  lamp_trainer_metrics_ready(t);
  *out = t;
  return LAMP_OK;
}

/* The host copies of the batches, once the device has read them (an error there was or will be
   reported by a step: a trainer being freed has nothing to report it to). */
static void free_staged(lamp_trainer *t) {
  for (int k = 0; t->staged != NULL && k < t->config.accum; k++) {
    lamp_staged_batch *s = &t->staged[k];
    if (s->uploaded != NULL) (void)lamp_event_wait(s->uploaded);
    lamp_event_free(s->uploaded);
    lamp_tensor_release(s->x);
    lamp_tensor_release(s->y);
  }
  free(t->staged);
}

void lamp_trainer_free(lamp_trainer *t) {
  if (t == NULL) return;
  lamp_trainer_metrics_close(t);
  for (uint32_t i = 0; i < LAMP_OPTIM_MAX_SLOTS; i++) lamp_mem_free(t->slots[i]);
  free(t->segments);
  free(t->tensors);
  lamp_mem_free(t->report);
  free(t->report_host);
  free_staged(t);
  lamp_tensor_release(t->x_dev);
  lamp_tensor_release(t->y_dev);
  lamp_tensor_release(t->dlogits);
  lamp_grad_buckets_free(&t->buckets);
  lamp_zero_free(&t->zero);
  lamp_step_graphs_free(&t->graphs);
  lamp_model_free(t->model);
  lamp_loss_release(t->config.loss);
  lamp_layer_release(t->config.model);
  free(t);
}

/* ---- the step ---------------------------------------------------------------------------- */

static lamp_exec exec_of(const lamp_trainer *t, int training) {
  return (lamp_exec){.device = t->config.device,
                     .compute_dtype = (lamp_dtype)t->policy.compute_dtype,
                     .activation_dtype = (lamp_dtype)t->policy.activation_dtype,
                     .training = training,
                     .grad_dtype = (lamp_dtype)t->policy.grad_dtype};
}

/* dst (a host tensor, made or reshaped as needed) = a copy of the host tensor src. */
static lamp_status copy_on_host(lamp_tensor **dst, const lamp_tensor *src) {
  lamp_status st = lamp_tensor_ensure(dst, src->dtype, LAMP_HOST, src->ndim, src->shape, LAMP_MEM_DATA);
  if (st == LAMP_OK) memcpy(lamp_tensor_data(*dst), lamp_tensor_data(src), lamp_tensor_nbytes(src));
  return st;
}

/*
** The batch on the run device: x and y themselves when they are there, else copies uploaded
** through the device's queue. The upload reads a host copy made here, so the caller may refill
** its buffers at once (the loader reads the next batch while the device computes). Each
** micro-step of a group has its own copy, refilled only by the same micro-step of a later group:
** by then the group's report has come back, so waiting for the copy's upload costs nothing, and
** the step keeps its one synchronisation. On the CPU nothing is copied.
*/
static lamp_status on_device(lamp_trainer *t, int slot, const lamp_tensor **x, const lamp_tensor **y) {
  lamp_device dev = t->config.device;
  if ((*x)->device == dev && (*y)->device == dev) return LAMP_OK;
  if ((*x)->device != LAMP_HOST || (*y)->device != LAMP_HOST || !lamp_tensor_is_contiguous(*x) ||
      !lamp_tensor_is_contiguous(*y))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: a batch must be contiguous tensors on the host or on %s",
                      lamp_device_name(dev));
  lamp_staged_batch *s = &t->staged[slot];
  lamp_status st = s->uploaded == NULL ? lamp_event_new(dev, &s->uploaded) : LAMP_OK;
  if (st == LAMP_OK) st = lamp_event_wait(s->uploaded);
  if (st == LAMP_OK) st = copy_on_host(&s->x, *x);
  if (st == LAMP_OK) st = copy_on_host(&s->y, *y);
  if (st == LAMP_OK) st = lamp_tensor_ensure(&t->x_dev, (*x)->dtype, dev, (*x)->ndim, (*x)->shape, LAMP_MEM_DATA);
  if (st == LAMP_OK) st = lamp_tensor_ensure(&t->y_dev, (*y)->dtype, dev, (*y)->ndim, (*y)->shape, LAMP_MEM_DATA);
  if (st == LAMP_OK)
    st = lamp_upload_async(dev, lamp_tensor_data(t->x_dev), lamp_tensor_data(s->x), lamp_tensor_nbytes(s->x));
  if (st == LAMP_OK)
    st = lamp_upload_async(dev, lamp_tensor_data(t->y_dev), lamp_tensor_data(s->y), lamp_tensor_nbytes(s->y));
  if (st == LAMP_OK) st = lamp_event_record(s->uploaded);
  if (st != LAMP_OK) return st;
  *x = t->x_dev;
  *y = t->y_dev;
  return LAMP_OK;
}

/* Where micro-step k's loss is written: the device copy of the report. */
static double *loss_slot(const lamp_trainer *t, int k) {
  return (double *)((char *)t->report + offsetof(lamp_step_report, loss)) + k;
}

/* What one micro-step computes on the device: the input already there, the loss gradient's scale. */
typedef struct micro_step {
  lamp_trainer *t;
  const lamp_tensor *x, *y;
  float grad_scale;
  uint64_t forward_index; /* the model's count of training forwards before this one (Dropout's masks) */
} micro_step;

/* The forward, the loss and the backward: the work a graph records (step_graph.h). */
static lamp_status run_micro_step(void *ctx) {
  const micro_step *m = ctx;
  lamp_trainer *t = m->t;
  const lamp_tensor *logits;
  lamp_exec exec = exec_of(t, 1);
  lamp_model_set_forward_index(t->model, m->forward_index); /* a recording that failed ran a forward already */
  lamp_status st = lamp_model_forward(t->model, m->x, 1, &logits);
  if (st != LAMP_OK) return st;
  st = lamp_tensor_ensure(&t->dlogits, logits->dtype, logits->device, logits->ndim, logits->shape,
                          LAMP_MEM_ACTIVATIONS);
  if (st != LAMP_OK) return st;
  /* The loss stays on the device until the group's report comes back. */
  st = t->config.loss->ops->forward_backward(t->config.loss, &exec, logits, m->y, m->grad_scale,
                                             loss_slot(t, t->micro), t->dlogits, NULL);
  if (st != LAMP_OK) return st;
  /* The first micro-step writes the gradients afresh: no zeroing pass over the slab. On the
     last one, with several ranks, each bucket's all-reduce starts (on a stream: is queued) as
     backward completes it. */
  if (t->micro + 1 < t->config.accum || t->stats.world == 1)
    return lamp_model_backward_ex(t->model, t->dlogits, t->micro == 0, NULL, NULL);
  lamp_grad_buckets_begin(&t->buckets, lamp_tensor_data(lamp_model_grads(t->model)));
  st = lamp_model_backward_ex(t->model, t->dlogits, t->micro == 0, lamp_grad_buckets_ready, &t->buckets);
  lamp_status reduced = lamp_grad_buckets_finish(&t->buckets); /* waits even after a failed backward */
  t->stats.buckets_overlapped = t->buckets.started_early;
  return st != LAMP_OK ? st : reduced;
}

static lamp_status forward_backward(lamp_trainer *t, const lamp_tensor *x, const lamp_tensor *y, double scale) {
  lamp_status st = on_device(t, t->micro, &x, &y);
  if (st != LAMP_OK) return st;
  lamp_model_set_host_slot(t->model, (unsigned)t->micro); /* Dropout's masks: as the batches */
  /* The accumulation divisor rides on the loss gradient, so gradients sum to the mean. */
  micro_step m = {t, x, y, (float)(scale / t->config.accum), lamp_model_forward_index(t->model)};
  st = lamp_step_graphs_run(&t->graphs, t->micro, m.grad_scale, lamp_tensor_data(x), lamp_tensor_data(y),
                            run_micro_step, &m);
  /* One training forward, whether it ran, was replayed (no host code) or recorded and then run. */
  lamp_model_set_forward_index(t->model, m.forward_index + 1);
  return st;
}

/*
** The group's report: the inf/NaN check over the gradients (already summed over ranks by the
** buckets, so every rank sees the same answer) under a loss scaler, their squared norm when
** clipping, and the losses, brought to the host in one copy: the step's one synchronisation.
** Without a scaler the check is skipped: a NaN still surfaces, through the loss check of the
** next step, and at the same step on every rank (the all-reduce gave them all the same
** gradients, hence the same parameters and the same NaN loss). The division by S*N is not a pass
** of its own: it is folded into the optimizer's fused step as grad_scale.
**
** Under a loss scaler with clipping, the squared norm is the inf/NaN check too, so one pass over the
** gradients does both: a finite float's square is finite in double, and so is the sum of any
** slab's squares (it would need more than 2^700 elements to overflow), while an inf or a NaN makes
** the sum inf or NaN. found_inf is then set on the host from the sum.
*/
static lamp_status read_report(lamp_trainer *t) {
  lamp_device dev = t->config.device;
  /* Sharded: this rank's pieces of the summed gradients, combined with the others' below. */
  float *grads = t->zero.on ? t->buckets.shard_grads : lamp_tensor_data(lamp_model_grads(t->model));
  size_t n = lamp_zero_shard_numel(t);
  char *report = t->report;
  int scaling = (t->policy.flags & LAMP_POLICY_LOSS_SCALING) != 0, clipping = t->config.clip != 0.0;
  lamp_status st = lamp_zero(dev, report + offsetof(lamp_step_report, found_inf), sizeof(int32_t));
  if (st == LAMP_OK && scaling && !clipping)
    st = lamp_unscale_and_check(dev, grads, n, 1.0f, (int *)(void *)(report + offsetof(lamp_step_report, found_inf)));
  if (st == LAMP_OK && clipping) /* the norm costs a pass; only clipping needs it */
    st = lamp_sum_squares(dev, grads, n, (double *)(void *)(report + offsetof(lamp_step_report, sumsq)));
  if (st == LAMP_OK) st = lamp_copy(LAMP_HOST, t->report_host, dev, t->report, t->report_bytes);
  if (st != LAMP_OK) return st;
  if (scaling && clipping) t->report_host->found_inf = !isfinite(t->report_host->sumsq);
  if (t->zero.on && (scaling || clipping) && (st = lamp_zero_combine_report(t)) != LAMP_OK) return st;
  t->stats.last_loss = t->report_host->loss[t->config.accum - 1];
  return LAMP_OK;
}

/* Without a loss scaler a non-finite loss cannot be skipped: training stops, naming the step. */
static lamp_status check_losses(const lamp_trainer *t) {
  if (t->policy.flags & LAMP_POLICY_LOSS_SCALING) return LAMP_OK;
  for (int k = 0; k < t->config.accum; k++) {
    double loss = t->report_host->loss[k];
    if (!isfinite(loss))
      return lamp_error(LAMP_ERR_NUMERIC, "Trainer: loss is %s at step %llu; training cannot continue (lower the learning rate or enable clipping)",
                        isnan(loss) ? "NaN" : (loss > 0 ? "+inf" : "-inf"), (unsigned long long)t->stats.steps + 1);
  }
  return LAMP_OK;
}

/* unscale = 1/(S*N) turns the slab's summed, scaled gradients into the averaged true ones. */
static void clip_coefficient(lamp_trainer *t, double unscale, double *coef) {
  *coef = 1.0;
  if (t->config.clip == 0.0) return;
  t->stats.grad_norm = sqrt(t->report_host->sumsq) * unscale;
  /* PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) only when that is < 1. */
  double c = t->config.clip / (t->stats.grad_norm + 1e-6);
  if (c < 1.0) *coef = c;
}

/* ZeRO-1: the step over this rank's pieces, then the weights all-gathered (zero_shards.h). */
static lamp_status sharded_step(lamp_trainer *t, double lr, double grad_scale) {
  lamp_optim_step step = {.device = t->config.device, .step = t->stats.steps + 1, .lr = lr, .grad_scale = grad_scale};
  lamp_status st = lamp_zero_step(t, &step);
  if (st != LAMP_OK) return st;
  t->stats.lr = lr;
  t->stats.steps++;
  return LAMP_OK;
}

static lamp_status optimizer_step(lamp_trainer *t, double scale) {
  /* In double, as PyTorch computes 1/S: fp32 division can be inexact for large S. */
  double unscale = 1.0 / (scale * (double)t->stats.world);
  double coef;
  clip_coefficient(t, unscale, &coef);
  lamp_status st;
  double lr = lamp_schedule_lr(&t->config.schedule, t->base_lr, t->stats.steps);
  if (t->zero.on) return sharded_step(t, lr, coef * unscale);
  if ((st = lamp_model_begin_update(t->model)) != LAMP_OK) return st;
  lamp_optim_step step = {
      .device = t->config.device,
      .n = lamp_model_numel(t->model),
      .params = lamp_model_trainable(t->model),
      .grads = lamp_tensor_data(lamp_model_grads(t->model)),
      .slots = t->slots,
      .segments = t->segments,
      .n_segments = t->n_segments,
      .tensors = t->tensors,
      .n_tensors = t->n_segments,
      .step = t->stats.steps + 1,
      .lr = lr,
      .grad_scale = coef * unscale,
  };
  /* A plugin that writes the 16-bit weights in its own pass saves the conversion after it (rounding
     to nearest: under stochastic rounding the model offers no slab, and the core rounds). */
  lamp_dtype out_dtype = LAMP_F32;
  if (lamp_optim_caps(t->config.optim) & LAMP_OPTIM_CAP_WEIGHTS_OUT) {
    step.weights_out = lamp_model_weights_out(t->model, &out_dtype);
    step.weights_out_dtype = (uint32_t)out_dtype;
  }
  st = lamp_optim_apply(t->config.optim, &step);
  if (st != LAMP_OK) return st;
  t->stats.lr = lr;
  t->stats.steps++;
  return step.weights_out != NULL ? LAMP_OK : lamp_model_update_weights(t->model, t->rounding_seed, t->stats.steps);
}

/*
** A skipped step is logged, and at the first and every 100th it is a warning: a static loss scale
** that always overflows would otherwise skip every step of a run that looks healthy. Steps are
** numbered as max_steps counts them, taken or skipped.
*/
static void log_skip(const lamp_trainer *t, double scale) {
  uint64_t n = t->stats.skipped_steps;
  /* Every rank skips the same steps: one warning is enough, rank 0's (info lines are rank 0's). */
  int warn = (n == 1 || n % 100 == 0) && lamp_comm_rank(t->config.comm) == 0;
  lamp_log(warn ? LAMP_LOG_WARN : LAMP_LOG_INFO, lamp_precision_handle(t->config.precision)->desc->name,
           "step %llu skipped: inf/NaN in the gradients at loss scale %g, now %g (%llu skipped so far, %llu in a row)%s",
           (unsigned long long)(t->stats.steps + n), scale, lamp_precision_loss_scale(t->config.precision),
           (unsigned long long)n, (unsigned long long)t->stats.skipped_in_a_row,
           warn ? "; this warning repeats every 100 skipped steps" : "");
}

/* Skipping forever is training that makes no progress: max_skipped in a row is an error. */
static lamp_status check_skip_limit(const lamp_trainer *t, double scale) {
  int64_t max = t->config.max_skipped == 0 ? LAMP_TRAINER_DEFAULT_MAX_SKIPPED : t->config.max_skipped;
  if (max < 0 || t->stats.skipped_in_a_row < (uint64_t)max) return LAMP_OK;
  return lamp_error(LAMP_ERR_NUMERIC, "Trainer: %llu optimizer steps in a row skipped for inf/NaN gradients (precision '%s', loss scale %g); training makes no progress: use a smaller or dynamic loss scale, lower the learning rate, or raise the Trainer's max_skipped",
                    (unsigned long long)t->stats.skipped_in_a_row, lamp_precision_handle(t->config.precision)->desc->name, scale);
}

static lamp_status finish_accumulation_group(lamp_trainer *t, double scale) {
  lamp_status st = read_report(t);
  /* The report's copy waited for the stream past the buckets' collectives: one that failed (a
     timeout, a peer gone) says so now, before its gradients are used. */
  if (st == LAMP_OK && t->stats.world > 1) st = lamp_grad_buckets_confirm(&t->buckets);
  if (st == LAMP_OK) st = check_losses(t);
  if (st != LAMP_OK) return st;
  int found_inf = t->report_host->found_inf != 0, skip = 0;
  st = lamp_precision_update(t->config.precision, found_inf, &skip);
  if (st != LAMP_OK) return lamp_error_context(st, "Trainer: step %llu", (unsigned long long)t->stats.steps + 1);
  if (found_inf && !skip)
    return lamp_error(LAMP_ERR_NUMERIC, "Trainer: gradients contain inf/NaN at step %llu and precision '%s' does not skip such steps",
                      (unsigned long long)t->stats.steps + 1, lamp_precision_handle(t->config.precision)->desc->name);
  if (skip) {
    t->stats.skipped_steps++;
    t->stats.skipped_in_a_row++;
    log_skip(t, scale);
  } else {
    st = optimizer_step(t, scale);
    if (st != LAMP_OK) return st;
    t->stats.skipped_in_a_row = 0;
  }
  t->stats.loss_scale = lamp_precision_loss_scale(t->config.precision);
  lamp_trainer_metrics_step(t, scale, skip); /* the step that reaches max_skipped too */
  return skip ? check_skip_limit(t, scale) : LAMP_OK;
}

/* The plugin's loss scale for this step: a finite number > 0, or training stops. A scale of 0
   would zero every gradient and make the unscaling divide by 0; NaN would skip every step. */
static lamp_status loss_scale(const lamp_trainer *t, double *scale) {
  *scale = lamp_precision_loss_scale(t->config.precision);
  if (*scale > 0.0 && isfinite(*scale)) return LAMP_OK;
  char text[32];
  return lamp_error(LAMP_ERR_NUMERIC, "Trainer: precision plugin '%s' returned loss scale %s at step %llu; a loss scale must be a finite number > 0",
                    lamp_precision_handle(t->config.precision)->desc->name, lamp_agree_number(*scale, text, sizeof text),
                    (unsigned long long)t->stats.steps + t->stats.skipped_steps + 1);
}

/* One micro-batch. */
static lamp_status step(lamp_trainer *t, const lamp_tensor *x, const lamp_tensor *y) {
  double scale;
  lamp_status st = loss_scale(t, &scale);
  if (st == LAMP_OK) st = forward_backward(t, x, y, scale);
  if (st != LAMP_OK) return st;
  size_t batch = x->ndim > 0 ? (size_t)x->shape[0] : 1;
  if (t->stats.micro_steps == 0)
    lamp_log(LAMP_LOG_INFO, "trainer", "B_eff = %zu (batch %zu x %d rank%s x accum %d), lr %g at the first step",
             batch * (size_t)t->stats.world * (size_t)t->config.accum, batch, t->stats.world,
             t->stats.world == 1 ? "" : "s", t->config.accum, lamp_schedule_lr(&t->config.schedule, t->base_lr, 0));
  t->stats.micro_steps++;
  t->stats.samples += batch;
  t->stats.batch = batch;
  t->stats.effective_batch = batch * (size_t)t->stats.world * (size_t)t->config.accum;
  if (++t->micro < t->config.accum) return LAMP_OK; /* no communication before the last micro-step */
  t->micro = 0;
  return finish_accumulation_group(t, scale);
}

lamp_status lamp_trainer_step(lamp_trainer *t, const lamp_tensor *x, const lamp_tensor *y) {
  lamp_trainer_metrics_flush(t);
  return step(t, x, y); /* the caller may reuse x and y now: the device reads a copy */
}

/* ---- epochs and evaluation ---------------------------------------------------------------- */

/* The loader's batches over all ranks, in samples: what an epoch position is counted in. */
static uint64_t global_batch(const lamp_trainer *t, const lamp_loader *loader) {
  return (uint64_t)lamp_loader_get_config(loader)->batch * (uint64_t)t->stats.world;
}

/*
** Puts the loader where training goes on: a new epoch, or the open one at its next batch. An
** epoch opened by a checkpoint written with another global batch (other ranks or batch size)
** continues at the same sample, which must fall on one of this loader's batch boundaries.
*/
static lamp_status position_loader(lamp_trainer *t, lamp_loader *loader) {
  uint64_t gb = global_batch(t, loader);
  if (!t->epoch_open) {
    t->epoch_batches = 0;
    t->epoch_global_batch = gb;
    t->epoch_open = 1;
    return lamp_loader_start_epoch(loader, t->epochs_done);
  }
  if (t->epoch_global_batch != gb) {
    uint64_t consumed = t->epoch_batches * t->epoch_global_batch;
    if (consumed % gb != 0)
      return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: cannot continue epoch %llu at sample %llu: it is not a multiple of this loader's global batch %llu (batch %zu x %d rank%s); use a batch that divides it",
                        (unsigned long long)t->epochs_done + 1, (unsigned long long)consumed, (unsigned long long)gb,
                        lamp_loader_get_config(loader)->batch, t->stats.world, t->stats.world == 1 ? "" : "s");
    t->epoch_batches = consumed / gb;
    t->epoch_global_batch = gb;
  }
  return lamp_loader_seek(loader, t->epochs_done, (size_t)t->epoch_batches);
}

/*
** The epoch's loss sums: a micro-step's loss reaches the host with its group's report, so the
** sums take whole groups as they complete (`upto` = accum), and at the end of an epoch the losses
** of a group still open (copied back for the purpose).
*/
static lamp_status count_losses(lamp_trainer *t, int upto, double *sum, uint64_t *batches) {
  int from = t->losses_counted;
  if (upto <= from) return LAMP_OK;
  if (upto < t->config.accum) {
    lamp_status st = lamp_copy(LAMP_HOST, &t->report_host->loss[from], t->config.device, loss_slot(t, from),
                               (size_t)(upto - from) * sizeof(double));
    if (st != LAMP_OK) return st;
  }
  for (int k = from; k < upto; k++) *sum += t->report_host->loss[k];
  *batches += (uint64_t)(upto - from);
  t->losses_counted = upto < t->config.accum ? upto : 0;
  return LAMP_OK;
}

/*
** With several ranks, every step is a collective: the ranks must take the same number of them,
** over shards of one data set, in the same order. Compared before the first step, so a mismatch
** is an error on every rank instead of an all-reduce of unrelated steps, or a hang when one rank
** runs out of batches first.
*/
static lamp_status check_loader_agrees(lamp_trainer *t, const lamp_loader *loader, uint64_t max_steps) {
  if (t->stats.world == 1) return LAMP_OK;
  const lamp_loader_config *c = lamp_loader_get_config(loader);
  lamp_agree a;
  lamp_agree_init(&a);
  lamp_agree_add(&a, "the batch size", "%zu", c->batch);
  lamp_agree_add(&a, "the data set size", "%zu", lamp_dataset_size(lamp_loader_dataset(loader)));
  lamp_agree_add(&a, "the batches per epoch", "%zu", lamp_loader_batches_per_epoch(loader));
  lamp_agree_add(&a, "the loader's ranks (data.loader's comm)", "%d", c->world);
  lamp_agree_add(&a, "shuffle", "%s", c->shuffle ? "true" : "false");
  lamp_agree_add(&a, "drop_last", "%s", c->drop_last ? "true" : "false");
  lamp_agree_add(&a, "the loader's seed", "%llu", (unsigned long long)c->seed);
  lamp_agree_add(&a, "max_steps", "%llu", (unsigned long long)max_steps);
  lamp_agree_add(&a, "where training stands", "epoch %llu, sample %llu of it", (unsigned long long)t->epochs_done + 1,
                 (unsigned long long)(t->epoch_open ? t->epoch_batches * t->epoch_global_batch : 0));
  return lamp_agree_check(&a, t->config.comm, "Trainer", "the same loader",
                          "every rank must train with the same loader settings and max_steps");
}

/* An epoch without a batch would train nothing and report a loss of 0: refused, with why. A data
   set is never empty, so only drop_last can leave a rank's shard without a full batch. */
static lamp_status check_loader_has_batches(const lamp_trainer *t, const lamp_loader *loader) {
  if (lamp_loader_batches_per_epoch(loader) > 0) return LAMP_OK;
  const lamp_loader_config *c = lamp_loader_get_config(loader);
  lamp_dataset *ds = lamp_loader_dataset(loader);
  return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: the loader for %s has no batch in an epoch: %zu sample%s per rank (%zu in the data set, %d rank%s) and batch %zu with drop_last; use a batch of at most %zu or more samples",
                    lamp_dataset_name(ds), lamp_loader_samples_per_rank(loader),
                    lamp_loader_samples_per_rank(loader) == 1 ? "" : "s", lamp_dataset_size(ds), t->stats.world,
                    t->stats.world == 1 ? "" : "s", c->batch, lamp_loader_samples_per_rank(loader));
}

lamp_status lamp_trainer_train(lamp_trainer *t, lamp_loader *loader, uint64_t max_steps, lamp_epoch_result *result) {
  memset(result, 0, sizeof *result);
  lamp_status st = check_loader_agrees(t, loader, max_steps);
  if (st == LAMP_OK) st = check_loader_has_batches(t, loader);
  if (st == LAMP_OK) st = position_loader(t, loader);
  if (st != LAMP_OK) return st;
  lamp_trainer_metrics_train_begin(t);
  const uint64_t per_epoch = lamp_loader_batches_per_epoch(loader);
  lamp_progress progress;
  lamp_progress_start(&progress, t->epochs_done + 1, (size_t)per_epoch, t->stats.world);
  double loss_sum = 0.0;
  uint64_t batches = 0, first_step = t->stats.steps + t->stats.skipped_steps, first_skipped = t->stats.skipped_steps;
  for (;;) {
    lamp_tensor *x, *y;
    int has_batch = 0;
    /* An epoch closes as soon as its last batch is done, so a run stopped there and resumed is
       in the same state as one never stopped. Otherwise stop only between optimizer steps, so
       that a checkpoint taken now is complete. */
    if (t->epoch_batches < per_epoch) {
      if (max_steps > 0 && t->micro == 0 && t->stats.steps + t->stats.skipped_steps - first_step >= max_steps) break;
      if ((st = lamp_loader_next(loader, &x, &y, &has_batch)) != LAMP_OK) return st;
    }
    if (!has_batch) {
      if ((st = count_losses(t, t->micro, &loss_sum, &batches)) != LAMP_OK) return st;
      t->epoch_open = 0;
      t->epochs_done++;
      result->epoch_done = 1;
      break;
    }
    if ((st = step(t, x, y)) != LAMP_OK) return st;
    t->epoch_batches++;
    if (t->micro == 0 && (st = count_losses(t, t->config.accum, &loss_sum, &batches)) != LAMP_OK) return st;
    result->samples += (uint64_t)x->shape[0];
    lamp_progress_update(&progress, (size_t)t->epoch_batches, result->samples, batches ? loss_sum / (double)batches : 0.0, t->stats.lr,
                         t->stats.loss_scale, t->stats.skipped_steps);
  }
  result->mean_loss = batches ? loss_sum / (double)batches : 0.0;
  result->steps = t->stats.steps + t->stats.skipped_steps - first_step;
  result->skipped_steps = t->stats.skipped_steps - first_skipped;
  result->seconds = lamp_progress_finish(&progress, (size_t)t->epoch_batches, result->samples, result->mean_loss,
                                         t->stats.lr, t->stats.loss_scale, result->skipped_steps, result->steps);
  result->samples_per_second = result->seconds > 0 ? (double)result->samples * t->stats.world / result->seconds : 0.0;
  lamp_trainer_metrics_train_end(t, result, loss_sum, batches);
  return LAMP_OK;
}

lamp_status lamp_trainer_epoch(lamp_trainer *t, lamp_loader *loader, lamp_epoch_result *result) {
  return lamp_trainer_train(t, loader, 0, result);
}

lamp_status lamp_trainer_evaluate(lamp_trainer *t, lamp_loader *loader, lamp_eval_result *result) {
  memset(result, 0, sizeof *result);
  lamp_status st = broadcast_buffers(t);
  if (st == LAMP_OK) st = lamp_loader_start_epoch(loader, 0);
  if (st != LAMP_OK) return st;
  lamp_exec exec = exec_of(t, 0);
  char *report = t->report;
  double *loss = (double *)(void *)(report + offsetof(lamp_step_report, eval_loss));
  size_t *correct = (size_t *)(void *)(report + offsetof(lamp_step_report, correct));
  double sums[3] = {0.0, 0.0, 0.0}; /* loss * rows, correct, rows */
  for (;;) {
    lamp_tensor *x, *y;
    int has_batch;
    if ((st = lamp_loader_next(loader, &x, &y, &has_batch)) != LAMP_OK) return st;
    if (!has_batch) break;
    const lamp_tensor *logits, *xd = x, *yd = y;
    /* Slot 0: its event wait keeps it safe while a group is open (lamp_trainer_step, an epoch that
       ended inside a group). */
    if ((st = on_device(t, 0, &xd, &yd)) != LAMP_OK || (st = lamp_model_forward(t->model, xd, 0, &logits)) != LAMP_OK)
      return st;
    st = t->config.loss->ops->forward_backward(t->config.loss, &exec, logits, yd, 1.0f, loss, NULL, correct);
    if (st == LAMP_OK) st = lamp_copy(LAMP_HOST, t->report_host, t->config.device, t->report, sizeof(lamp_step_report));
    if (st != LAMP_OK) return st;
    sums[0] += t->report_host->eval_loss * (double)x->shape[0];
    sums[1] += (double)t->report_host->correct;
    sums[2] += (double)x->shape[0];
  }
  if (t->stats.world > 1) {
    float packed[3] = {(float)sums[0], (float)sums[1], (float)sums[2]};
    st = lamp_comm_all_reduce(t->config.comm, packed, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_HOST);
    if (st != LAMP_OK) return st;
    for (int i = 0; i < 3; i++) sums[i] = packed[i];
  }
  result->samples = (uint64_t)sums[2];
  result->mean_loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  result->accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  lamp_trainer_metrics_evaluate(t, result);
  return LAMP_OK;
}

lamp_status lamp_trainer_stats_get(lamp_trainer *t, lamp_trainer_stats *out) {
  lamp_scaler_stats scaler = {.struct_size = sizeof scaler};
  lamp_status st = lamp_precision_stats(t->config.precision, &scaler);
  if (st != LAMP_OK) return st;
  t->stats.loss_scale = scaler.scale;
  t->stats.buckets = t->buckets.n;
  t->stats.graphs = t->graphs.on;
  t->stats.graph_records = t->graphs.recorded;
  t->stats.graph_replays = t->graphs.replayed;
  *out = t->stats;
  return LAMP_OK;
}

static lamp_status check_param_index(const lamp_trainer *t, size_t i) {
  if (i >= t->n_segments)
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: no parameter %zu (the model has %zu)", i, t->n_segments);
  return LAMP_OK;
}

lamp_status lamp_trainer_set_param_options(lamp_trainer *t, size_t i, double lr_mult, int decay) {
  lamp_status st = check_param_index(t, i);
  if (st != LAMP_OK) return st;
  if (!(lr_mult >= 0.0) || isinf(lr_mult))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: lr_mult of %s must be a finite number >= 0, got %g",
                      lamp_model_param_at(t->model, i)->name, lr_mult);
  t->segments[i].lr_mult = (float)lr_mult;
  t->segments[i].decay_mult = decay ? 1.0f : 0.0f;
  return LAMP_OK;
}

lamp_status lamp_trainer_param_options(const lamp_trainer *t, size_t i, double *lr_mult, int *decay) {
  lamp_status st = check_param_index(t, i);
  if (st != LAMP_OK) return st;
  *lr_mult = t->segments[i].lr_mult;
  *decay = t->segments[i].decay_mult != 0.0f;
  return LAMP_OK;
}

lamp_model *lamp_trainer_model(lamp_trainer *t) { return t->model; }

uint64_t lamp_trainer_epochs_done(const lamp_trainer *t) { return t->epochs_done; }
