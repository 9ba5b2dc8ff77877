/*
** `lamp plot FILE.jsonl [FILE.jsonl ...] -o OUT.png [--size=WIDTHxHEIGHT]`: metrics files drawn into
** one PNG (plot.h). Exit status 0 when drawn; 1 when gnuplot is missing or fails, or a file cannot
** be read; 2 for a wrong command line.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/plot.h"

#define DEFAULT_WIDTH 1200
#define DEFAULT_HEIGHT 900
#define MIN_SIDE 200
#define MAX_SIDE 10000

typedef struct plot_args {
  const char **files;
  int n;
  const char *out;
  int width, height;
} plot_args;

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "lamp plot: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: lamp plot FILE.jsonl [FILE.jsonl ...] -o OUT.png [--size=WIDTHxHEIGHT]\n");
  return 2;
}

static int parse_size(const char *text, plot_args *a) {
  char extra;
  if (sscanf(text, "%dx%d%c", &a->width, &a->height, &extra) != 2 || a->width < MIN_SIDE || a->width > MAX_SIDE ||
      a->height < MIN_SIDE || a->height > MAX_SIDE)
    return usage_error("--size must be WIDTHxHEIGHT in pixels, each in [%d, %d] (e.g. %dx%d), got '%s'", MIN_SIDE,
                       MAX_SIDE, DEFAULT_WIDTH, DEFAULT_HEIGHT, text);
  return 0;
}

static int parse_args(int argc, char **argv, plot_args *a) {
  *a = (plot_args){.width = DEFAULT_WIDTH, .height = DEFAULT_HEIGHT};
  a->files = calloc((size_t)argc + 1, sizeof *a->files);
  if (a->files == NULL) return usage_error("out of memory");
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-o") == 0) {
      if (i + 1 == argc) return usage_error("-o needs the PNG file to write");
      a->out = argv[++i];
    } else if (strncmp(arg, "--size=", 7) == 0) {
      if (parse_size(arg + 7, a) != 0) return 2;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return usage_error("unknown option %s", arg);
    } else {
      a->files[a->n++] = arg;
    }
  }
  if (a->n == 0) return usage_error("expected one or more metrics files (JSON Lines, as Trainer{metrics = ...} writes)");
  if (a->out == NULL) return usage_error("-o OUT.png is required");
  if (strpbrk(a->out, "\n\r") != NULL) return usage_error("the output path has a line break in it");
  return 0;
}

/* Two files of one name (runs/a/run.jsonl, runs/b/run.jsonl) are told apart by their paths. */
static void distinct_names(lamp_plot_run *runs, const char **files, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++) {
      if (strcmp(runs[i].name, runs[j].name) != 0) continue;
      snprintf(runs[i].name, sizeof runs[i].name, "%s", files[i]);
      snprintf(runs[j].name, sizeof runs[j].name, "%s", files[j]);
    }
}

static lamp_status draw(const plot_args *a, const char *gnuplot, const char *dir, lamp_plot_run *runs) {
  lamp_status st = LAMP_OK;
  for (int i = 0; st == LAMP_OK && i < a->n; i++) st = lamp_plot_read_run(a->files[i], dir, i, &runs[i]);
  if (st != LAMP_OK) return st;
  distinct_names(runs, a->files, a->n);
  char script[LAMP_PLOT_PATH + 16];
  snprintf(script, sizeof script, "%s/plot.gp", dir);
  st = lamp_plot_write_script(script, runs, a->n, a->out, a->width, a->height);
  if (st == LAMP_OK) st = lamp_plot_run_gnuplot(gnuplot, script);
  unlink(script);
  return st;
}

/* The output is checked before any work; *created: it did not exist (removed if drawing fails). */
static lamp_status check_output(const char *out, int *created) {
  *created = access(out, F_OK) != 0;
  int fd = open(out, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot write %s: %s", out, strerror(errno));
  close(fd);
  return LAMP_OK;
}

static lamp_status plot(const plot_args *a) {
  char gnuplot[LAMP_PLOT_PATH], dir[LAMP_PLOT_PATH];
  int created = 0;
  lamp_status st = lamp_plot_find_gnuplot(gnuplot, sizeof gnuplot);
  if (st == LAMP_OK) st = check_output(a->out, &created);
  if (st != LAMP_OK) return st;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/lamp-plot-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  lamp_plot_run *runs = calloc((size_t)a->n, sizeof *runs);
  if (runs == NULL) st = lamp_error(LAMP_ERR_SYSTEM, "out of memory for %d runs", a->n);
  else if (strpbrk(dir, "\n\r") != NULL) st = lamp_error(LAMP_ERR_INVALID_USAGE, "TMPDIR has a line break in it");
  else if (mkdtemp(dir) == NULL) st = lamp_error(LAMP_ERR_SYSTEM, "cannot make a scratch folder %s: %s", dir, strerror(errno));
  else {
    st = draw(a, gnuplot, dir, runs);
    for (int i = 0; i < a->n; i++) lamp_plot_remove_run(&runs[i]);
    rmdir(dir);
  }
  free(runs);
  if (st != LAMP_OK && created) unlink(a->out);
  return st;
}

int lamp_cmd_plot(int argc, char **argv) {
  plot_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc == 0 && plot(&a) != LAMP_OK) {
    fprintf(stderr, "lamp plot: %s\n", lamp_last_error());
    rc = 1;
  }
  free(a.files);
  return rc;
}
