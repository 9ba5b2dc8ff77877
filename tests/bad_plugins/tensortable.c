/*
** Valid (ABI 1.4): an optimizer that reports what it was handed. Its step fails with the tensor
** table as it saw it, each tensor's segment options, and whether host->gemm, run on the step's
** device over the first 2-D tensor's parameters, gave trace(W W^T) = the sum of W's squares; a
** test compares the message.
*/
#include <stdio.h>
#include <string.h>

#include "lamp/plugin.h"

static const lamp_host *host;

static int probe(const lamp_host *h, char *reason, size_t size) {
  (void)h;
  if (size > 0) reason[0] = '\0';
  return 1;
}

typedef struct table_optim {
  lamp_ctx *ctx;
} table_optim;

static table_optim the_optim;

static lamp_status create(const lamp_host *h, lamp_ctx *ctx, const double *p, void **opt) {
  (void)p;
  host = h;
  the_optim.ctx = ctx;
  *opt = &the_optim;
  return LAMP_OK;
}

static void destroy(void *opt) { (void)opt; }

static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt, (void)out, (void)max;
  *n = 0;
  return LAMP_OK;
}

static void describe(const lamp_optim_step *s, const lamp_optim_tensor *t, char *out, size_t size) {
  size_t used = strlen(out);
  used += (size_t)snprintf(out + used, size - used, "%s%s ", used ? "; " : "", t->name);
  for (uint32_t d = 0; d < t->ndim && used < size; d++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
  const lamp_optim_segment *seg = &s->segments[t->segment];
  if (used < size)
    snprintf(out + used, size - used, " at %zu+%zu segment %zu (lr %g, decay %g)", t->offset, t->count,
             t->segment, seg->lr_mult, seg->decay_mult);
}

/* host->gemm on the step's device: W W^T into the host's memory on that device. */
static const char *gemm_check(const lamp_optim_step *s, const lamp_optim_tensor *t) {
  size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
  float *c = host->alloc((lamp_device)s->device, LAMP_MEM_WORKSPACE, rows * rows * sizeof *c);
  float *back = host->alloc(LAMP_CPU, LAMP_MEM_WORKSPACE, rows * rows * sizeof *back);
  const float *w = s->params + t->offset;
  const char *verdict = "gemm failed";
  if (c != NULL && back != NULL &&
      host->gemm((lamp_device)s->device, 0, 1, rows, rows, cols, 1.0f, w, cols, w, cols, 0.0f, c, rows) == LAMP_OK &&
      host->copy(back, LAMP_CPU, c, (lamp_device)s->device, rows * rows * sizeof *c) == LAMP_OK) {
    double trace = 0.0, squares = 0.0;
    float host_w[4096];
    size_t n = rows * cols < 4096 ? rows * cols : 4096;
    host->copy(host_w, LAMP_CPU, w, (lamp_device)s->device, n * sizeof *host_w);
    for (size_t i = 0; i < rows; i++) trace += back[i * rows + i];
    for (size_t i = 0; i < n; i++) squares += (double)host_w[i] * host_w[i];
    verdict = trace > 0.0 && (trace - squares) * (trace - squares) < 1e-8 * squares * squares
                  ? "gemm trace(W W^T) matches"
                  : "gemm trace(W W^T) differs";
  }
  host->free(c);
  host->free(back);
  return verdict;
}

static lamp_status step(void *opt, const lamp_optim_step *s) {
  table_optim *o = opt;
  char text[1536] = "";
  const char *gemm = "no 2-D tensor";
  if (!LAMP_OPTIM_STEP_HAS(s, tensors)) return host->set_error(o->ctx, LAMP_ERR_INTERNAL, "no tensor table");
  for (size_t i = 0; i < s->n_tensors; i++) describe(s, &s->tensors[i], text, sizeof text);
  for (size_t i = 0; i < s->n_tensors; i++)
    if (s->tensors[i].ndim == 2) {
      gemm = gemm_check(s, &s->tensors[i]);
      break;
    }
  return host->set_error(o->ctx, LAMP_ERR_INVALID_USAGE, "step %llu on %s saw %zu tensors over %zu elements: %s; %s",
                         (unsigned long long)s->step, s->device == LAMP_CPU ? "cpu" : "another device", s->n_tensors,
                         s->n, text, gemm);
}

static const lamp_param params[] = {{"lr", 0.1, 0.0, 10.0, "learning rate"}};

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "tensortable", "0.1", "reports its tensor table"),
            .devices = LAMP_BIT(LAMP_CPU),
            .params = params,
            .n_params = 1,
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .slots = slots,
    .step = step,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *h) {
  (void)h;
  return &table.hdr;
}
