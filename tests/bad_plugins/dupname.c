/* Invalid (ABI 1.4): a text option named as a numeric one (they share one namespace). */
#include "fake_optim.h"

static const lamp_param params[] = {{"lr", 0.1, 0.0, 10.0, "learning rate"}};
static const lamp_text_param texts[] = {{"lr", "fast", NULL, "a text lr"}};

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "dupname", "0.1", "a name declared twice"),
            .devices = LAMP_BIT(LAMP_CPU),
            .params = params,
            .n_params = 1,
            .probe = fake_probe},
    .create = fake_create,
    .destroy = fake_destroy,
    .slots = fake_slots,
    .step = fake_step,
    .text_params = texts,
    .n_text_params = 1,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
