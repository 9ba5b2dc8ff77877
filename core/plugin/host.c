/*
** The lamp_host table: every service the core lends to plugins, and the per-object error
** storage (lamp_ctx) that host->set_error writes into.
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "plugin/loader.h"
#include "tensor/memory.h"

#ifndef LAMP_VERSION
#define LAMP_VERSION "0.0.0"
#endif

/* ---- error storage --------------------------------------------------------------------------- */

struct lamp_ctx {
  char message[LAMP_ERROR_MAX];
  const lamp_plugin *desc; /* whose text options option_text answers, with their values */
  char *const *texts;
};

/* set_error(NULL, ...) lands here: the load or probe in progress on this thread. */
static _Thread_local char load_message[LAMP_ERROR_MAX];

lamp_ctx *lamp_ctx_new(void) {
  lamp_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) lamp_error(LAMP_ERR_SYSTEM, "out of memory creating a plugin context");
  return ctx;
}

void lamp_ctx_free(lamp_ctx *ctx) { free(ctx); }

void lamp_ctx_bind_texts(lamp_ctx *ctx, const lamp_plugin *desc, char *const *texts) {
  ctx->desc = desc;
  ctx->texts = texts;
}

void lamp_ctx_clear(lamp_ctx *ctx) { ctx->message[0] = '\0'; }

const char *lamp_ctx_message(const lamp_ctx *ctx) { return ctx->message; }

void lamp_host_load_message_clear(void) { load_message[0] = '\0'; }

const char *lamp_host_load_message(void) { return load_message; }

/* ---- the services ---------------------------------------------------------------------------- */

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

/* An object's message may be written from several threads at once (a piecewise optimizer step,
   optim.h): one writer at a time. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static lamp_status host_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...) {
  char *buf = ctx != NULL ? ctx->message : load_message;
  if (ctx != NULL) pthread_mutex_lock(&ctx_lock);
  if (fmt == NULL) {
    buf[0] = '\0';
  } else {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, LAMP_ERROR_MAX, fmt, ap);
    va_end(ap);
  }
  if (ctx != NULL) pthread_mutex_unlock(&ctx_lock);
  return code;
}

static void *host_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  return lamp_mem_alloc(device, tag, bytes);
}

static void host_free(void *ptr) { lamp_mem_free(ptr); }

/* The kernel writes its flag in the device's memory, the plugin passed a host int: check into a
   device int, then copy it back, which waits for the check. */
static lamp_status unscale_on_device(lamp_device device, float *grads, size_t n, float inv_scale,
                                     int *found_inf) {
  int *flag = lamp_mem_alloc(device, LAMP_MEM_WORKSPACE, sizeof *flag);
  if (flag == NULL) return LAMP_ERR_SYSTEM;
  int seen = 0;
  lamp_status st = lamp_zero(device, flag, sizeof *flag);
  if (st == LAMP_OK) st = lamp_unscale_and_check(device, grads, n, inv_scale, flag);
  if (st == LAMP_OK) st = lamp_copy(LAMP_HOST, &seen, device, flag, sizeof seen);
  lamp_mem_free(flag); /* a device's free defers until the work queued on the block is done */
  if (st == LAMP_OK && seen != 0) *found_inf = 1;
  return st;
}

static lamp_status host_unscale_and_check(lamp_device device, float *grads, size_t n,
                                          float inv_scale, int *found_inf) {
  if (device == LAMP_HOST) return lamp_unscale_and_check(device, grads, n, inv_scale, found_inf);
  return unscale_on_device(device, grads, n, inv_scale, found_inf);
}

static int host_device_count(lamp_device device) { return lamp_device_count(device); }

static int host_device_ordinal(lamp_device device) { return lamp_device_ordinal(device); }

/* Plugins know the ABI's devices only. A core device beyond them whose memory the host can
   address (the simulated one) reaches plugins as the CPU: instance.c hands them its memory
   through the host view. */
static lamp_device host_run_device(void) {
  lamp_device d = lamp_run_device();
  if ((unsigned)d >= LAMP_DEVICE_COUNT && lamp_device_has(d, LAMP_CAP_HOST_VIEW)) return LAMP_CPU;
  return d;
}

static void *host_stream(lamp_device device) { return lamp_device_stream(device); }

static const char *host_option_text(lamp_ctx *ctx, const char *name) {
  if (ctx == NULL || ctx->desc == NULL || ctx->texts == NULL || name == NULL) return NULL;
  uint32_t n;
  const lamp_text_param *t = lamp_plugin_text_params(ctx->desc, &n);
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0) return ctx->texts[i];
  return NULL;
}

static lamp_status check_stride(const char *name, size_t ld, size_t row) {
  if (ld >= row) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "gemm: %s = %zu is smaller than the row length %zu", name, ld, row);
}

/* The strides are checked here, so that a device whose work is queued refuses them now, as the
   CPU does, rather than at the next wait; the core's dispatch does the rest. */
static lamp_status host_gemm(lamp_device device, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                             float alpha, const float *a, size_t lda, const float *b, size_t ldb, float beta,
                             float *c, size_t ldc) {
  lamp_status st = check_stride("lda", lda, trans_a ? m : k);
  if (st == LAMP_OK) st = check_stride("ldb", ldb, trans_b ? k : n);
  if (st == LAMP_OK) st = check_stride("ldc", ldc, n);
  if (st != LAMP_OK) return st;
  return lamp_gemm(device, trans_a, trans_b, m, n, k, alpha, a, LAMP_F32, lda, b, LAMP_F32, ldb, beta, c,
                   LAMP_F32, ldc);
}

static lamp_status host_copy(void *dst, lamp_device dst_device, const void *src,
                             lamp_device src_device, size_t bytes) {
  return lamp_copy(dst_device, dst, src_device, src, bytes);
}

static lamp_status host_synchronize(lamp_device device) { return lamp_synchronize(device); }

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
    .device_count = host_device_count,
    .device_ordinal = host_device_ordinal,
    .run_device = host_run_device,
    .stream = host_stream,
    .copy = host_copy,
    .synchronize = host_synchronize,
    .option_text = host_option_text,
    .gemm = host_gemm,
};

const lamp_host *lamp_host_get(void) { return &host; }
