/*
** The backends, one per device, registered in one place. The CPU's is built in; another device's
** backend is registered once, before use: the simulated device's by the programs built for the
** tests, a module's (cuda) by load.c when the device is first asked about. Every question about a
** device goes through backend_of, which loads a module at most once, so a device's answer (its
** table or its kept failure) is the same everywhere. Registration also lends the backend's
** allocator to core/tensor, so tensors can live on the device.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/load.h"
#include "base/error.h"
#include "base/launcher.h"
#include "base/log.h"

static const lamp_backend *backends[LAMP_DEVICE_SLOTS] = {[LAMP_CPU] = &lamp_cpu_backend};
static int ordinals[LAMP_DEVICE_SLOTS];
static lamp_device run_device = LAMP_CPU;

_Static_assert(LAMP_DEVICE_COUNT <= LAMP_SIM, "the simulated device's slot must follow the ABI's devices");
_Static_assert(LAMP_SIM < LAMP_DEVICE_SLOTS, "LAMP_DEVICE_SLOTS must hold the simulated device");

lamp_status lamp_backend_register(lamp_device device, const lamp_backend *backend) {
  if ((unsigned)device >= LAMP_DEVICE_SLOTS || backend == NULL)
    return lamp_error(LAMP_ERR_INTERNAL, "backend: device %d cannot be registered", (int)device);
  if (backends[device] != NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "backend: device %s already has its backend (%s)",
                      lamp_device_name(device), backends[device]->memory.name);
  lamp_status st = lamp_device_memory_register(device, &backend->memory);
  if (st == LAMP_OK) backends[device] = backend;
  return st;
}

static int chose_for_rank[LAMP_DEVICE_SLOTS];

/*
** One process per GPU: under a launcher, a device kind with several devices starts at the one of
** this process's local rank (modulo their number, so that two ranks may share one GPU over a
** communicator that allows it; NCCL refuses that itself). "cuda:N" still chooses N.
*/
static void choose_for_local_rank(lamp_device device, const lamp_backend *b) {
  chose_for_rank[device] = 1;
  int rank = lamp_launcher_local_rank(), count = b->count != NULL ? b->count() : 0;
  if (rank <= 0 || count <= 1) return;
  int ordinal = rank % count;
  if (b->select != NULL && b->select(ordinal) != LAMP_OK) return; /* stays at 0; the refusal is recorded */
  ordinals[device] = ordinal;
  lamp_log(LAMP_LOG_DEBUG, "backend", "local rank %d uses %s:%d of %d", rank, lamp_device_name(device), ordinal, count);
}

/* The backend of `device` into *out, loading its module on the first ask; else why not (recorded:
   a module's kept failure, or the device has no backend in this build). */
static lamp_status find(lamp_device device, const lamp_backend **out) {
  *out = NULL;
  int slot = (unsigned)device < LAMP_DEVICE_SLOTS;
  if (slot && backends[device] != NULL) {
    *out = backends[device];
    return LAMP_OK;
  }
  if (slot && lamp_backend_is_module(device)) {
    lamp_status st = lamp_backend_load(device);
    if (st == LAMP_OK) *out = backends[device];
    if (st == LAMP_OK && !chose_for_rank[device]) choose_for_local_rank(device, *out);
    return st;
  }
  return lamp_error(LAMP_ERR_UNSUPPORTED, "device %s is not supported by this build", lamp_device_name(device));
}

static const lamp_backend *backend_of(lamp_device device) {
  const lamp_backend *b;
  find(device, &b);
  return b;
}

const lamp_backend *lamp_backend_get(lamp_device device, const char *op) {
  const lamp_backend *b = backend_of(device);
  if (b == NULL) lamp_error_context(LAMP_ERR_UNSUPPORTED, "%s", op);
  return b;
}

lamp_status lamp_device_check(lamp_device device) {
  const lamp_backend *b;
  return find(device, &b);
}

int lamp_device_has(lamp_device device, unsigned caps) {
  const lamp_backend *b = backend_of(device);
  if (b == NULL) return 0;
  unsigned have = b->caps | (b->caps_now != NULL ? b->caps_now() : 0u);
  return (have & caps) == caps;
}

int lamp_device_count(lamp_device device) {
  const lamp_backend *b = backend_of(device);
  return b != NULL && b->count != NULL ? b->count() : 0;
}

lamp_status lamp_device_parse(const char *name, lamp_device *out) {
  char known[128] = "";
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++) {
    if (d >= LAMP_DEVICE_COUNT && backends[d] == NULL) continue;
    const char *n = lamp_device_name((lamp_device)d);
    if (name != NULL && strcmp(name, n) == 0) {
      *out = (lamp_device)d;
      return LAMP_OK;
    }
    size_t used = strlen(known);
    snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", n);
  }
  return lamp_error(LAMP_ERR_INVALID_ARG, "device '%s' is not known (expected one of: %s)", name ? name : "(null)",
                    known);
}

int lamp_device_ordinal(lamp_device device) { return backend_of(device) != NULL ? ordinals[device] : -1; }

/* LAMP_OK when ordinal names one of the devices of b's kind. */
static lamp_status check_ordinal(lamp_device device, const lamp_backend *b, int ordinal) {
  int count = b->count != NULL ? b->count() : 0;
  if (ordinal >= 0 && ordinal < count) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "device %s:%d does not exist (this process sees %d %s device%s)",
                    lamp_device_name(device), ordinal, count, lamp_device_name(device), count == 1 ? "" : "s");
}

lamp_status lamp_device_select(lamp_device device, int ordinal) {
  const lamp_backend *b;
  lamp_status st = find(device, &b);
  if (st == LAMP_OK) st = check_ordinal(device, b, ordinal);
  if (st == LAMP_OK && b->select != NULL) st = b->select(ordinal); /* the backend may refuse too */
  if (st == LAMP_OK) ordinals[device] = ordinal;
  return st;
}

lamp_status lamp_device_describe(lamp_device device, int ordinal, lamp_device_info *out) {
  memset(out, 0, sizeof *out);
  const lamp_backend *b;
  lamp_status st = find(device, &b);
  if (st == LAMP_OK) st = check_ordinal(device, b, ordinal);
  if (st != LAMP_OK) return st;
  if (b->describe != NULL) return b->describe(ordinal, out);
  snprintf(out->name, sizeof out->name, "%s", b->memory.name);
  return LAMP_OK;
}

lamp_device lamp_run_device(void) { return run_device; }

lamp_status lamp_set_run_device(lamp_device device) {
  lamp_status st = lamp_device_check(device);
  if (st != LAMP_OK) return st;
  run_device = device;
  return LAMP_OK;
}

void lamp_backend_release_workspace(void) {
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++)
    if (backends[d] != NULL && backends[d]->release_workspace != NULL) backends[d]->release_workspace();
}
