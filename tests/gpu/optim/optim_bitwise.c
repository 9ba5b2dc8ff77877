/*
** The optimizer plugins' CUDA steps against their CPU steps, bit for bit (the GPU
** check's optimizer stage):
**
**     optim_bitwise PLUGIN_DIR              cuda vs cpu of PLUGIN_DIR/{sgd,adam,adamw}.so
**     optim_bitwise PLUGIN_DIR REF_DIR      cpu of PLUGIN_DIR vs cpu of REF_DIR (no GPU needed):
**                                           a change of the CPU step against a reference build
**
** Every optimizer runs several configurations (momentum, Nesterov, dampening, weight decay,
** AMSGrad) over a random slab of several segments with their own lr and decay multipliers, for
** several steps with a changing learning rate and loss scale, writing the 16-bit weights (fp16,
** bf16, none) in the same pass. After every step the parameters, every state slot and the
** 16-bit weights must be equal bit for bit. A reference plugin without weights_out (ABI < 1.2)
** is compared against the rounding of its parameters by the same conversion.
**
** Prints one line per optimizer, "optim_bitwise: sgd: ... bitwise equal" or the first
** difference. Exit status: 0 all equal, 1 a difference or a plugin error, 2 this machine cannot
** run the comparison (no CUDA device: the CUDA runtime's message is printed).
*/
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "lamp/plugin.h"

#include "optim_kernel.h" /* plugins/optim: the rounding the steps use */

#define N_ELEMENTS (((size_t)1 << 20) + 37) /* odd: every kernel's tail runs */
#define N_STEPS 5
#define MAX_SLOTS 3

/* ---- the host table -------------------------------------------------------------------------- */

struct lamp_ctx {
  char message[512];
};

static lamp_device run_device = LAMP_CPU;
static cudaStream_t stream;
static const volatile int no_abort = 0;

static void host_log(lamp_log_level level, const char *who, const char *fmt, ...) {
  (void)level;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "optim_bitwise: [%s] ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static lamp_status host_set_error(lamp_ctx *ctx, lamp_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (ctx != NULL) vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
  va_end(ap);
  return code;
}

static void *host_alloc(lamp_device device, lamp_mem_tag tag, size_t bytes) {
  (void)tag;
  return device == LAMP_CPU ? malloc(bytes) : NULL;
}

static int host_device_count(lamp_device device) {
  int n = 0;
  if (device != LAMP_CUDA || cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

static int host_device_ordinal(lamp_device device) {
  return host_device_count(device) > 0 ? 0 : -1;
}

static lamp_device host_run_device(void) { return run_device; }

static void *host_stream(lamp_device device) {
  return device == LAMP_CUDA ? (void *)stream : NULL;
}

static lamp_host host = {
    .struct_size = sizeof(lamp_host),
    .abi_major = LAMP_ABI_MAJOR,
    .abi_minor = LAMP_ABI_MINOR,
    .core_version = "optim_bitwise",
    .log = host_log,
    .set_error = host_set_error,
    .alloc = host_alloc,
    .free = free,
    .abort_flag = &no_abort,
    .device_count = host_device_count,
    .device_ordinal = host_device_ordinal,
    .run_device = host_run_device,
    .stream = host_stream,
};

/* ---- plugins --------------------------------------------------------------------------------- */

typedef struct plugin {
  const lamp_optim_v1 *t;
  lamp_ctx ctx;
  void *obj;
  double hparams[16];
  int writes_out; /* declares LAMP_OPTIM_CAP_WEIGHTS_OUT */
} plugin;

/* One configuration: options by name over the plugin's defaults. */
typedef struct option {
  const char *name;
  double value;
} option;

typedef struct config {
  const char *label;
  option opts[4];
  lamp_dtype out; /* LAMP_F32: no weights_out */
} config;

static int load(const char *dir, const char *name, const lamp_optim_v1 **out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.so", dir, name);
  void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    printf("optim_bitwise: %s: cannot load: %s\n", name, dlerror());
    return -1;
  }
  lamp_plugin_entry_fn entry = (lamp_plugin_entry_fn)(uintptr_t)dlsym(so, LAMP_ENTRY_SYMBOL);
  const lamp_plugin *hdr = entry != NULL ? entry(&host) : NULL;
  if (hdr == NULL || hdr->kind != LAMP_KIND_OPTIM) {
    printf("optim_bitwise: %s: not an optimizer plugin\n", path);
    return -1;
  }
  *out = (const lamp_optim_v1 *)hdr;
  return 0;
}

static int create(plugin *p, const lamp_optim_v1 *t, const config *c) {
  memset(p, 0, sizeof *p);
  p->t = t;
  for (uint32_t i = 0; i < t->hdr.n_params && i < 16; i++) {
    p->hparams[i] = t->hdr.params[i].default_value;
    for (size_t k = 0; k < 4 && c->opts[k].name != NULL; k++)
      if (strcmp(c->opts[k].name, t->hdr.params[i].name) == 0) p->hparams[i] = c->opts[k].value;
  }
  size_t caps_end = offsetof(lamp_optim_v1, caps) + sizeof t->caps;
  p->writes_out = t->hdr.struct_size >= caps_end && (t->caps & LAMP_OPTIM_CAP_WEIGHTS_OUT);
  if (t->create(&host, &p->ctx, p->hparams, &p->obj) == LAMP_OK) return 0;
  printf("optim_bitwise: %s %s: create failed: %s\n", t->hdr.name, c->label, p->ctx.message);
  return -1;
}

/* ---- slabs ----------------------------------------------------------------------------------- */

/* Where one side's buffers live; the host copies are what gets compared. */
typedef struct side {
  plugin p;
  lamp_device device;
  uint32_t n_slots;
  float *params, *grads, *slots[MAX_SLOTS];
  uint16_t *out;
  float *host_params, *host_slots[MAX_SLOTS];
  uint16_t *host_out;
} side;

static uint64_t rng_state;

static uint32_t rng_next(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* Mostly N(0,1)-sized values, with exact zeros, tiny and subnormal ones mixed in. */
static float rng_value(void) {
  uint32_t r = rng_next();
  float u = (float)(r >> 8) / 16777216.0f * 2.0f - 1.0f;
  switch (r & 31u) {
  case 0: return 0.0f;
  case 1: return u * 1e-39f;
  case 2: return u * 1e-6f;
  default: return u;
  }
}

static const lamp_optim_segment segment_shape[] = {
    {0, 300000, 1.0f, 1.0f},   {0, 1000, 1.0f, 0.0f},   {0, 7, 0.5f, 2.0f},
    {0, 500000, 1.0f, 1.0f},   {0, 3, 3.0f, 0.0f},      {0, 0, 0.25f, 1.0f},
};
#define N_SEGMENTS (sizeof segment_shape / sizeof segment_shape[0])

static void make_segments(lamp_optim_segment *seg, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < N_SEGMENTS; i++) {
    seg[i] = segment_shape[i];
    seg[i].offset = at;
    if (i + 1 == N_SEGMENTS) seg[i].count = n - at;
    at += seg[i].count;
  }
}

static int cuda_failed(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  printf("optim_bitwise: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

/* Buffers for one side, filled from the same initial values. */
static int side_alloc(side *s, size_t n, const float *init, uint32_t n_slots, lamp_dtype out) {
  s->n_slots = n_slots;
  size_t fb = n * sizeof(float), hb = n * sizeof(uint16_t);
  s->host_params = malloc(fb);
  s->host_out = malloc(hb);
  for (uint32_t k = 0; k < n_slots; k++) s->host_slots[k] = calloc(n, sizeof(float));
  if (s->device == LAMP_CPU) {
    s->params = s->host_params;
    s->grads = malloc(fb);
    for (uint32_t k = 0; k < n_slots; k++) s->slots[k] = s->host_slots[k];
    s->out = out != LAMP_F32 ? s->host_out : NULL;
    memcpy(s->params, init, fb);
    return 0;
  }
  if (cuda_failed(cudaMalloc((void **)&s->params, fb), "cudaMalloc params") ||
      cuda_failed(cudaMalloc((void **)&s->grads, fb), "cudaMalloc grads") ||
      cuda_failed(cudaMalloc((void **)&s->out, hb), "cudaMalloc weights_out") ||
      cuda_failed(cudaMemcpy(s->params, init, fb, cudaMemcpyHostToDevice), "cudaMemcpy params"))
    return -1;
  for (uint32_t k = 0; k < n_slots; k++)
    if (cuda_failed(cudaMalloc((void **)&s->slots[k], fb), "cudaMalloc slot") ||
        cuda_failed(cudaMemset(s->slots[k], 0, fb), "cudaMemset slot"))
      return -1;
  if (out == LAMP_F32) {
    cudaFree(s->out);
    s->out = NULL;
  }
  return 0;
}

static void side_free(side *s) {
  if (s->device == LAMP_CPU) {
    free(s->grads);
  } else {
    cudaFree(s->params);
    cudaFree(s->grads);
    cudaFree(s->out);
    for (uint32_t k = 0; k < s->n_slots; k++) cudaFree(s->slots[k]);
  }
  free(s->host_params);
  free(s->host_out);
  for (uint32_t k = 0; k < s->n_slots; k++) free(s->host_slots[k]);
  if (s->p.obj != NULL) s->p.t->destroy(s->p.obj);
  memset(s, 0, sizeof *s);
}

/* One step on one side with this step's gradients (host memory). */
static int side_step(side *s, const lamp_optim_step *proto, const float *grads, lamp_dtype out) {
  size_t n = proto->n;
  lamp_optim_step st = *proto;
  st.device = s->device;
  st.params = s->params;
  st.slots = s->slots;
  st.hparams = s->p.hparams;
  st.weights_out = s->p.writes_out ? s->out : NULL;
  st.weights_out_dtype = st.weights_out != NULL ? (uint32_t)out : 0;
  if (s->device == LAMP_CPU) {
    memcpy(s->grads, grads, n * sizeof(float));
  } else if (cuda_failed(cudaMemcpyAsync(s->grads, grads, n * sizeof(float),
                                         cudaMemcpyHostToDevice, stream),
                         "cudaMemcpyAsync grads")) {
    return -1;
  }
  st.grads = s->grads;
  st.stream = s->device == LAMP_CUDA ? (void *)stream : NULL;
  if (s->p.t->step(s->p.obj, &st) != LAMP_OK) {
    printf("optim_bitwise: %s: step %" PRIu64 " on %s failed: %s\n", s->p.t->hdr.name, st.step,
           s->device == LAMP_CUDA ? "cuda" : "cpu", s->p.ctx.message);
    return -1;
  }
  if (out != LAMP_F32 && st.weights_out == NULL) /* a reference without weights_out */
    lamp_optim_round_out(s->host_out, s->host_params, n, out == LAMP_BF16);
  if (s->device == LAMP_CPU) return 0;
  size_t fb = n * sizeof(float);
  if (cuda_failed(cudaStreamSynchronize(stream), "the CUDA step") ||
      cuda_failed(cudaMemcpy(s->host_params, s->params, fb, cudaMemcpyDeviceToHost), "copy back"))
    return -1;
  for (uint32_t k = 0; k < s->n_slots; k++)
    if (cuda_failed(cudaMemcpy(s->host_slots[k], s->slots[k], fb, cudaMemcpyDeviceToHost),
                    "copy back"))
      return -1;
  if (s->out != NULL && cuda_failed(cudaMemcpy(s->host_out, s->out, n * sizeof(uint16_t),
                                               cudaMemcpyDeviceToHost),
                                    "copy back"))
    return -1;
  return 0;
}

/* ---- comparing ------------------------------------------------------------------------------- */

static int differs(const char *who, const char *what, uint64_t step, const void *a,
                   const void *b, size_t n, size_t esize) {
  if (memcmp(a, b, n * esize) == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t x = 0, y = 0;
    memcpy(&x, (const char *)a + i * esize, esize);
    memcpy(&y, (const char *)b + i * esize, esize);
    if (x != y) {
      printf("optim_bitwise: %s: MISMATCH at step %" PRIu64 ", %s[%zu]: 0x%08" PRIx32
             " vs 0x%08" PRIx32 "\n",
             who, step, what, i, x, y);
      return 1;
    }
  }
  return 0;
}

static int compare(const char *who, uint64_t step, const side *a, const side *b, size_t n,
                   lamp_dtype out) {
  if (differs(who, "params", step, a->host_params, b->host_params, n, 4)) return 1;
  for (uint32_t k = 0; k < a->n_slots; k++) {
    char what[32];
    snprintf(what, sizeof what, "slot %u", (unsigned)k);
    if (differs(who, what, step, a->host_slots[k], b->host_slots[k], n, 4)) return 1;
  }
  return out != LAMP_F32 && differs(who, "weights_out", step, a->host_out, b->host_out, n, 2);
}

/* One configuration for N_STEPS steps on both sides: 0 equal, 1 different or failed. */
static int run_config(const lamp_optim_v1 *ta, lamp_device da, const lamp_optim_v1 *tb,
                      const config *c, float *init, float *grads) {
  char who[128];
  snprintf(who, sizeof who, "%s %s", ta->hdr.name, c->label);
  size_t n = N_ELEMENTS;
  lamp_optim_segment seg[N_SEGMENTS];
  make_segments(seg, n);
  side a = {.device = da}, b = {.device = LAMP_CPU};
  int bad = create(&a.p, ta, c) || create(&b.p, tb, c);
  uint32_t n_slots = 0;
  lamp_optim_slot decl[MAX_SLOTS + 5];
  if (!bad && (ta->slots(a.p.obj, decl, MAX_SLOTS, &n_slots) != LAMP_OK || n_slots > MAX_SLOTS)) {
    printf("optim_bitwise: %s: slots failed\n", who);
    bad = 1;
  }
  bad = bad || side_alloc(&a, n, init, n_slots, c->out) || side_alloc(&b, n, init, n_slots, c->out);
  for (uint64_t t = 1; !bad && t <= N_STEPS; t++) {
    for (size_t i = 0; i < n; i++) grads[i] = rng_value() * 64.0f;
    lamp_optim_step proto = {
        .struct_size = sizeof proto,
        .n = n,
        .segments = seg,
        .n_segments = N_SEGMENTS,
        .step = t,
        .lr = 0.01 / (double)t + 1e-4 * (double)t,
        .grad_scale = 1.0 / (64.0 * (double)(t % 3 + 1)),
    };
    bad = side_step(&a, &proto, grads, c->out) || side_step(&b, &proto, grads, c->out) ||
          compare(who, t, &a, &b, n, c->out);
  }
  side_free(&a);
  side_free(&b);
  return bad;
}

static const config sgd_configs[] = {
    {"plain", {{NULL, 0}}, LAMP_F32},
    {"momentum+wd", {{"momentum", 0.9}, {"weight_decay", 1e-2}}, LAMP_F16},
    {"nesterov+wd", {{"momentum", 0.9}, {"nesterov", 1}, {"weight_decay", 5e-4}}, LAMP_BF16},
    {"dampening", {{"momentum", 0.8}, {"dampening", 0.3}}, LAMP_F16},
};

static const config adam_configs[] = {
    {"default", {{NULL, 0}}, LAMP_BF16},
    {"wd", {{"weight_decay", 0.05}}, LAMP_F16},
    {"amsgrad+wd", {{"amsgrad", 1}, {"weight_decay", 0.01}, {"beta2", 0.99}}, LAMP_BF16},
    {"amsgrad", {{"amsgrad", 1}, {"eps", 1e-6}}, LAMP_F32},
};

static int run_optimizer(const char *name, const char *dir, const char *ref_dir) {
  const lamp_optim_v1 *ta, *tb;
  if (load(dir, name, &ta) != 0 || load(ref_dir != NULL ? ref_dir : dir, name, &tb) != 0) return 1;
  int is_sgd = strcmp(name, "sgd") == 0;
  const config *cs = is_sgd ? sgd_configs : adam_configs;
  size_t n_cs = is_sgd ? sizeof sgd_configs / sizeof *sgd_configs
                       : sizeof adam_configs / sizeof *adam_configs;
  float *init = malloc(N_ELEMENTS * sizeof *init), *grads = malloc(N_ELEMENTS * sizeof *grads);
  int bad = init == NULL || grads == NULL;
  for (size_t k = 0; !bad && k < n_cs; k++) {
    rng_state = 0x5eed0000u + k;
    for (size_t i = 0; i < N_ELEMENTS; i++) init[i] = rng_value();
    bad = run_config(ta, ref_dir != NULL ? LAMP_CPU : LAMP_CUDA, tb, &cs[k], init, grads);
  }
  if (!bad)
    printf("optim_bitwise: %s: %s vs cpu%s, %zu configurations x %d steps x %zu elements in %zu "
           "segments (fp16, bf16 and no weights_out): bitwise equal\n",
           name, ref_dir != NULL ? "cpu" : "cuda", ref_dir != NULL ? " of the reference" : "",
           n_cs, N_STEPS, (size_t)N_ELEMENTS, (size_t)N_SEGMENTS);
  free(init);
  free(grads);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: optim_bitwise PLUGIN_DIR [REF_PLUGIN_DIR]\n"
                    "  PLUGIN_DIR: build/plugins/optim; with REF_PLUGIN_DIR, compares the CPU steps "
                    "of both builds instead of cuda vs cpu\n");
    return 2;
  }
  const char *ref_dir = argc == 3 ? argv[2] : NULL;
  if (ref_dir == NULL) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      printf("optim_bitwise: no CUDA device: %s\n",
             e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
      return 2;
    }
    if (cuda_failed(cudaSetDevice(0), "cudaSetDevice(0)") ||
        cuda_failed(cudaStreamCreate(&stream), "cudaStreamCreate"))
      return 1;
    run_device = LAMP_CUDA;
  }
  int bad = 0;
  static const char *const names[] = {"sgd", "adam", "adamw"};
  for (size_t i = 0; i < 3; i++) bad |= run_optimizer(names[i], argv[1], ref_dir);
  return bad ? 1 : 0;
}
