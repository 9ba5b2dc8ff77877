/*
** A well-formed optimizer built against a future ABI 1.7 whose table grew two members. The core
** accepts it and uses only the members it knows.
*/
#include "lamp/plugin.h"

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}
static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)h, (void)ctx, (void)p;
  *opt = 0;
  return LAMP_OK;
}
static void destroy(void *opt) { (void)opt; }
static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0;
  return LAMP_OK;
}
static lamp_status step(void *opt, const lamp_optim_step *s) {
  (void)opt, (void)s;
  return LAMP_OK;
}

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
                   .probe = probe},
           .create = create,
           .destroy = destroy,
           .slots = slots,
           .step = step},
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.v1.hdr;
}
