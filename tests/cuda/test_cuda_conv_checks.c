/*
** The CUDA convolution (core/backend/cuda/conv_cudnn.c, cudnn_lib.c) before and without a GPU:
** its refusals are the CPU's (status and words), an empty batch touches neither cuDNN nor the
** device where nothing is due, a missing libcudnn is named, an installed one is opened and its
** first GPU call's error is cuDNN's own, the engine filter keeps only what lamp's numerics
** allow, and the plan cache finds, fills and evicts its ways. The runtime side is stubbed
** (runtime_stub.c); no call here touches device memory.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda/conv_cache.h"
#include "backend/cuda/conv_kernels.h"
#include "backend/cuda/cudnn_lib.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"

/* The runtime side is stubbed (runtime_stub.c). */

/* ---- calls ------------------------------------------------------------------------------------ */

static float x[2 * 4 * 5 * 5], w[6 * 2 * 3 * 3], bias[6], y[2 * 6 * 3 * 3], gw[6 * 2 * 3 * 3], gb[6];

/* x [2, 4, 5, 5], 2 groups, W [6, 2, 3, 3], stride 2, padding 1: y [2, 6, 3, 3]; fp32 throughout. */
static lamp_conv2d_args args(void) {
  return (lamp_conv2d_args){
      .shape = {.batch = 2, .in_channels = 4, .out_channels = 6, .groups = 2, .height = 5, .width = 5, .kernel = 3,
                .stride = 2, .padding = 1, .dilation = 1, .out_h = 3, .out_w = 3},
      .compute = LAMP_F32, .x = x, .x_dtype = LAMP_F32, .weight = w, .bias = bias, .operand_dtype = LAMP_F32,
      .y = y, .y_dtype = LAMP_F32, .dy = y, .dy_dtype = LAMP_F32, .dx = x, .dx_dtype = LAMP_F32,
      .grad_weight = gw, .grad_bias = gb, .grad_dtype = LAMP_F32, .overwrite_grads = 1};
}

/* The CPU's call first (its plan freed), its message kept, then the slot's: same status, same words. */
static void same(lamp_status (*cpu)(lamp_device, void **, const lamp_conv2d_args *),
                 lamp_status (*cuda)(void **, const lamp_conv2d_args *), const lamp_conv2d_args *a,
                 lamp_status code) {
  char cpu_message[256];
  void *plan = NULL;
  assert_int_equal(cpu(LAMP_CPU, &plan, a), code);
  snprintf(cpu_message, sizeof cpu_message, "%s", lamp_last_error());
  lamp_conv2d_plan_free(LAMP_CPU, plan);
  plan = NULL;
  assert_int_equal(cuda(&plan, a), code);
  assert_string_equal(lamp_last_error(), cpu_message);
  assert_null(plan); /* a refused call makes no plan */
}

static void refusals_match_the_cpu(void **state) {
  (void)state;
  lamp_conv2d_args a = args();
  a.shape.groups = 0;
  same(lamp_conv2d_forward, lamp_cuda_conv2d_forward, &a, LAMP_ERR_INVALID_ARG);
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_INVALID_ARG);
  a = args();
  a.shape.groups = 3; /* 4 input channels */
  same(lamp_conv2d_forward, lamp_cuda_conv2d_forward, &a, LAMP_ERR_INVALID_ARG);
  a = args();
  a.shape.out_h = 0;
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_INVALID_ARG);
  a = args();
  a.x_dtype = LAMP_I32;
  same(lamp_conv2d_forward, lamp_cuda_conv2d_forward, &a, LAMP_ERR_UNSUPPORTED);
  a = args();
  a.compute = LAMP_U8;
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_UNSUPPORTED);
  a = args();
  a.y_dtype = LAMP_I32;
  same(lamp_conv2d_forward, lamp_cuda_conv2d_forward, &a, LAMP_ERR_UNSUPPORTED);
  a = args();
  a.dy_dtype = LAMP_I32;
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_UNSUPPORTED);
  a = args();
  a.dx_dtype = LAMP_U8;
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_UNSUPPORTED);
  a = args();
  a.grad_dtype = LAMP_I32;
  same(lamp_conv2d_backward, lamp_cuda_conv2d_backward, &a, LAMP_ERR_UNSUPPORTED);
}

/* 16-bit operands (what a device with native 16-bit GEMMs hands over) are accepted; the CPU
   refuses them, so only the CUDA side's refusal of a non-float operand dtype is checked. */
static void operand_dtype_is_checked(void **state) {
  (void)state;
  lamp_conv2d_args a = args();
  void *plan = NULL;
  a.operand_dtype = LAMP_I32;
  assert_int_equal(lamp_cuda_conv2d_forward(&plan, &a), LAMP_ERR_UNSUPPORTED);
  assert_string_equal(lamp_last_error(),
                      "conv2d_forward: dtype i32 not supported for operand (expected f32, f16 or bf16)");
  assert_null(plan);
}

/* An empty batch needs no library: checked first, while LAMP_CUDNN_LIBRARY names a missing file. */
static void an_empty_batch_needs_no_cudnn(void **state) {
  (void)state;
  setenv("LAMP_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
  lamp_conv2d_args a = args();
  void *plan = NULL;
  a.shape.batch = 0;
  assert_int_equal(lamp_cuda_conv2d_forward(&plan, &a), LAMP_OK);
  a.overwrite_grads = 0; /* gradients added: nothing to add */
  assert_int_equal(lamp_cuda_conv2d_backward(&plan, &a), LAMP_OK);
  assert_null(plan);
}

static void a_missing_library_is_named(void **state) {
  (void)state;
  const char *prefix = "conv2d_forward: device cuda: the cuDNN library /nonexistent/libcudnn.so.9 was not found (";
  setenv("LAMP_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
  lamp_conv2d_args a = args();
  void *plan = NULL;
  assert_int_equal(lamp_cuda_conv2d_forward(&plan, &a), LAMP_ERR_SYSTEM);
  assert_memory_equal(lamp_last_error(), prefix, strlen(prefix));
  assert_non_null(strstr(lamp_last_error(), "/nonexistent/libcudnn.so.9: cannot open shared object file"));
  assert_null(plan);
  assert_int_equal(lamp_cuda_conv2d_backward(&plan, &a), LAMP_ERR_SYSTEM);
  assert_memory_equal(lamp_last_error(), "conv2d_backward: device cuda: the cuDNN library", 47);
  unsetenv("LAMP_CUDNN_LIBRARY");
}

/* Without a driver: the installed library opens (the table is complete) and the first call that
   needs the GPU reports cuDNN's own error; an empty batch that writes its gradients reports the
   fill's launch, so the zeros were asked for. */
static void without_a_driver_cudnn_speaks(void **state) {
  (void)state;
  int count = 0;
  cudaError_t probe = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (probe != cudaErrorInsufficientDriver) {
    print_message("a CUDA driver is present (cudaGetDeviceCount: %s): skipped\n", cudaGetErrorName(probe));
    skip();
  }
  const lamp_cudnn_api *api = NULL;
  assert_int_equal(lamp_cudnn_api_get("test", &api), LAMP_OK);
  assert_int_equal(api->GetVersion() / 10000, CUDNN_MAJOR);
  lamp_conv2d_args a = args();
  void *plan = NULL;
  assert_int_equal(lamp_cuda_conv2d_forward(&plan, &a), LAMP_ERR_SYSTEM);
  assert_memory_equal(lamp_last_error(), "conv2d_forward: cudnn: cudnnCreate: ", 36);
  assert_null(plan);
  a.shape.batch = 0;
  assert_int_equal(lamp_cuda_conv2d_backward(&plan, &a), LAMP_ERR_SYSTEM);
  assert_string_equal(lamp_last_error(), "cuda: fill: cudaErrorInsufficientDriver: CUDA driver version is "
                                         "insufficient for CUDA runtime version");
  lamp_cudnn_release(); /* no handle was made: a no-op */
}

/* A backend descriptor is host state: made and finalized without a driver (a tensor). */
static void descriptors_need_no_driver(void **state) {
  (void)state;
  const lamp_cudnn_api *api = NULL;
  assert_int_equal(lamp_cudnn_api_get("test", &api), LAMP_OK);
  cudnnBackendDescriptor_t t = NULL;
  assert_int_equal(api->BackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t), CUDNN_STATUS_SUCCESS);
  cudnnDataType_t type = CUDNN_DATA_HALF;
  int64_t dims[4] = {2, 4, 5, 5}, strides[4] = {100, 25, 5, 1}, uid = 1, alignment = 16;
  assert_int_equal(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), 0);
  assert_int_equal(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), 0);
  assert_int_equal(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides), 0);
  assert_int_equal(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  assert_int_equal(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment), 0);
  assert_int_equal(api->BackendFinalize(t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(api->BackendDestroyDescriptor(t), CUDNN_STATUS_SUCCESS);
}

static void the_engine_filter(void **state) {
  (void)state;
  const cudnnBackendNumericalNote_t none[1] = {CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP};
  const cudnnBackendNumericalNote_t tc[2] = {CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP, CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
  const cudnnBackendNumericalNote_t down[1] = {CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS};
  assert_true(lamp_cuda_conv_engine_acceptable(none, 0, LAMP_F32));
  assert_true(lamp_cuda_conv_engine_acceptable(none, 1, LAMP_F32));
  assert_false(lamp_cuda_conv_engine_acceptable(tc, 2, LAMP_F32)); /* TF32 */
  assert_false(lamp_cuda_conv_engine_acceptable(down, 1, LAMP_F32));
  assert_true(lamp_cuda_conv_engine_acceptable(tc, 2, LAMP_BF16)); /* 16-bit operands on tensor cores */
  assert_true(lamp_cuda_conv_engine_acceptable(down, 1, LAMP_F16));
  const cudnnBackendNumericalNote_t refused[] = {
      CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
      CUDNN_NUMERICAL_NOTE_FFT, CUDNN_NUMERICAL_NOTE_WINOGRAD, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4,
      CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    assert_false(lamp_cuda_conv_engine_acceptable(&refused[i], 1, LAMP_F16));
    assert_false(lamp_cuda_conv_engine_acceptable(&refused[i], 1, LAMP_F32));
  }
}

/* The plan cache: a key is the shape, the compute dtype and the alignment; a hit is found in any
   way, a miss takes a free way, then the least recently used one. */
static void the_plan_cache_picks_ways(void **state) {
  (void)state;
  lamp_conv2d_args a = args();
  const void *aligned[] = {(void *)(uintptr_t)0x1000, (void *)(uintptr_t)0x2010, NULL};
  const void *odd[] = {(void *)(uintptr_t)0x1000, (void *)(uintptr_t)0x2012};
  lamp_conv_key k = lamp_cuda_conv_key(&a.shape, LAMP_F32, aligned, 3);
  assert_true(k.aligned);
  assert_false(lamp_cuda_conv_key(&a.shape, LAMP_F32, odd, 2).aligned);
  lamp_conv_key other = k;
  assert_true(lamp_cuda_conv_key_equal(&k, &other));
  other.shape.batch = 1; /* the last batch of an epoch */
  assert_false(lamp_cuda_conv_key_equal(&k, &other));
  other = k;
  other.compute = LAMP_BF16;
  assert_false(lamp_cuda_conv_key_equal(&k, &other));
  other = k;
  other.aligned = 0;
  assert_false(lamp_cuda_conv_key_equal(&k, &other));
  other = k;
  other.shape.dilation = 2;
  assert_false(lamp_cuda_conv_key_equal(&k, &other));

  lamp_conv_way ways[LAMP_CONV_CACHE_WAYS] = {0};
  const lamp_conv_way *view[LAMP_CONV_CACHE_WAYS];
  for (size_t i = 0; i < LAMP_CONV_CACHE_WAYS; i++) view[i] = &ways[i];
  int hit = 1;
  assert_int_equal(lamp_cuda_conv_pick(view, LAMP_CONV_CACHE_WAYS, &k, &hit), 0); /* empty: the first way */
  assert_false(hit);
  for (size_t i = 0; i < LAMP_CONV_CACHE_WAYS; i++) { /* full, batches 1..4, used in the order 3 1 4 2 */
    ways[i].built = 1;
    ways[i].key = k;
    ways[i].key.shape.batch = i + 1;
  }
  ways[0].used = 3, ways[1].used = 1, ways[2].used = 4, ways[3].used = 2;
  lamp_conv_key want = k;
  want.shape.batch = 3;
  assert_int_equal(lamp_cuda_conv_pick(view, LAMP_CONV_CACHE_WAYS, &want, &hit), 2);
  assert_true(hit);
  want.shape.batch = 5; /* a miss evicts the least recently used: way 1 */
  assert_int_equal(lamp_cuda_conv_pick(view, LAMP_CONV_CACHE_WAYS, &want, &hit), 1);
  assert_false(hit);
  ways[3].built = 0; /* a free way comes before any eviction */
  assert_int_equal(lamp_cuda_conv_pick(view, LAMP_CONV_CACHE_WAYS, &want, &hit), 3);
  assert_false(hit);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(refusals_match_the_cpu),   cmocka_unit_test(operand_dtype_is_checked),
      cmocka_unit_test(an_empty_batch_needs_no_cudnn), cmocka_unit_test(a_missing_library_is_named),
      cmocka_unit_test(without_a_driver_cudnn_speaks), cmocka_unit_test(descriptors_need_no_driver),
      cmocka_unit_test(the_engine_filter),          cmocka_unit_test(the_plan_cache_picks_ways),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
