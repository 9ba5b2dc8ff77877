#include "train/metrics_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* Numbers carry 9 significant digits: a float exactly, and more than any metric needs. */
#define METRICS_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

struct lamp_metrics_file {
  int fd;     /* O_APPEND: every write lands at the end, wherever a cut left it */
  off_t size; /* the length this writer left the file at: where a failed write is cut back to */
  char path[];
};

static lamp_status not_regular(const char *path) {
  return lamp_error(LAMP_ERR_INVALID_USAGE, "the metrics file %s is not a regular file", path);
}

/* Only a regular file can be cut back on a resume; and opening a FIFO to write would wait for a
   reader, hence the look first and O_NONBLOCK (which regular files ignore). */
lamp_status lamp_metrics_file_open(lamp_metrics_file **out, const char *path) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return not_regular(path);
  size_t n = strlen(path);
  lamp_metrics_file *f = malloc(sizeof *f + n + 1);
  if (f == NULL) return lamp_error(LAMP_ERR_SYSTEM, "metrics file %s: out of memory", path);
  memcpy(f->path, path, n + 1);
  f->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
  if (f->fd < 0) {
    int e = errno;
    free(f);
    return lamp_error(LAMP_ERR_INVALID_USAGE, "cannot open the metrics file %s for writing: %s", path, strerror(e));
  }
  if (fstat(f->fd, &st) != 0) {
    int e = errno;
    lamp_metrics_file_close(f);
    return lamp_error(LAMP_ERR_SYSTEM, "cannot read the size of the metrics file %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    lamp_metrics_file_close(f);
    return not_regular(path);
  }
  f->size = st.st_size;
  *out = f;
  return LAMP_OK;
}

void lamp_metrics_file_close(lamp_metrics_file *f) {
  if (f == NULL) return;
  close(f->fd);
  free(f);
}

const char *lamp_metrics_file_path(const lamp_metrics_file *f) { return f->path; }

static lamp_status cut_at(lamp_metrics_file *f, off_t size) {
  if (ftruncate(f->fd, size) != 0)
    return lamp_error(LAMP_ERR_SYSTEM, "cannot cut the metrics file %s to %lld bytes: %s", f->path, (long long)size,
                      strerror(errno));
  f->size = size;
  return LAMP_OK;
}

lamp_status lamp_metrics_file_start_over(lamp_metrics_file *f) { return cut_at(f, 0); }

/* Whether a line is a record of a step after `step`. Lines that are not records are left alone:
   the file is the user's, and only this writer's records are known to be in step order. */
static int past_step(const char *line, size_t len, uint64_t step) {
  json_t *record = json_loadb(line, len, 0, NULL);
  json_t *s = json_object_get(record, "step");
  int past = json_is_integer(s) && json_integer_value(s) >= 0 && (uint64_t)json_integer_value(s) > step;
  json_decref(record);
  return past;
}

lamp_status lamp_metrics_file_continue(lamp_metrics_file *f, uint64_t step, size_t *dropped) {
  *dropped = 0;
  FILE *in = fopen(f->path, "rb");
  if (in == NULL) return lamp_error(LAMP_ERR_SYSTEM, "cannot read the metrics file %s: %s", f->path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  off_t at = 0, cut = -1;
  ssize_t len;
  while ((len = getline(&line, &cap, in)) > 0) {
    if (cut < 0 && (line[len - 1] != '\n' || past_step(line, (size_t)len, step))) cut = at;
    if (cut >= 0) (*dropped)++;
    at += len;
  }
  int failed = ferror(in);
  free(line);
  fclose(in);
  if (failed) return lamp_error(LAMP_ERR_SYSTEM, "cannot read the metrics file %s", f->path);
  return cut_at(f, cut >= 0 ? cut : at);
}

static lamp_status write_line(lamp_metrics_file *f, const char *text, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(f->fd, text + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      if (done > 0) (void)ftruncate(f->fd, f->size); /* the half line goes; the error is the write's */
      return lamp_error(LAMP_ERR_SYSTEM, "cannot write to the metrics file %s: %s", f->path, strerror(e));
    }
    done += (size_t)w;
  }
  f->size += (off_t)n;
  return LAMP_OK;
}

lamp_status lamp_metrics_file_append(lamp_metrics_file *f, const json_t *record) {
  char *text = json_dumps(record, METRICS_JSON_FLAGS);
  size_t n = text != NULL ? strlen(text) : 0;
  char *line = text != NULL ? realloc(text, n + 2) : NULL;
  if (line == NULL) {
    free(text);
    return lamp_error(LAMP_ERR_SYSTEM, "metrics file %s: out of memory for a record", f->path);
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  lamp_status st = write_line(f, line, n + 1);
  free(line);
  return st;
}
