/*
** Checkpoints of a trainer: everything a run needs to continue to the bit, in the generic
** container of core/checkpoint. Data only: the model and its plugins are rebuilt by the script,
** the checkpoint restores their state and refuses one written for another configuration.
**
** What goes in (names as they appear in `lamp.checkpoint.info`):
**   metas    lamp.kind "trainer", lamp.trainer_version, run.* (model description, precision,
**            optimizer and its hyper-parameters, comm, world size, accumulation, seed (also the
**            key of stochastic rounding, which a resume continues with), clip, schedule), state.*
**            (steps, skipped steps and how many of them came last in a row, micro-steps, samples, epochs done, the open epoch and its
**            position, last loss, lr, the stochastic layers' forward count)
**   tensors  param.<name>   the fp32 parameters the optimizer updates (the masters when the
**                           policy keeps them); without masters, a 16-bit policy's weights as
**                           stored (keep_f32 parameters stay fp32)
**            buffer.<name>  BatchNorm running statistics and other buffers (fp32)
**            optim.<slot>   every optimizer state slot, fp32 [numel]
**   blob     precision.state, the precision plugin's save_state (the loss scaler)
**
** Rank 0 alone reads and writes files; the others wait for it in a broadcast that carries its
** verdict, and on resume they receive the restored state from it, so ranks need no shared
** file system and always agree.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "tensor/dtype.h"
#include "train/trainer_internal.h"

#define TRAINER_STATE_VERSION 1
#define PATH_CAP 4096

static const char *precision_name(const lamp_trainer *t) { return lamp_precision_handle(t->config.precision)->desc->name; }
static const char *optim_name(const lamp_trainer *t) { return lamp_optim_handle(t->config.optim)->desc->name; }
static int rank_of(const lamp_trainer *t) { return lamp_comm_rank(t->config.comm); }

/* ---- where each parameter's truth lives --------------------------------------------------- */

/*
** The fp32 slab the optimizer updates is the truth, except under a 16-bit policy without
** masters, where it is only a staging copy of the 16-bit weights: there the weights are saved
** as stored, and keep_f32 parameters (which never leave fp32) from the staging slab.
*/
static int saves_16bit(const lamp_trainer *t, const lamp_model_param *p) {
  return !(t->policy.flags & LAMP_POLICY_MASTER_WEIGHTS) && lamp_model_get_config(t->model)->weight_dtype != LAMP_F32 &&
         !p->keep_f32;
}

static void *param_data(lamp_trainer *t, const lamp_model_param *p, lamp_dtype *dtype) {
  if (saves_16bit(t, p)) {
    lamp_tensor *w = lamp_model_weights(t->model);
    *dtype = w->dtype;
    return (char *)lamp_tensor_data(w) + p->offset * lamp_dtype_size(w->dtype);
  }
  *dtype = LAMP_F32;
  return lamp_zero_params(t) + p->offset; /* sharded: the whole masters gathered for the save or resume */
}

/* ---- writing ------------------------------------------------------------------------------- */

static lamp_status add_run_metas(lamp_trainer *t, lamp_ckpt_writer *w) {
  char desc[8192] = "";
  lamp_layer *root = lamp_model_root(t->model);
  root->ops->describe(root, desc, sizeof desc);
  lamp_status st = lamp_ckpt_add_meta_str(w, "lamp.kind", "trainer");
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "lamp.trainer_version", TRAINER_STATE_VERSION);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_str(w, "run.model", desc);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "run.param_tensors", (int64_t)lamp_model_n_params(t->model));
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "run.numel", (int64_t)lamp_model_numel(t->model));
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_str(w, "run.precision", precision_name(t));
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_str(w, "run.optim", optim_name(t));
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_str(w, "run.comm", lamp_comm_handle(t->config.comm)->desc->name);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "run.world", t->stats.world);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "run.accum", t->config.accum);
  /* the config's seed, except under stochastic rounding after a resume or on several ranks: the
     seed its rounding draws from (rank 0's, the checkpoint's), which the next resume needs */
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "run.seed", (int64_t)t->rounding_seed);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_double(w, "run.clip", t->config.clip);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_str(w, "run.schedule", lamp_schedule_name(t->config.schedule.kind));
  const lamp_plugin *od = lamp_optim_handle(t->config.optim)->desc;
  for (uint32_t i = 0; st == LAMP_OK && i < od->n_params; i++) {
    double v;
    char key[128];
    snprintf(key, sizeof key, "run.optim.%s", od->params[i].name);
    if (lamp_optim_hparam(t->config.optim, od->params[i].name, &v) == 0) st = lamp_ckpt_add_meta_double(w, key, v);
  }
  uint32_t n_text;
  const lamp_text_param *tp = lamp_plugin_text_params(od, &n_text);
  for (uint32_t i = 0; st == LAMP_OK && i < n_text; i++) { /* ABI 1.4: none before, so no old bytes change */
    char key[128];
    snprintf(key, sizeof key, "run.optim.%s", tp[i].name);
    st = lamp_ckpt_add_meta_str(w, key, lamp_optim_text(t->config.optim, tp[i].name));
  }
  return st;
}

static lamp_status add_state_metas(lamp_trainer *t, lamp_ckpt_writer *w) {
  const lamp_trainer_stats *s = &t->stats;
  lamp_status st = lamp_ckpt_add_meta_int(w, "state.steps", (int64_t)s->steps);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.skipped_steps", (int64_t)s->skipped_steps);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.skipped_in_a_row", (int64_t)s->skipped_in_a_row);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.micro_steps", (int64_t)s->micro_steps);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.samples", (int64_t)s->samples);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.epochs_done", (int64_t)t->epochs_done);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.epoch_open", t->epoch_open);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.epoch_batches", (int64_t)t->epoch_batches);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.epoch_global_batch", (int64_t)t->epoch_global_batch);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_int(w, "state.forward_index", (int64_t)lamp_model_forward_index(t->model));
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_double(w, "state.last_loss", s->last_loss);
  if (st == LAMP_OK) st = lamp_ckpt_add_meta_double(w, "state.lr", s->lr);
  return st;
}

/*
** Every tensor of the trainer's state, by checkpoint name, dtype, shape and place in memory, in
** one fixed order: saving, checking and loading all walk this one list.
*/
typedef lamp_status (*tensor_fn)(void *ctx, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                                 void *data);

static lamp_status for_each_tensor(lamp_trainer *t, tensor_fn fn, void *ctx) {
  char name[160];
  lamp_status st = LAMP_OK;
  for (size_t i = 0; st == LAMP_OK && i < lamp_model_n_params(t->model); i++) {
    const lamp_model_param *p = lamp_model_param_at(t->model, i);
    lamp_dtype dtype;
    void *data = param_data(t, p, &dtype);
    snprintf(name, sizeof name, "param.%s", p->name);
    st = fn(ctx, name, (lamp_ckpt_dtype)dtype, p->ndim, p->shape, data);
  }
  lamp_tensor *buffers = lamp_model_buffers(t->model);
  for (size_t i = 0; st == LAMP_OK && i < lamp_model_n_buffers(t->model); i++) {
    const lamp_model_buffer *b = lamp_model_buffer_at(t->model, i);
    snprintf(name, sizeof name, "buffer.%s", b->name);
    st = fn(ctx, name, LAMP_CKPT_F32, b->ndim, b->shape, (float *)lamp_tensor_data(buffers) + b->offset);
  }
  int64_t numel = (int64_t)lamp_model_numel(t->model);
  for (uint32_t k = 0; st == LAMP_OK && k < t->n_slots; k++) {
    snprintf(name, sizeof name, "optim.%s", t->slot_decls[k].name);
    st = fn(ctx, name, LAMP_CKPT_F32, 1, &numel, lamp_zero_slot(t, k));
  }
  return st;
}

/* ---- the host's view of the tensors ----------------------------------------------------- */

/*
** The tensors live on the run device; the checkpoint code reads and writes host memory. On the
** host they are used where they are; from another device they pass through one staging buffer
** (a copy each way), laid out in the walk's order.
*/
typedef struct staging {
  lamp_device device;
  char *buf; /* NULL when the device is the host */
  size_t size, used;
} staging;

static size_t tensor_bytes(lamp_ckpt_dtype dtype, int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  return n * lamp_dtype_size((lamp_dtype)dtype);
}

static lamp_status add_size(void *ctx, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                            void *data) {
  (void)name, (void)data;
  ((staging *)ctx)->size += tensor_bytes(dtype, ndim, shape);
  return LAMP_OK;
}

static lamp_status staging_open(lamp_trainer *t, staging *s) {
  *s = (staging){.device = t->config.device};
  if (s->device == LAMP_HOST) return LAMP_OK;
  lamp_status st = for_each_tensor(t, add_size, s);
  if (st == LAMP_OK && (s->buf = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, s->size ? s->size : 1)) == NULL)
    st = lamp_error_context(LAMP_ERR_SYSTEM, "Trainer: staging a checkpoint");
  return st;
}

/* The next tensor's place in the staging buffer (its own memory on the host). */
static void *staged(staging *s, void *data, size_t bytes) {
  if (s->buf == NULL) return data;
  void *at = s->buf + s->used;
  s->used += bytes;
  return at;
}

static void staging_close(staging *s) {
  lamp_mem_free(s->buf);
  s->buf = NULL;
}

/* Saving: each tensor copied to the host as the writer is given it. */
typedef struct saving {
  lamp_ckpt_writer *w;
  staging s;
} saving;

static lamp_status add_tensor(void *ctx, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                              void *data) {
  saving *v = ctx;
  size_t bytes = tensor_bytes(dtype, ndim, shape);
  void *host = staged(&v->s, data, bytes);
  lamp_status st = host == data ? LAMP_OK : lamp_copy(LAMP_HOST, host, v->s.device, data, bytes);
  return st == LAMP_OK ? lamp_ckpt_add_tensor(v->w, name, dtype, ndim, shape, host) : st;
}

static lamp_status add_precision_state(lamp_trainer *t, lamp_ckpt_writer *w) {
  size_t size = 0;
  lamp_status st = lamp_precision_save_state(t->config.precision, NULL, &size);
  if (st != LAMP_OK || size == 0) return st;
  void *buf = malloc(size);
  if (buf == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the precision state");
  st = lamp_precision_save_state(t->config.precision, buf, &size);
  if (st == LAMP_OK) st = lamp_ckpt_add_blob(w, "precision.state", buf, size);
  free(buf);
  return st;
}

/* Where a save goes: one file, or a folder of the run's checkpoints. */
typedef struct destination {
  const char *path; /* one file, or NULL */
  const char *dir;  /* a folder, or NULL */
  int keep, start_over;
} destination;

/* Into a folder: as this run, which owns the folder it resumed from and the ones it filled. */
static lamp_status save_into_dir(lamp_trainer *t, lamp_ckpt_writer *w, const destination *to, char *written,
                                 size_t written_size) {
  lamp_ckpt_run run = {.id = t->ckpt_run_id, .keep = to->keep, .start_over = to->start_over};
  lamp_status st = lamp_ckpt_save_run(w, to->dir, t->stats.steps + t->stats.skipped_steps, &run, written, written_size);
  t->ckpt_run_id = run.id;
  return st;
}

static lamp_status write_rank0(lamp_trainer *t, const destination *to, char *written, size_t written_size) {
  lamp_ckpt_writer *w;
  saving v = {0};
  lamp_status st = lamp_ckpt_writer_new(&w);
  if (st != LAMP_OK) return st;
  v.w = w;
  if ((st = staging_open(t, &v.s)) == LAMP_OK && (st = add_run_metas(t, w)) == LAMP_OK &&
      (st = add_state_metas(t, w)) == LAMP_OK && (st = for_each_tensor(t, add_tensor, &v)) == LAMP_OK &&
      (st = add_precision_state(t, w)) == LAMP_OK) {
    if (to->dir != NULL) {
      st = save_into_dir(t, w, to, written, written_size);
    } else {
      st = lamp_ckpt_write_atomic(w, to->path);
      if (st == LAMP_OK) snprintf(written, written_size, "%s", to->path);
    }
  }
  lamp_ckpt_writer_free(w);
  staging_close(&v.s);
  return st;
}

/*
** Rank 0's verdict, and the path it used, reach every rank; for the others this broadcast is
** also the barrier that keeps them from running ahead of a checkpoint still being written.
*/
typedef struct verdict {
  int32_t failed, found;
  char path[PATH_CAP];
} verdict;

static lamp_status share_verdict(lamp_trainer *t, verdict *v, lamp_status mine, const char *what) {
  if (t->stats.world > 1) {
    lamp_status st = lamp_comm_broadcast(t->config.comm, v, sizeof *v, LAMP_U8, 0, LAMP_HOST);
    if (st != LAMP_OK) return lamp_error_context(st, "Trainer: waiting for rank 0 %s", what);
  }
  if (rank_of(t) == 0) return mine;
  if (v->failed) return lamp_error(LAMP_ERR_REMOTE, "Trainer: rank 0 failed %s (its log has the reason)", what);
  return LAMP_OK;
}

static lamp_status save(lamp_trainer *t, const destination *to, char *out, size_t out_size) {
  if (t->micro != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "Trainer: cannot save in the middle of an accumulation group (micro-step %d of %d); save between optimizer steps",
                      t->micro, t->config.accum);
  verdict v = {0};
  /* Sharded: every rank sends its pieces, rank 0 writes the whole state. */
  lamp_status mine = lamp_zero_open_full(t);
  if (mine == LAMP_OK) mine = lamp_zero_gather_full(t);
  if (mine != LAMP_OK) {
    lamp_zero_close_full(t);
    return mine;
  }
  if (rank_of(t) == 0) {
    lamp_trainer_metrics_checkpoint(t); /* the file is never behind the checkpoint */
    mine = write_rank0(t, to, v.path, sizeof v.path);
    v.failed = mine != LAMP_OK;
    if (mine == LAMP_OK) lamp_log(LAMP_LOG_INFO, "trainer", "checkpoint written: %s (step %llu)", v.path,
                                  (unsigned long long)t->stats.steps);
  }
  lamp_zero_close_full(t);
  lamp_status st = share_verdict(t, &v, mine, "to write the checkpoint");
  if (st == LAMP_OK && out != NULL) snprintf(out, out_size, "%s", v.path);
  return st;
}

lamp_status lamp_trainer_save(lamp_trainer *t, const char *path, char *written, size_t written_size) {
  destination to = {.path = path};
  return save(t, &to, written, written_size);
}

lamp_status lamp_trainer_save_dir(lamp_trainer *t, const char *dir, int keep, int start_over, char *written,
                                  size_t written_size) {
  destination to = {.dir = dir, .keep = keep, .start_over = start_over};
  return save(t, &to, written, written_size);
}

/* ---- checking a checkpoint against this trainer -------------------------------------------- */

static lamp_status expect_str(const lamp_ckpt *c, const char *key, const char *mine, const char *what) {
  const char *theirs;
  lamp_status st = lamp_ckpt_meta_str(c, key, &theirs);
  if (st != LAMP_OK) return st;
  if (strcmp(theirs, mine) != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: written with %s '%s', this trainer uses '%s' (resume with the same %s)",
                      lamp_ckpt_name(c), what, theirs, mine, what);
  return LAMP_OK;
}

static lamp_status check_kind(const lamp_ckpt *c) {
  const char *kind;
  int64_t version;
  lamp_status st = lamp_ckpt_meta_str(c, "lamp.kind", &kind);
  if (st != LAMP_OK) return st;
  if (strcmp(kind, "trainer") != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: not a trainer checkpoint (lamp.kind is '%s')", lamp_ckpt_name(c), kind);
  if ((st = lamp_ckpt_meta_int(c, "lamp.trainer_version", &version)) != LAMP_OK) return st;
  if (version < 1 || version > TRAINER_STATE_VERSION)
    return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: trainer state version %lld is not supported by this lamp (1 to %d)",
                      lamp_ckpt_name(c), (long long)version, TRAINER_STATE_VERSION);
  return LAMP_OK;
}

/* The model's shape: tensor count and size first (a clear message for another network), then
   every tensor by name, dtype and shape as it is read. */
static lamp_status check_model(const lamp_trainer *t, const lamp_ckpt *c) {
  int64_t tensors, numel;
  const char *desc;
  lamp_status st = lamp_ckpt_meta_int(c, "run.param_tensors", &tensors);
  if (st == LAMP_OK) st = lamp_ckpt_meta_int(c, "run.numel", &numel);
  if (st == LAMP_OK) st = lamp_ckpt_meta_str(c, "run.model", &desc);
  if (st != LAMP_OK) return st;
  if ((uint64_t)tensors != lamp_model_n_params(t->model) || (uint64_t)numel != lamp_model_numel(t->model))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: the checkpoint's model has %lld parameters in %lld tensors, this one %zu in %zu; it was saved from:\n%s",
                      lamp_ckpt_name(c), (long long)numel, (long long)tensors, lamp_model_numel(t->model),
                      lamp_model_n_params(t->model), desc);
  return LAMP_OK;
}

/* Differences that are allowed but change the run: said once, on rank 0. */
static lamp_status note_changes(const lamp_trainer *t, const lamp_ckpt *c) {
  int64_t world, accum;
  lamp_status st = lamp_ckpt_meta_int(c, "run.world", &world);
  if (st == LAMP_OK) st = lamp_ckpt_meta_int(c, "run.accum", &accum);
  if (st != LAMP_OK) return st;
  if (world != t->stats.world)
    lamp_log(LAMP_LOG_WARN, "trainer", "%s was written by %lld rank%s, resuming on %d: allowed because the optimizer state is not sharded (every rank holds all of it); the epoch continues at the same sample",
             lamp_ckpt_name(c), (long long)world, world == 1 ? "" : "s", t->stats.world);
  if (accum != t->config.accum)
    lamp_log(LAMP_LOG_WARN, "trainer", "%s was written with accum %lld, resuming with accum %d: the effective batch changes",
             lamp_ckpt_name(c), (long long)accum, t->config.accum);
  int64_t seed;
  if ((t->policy.flags & LAMP_POLICY_STOCHASTIC_ROUNDING) && lamp_ckpt_has_meta(c, "run.seed") &&
      lamp_ckpt_meta_int(c, "run.seed", &seed) == LAMP_OK && (uint64_t)seed != t->rounding_seed)
    lamp_log(LAMP_LOG_INFO, "trainer", "%s was written with seed %llu, this trainer has %llu: stochastic rounding continues with the checkpoint's",
             lamp_ckpt_name(c), (unsigned long long)(uint64_t)seed, (unsigned long long)t->rounding_seed);
  const lamp_plugin *od = lamp_optim_handle(t->config.optim)->desc;
  for (uint32_t i = 0; i < od->n_params; i++) {
    char key[128];
    double theirs, mine;
    snprintf(key, sizeof key, "run.optim.%s", od->params[i].name);
    if (!lamp_ckpt_has_meta(c, key) || lamp_ckpt_meta_double(c, key, &theirs) != LAMP_OK) continue;
    if (lamp_optim_hparam(t->config.optim, od->params[i].name, &mine) == 0 && mine != theirs)
      lamp_log(LAMP_LOG_WARN, "trainer", "%s: optimizer option '%s' was %g, now %g", lamp_ckpt_name(c),
               od->params[i].name, theirs, mine);
  }
  uint32_t n_text;
  const lamp_text_param *tp = lamp_plugin_text_params(od, &n_text);
  for (uint32_t i = 0; i < n_text; i++) {
    char key[128];
    const char *theirs;
    const char *mine = lamp_optim_text(t->config.optim, tp[i].name);
    snprintf(key, sizeof key, "run.optim.%s", tp[i].name);
    if (!lamp_ckpt_has_meta(c, key) || lamp_ckpt_meta_str(c, key, &theirs) != LAMP_OK) continue;
    if (strcmp(theirs, mine) != 0)
      lamp_log(LAMP_LOG_WARN, "trainer", "%s: optimizer option '%s' was '%s', now '%s'", lamp_ckpt_name(c), tp[i].name,
               theirs, mine);
  }
  return LAMP_OK;
}

/* ---- reading into the trainer (rank 0) ------------------------------------------------------ */

/* Every tensor this trainer needs, by name, dtype and shape: all are checked first, and only
   then copied, so a checkpoint that fails halfway changes nothing. */
static lamp_status check_tensor(void *c, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                                void *data) {
  (void)data;
  return lamp_ckpt_check_tensor(c, name, dtype, ndim, shape);
}

/* Loading: every tensor read into the host's view first, then (from the staging buffer) copied
   to the device, so a read that fails leaves the device's tensors as they were. */
typedef struct loading {
  const lamp_ckpt *c;
  staging s;
} loading;

static lamp_status read_tensor(void *ctx, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                               void *data) {
  loading *l = ctx;
  return lamp_ckpt_read_tensor(l->c, name, dtype, ndim, shape, staged(&l->s, data, tensor_bytes(dtype, ndim, shape)));
}

static lamp_status upload_tensor(void *ctx, const char *name, lamp_ckpt_dtype dtype, int ndim, const int64_t *shape,
                                 void *data) {
  (void)name;
  staging *s = ctx;
  size_t bytes = tensor_bytes(dtype, ndim, shape);
  void *host = staged(s, data, bytes);
  return host == data ? LAMP_OK : lamp_copy(s->device, data, LAMP_HOST, host, bytes);
}

static lamp_status read_tensors(lamp_trainer *t, const lamp_ckpt *c) {
  loading l = {.c = c};
  lamp_status st = staging_open(t, &l.s);
  if (st == LAMP_OK) st = for_each_tensor(t, read_tensor, &l);
  l.s.used = 0;
  if (st == LAMP_OK) st = for_each_tensor(t, upload_tensor, &l.s);
  staging_close(&l.s);
  return st;
}

static int has_entry(const lamp_ckpt *c, const char *name) {
  for (size_t i = 0; i < lamp_ckpt_entry_count(c); i++)
    if (strcmp(lamp_ckpt_entry_at(c, i)->name, name) == 0) return 1;
  return 0;
}

/* The precision plugin's saved state: present exactly when this plugin keeps one, and one its
   load_state accepts (checked on a scratch object: nothing is applied yet). */
static lamp_status read_precision_blob(lamp_trainer *t, const lamp_ckpt *c, void **blob, uint64_t *size) {
  size_t wanted = 0;
  lamp_status st = lamp_precision_save_state(t->config.precision, NULL, &wanted);
  if (st != LAMP_OK) return st;
  if (!has_entry(c, "precision.state")) {
    if (wanted > 0)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: no precision.state entry, but precision '%s' keeps a state (the loss scaler)",
                        lamp_ckpt_name(c), precision_name(t));
    return LAMP_OK;
  }
  const void *data;
  size_t n;
  if ((st = lamp_ckpt_blob(c, "precision.state", &data, &n)) != LAMP_OK || n == 0) return st;
  if ((st = lamp_precision_check_state(t->config.precision, data, n)) != LAMP_OK)
    return lamp_error_context(st, "%s: precision.state", lamp_ckpt_name(c));
  if ((*blob = malloc(n)) == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the precision state");
  memcpy(*blob, data, n);
  *size = n;
  return LAMP_OK;
}

/* The counters, as one plain struct so that rank 0 can broadcast them. */
typedef struct counters {
  uint64_t steps, skipped_steps, micro_steps, samples, epochs_done, epoch_batches, epoch_global_batch, forward_index;
  uint64_t skipped_in_a_row; /* max_skipped counts on across a resume (0 from a checkpoint without it) */
  int64_t epoch_open;
  double last_loss, lr;
  uint64_t precision_bytes;
  uint64_t seed; /* run.seed: the key stochastic rounding continues with */
  int64_t has_seed;
} counters;

static lamp_status read_u64(const lamp_ckpt *c, const char *key, uint64_t *out) {
  int64_t v;
  lamp_status st = lamp_ckpt_meta_int(c, key, &v);
  if (st != LAMP_OK) return st;
  if (v < 0) return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s is %lld, expected >= 0", lamp_ckpt_name(c), key, (long long)v);
  *out = (uint64_t)v;
  return LAMP_OK;
}

static lamp_status read_counters(const lamp_ckpt *c, counters *k) {
  lamp_status st = read_u64(c, "state.steps", &k->steps);
  if (st == LAMP_OK) st = read_u64(c, "state.skipped_steps", &k->skipped_steps);
  k->skipped_in_a_row = 0;
  if (st == LAMP_OK && lamp_ckpt_has_meta(c, "state.skipped_in_a_row"))
    st = read_u64(c, "state.skipped_in_a_row", &k->skipped_in_a_row);
  if (st == LAMP_OK) st = read_u64(c, "state.micro_steps", &k->micro_steps);
  if (st == LAMP_OK) st = read_u64(c, "state.samples", &k->samples);
  if (st == LAMP_OK) st = read_u64(c, "state.epochs_done", &k->epochs_done);
  if (st == LAMP_OK) st = read_u64(c, "state.epoch_batches", &k->epoch_batches);
  if (st == LAMP_OK) st = read_u64(c, "state.epoch_global_batch", &k->epoch_global_batch);
  if (st == LAMP_OK) st = read_u64(c, "state.forward_index", &k->forward_index);
  if (st == LAMP_OK) st = lamp_ckpt_meta_int(c, "state.epoch_open", &k->epoch_open);
  if (st == LAMP_OK) st = lamp_ckpt_meta_double(c, "state.last_loss", &k->last_loss);
  if (st == LAMP_OK) st = lamp_ckpt_meta_double(c, "state.lr", &k->lr);
  int64_t seed = 0; /* written as the int64 of the same bits */
  k->has_seed = lamp_ckpt_has_meta(c, "run.seed");
  if (st == LAMP_OK && k->has_seed) st = lamp_ckpt_meta_int(c, "run.seed", &seed);
  k->seed = (uint64_t)seed;
  if (st != LAMP_OK) return st;
  if (k->epoch_open != 0 && k->epoch_open != 1)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: state.epoch_open is %lld, expected 0 or 1", lamp_ckpt_name(c),
                      (long long)k->epoch_open);
  if (k->epoch_open && k->epoch_global_batch == 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: state.epoch_global_batch is 0 in an open epoch", lamp_ckpt_name(c));
  return LAMP_OK;
}

static void apply_counters(lamp_trainer *t, const counters *k) {
  t->stats.steps = k->steps;
  t->stats.skipped_steps = k->skipped_steps;
  t->stats.skipped_in_a_row = k->skipped_in_a_row;
  t->stats.micro_steps = k->micro_steps;
  t->stats.samples = k->samples;
  t->stats.last_loss = k->last_loss;
  t->stats.lr = k->lr;
  t->epochs_done = k->epochs_done;
  t->epoch_open = (int)k->epoch_open;
  t->epoch_batches = k->epoch_batches;
  t->epoch_global_batch = k->epoch_global_batch;
  t->micro = 0;
  lamp_model_set_forward_index(t->model, k->forward_index);
}

/* Everything is checked before anything is copied, the precision plugin's state included; the
   counters are applied last, on every rank alike (apply_state), so the trainer is either
   restored or unchanged. */
static lamp_status load_rank0(lamp_trainer *t, const char *path, counters *k, void **blob) {
  lamp_ckpt *c;
  lamp_status st = lamp_ckpt_open(&c, path);
  if (st != LAMP_OK) return st;
  if ((st = check_kind(c)) == LAMP_OK && (st = expect_str(c, "run.precision", precision_name(t), "precision")) == LAMP_OK &&
      (st = expect_str(c, "run.optim", optim_name(t), "optimizer")) == LAMP_OK && (st = check_model(t, c)) == LAMP_OK &&
      (st = read_counters(c, k)) == LAMP_OK && (st = for_each_tensor(t, check_tensor, c)) == LAMP_OK &&
      (st = read_precision_blob(t, c, blob, &k->precision_bytes)) == LAMP_OK && (st = note_changes(t, c)) == LAMP_OK)
    st = read_tensors(t, c);
  lamp_ckpt_close(c);
  return st;
}

/* ---- spreading rank 0's state ------------------------------------------------------------- */

static lamp_status broadcast_state(lamp_trainer *t, counters *k, void **blob) {
  lamp_comm *comm = t->config.comm;
  lamp_status st = lamp_comm_broadcast(comm, k, sizeof *k, LAMP_U8, 0, LAMP_HOST);
  if (st != LAMP_OK) return st;
  lamp_model *m = t->model;
  size_t numel = lamp_model_numel(m);
  /* The fp32 slab, then (without masters) the 16-bit weights that are the truth there. */
  if ((st = lamp_comm_broadcast(comm, lamp_zero_params(t), numel, LAMP_F32, 0, t->config.device)) != LAMP_OK) return st;
  lamp_tensor *w = lamp_model_weights(m);
  if (!(t->policy.flags & LAMP_POLICY_MASTER_WEIGHTS) && w->dtype != LAMP_F32 &&
      (st = lamp_comm_broadcast(comm, lamp_tensor_data(w), numel, w->dtype, 0, t->config.device)) != LAMP_OK)
    return st;
  lamp_tensor *b = lamp_model_buffers(m);
  if (b != NULL && (st = lamp_comm_broadcast(comm, lamp_tensor_data(b), lamp_tensor_numel(b), LAMP_F32, 0, t->config.device)) != LAMP_OK)
    return st;
  for (uint32_t i = 0; i < t->n_slots; i++)
    if ((st = lamp_comm_broadcast(comm, lamp_zero_slot(t, i), numel, LAMP_F32, 0, t->config.device)) != LAMP_OK) return st;
  if (k->precision_bytes == 0) return LAMP_OK;
  if (*blob == NULL && (*blob = malloc(k->precision_bytes)) == NULL)
    return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the precision state");
  return lamp_comm_broadcast(comm, *blob, k->precision_bytes, LAMP_U8, 0, LAMP_HOST);
}

/*
** Every rank: derived copies (16-bit weights from the masters) and the plugin's state. Under
** stochastic rounding the weights are rounded again as the last step rounded them, with the
** checkpoint's seed and step: the same bits (without masters the saved weights are exact and stay).
*/
static lamp_status apply_state(lamp_trainer *t, const counters *k, const void *blob) {
  if (k->has_seed && (t->policy.flags & LAMP_POLICY_STOCHASTIC_ROUNDING)) t->rounding_seed = k->seed;
  lamp_status st = lamp_model_begin_update(t->model); /* without masters: staging <- weights */
  if (st == LAMP_OK) st = lamp_model_update_weights(t->model, t->rounding_seed, k->steps);
  if (st == LAMP_OK && k->precision_bytes > 0)
    st = lamp_precision_load_state(t->config.precision, blob, (size_t)k->precision_bytes);
  if (st != LAMP_OK) return st;
  apply_counters(t, k);
  lamp_scaler_stats s = {.struct_size = sizeof s};
  if (lamp_precision_stats(t->config.precision, &s) == LAMP_OK) t->stats.loss_scale = s.scale;
  return LAMP_OK;
}

/* Whether a path names a checkpoint file (".lamp") rather than a folder of them. */
static int names_a_file(const char *path) {
  size_t n = strlen(path);
  return n >= 5 && strcmp(path + n - 5, ".lamp") == 0;
}

/* A file, or the newest complete checkpoint of a folder (none there: *found = 0). A missing
   folder is a run not started yet and starts afresh, as an empty one does; a missing file is an
   error. */
static lamp_status resolve(const char *path_or_dir, char *path, size_t size, int *found) {
  struct stat sb;
  *found = 0;
  int missing = stat(path_or_dir, &sb) != 0;
  if (missing && (errno != ENOENT || names_a_file(path_or_dir)))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot resume from %s: %s", path_or_dir, strerror(errno));
  if (!missing && !S_ISDIR(sb.st_mode)) {
    *found = 1;
    snprintf(path, size, "%s", path_or_dir);
    return LAMP_OK;
  }
  uint64_t step;
  return lamp_ckpt_latest(path_or_dir, path, size, &step, found);
}

/* The run that owns the folder of the checkpoint at path: a resume continues that run, so it
   may go on saving into (and pruning) that folder. */
static lamp_status owner_of(const char *path, uint64_t *run_id) {
  char dir[PATH_CAP];
  const char *slash = strrchr(path, '/');
  if (slash == NULL) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  return lamp_ckpt_dir_owner(dir, run_id);
}

lamp_status lamp_trainer_resume(lamp_trainer *t, const char *path_or_dir, char *used, size_t used_size, int *found) {
  if (t->micro != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "Trainer: cannot resume in the middle of an accumulation group (micro-step %d of %d)",
                      t->micro, t->config.accum);
  verdict v = {0};
  counters k = {0};
  void *blob = NULL;
  lamp_status mine = LAMP_OK;
  uint64_t run_id = t->ckpt_run_id; /* adopted only when the whole resume succeeds */
  /* Sharded: the whole state is read into buffers of its own, and each rank keeps its pieces. */
  if ((mine = lamp_zero_open_full(t)) != LAMP_OK) {
    lamp_zero_close_full(t);
    return mine;
  }
  if (rank_of(t) == 0) {
    int got = 0;
    mine = resolve(path_or_dir, v.path, sizeof v.path, &got);
    v.found = got;
    if (mine == LAMP_OK && got) mine = owner_of(v.path, &run_id);
    if (mine == LAMP_OK && got) mine = load_rank0(t, v.path, &k, &blob);
    v.failed = mine != LAMP_OK;
  }
  lamp_status st = share_verdict(t, &v, mine, "to read the checkpoint");
  if (st == LAMP_OK && v.found) {
    if (t->stats.world > 1) st = broadcast_state(t, &k, &blob);
    if (st == LAMP_OK) st = lamp_zero_scatter_full(t);
    if (st == LAMP_OK) st = apply_state(t, &k, blob);
    if (st == LAMP_OK) t->ckpt_run_id = run_id;
    if (st == LAMP_OK)
      lamp_log(LAMP_LOG_INFO, "trainer", "resumed from %s: step %llu, epoch %llu%s", v.path,
               (unsigned long long)t->stats.steps, (unsigned long long)t->epochs_done + 1,
               t->epoch_open ? " (continuing it)" : "");
    if (st == LAMP_OK) lamp_trainer_metrics_resumed(t);
  }
  lamp_zero_close_full(t);
  free(blob);
  if (found != NULL) *found = v.found;
  if (st == LAMP_OK && used != NULL) snprintf(used, used_size, "%s", v.found ? v.path : "");
  return st;
}
