/*
** One product through a GEMM provider (lamp_gemm_run, gemm_provider.h). OpenBLAS threads itself.
** The others compute on the calling thread, so C is cut into blocks of BLOCK rows (or columns,
** whichever of m and n is larger) dealt to the pool's workers, one single-threaded call per block.
** The cut depends on the shape alone, never on the thread count: a run gives the same bits on one
** thread as on two, inside a parallel loop (where the blocks run one after the other) as outside.
*/
#include <cblas.h>
#include <stdint.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_provider.h"

/* Rows or columns of C per block: a multiple of 16 (64-byte aligned fp32 rows), large enough that
   a block's packing of the shared operand costs little next to its product. */
#define BLOCK 256

typedef struct product {
  const lamp_gemm_provider *p;
  int bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, by_rows;
  float alpha, beta;
  const char *a, *b; /* bytes: fp32 or bf16 elements */
  float *c;
} product;

static void call(const product *q, int m, int n, const char *a, const char *b, float *c) {
  if (q->bf16)
    q->p->gemm_bf16(q->trans_a, q->trans_b, m, n, q->k, q->alpha, (const uint16_t *)(const void *)a, q->lda,
                    (const uint16_t *)(const void *)b, q->ldb, q->beta, c, q->ldc);
  else
    q->p->sgemm(q->trans_a, q->trans_b, m, n, q->k, q->alpha, (const float *)(const void *)a, q->lda,
                (const float *)(const void *)b, q->ldb, q->beta, c, q->ldc);
}

/* Block `task`: rows [r0, r0 + BLOCK) of op(A) and C, or columns of op(B) and C. */
static lamp_status run_block(void *ctx, size_t worker, size_t task) {
  (void)worker;
  const product *q = ctx;
  size_t size = q->bf16 ? sizeof(uint16_t) : sizeof(float), first = task * BLOCK;
  if (q->by_rows) {
    int rows = q->m - (int)first < BLOCK ? q->m - (int)first : BLOCK;
    size_t a_at = q->trans_a ? first : first * (size_t)q->lda; /* op(A) row r: A's row r or column r */
    call(q, rows, q->n, q->a + a_at * size, q->b, q->c + first * (size_t)q->ldc);
  } else {
    int cols = q->n - (int)first < BLOCK ? q->n - (int)first : BLOCK;
    size_t b_at = q->trans_b ? first * (size_t)q->ldb : first; /* op(B) column j: B's column j or row j */
    call(q, q->m, cols, q->a, q->b + b_at * size, q->c + first);
  }
  return LAMP_OK;
}

lamp_status lamp_gemm_run(const lamp_gemm_provider *p, int bf16, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc) {
  product q = {p, bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, m > n, alpha, beta, a, b, c};
  if (p->threads_itself) {
    if (openblas_get_num_threads() > 1) lamp_cpu_pool_sleep(); /* its threads need the cores */
    call(&q, m, n, a, b, c);
    return LAMP_OK;
  }
  size_t blocks = ((size_t)(q.by_rows ? m : n) + BLOCK - 1) / BLOCK;
  if (blocks <= 1) {
    call(&q, m, n, a, b, c);
    return LAMP_OK;
  }
  return lamp_cpu_parallel_for(blocks, run_block, &q);
}
