/*
** The one way library code prints: lines go to a sink (stderr by default) when their level
** is at or below the threshold. LAMP_LOG=error|warn|info|debug sets the threshold.
*/
#ifndef LAMP_BASE_LOG_H
#define LAMP_BASE_LOG_H

#include <stdarg.h>
#include "lamp/abi.h"

typedef void (*lamp_log_sink)(lamp_log_level level, const char *line, void *userdata);

void lamp_log(lamp_log_level level, const char *who, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lamp_vlog(lamp_log_level level, const char *who, const char *fmt, va_list ap);

void lamp_log_set_level(lamp_log_level level);
lamp_log_level lamp_log_get_level(void);

/* Replaces the sink; NULL restores stderr. */
void lamp_log_set_sink(lamp_log_sink sink, void *userdata);

/*
** A progress line. On a terminal (stderr is a TTY) it redraws in place and `final` ends it
** with a newline; elsewhere only final lines are written, so logs stay readable. Rank 0 only.
*/
void lamp_log_progress(const char *line, int final);
int lamp_log_is_terminal(void);

/* Ranks other than 0 log only warnings and errors unless LAMP_LOG_ALL_RANKS=1. */
void lamp_log_set_rank(int rank);
int lamp_log_get_rank(void);

#endif
