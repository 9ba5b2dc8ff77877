/* A 16-bit state slot, refused at open: "f16slot: state slot 'm' has dtype f16; this core
   allocates f32 slots only". */
#include "lamp/plugin.h"

static lamp_status f16_slot(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  static const lamp_optim_slot decls[] = {{"v", LAMP_F32}, {"m", LAMP_F16}};
  *n = 2;
  for (uint32_t i = 0; i < *n && i < max; i++) out[i] = decls[i];
  return LAMP_OK;
}

#define FAKE_NAME "f16slot"
#define FAKE_SLOTS f16_slot
#include "fake_optim.h"
