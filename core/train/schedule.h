/*
** Learning-rate schedules, counted in optimizer steps (a skipped step does not advance them).
** The skeleton has constant and cosine; warm-up and step decay come with the optimizer issue.
*/
#ifndef LAMP_TRAIN_SCHEDULE_H
#define LAMP_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "lamp/abi.h"

typedef enum lamp_schedule_kind {
  LAMP_SCHEDULE_CONSTANT = 0,
  LAMP_SCHEDULE_COSINE = 1 /* base -> min_lr along half a cosine over `total` steps */
} lamp_schedule_kind;

typedef struct lamp_schedule {
  lamp_schedule_kind kind;
  uint64_t total;  /* steps; the lr stays at min_lr after */
  double min_lr;
} lamp_schedule;

/* The learning rate for 0-based optimizer step `step` given the optimizer's base lr. */
double lamp_schedule_lr(const lamp_schedule *s, double base_lr, uint64_t step);

/* Checks the fields; the message names the bad one. */
lamp_status lamp_schedule_validate(const lamp_schedule *s);

const char *lamp_schedule_name(lamp_schedule_kind kind);

#endif
