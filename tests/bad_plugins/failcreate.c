/* Init failed, through set_error in create: "failcreate: cannot create: lr is 0.5". */
#include "lamp/plugin.h"

static lamp_status create_fails(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  *opt = 0;
  return h->set_error(ctx, LAMP_ERR_INVALID_USAGE, "cannot create: lr is %g", p[0]);
}

static const lamp_param params[] = {{"lr", 0.5, 0.0, 1.0, "unused"}};

#define FAKE_NAME "failcreate"
#define FAKE_CREATE create_fails
#define FAKE_PARAMS params
#include "fake_optim.h"
