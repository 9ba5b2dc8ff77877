/*
** The per-element math of the CUDA kernels, written once for the device and the host: every
** function here is __host__ __device__ under nvcc and plain static inline C11 elsewhere, so
** tests/unit/test_cuda_math.c compiles this header on the CPU and checks it bit for bit against
** the CPU backend (the proof that the kernels compute the CPU's values; the kernels themselves
** run only where there is a GPU).
**
** The rules are the CPU's (core/tensor/half.c, core/backend/cpu/): 16-bit values are widened
** exactly, arithmetic is fp32 with one rounding per operation (never a fused multiply-add: the
** device sources are compiled with --fmad=false, and the sums of products below use the _rn
** intrinsics on the device as well), results are rounded to nearest even once. Conversions are
** pure integer work on the bits, so they give the same answer whatever the floating-point
** environment. One difference is not the math's: GPU arithmetic returns the canonical NaN
** (0x7fffffff) where x86 returns an operand's NaN quieted, so a NaN produced by arithmetic may
** carry other payload bits (still NaN, same dtype); bit operations (conversions, ReLU, copies)
** keep payloads exactly.
*/
#ifndef LAMP_BACKEND_CUDA_ELEMENTWISE_MATH_H
#define LAMP_BACKEND_CUDA_ELEMENTWISE_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lamp/abi.h"

#if defined(__CUDACC__)
#define LAMP_EM_FN static inline __host__ __device__
#else
#define LAMP_EM_FN static inline
#endif

/* ---- bits and classification ----------------------------------------------------------------- */

LAMP_EM_FN uint32_t lamp_em_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

LAMP_EM_FN float lamp_em_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

#define LAMP_EM_ABS 0x7fffffffu
#define LAMP_EM_INF 0x7f800000u

/* On the bits, so that no compiler option (or library overload) can change the answer. */
LAMP_EM_FN int lamp_em_isnan(float x) { return (lamp_em_bits(x) & LAMP_EM_ABS) > LAMP_EM_INF; }
LAMP_EM_FN int lamp_em_isfinite(float x) { return (lamp_em_bits(x) & LAMP_EM_ABS) < LAMP_EM_INF; }

/* One fp32 product and one fp32 sum, each rounded: what the CPU's `a * b` and `a + b` are. */
LAMP_EM_FN float lamp_em_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

LAMP_EM_FN float lamp_em_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/* The same in double (squares summed for norms). */
LAMP_EM_FN double lamp_em_dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

LAMP_EM_FN double lamp_em_dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/* ---- fp16 and bf16 (core/tensor/half.h's rules) ---------------------------------------------- */

/* x >> shift (1 <= shift <= 31) rounded to nearest, ties to even. */
LAMP_EM_FN uint32_t lamp_em_shift_round(uint32_t x, uint32_t shift) {
  uint32_t kept = x >> shift, dropped = x & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return kept + (dropped > half || (dropped == half && (kept & 1u)) ? 1u : 0u);
}

/*
** float -> fp16. NaN: quiet, sign and the top 10 payload bits kept (as F16C). |x| >= 65520
** (halfway between the largest fp16 and 2^16) is inf. Normals drop 13 mantissa bits after
** moving the exponent bias from 127 to 15 (a carry correctly moves into the exponent). Below
** 2^-14 the result is a subnormal count of 2^-24 units, and |x| <= 2^-25 (a tie with 0) is 0.
*/
LAMP_EM_FN uint16_t lamp_em_f32_to_f16(float x) {
  uint32_t bits = lamp_em_bits(x), a = bits & LAMP_EM_ABS;
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  if (a > LAMP_EM_INF) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) return (uint16_t)(sign | lamp_em_shift_round(a - 0x38000000u, 13));
  if (a <= 0x33000000u) return sign;
  uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | lamp_em_shift_round(mantissa, 126u - (a >> 23)));
}

/*
** fp16 -> float, exact. inf stays inf; NaN comes back quiet with its payload (as F16C). A
** subnormal m * 2^-24 is computed as a float product, which is exact: m < 2^10 and the
** result is a normal float.
*/
LAMP_EM_FN float lamp_em_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return lamp_em_float(sign | LAMP_EM_INF | (mantissa ? 0x400000u : 0u) | (mantissa << 13));
  if (exponent != 0) return lamp_em_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  return lamp_em_float(sign | lamp_em_bits(lamp_em_mul((float)mantissa, 0x1p-24f)));
}

/* float -> bf16: the top half rounded to nearest even (a carry gives the next binade or inf);
   NaN truncated and made quiet, so a payload in the low half cannot round it into inf. */
LAMP_EM_FN uint16_t lamp_em_f32_to_bf16(float x) {
  uint32_t bits = lamp_em_bits(x);
  if ((bits & LAMP_EM_ABS) > LAMP_EM_INF) return (uint16_t)((bits >> 16) | 0x0040u);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

LAMP_EM_FN float lamp_em_bf16_to_f32(uint16_t h) { return lamp_em_float((uint32_t)h << 16); }

/* x rounded to `via` and widened back (lamp_round_through's per-element map). */
LAMP_EM_FN float lamp_em_round_via(float x, lamp_dtype via) {
  if (via == LAMP_F16) return lamp_em_f16_to_f32(lamp_em_f32_to_f16(x));
  if (via == LAMP_BF16) return lamp_em_bf16_to_f32(lamp_em_f32_to_bf16(x));
  return x;
}

/* Element i of an f32/f16/bf16 array as fp32, and v stored there rounded to the array's dtype. */
LAMP_EM_FN float lamp_em_load(const void *p, lamp_dtype dtype, size_t i) {
  if (dtype == LAMP_F16) return lamp_em_f16_to_f32(((const uint16_t *)p)[i]);
  if (dtype == LAMP_BF16) return lamp_em_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

LAMP_EM_FN void lamp_em_store(void *p, lamp_dtype dtype, size_t i, float v) {
  if (dtype == LAMP_F16) ((uint16_t *)p)[i] = lamp_em_f32_to_f16(v);
  else if (dtype == LAMP_BF16) ((uint16_t *)p)[i] = lamp_em_f32_to_bf16(v);
  else ((float *)p)[i] = v;
}

/* ---- elementwise operations ------------------------------------------------------------------ */

/* ReLU: v <= 0 (either zero) gives +0, NaN passes (the comparison is false for NaN). */
LAMP_EM_FN float lamp_em_relu(float v) { return v <= 0.0f ? 0.0f : v; }

/* The bit pattern of +inf in a 16-bit dtype: larger magnitudes are NaN. */
LAMP_EM_FN uint16_t lamp_em_inf_bits(lamp_dtype dtype) { return dtype == LAMP_F16 ? 0x7c00u : 0x7f80u; }

/* ReLU on 16-bit bits: negative (sign set) and not NaN gives +0; the fp32 answer, unwidened. */
LAMP_EM_FN uint16_t lamp_em_relu_bits(uint16_t h, uint16_t inf_bits) {
  return ((h & 0x8000u) && (h & 0x7fffu) <= inf_bits) ? (uint16_t)0 : h;
}

/* The ReLU's gradient: dy where the forward output y > 0, else +0. */
LAMP_EM_FN float lamp_em_relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

/* The same on 16-bit bits: y > 0 exactly when 1 <= y <= inf as an unsigned pattern. */
LAMP_EM_FN uint16_t lamp_em_relu_grad_bits(uint16_t dy, uint16_t y, uint16_t inf_bits) {
  return (uint16_t)(y - 1u) < inf_bits ? dy : (uint16_t)0;
}

/* lamp_add's element: a + b in fp32, rectified from the same sum when `relu`. */
LAMP_EM_FN float lamp_em_sum(float a, float b, int relu) {
  float v = lamp_em_add(a, b);
  return relu ? lamp_em_relu(v) : v;
}

/* y + alpha * x: two roundings (lamp_axpy). */
LAMP_EM_FN float lamp_em_axpy(float y, float alpha, float x) { return lamp_em_add(y, lamp_em_mul(alpha, x)); }

/* Dropout's element: x * scale where the mask byte is set, else +0. */
LAMP_EM_FN float lamp_em_masked(uint8_t keep, float x, float scale) { return keep ? lamp_em_mul(x, scale) : 0.0f; }

/* sum_rows' output: alpha * sum, blended with the old value unless beta == 0 (then not read). */
LAMP_EM_FN float lamp_em_blend(float old, float sum, float alpha, float beta) {
  if (beta == 0.0f) return lamp_em_mul(alpha, sum);
  return lamp_em_add(lamp_em_mul(beta, old), lamp_em_mul(alpha, sum));
}

/* sum_rows' column: dy[0, c] + dy[1, c] + ... in fp32, rows in order (the CPU's order). */
LAMP_EM_FN float lamp_em_column_sum(const void *dy, lamp_dtype dtype, size_t rows, size_t cols, size_t c) {
  float acc = 0.0f;
  for (size_t r = 0; r < rows; r++) acc = lamp_em_add(acc, lamp_em_load(dy, dtype, r * cols + c));
  return acc;
}

/* ---- arg-max and cross-entropy --------------------------------------------------------------- */

/*
** Whether (v, i) beats the running (best, at) under the CPU's arg-max (lamp_cpu_argmax_fold):
** NaN is the largest value and the first NaN wins; otherwise the larger value wins and, on a
** tie, the smaller index. This is an order (not a scan), so lanes may fold their own elements
** and combine in any tree and still agree with the CPU's left-to-right fold. Start a fold from
** (-inf, LAMP_EM_NO_INDEX): a row of -inf then answers 0, as on the CPU.
*/
#define LAMP_EM_NO_INDEX ((size_t)-1)
LAMP_EM_FN int lamp_em_argmax_beats(float v, size_t i, float best, size_t at) {
  if (lamp_em_isnan(best)) return lamp_em_isnan(v) && i < at;
  if (lamp_em_isnan(v)) return 1;
  return v > best || (v == best && i < at);
}

/*
** exp(z) for the softmax (z = x - max <= 0). The CPU calls glibc's expf; the device's expf may
** be 2 ulp off, so the device takes exp in double and rounds once, which is the nearest float
** to exp(z) (glibc's expf agrees except in about 1e-4 of arguments, by 1 ulp: measured by
** tests/unit/test_cuda_math.c). Built on the host, this header uses expf itself.
*/
LAMP_EM_FN float lamp_em_exp_rounded(float z) { return (float)exp((double)z); }

LAMP_EM_FN float lamp_em_softmax_exp(float z) {
#ifdef __CUDA_ARCH__
  return lamp_em_exp_rounded(z);
#else
  return expf(z);
#endif
}

/* The gradient's scale (grad_scale / rows, rounded once to fp32; 0 for an empty batch). */
LAMP_EM_FN float lamp_em_ce_coef(float grad_scale, size_t rows) {
  return rows ? (float)((double)grad_scale / (double)rows) : 0.0f;
}

/* One row's loss: log(sum exp(x - max)) - (x_label - max), in double. */
LAMP_EM_FN double lamp_em_ce_loss(double sum_exp, float x_label, float max) {
  return log(sum_exp) - (double)(x_label - max);
}

/* One dlogits element: (softmax - onehot) * coef, the softmax divided in double, rounded once. */
LAMP_EM_FN float lamp_em_ce_grad(float x, float max, double sum_exp, int is_label, float coef) {
  float p = (float)((double)lamp_em_softmax_exp(x - max) / sum_exp);
  return lamp_em_mul(p - (is_label ? 1.0f : 0.0f), coef);
}

#endif
