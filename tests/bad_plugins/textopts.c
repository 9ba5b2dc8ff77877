/*
** Valid (ABI 1.4): an optimizer with text options besides a number: `sign`, an enum (exact,
** smooth), `tag`, any string, and `fail`, an enum whose "yes" makes create refuse with what it
** read through host->option_text, so a test sees the values the plugin was given.
*/
#include <stdio.h>

#define FAKE_CREATE textopts_create
#include "fake_optim.h"

static lamp_status textopts_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  *opt = 0;
  const char *fail = h->option_text(ctx, "fail");
  if (fail == NULL || fail[0] != 'y') return LAMP_OK;
  const char *as_text = h->option_text(ctx, "lr"); /* a number: not a text option */
  const char *unknown = h->option_text(ctx, "nosuch");
  return h->set_error(ctx, LAMP_ERR_INVALID_USAGE, "lr %g, sign '%s', tag '%s', lr as text %s, nosuch %s", p[0],
                      h->option_text(ctx, "sign"), h->option_text(ctx, "tag"), as_text ? as_text : "NULL",
                      unknown ? unknown : "NULL");
}

static const lamp_param params[] = {{"lr", 0.1, 0.0, 10.0, "learning rate"}};
static const char *const signs[] = {"exact", "smooth", NULL};
static const char *const yes_no[] = {"no", "yes", NULL};
static const lamp_text_param texts[] = {
    {"sign", "exact", signs, "how the sign is taken"},
    {"tag", "none", NULL, "a label"},
    {"fail", "no", yes_no, "yes: create refuses, saying what it read"},
};

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "textopts", "0.1", "text options"),
            .devices = LAMP_BIT(LAMP_CPU),
            .params = params,
            .n_params = 1,
            .probe = fake_probe},
    .create = textopts_create,
    .destroy = fake_destroy,
    .slots = fake_slots,
    .step = fake_step,
    .text_params = texts,
    .n_text_params = 3,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
