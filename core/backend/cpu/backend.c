/*
** The CPU backend's table: OpenBLAS GEMMs and lamp's own kernels, run on the calling thread (and
** the pool's helpers) before each call returns, so it needs no queue, events or synchronisation,
** and its memory is the host's.
*/
#include <stdint.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_provider.h"

static int cpu_count(void) { return 1; }

unsigned lamp_cpu_caps_now(void) { return lamp_gemm_choice_has_bf16() ? LAMP_CAP_NATIVE_BF16_GEMM : 0u; }

static lamp_status cpu_move(void *dst, const void *src, size_t bytes) {
  memmove(dst, src, bytes);
  return LAMP_OK;
}

static void *cpu_host_view(const void *ptr) { return (void *)(uintptr_t)ptr; }

/* OpenBLAS has no 16-bit GEMM we can use (Debian's build lacks sbgemm): 16-bit operands are
   widened to fp32 first, so no LAMP_CAP_NATIVE_16BIT_GEMM, and callers that reuse an operand keep
   it widened themselves. Where oneDNN's bf16 GEMM was chosen (gemm_provider.h), two bf16
   operands are read as they are: LAMP_CAP_NATIVE_BF16_GEMM, known at run time. */
const lamp_backend lamp_cpu_backend = {
    .memory = {"cpu", lamp_host_alloc, lamp_host_free, lamp_host_zero},
    .caps = LAMP_CAP_HOST_VIEW,
    .count = cpu_count,
    .upload = cpu_move,
    .download = cpu_move,
    .copy = cpu_move,
    .host_view = cpu_host_view,
    .release_workspace = lamp_cpu_workspace_release,
    .gemm = lamp_cpu_gemm,
    .convert = lamp_cpu_convert,
    .fill = lamp_cpu_fill,
    .add_bias_rows = lamp_cpu_add_bias_rows,
    .sum_rows = lamp_cpu_sum_rows,
    .relu_forward = lamp_cpu_relu_forward,
    .relu_backward = lamp_cpu_relu_backward,
    .cross_entropy = lamp_cpu_cross_entropy,
    .argmax_rows = lamp_cpu_argmax_rows,
    .unscale_and_check = lamp_cpu_unscale_and_check,
    .round_through = lamp_cpu_round_through,
    .accumulate_rounded = lamp_cpu_accumulate_rounded,
    .scale = lamp_cpu_scale,
    .axpy = lamp_cpu_axpy,
    .sum_squares = lamp_cpu_sum_squares,
    .add_into = lamp_cpu_add_into,
    .add = lamp_cpu_add,
    .apply_mask = lamp_cpu_apply_mask,
    .maxpool_forward = lamp_cpu_maxpool_forward,
    .maxpool_backward = lamp_cpu_maxpool_backward,
    .avgpool_forward = lamp_cpu_avgpool_forward,
    .avgpool_backward = lamp_cpu_avgpool_backward,
    .conv2d_forward = lamp_cpu_conv2d_forward,
    .conv2d_backward = lamp_cpu_conv2d_backward,
    .conv2d_plan_free = lamp_cpu_conv2d_plan_free,
    .batchnorm_forward = lamp_cpu_batchnorm_forward,
    .batchnorm_backward = lamp_cpu_batchnorm_backward,
    .describe = lamp_cpu_describe,
    .round_stochastic = lamp_cpu_round_stochastic,
    .caps_now = lamp_cpu_caps_now,
};
