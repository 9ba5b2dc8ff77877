/*
** The library that computes the CPU's fp32 GEMMs (gemm_provider.c). OpenBLAS is linked and
** always there; oneDNN and BLIS are opened with dlopen when their Debian packages are installed,
** so a build and its tests need neither. The providers are chosen once per process, on the first
** question: LAMP_GEMM=openblas|dnnl|blis when set, else the best ones present for the CPU
** (lamp_gemm_choice_get). scripts/bench/gemm.sh measures them against each other.
**
** Every provider computes C = alpha op(A) op(B) + beta C on row-major fp32 matrices; they differ
** in rounding (their kernels sum k in different orders), never in what they compute.
*/
#ifndef LAMP_BACKEND_CPU_GEMM_PROVIDER_H
#define LAMP_BACKEND_CPU_GEMM_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Row-major C[m,n] = alpha op(A) op(B) + beta C. Sizes are checked by the caller to fit an int. */
typedef void (*lamp_sgemm_fn)(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                              const float *b, int ldb, float beta, float *c, int ldc);

/* The same with bf16 A and B (products exact in fp32, fp32 sums and C). */
typedef void (*lamp_bf16gemm_fn)(int trans_a, int trans_b, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                                 const uint16_t *b, int ldb, float beta, float *c, int ldc);

/*
** A provider's calls run on the calling thread only, except OpenBLAS's (`threads_itself`), which
** use OpenBLAS's own threads (parallel.c sets their count to 1 inside the pool's loops). The
** others' threads would be OpenMP teams, which spin and wait on a preempted member for a whole
** time slice on a loaded machine; lamp_gemm_run gives their products to its own pool instead.
*/
typedef struct lamp_gemm_provider {
  const char *name;    /* as LAMP_GEMM spells it */
  const char *library; /* the shared library it came from */
  int threads_itself;
  lamp_sgemm_fn sgemm;
  lamp_bf16gemm_fn gemm_bf16; /* NULL where the provider has no bf16 GEMM */
} lamp_gemm_provider;

/* The names LAMP_GEMM accepts, in the order they are described: "openblas", "dnnl", "blis". */
#define LAMP_GEMM_PROVIDERS 3
const char *lamp_gemm_provider_name(int index);

/*
** The provider called `name`, loaded if need be (once per process; a failure is kept and
** repeated): "gemm: provider 'dnnl' is not available: libdnnl.so.2: cannot open shared object
** file ..." when its library is missing, "gemm: LAMP_GEMM names an unknown provider 'x' (expected
** openblas, dnnl or blis)" for an unknown name.
*/
lamp_status lamp_gemm_provider_open(const char *name, const lamp_gemm_provider **out);

/*
** The providers of this process, chosen on the first call. f32 computes fp32 products; bf16, where
** not NULL, takes bf16 operands as they are (else they are widened for f32). LAMP_GEMM=name makes
** `name` both (its bf16 GEMM if it has one); an error when it cannot be opened. Unset: oneDNN for
** both where it is installed and the CPU has AVX512_BF16 (its bf16 GEMM runs at twice OpenBLAS's
** fp32 rate there, and its fp32 GEMM on lamp's pool ran the reference MLP's step faster than
** OpenBLAS on its own threads, docs/benchmarks.md); OpenBLAS for fp32 everywhere else.
*/
typedef struct lamp_gemm_choice {
  const lamp_gemm_provider *f32, *bf16;
} lamp_gemm_choice;
lamp_status lamp_gemm_choice_get(lamp_gemm_choice *out);

/* Whether the choice has a bf16 GEMM (0 when LAMP_GEMM names one that cannot be opened); sets no
   error. */
int lamp_gemm_choice_has_bf16(void);

/* "openblas" or "openblas; bf16: dnnl", as `lamp devices` shows it; "unavailable (<the choice's
   error>)" when LAMP_GEMM names a provider that cannot be opened. */
void lamp_gemm_choice_describe(char *out, size_t size);

/*
** One product through p: A and B are fp32, or bf16 when `bf16` (p->gemm_bf16 set), C is fp32.
** A provider that does not thread itself gets C cut into blocks of rows or columns, each computed
** by one call on one of the pool's workers. The cut depends on the shape alone (gemm_run.c), so
** the bits depend neither on timing nor on the thread count.
*/
lamp_status lamp_gemm_run(const lamp_gemm_provider *p, int bf16, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc);

#endif
