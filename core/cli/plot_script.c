/* lamp plot: the gnuplot script over the runs' data files, and gnuplot run on it (plot.h). */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "cli/plot.h"

extern char **environ;

lamp_status lamp_plot_find_gnuplot(char *path, size_t size) {
  const char *dirs = getenv("PATH");
  char fallback[256];
  if (dirs == NULL) { /* as execvp does without PATH */
    confstr(_CS_PATH, fallback, sizeof fallback);
    dirs = fallback;
  }
  for (const char *d = dirs;; d++) {
    size_t n = strcspn(d, ":");
    struct stat st;
    /* An empty entry is the current folder, as for the shell. */
    snprintf(path, size, "%.*s/gnuplot", (int)n, n > 0 ? d : ".");
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0) return LAMP_OK;
    d += n;
    if (*d == '\0') break;
  }
  path[0] = '\0';
  return lamp_error(LAMP_ERR_UNSUPPORTED, "gnuplot was not found on PATH (install the Debian package gnuplot-nox)");
}

/* A gnuplot string: single quotes, a quote inside doubled (the callers keep line breaks out). */
static void quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

/* One series of one run as a plot clause: `style` its gnuplot style, the title run's name + suffix. */
static int clause(FILE *f, int count, const lamp_plot_run *run, int index, lamp_plot_series s, const char *style,
                  const char *suffix) {
  if (run->points[s] == 0) return count;
  fprintf(f, "%s", count == 0 ? "plot " : ", \\\n     ");
  quoted(f, run->data[s]);
  fprintf(f, " using 1:2 with %s lc %d title ", style, index % 8 + 1);
  char title[300];
  snprintf(title, sizeof title, "%s%s", run->name, suffix);
  quoted(f, title);
  return count + 1;
}

typedef struct panel {
  const char *title;
  double x, y, w, h; /* where in the picture, as fractions of it */
  const char *empty; /* what an empty panel says */
  int log_y;
  lamp_plot_series series[2]; /* what it draws (LAMP_PLOT_SERIES: nothing more) */
  const char *key;            /* where its legend goes, out of the curves' usual way */
} panel;

/*
** The y range where gnuplot's autoscaling would warn of an empty one: every value alike (a static
** loss scale, a constant learning rate). Returns whether it set one.
*/
static int fix_flat_range(FILE *f, const panel *p, const lamp_plot_run *runs, int n) {
  double lo = 0.0, hi = 0.0;
  size_t points = 0;
  for (int k = 0; k < 2 && p->series[k] != LAMP_PLOT_SERIES; k++)
    for (int i = 0; i < n; i++) {
      lamp_plot_series s = p->series[k];
      if (runs[i].points[s] == 0) continue;
      if (points == 0 || runs[i].lo[s] < lo) lo = runs[i].lo[s];
      if (points == 0 || runs[i].hi[s] > hi) hi = runs[i].hi[s];
      points += runs[i].points[s];
    }
  if (points == 0 || lo != hi) return 0;
  double pad = lo != 0.0 ? 0.1 * (lo < 0 ? -lo : lo) : 1.0;
  if (p->log_y) fprintf(f, "set yrange [%.9g:%.9g]\n", lo / 2, hi * 2);
  else fprintf(f, "set yrange [%.9g:%.9g]\n", lo - pad, hi + pad);
  return 1;
}

static int begin_panel(FILE *f, const panel *p, const lamp_plot_run *runs, int n) {
  fprintf(f, "\nset origin %g, %g\nset size %g, %g\nset title ", p->x, p->y, p->w, p->h);
  quoted(f, p->title);
  fprintf(f, "\n%s\nset key %s\n", p->log_y ? "set logscale y 2" : "unset logscale y", p->key);
  return fix_flat_range(f, p, runs, n);
}

/* A panel no run has a point for says so: gnuplot refuses to plot nothing at all. */
static void end_panel(FILE *f, const panel *p, int count, int fixed) {
  if (count > 0) fprintf(f, "\n"); /* ends the plot command */
  if (count == 0) {
    fprintf(f, "unset logscale y\nset label 1 ");
    quoted(f, p->empty);
    fprintf(f, " at graph 0.5, graph 0.5 center\nplot [] [0:1] NaN notitle\nunset label 1\n");
  }
  if (fixed) fprintf(f, "set autoscale y\n");
}

/* One panel: for each of its series, that series of every run, in run order. */
static void draw_panel(FILE *f, const panel *p, const lamp_plot_run *runs, int n, const char *const styles[2],
                       const char *const suffixes[2]) {
  int fixed = begin_panel(f, p, runs, n), count = 0;
  for (int k = 0; k < 2 && p->series[k] != LAMP_PLOT_SERIES; k++)
    for (int i = 0; i < n; i++) count = clause(f, count, &runs[i], i, p->series[k], styles[k], suffixes[k]);
  end_panel(f, p, count, fixed);
}

/* Every panel spans the same steps, so that one step is at one x across the picture. */
static void shared_x_range(FILE *f, const lamp_plot_run *runs, int n) {
  long long first = 0, last = 0;
  int any = 0;
  for (int i = 0; i < n; i++) {
    if (runs[i].records == 0) continue;
    if (!any || runs[i].first_step < first) first = runs[i].first_step;
    if (!any || runs[i].last_step > last) last = runs[i].last_step;
    any = 1;
  }
  if (any && last > first) fprintf(f, "set xrange [%lld:%lld]\n", first, last);
}

static void write_panels(FILE *f, const lamp_plot_run *runs, int n) {
  static const panel loss = {"loss (lines: training steps; points: test)", 0, 0.64, 1, 0.36, "no step records", 0,
                             {LAMP_PLOT_LOSS, LAMP_PLOT_TEST_LOSS}, "top right"};
  static const panel accuracy = {"test accuracy (%)", 0, 0.32, 0.5, 0.32, "no test results (trainer:evaluate)", 0,
                                 {LAMP_PLOT_TEST_ACCURACY, LAMP_PLOT_SERIES}, "bottom right"};
  static const panel lr = {"learning rate", 0.5, 0.32, 0.5, 0.32, "no learning rates", 0, {LAMP_PLOT_LR, LAMP_PLOT_SERIES},
                           "top right"};
  static const panel scale = {"loss scale (x: skipped steps)", 0, 0, 0.5, 0.32, "no loss scales", 1,
                              {LAMP_PLOT_SCALE, LAMP_PLOT_SKIPPED}, "center right"};
  static const panel speed = {"throughput (samples/s, mean of the last 10 steps)", 0.5, 0, 0.5, 0.32, "no throughput", 0,
                              {LAMP_PLOT_THROUGHPUT, LAMP_PLOT_SERIES}, "bottom right"};
  static const char *const lines[2] = {"lines lw 1", "linespoints pt 7 ps 0.8 lw 2"};
  static const char *const points[2] = {"linespoints pt 7 ps 0.8 lw 2", ""};
  static const char *const thick[2] = {"lines lw 2", "points pt 2 ps 1.2"};
  static const char *const thin[2] = {"lines lw 1", ""};
  shared_x_range(f, runs, n);
  draw_panel(f, &loss, runs, n, lines, (const char *const[2]){"", " test"});
  draw_panel(f, &accuracy, runs, n, points, (const char *const[2]){"", ""});
  draw_panel(f, &lr, runs, n, thick, (const char *const[2]){"", ""});
  draw_panel(f, &scale, runs, n, thick, (const char *const[2]){"", " skipped"});
  draw_panel(f, &speed, runs, n, thin, (const char *const[2]){"", ""});
}

lamp_status lamp_plot_write_script(const char *script, const lamp_plot_run *runs, int n, const char *out, int width,
                                   int height) {
  FILE *f = fopen(script, "w");
  if (f == NULL) return lamp_error(LAMP_ERR_SYSTEM, "cannot write %s: %s", script, strerror(errno));
  /* pngcairo draws smoother lines; a gnuplot built without cairo still has png. noenhanced: a
     name's '_' or '^' is not a subscript or a superscript. */
  fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
             "  set terminal pngcairo size %d, %d noenhanced font ',9'\n"
             "} else {\n"
             "  set terminal png size %d, %d noenhanced\n"
             "}\nset output ",
          width, height, width, height);
  quoted(f, out);
  /* The offsets keep a curve off the frame (a loss scale at its largest, an accuracy of 100 %). */
  fprintf(f, "\nset multiplot\nset grid\nset key font ',8' samplen 2\nset xlabel 'optimizer step'\n"
             "set offsets 0, 0, graph 0.05, graph 0.05\n");
  write_panels(f, runs, n);
  fprintf(f, "\nunset multiplot\n");
  if (fclose(f) != 0) return lamp_error(LAMP_ERR_SYSTEM, "cannot write %s: %s", script, strerror(errno));
  return LAMP_OK;
}

lamp_status lamp_plot_run_gnuplot(const char *gnuplot, const char *script) {
  char *argv[] = {(char *)"gnuplot", (char *)script, NULL};
  pid_t pid;
  int err = posix_spawn(&pid, gnuplot, NULL, NULL, argv, environ);
  if (err != 0) return lamp_error(LAMP_ERR_SYSTEM, "cannot run %s: %s", gnuplot, strerror(err));
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return lamp_error(LAMP_ERR_SYSTEM, "waiting for %s: %s", gnuplot, strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return LAMP_OK;
  if (WIFSIGNALED(status))
    return lamp_error(LAMP_ERR_SYSTEM, "%s was killed by signal %d", gnuplot, WTERMSIG(status));
  return lamp_error(LAMP_ERR_SYSTEM, "%s failed with exit status %d (its messages are above)", gnuplot,
                    WEXITSTATUS(status));
}
