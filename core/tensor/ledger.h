/*
** The memory ledger: every tracked allocation carries a device and a tag (params, grads, master
** weights, optimizer state, activations, workspace, data), and the ledger keeps current and peak
** bytes per device and tag, and per device in total. This is the memory account of a training
** run (params + grads + optimizer state + activations), measured rather than estimated.
*/
#ifndef LAMP_TENSOR_LEDGER_H
#define LAMP_TENSOR_LEDGER_H

#include <stddef.h>
#include "lamp/host.h"
#include "tensor/memory.h"

typedef struct lamp_ledger_entry {
  size_t current;
  size_t peak;
} lamp_ledger_entry;

void lamp_ledger_add(lamp_device device, lamp_mem_tag tag, size_t bytes);
void lamp_ledger_sub(lamp_device device, lamp_mem_tag tag, size_t bytes);

/* Per device and tag; tag == LAMP_MEM_TAG_COUNT gives the device's total over all tags. */
lamp_ledger_entry lamp_ledger_get(lamp_device device, lamp_mem_tag tag);

/* How many times memory of `device` was charged or returned so far (every add and sub): unchanged
   between two readings, no block of that device was allocated or freed in between, so memory
   recorded into a graph (backend.h) is still where it was. */
uint64_t lamp_ledger_changes(lamp_device device);

/* Sets every peak, on every device, to its current value (start of a measured phase). */
void lamp_ledger_reset_peaks(void);

/* "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total". */
const char *lamp_mem_tag_name(lamp_mem_tag tag);

#endif
