/* A precision plugin whose save_state writes its 16 bytes but reports 4096: the core must not
   read past the buffer it gave (test_trainer_checkpoint). */
#define STATEFUL_NAME "overreport"
#define STATEFUL_SAVE overreport_save

#include "lamp/plugin.h"

static lamp_status overreport_save(void *state, void *buf, size_t *size);

#include "stateful_precision.h"

static lamp_status overreport_save(void *state, void *buf, size_t *size) {
  lamp_status st = stateful_save(state, buf, size);
  if (st == LAMP_OK && buf != NULL) *size = 4096;
  return st;
}
