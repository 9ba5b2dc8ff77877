/*
** Core error reporting: every fallible core function returns a lamp_status and leaves a
** message for the caller in a per-thread slot, the way dlerror() does. The message names the
** thing (file, plugin, parameter), what was expected and what was found.
*/
#ifndef LAMP_BASE_ERROR_H
#define LAMP_BASE_ERROR_H

#include <stdarg.h>
#include "lamp/abi.h"

#define LAMP_ERROR_MAX 2048

/* Stores the formatted message and returns code, so callers write `return lamp_error(...)`. */
lamp_status lamp_error(lamp_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
lamp_status lamp_verror(lamp_status code, const char *fmt, va_list ap);

/* Prepends "context: " to the current message; returns code. */
lamp_status lamp_error_context(lamp_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message of the last error on this thread ("" when none). */
const char *lamp_last_error(void);
void lamp_error_clear(void);

/* "ok", "system error", ... */
const char *lamp_status_name(lamp_status code);

#endif
