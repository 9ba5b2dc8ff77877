/* lamp plot: a metrics file read into one gnuplot data file per series (plot.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "cli/plot.h"

static const char *const series_files[LAMP_PLOT_SERIES] = {"loss", "lr", "scale", "skipped", "throughput",
                                                           "test-loss", "test-accuracy"};

/* Throughput is drawn as the mean of the last few steps: one step's is mostly noise (the clock,
   the loader, other work on the machine). */
#define THROUGHPUT_WINDOW 10

/* A file being read: where, and the data files it fills. */
typedef struct reading {
  const char *path;
  size_t line;
  lamp_plot_run *run;
  FILE *out[LAMP_PLOT_SERIES];
  double window[THROUGHPUT_WINDOW]; /* the last steps' samples/s, oldest overwritten first */
  size_t seen;                      /* steps with a samples/s */
} reading;

/* A control character (a line break) in a name would end the gnuplot command it is quoted in. */
static void legend_name(const char *path, char *name, size_t size) {
  const char *slash = strrchr(path, '/');
  const char *base = slash != NULL ? slash + 1 : path;
  const char *dot = strrchr(base, '.');
  int n = (int)(dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base));
  snprintf(name, size, "%.*s", n, base);
  for (char *c = name; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER:
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "an unknown value";
}

/* A number, or NaN where the record has null or nothing (a value JSON cannot hold, or none). */
static lamp_status number(const reading *r, const json_t *record, const char *key, double *v) {
  const json_t *x = json_object_get(record, key);
  *v = NAN;
  if (x == NULL || json_is_null(x)) return LAMP_OK;
  if (!json_is_number(x))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: \"%s\" must be a number or null, got %s", r->path, r->line, key,
                      type_name(x));
  *v = json_number_value(x);
  return LAMP_OK;
}

/* One point; NaN ("NaN" is what gnuplot reads as no value) breaks a line where a value is missing. */
static void point(reading *r, lamp_plot_series s, json_int_t step, double v) {
  lamp_plot_run *run = r->run;
  if (isfinite(v)) {
    fprintf(r->out[s], "%lld %.9g\n", (long long)step, v);
    if (run->points[s]++ == 0) run->lo[s] = run->hi[s] = v;
    if (v < run->lo[s]) run->lo[s] = v;
    if (v > run->hi[s]) run->hi[s] = v;
  } else {
    fprintf(r->out[s], "%lld NaN\n", (long long)step);
  }
}

static double mean_throughput(reading *r, double sps) {
  if (!isfinite(sps)) return NAN;
  r->window[r->seen++ % THROUGHPUT_WINDOW] = sps;
  size_t n = r->seen < THROUGHPUT_WINDOW ? r->seen : THROUGHPUT_WINDOW;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += r->window[i];
  return sum / (double)n;
}

static lamp_status step_record(reading *r, const json_t *record, json_int_t step) {
  double loss, lr, scale, sps;
  lamp_status st = number(r, record, "loss", &loss);
  if (st == LAMP_OK) st = number(r, record, "lr", &lr);
  if (st == LAMP_OK) st = number(r, record, "loss_scale", &scale);
  if (st == LAMP_OK) st = number(r, record, "samples_per_s", &sps);
  if (st != LAMP_OK) return st;
  const json_t *skipped = json_object_get(record, "skipped");
  if (skipped != NULL && !json_is_boolean(skipped))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: \"skipped\" must be true or false, got %s", r->path, r->line,
                      type_name(skipped));
  if (!(scale > 0.0)) scale = NAN; /* the panel's scale is logarithmic */
  point(r, LAMP_PLOT_LOSS, step, loss);
  point(r, LAMP_PLOT_LR, step, lr);
  point(r, LAMP_PLOT_SCALE, step, scale);
  point(r, LAMP_PLOT_THROUGHPUT, step, mean_throughput(r, sps));
  if (json_is_true(skipped)) point(r, LAMP_PLOT_SKIPPED, step, scale);
  return LAMP_OK;
}

/* An epoch or eval record: its test loss and accuracy, where it has them. */
static lamp_status test_record(reading *r, const json_t *record, json_int_t step) {
  double loss, accuracy;
  lamp_status st = number(r, record, "test_loss", &loss);
  if (st == LAMP_OK) st = number(r, record, "test_accuracy", &accuracy);
  if (st != LAMP_OK) return st;
  if (isfinite(loss)) point(r, LAMP_PLOT_TEST_LOSS, step, loss);
  if (isfinite(accuracy)) point(r, LAMP_PLOT_TEST_ACCURACY, step, 100.0 * accuracy);
  return LAMP_OK;
}

/* Records of other types are skipped: a newer writer may add some. */
static lamp_status record(reading *r, const json_t *rec) {
  if (!json_is_object(rec))
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: expected a record (a JSON object), got %s", r->path, r->line,
                      type_name(rec));
  const char *type = json_string_value(json_object_get(rec, "type"));
  if (type == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: the record has no \"type\" string (step, epoch or eval)", r->path,
                      r->line);
  int is_step = strcmp(type, "step") == 0, is_test = strcmp(type, "epoch") == 0 || strcmp(type, "eval") == 0;
  if (!is_step && !is_test) return LAMP_OK;
  const json_t *step = json_object_get(rec, "step");
  if (!json_is_integer(step) || json_integer_value(step) < 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: a %s record needs \"step\", an integer >= 0", r->path, r->line,
                      type);
  lamp_plot_run *run = r->run;
  long long at = (long long)json_integer_value(step);
  if (run->records++ == 0) run->first_step = run->last_step = at;
  if (at < run->first_step) run->first_step = at;
  if (at > run->last_step) run->last_step = at;
  return is_step ? step_record(r, rec, json_integer_value(step)) : test_record(r, rec, json_integer_value(step));
}

static lamp_status line(reading *r, const char *text, size_t len) {
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
  if (strspn(text, " \t") >= len)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: an empty line (each line must be one JSON record)", r->path,
                      r->line);
  json_error_t err;
  json_t *rec = json_loadb(text, len, 0, &err);
  if (rec == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s:%zu: not JSON: %s (column %d)", r->path, r->line, err.text,
                      err.column);
  lamp_status st = record(r, rec);
  json_decref(rec);
  return st;
}

static lamp_status read_lines(reading *r, FILE *in) {
  char *text = NULL;
  size_t cap = 0;
  ssize_t len;
  lamp_status st = LAMP_OK;
  while (st == LAMP_OK && (len = getline(&text, &cap, in)) > 0) {
    r->line++;
    st = line(r, text, (size_t)len);
  }
  free(text);
  if (st == LAMP_OK && ferror(in)) st = lamp_error(LAMP_ERR_SYSTEM, "cannot read %s: %s", r->path, strerror(errno));
  if (st == LAMP_OK && r->line == 0) st = lamp_error(LAMP_ERR_INVALID_USAGE, "%s: no records (the file is empty)", r->path);
  return st;
}

static lamp_status open_outputs(reading *r, const char *dir, int index) {
  for (int s = 0; s < LAMP_PLOT_SERIES; s++) {
    snprintf(r->run->data[s], sizeof r->run->data[s], "%s/run%d-%s.dat", dir, index, series_files[s]);
    r->out[s] = fopen(r->run->data[s], "w");
    if (r->out[s] == NULL) return lamp_error(LAMP_ERR_SYSTEM, "cannot write %s: %s", r->run->data[s], strerror(errno));
  }
  return LAMP_OK;
}

static lamp_status close_outputs(reading *r, lamp_status st) {
  for (int s = 0; s < LAMP_PLOT_SERIES; s++) {
    if (r->out[s] == NULL) continue;
    if (fclose(r->out[s]) != 0 && st == LAMP_OK)
      st = lamp_error(LAMP_ERR_SYSTEM, "cannot write %s: %s", r->run->data[s], strerror(errno));
  }
  return st;
}

lamp_status lamp_plot_read_run(const char *path, const char *dir, int index, lamp_plot_run *run) {
  memset(run, 0, sizeof *run);
  legend_name(path, run->name, sizeof run->name);
  reading r = {.path = path, .run = run};
  FILE *in = fopen(path, "r");
  if (in == NULL) return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot read the metrics file %s: %s", path, strerror(errno));
  lamp_status st = open_outputs(&r, dir, index);
  if (st == LAMP_OK) st = read_lines(&r, in);
  fclose(in);
  return close_outputs(&r, st);
}

void lamp_plot_remove_run(const lamp_plot_run *run) {
  for (int s = 0; s < LAMP_PLOT_SERIES; s++)
    if (run->data[s][0] != '\0') unlink(run->data[s]);
}
