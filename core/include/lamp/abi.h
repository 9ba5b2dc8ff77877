/*
** lamp plugin ABI, version 1: the common part every plugin family shares.
**
** A plugin is a shared object exporting exactly one symbol,
**
**     LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host);
**
** which returns a pointer to a static family table (lamp_precision_v1, lamp_comm_v1 or
** lamp_optim_v1) whose first member is the lamp_plugin header below. The entry may inspect
** `host` and refuse by calling host->set_error(NULL, ...) and returning NULL.
**
** Compatibility rules (see docs/plugins.md, "The rules"):
**   - a different ABI major is refused, naming both versions;
**   - an older minor or a smaller struct_size is accepted: members past struct_size count as
**     NULL ("unsupported");
**   - tables only ever grow at the end; members are never reordered or retyped within a major.
**     tests/unit/test_abi_layout.c pins the offset of every member;
**   - the same holds the other way: the host table grows too, so a plugin checks
**     host->struct_size (LAMP_HOST_HAS in host.h) before using a member added after ABI 1.0;
**   - hdr.devices is enforced from ABI 1.1: the core calls a plugin only on the devices it declares
**     (or with host memory, see docs/plugins.md, "Devices"). A plugin built against ABI 1.0 that
**     leaves it 0 counts as declaring the CPU; one built against 1.1 or later that leaves it 0
**     runs nowhere.
**
** ABI 1.1 added, at the ends of their structs: the device services of lamp_host (device_count ..
** synchronize) and lamp_optim_step.stream. No family table gained a member.
** ABI 1.2 added lamp_optim_step.weights_out and weights_out_dtype (the fused 16-bit weight
** refresh) and lamp_optim_v1.caps, which says whether the plugin writes them.
** ABI 1.3 added the communicator's bootstrap (lamp_bootstrap, create_with_bootstrap) and its
** stream-ordered collectives (all_reduce_enqueue, wait_stream, poll) at the end of lamp_comm_v1.
** ABI 1.4 added text options (lamp_text_param; text_params and n_text_params at the end of each
** family table, host->option_text), the optimizer's tensor table (lamp_optim_tensor,
** lamp_optim_step.tensors and n_tensors), host->gemm, and the precision policy flag
** LAMP_POLICY_STOCHASTIC_ROUNDING (precision.h).
*/
#ifndef LAMP_ABI_H
#define LAMP_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LAMP_ABI_MAJOR 1
#define LAMP_ABI_MINOR 4

/* 'L' 'A' 'M' 'P' read as a little-endian uint32. */
#define LAMP_PLUGIN_MAGIC 0x504d414cu

#if defined(__GNUC__)
#define LAMP_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define LAMP_PLUGIN_EXPORT
#endif

/* Stable status codes. The meaning of each is part of the ABI. */
typedef enum lamp_status {
  LAMP_OK = 0,
  LAMP_ERR_SYSTEM = 1,        /* the OS or hardware failed: I/O, out of memory, device error */
  LAMP_ERR_INTERNAL = 2,      /* a bug: the core or a plugin broke its own contract */
  LAMP_ERR_INVALID_ARG = 3,   /* a caller passed a bad value (shape, option, pointer) */
  LAMP_ERR_INVALID_USAGE = 4, /* the user's configuration is wrong (file, plugin, data) */
  LAMP_ERR_UNSUPPORTED = 5,   /* valid request this implementation cannot serve */
  LAMP_ERR_REMOTE = 6,        /* another rank failed or timed out */
  LAMP_ERR_NUMERIC = 7        /* NaN/inf where training cannot continue (e.g. minimum scale) */
} lamp_status;

typedef enum lamp_kind {
  LAMP_KIND_PRECISION = 1,
  LAMP_KIND_COMM = 2,
  LAMP_KIND_OPTIM = 3
} lamp_kind;

typedef enum lamp_dtype {
  LAMP_F32 = 0,
  LAMP_F16 = 1,
  LAMP_BF16 = 2,
  LAMP_I32 = 3,
  LAMP_U8 = 4,
  LAMP_DTYPE_COUNT
} lamp_dtype;

/* Helpers for core and plugins alike: static inline, so they add no symbol to the ABI. */

/* "f32", "f16", "bf16", "i32", "u8"; "?" for a value outside the enum. */
static inline const char *lamp_dtype_name(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32: return "f32";
  case LAMP_F16: return "f16";
  case LAMP_BF16: return "bf16";
  case LAMP_I32: return "i32";
  case LAMP_U8: return "u8";
  default: return "?";
  }
}

/* 1 for f32, f16 and bf16, the dtypes of floating-point tensors, kernels and policies; 0 for the
   others and for a value outside the enum (a policy's uint32_t field may be cast as it is). */
static inline int lamp_dtype_is_float(lamp_dtype dtype) {
  return dtype == LAMP_F32 || dtype == LAMP_F16 || dtype == LAMP_BF16;
}

typedef enum lamp_device {
  LAMP_CPU = 0,
  LAMP_CUDA = 1,
  LAMP_DEVICE_COUNT
} lamp_device;

/* Capability masks: bit (1u << LAMP_CPU), (1u << LAMP_F16) and so on. */
#define LAMP_BIT(x) (1u << (unsigned)(x))

typedef enum lamp_log_level {
  LAMP_LOG_ERROR = 0,
  LAMP_LOG_WARN = 1,
  LAMP_LOG_INFO = 2,
  LAMP_LOG_DEBUG = 3
} lamp_log_level;

/*
** A named numeric parameter a plugin accepts (hyper-parameter, scaler option, timeout).
** The core validates names and ranges from these declarations, so an unknown name is an
** error listing the valid ones, and plugins receive a plain double array in declaration
** order. Booleans are 0 or 1.
*/
typedef struct lamp_param {
  const char *name;
  double default_value;
  double min_value; /* inclusive */
  double max_value; /* inclusive */
  const char *help;
} lamp_param;

/*
** ABI 1.4. A named text option: a string, or an enum when `choices` is given. Declared at the end
** of the family table (text_params, n_text_params), validated by the core with the numeric ones
** (one namespace: a name is declared once, as a number or as text), and read by the plugin with
** host->option_text(ctx, name). Booleans stay numeric (0 or 1).
*/
typedef struct lamp_text_param {
  const char *name;
  const char *default_value;  /* never NULL; for an enum, one of its choices */
  const char *const *choices; /* NULL: any string; else the values it may take, NULL-terminated */
  const char *help;
} lamp_text_param;

/* Host-side context of one plugin object; the plugin passes it back to host->set_error. */
typedef struct lamp_ctx lamp_ctx;
struct lamp_host;

/*
** The common header: first member of every family table.
** `probe` is required and must be cheap (no device context, no network): it rates how well
** the plugin can run here, 0 meaning "cannot", and explains why in `reason`.
*/
typedef struct lamp_plugin {
  uint32_t magic;       /* LAMP_PLUGIN_MAGIC */
  uint32_t struct_size; /* sizeof the whole family table the plugin was built with */
  uint16_t abi_major;   /* LAMP_ABI_MAJOR the plugin was built against */
  uint16_t abi_minor;   /* LAMP_ABI_MINOR the plugin was built against */
  uint32_t kind;        /* lamp_kind */
  const char *name;     /* short name: "fp32", "single", "sgd" */
  const char *version;  /* the plugin's own version, "1.0" */
  const char *description;
  uint32_t devices;     /* LAMP_BIT(lamp_device) mask: the devices whose memory it accepts */
  uint32_t dtypes;      /* LAMP_BIT(lamp_dtype) mask */
  const lamp_param *params;
  uint32_t n_params;
  int (*probe)(const struct lamp_host *host, char *reason, size_t reason_size);
} lamp_plugin;

#define LAMP_PLUGIN_HEADER(kind_, table_type, name_, version_, description_)                   \
  .magic = LAMP_PLUGIN_MAGIC, .struct_size = sizeof(table_type), .abi_major = LAMP_ABI_MAJOR,   \
  .abi_minor = LAMP_ABI_MINOR, .kind = (kind_), .name = (name_), .version = (version_),        \
  .description = (description_)

/*
** Fills a caller-sized output struct (first member: uint32_t struct_size, set by the caller)
** from the plugin's full version of it, copying only what both sides know. This is how a
** plugin built against a newer minor answers an older core, and the reverse.
*/
static inline void lamp_struct_copy_out(void *out, const void *full, size_t full_size) {
  uint32_t caller_size;
  memcpy(&caller_size, out, sizeof caller_size);
  size_t n = caller_size < full_size ? caller_size : full_size;
  if (n > sizeof caller_size)
    memcpy((char *)out + sizeof caller_size, (const char *)full + sizeof caller_size, n - sizeof caller_size);
}

#define LAMP_ENTRY_SYMBOL "lamp_plugin_entry_v1"
typedef const lamp_plugin *(*lamp_plugin_entry_fn)(const struct lamp_host *host);

#ifdef __cplusplus
}
#endif
#endif
