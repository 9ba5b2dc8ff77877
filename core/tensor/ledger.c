#include "tensor/ledger.h"

#include <stdatomic.h>

/* Slot LAMP_MEM_TAG_COUNT holds the total; its peak is the peak of the sum, not a sum of peaks. */
static _Atomic size_t current_bytes[LAMP_MEM_TAG_COUNT + 1];
static _Atomic size_t peak_bytes[LAMP_MEM_TAG_COUNT + 1];

static void raise_peak(int slot, size_t now) {
  size_t seen = atomic_load(&peak_bytes[slot]);
  while (now > seen && !atomic_compare_exchange_weak(&peak_bytes[slot], &seen, now)) {
  }
}

void lamp_ledger_add(lamp_mem_tag tag, size_t bytes) {
  if ((unsigned)tag >= LAMP_MEM_TAG_COUNT) return;
  raise_peak(tag, atomic_fetch_add(&current_bytes[tag], bytes) + bytes);
  raise_peak(LAMP_MEM_TAG_COUNT, atomic_fetch_add(&current_bytes[LAMP_MEM_TAG_COUNT], bytes) + bytes);
}

void lamp_ledger_sub(lamp_mem_tag tag, size_t bytes) {
  if ((unsigned)tag >= LAMP_MEM_TAG_COUNT) return;
  atomic_fetch_sub(&current_bytes[tag], bytes);
  atomic_fetch_sub(&current_bytes[LAMP_MEM_TAG_COUNT], bytes);
}

lamp_ledger_entry lamp_ledger_get(lamp_mem_tag tag) {
  lamp_ledger_entry e = {0, 0};
  if ((unsigned)tag > LAMP_MEM_TAG_COUNT) return e;
  e.current = atomic_load(&current_bytes[tag]);
  e.peak = atomic_load(&peak_bytes[tag]);
  return e;
}

void lamp_ledger_reset_peaks(void) {
  for (int i = 0; i <= LAMP_MEM_TAG_COUNT; i++) atomic_store(&peak_bytes[i], atomic_load(&current_bytes[i]));
}

const char *lamp_mem_tag_name(lamp_mem_tag tag) {
  static const char *const names[LAMP_MEM_TAG_COUNT + 1] = {
      "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total"};
  if ((unsigned)tag > LAMP_MEM_TAG_COUNT) return "unknown";
  return names[tag];
}
