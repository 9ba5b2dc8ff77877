/*
** A trainer with its real plugins, for the training-loop tests (test_accumulation, test_clip,
** test_schedule): open, step, compare, close. Include after <cmocka.h> and test_support.h.
**   - rig_open / rig_close   precision, comm ("single" or a path), sgd, CrossEntropy, trainer
**   - COUNTING_COMM          the fake 2-rank communicator in tests/bad_plugins/counting_comm.c
**   - log capture            counts its "all_reduce N: COUNT elements" lines; keeps the others
**   - set_param, params_copy parameters in and out of the fp32 slab the optimizer updates
*/
#ifndef LAMP_TEST_TRAINER_RIG_H
#define LAMP_TEST_TRAINER_RIG_H

#include "backend/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/trainer.h"

#define COUNTING_COMM LAMP_BAD_PLUGIN_DIR "/counting_comm.so"
#define RECORDING_COMM LAMP_BAD_PLUGIN_DIR "/recording_comm.so"

typedef struct rig_spec {
  const char *precision;         /* default "fp32" */
  const lamp_option *prec_opts;
  size_t n_prec_opts;
  const char *comm;              /* default "single" */
  const lamp_option *optim_opts; /* sgd */
  size_t n_optim_opts;
  int accum;                     /* default 1 */
  double clip;
  lamp_schedule schedule;
  uint64_t seed;
  double bucket_mb;              /* default 25 */
  lamp_dtype compress;           /* default LAMP_F32: none */
  int shard_optimizer;
} rig_spec;

typedef struct rig {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  lamp_trainer *t;
  lamp_model *model;
} rig;

/* Takes over the caller's reference to net. */
static inline void rig_open(rig *r, const rig_spec *spec, lamp_layer *net) {
  memset(r, 0, sizeof *r);
  OK(lamp_precision_open(&r->prec, spec->precision ? spec->precision : "fp32", spec->prec_opts, spec->n_prec_opts));
  OK(lamp_comm_open(&r->comm, spec->comm ? spec->comm : "single", NULL, 0));
  OK(lamp_optim_open(&r->optim, "sgd", spec->optim_opts, spec->n_optim_opts));
  OK(lamp_cross_entropy_new(&r->loss));
  lamp_trainer_config cfg = {.model = net, .loss = r->loss, .precision = r->prec, .comm = r->comm,
                             .optim = r->optim, .device = LAMP_CPU, .accum = spec->accum ? spec->accum : 1,
                             .clip = spec->clip, .schedule = spec->schedule, .seed = spec->seed,
                             .bucket_mb = spec->bucket_mb, .compress = spec->compress,
                             .shard_optimizer = spec->shard_optimizer};
  OK(lamp_trainer_new(&r->t, &cfg));
  lamp_layer_release(net); /* the trainer holds its own reference */
  r->model = lamp_trainer_model(r->t);
}

static inline void rig_close(rig *r) {
  lamp_trainer_free(r->t);
  lamp_loss_release(r->loss);
  lamp_optim_close(r->optim);
  lamp_comm_close(r->comm);
  lamp_precision_close(r->prec);
  memset(r, 0, sizeof *r);
}

static inline lamp_trainer_stats rig_stats(rig *r) {
  lamp_trainer_stats s;
  OK(lamp_trainer_stats_get(r->t, &s));
  return s;
}

/* The fp32 parameters the optimizer updates (masters, or the fp32 weights), copied out. */
static inline float *params_copy(const rig *r) {
  size_t n = lamp_model_numel(r->model);
  float *copy = malloc(n * sizeof *copy);
  assert_non_null(copy);
  memcpy(copy, lamp_model_trainable(r->model), n * sizeof *copy);
  return copy;
}

/* Writes parameter `index` (row-major values) into the fp32 slab and rounds it into the weights. */
static inline void set_param(lamp_model *m, size_t index, const float *values) {
  const lamp_model_param *p = lamp_model_param_at(m, index);
  assert_non_null(p);
  memcpy(lamp_model_trainable(m) + p->offset, values, p->count * sizeof(float));
  OK(lamp_model_sync_weights(m));
}

/* ---- log capture ----------------------------------------------------------------------------- */

typedef struct log_capture {
  int all_reduces;          /* "counting_comm: all_reduce N: COUNT elements" lines */
  int numbering_ok;         /* every N was the previous N + 1 */
  size_t last_count;        /* COUNT of the last one */
  char other[8192];         /* the other lines, newline-separated */
} log_capture;

static log_capture captured;

static inline void capture_sink(lamp_log_level level, const char *line, void *ud) {
  (void)level, (void)ud;
  int n;
  size_t count;
  if (sscanf(line, "counting_comm: all_reduce %d: %zu elements", &n, &count) == 2) {
    captured.numbering_ok &= n == captured.all_reduces + 1;
    captured.all_reduces++;
    captured.last_count = count;
    return;
  }
  size_t used = strlen(captured.other);
  snprintf(captured.other + used, sizeof captured.other - used, "%s\n", line);
}

/* Starts a capture at INFO; capture_stop goes back to stderr at WARN (the tests' quiet level). */
static inline void capture_start(void) {
  memset(&captured, 0, sizeof captured);
  captured.numbering_ok = 1;
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(capture_sink, NULL);
}

static inline void capture_stop(void) {
  lamp_log_set_sink(NULL, NULL);
  lamp_log_set_level(LAMP_LOG_WARN);
}

/* cmocka group setup and teardown for trainer tests: quiet logs, and the per-thread GEMM
   workspace handed back so valgrind sees no "possibly lost" block. */
static inline int rig_group_setup(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_WARN);
  return 0;
}

static inline int rig_group_teardown(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  return 0;
}

#endif
