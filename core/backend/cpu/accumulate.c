/*
** Rounding through a 16-bit dtype while staying in fp32 storage. The CPU has no 16-bit GEMM,
** so 16-bit operands are fed to sgemm widened (exactly) to fp32; these kernels give fp32 arrays
** whose values are what a 16-bit tensor would hold, and add 16-bit-rounded gradients into the
** fp32 accumulation buffer without a 16-bit intermediate (a policy with a 16-bit grad_dtype: each
** micro-step's gradient is rounded to 16 bits, then summed in fp32): one pass instead of a
** rounding pass plus a widening pass.
*/
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "tensor/half.h"

static void add_block(float *restrict dst, const float *restrict src, size_t n) {
  size_t i = 0;
  for (; i + LAMP_CPU_BLOCK <= n; i += LAMP_CPU_BLOCK)
    for (size_t k = 0; k < LAMP_CPU_BLOCK; k++) dst[i + k] += src[i + k];
  for (; i < n; i++) dst[i] += src[i];
}

static lamp_status check_args(const char *fn, float *dst, const float *src, lamp_dtype via,
                              size_t n) {
  lamp_status s = lamp_cpu_check_float(fn, "via", via);
  if (s == LAMP_OK) s = lamp_cpu_check_data(fn, "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data(fn, "src", src, n);
  return s;
}

typedef struct rounding {
  float *dst;
  const float *src;
  lamp_dtype via;
} rounding;

static void round_range(void *ctx, size_t part, size_t begin, size_t end) {
  (void)part;
  const rounding *r = ctx;
  if (r->via == LAMP_F16) lamp_round_f16_n(r->dst + begin, r->src + begin, end - begin);
  else lamp_round_bf16_n(r->dst + begin, r->src + begin, end - begin);
}

lamp_status lamp_cpu_round_through(float *dst, const float *src, lamp_dtype via, size_t n) {
  lamp_status s = check_args("round_through", dst, src, via, n);
  if (s != LAMP_OK) return s;
  if (via == LAMP_F32) {
    if (dst != src && n > 0) memmove(dst, src, n * sizeof *dst);
    return LAMP_OK;
  }
  rounding r = {dst, src, via};
  return lamp_cpu_split_pass(n, round_range, &r);
}

lamp_status lamp_cpu_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n) {
  lamp_status s = check_args("accumulate_rounded", dst, src, via, n);
  if (s != LAMP_OK) return s;
  if (via == LAMP_F16) lamp_add_rounded_f16_n(dst, src, n);
  else if (via == LAMP_BF16) lamp_add_rounded_bf16_n(dst, src, n);
  else add_block(dst, src, n);
  return LAMP_OK;
}

lamp_status lamp_cpu_add_grad(float *g, const float *v, size_t n, lamp_dtype grad_dtype, int overwrite) {
  if (grad_dtype == LAMP_F32) {
    if (overwrite) {
      memcpy(g, v, n * sizeof *g);
      return LAMP_OK;
    }
    return lamp_cpu_axpy(g, v, n, 1.0f);
  }
  if (overwrite) return lamp_cpu_round_through(g, v, grad_dtype, n);
  return lamp_cpu_accumulate_rounded(g, v, grad_dtype, n);
}
