/*
** Learning-rate schedules, counted in optimizer steps: a skipped step (an fp16 overflow) does
** not advance them. `step` below is 0-based: the lr for the first step taken is lr(0).
*/
#ifndef LAMP_TRAIN_SCHEDULE_H
#define LAMP_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "lamp/abi.h"

typedef enum lamp_schedule_kind {
  LAMP_SCHEDULE_CONSTANT = 0, /* base */
  LAMP_SCHEDULE_COSINE = 1,   /* linear warm-up, then base -> min_lr along half a cosine */
  LAMP_SCHEDULE_STEP = 2      /* base * gamma^floor(step / step_size) */
} lamp_schedule_kind;

typedef struct lamp_schedule {
  lamp_schedule_kind kind;
  uint64_t total;     /* COSINE: steps to reach min_lr (the warm-up included); min_lr after */
  double min_lr;      /* COSINE */
  uint64_t warmup;    /* COSINE: lr = base * (step + 1) / warmup for step < warmup */
  uint64_t step_size; /* STEP */
  double gamma;       /* STEP */
} lamp_schedule;

/*
** The learning rate for 0-based optimizer step `step` given the optimizer's base lr:
**   COSINE, step < warmup:          base * (step + 1) / warmup
**   COSINE, warmup <= step < total: min + (base - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
**   COSINE, step >= total:          min_lr
** With warmup 0 this is the reference recipe's cosine, base * (1 + cos(pi * step / total)) / 2.
*/
double lamp_schedule_lr(const lamp_schedule *s, double base_lr, uint64_t step);

/* Checks the fields; the message names the bad one and its value. */
lamp_status lamp_schedule_validate(const lamp_schedule *s);

/* "constant", "cosine", "step". */
const char *lamp_schedule_name(lamp_schedule_kind kind);

/* Goyal et al.'s linear scaling rule: base_lr * effective_batch / base_batch. */
double lamp_linear_scaling(double base_lr, double base_batch, double effective_batch);

#endif
