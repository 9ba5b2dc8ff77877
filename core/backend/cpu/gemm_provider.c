/*
** The CPU's GEMM providers (see gemm_provider.h). OpenBLAS is linked; oneDNN (libdnnl.so.2, its
** dnnl_sgemm and dnnl_gemm_bf16bf16f32, row-major) and BLIS (libblis.so.4, its bli_sgemm) are opened
** on demand, so lamp builds and runs without them.
**
** Threads: OpenBLAS runs its own (their count is OpenBLAS's). oneDNN and BLIS are held to the
** calling thread: oneDNN's OpenMP count is per thread, so each thread sets it to 1 before its
** first call; BLIS's is process-wide, set to 1 when it is loaded. lamp_gemm_run (gemm_run.c)
** spreads their products over the pool.
*/
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_provider.h"
#include "base/cpu.h"

static const char *const names[LAMP_GEMM_PROVIDERS] = {"openblas", "dnnl", "blis"};

const char *lamp_gemm_provider_name(int index) {
  return index >= 0 && index < LAMP_GEMM_PROVIDERS ? names[index] : NULL;
}

/* ---- OpenBLAS (linked) ------------------------------------------------------------------- */

static void openblas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                           const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

/* ---- oneDNN (dlopen) ----------------------------------------------------------------------- */

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *, int64_t, const uint16_t *,
                            int64_t, float, float *, int64_t);
typedef void (*omp_set_fn)(int);

static struct {
  dnnl_sgemm_fn sgemm;
  dnnl_bf16_fn bf16;
  omp_set_fn set_threads; /* libgomp's omp_set_num_threads, which libdnnl links */
} dnnl;

static _Thread_local int dnnl_single; /* this thread's OpenMP count is set to 1 */

static void dnnl_on_this_thread(void) {
  if (dnnl_single) return;
  dnnl.set_threads(1);
  dnnl_single = 1;
}

/* dnnl's status can only say "invalid arguments", which the caller's checks have ruled out. */
static void dnnl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc) {
  dnnl_on_this_thread();
  (void)dnnl.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void dnnl_gemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                           const uint16_t *b, int ldb, float beta, float *c, int ldc) {
  dnnl_on_this_thread();
  (void)dnnl.bf16(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- BLIS (dlopen) ------------------------------------------------------------------------- */

/* Its typed API, bli_sgemm: every matrix by a row and a column stride (BLIS's dim_t and inc_t are
   64-bit on x86-64), so a transposed operand is the same memory with its strides swapped and no
   BLAS name is involved (OpenBLAS's sgemm_ would win a lookup by name). */
typedef void (*bli_sgemm_fn)(int, int, int64_t, int64_t, int64_t, const float *, const float *, int64_t, int64_t,
                             const float *, int64_t, int64_t, const float *, float *, int64_t, int64_t);
typedef void (*bli_threads_fn)(int64_t);

static bli_sgemm_fn bli_sgemm;

static void blis_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc) {
  int64_t rsa = trans_a ? 1 : lda, csa = trans_a ? lda : 1;
  int64_t rsb = trans_b ? 1 : ldb, csb = trans_b ? ldb : 1;
  bli_sgemm(0, 0, m, n, k, &alpha, a, rsa, csa, b, rsb, csb, &beta, c, ldc, 1); /* 0: BLIS_NO_TRANSPOSE */
}

/* ---- loading ----------------------------------------------------------------------------- */

typedef struct slot {
  pthread_once_t once;
  lamp_gemm_provider provider;
  lamp_status status;
  char message[512];
} slot;

static slot slots[LAMP_GEMM_PROVIDERS] = {{PTHREAD_ONCE_INIT}, {PTHREAD_ONCE_INIT}, {PTHREAD_ONCE_INIT}};

static void refuse(slot *s, const char *why) {
  s->status = LAMP_ERR_UNSUPPORTED;
  snprintf(s->message, sizeof s->message, "gemm: provider '%s' is not available: %s", s->provider.name, why);
}

/* dlopen's handle of `library`, or NULL with the slot refused. */
static void *open_library(slot *s, const char *library) {
  void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) refuse(s, dlerror());
  s->provider.library = library;
  return h;
}

static void *symbol(slot *s, void *h, const char *name) {
  void *f = s->status == LAMP_OK ? dlsym(h, name) : NULL;
  if (f == NULL && s->status == LAMP_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s has no symbol %s", s->provider.library, name);
    refuse(s, why);
  }
  return f;
}

static void load_openblas(void) {
  slots[0].provider = (lamp_gemm_provider){"openblas", "libopenblas.so.0", 1, openblas_sgemm, NULL};
}

static void load_dnnl(void) {
  slot *s = &slots[1];
  s->provider = (lamp_gemm_provider){.name = "dnnl"};
  void *h = open_library(s, "libdnnl.so.2");
  if (h == NULL) return;
  *(void **)&dnnl.sgemm = symbol(s, h, "dnnl_sgemm");
  *(void **)&dnnl.bf16 = symbol(s, h, "dnnl_gemm_bf16bf16f32");
  *(void **)&dnnl.set_threads = symbol(s, h, "omp_set_num_threads");
  if (s->status != LAMP_OK) return;
  s->provider.sgemm = dnnl_sgemm;
  /* oneDNN's bf16 GEMM runs on any AVX-512 CPU, natively (vdpbf16ps) only with AVX512_BF16. */
  s->provider.gemm_bf16 = lamp_cpu_has(LAMP_ISA_AVX512BF16) ? dnnl_gemm_bf16 : NULL;
}

static void load_blis(void) {
  slot *s = &slots[2];
  s->provider = (lamp_gemm_provider){.name = "blis"};
  void *h = open_library(s, "libblis.so.4");
  if (h == NULL) return;
  *(void **)&bli_sgemm = symbol(s, h, "bli_sgemm");
  bli_threads_fn set_threads;
  *(void **)&set_threads = symbol(s, h, "bli_thread_set_num_threads");
  if (s->status != LAMP_OK) return;
  set_threads(1);
  s->provider.sgemm = blis_sgemm;
}

static void (*const loaders[LAMP_GEMM_PROVIDERS])(void) = {load_openblas, load_dnnl, load_blis};

lamp_status lamp_gemm_provider_open(const char *name, const lamp_gemm_provider **out) {
  for (int i = 0; i < LAMP_GEMM_PROVIDERS; i++) {
    if (strcmp(name, names[i]) != 0) continue;
    pthread_once(&slots[i].once, loaders[i]);
    if (slots[i].status != LAMP_OK) return lamp_error(slots[i].status, "%s", slots[i].message);
    *out = &slots[i].provider;
    return LAMP_OK;
  }
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "gemm: LAMP_GEMM names an unknown provider '%s' (expected openblas, dnnl or blis)", name);
}

/* ---- the process's choice ------------------------------------------------------------------ */

static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static lamp_gemm_choice choice;
static lamp_status choice_status;
static char choice_message[512];

static void choose(void) {
  const char *forced = getenv("LAMP_GEMM");
  if (forced != NULL && forced[0] != '\0') {
    choice_status = lamp_gemm_provider_open(forced, &choice.f32);
    if (choice_status != LAMP_OK) snprintf(choice_message, sizeof choice_message, "%s", lamp_last_error());
    else choice.bf16 = choice.f32->gemm_bf16 != NULL ? choice.f32 : NULL;
    return;
  }
  /* Where oneDNN has the bf16 GEMM it takes fp32 too: its products run on lamp's pool, with no
     hand-over to OpenBLAS's threads around each one (gemm_provider.h). */
  const lamp_gemm_provider *dnnl_p;
  if (lamp_cpu_has(LAMP_ISA_AVX512BF16) && lamp_gemm_provider_open("dnnl", &dnnl_p) == LAMP_OK &&
      dnnl_p->gemm_bf16 != NULL) {
    choice.f32 = choice.bf16 = dnnl_p;
    return;
  }
  lamp_error_clear();
  choice_status = lamp_gemm_provider_open("openblas", &choice.f32);
}

lamp_status lamp_gemm_choice_get(lamp_gemm_choice *out) {
  pthread_once(&choice_once, choose);
  if (choice_status != LAMP_OK) return lamp_error(choice_status, "%s", choice_message);
  *out = choice;
  return LAMP_OK;
}

int lamp_gemm_choice_has_bf16(void) {
  pthread_once(&choice_once, choose);
  return choice_status == LAMP_OK && choice.bf16 != NULL;
}

void lamp_gemm_choice_describe(char *out, size_t size) {
  lamp_gemm_choice c = {NULL, NULL};
  if (lamp_gemm_choice_get(&c) != LAMP_OK) snprintf(out, size, "unavailable (%s)", lamp_last_error());
  else if (c.bf16 == NULL) snprintf(out, size, "%s", c.f32->name);
  else snprintf(out, size, "%s; bf16: %s", c.f32->name, c.bf16->name);
}
