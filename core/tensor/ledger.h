/*
** The memory ledger: every tracked allocation carries a tag (params, grads, master weights,
** optimizer state, activations, workspace, data) and the ledger keeps current and peak bytes
** per tag and in total. This is the primer's memory account, measured rather than estimated.
*/
#ifndef LAMP_TENSOR_LEDGER_H
#define LAMP_TENSOR_LEDGER_H

#include <stddef.h>
#include "lamp/host.h"

typedef struct lamp_ledger_entry {
  size_t current;
  size_t peak;
} lamp_ledger_entry;

void lamp_ledger_add(lamp_mem_tag tag, size_t bytes);
void lamp_ledger_sub(lamp_mem_tag tag, size_t bytes);

/* Per tag; tag == LAMP_MEM_TAG_COUNT gives the total over all tags. */
lamp_ledger_entry lamp_ledger_get(lamp_mem_tag tag);

/* Sets every peak to its current value (start of a measured phase). */
void lamp_ledger_reset_peaks(void);

/* "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total". */
const char *lamp_mem_tag_name(lamp_mem_tag tag);

#endif
