#include "train/schedule.h"

#include <math.h>

#include "base/error.h"

double lamp_schedule_lr(const lamp_schedule *s, double base_lr, uint64_t step) {
  switch (s->kind) {
  case LAMP_SCHEDULE_COSINE:
    if (step >= s->total) return s->min_lr;
    /* PyTorch's reference recipe: lr_s = base * (1 + cos(pi * s / total)) / 2. */
    return s->min_lr + (base_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * (double)step / (double)s->total));
  case LAMP_SCHEDULE_CONSTANT:
  default:
    return base_lr;
  }
}

lamp_status lamp_schedule_validate(const lamp_schedule *s) {
  if (s->kind != LAMP_SCHEDULE_CONSTANT && s->kind != LAMP_SCHEDULE_COSINE)
    return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: unknown kind %d", (int)s->kind);
  if (s->kind == LAMP_SCHEDULE_COSINE && s->total == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: cosine needs total > 0 steps");
  if (!(s->min_lr >= 0.0))
    return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: min_lr must be >= 0, got %g", s->min_lr);
  return LAMP_OK;
}

const char *lamp_schedule_name(lamp_schedule_kind kind) {
  return kind == LAMP_SCHEDULE_COSINE ? "cosine" : "constant";
}
