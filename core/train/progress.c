#include "train/progress.h"

#include <stdio.h>
#include <time.h>

#include "base/log.h"

#define BAR_WIDTH 24
#define REDRAW_SECONDS 0.2
#define PLAIN_LINE_SECONDS 10.0

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void lamp_progress_start(lamp_progress *p, uint64_t epoch, size_t total_batches, int world) {
  p->epoch = epoch;
  p->total_batches = total_batches;
  p->world = world;
  p->started = now_seconds();
  p->last_draw = 0.0;
}

/* The scale and skip count matter only when a loss scaler is active (scale != 1). */
static void format_scaler(char *buf, size_t size, double scale, uint64_t skipped) {
  if (scale == 1.0 && skipped == 0)
    buf[0] = '\0';
  else
    snprintf(buf, size, "  scale %g  skipped %llu", scale, (unsigned long long)skipped);
}

void lamp_progress_update(lamp_progress *p, uint64_t batches, uint64_t samples, double loss, double lr,
                          double scale, uint64_t skipped) {
  /* A terminal redraws the bar often; a log file gets a plain line now and then. */
  int terminal = lamp_log_is_terminal();
  double now = now_seconds();
  if (terminal && now - p->last_draw < REDRAW_SECONDS && batches < p->total_batches) return;
  if (!terminal && (now - (p->last_draw > 0 ? p->last_draw : p->started) < PLAIN_LINE_SECONDS ||
                    batches >= p->total_batches))
    return;
  p->last_draw = now;
  char bar[BAR_WIDTH + 1];
  size_t filled = p->total_batches ? (size_t)(BAR_WIDTH * batches / p->total_batches) : BAR_WIDTH;
  for (size_t i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[BAR_WIDTH] = '\0';
  char scaler[64];
  format_scaler(scaler, sizeof scaler, scale, skipped);
  double elapsed = now - p->started;
  char line[256];
  snprintf(line, sizeof line, "epoch %llu [%s] %llu/%zu  loss %.4f  lr %.4g  %.0f samples/s%s",
           (unsigned long long)p->epoch, bar, (unsigned long long)batches, p->total_batches, loss, lr,
           elapsed > 0 ? (double)samples * p->world / elapsed : 0.0, scaler);
  lamp_log_progress(line, !terminal);
}

/* The summary's skip count: how many of the steps it covered were skipped, whatever the scale. */
static void format_summary_scaler(char *buf, size_t size, double scale, uint64_t skipped, uint64_t steps) {
  if (scale == 1.0 && skipped == 0)
    buf[0] = '\0';
  else
    snprintf(buf, size, "  scale %g  skipped %llu of %llu step%s", scale, (unsigned long long)skipped,
             (unsigned long long)steps, steps == 1 ? "" : "s");
}

double lamp_progress_finish(lamp_progress *p, uint64_t batches, uint64_t samples, double loss, double lr,
                            double scale, uint64_t skipped, uint64_t steps) {
  double elapsed = now_seconds() - p->started;
  char scaler[96];
  format_summary_scaler(scaler, sizeof scaler, scale, skipped, steps);
  char line[320];
  snprintf(line, sizeof line, "epoch %llu: loss %.4f  %llu batches  %llu samples  %.1f s  %.0f samples/s  lr %.4g%s",
           (unsigned long long)p->epoch, loss, (unsigned long long)batches,
           (unsigned long long)samples * (unsigned long long)p->world, elapsed,
           elapsed > 0 ? (double)samples * p->world / elapsed : 0.0, lr, scaler);
  lamp_log_progress(line, 1);
  return elapsed;
}
