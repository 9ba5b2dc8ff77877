/*
** A working backend module for the cuda slot, without CUDA: two "devices" whose memory is host
** memory. It lets the tests load a module end to end on any machine (found through
** LAMP_BACKEND_DIR, checked, opened, its services checked, its table registered) and see what the
** core does with a loaded device: lamp.device("cuda:1"), `lamp devices`, the ledger.
** LAMP_FAKE_CUDA_FAIL=TEXT makes the entry refuse, as the real one does without a driver, with
** "cuda: TEXT".
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/module.h"

static const lamp_backend_services *svc;
static int chosen, used; /* the device chosen; whether memory was taken on it */

static void *fake_alloc(size_t bytes) {
  void *p = aligned_alloc(64, bytes < 64 ? 64 : (bytes + 63) / 64 * 64);
  if (p == NULL) svc->error(LAMP_ERR_SYSTEM, "cuda: out of fake device memory: %zu bytes", bytes);
  used = 1;
  return p;
}

static void fake_free(void *p) { free(p); }

static lamp_status fake_zero(void *p, size_t bytes) {
  memset(p, 0, bytes);
  return LAMP_OK;
}

static lamp_status fake_move(void *dst, const void *src, size_t bytes) {
  memmove(dst, src, bytes);
  return LAMP_OK;
}

static int fake_count(void) { return 2; }

static lamp_status fake_select(int ordinal) {
  if (used && ordinal != chosen)
    return svc->error(LAMP_ERR_INVALID_USAGE, "cuda: cannot switch to cuda:%d: cuda:%d is in use already", ordinal,
                      chosen);
  chosen = ordinal;
  return LAMP_OK;
}

static lamp_status fake_describe(int ordinal, lamp_device_info *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "Fake GPU %d", ordinal);
  out->memory = (size_t)(ordinal + 1) << 30;
  out->cc_major = 9;
  out->cc_minor = ordinal;
  return LAMP_OK;
}

static const lamp_backend table = {
    .memory = {"cuda", fake_alloc, fake_free, fake_zero},
    .count = fake_count,
    .upload = fake_move,
    .download = fake_move,
    .copy = fake_move,
    .select = fake_select,
    .describe = fake_describe,
};

__attribute__((visibility("default"))) lamp_status lamp_backend_module_open(const lamp_backend_services *s,
                                                                            const lamp_backend **out) {
  lamp_status st = lamp_backend_services_check(s, "cuda", LAMP_BACKEND_MODULE_VERSION, sizeof(lamp_backend));
  if (st != LAMP_OK) return st;
  svc = s;
  const char *fail = getenv("LAMP_FAKE_CUDA_FAIL");
  if (fail != NULL) return svc->error(LAMP_ERR_UNSUPPORTED, "cuda: %s", fail);
  *out = &table;
  return LAMP_OK;
}
