/*
** Muon as a lamp optimizer plugin (ABI 1.4), written against the public headers alone.
**
** Every weight matrix (a tensor of two or more dimensions, a convolution's filters read as
** out x (in kh kw)) takes Muon's step: Nesterov momentum, then the momentum's update replaced by
** the nearest semi-orthogonal matrix, approximated by Newton-Schulz iterations on the core's GEMM
** (host->gemm), scaled for the matrix's shape, with decoupled weight decay. Every other tensor
** (biases, norm parameters) takes AdamW's step with an lr of its own. The step needs the tensor
** table (lamp_optim_step.tensors) to tell them apart and to know each matrix's shape.
**
** Newton-Schulz (Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024):
** X = G / |G|_F, transposed so it has no more rows than columns; then ns_steps times
**     A = X X^T,  B = b A + c A A,  X = a X + B X,   (a, b, c) = (3.4445, -4.7750, 2.0315)
** which pushes every singular value of X towards 1 (into roughly [0.7, 1.2]) in few steps.
**
** State: three slots the core allocates, zeroes and checkpoints (a matrix uses the first, every
** other tensor the other two). The Newton-Schulz scratch is the plugin's own, from host->alloc,
** kept between steps. It runs on the CPU (and on any device the core reaches through the host
** view): the elementwise passes are plain loops.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lamp/plugin.h>

enum { LR, MOMENTUM, NESTEROV, WEIGHT_DECAY, NS_STEPS, ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, N_PARAMS };

static const lamp_param params[N_PARAMS] = {
    {"lr", 0.02, 0.0, 1e6, "Muon's learning rate, for the weight matrices (the schedule's base value)"},
    {"momentum", 0.95, 0.0, 0.9999, "momentum of the matrices' update"},
    {"nesterov", 1.0, 0.0, 1.0, "1: Nesterov momentum"},
    {"weight_decay", 0.01, 0.0, 100.0, "decoupled weight decay of both steps (times each one's lr)"},
    {"ns_steps", 5.0, 1.0, 20.0, "Newton-Schulz iterations"},
    {"adam_lr", 1e-3, 0.0, 1e6, "AdamW's learning rate, for every other tensor (scheduled as lr is)"},
    {"adam_beta1", 0.9, 0.0, 0.9999, "AdamW's first-moment decay"},
    {"adam_beta2", 0.999, 0.0, 0.99999, "AdamW's second-moment decay"},
    {"adam_eps", 1e-8, 0.0, 1.0, "AdamW's denominator term"},
};

static const char *const scales[] = {"shape", "rms", NULL};
static const lamp_text_param text_params[] = {
    {"scale", "shape", scales,
     "the orthogonalised update's scale: shape = max(1, rows/cols)^0.5 (Muon's), rms = 0.2 sqrt(max(rows, cols)) "
     "(AdamW's update size, so lr can be AdamW's)"},
};

enum { SLOT_MOMENTUM, SLOT_EXP_AVG, SLOT_EXP_AVG_SQ, N_SLOTS };

typedef struct muon {
  const lamp_host *host;
  lamp_ctx *ctx;
  double h[N_PARAMS];
  int rms_scale;
  /* Newton-Schulz scratch on the step's device: x, y (rows x cols), a, b (r x r, r the smaller
     side), sized for the largest matrix of the table. */
  float *x, *y, *a, *b;
  size_t xy_cap, ab_cap;
} muon;

static int probe(const lamp_host *host, char *reason, size_t size) {
  if (!LAMP_HOST_HAS(host, gemm)) {
    snprintf(reason, size, "needs host->gemm and the tensor table (ABI 1.4); this core has ABI %u.%u",
             (unsigned)host->abi_major, (unsigned)host->abi_minor);
    return 0;
  }
  snprintf(reason, size, "runs on the cpu");
  return 1;
}

static lamp_status create(const lamp_host *host, lamp_ctx *ctx, const double *h, void **out) {
  if (!LAMP_HOST_HAS(host, gemm))
    return host->set_error(ctx, LAMP_ERR_UNSUPPORTED, "needs host->gemm and the tensor table (ABI 1.4); this core has ABI %u.%u",
                           (unsigned)host->abi_major, (unsigned)host->abi_minor);
  if (h[NS_STEPS] != floor(h[NS_STEPS]))
    return host->set_error(ctx, LAMP_ERR_INVALID_ARG, "ns_steps must be a whole number, got %g", h[NS_STEPS]);
  muon *m = calloc(1, sizeof *m);
  if (m == NULL) return host->set_error(ctx, LAMP_ERR_SYSTEM, "out of memory");
  m->host = host;
  m->ctx = ctx;
  memcpy(m->h, h, sizeof m->h);
  m->rms_scale = strcmp(host->option_text(ctx, "scale"), "rms") == 0;
  *out = m;
  return LAMP_OK;
}

static void free_scratch(muon *m) {
  m->host->free(m->x);
  m->host->free(m->y);
  m->host->free(m->a);
  m->host->free(m->b);
  m->x = m->y = m->a = m->b = NULL;
  m->xy_cap = m->ab_cap = 0;
}

static void destroy(void *opt) {
  muon *m = opt;
  if (m == NULL) return;
  free_scratch(m);
  free(m);
}

static lamp_status slots(void *opt, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  (void)opt;
  static const char *const names[N_SLOTS] = {"momentum_buffer", "exp_avg", "exp_avg_sq"};
  for (uint32_t i = 0; i < N_SLOTS && i < max; i++) out[i] = (lamp_optim_slot){names[i], LAMP_F32};
  *n = N_SLOTS;
  return LAMP_OK;
}

/* ---- the matrices ------------------------------------------------------------------------------ */

/* A tensor Muon takes: rows = its first dimension, cols = the product of the others. */
static int as_matrix(const lamp_optim_tensor *t, size_t *rows, size_t *cols) {
  if (t->ndim < 2 || t->shape[0] <= 0 || t->count == 0) return 0;
  *rows = (size_t)t->shape[0];
  *cols = t->count / *rows;
  return 1;
}

/* Scratch for the largest matrix of the table, allocated once (the table is the same every step). */
static lamp_status reserve_scratch(muon *m, const lamp_optim_step *s) {
  size_t xy = 0, ab = 0, rows, cols;
  for (size_t i = 0; i < s->n_tensors; i++) {
    if (!as_matrix(&s->tensors[i], &rows, &cols)) continue;
    size_t r = rows < cols ? rows : cols;
    if (rows * cols > xy) xy = rows * cols;
    if (r * r > ab) ab = r * r;
  }
  if (xy <= m->xy_cap && ab <= m->ab_cap) return LAMP_OK;
  free_scratch(m);
  lamp_device d = (lamp_device)s->device;
  m->x = m->host->alloc(d, LAMP_MEM_WORKSPACE, xy * sizeof(float));
  m->y = m->host->alloc(d, LAMP_MEM_WORKSPACE, xy * sizeof(float));
  m->a = m->host->alloc(d, LAMP_MEM_WORKSPACE, ab * sizeof(float));
  m->b = m->host->alloc(d, LAMP_MEM_WORKSPACE, ab * sizeof(float));
  if (m->x == NULL || m->y == NULL || m->a == NULL || m->b == NULL) {
    free_scratch(m);
    return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "out of memory for the Newton-Schulz scratch (%zu floats)",
                              2 * (xy + ab));
  }
  m->xy_cap = xy;
  m->ab_cap = ab;
  return LAMP_OK;
}

/*
** X (r x c, r <= c, in m->x) becomes its orthogonalisation; returns the buffer holding it (the
** iterations alternate between x and y).
*/
static lamp_status newton_schulz(muon *m, lamp_device d, size_t r, size_t c, float **result) {
  const float qa = 3.4445f, qb = -4.7750f, qc = 2.0315f;
  const lamp_host *host = m->host;
  float *x = m->x, *y = m->y;
  double sumsq = 0.0;
  for (size_t i = 0; i < r * c; i++) sumsq += (double)x[i] * x[i];
  const float inv = (float)(1.0 / (sqrt(sumsq) + 1e-7));
  for (size_t i = 0; i < r * c; i++) x[i] *= inv;
  for (int it = 0; it < (int)m->h[NS_STEPS]; it++) {
    lamp_status st = host->gemm(d, 0, 1, r, r, c, 1.0f, x, c, x, c, 0.0f, m->a, r); /* A = X X^T */
    if (st != LAMP_OK) return host->set_error(m->ctx, st, "gemm X X^T (%zu x %zu) failed", r, c);
    memcpy(m->b, m->a, r * r * sizeof(float));
    st = host->gemm(d, 0, 0, r, r, r, qc, m->a, r, m->a, r, qb, m->b, r); /* B = c A A + b A */
    if (st != LAMP_OK) return host->set_error(m->ctx, st, "gemm A A (%zu x %zu) failed", r, r);
    memcpy(y, x, r * c * sizeof(float));
    st = host->gemm(d, 0, 0, r, c, r, 1.0f, m->b, r, x, c, qa, y, c); /* X' = B X + a X */
    if (st != LAMP_OK) return host->set_error(m->ctx, st, "gemm B X (%zu x %zu) failed", r, c);
    float *t = x;
    x = y;
    y = t;
  }
  *result = x;
  return LAMP_OK;
}

/* Muon's step on one matrix (rows x cols at p, g, buf). */
static lamp_status muon_update(muon *m, const lamp_optim_step *s, size_t rows, size_t cols, float *p, const float *g,
                               float *buf, double lr, double wd) {
  const float beta = (float)m->h[MOMENTUM], scale = (float)s->grad_scale;
  const int nesterov = m->h[NESTEROV] != 0.0, transposed = rows > cols;
  const size_t r = transposed ? cols : rows, c = transposed ? rows : cols;
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      size_t k = i * cols + j;
      float gk = g[k] * scale;
      buf[k] = beta * buf[k] + gk;
      m->x[transposed ? j * c + i : k] = nesterov ? gk + beta * buf[k] : buf[k];
    }
  float *o = NULL;
  lamp_status st = newton_schulz(m, (lamp_device)s->device, r, c, &o);
  if (st != LAMP_OK) return st;
  double shape_scale = m->rms_scale ? 0.2 * sqrt((double)(rows > cols ? rows : cols))
                                    : sqrt(rows > cols ? (double)rows / (double)cols : 1.0);
  const float step = (float)(lr * shape_scale), keep = (float)(1.0 - lr * wd);
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++) {
      size_t k = i * cols + j;
      p[k] = p[k] * keep - step * o[transposed ? j * c + i : k];
    }
  return LAMP_OK;
}

/* ---- everything else: AdamW ------------------------------------------------------------------- */

static void adamw_update(const muon *m, const lamp_optim_step *s, size_t n, float *p, const float *g, float *exp_avg,
                         float *exp_avg_sq, double lr, double wd) {
  const double b1 = m->h[ADAM_BETA1], b2 = m->h[ADAM_BETA2];
  const double bc1 = 1.0 - pow(b1, (double)s->step), bc2 = 1.0 - pow(b2, (double)s->step);
  const float fb1 = (float)b1, fb2 = (float)b2, scale = (float)s->grad_scale;
  const float step_size = (float)(lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)), eps = (float)m->h[ADAM_EPS];
  const float keep = (float)(1.0 - lr * wd);
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * scale;
    exp_avg[i] = fb1 * exp_avg[i] + (1.0f - fb1) * gi;
    exp_avg_sq[i] = fb2 * exp_avg_sq[i] + (1.0f - fb2) * gi * gi;
    float denom = sqrtf(exp_avg_sq[i]) * inv_sqrt_bc2 + eps;
    p[i] = p[i] * keep - step_size * exp_avg[i] / denom;
  }
}

/* ---- the step ---------------------------------------------------------------------------------- */

static lamp_status step(void *opt, const lamp_optim_step *s) {
  muon *m = opt;
  if (!LAMP_OPTIM_STEP_HAS(s, tensors) || (s->n > 0 && s->n_tensors == 0))
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "needs the tensor table to find the weight matrices; this step has none (a core before "
                              "ABI 1.4, or a step without a model)");
  lamp_status st = reserve_scratch(m, s);
  if (st != LAMP_OK) return st;
  /* The schedule scales lr; AdamW's lr follows it by the same factor. */
  const double factor = m->h[LR] > 0.0 ? s->lr / m->h[LR] : 0.0;
  for (size_t i = 0; i < s->n_tensors && st == LAMP_OK; i++) {
    const lamp_optim_tensor *t = &s->tensors[i];
    const lamp_optim_segment *seg = &s->segments[t->segment];
    const double wd = m->h[WEIGHT_DECAY] * seg->decay_mult;
    float *p = s->params + t->offset;
    const float *g = s->grads + t->offset;
    size_t rows, cols;
    if (as_matrix(t, &rows, &cols))
      st = muon_update(m, s, rows, cols, p, g, s->slots[SLOT_MOMENTUM] + t->offset, s->lr * seg->lr_mult, wd);
    else
      adamw_update(m, s, t->count, p, g, s->slots[SLOT_EXP_AVG] + t->offset, s->slots[SLOT_EXP_AVG_SQ] + t->offset,
                   m->h[ADAM_LR] * factor * seg->lr_mult, wd);
  }
  return st;
}

static const lamp_optim_v1 table = {
    .hdr = {LAMP_PLUGIN_HEADER(LAMP_KIND_OPTIM, lamp_optim_v1, "muon", "0.1",
                               "Muon (Newton-Schulz orthogonalised momentum) for weight matrices, AdamW for the rest"),
            .devices = LAMP_BIT(LAMP_CPU),
            .dtypes = LAMP_BIT(LAMP_F32),
            .params = params,
            .n_params = N_PARAMS,
            .probe = probe},
    .create = create,
    .destroy = destroy,
    .slots = slots,
    .step = step,
    .text_params = text_params,
    .n_text_params = 1,
};

LAMP_PLUGIN_EXPORT const lamp_plugin *lamp_plugin_entry_v1(const lamp_host *host) {
  (void)host;
  return &table.hdr;
}
