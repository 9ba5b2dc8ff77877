/*
** The CUDA kernel side (core/backend/cuda: kernels, GEMM) before and without a GPU: every slot
** refuses bad arguments with the CPU backend's status and exact message (the same call on
** LAMP_CPU and on the slot), does nothing for empty work, and, on a machine without a driver,
** reports CUDA's own error for a launch, cuBLAS's for a GEMM and the runtime's for the fault
** record. The runtime side (module.c, ...) is replaced by runtime_stub.c, so this links only
** the kernel side's sources; no call here touches device memory.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda/channel_ops.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"

/* The runtime side is stubbed (runtime_stub.c). */

/* ---- the same refusal on both ----------------------------------------------------------------- */

/* The CPU's call first, its message kept, then the slot's: same status, same words. */
#define SAME(cpu_call, cuda_call, code)                                     \
  do {                                                                      \
    char cpu_message_[256];                                                 \
    assert_int_equal((cpu_call), (code));                                   \
    snprintf(cpu_message_, sizeof cpu_message_, "%s", lamp_last_error());   \
    assert_int_equal((cuda_call), (code));                                  \
    assert_string_equal(lamp_last_error(), cpu_message_);                   \
  } while (0)

static float f[4];
static int32_t labels[2];
static double loss;

static void elementwise_refusals_match_the_cpu(void **state) {
  (void)state;
  SAME(lamp_convert(LAMP_CPU, f, LAMP_I32, f, LAMP_F32, 2), lamp_cuda_convert(f, LAMP_I32, f, LAMP_F32, 2),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_convert(LAMP_CPU, f, LAMP_F32, NULL, LAMP_F16, 2), lamp_cuda_convert(f, LAMP_F32, NULL, LAMP_F16, 2),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_fill(LAMP_CPU, f, LAMP_U8, 2, 1.0f), lamp_cuda_fill(f, LAMP_U8, 2, 1.0f), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_add_bias_rows(LAMP_CPU, f, LAMP_F32, f, LAMP_I32, 1, 2),
       lamp_cuda_add_bias_rows(f, LAMP_F32, f, LAMP_I32, 1, 2), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_add_bias_rows(LAMP_CPU, f, LAMP_F32, NULL, LAMP_F32, 1, 2),
       lamp_cuda_add_bias_rows(f, LAMP_F32, NULL, LAMP_F32, 1, 2), LAMP_ERR_INVALID_ARG);
  SAME(lamp_relu_forward(LAMP_CPU, f, f, LAMP_I32, 2), lamp_cuda_relu_forward(f, f, LAMP_I32, 2),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_relu_backward(LAMP_CPU, f, f, NULL, LAMP_F32, 2), lamp_cuda_relu_backward(f, f, NULL, LAMP_F32, 2),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_round_through(LAMP_CPU, f, f, LAMP_I32, 2), lamp_cuda_round_through(f, f, LAMP_I32, 2),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_accumulate_rounded(LAMP_CPU, NULL, f, LAMP_F16, 2), lamp_cuda_accumulate_rounded(NULL, f, LAMP_F16, 2),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_round_stochastic(LAMP_CPU, f, LAMP_F32, f, 2, 1, 1), lamp_cuda_round_stochastic(f, LAMP_F32, f, 2, 1, 1),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_round_stochastic(LAMP_CPU, f, LAMP_BF16, NULL, 2, 1, 1),
       lamp_cuda_round_stochastic(f, LAMP_BF16, NULL, 2, 1, 1), LAMP_ERR_INVALID_ARG);
  SAME(lamp_scale(LAMP_CPU, NULL, 2, 1.0f), lamp_cuda_scale(NULL, 2, 1.0f), LAMP_ERR_INVALID_ARG);
  SAME(lamp_axpy(LAMP_CPU, f, NULL, 2, 1.0f), lamp_cuda_axpy(f, NULL, 2, 1.0f), LAMP_ERR_INVALID_ARG);
  SAME(lamp_add(LAMP_CPU, f, LAMP_F32, f, LAMP_F32, f, LAMP_U8, 2, 0),
       lamp_cuda_add(f, LAMP_F32, f, LAMP_F32, f, LAMP_U8, 2, 0), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_add_into(LAMP_CPU, f, LAMP_I32, f, LAMP_F32, 2), lamp_cuda_add_into(f, LAMP_I32, f, LAMP_F32, 2),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_apply_mask(LAMP_CPU, f, LAMP_F32, f, LAMP_I32, NULL, 1.0f, 2),
       lamp_cuda_apply_mask(f, LAMP_F32, f, LAMP_I32, NULL, 1.0f, 2), LAMP_ERR_UNSUPPORTED);
}

static void reduction_refusals_match_the_cpu(void **state) {
  (void)state;
  int32_t out[2];
  SAME(lamp_sum_rows(LAMP_CPU, NULL, f, LAMP_F32, 1, 2, 1.0f, 0.0f), lamp_cuda_sum_rows(NULL, f, LAMP_F32, 1, 2, 1.0f, 0.0f),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_sum_rows(LAMP_CPU, f, f, LAMP_U8, 1, 2, 1.0f, 0.0f), lamp_cuda_sum_rows(f, f, LAMP_U8, 1, 2, 1.0f, 0.0f),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_argmax_rows(LAMP_CPU, out, f, LAMP_F32, 2, 0), lamp_cuda_argmax_rows(out, f, LAMP_F32, 2, 0),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_argmax_rows(LAMP_CPU, out, f, LAMP_U8, 2, 2), lamp_cuda_argmax_rows(out, f, LAMP_U8, 2, 2),
       LAMP_ERR_UNSUPPORTED);
  SAME(lamp_argmax_rows(LAMP_CPU, out, f, LAMP_F32, 1, (size_t)INT32_MAX + 1),
       lamp_cuda_argmax_rows(out, f, LAMP_F32, 1, (size_t)INT32_MAX + 1), LAMP_ERR_INVALID_ARG);
  SAME(lamp_cross_entropy(LAMP_CPU, f, LAMP_F32, labels, 1, 2, 1.0f, &loss, f, LAMP_I32, NULL),
       lamp_cuda_cross_entropy(f, LAMP_F32, labels, 1, 2, 1.0f, &loss, f, LAMP_I32, NULL), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_cross_entropy(LAMP_CPU, f, LAMP_F32, labels, 1, 2, 1.0f, NULL, NULL, LAMP_F32, NULL),
       lamp_cuda_cross_entropy(f, LAMP_F32, labels, 1, 2, 1.0f, NULL, NULL, LAMP_F32, NULL), LAMP_ERR_INVALID_ARG);
  SAME(lamp_cross_entropy(LAMP_CPU, f, LAMP_F32, NULL, 1, 2, 1.0f, &loss, NULL, LAMP_F32, NULL),
       lamp_cuda_cross_entropy(f, LAMP_F32, NULL, 1, 2, 1.0f, &loss, NULL, LAMP_F32, NULL), LAMP_ERR_INVALID_ARG);
  SAME(lamp_unscale_and_check(LAMP_CPU, f, 2, 1.0f, NULL), lamp_cuda_unscale_and_check(f, 2, 1.0f, NULL),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_sum_squares(LAMP_CPU, f, 2, NULL), lamp_cuda_sum_squares(f, 2, NULL), LAMP_ERR_INVALID_ARG);
}

static void gemm_refusals_match_the_cpu(void **state) {
  (void)state;
  SAME(lamp_gemm(LAMP_CPU, 0, 0, 1, 1, 1, 1.0f, f, LAMP_U8, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1),
       lamp_cuda_gemm(0, 0, 1, 1, 1, 1.0f, f, LAMP_U8, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_gemm(LAMP_CPU, 0, 0, 1, 1, 1, 1.0f, f, LAMP_F32, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_I32, 1),
       lamp_cuda_gemm(0, 0, 1, 1, 1, 1.0f, f, LAMP_F32, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_I32, 1), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_gemm(LAMP_CPU, 0, 0, 2, 2, 3, 1.0f, f, LAMP_F32, 2, f, LAMP_F32, 2, 0.0f, f, LAMP_F32, 2),
       lamp_cuda_gemm(0, 0, 2, 2, 3, 1.0f, f, LAMP_F32, 2, f, LAMP_F32, 2, 0.0f, f, LAMP_F32, 2), LAMP_ERR_INVALID_ARG);
  SAME(lamp_gemm(LAMP_CPU, 1, 1, 2, 3, 2, 1.0f, f, LAMP_F32, 2, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 3),
       lamp_cuda_gemm(1, 1, 2, 3, 2, 1.0f, f, LAMP_F32, 2, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 3), LAMP_ERR_INVALID_ARG);
  SAME(lamp_gemm(LAMP_CPU, 0, 0, (size_t)1 << 31, 1, 1, 1.0f, f, LAMP_F32, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1),
       lamp_cuda_gemm(0, 0, (size_t)1 << 31, 1, 1, 1.0f, f, LAMP_F32, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1),
       LAMP_ERR_INVALID_ARG);
  SAME(lamp_gemm(LAMP_CPU, 0, 0, 1, 1, 1, 1.0f, f, LAMP_F32, 1, NULL, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1),
       lamp_cuda_gemm(0, 0, 1, 1, 1, 1.0f, f, LAMP_F32, 1, NULL, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1), LAMP_ERR_INVALID_ARG);
}

/* A 2x2 pool over 2x2 planes, and its copy with a zero stride. */
static const lamp_conv_geom pool_geom = {0, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1};
static const lamp_conv_geom zero_stride = {0, 2, 2, 2, 2, 0, 2, 0, 0, 1, 1, 1, 1};

static void layer_refusals_match_the_cpu(void **state) {
  (void)state;
  int32_t arg[2];
  SAME(lamp_maxpool_forward(LAMP_CPU, f, LAMP_F32, arg, f, LAMP_U8, 1, &pool_geom),
       lamp_cuda_maxpool_forward(f, LAMP_F32, arg, f, LAMP_U8, 1, &pool_geom), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_maxpool_backward(LAMP_CPU, f, LAMP_I32, f, LAMP_F32, arg, 1, &pool_geom),
       lamp_cuda_maxpool_backward(f, LAMP_I32, f, LAMP_F32, arg, 1, &pool_geom), LAMP_ERR_UNSUPPORTED);
  SAME(lamp_avgpool_forward(LAMP_CPU, f, LAMP_F32, f, LAMP_F32, 1, &zero_stride),
       lamp_cuda_avgpool_forward(f, LAMP_F32, f, LAMP_F32, 1, &zero_stride), LAMP_ERR_INVALID_ARG);
  SAME(lamp_avgpool_backward(LAMP_CPU, f, LAMP_F16, f, LAMP_U8, 1, &pool_geom),
       lamp_cuda_avgpool_backward(f, LAMP_F16, f, LAMP_U8, 1, &pool_geom), LAMP_ERR_UNSUPPORTED);
  lamp_batchnorm_args a = {.batch = 1, .channels = 1, .plane = 2, .x = f, .x_dtype = LAMP_I32, .y = f,
                           .y_dtype = LAMP_F32, .saved = f};
  SAME(lamp_batchnorm_forward(LAMP_CPU, &a), lamp_cuda_batchnorm_forward(&a), LAMP_ERR_UNSUPPORTED);
  a.x_dtype = LAMP_F32, a.y = NULL, a.dy = f, a.dy_dtype = LAMP_F32, a.dx = f, a.dx_dtype = LAMP_U8;
  SAME(lamp_batchnorm_backward(LAMP_CPU, &a), lamp_cuda_batchnorm_backward(&a), LAMP_ERR_UNSUPPORTED);
  a.dx_dtype = LAMP_F32, a.saved = NULL;
  SAME(lamp_batchnorm_backward(LAMP_CPU, &a), lamp_cuda_batchnorm_backward(&a), LAMP_ERR_INVALID_ARG);
  /* what the CPU would read through a NULL, the slot refuses by name */
  assert_int_equal(lamp_cuda_maxpool_forward(f, LAMP_F32, arg, NULL, LAMP_F32, 1, &pool_geom), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "maxpool_forward: x is NULL");
  a.saved = f, a.training = 1, a.y = f;
  assert_int_equal(lamp_cuda_batchnorm_forward(&a), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "batchnorm_forward: running_mean is NULL");
}

/* Nothing to do means no launch: OK even without a driver, and NULL data is fine. */
static void empty_work_launches_nothing(void **state) {
  (void)state;
  assert_int_equal(lamp_cuda_convert(NULL, LAMP_F16, NULL, LAMP_F32, 0), LAMP_OK);
  assert_int_equal(lamp_cuda_fill(NULL, LAMP_BF16, 0, 1.0f), LAMP_OK);
  assert_int_equal(lamp_cuda_relu_forward(NULL, NULL, LAMP_F32, 0), LAMP_OK);
  assert_int_equal(lamp_cuda_round_stochastic(NULL, LAMP_BF16, NULL, 0, 1, 1), LAMP_OK);
  assert_int_equal(lamp_cuda_add(NULL, LAMP_F32, NULL, LAMP_F16, NULL, LAMP_BF16, 0, 1), LAMP_OK);
  assert_int_equal(lamp_cuda_argmax_rows(NULL, NULL, LAMP_F32, 0, 0), LAMP_OK);
  int found_inf = 0;
  assert_int_equal(lamp_cuda_unscale_and_check(NULL, 0, 0.5f, &found_inf), LAMP_OK);
  assert_int_equal(lamp_cuda_gemm(0, 0, 0, 3, 3, 1.0f, NULL, LAMP_F32, 3, NULL, LAMP_F32, 3, 0.0f, NULL, LAMP_F32, 3),
                   LAMP_OK);
  assert_int_equal(lamp_cuda_gemm(1, 0, 3, 0, 3, 1.0f, NULL, LAMP_F16, 3, NULL, LAMP_F16, 3, 0.0f, NULL, LAMP_BF16, 3),
                   LAMP_OK);
  assert_int_equal(lamp_cuda_maxpool_forward(NULL, LAMP_F32, NULL, NULL, LAMP_F32, 0, &pool_geom), LAMP_OK);
  assert_int_equal(lamp_cuda_avgpool_backward(NULL, LAMP_BF16, NULL, LAMP_F16, 0, &pool_geom), LAMP_OK);
  lamp_batchnorm_args none = {.batch = 4, .channels = 0, .plane = 9, .x_dtype = LAMP_F32, .saved = f};
  assert_int_equal(lamp_cuda_batchnorm_forward(&none), LAMP_OK); /* inference over no channels */
  assert_int_equal(lamp_cuda_batchnorm_backward(&none), LAMP_OK);
  assert_int_equal(lamp_cuda_kernel_faults(), LAMP_OK); /* no record yet, nothing to report */
}

/* Without a driver, each path reports the library's own words (only checked on such a machine:
   with a GPU these calls would run on host memory). */
static void without_a_driver_each_error_names_its_source(void **state) {
  (void)state;
  int count = 0;
  cudaError_t probe = cudaGetDeviceCount(&count);
  cudaGetLastError(); /* not sticky, cleared */
  if (probe != cudaErrorInsufficientDriver) {
    print_message("a CUDA driver is present (cudaGetDeviceCount: %s): skipped\n", cudaGetErrorName(probe));
    skip();
  }
  assert_int_equal(lamp_cuda_relu_forward(f, f, LAMP_F32, 2), LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: relu_forward: cudaErrorInsufficientDriver: CUDA driver version is "
                                         "insufficient for CUDA runtime version");
  assert_int_equal(lamp_cuda_gemm(0, 0, 1, 1, 1, 1.0f, f, LAMP_F32, 1, f, LAMP_F32, 1, 0.0f, f, LAMP_F32, 1),
                   LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: gemm: cublasCreate: CUBLAS_STATUS_NOT_INITIALIZED: the library was not "
                                         "initialized");
  assert_int_equal(lamp_cuda_cross_entropy(f, LAMP_F32, labels, 1, 2, 1.0f, &loss, NULL, LAMP_F32, NULL),
                   LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: the kernels' fault record (cudaHostAlloc): cudaErrorInsufficientDriver: "
                                         "CUDA driver version is insufficient for CUDA runtime version");
  assert_int_equal(lamp_cuda_round_stochastic(f, LAMP_F16, f, 2, 1, 1), LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: round_stochastic: cudaErrorInsufficientDriver: CUDA driver version is "
                                         "insufficient for CUDA runtime version");
  assert_int_equal(lamp_cuda_maxpool_forward(f, LAMP_F32, labels, f, LAMP_F32, 1, &pool_geom), LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: maxpool_forward: cudaErrorInsufficientDriver: CUDA driver version is "
                                         "insufficient for CUDA runtime version");
  lamp_batchnorm_args a = {.batch = 1, .channels = 1, .plane = 2, .x = f, .x_dtype = LAMP_F32, .y = f,
                           .y_dtype = LAMP_F32, .running_mean = f, .running_var = f, .saved = f};
  assert_int_equal(lamp_cuda_batchnorm_forward(&a), LAMP_ERR_SYSTEM); /* inference: no scratch, one launch */
  assert_string_equal(lamp_last_error(), "cuda: batchnorm_forward: cudaErrorInsufficientDriver: CUDA driver version "
                                         "is insufficient for CUDA runtime version");
  lamp_cuda_kernels_release(); /* nothing was made: a no-op */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(elementwise_refusals_match_the_cpu),
      cmocka_unit_test(reduction_refusals_match_the_cpu),
      cmocka_unit_test(gemm_refusals_match_the_cpu),
      cmocka_unit_test(layer_refusals_match_the_cpu),
      cmocka_unit_test(empty_work_launches_nothing),
      cmocka_unit_test(without_a_driver_each_error_names_its_source),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
