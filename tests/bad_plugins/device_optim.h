/*
** The optimizer behind the device fixtures (devcpu.c, devcuda.c, devboth.c, devnone.c), which
** differ only in hdr.devices. Define FAKE_NAME and FAKE_DEVICES, then include this file.
** One state slot, "visits". The step checks that it was handed the CPU and no stream (the core
** hands a CPU plugin a host-viewed device's memory that way), then computes
** params -= lr * grad_scale * grads and visits += 1, so a test sees every buffer was reached.
** One object at a time (the tests need no more).
*/
#ifndef DEVICE_OPTIM_H
#define DEVICE_OPTIM_H

#include "lamp/plugin.h"

static const lamp_host *dev_host;
static lamp_ctx *dev_ctx;

static lamp_status dev_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)p;
  dev_host = h;
  dev_ctx = ctx;
  *opt = 0;
  return LAMP_OK;
}

static lamp_status dev_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  *n = 1;
  if (max > 0) out[0] = (lamp_optim_slot){"visits", LAMP_F32};
  return LAMP_OK;
}

static lamp_status dev_step(void *opt, const lamp_optim_step *s) {
  (void)opt;
  if (s->device != LAMP_CPU)
    return dev_host->set_error(dev_ctx, LAMP_ERR_UNSUPPORTED, "step called on device %u",
                               (unsigned)s->device);
  if (s->struct_size >= offsetof(lamp_optim_step, stream) + sizeof s->stream && s->stream != NULL)
    return dev_host->set_error(dev_ctx, LAMP_ERR_INTERNAL, "a stream on the cpu");
  float rate = (float)(s->lr * s->grad_scale);
  for (size_t i = 0; i < s->n; i++) {
    s->params[i] -= rate * s->grads[i];
    s->slots[0][i] += 1.0f;
  }
  return LAMP_OK;
}

#define FAKE_CREATE dev_create
#define FAKE_SLOTS dev_slots
#define FAKE_STEP dev_step
#include "fake_optim.h"

#endif
