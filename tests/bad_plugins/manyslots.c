/* Too many state slots, refused at open: "manyslots: declares 9 state slots, this core allows
   at most 8". It writes no more than `max` declarations, as the ABI asks. */
#include "lamp/plugin.h"

static lamp_status nine_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  *n = 9;
  for (uint32_t i = 0; i < *n && i < max; i++) out[i] = (lamp_optim_slot){"s", LAMP_F32};
  return LAMP_OK;
}

#define FAKE_NAME "manyslots"
#define FAKE_SLOTS nine_slots
#include "fake_optim.h"
