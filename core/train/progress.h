/*
** The epoch progress line: a bar redrawn in place on a terminal, a single summary line per
** epoch elsewhere (rank 0 only; see lamp_log_progress).
*/
#ifndef LAMP_TRAIN_PROGRESS_H
#define LAMP_TRAIN_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct lamp_progress {
  uint64_t epoch;
  size_t total_batches;
  int world;
  double started;
  double last_draw;
} lamp_progress;

void lamp_progress_start(lamp_progress *p, uint64_t epoch, size_t total_batches, int world);
void lamp_progress_update(lamp_progress *p, uint64_t batches, uint64_t samples, double loss, double lr,
                          double scale, uint64_t skipped);
/* Prints the summary line; returns the epoch's seconds. `skipped` of the `steps` optimizer steps
   it covered were skipped on inf/NaN gradients: the line says so whenever any was, or a loss
   scaler is active ("scale 65536  skipped 12 of 12 steps"). */
double lamp_progress_finish(lamp_progress *p, uint64_t batches, uint64_t samples, double loss, double lr,
                            double scale, uint64_t skipped, uint64_t steps);

#endif
