#include "train/schedule.h"

#include <math.h>

#include "base/error.h"

static double cosine_lr(const lamp_schedule *s, double base_lr, uint64_t step) {
  if (step < s->warmup) return base_lr * (double)(step + 1) / (double)s->warmup;
  if (step >= s->total) return s->min_lr;
  double progress = (double)(step - s->warmup) / (double)(s->total - s->warmup);
  return s->min_lr + (base_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}

double lamp_schedule_lr(const lamp_schedule *s, double base_lr, uint64_t step) {
  switch (s->kind) {
  case LAMP_SCHEDULE_COSINE: return cosine_lr(s, base_lr, step);
  case LAMP_SCHEDULE_STEP: return base_lr * pow(s->gamma, (double)(step / s->step_size));
  case LAMP_SCHEDULE_CONSTANT:
  default: return base_lr;
  }
}

lamp_status lamp_schedule_validate(const lamp_schedule *s) {
  switch (s->kind) {
  case LAMP_SCHEDULE_CONSTANT: return LAMP_OK;
  case LAMP_SCHEDULE_COSINE:
    if (s->total == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: cosine needs total > 0 steps");
    if (s->warmup >= s->total)
      return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: warmup (%llu steps) must be shorter than total (%llu)",
                        (unsigned long long)s->warmup, (unsigned long long)s->total);
    if (!(s->min_lr >= 0.0) || isinf(s->min_lr))
      return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: min_lr must be a finite number >= 0, got %g", s->min_lr);
    return LAMP_OK;
  case LAMP_SCHEDULE_STEP:
    if (s->step_size == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: step needs step_size > 0 steps");
    if (!(s->gamma > 0.0 && s->gamma <= 1.0))
      return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: gamma must be in (0, 1], got %g", s->gamma);
    return LAMP_OK;
  }
  return lamp_error(LAMP_ERR_INVALID_ARG, "schedule: unknown kind %d", (int)s->kind);
}

const char *lamp_schedule_name(lamp_schedule_kind kind) {
  switch (kind) {
  case LAMP_SCHEDULE_COSINE: return "cosine";
  case LAMP_SCHEDULE_STEP: return "step";
  default: return "constant";
  }
}

double lamp_linear_scaling(double base_lr, double base_batch, double effective_batch) {
  return base_lr * effective_batch / base_batch;
}
