/*
** `lamp plot`: metrics files (JSON Lines, docs/metrics.md) drawn by gnuplot into one PNG, each
** file one run, overlaid in every panel: loss (train per step, test per evaluation), test
** accuracy, learning rate, loss scale (skipped steps marked) and throughput.
**
**   plot_runs.c    reads a file into gnuplot data files (one per series) in a scratch folder
**   plot_script.c  writes the gnuplot script over those files and runs gnuplot
**   plot_cmd.c     the command line, the scratch folder, the order of the work
*/
#ifndef LAMP_CLI_PLOT_H
#define LAMP_CLI_PLOT_H

#include <stddef.h>

#include "lamp/abi.h"

#define LAMP_PLOT_PATH 4096

/* The series of one run: each a data file, and how many of its points have a value. */
typedef enum lamp_plot_series {
  LAMP_PLOT_LOSS,          /* step, train loss */
  LAMP_PLOT_LR,            /* step, learning rate */
  LAMP_PLOT_SCALE,         /* step, loss scale */
  LAMP_PLOT_SKIPPED,       /* step, loss scale, of the skipped steps */
  LAMP_PLOT_THROUGHPUT,    /* step, samples/s */
  LAMP_PLOT_TEST_LOSS,     /* step, test loss (epoch and eval records) */
  LAMP_PLOT_TEST_ACCURACY, /* step, test accuracy in % */
  LAMP_PLOT_SERIES
} lamp_plot_series;

typedef struct lamp_plot_run {
  char name[256]; /* the legend: the file's name without its folder and extension */
  char data[LAMP_PLOT_SERIES][LAMP_PLOT_PATH];
  size_t points[LAMP_PLOT_SERIES];         /* with a value */
  double lo[LAMP_PLOT_SERIES], hi[LAMP_PLOT_SERIES]; /* the smallest and largest value, given points */
  long long first_step, last_step;         /* of the records, given `records` */
  size_t records;                          /* step, epoch and eval records */
} lamp_plot_run;

/* Reads the metrics file at path into run's data files, named in folder dir after `index`. A
   line that is not a record is an error naming the file and the line. */
lamp_status lamp_plot_read_run(const char *path, const char *dir, int index, lamp_plot_run *run);
/* Removes what lamp_plot_read_run wrote. */
void lamp_plot_remove_run(const lamp_plot_run *run);

/* The gnuplot executable on PATH; a clear error naming the Debian package when there is none. */
lamp_status lamp_plot_find_gnuplot(char *path, size_t size);

/* Writes the gnuplot script drawing the runs into a width x height PNG at out. */
lamp_status lamp_plot_write_script(const char *script, const lamp_plot_run *runs, int n, const char *out, int width,
                                   int height);
/* Runs gnuplot on the script; its own messages go to stderr. */
lamp_status lamp_plot_run_gnuplot(const char *gnuplot, const char *script);

#endif
