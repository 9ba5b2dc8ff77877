/*
** A micro-step recorded as a device graph and replayed (CUDA Graphs). A small network on a large
** GPU is bound by kernel launches, not by arithmetic: recorded once, its forward and backward go
** to the device in one launch per step.
**
** A replay repeats the recorded work with the recorded arguments, so a graph is replayed only
** while everything it was recorded with still holds: the same input buffers, the same loss
** scale (folded into the loss gradient), and the device's memory unchanged (no block allocated or
** freed since: lamp_ledger_changes). Otherwise the micro-step runs eagerly; once an eager run of
** it has allocated nothing, so that its memory has settled, the next one is recorded. A changed
** loss scale (a dynamic scaler's growth or back-off) is recorded again at once. Each micro-step
** of an accumulation group has its own graph: the first writes the gradients, the others add.
**
** Recording can fail where the micro-step does what a replay could not repeat (backend.h: Dropout
** uploads masks drawn on the host); graphs are then off for the rest of the run, and the
** micro-step runs eagerly, said once in the log.
*/
#ifndef LAMP_TRAIN_STEP_GRAPH_H
#define LAMP_TRAIN_STEP_GRAPH_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct lamp_step_graph {
  lamp_graph *graph;       /* recorded with the fields below, or NULL */
  float grad_scale;        /* the loss-gradient scale of the last run */
  const void *x, *y;       /* its input buffers */
  uint64_t memory;         /* lamp_ledger_changes of the device after it */
  int settled;             /* it allocated and freed nothing */
} lamp_step_graph;

typedef struct lamp_step_graphs {
  int on;                  /* graphs are used for this run */
  int asked;               /* the run asked for them: losing them is a warning, not a note */
  lamp_device device;
  lamp_step_graph *slots;  /* one per micro-step of a group */
  int n;
  uint64_t recorded, replayed;
} lamp_step_graphs;

/* One micro-step's work on the device, from the forward to the end of the backward. */
typedef lamp_status (*lamp_micro_fn)(void *ctx);

/* `on`: whether this run uses graphs (the caller decided, the device has LAMP_CAP_GRAPHS). */
lamp_status lamp_step_graphs_init(lamp_step_graphs *g, lamp_device device, int micro_steps, int on, int asked);
void lamp_step_graphs_free(lamp_step_graphs *g);

/*
** Micro-step k: fn(ctx) run, recorded and launched, or its graph replayed, as told above. x and y
** are the micro-step's input buffers, grad_scale the scale fn folds into the loss gradient. The
** host side of fn has run once or more or not at all: what it advances per call (the model's
** forward count) is for the caller to set afterwards.
*/
lamp_status lamp_step_graphs_run(lamp_step_graphs *g, int k, float grad_scale, const void *x, const void *y,
                                 lamp_micro_fn fn, void *ctx);

#endif
