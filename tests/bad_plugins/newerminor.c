/* Valid: a newer minor is accepted (rule 2). Built against a future ABI 1.7 whose table grew
** two members; the core uses only the members it knows. */
#include "fake_optim.h"

typedef struct optim_v1_7 {
  lamp_optim_v1 v1;
  void (*added_in_1_5)(void);
  void (*added_in_1_7)(void);
} optim_v1_7;

static const optim_v1_7 table = {
    .v1 = {.hdr = {.magic = LAMP_PLUGIN_MAGIC,
                   .struct_size = sizeof(optim_v1_7),
                   .abi_major = LAMP_ABI_MAJOR,
                   .abi_minor = 7,
                   .kind = LAMP_KIND_OPTIM,
                   .name = "newerminor",
                   .version = "0.1",
                   .probe = fake_probe},
           .create = fake_create,
           .destroy = fake_destroy,
           .slots = fake_slots,
           .step = fake_step},
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.v1.hdr;
}
