/*
** Backend modules: a device's backend built as a shared object the core loads on the first use
** of that device (core/backend/load.c), so that neither the lamp executable nor lampcore links
** the device's libraries. A machine without them runs everything else unchanged, and the reason
** the device is missing (module not built, a library it needs not found, no driver, no device)
** is kept and reported whenever the device is asked for.
**
** This is not the plugin ABI: a module is built from the same tree as the core and is refused
** unless it was built against the same backend table (version and size below).
*/
#ifndef LAMP_BACKEND_MODULE_H
#define LAMP_BACKEND_MODULE_H

#include <stddef.h>

#include "backend/backend_impl.h"

/* Raised whenever lamp_backend (backend_impl.h) or the services below change shape or meaning. */
#define LAMP_BACKEND_MODULE_VERSION 4

/* What the core lends a module: its error and log functions (a module never prints, and its
   errors are the core's errors, read back with lamp_last_error). */
typedef struct lamp_backend_services {
  uint32_t struct_size;  /* sizeof(lamp_backend_services) */
  uint32_t version;      /* LAMP_BACKEND_MODULE_VERSION of the core */
  uint32_t backend_size; /* sizeof(lamp_backend) of the core */
  /* Records the error and returns code (lamp_error). */
  lamp_status (*error)(lamp_status code, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;
  /* The core's logger (lamp_log). */
  void (*log)(lamp_log_level level, const char *who, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;
  /* Charges to (add) or returns from (sub) the core's memory ledger what a module keeps for
     itself (scratch, pinned staging): what lamp_mem_alloc does for the blocks it hands out. */
  void (*ledger_add)(lamp_device device, lamp_mem_tag tag, size_t bytes);
  void (*ledger_sub)(lamp_device device, lamp_mem_tag tag, size_t bytes);
} lamp_backend_services;

/*
** The one symbol a module exports. It checks svc (version, sizes), initialises what it needs to
** answer count() (for CUDA: the runtime and the device count), and on success stores its table
** in *out. On failure it returns the status with the error set through svc->error, naming the
** cause in the device library's own words (e.g. "cuda: no CUDA driver: CUDA driver version is
** insufficient for CUDA runtime version (cudaErrorInsufficientDriver)").
*/
#define LAMP_BACKEND_MODULE_ENTRY "lamp_backend_module_open"
typedef lamp_status (*lamp_backend_module_open_fn)(const lamp_backend_services *svc, const lamp_backend **out);

/*
** What an entry checks first: LAMP_OK when the core's svc was built from the same interface as the
** module, whose own LAMP_BACKEND_MODULE_VERSION and sizeof(lamp_backend) are module_version and
** backend_size. Otherwise LAMP_ERR_INVALID_USAGE with "<device>: ..." naming both sides (no message
** when svc is too short to hold error(): the loader then says so itself). Inline, so each module
** carries the check it was built with.
*/
static inline lamp_status lamp_backend_services_check(const lamp_backend_services *svc, const char *device,
                                                      uint32_t module_version, uint32_t backend_size) {
  if (svc == NULL || svc->struct_size < offsetof(lamp_backend_services, error) + sizeof svc->error ||
      svc->error == NULL)
    return LAMP_ERR_INVALID_USAGE;
  if (svc->version != module_version || svc->backend_size != backend_size ||
      svc->struct_size != (uint32_t)sizeof *svc)
    return svc->error(LAMP_ERR_INVALID_USAGE,
                      "%s: the backend module was built for backend interface version %u (table %u bytes, "
                      "services %u bytes) but lamp has version %u (table %u bytes, services %u bytes); "
                      "rebuild lamp and its backend modules from one tree",
                      device, (unsigned)module_version, (unsigned)backend_size, (unsigned)sizeof *svc,
                      (unsigned)svc->version, (unsigned)svc->backend_size, (unsigned)svc->struct_size);
  return LAMP_OK;
}

#endif
