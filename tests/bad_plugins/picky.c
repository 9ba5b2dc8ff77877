/* A precision plugin whose load_state refuses every state its own save_state wrote: a resume
   must find that out before it changes anything (test_trainer_checkpoint). */
#define STATEFUL_NAME "picky"
#define STATEFUL_LOAD picky_load

#include "lamp/plugin.h"

static lamp_status picky_load(void *state, const void *buf, size_t size);

#include "stateful_precision.h"

static lamp_status picky_load(void *state, const void *buf, size_t size) {
  (void)buf;
  stateful *s = state;
  return s->host->set_error(s->ctx, LAMP_ERR_INVALID_USAGE, "refusing a saved state of %zu bytes (this fixture refuses every one)",
                            size);
}
