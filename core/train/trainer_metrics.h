/*
** What the Trainer records in its metrics file (Trainer{metrics = FILE}; the records' fields are
** in docs/metrics.md). Rank 0 alone writes; every value comes from what the host already holds
** (the step's report, the ledger, the clock), so recording adds no wait for the device.
**
**   step   one per optimizer step, taken or skipped, when its report comes back
**   epoch  one per finished epoch. It waits for what comes next: an evaluation puts its test loss
**          and accuracy into it; more training, a save or closing the trainer writes it without
**          them (a checkpoint is never ahead of the file)
**   eval   an evaluation with no epoch record waiting (mid-epoch, a second one, before training)
**
** A run that resumes continues the file after the checkpoint's step (the records a killed run
** wrote past it go, and are written again); a run that does not resume starts the file afresh
** at its first record. A record that cannot be written stops the recording with one warning:
** training goes on, and the file keeps whole lines only.
*/
#ifndef LAMP_TRAIN_TRAINER_METRICS_H
#define LAMP_TRAIN_TRAINER_METRICS_H

#include <stdint.h>

#include "train/trainer.h"

typedef struct lamp_run_metrics lamp_run_metrics;

/* Opens config.metrics on rank 0 (a path that cannot be written is an error naming it). */
lamp_status lamp_trainer_metrics_open(lamp_trainer *t, const char *path);
/* The trainer is made: its clocks start ("elapsed", the first step's samples/s). */
void lamp_trainer_metrics_ready(lamp_trainer *t);
/* Writes the waiting epoch record and closes the file. */
void lamp_trainer_metrics_close(lamp_trainer *t);

/* A training call begins, the loader positioned: the waiting epoch record goes, the throughput
   clock restarts, and a new epoch's sums start at 0. */
void lamp_trainer_metrics_train_begin(lamp_trainer *t);
/* lamp_trainer_step called directly: the waiting epoch record goes. */
void lamp_trainer_metrics_flush(lamp_trainer *t);
/* An optimizer step finished (skipped or taken) at loss scale `scale`. */
void lamp_trainer_metrics_step(lamp_trainer *t, double scale, int skipped);
/* A training call ended: its sums join the epoch's; a finished epoch's record waits. */
void lamp_trainer_metrics_train_end(lamp_trainer *t, const lamp_epoch_result *r, double loss_sum, uint64_t batches);
void lamp_trainer_metrics_evaluate(lamp_trainer *t, const lamp_eval_result *r);
/* Before a checkpoint is written: the waiting epoch record goes first. */
void lamp_trainer_metrics_checkpoint(lamp_trainer *t);
/* After a resume: the file continues after the restored step. */
void lamp_trainer_metrics_resumed(lamp_trainer *t);

#endif
