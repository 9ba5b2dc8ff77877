/*
** check_ops: every kernel of a device's backend table against the CPU backend, on random data.
** What the files share: the run's settings, host buffers in any element type, one "case" (an
** operation with its operands, run once on the CPU and twice on the device), the comparisons,
** and the report (one line per operation and dtype combination).
**
** A case's operands are host arrays; run_case copies each to fresh memory of the CPU and of the
** device (outputs poisoned with all-ones bytes: NaN in every float type, so an element the kernel
** never writes shows), calls the operation on both, and brings the results back. The device
** runs it twice from the same inputs: the two results must be the same bits (run-to-run
** determinism).
*/
#ifndef LAMP_CHECK_OPS_H
#define LAMP_CHECK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "tensor/rng.h"

/* ---- the run --------------------------------------------------------------------------------- */

typedef struct check_run {
  lamp_device device;
  int full;            /* the large shapes too (up to 4096^3) */
  const char *only;    /* comma-separated operation names, or NULL for all */
  const char *perturb; /* operation whose first device result is altered (checks the checker) */
  int perturbed;
  unsigned long long sample_above; /* GEMMs with m*n*k above this are compared on sampled rows */
  lamp_rng rng;
  int failures, lines;
  uint64_t digest; /* FNV-1a over every device result: equal across runs of one seed */
} check_run;

/* Whether operation `op` is selected by --only. */
int check_selected(const check_run *run, const char *op);

/* Uniform in [-1, 1). */
float check_uniform(check_run *run);

/* A random value of magnitude about 2^[-spread, spread], either sign. */
float check_wide(check_run *run, int spread);

/* ---- host arrays ----------------------------------------------------------------------------- */
/* Of f32, f16, bf16 (lamp_dtype) and of the other element types results come in. */

typedef enum check_elem { ELEM_F32, ELEM_F16, ELEM_BF16, ELEM_I32, ELEM_F64, ELEM_SIZE, ELEM_U8 } check_elem;

check_elem check_elem_of(lamp_dtype dtype);
size_t check_elem_size(check_elem e);
const char *check_dtype_name(lamp_dtype dtype);

/* A zeroed host array of n elements (never NULL: out of memory exits). */
void *check_alloc(check_elem e, size_t n);

/* Element i as a double (floats widened exactly; integers as such). */
double check_get(check_elem e, const void *buf, size_t i);
/* Element i = v rounded (nearest even) to the type. */
void check_set(check_elem e, void *buf, size_t i, double v);

/* n random values in [-1, 1) of dtype; with `special`, the first elements are the values that
   break kernels (zeros of both signs, infinities, NaN, 16-bit overflow, subnormals, ties) and the
   rest spread over 2^[-spread, spread]. */
void *check_random(check_run *run, lamp_dtype dtype, size_t n, int special, int spread);

/* One unit in the last place of dtype at magnitude |v| (subnormal spacing below the normals). */
double check_ulp(lamp_dtype dtype, double v);

/* ---- cases ----------------------------------------------------------------------------------- */

enum { ROLE_IN, ROLE_OUT, ROLE_INOUT };
#define CHECK_MAX_OPERANDS 7

typedef struct check_operand {
  check_elem elem;
  size_t n;
  int role;
  const void *init; /* host values (IN, INOUT); NULL for OUT, or for an absent (NULL) operand */
  int absent;       /* the operation gets NULL here */
  void *cpu, *dev;  /* results (OUT, INOUT), host arrays owned by the case */
} check_operand;

/* Calls the operation on `device` with its operands' memory p[0 .. n). */
typedef lamp_status (*check_call)(lamp_device device, void *const *p, const void *args);

typedef struct check_case {
  const char *op; /* for --perturb and messages */
  check_operand x[CHECK_MAX_OPERANDS];
  int n;
  check_call call;
  const void *args;
  char why[256]; /* set when run_case fails */
} check_case;

/* Appends an operand; returns its index. */
int check_operand_add(check_case *c, check_elem elem, size_t n, int role, const void *init);

/* Runs the case on the CPU and (twice) on the device. 0 when both ran and the device was
   deterministic; else 1 with c->why set. */
int check_case_run(check_run *run, check_case *c);

/* Frees the results. */
void check_case_free(check_case *c);

/* ---- one report line ------------------------------------------------------------------------- */
/* The cases of one operation and dtype combination over several shapes. */

typedef struct check_line {
  char op[64];
  char first[32], last[32];
  int shapes;
  int bitwise;        /* the bound column says "bitwise" */
  double err, bound;  /* the worst case: largest err / bound (or first mismatch) */
  double worst_ratio, max_bound;
  int failed;
  char why[256];
} check_line;

void check_line_begin(check_line *l, int bitwise, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void check_line_shape(check_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A case that could not run (the status and message, or non-determinism). */
void check_line_fail(check_line *l, const char *why);

/* Operand `i` of a run case, element by element: the same bits (any NaN equals any NaN). */
void check_bitwise(check_line *l, const check_case *c, int i);
/* Operand `i`: |dev - cpu| <= bound[j] for every element j; NaN and infinities must agree. */
void check_bounded(check_line *l, const check_case *c, int i, const double *bound);
/* As check_bounded against a reference array of doubles instead of the CPU's result; the
   elements are numbered from `first` in messages. */
void check_against(check_line *l, check_elem elem, const void *dev, const double *ref, const double *bound, size_t n,
                   size_t first);

/* Prints the line (and counts a failure). */
void check_line_end(check_run *run, check_line *l);

/* The operations: check_gemm.c, check_elementwise.c, check_reduce.c, check_layers.c (pooling and
   BatchNorm), check_conv.c. */
void check_gemm(check_run *run);
void check_elementwise(check_run *run);
void check_reductions(check_run *run);
void check_layers(check_run *run);
void check_conv(check_run *run);

#endif
