#include "base/log.h"

#include "base/launcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static lamp_log_level threshold = LAMP_LOG_INFO;
static int threshold_read_from_env;
static lamp_log_sink sink;
static void *sink_userdata;
static int this_rank = -1; /* -1: not set yet; see current_rank */

static void read_env_threshold(void) {
  const char *v = getenv("LAMP_LOG");
  threshold_read_from_env = 1;
  if (v == NULL) return;
  if (strcasecmp(v, "error") == 0) threshold = LAMP_LOG_ERROR;
  else if (strcasecmp(v, "warn") == 0) threshold = LAMP_LOG_WARN;
  else if (strcasecmp(v, "info") == 0) threshold = LAMP_LOG_INFO;
  else if (strcasecmp(v, "debug") == 0) threshold = LAMP_LOG_DEBUG;
}

lamp_log_level lamp_log_get_level(void) {
  if (!threshold_read_from_env) read_env_threshold();
  return threshold;
}

void lamp_log_set_level(lamp_log_level level) {
  threshold_read_from_env = 1;
  threshold = level;
}

void lamp_log_set_sink(lamp_log_sink s, void *userdata) {
  sink = s;
  sink_userdata = userdata;
}

void lamp_log_set_rank(int rank) { this_rank = rank; }

/*
** Until a communicator says otherwise, a process started by a launcher takes its rank from
** the launcher's environment, so rank 1 is quiet from its first line (plugin loading included).
*/
static int current_rank(void) {
  if (this_rank >= 0) return this_rank;
  int rank = lamp_launcher_rank();
  return rank >= 0 ? rank : 0;
}

int lamp_log_get_rank(void) { return current_rank(); }

static int rank_may_log(lamp_log_level level) {
  if (current_rank() == 0 || level <= LAMP_LOG_WARN) return 1;
  const char *all = getenv("LAMP_LOG_ALL_RANKS");
  return all != NULL && strcmp(all, "1") == 0;
}

static const char *level_prefix(lamp_log_level level) {
  switch (level) {
  case LAMP_LOG_ERROR: return "error: ";
  case LAMP_LOG_WARN: return "warning: ";
  default: return "";
  }
}

void lamp_vlog(lamp_log_level level, const char *who, const char *fmt, va_list ap) {
  if (level > lamp_log_get_level() || !rank_may_log(level)) return;
  char message[2048];
  char line[2300];
  vsnprintf(message, sizeof message, fmt, ap);
  if (who != NULL && who[0] != '\0')
    snprintf(line, sizeof line, "%s%s: %s", level_prefix(level), who, message);
  else
    snprintf(line, sizeof line, "%s%s", level_prefix(level), message);
  if (sink != NULL) {
    sink(level, line, sink_userdata);
    return;
  }
  fprintf(stderr, "%s\n", line);
  fflush(stderr);
}

void lamp_log(lamp_log_level level, const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lamp_vlog(level, who, fmt, ap);
  va_end(ap);
}

int lamp_log_is_terminal(void) { return sink == NULL && isatty(STDERR_FILENO); }

void lamp_log_progress(const char *line, int final) {
  if (current_rank() != 0 || lamp_log_get_level() < LAMP_LOG_INFO) return;
  if (!lamp_log_is_terminal()) {
    if (final) lamp_log(LAMP_LOG_INFO, NULL, "%s", line);
    return;
  }
  /* \r plus clear-to-end-of-line redraws the bar without leaving debris of longer lines. */
  fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
  fflush(stderr);
}
