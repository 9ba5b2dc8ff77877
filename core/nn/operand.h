/*
** GEMM operands under autocast, shared by the layers that multiply (Linear, Conv2d). The values an operand carries are always those of
** exec->compute_dtype; where the device runs 16-bit GEMMs natively they are stored in it,
** elsewhere (the CPU) they are kept widened to fp32, exactly, so sgemm reads them without
** re-widening on every call. An operand marked gemm_only (Linear's) feeds lamp_gemm alone, so it
** is also stored in bf16 where the device's gemm reads bf16 natively (LAMP_CAP_NATIVE_BF16_GEMM:
** the CPU with oneDNN). A tensor that already qualifies is used in place.
*/
#ifndef LAMP_NN_OPERAND_H
#define LAMP_NN_OPERAND_H

#include "nn/layer.h"

/* A tensor's data in the compute dtype: the tensor itself or a converted copy. */
typedef struct lamp_operand {
  lamp_tensor *buf;  /* workspace, grown on demand, reused across steps */
  const void *src;   /* the data the copy was made from */
  int valid;         /* the copy still matches src for this step */
  int gemm_only;     /* set by the layer: read by lamp_gemm only, never by a convolution */
} lamp_operand;

/* The dtype operands are stored in: the compute dtype, or f32 where GEMMs widen anyway. */
lamp_dtype lamp_operand_dtype(const lamp_exec *exec);

/* The dtype operand c is stored in: lamp_operand_dtype, or bf16 for a gemm_only operand where
   the device's gemm reads two bf16 operands natively. */
lamp_dtype lamp_operand_dtype_of(const lamp_operand *c, const lamp_exec *exec);

/*
** *data = t's first n values as a GEMM operand: t's own storage when it already qualifies,
** else the copy, made now unless `reuse` allows the one this step already made from the same
** data.
*/
lamp_status lamp_operand_get(lamp_operand *c, const lamp_exec *exec, const lamp_tensor *t, size_t n, int reuse,
                             const void **data);

void lamp_operand_free(lamp_operand *c);

/* Whether a tensor of this dtype already is a GEMM operand (used in place, nothing to convert). */
int lamp_operand_in_place(const lamp_exec *exec, lamp_dtype dtype);

/* dst (operand dtype) = n values of src rounded to the compute dtype: a piece of a tensor made
   into an operand where the layer needs it (a chunk of images), instead of a whole copy. */
lamp_status lamp_operand_fill(const lamp_exec *exec, void *dst, const void *src, lamp_dtype src_dtype, size_t n);

#endif
