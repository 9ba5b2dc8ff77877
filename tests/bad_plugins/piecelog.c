/*
** A piecewise optimizer (LAMP_OPTIM_CAP_PIECEWISE) that writes down how it was called instead
** of updating anything, for test_optim_pieces: element j of the step it was given gets
**   params[j]      the number of elements of that step,
**   slot 'at'[j]   j, its index inside that step,
**   weights_out[j] the index of its segment inside that step, plus 100 times the segment's lr_mult,
**                  plus 1000 when the step came with a tensor table.
** A negative lr fails the step with a message, on every piece.
*/
#include "lamp/plugin.h"

static const lamp_host *host;
static lamp_ctx *context;

static lamp_status piecelog_create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)p;
  host = h;
  context = ctx;
  *opt = 0;
  return LAMP_OK;
}

static lamp_status piecelog_slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  if (max > 0) out[0] = (lamp_optim_slot){"at", LAMP_F32};
  *n = 1;
  return LAMP_OK;
}

static lamp_status piecelog_step(void *opt, const lamp_optim_step *s) {
  (void)opt;
  if (s->lr < 0) return host->set_error(context, LAMP_ERR_INVALID_ARG, "lr %g is negative", s->lr);
  const size_t table = s->tensors != NULL ? 1000 : 0;
  uint16_t *out = s->weights_out;
  for (size_t k = 0; k < s->n_segments; k++) {
    const lamp_optim_segment *seg = &s->segments[k];
    for (size_t j = seg->offset; j < seg->offset + seg->count; j++) {
      s->params[j] = (float)s->n;
      s->slots[0][j] = (float)j;
      if (out != NULL) out[j] = (uint16_t)(k + 100 * (size_t)seg->lr_mult + table);
    }
  }
  return LAMP_OK;
}

#define FAKE_NAME "piecelog"
#define FAKE_CREATE piecelog_create
#define FAKE_SLOTS piecelog_slots
#define FAKE_STEP piecelog_step
#define FAKE_DEVICES LAMP_BIT(LAMP_CPU)
#define FAKE_CAPS (LAMP_OPTIM_CAP_PIECEWISE | LAMP_OPTIM_CAP_WEIGHTS_OUT)
#include "fake_optim.h"
