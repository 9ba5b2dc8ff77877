/* Valid: an older, smaller table is accepted (rule 2), so loading state says "oldsize: has no
** scaler state, ...". struct_size stops at stats, from before save/load_state existed: its
** save_state lies past struct_size, so the core must treat it as absent and never call it. */
#include "lamp/plugin.h"

static lamp_status save_state_never(void *state, void *buf, size_t *size) {
  (void)state, (void)buf;
  *size = 999; /* a test sees this if the core wrongly calls past struct_size */
  return LAMP_ERR_INTERNAL;
}

#define FAKE_NAME "oldsize"
#define FAKE_STRUCT_SIZE offsetof(lamp_precision_v1, save_state)
#define FAKE_SAVE_STATE save_state_never
#include "fake_precision.h"
