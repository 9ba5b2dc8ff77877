#include "base/error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[LAMP_ERROR_MAX];

lamp_status lamp_verror(lamp_status code, const char *fmt, va_list ap) {
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  return code;
}

lamp_status lamp_error(lamp_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lamp_verror(code, fmt, ap);
  va_end(ap);
  return code;
}

lamp_status lamp_error_context(lamp_status code, const char *fmt, ...) {
  char prefix[LAMP_ERROR_MAX];
  char old[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_message, sizeof old);
  /* Truncation is acceptable: the message is for people, the status is what code reads. */
  size_t used = strlen(prefix);
  if (used > sizeof last_message - 3) used = sizeof last_message - 3;
  memcpy(last_message, prefix, used);
  memcpy(last_message + used, ": ", 2);
  size_t rest = sizeof last_message - used - 2;
  size_t old_len = strnlen(old, rest - 1);
  memcpy(last_message + used + 2, old, old_len);
  last_message[used + 2 + old_len] = '\0';
  return code;
}

const char *lamp_last_error(void) { return last_message; }

void lamp_error_clear(void) { last_message[0] = '\0'; }

const char *lamp_status_name(lamp_status code) {
  switch (code) {
  case LAMP_OK: return "ok";
  case LAMP_ERR_SYSTEM: return "system error";
  case LAMP_ERR_INTERNAL: return "internal error";
  case LAMP_ERR_INVALID_ARG: return "invalid argument";
  case LAMP_ERR_INVALID_USAGE: return "invalid usage";
  case LAMP_ERR_UNSUPPORTED: return "unsupported";
  case LAMP_ERR_REMOTE: return "remote error";
  case LAMP_ERR_NUMERIC: return "numeric error";
  }
  return "unknown status";
}
