#include "tensor/ledger.h"

#include <stdatomic.h>
#include <stdint.h>

#include "tensor/memory.h"

/* Per device, slot LAMP_MEM_TAG_COUNT holds the total; its peak is the peak of the sum, not a sum
   of peaks. */
#define SLOTS (LAMP_MEM_TAG_COUNT + 1)
static _Atomic size_t current_bytes[LAMP_DEVICE_SLOTS][SLOTS];
static _Atomic size_t peak_bytes[LAMP_DEVICE_SLOTS][SLOTS];
static _Atomic uint64_t changes[LAMP_DEVICE_SLOTS];

static int valid(lamp_device device, lamp_mem_tag tag, int total_allowed) {
  return (unsigned)device < LAMP_DEVICE_SLOTS && (unsigned)tag < (unsigned)(LAMP_MEM_TAG_COUNT + total_allowed);
}

static void raise_peak(_Atomic size_t *peak, size_t now) {
  size_t seen = atomic_load(peak);
  while (now > seen && !atomic_compare_exchange_weak(peak, &seen, now)) {
  }
}

void lamp_ledger_add(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  if (!valid(device, tag, 0)) return;
  atomic_fetch_add(&changes[device], 1);
  _Atomic size_t *cur = current_bytes[device], *peak = peak_bytes[device];
  raise_peak(&peak[tag], atomic_fetch_add(&cur[tag], bytes) + bytes);
  raise_peak(&peak[LAMP_MEM_TAG_COUNT], atomic_fetch_add(&cur[LAMP_MEM_TAG_COUNT], bytes) + bytes);
}

void lamp_ledger_sub(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  if (!valid(device, tag, 0)) return;
  atomic_fetch_add(&changes[device], 1);
  atomic_fetch_sub(&current_bytes[device][tag], bytes);
  atomic_fetch_sub(&current_bytes[device][LAMP_MEM_TAG_COUNT], bytes);
}

uint64_t lamp_ledger_changes(lamp_device device) {
  return (unsigned)device < LAMP_DEVICE_SLOTS ? atomic_load(&changes[device]) : 0;
}

lamp_ledger_entry lamp_ledger_get(lamp_device device, lamp_mem_tag tag) {
  lamp_ledger_entry e = {0, 0};
  if (!valid(device, tag, 1)) return e;
  e.current = atomic_load(&current_bytes[device][tag]);
  e.peak = atomic_load(&peak_bytes[device][tag]);
  return e;
}

void lamp_ledger_reset_peaks(void) {
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++)
    for (int i = 0; i < SLOTS; i++) atomic_store(&peak_bytes[d][i], atomic_load(&current_bytes[d][i]));
}

const char *lamp_mem_tag_name(lamp_mem_tag tag) {
  static const char *const names[SLOTS] = {"params",      "grads",     "master", "optim_state",
                                           "activations", "workspace", "data",   "total"};
  if ((unsigned)tag > LAMP_MEM_TAG_COUNT) return "unknown";
  return names[tag];
}
