/* Invalid (ABI 1.4): an enum whose default is not one of its choices. */
#include "fake_optim.h"

static const char *const signs[] = {"exact", "smooth", NULL};
static const lamp_text_param texts[] = {{"sign", "rough", signs, "how the sign is taken"}};

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "badtext", "0.1", "bad text option"),
            .devices = LAMP_BIT(LAMP_CPU),
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
