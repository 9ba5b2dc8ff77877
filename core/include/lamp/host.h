/*
** The services the core hands to every plugin. Plugins never link the core: everything
** they need from it arrives through this table, which lives as long as the process.
** Like the family tables it only grows at the end; check struct_size before using a member
** added after ABI 1.0.
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
  ** The fused unscale-and-check: one pass over `n` elements of `grads` (fp32), multiplying
  ** each by inv_scale in place and setting *found_inf = 1 if any value is inf or NaN
  ** (*found_inf is left untouched otherwise, so callers zero it first).
  */
  lamp_status (*unscale_and_check)(lamp_device device, float *grads, size_t n, float inv_scale,
                                   int *found_inf);

  /* Non-zero once the user or a failing rank asked the run to stop; long waits poll it. */
  const volatile int *abort_flag;
} lamp_host;

#ifdef __cplusplus
}
#endif
#endif
