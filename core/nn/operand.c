/* GEMM operands in the compute dtype (operand.h). */
#include "nn/operand.h"

#include "backend/backend.h"

lamp_dtype lamp_operand_dtype(const lamp_exec *exec) {
  return lamp_device_has(exec->device, LAMP_CAP_NATIVE_16BIT_GEMM) ? exec->compute_dtype : LAMP_F32;
}

lamp_dtype lamp_operand_dtype_of(const lamp_operand *c, const lamp_exec *exec) {
  if (c->gemm_only && exec->compute_dtype == LAMP_BF16 && lamp_device_has(exec->device, LAMP_CAP_NATIVE_BF16_GEMM))
    return LAMP_BF16;
  return lamp_operand_dtype(exec);
}

static int in_place(const lamp_exec *exec, lamp_dtype op, lamp_dtype dtype) {
  return dtype == exec->compute_dtype && dtype == op;
}

int lamp_operand_in_place(const lamp_exec *exec, lamp_dtype dtype) {
  return in_place(exec, lamp_operand_dtype(exec), dtype);
}

/* dst holds src's values rounded to the compute dtype, in the operand dtype op. */
static lamp_status fill(const lamp_exec *exec, lamp_dtype op, void *dst, const void *src, lamp_dtype src_dtype,
                        size_t n) {
  if (op != LAMP_F32 || src_dtype == exec->compute_dtype) /* one conversion: rounding or exact widening */
    return lamp_convert(exec->device, dst, op, src, src_dtype, n);
  if (src_dtype != LAMP_F32) {                           /* widen first, then round in place */
    lamp_status st = lamp_convert(exec->device, dst, LAMP_F32, src, src_dtype, n);
    if (st != LAMP_OK) return st;
    src = dst;
  }
  return lamp_round_through(exec->device, dst, src, exec->compute_dtype, n);
}

lamp_status lamp_operand_fill(const lamp_exec *exec, void *dst, const void *src, lamp_dtype src_dtype, size_t n) {
  return fill(exec, lamp_operand_dtype(exec), dst, src, src_dtype, n);
}

lamp_status lamp_operand_get(lamp_operand *c, const lamp_exec *exec, const lamp_tensor *t, size_t n, int reuse,
                             const void **data) {
  const void *src = lamp_tensor_data(t);
  lamp_dtype op = lamp_operand_dtype_of(c, exec);
  if (in_place(exec, op, t->dtype)) {
    *data = src;
    return LAMP_OK;
  }
  if (!(reuse && c->valid && c->src == src)) {
    int64_t shape[1] = {(int64_t)n};
    lamp_status st = lamp_tensor_ensure(&c->buf, op, exec->device, 1, shape, LAMP_MEM_WORKSPACE);
    if (st == LAMP_OK) st = fill(exec, op, lamp_tensor_data(c->buf), src, t->dtype, n);
    if (st != LAMP_OK) return st;
    c->src = src;
    c->valid = 1;
  }
  *data = lamp_tensor_data(c->buf);
  return LAMP_OK;
}

void lamp_operand_free(lamp_operand *c) {
  lamp_tensor_release(c->buf);
  c->buf = NULL;
  c->valid = 0;
}
