#include "train/step_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "tensor/ledger.h"

lamp_status lamp_step_graphs_init(lamp_step_graphs *g, lamp_device device, int micro_steps, int on, int asked) {
  memset(g, 0, sizeof *g);
  g->device = device;
  g->asked = asked;
  if (!on) return LAMP_OK;
  g->slots = calloc((size_t)micro_steps, sizeof *g->slots);
  if (g->slots == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for the step's graphs");
  g->n = micro_steps;
  g->on = 1;
  return LAMP_OK;
}

void lamp_step_graphs_free(lamp_step_graphs *g) {
  for (int k = 0; k < g->n; k++) lamp_graph_free(g->slots[k].graph);
  free(g->slots);
  memset(g, 0, sizeof *g);
}

static void drop_graph(lamp_step_graph *s) {
  lamp_graph_free(s->graph);
  s->graph = NULL;
}

/* Graphs off for the rest of the run, and why, once. */
static void give_up(lamp_step_graphs *g, const char *why) {
  lamp_log(g->asked ? LAMP_LOG_WARN : LAMP_LOG_INFO, "trainer",
           "the step cannot be recorded as a device graph (%s); it runs without one", why);
  for (int k = 0; k < g->n; k++) drop_graph(&g->slots[k]);
  g->on = 0;
}

static lamp_status run_eagerly(lamp_step_graphs *g, lamp_step_graph *s, lamp_micro_fn fn, void *ctx) {
  uint64_t before = lamp_ledger_changes(g->device);
  lamp_status st = fn(ctx);
  s->memory = lamp_ledger_changes(g->device);
  s->settled = st == LAMP_OK && s->memory == before;
  return st;
}

/*
** fn recorded and, when that worked, launched. A refusal gives graphs up and runs fn eagerly (the
** recording ran none of it); memory freed while recording means the step had not settled after
** all: the graph is dropped and fn runs eagerly, to be recorded later.
*/
static lamp_status record(lamp_step_graphs *g, lamp_step_graph *s, lamp_micro_fn fn, void *ctx) {
  uint64_t before = lamp_ledger_changes(g->device);
  lamp_status st = lamp_graph_begin(g->device);
  lamp_status ran = st == LAMP_OK ? fn(ctx) : st;
  char why[LAMP_ERROR_MAX]; /* fn's failure says where in the step; else the backend's refusal */
  snprintf(why, sizeof why, "%s", lamp_last_error());
  lamp_graph *graph = NULL;
  if (st == LAMP_OK) st = lamp_graph_end(g->device, &graph);
  if (ran != LAMP_OK || st != LAMP_OK) {
    if (ran == LAMP_OK) snprintf(why, sizeof why, "%s", lamp_last_error());
    lamp_graph_free(graph);
    give_up(g, why);
    return run_eagerly(g, s, fn, ctx);
  }
  if (lamp_ledger_changes(g->device) != before) {
    lamp_graph_free(graph);
    return run_eagerly(g, s, fn, ctx);
  }
  s->graph = graph;
  g->recorded++;
  return lamp_graph_launch(graph);
}

lamp_status lamp_step_graphs_run(lamp_step_graphs *g, int k, float grad_scale, const void *x, const void *y,
                                 lamp_micro_fn fn, void *ctx) {
  if (!g->on) return fn(ctx);
  lamp_step_graph *s = &g->slots[k];
  int same = s->memory == lamp_ledger_changes(g->device) && s->x == x && s->y == y;
  if (same && s->graph != NULL && s->grad_scale == grad_scale) {
    g->replayed++;
    return lamp_graph_launch(s->graph);
  }
  drop_graph(s);
  int settled = same && s->settled;
  s->x = x;
  s->y = y;
  s->grad_scale = grad_scale;
  return settled ? record(g, s, fn, ctx) : run_eagerly(g, s, fn, ctx);
}
