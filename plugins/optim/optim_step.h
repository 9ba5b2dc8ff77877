/*
** What the optimizer plugins' steps share on the host side: the checks every step makes, the
** members of lamp_optim_step a core older than these headers does not pass, and, in a build with
** the CUDA steps (LAMP_OPTIM_CUDA=1, where the toolkit was found), their entry points.
*/
#ifndef LAMP_OPTIM_STEP_H
#define LAMP_OPTIM_STEP_H

#include <stdint.h>

#include "lamp/plugin.h"

#include "optim_kernel.h"

#ifndef LAMP_OPTIM_CUDA
#define LAMP_OPTIM_CUDA 0
#endif

/* The devices whose memory the step takes: the CUDA step exists only where it was built. */
#if LAMP_OPTIM_CUDA
#define LAMP_OPTIM_DEVICES (LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA))
#define LAMP_OPTIM_DEVICE_NAMES "cpu and cuda"
#else
#define LAMP_OPTIM_DEVICES LAMP_BIT(LAMP_CPU)
#define LAMP_OPTIM_DEVICE_NAMES "cpu only"
#endif

/* Whether the core's step struct has `member`: a 1.0 core's ends at hparams, a 1.1 core's at
   stream. */
#define LAMP_STEP_HAS(st, member)                                                                  \
  (offsetof(lamp_optim_step, member) + sizeof((st)->member) <= (st)->struct_size)

/* The 16-bit weights to write in the same pass, or NULL (absent before ABI 1.2). */
static inline uint16_t *lamp_optim_weights_out(const lamp_optim_step *st) {
  return LAMP_STEP_HAS(st, weights_out_dtype) ? (uint16_t *)st->weights_out : NULL;
}

/* The core's queue for a queued device (NULL: the default stream; absent before ABI 1.1). */
static inline void *lamp_optim_stream(const lamp_optim_step *st) {
  return LAMP_STEP_HAS(st, stream) ? st->stream : NULL;
}

/*
** The CPU step's rounding of a chunk into weights_out: optim_kernel.h's code, vectorised for AVX2
** for bf16, and for fp16 F16C's conversion where the CPU has it (to nearest even, NaN kept quiet:
** the same bits, as the core's F16C path is checked against the same scalar code on every
** pattern in tests/unit/test_half.c). F16C in its 128-bit form: VEX.128 leaves no dirty upper
** register state for the SSE code around it.
*/
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#include <immintrin.h>
__attribute__((target("f16c"))) static void lamp_optim_to_f16_f16c(uint16_t *out, const float *p,
                                                                   size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storel_epi64((__m128i *)(void *)(out + i),
                     _mm_cvtps_ph(_mm_loadu_ps(p + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) out[i] = lamp_optim_to_f16(p[i]);
}
/* bf16: the same integer code, vectorised 8 lanes wide; vzeroupper before returning to SSE. */
__attribute__((target("avx2"))) static void lamp_optim_to_bf16_avx2(uint16_t *restrict out,
                                                                    const float *restrict p,
                                                                    size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) /* fixed blocks: vectorised at -O2 too */
    for (size_t j = i; j < i + 16; j++) out[j] = lamp_optim_to_bf16(p[j]);
  for (; i < n; i++) out[i] = lamp_optim_to_bf16(p[i]);
  _mm256_zeroupper();
}
/* With AVX512_BF16, VCVTNEPS2BF16 rounds to nearest even and quiets a NaN as lamp_optim_to_bf16
   does, in one instruction, but reads a subnormal as zero: a block of 16 holding one keeps the
   integer code. On the bf16 MLP the AVX2 loop was about 6 % of a step. */
__attribute__((target("avx512f,avx512bf16"))) static void
lamp_optim_to_bf16_avx512bf16(uint16_t *restrict out, const float *restrict p, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i b = _mm512_loadu_si512((const void *)(p + i));
    __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
    if (_mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                                _mm512_set1_epi32(0x007fffff)))
      for (size_t j = i; j < i + 16; j++) out[j] = lamp_optim_to_bf16(p[j]);
    else
      _mm256_storeu_si256((__m256i *)(void *)(out + i),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(b)));
  }
  for (; i < n; i++) out[i] = lamp_optim_to_bf16(p[i]);
  _mm256_zeroupper();
}
#define LAMP_OPTIM_CPU_HAS(feature) __builtin_cpu_supports(feature)
#else
#define lamp_optim_to_bf16_avx512bf16(out, p, n) lamp_optim_round_out((out), (p), (n), 1)
#define lamp_optim_to_f16_f16c(out, p, n) lamp_optim_round_out((out), (p), (n), 0)
#define lamp_optim_to_bf16_avx2(out, p, n) lamp_optim_round_out((out), (p), (n), 1)
#define LAMP_OPTIM_CPU_HAS(feature) 0
#endif

static inline void lamp_optim_cpu_round_out(uint16_t *out, const float *p, size_t n, int is_bf16) {
  if (!is_bf16 && LAMP_OPTIM_CPU_HAS("f16c"))
    lamp_optim_to_f16_f16c(out, p, n);
  else if (is_bf16 && LAMP_OPTIM_CPU_HAS("avx512bf16"))
    lamp_optim_to_bf16_avx512bf16(out, p, n);
  else if (is_bf16 && LAMP_OPTIM_CPU_HAS("avx2"))
    lamp_optim_to_bf16_avx2(out, p, n);
  else
    lamp_optim_round_out(out, p, n, is_bf16);
}

/* The checks every optimizer's step makes before touching memory. */
static inline lamp_status lamp_optim_check_step(const lamp_host *h, lamp_ctx *ctx,
                                                const lamp_optim_step *st) {
  const size_t need = offsetof(lamp_optim_step, hparams) + sizeof st->hparams;
  if (st->struct_size < need)
    return h->set_error(ctx, LAMP_ERR_INTERNAL, "step struct is %u bytes, need at least %zu",
                        (unsigned)st->struct_size, need);
  if (st->device >= LAMP_DEVICE_COUNT || (LAMP_OPTIM_DEVICES & LAMP_BIT(st->device)) == 0)
    return h->set_error(ctx, LAMP_ERR_UNSUPPORTED, "device %u is not supported (%s)",
                        (unsigned)st->device, LAMP_OPTIM_DEVICE_NAMES);
  if (st->step == 0)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG, "step counter is 0; the first step is 1");
  if (lamp_optim_weights_out(st) != NULL && st->weights_out_dtype != LAMP_F16 &&
      st->weights_out_dtype != LAMP_BF16)
    return h->set_error(ctx, LAMP_ERR_INVALID_ARG,
                        "weights_out dtype must be f16 (1) or bf16 (2), got %u",
                        (unsigned)st->weights_out_dtype);
  return LAMP_OK;
}

#if LAMP_OPTIM_CUDA
#include "adam_update.h"
#include "sgd_update.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A plugin object's device side: the device table of its segments, as last uploaded. */
typedef struct lamp_optim_cuda lamp_optim_cuda;

/* At create: an empty device side, bound to the run's GPU when the run trains on one (no CUDA
   call otherwise, so a machine without a driver creates the CPU step as before). */
lamp_status lamp_optim_cuda_new(const lamp_host *h, lamp_ctx *ctx, lamp_optim_cuda **out);
void lamp_optim_cuda_free(lamp_optim_cuda *cu); /* NULL is a no-op */

/* The steps on device memory, enqueued on the step's stream; the scalars are the host's. */
lamp_status lamp_sgd_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                               const lamp_optim_step *st, const lamp_sgd_scalars *s,
                               unsigned flags);
lamp_status lamp_adam_cuda_step(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                const lamp_optim_step *st, const lamp_adam_scalars *s,
                                unsigned flags);

#ifdef __cplusplus
}
#endif
#endif

#endif
