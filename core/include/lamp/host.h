/*
** The services the core hands to every plugin. Plugins never link the core: everything
** they need from it arrives through this table, which lives as long as the process.
** Like the family tables it only grows at the end: a plugin that may meet an older core checks
** LAMP_HOST_HAS(host, member) (or host->abi_minor) before using a member added after ABI 1.0,
** since a 1.0 core's table ends at abort_flag.
*/
#ifndef LAMP_HOST_H
#define LAMP_HOST_H

#include "lamp/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What an allocation is for: the memory ledger keeps current and peak bytes per tag. */
typedef enum lamp_mem_tag {
  LAMP_MEM_PARAMS = 0,
  LAMP_MEM_GRADS = 1,
  LAMP_MEM_MASTER = 2,      /* fp32 master weights */
  LAMP_MEM_OPTIM_STATE = 3, /* momentum, Adam m/v */
  LAMP_MEM_ACTIVATIONS = 4,
  LAMP_MEM_WORKSPACE = 5,
  LAMP_MEM_DATA = 6,
  LAMP_MEM_TAG_COUNT
} lamp_mem_tag;

typedef enum lamp_reduce_op {
  LAMP_REDUCE_SUM = 0,
  LAMP_REDUCE_MAX = 1,
  LAMP_REDUCE_MIN = 2
} lamp_reduce_op;

typedef struct lamp_host {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char *core_version;

  /* printf-style logging; `who` names the plugin ("mpi"). */
  void (*log)(lamp_log_level level, const char *who, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;

  /*
  ** Records an error on the object `ctx` (the one handed to the plugin's create), or on the
  ** load in progress when ctx is NULL (inside lamp_plugin_entry_v1 or probe). Returns code,
  ** so a plugin can write `return host->set_error(ctx, LAMP_ERR_INVALID_ARG, "...")`.
  */
  lamp_status (*set_error)(lamp_ctx *ctx, lamp_status code, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;

  /* Tracked, 64-byte aligned memory on `device`; NULL when out of memory. */
  void *(*alloc)(lamp_device device, lamp_mem_tag tag, size_t bytes);
  void (*free)(void *ptr);

  /*
  ** The fused unscale-and-check: one pass over `n` elements of `grads` (fp32, memory of
  ** `device`), multiplying each by inv_scale in place and setting *found_inf = 1 if any value
  ** is inf or NaN (*found_inf is left untouched otherwise, so callers zero it first).
  ** found_inf is host memory on every device. On a device whose work is queued (cuda) the call
  ** blocks: it waits for the check, and so for the work queued before it, to get the flag.
  */
  lamp_status (*unscale_and_check)(lamp_device device, float *grads, size_t n, float inv_scale,
                                   int *found_inf);

  /* Non-zero once the user or a failing rank asked the run to stop; long waits poll it. */
  const volatile int *abort_flag;

  /* ---- ABI 1.1: present when LAMP_HOST_HAS(host, member) ------------------------------------- */
  /*
  ** The device services, for any of the plugin's functions; device_count and device_ordinal
  ** create no device context, so probe may call them too. On a device without a backend in
  ** this core, copy and synchronize fail with LAMP_ERR_UNSUPPORTED (report it with set_error:
  ** the core's message does not reach the plugin).
  */

  /* How many devices of this kind the process can use: 0 without a driver or backend. */
  int (*device_count)(lamp_device device);

  /* The ordinal of the device of this kind the process uses (one process per GPU), -1 when
     there is none. */
  int (*device_ordinal)(lamp_device device);

  /* The device the run trains on. A device this ABI does not name never shows here: a core
     device whose memory the host can address is reported as LAMP_CPU, and plugins are then
     handed that memory as host memory. */
  lamp_device (*run_device)(void);

  /* The core's queue on `device` (a cudaStream_t on cuda): enqueue work there so it runs in
     order with the core's. NULL where work is not queued (cpu). */
  void *(*stream)(lamp_device device);

  /* Copies `bytes` between any two devices (LAMP_CPU: host memory). Returns once a host source
     may be reused and a host destination holds the data; a copy within one device is queued. */
  lamp_status (*copy)(void *dst, lamp_device dst_device, const void *src, lamp_device src_device,
                      size_t bytes);

  /* Returns when all work queued on `device` so far is done, with the first error of that work. */
  lamp_status (*synchronize)(lamp_device device);

  /* ---- ABI 1.4: present when LAMP_HOST_HAS(host, member) -------------------------------- */

  /*
  ** The value of the text option `name` (hdr's text_params) of the object `ctx` belongs to:
  ** what the user gave, validated, else its default. NULL for a name the plugin does not declare
  ** as text. Callable from create on; the string stays valid until the object's destroy returns.
  */
  const char *(*option_text)(lamp_ctx *ctx, const char *name);

  /*
  ** C[m,n] = alpha * op(A) * op(B) + beta * C in fp32 on `device`, op(X) = X, or X^T when trans_x
  ** is non-zero. Row-major: ld* are row strides in elements (of the stored, untransposed X). Every
  ** pointer is memory of `device`; with beta 0, C is not read. On a device whose work is queued
  ** (cuda) the product is queued on host->stream(device) and the call returns at once. Fails with
  ** LAMP_ERR_UNSUPPORTED on a device without a backend, LAMP_ERR_INVALID_ARG on a row stride
  ** shorter than its row (report it with set_error: the core's message does not reach the plugin).
  */
  lamp_status (*gemm)(lamp_device device, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                      float alpha, const float *a, size_t lda, const float *b, size_t ldb, float beta,
                      float *c, size_t ldc);
} lamp_host;

/* Whether the host table reaching the plugin has `member` (a core older than the plugin's
   headers has a shorter table). */
#define LAMP_HOST_HAS(host, member)                                                                \
  (offsetof(lamp_host, member) + sizeof((host)->member) <= (host)->struct_size)

#ifdef __cplusplus
}
#endif
#endif
