/*
** The lamp_host table: every service the core lends to plugins, and the per-object error
** storage (lamp_ctx) that host->set_error writes into.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "plugin/loader.h"
#include "tensor/memory.h"

#ifndef LAMP_VERSION
#define LAMP_VERSION "0.0.0"
#endif

/*
** {======================================================
** Error storage
** =======================================================
*/

struct lamp_ctx {
  char message[LAMP_ERROR_MAX];
};

/* set_error(NULL, ...) lands here: the load or probe in progress on this thread. */
static _Thread_local char load_message[LAMP_ERROR_MAX];

lamp_ctx *lamp_ctx_new(void) {
  lamp_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) lamp_error(LAMP_ERR_SYSTEM, "out of memory creating a plugin context");
  return ctx;
}

void lamp_ctx_free(lamp_ctx *ctx) { free(ctx); }

void lamp_ctx_clear(lamp_ctx *ctx) { ctx->message[0] = '\0'; }

const char *lamp_ctx_message(const lamp_ctx *ctx) { return ctx->message; }

void lamp_host_load_message_clear(void) { load_message[0] = '\0'; }

const char *lamp_host_load_message(void) { return load_message; }

/* }====================================================== */

/*
** {======================================================
** The services
** =======================================================
*/

static volatile int abort_flag;

void lamp_host_set_abort(int on) { abort_flag = on != 0; }

static void host_log(lamp_log_level level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void host_log(lamp_log_level level, const char *who, const char *fmt, ...) {
  if (fmt == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  lamp_vlog(level, who, fmt, ap);
  va_end(ap);
}

static lamp_status host_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static lamp_status host_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...) {
  char *buf = ctx != NULL ? ctx->message : load_message;
  if (fmt == NULL) {
    buf[0] = '\0';
    return code;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, LAMP_ERROR_MAX, fmt, ap);
  va_end(ap);
  return code;
}

static void *host_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  return lamp_mem_alloc(device, tag, bytes);
}

static void host_free(void *ptr) { lamp_mem_free(ptr); }

static lamp_status host_unscale_and_check(lamp_device device, float *grads, size_t n,
                                          float inv_scale, int *found_inf) {
  return lamp_unscale_and_check(device, grads, n, inv_scale, found_inf);
}

static const lamp_host host = {
    .struct_size = sizeof(lamp_host),
    .abi_major = LAMP_ABI_MAJOR,
    .abi_minor = LAMP_ABI_MINOR,
    .core_version = LAMP_VERSION,
    .log = host_log,
    .set_error = host_set_error,
    .alloc = host_alloc,
    .free = host_free,
    .unscale_and_check = host_unscale_and_check,
    .abort_flag = &abort_flag,
};

const lamp_host *lamp_host_get(void) { return &host; }

/* }====================================================== */
