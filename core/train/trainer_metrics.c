#include "train/trainer_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "tensor/ledger.h"
#include "train/metrics_file.h"
#include "train/trainer_internal.h"

struct lamp_run_metrics {
  lamp_metrics_file *file;
  int decided;           /* started afresh or continued after a resume: appends from now on */
  int stopped;           /* a record could not be written: no more are */
  double created;        /* the trainer's birth, for "elapsed" */
  double clock;          /* the last step's end, or the start of the training call */
  uint64_t samples_seen; /* the trainer's sample count at the last step record */
  json_t *waiting;       /* a finished epoch's record, until what comes next */
  /* The open epoch as this process trained it (since its start, or the resume). */
  double loss_sum, seconds;
  uint64_t batches, samples, steps, skipped;
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A finite number, or null: JSON has no NaN or infinity (json_real refuses them). */
static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static int recording(const lamp_trainer *t) { return t->metrics != NULL && !t->metrics->stopped; }

/* Training matters more than its record: a failure is said once, and recording stops. */
static void stop(lamp_run_metrics *m, const char *why) {
  m->stopped = 1;
  lamp_log(LAMP_LOG_WARN, "metrics", "%s; recording stops here, training goes on", why);
}

/* Writes the record (NULL: building it ran out of memory) and drops the reference. */
static void write_record(lamp_run_metrics *m, json_t *record) {
  if (record == NULL) {
    stop(m, "out of memory for a record of the metrics file");
    return;
  }
  lamp_status st = m->decided ? LAMP_OK : lamp_metrics_file_start_over(m->file);
  if (st == LAMP_OK) {
    m->decided = 1;
    st = lamp_metrics_file_append(m->file, record);
  }
  json_decref(record);
  if (st != LAMP_OK) stop(m, lamp_last_error());
}

lamp_status lamp_trainer_metrics_open(lamp_trainer *t, const char *path) {
  if (path == NULL || lamp_comm_rank(t->config.comm) != 0) return LAMP_OK;
  lamp_run_metrics *m = calloc(1, sizeof *m);
  if (m == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory");
  lamp_status st = lamp_metrics_file_open(&m->file, path);
  if (st != LAMP_OK) {
    free(m);
    return lamp_error_context(st, "Trainer");
  }
  t->metrics = m;
  return LAMP_OK;
}

void lamp_trainer_metrics_ready(lamp_trainer *t) {
  if (t->metrics != NULL) t->metrics->created = t->metrics->clock = now_seconds();
}

void lamp_trainer_metrics_flush(lamp_trainer *t) {
  lamp_run_metrics *m = t->metrics;
  if (m == NULL || m->waiting == NULL) return;
  json_t *record = m->waiting;
  m->waiting = NULL;
  if (m->stopped) json_decref(record);
  else write_record(m, record);
}

void lamp_trainer_metrics_close(lamp_trainer *t) {
  if (t->metrics == NULL) return;
  lamp_trainer_metrics_flush(t);
  lamp_metrics_file_close(t->metrics->file);
  free(t->metrics);
  t->metrics = NULL;
}

static void start_epoch_sums(lamp_run_metrics *m) {
  m->loss_sum = m->seconds = 0.0;
  m->batches = m->samples = m->steps = m->skipped = 0;
}

void lamp_trainer_metrics_train_begin(lamp_trainer *t) {
  if (t->metrics == NULL) return;
  lamp_trainer_metrics_flush(t);
  t->metrics->clock = now_seconds(); /* evaluation and saves between calls are not training */
  if (t->epoch_batches == 0) start_epoch_sums(t->metrics);
}

/* The mean loss of the step's micro-batches, already on the host with the step's report. */
static double step_loss(const lamp_trainer *t) {
  double sum = 0.0;
  for (int k = 0; k < t->config.accum; k++) sum += t->report_host->loss[k];
  return sum / t->config.accum;
}

void lamp_trainer_metrics_step(lamp_trainer *t, double scale, int skipped) {
  if (!recording(t)) return;
  lamp_run_metrics *m = t->metrics;
  double now = now_seconds(), seconds = now - m->clock;
  double samples = (double)(t->stats.samples - m->samples_seen) * t->stats.world;
  m->clock = now;
  m->samples_seen = t->stats.samples;
  /* A skipped step used no learning rate: the one it would have used keeps the curve whole. */
  double lr = skipped ? lamp_schedule_lr(&t->config.schedule, t->base_lr, t->stats.steps) : t->stats.lr;
  /* The norm of the averaged, unscaled gradients; the report has their squared sum when clipping. */
  json_t *grad_norm = NULL;
  if (t->config.clip != 0.0) grad_norm = number(sqrt(t->report_host->sumsq) / (scale * t->stats.world));
  write_record(m, json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:b, s:o*, s:o}", "type", "step", "step",
                            (json_int_t)(t->stats.steps + t->stats.skipped_steps), "epoch",
                            (json_int_t)(t->epochs_done + 1), "loss", number(step_loss(t)), "lr", number(lr),
                            "loss_scale", number(scale), "skipped", skipped, "grad_norm", grad_norm,
                            "samples_per_s", seconds > 0.0 ? number(samples / seconds) : json_null()));
}

/* {"params": {"current": bytes, "peak": bytes}, ..., "total": {...}} of the run device. */
static json_t *memory(lamp_device device) {
  json_t *all = json_object();
  for (int tag = 0; all != NULL && tag <= LAMP_MEM_TAG_COUNT; tag++) {
    lamp_ledger_entry e = lamp_ledger_get(device, (lamp_mem_tag)tag);
    json_t *entry = json_pack("{s:I, s:I}", "current", (json_int_t)e.current, "peak", (json_int_t)e.peak);
    if (json_object_set_new(all, lamp_mem_tag_name((lamp_mem_tag)tag), entry) != 0) {
      json_decref(all);
      all = NULL;
    }
  }
  return all;
}

static json_t *epoch_record(const lamp_trainer *t, const lamp_run_metrics *m) {
  double seconds = m->seconds;
  return json_pack("{s:s, s:I, s:I, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:s, s:o}", "type", "epoch", "epoch",
                   (json_int_t)t->epochs_done, "step", (json_int_t)(t->stats.steps + t->stats.skipped_steps),
                   "train_loss", m->batches ? number(m->loss_sum / (double)m->batches) : json_null(), "samples",
                   (json_int_t)m->samples, "steps", (json_int_t)m->steps, "skipped", (json_int_t)m->skipped,
                   "seconds", number(seconds), "samples_per_s",
                   seconds > 0.0 ? number((double)m->samples / seconds) : json_null(), "elapsed",
                   number(now_seconds() - m->created), "device", lamp_device_name(t->config.device), "memory",
                   memory(t->config.device));
}

void lamp_trainer_metrics_train_end(lamp_trainer *t, const lamp_epoch_result *r, double loss_sum, uint64_t batches) {
  if (!recording(t)) return;
  lamp_run_metrics *m = t->metrics;
  m->loss_sum += loss_sum;
  m->batches += batches;
  m->samples += r->samples * (uint64_t)t->stats.world;
  m->steps += r->steps;
  m->skipped += r->skipped_steps;
  m->seconds += r->seconds;
  if (!r->epoch_done) return;
  m->waiting = epoch_record(t, m);
  if (m->waiting == NULL) stop(m, "out of memory for a record of the metrics file");
  start_epoch_sums(m);
}

void lamp_trainer_metrics_evaluate(lamp_trainer *t, const lamp_eval_result *r) {
  if (!recording(t)) return;
  lamp_run_metrics *m = t->metrics;
  json_t *record = m->waiting;
  m->waiting = NULL;
  if (record == NULL) /* the epoch in progress, or the last one finished */
    record = json_pack("{s:s, s:I, s:I}", "type", "eval", "epoch",
                       (json_int_t)(t->epochs_done + (t->epoch_open ? 1 : 0)), "step",
                       (json_int_t)(t->stats.steps + t->stats.skipped_steps));
  if (record != NULL && (json_object_set_new(record, "test_loss", number(r->mean_loss)) != 0 ||
                         json_object_set_new(record, "test_accuracy", number(r->accuracy)) != 0 ||
                         json_object_set_new(record, "test_samples", json_integer((json_int_t)r->samples)) != 0)) {
    json_decref(record);
    record = NULL;
  }
  write_record(m, record);
}

void lamp_trainer_metrics_checkpoint(lamp_trainer *t) { lamp_trainer_metrics_flush(t); }

void lamp_trainer_metrics_resumed(lamp_trainer *t) {
  if (!recording(t)) return;
  lamp_run_metrics *m = t->metrics;
  lamp_trainer_metrics_flush(t); /* the state it described is gone; the cut below decides its fate */
  uint64_t step = t->stats.steps + t->stats.skipped_steps;
  size_t dropped = 0;
  lamp_status st = lamp_metrics_file_continue(m->file, step, &dropped);
  if (st != LAMP_OK) {
    stop(m, lamp_last_error());
    return;
  }
  m->decided = 1;
  m->samples_seen = t->stats.samples;
  start_epoch_sums(m);
  lamp_log(LAMP_LOG_INFO, "metrics", "%s continues after step %llu%s", lamp_metrics_file_path(m->file),
           (unsigned long long)step, dropped ? " (the records after it, from the run before, were cut)" : "");
}
