/*
** GEMM through cuBLAS: C[m,n] = alpha * op(A) op(B) + beta * C, row-major (backend.h).
**
** cuBLAS is column-major, and a row-major matrix is its transpose in column-major, so the
** product is computed as C^T = op(B)^T op(A)^T: B and A swap places, m and n swap, and each
** keeps its own transpose flag and stride. No data moves for that.
**
** Precision: cublasGemmEx with CUBLAS_COMPUTE_32F, fp32 accumulation of the operands as stored
** (fp16 and bf16 read natively by the tensor cores, fp32 by the fp32 pipeline), alpha and beta
** as float. The handle keeps the default math mode, which for COMPUTE_32F never uses TF32:
** TF32 rounds fp32 operands to 10 mantissa bits, so an fp32 run would no longer compute the
** products the CPU computes (lamp's fp32 is true fp32; a policy flag would be the place to ask
** for TF32). CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION keeps split-K partial sums in fp32
** when C is 16-bit, so a 16-bit C is one rounding of the fp32 result, as on the CPU.
**
** cublasGemmEx takes A and B of one dtype and C of that dtype or fp32. Other combinations go
** through scratch memory: mixed operands are widened to fp32 (exact, so the product is the
** same), and a C it cannot write (fp32 operands with a 16-bit C, fp16 with bf16, bf16 with fp16)
** is computed in fp32 and rounded once into C, as the CPU does.
**
** Determinism: one handle on one stream, with a workspace of fixed size and the default atomics
** mode (not allowed), gives the same bits on every run on the same GPU and toolkit (cuBLAS's
** reproducibility guarantee holds for a single active stream, which is the module's design).
**
** The workspace is the module's own, of the size cuBLAS's documentation recommends (32 MiB from
** Hopper on, 4 MiB before), charged to the ledger: left to itself, cuBLAS allocates one inside
** each graph capture (graph.c), which a replayed step must not do.
*/
#include <cublas_v2.h>
#include <limits.h>
#include <stdint.h>

#include "backend/cuda/kernels.h"

static cublasHandle_t handle;
static cudaStream_t handle_stream;
static void *workspace;
static size_t workspace_bytes;

static lamp_status cublas_status(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_SYSTEM, "cuda: gemm: %s: %s: %s", what, cublasGetStatusName(st),
                              cublasGetStatusString(st));
}

static void workspace_release(void) {
  if (workspace == NULL) return;
  cudaFreeAsync(workspace, lamp_cuda_stream()); /* in stream order: GEMMs queued before still have it */
  lamp_cuda_svc->ledger_sub(LAMP_CUDA, LAMP_MEM_WORKSPACE, workspace_bytes);
  workspace = NULL;
  workspace_bytes = 0;
}

/* The handle's workspace, made with it; cublasSetStream forgets it, so it is set after each. */
static lamp_status set_workspace(void) {
  if (workspace == NULL) {
    int device = 0, major = 0;
    size_t bytes = (size_t)4 << 20;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9)
      bytes = (size_t)32 << 20;
    lamp_status s = lamp_cuda_refuse_in_capture("allocating cuBLAS's workspace");
    if (s == LAMP_OK) s = lamp_cuda_status(cudaMallocAsync(&workspace, bytes, lamp_cuda_stream()), "gemm: cuBLAS's workspace");
    if (s != LAMP_OK) return s;
    workspace_bytes = bytes;
    lamp_cuda_svc->ledger_add(LAMP_CUDA, LAMP_MEM_WORKSPACE, bytes);
  }
  return cublas_status(cublasSetWorkspace(handle, workspace, workspace_bytes), "cublasSetWorkspace");
}

/* The handle, made on the first GEMM and bound to the core's stream. */
static lamp_status get_handle(void) {
  if (handle == NULL) {
    cublasHandle_t h = NULL;
    lamp_status s = cublas_status(cublasCreate(&h), "cublasCreate");
    if (s != LAMP_OK) return s;
    s = cublas_status(
        cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
        "cublasSetMathMode");
    if (s != LAMP_OK) {
      cublasDestroy(h);
      return s;
    }
    handle = h;
    handle_stream = NULL;
  }
  cudaStream_t stream = lamp_cuda_stream();
  if (stream != handle_stream) {
    lamp_status s = cublas_status(cublasSetStream(handle, stream), "cublasSetStream");
    if (s == LAMP_OK) s = set_workspace();
    if (s != LAMP_OK) return s;
    handle_stream = stream;
  }
  return LAMP_OK;
}

void lamp_cuda_gemm_release(void) {
  if (handle != NULL) cublasDestroy(handle);
  workspace_release();
  handle = NULL;
  handle_stream = NULL;
}

static cudaDataType cuda_type(lamp_dtype dtype) {
  return dtype == LAMP_F16 ? CUDA_R_16F : dtype == LAMP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* ---- operands -------------------------------------------------------------------------------- */

/* One stored matrix: rows x cols elements with row stride ld, as it sits in memory. */
typedef struct stored_matrix {
  const void *data;
  lamp_dtype dtype;
  size_t rows, cols, ld;
} stored_matrix;

/* Scratch regions start on 256-byte boundaries (cuBLAS's preferred alignment). */
static size_t region_bytes(size_t rows, size_t cols) { return (rows * cols * sizeof(float) + 255u) & ~(size_t)255u; }

/* The plan for one call: the dtype cuBLAS multiplies, and which matrices go through fp32 scratch. */
typedef struct gemm_plan {
  lamp_dtype operands;     /* A's and B's dtype as cuBLAS reads them */
  int widen_a, widen_b;    /* a 16-bit operand widened to fp32 (the other one is fp32) */
  int c_in_fp32;           /* cuBLAS writes an fp32 copy, rounded into C afterwards */
} gemm_plan;

static gemm_plan plan_for(lamp_dtype a, lamp_dtype b, lamp_dtype c) {
  gemm_plan p = {a, 0, 0, 0};
  if (a != b) {
    p.operands = LAMP_F32;
    p.widen_a = a != LAMP_F32;
    p.widen_b = b != LAMP_F32;
  }
  p.c_in_fp32 = c != p.operands && c != LAMP_F32;
  return p;
}

/* ---- the product ----------------------------------------------------------------------------- */

static lamp_status gemm_cuda(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                             const stored_matrix *a, const stored_matrix *b, float beta, void *c, lamp_dtype c_dtype,
                             size_t ldc) {
  if (m == 0 || n == 0) return LAMP_OK;
  if (k == 0) return lamp_cuda_scale_matrix(c, c_dtype, ldc, m, n, beta); /* cuBLAS implementations disagree here */
  lamp_status s = get_handle();
  if (s != LAMP_OK) return s;
  gemm_plan p = plan_for(a->dtype, b->dtype, c_dtype);
  size_t a_bytes = p.widen_a ? region_bytes(a->rows, a->cols) : 0, b_bytes = p.widen_b ? region_bytes(b->rows, b->cols) : 0;
  size_t c_bytes = p.c_in_fp32 ? region_bytes(m, n) : 0;
  const void *a_data = a->data, *b_data = b->data;
  size_t lda = a->ld, ldb = b->ld, ldc_used = ldc;
  void *c_data = c;
  if (a_bytes + b_bytes + c_bytes > 0) {
    char *scratch = NULL;
    s = lamp_cuda_scratch(a_bytes + b_bytes + c_bytes, (void **)&scratch);
    if (s != LAMP_OK) return s;
    if (p.widen_a) {
      s = lamp_cuda_convert_matrix(scratch, LAMP_F32, a->cols, a->data, a->dtype, a->ld, a->rows, a->cols);
      a_data = scratch;
      lda = a->cols;
    }
    if (s == LAMP_OK && p.widen_b) {
      s = lamp_cuda_convert_matrix(scratch + a_bytes, LAMP_F32, b->cols, b->data, b->dtype, b->ld, b->rows, b->cols);
      b_data = scratch + a_bytes;
      ldb = b->cols;
    }
    if (p.c_in_fp32) {
      c_data = scratch + a_bytes + b_bytes;
      ldc_used = n;
      /* beta == 0 leaves the copy unread: cuBLAS overwrites it without reading. */
      if (s == LAMP_OK && beta != 0.0f) s = lamp_cuda_convert_matrix(c_data, LAMP_F32, n, c, c_dtype, ldc, m, n);
    }
    if (s != LAMP_OK) return s;
  }
  lamp_dtype c_type = p.c_in_fp32 ? LAMP_F32 : c_dtype;
  s = cublas_status(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 (int)n, (int)m, (int)k, &alpha, b_data, cuda_type(p.operands), (int)ldb, a_data,
                                 cuda_type(p.operands), (int)lda, &beta, c_data, cuda_type(c_type), (int)ldc_used,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
  if (s != LAMP_OK || !p.c_in_fp32) return s;
  return lamp_cuda_convert_matrix(c, c_dtype, ldc, c_data, LAMP_F32, n, m, n);
}

/* ---- validation (the CPU's checks and messages, core/backend/cpu/gemm.c) --------------------- */

static lamp_status check_dtypes(lamp_dtype a, lamp_dtype b, lamp_dtype c) {
  lamp_status s = lamp_cuda_check_float("gemm", "A", a);
  if (s == LAMP_OK) s = lamp_cuda_check_float("gemm", "B", b);
  if (s == LAMP_OK) s = lamp_cuda_check_float("gemm", "C", c);
  return s;
}

/* cuBLAS takes int sizes; anything larger must be refused before the cast, not wrapped. */
static lamp_status check_int(const char *what, size_t value) {
  if (value <= INT_MAX) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "gemm: %s = %zu exceeds the BLAS limit %d", what, value, INT_MAX);
}

static lamp_status check_ld(const char *name, size_t ld, size_t cols) {
  lamp_status s = check_int(name, ld);
  if (s != LAMP_OK || ld >= cols) return s;
  return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, "gemm: %s = %zu is smaller than the row length %zu", name, ld,
                              cols);
}

static lamp_status check_shapes(size_t m, size_t n, size_t k, const stored_matrix *a, const stored_matrix *b,
                                size_t ldc) {
  lamp_status s = check_int("m", m);
  if (s == LAMP_OK) s = check_int("n", n);
  if (s == LAMP_OK) s = check_int("k", k);
  if (s == LAMP_OK) s = check_ld("lda", a->ld, a->cols);
  if (s == LAMP_OK) s = check_ld("ldb", b->ld, b->cols);
  if (s == LAMP_OK) s = check_ld("ldc", ldc, n);
  return s;
}

static lamp_status check_pointers(size_t m, size_t n, size_t k, const void *a, const void *b, const void *c) {
  size_t product = (m && n && k) ? 1 : 0; /* A and B are read only for a non-empty product */
  lamp_status s = lamp_cuda_check_data("gemm", "A", a, product);
  if (s == LAMP_OK) s = lamp_cuda_check_data("gemm", "B", b, product);
  if (s == LAMP_OK) s = lamp_cuda_check_data("gemm", "C", c, m * n);
  return s;
}

lamp_status lamp_cuda_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                           lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb,
                           float beta, void *c, lamp_dtype c_dtype, size_t ldc) {
  lamp_status s = check_dtypes(a_dtype, b_dtype, c_dtype);
  if (s != LAMP_OK) return s;
  stored_matrix sa = {a, a_dtype, trans_a ? k : m, trans_a ? m : k, lda};
  stored_matrix sb = {b, b_dtype, trans_b ? n : k, trans_b ? k : n, ldb};
  s = check_shapes(m, n, k, &sa, &sb, ldc);
  if (s == LAMP_OK) s = check_pointers(m, n, k, a, b, c);
  if (s != LAMP_OK) return s;
  return gemm_cuda(trans_a, trans_b, m, n, k, alpha, &sa, &sb, beta, c, c_dtype, ldc);
}
