/*
** An fp32 precision plugin that keeps a state (a count of its updates), for the checkpoint
** tests. A fixture defines STATEFUL_NAME and may replace one of its state functions before
** including this header:
**   STATEFUL_SAVE  save_state (default: writes the 16-byte state when given room for it)
**   STATEFUL_LOAD  load_state (default: reads it back)
*/
#ifndef STATEFUL_PRECISION_H
#define STATEFUL_PRECISION_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lamp/plugin.h"

#ifndef STATEFUL_NAME
#error "define STATEFUL_NAME before including stateful_precision.h"
#endif

typedef struct stateful {
  const lamp_host *host;
  lamp_ctx *ctx;
  uint64_t updates;
} stateful;

typedef struct saved_state {
  char tag[8];
  uint64_t updates;
} saved_state;

static int stateful_probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}

static lamp_status stateful_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **state) {
  (void)p;
  stateful *s = calloc(1, sizeof *s);
  if (s == NULL) return h->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  s->host = h;
  s->ctx = ctx;
  *state = s;
  return LAMP_OK;
}

static void stateful_destroy(void *state) { free(state); }

static lamp_status stateful_policy(void *state, lamp_precision_policy *out) {
  (void)state;
  out->weight_dtype = out->compute_dtype = out->activation_dtype = LAMP_F32;
  out->grad_dtype = out->accum_dtype = LAMP_F32;
  return LAMP_OK;
}

static double stateful_loss_scale(void *state) {
  (void)state;
  return 1.0;
}

static lamp_status stateful_update(void *state, int found_inf, int *skip) {
  (void)found_inf;
  ((stateful *)state)->updates++;
  *skip = 0;
  return LAMP_OK;
}

static lamp_status stateful_stats(void *state, lamp_scaler_stats *out) {
  (void)state;
  out->scale = 1.0;
  return LAMP_OK;
}

__attribute__((unused)) static lamp_status stateful_save(void *state, void *buf, size_t *size) {
  const stateful *s = state;
  if (buf == NULL || *size < sizeof(saved_state)) {
    if (buf != NULL) return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "state needs %zu bytes", sizeof(saved_state));
    *size = sizeof(saved_state);
    return LAMP_OK;
  }
  saved_state saved = {"state01", s->updates};
  memcpy(buf, &saved, sizeof saved);
  *size = sizeof saved;
  return LAMP_OK;
}

__attribute__((unused)) static lamp_status stateful_load(void *state, const void *buf, size_t size) {
  stateful *s = state;
  saved_state saved;
  if (size != sizeof saved)
    return s->host->set_error(s->ctx, LAMP_ERR_INVALID_ARG, "state is %zu bytes, expected %zu", size, sizeof saved);
  memcpy(&saved, buf, sizeof saved);
  s->updates = saved.updates;
  return LAMP_OK;
}

#ifndef STATEFUL_SAVE
#define STATEFUL_SAVE stateful_save
#endif
#ifndef STATEFUL_LOAD
#define STATEFUL_LOAD stateful_load
#endif

static const lamp_precision_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_PRECISION, lamp_precision_v1, STATEFUL_NAME, "0.1",
                               "fp32 with a state, for the checkpoint tests"),
            .devices = LAMP_BIT(LAMP_CPU), .dtypes = LAMP_BIT(LAMP_F32), .probe = stateful_probe},
    .create = stateful_create,
    .destroy = stateful_destroy,
    .policy = stateful_policy,
    .loss_scale = stateful_loss_scale,
    .update = stateful_update,
    .stats = stateful_stats,
    .save_state = STATEFUL_SAVE,
    .load_state = STATEFUL_LOAD,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}

#endif
