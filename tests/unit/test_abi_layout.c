/*
** The append-only rule's guard: the offset and size of every member of every public struct,
** and the value of every public constant, pinned for x86-64 (LP64). A failure here means a
** change broke plugins built against an earlier 1.x: append members at the end instead (and
** pin them here), or bump LAMP_ABI_MAJOR. Members added in 1.1, 1.2, 1.3 and 1.4 are marked.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lamp/plugin.h"

#define FIELD(type, m, off, size)                                                                  \
  do {                                                                                             \
    assert_int_equal(offsetof(type, m), (off));                                                    \
    assert_int_equal(sizeof(((type *)0)->m), (size));                                              \
  } while (0)

static void test_constants(void **state) {
  (void)state;
  assert_int_equal(LAMP_ABI_MAJOR, 1);
  assert_int_equal(LAMP_ABI_MINOR, 4);
  assert_int_equal(LAMP_OPTIM_CAP_WEIGHTS_OUT, 1);
  assert_int_equal(LAMP_PLUGIN_MAGIC, 0x504d414c);
  assert_string_equal(LAMP_ENTRY_SYMBOL, "lamp_plugin_entry_v1");
  assert_int_equal(LAMP_OK, 0);
  assert_int_equal(LAMP_ERR_SYSTEM, 1);
  assert_int_equal(LAMP_ERR_INTERNAL, 2);
  assert_int_equal(LAMP_ERR_INVALID_ARG, 3);
  assert_int_equal(LAMP_ERR_INVALID_USAGE, 4);
  assert_int_equal(LAMP_ERR_UNSUPPORTED, 5);
  assert_int_equal(LAMP_ERR_REMOTE, 6);
  assert_int_equal(LAMP_ERR_NUMERIC, 7);
  assert_int_equal(LAMP_KIND_PRECISION, 1);
  assert_int_equal(LAMP_KIND_COMM, 2);
  assert_int_equal(LAMP_KIND_OPTIM, 3);
  assert_int_equal(LAMP_F32, 0);
  assert_int_equal(LAMP_F16, 1);
  assert_int_equal(LAMP_BF16, 2);
  assert_int_equal(LAMP_I32, 3);
  assert_int_equal(LAMP_U8, 4);
  assert_int_equal(LAMP_CPU, 0);
  assert_int_equal(LAMP_CUDA, 1);
  assert_int_equal(LAMP_LOG_ERROR, 0);
  assert_int_equal(LAMP_LOG_WARN, 1);
  assert_int_equal(LAMP_LOG_INFO, 2);
  assert_int_equal(LAMP_LOG_DEBUG, 3);
  assert_int_equal(LAMP_MEM_PARAMS, 0);
  assert_int_equal(LAMP_MEM_GRADS, 1);
  assert_int_equal(LAMP_MEM_MASTER, 2);
  assert_int_equal(LAMP_MEM_OPTIM_STATE, 3);
  assert_int_equal(LAMP_MEM_ACTIVATIONS, 4);
  assert_int_equal(LAMP_MEM_WORKSPACE, 5);
  assert_int_equal(LAMP_MEM_DATA, 6);
  assert_int_equal(LAMP_REDUCE_SUM, 0);
  assert_int_equal(LAMP_REDUCE_MAX, 1);
  assert_int_equal(LAMP_REDUCE_MIN, 2);
  assert_int_equal(LAMP_POLICY_MASTER_WEIGHTS, 1);
  assert_int_equal(LAMP_POLICY_LOSS_SCALING, 2);
  assert_int_equal(LAMP_POLICY_STOCHASTIC_ROUNDING, 4); /* ABI 1.4 */
  assert_int_equal(sizeof(lamp_status), 4);
  assert_int_equal(sizeof(lamp_dtype), 4);
  assert_int_equal(sizeof(lamp_device), 4);
  assert_int_equal(sizeof(lamp_reduce_op), 4);
  assert_int_equal(sizeof(lamp_log_level), 4);
  assert_int_equal(sizeof(lamp_mem_tag), 4);
}

static void test_param(void **state) {
  (void)state;
  FIELD(lamp_param, name, 0, 8);
  FIELD(lamp_param, default_value, 8, 8);
  FIELD(lamp_param, min_value, 16, 8);
  FIELD(lamp_param, max_value, 24, 8);
  FIELD(lamp_param, help, 32, 8);
  assert_int_equal(sizeof(lamp_param), 40);
}

/* 1.4: text options, an array element like lamp_param (it cannot grow). */
static void test_text_param(void **state) {
  (void)state;
  FIELD(lamp_text_param, name, 0, 8);
  FIELD(lamp_text_param, default_value, 8, 8);
  FIELD(lamp_text_param, choices, 16, 8);
  FIELD(lamp_text_param, help, 24, 8);
  assert_int_equal(sizeof(lamp_text_param), 32);
}

static void test_plugin_header(void **state) {
  (void)state;
  FIELD(lamp_plugin, magic, 0, 4);
  FIELD(lamp_plugin, struct_size, 4, 4);
  FIELD(lamp_plugin, abi_major, 8, 2);
  FIELD(lamp_plugin, abi_minor, 10, 2);
  FIELD(lamp_plugin, kind, 12, 4);
  FIELD(lamp_plugin, name, 16, 8);
  FIELD(lamp_plugin, version, 24, 8);
  FIELD(lamp_plugin, description, 32, 8);
  FIELD(lamp_plugin, devices, 40, 4);
  FIELD(lamp_plugin, dtypes, 44, 4);
  FIELD(lamp_plugin, params, 48, 8);
  FIELD(lamp_plugin, n_params, 56, 4);
  FIELD(lamp_plugin, probe, 64, 8);
  assert_int_equal(sizeof(lamp_plugin), 72);
}

static void test_host(void **state) {
  (void)state;
  FIELD(lamp_host, struct_size, 0, 4);
  FIELD(lamp_host, abi_major, 4, 2);
  FIELD(lamp_host, abi_minor, 6, 2);
  FIELD(lamp_host, core_version, 8, 8);
  FIELD(lamp_host, log, 16, 8);
  FIELD(lamp_host, set_error, 24, 8);
  FIELD(lamp_host, alloc, 32, 8);
  FIELD(lamp_host, free, 40, 8);
  FIELD(lamp_host, unscale_and_check, 48, 8);
  FIELD(lamp_host, abort_flag, 56, 8);
  /* 1.1 */
  FIELD(lamp_host, device_count, 64, 8);
  FIELD(lamp_host, device_ordinal, 72, 8);
  FIELD(lamp_host, run_device, 80, 8);
  FIELD(lamp_host, stream, 88, 8);
  FIELD(lamp_host, copy, 96, 8);
  FIELD(lamp_host, synchronize, 104, 8);
  /* 1.4 */
  FIELD(lamp_host, option_text, 112, 8);
  FIELD(lamp_host, gemm, 120, 8);
  assert_int_equal(sizeof(lamp_host), 128);
  /* A 1.0 core's table ends at abort_flag; LAMP_HOST_HAS tells a plugin so. */
  lamp_host old = {.struct_size = 64};
  assert_true(LAMP_HOST_HAS(&old, abort_flag));
  assert_false(LAMP_HOST_HAS(&old, device_count));
  lamp_host now = {.struct_size = sizeof(lamp_host)};
  assert_true(LAMP_HOST_HAS(&now, synchronize));
  assert_true(LAMP_HOST_HAS(&now, gemm));
  lamp_host v13 = {.struct_size = 112}; /* a 1.3 core's table ends at synchronize */
  assert_true(LAMP_HOST_HAS(&v13, synchronize));
  assert_false(LAMP_HOST_HAS(&v13, option_text));
}

static void test_precision(void **state) {
  (void)state;
  FIELD(lamp_precision_policy, struct_size, 0, 4);
  FIELD(lamp_precision_policy, weight_dtype, 4, 4);
  FIELD(lamp_precision_policy, compute_dtype, 8, 4);
  FIELD(lamp_precision_policy, activation_dtype, 12, 4);
  FIELD(lamp_precision_policy, grad_dtype, 16, 4);
  FIELD(lamp_precision_policy, accum_dtype, 20, 4);
  FIELD(lamp_precision_policy, flags, 24, 4);
  assert_int_equal(sizeof(lamp_precision_policy), 28);

  FIELD(lamp_scaler_stats, struct_size, 0, 4);
  FIELD(lamp_scaler_stats, scale, 8, 8);
  FIELD(lamp_scaler_stats, skipped_steps, 16, 8);
  FIELD(lamp_scaler_stats, growth_tracker, 24, 8);
  assert_int_equal(sizeof(lamp_scaler_stats), 32);

  FIELD(lamp_precision_v1, hdr, 0, 72);
  FIELD(lamp_precision_v1, create, 72, 8);
  FIELD(lamp_precision_v1, destroy, 80, 8);
  FIELD(lamp_precision_v1, policy, 88, 8);
  FIELD(lamp_precision_v1, loss_scale, 96, 8);
  FIELD(lamp_precision_v1, update, 104, 8);
  FIELD(lamp_precision_v1, stats, 112, 8);
  FIELD(lamp_precision_v1, save_state, 120, 8);
  FIELD(lamp_precision_v1, load_state, 128, 8);
  FIELD(lamp_precision_v1, text_params, 136, 8);  /* 1.4 */
  FIELD(lamp_precision_v1, n_text_params, 144, 4); /* 1.4 */
  assert_int_equal(sizeof(lamp_precision_v1), 152);
}

static void test_comm(void **state) {
  (void)state;
  FIELD(lamp_comm_v1, hdr, 0, 72);
  FIELD(lamp_comm_v1, create, 72, 8);
  FIELD(lamp_comm_v1, destroy, 80, 8);
  FIELD(lamp_comm_v1, rank, 88, 8);
  FIELD(lamp_comm_v1, size, 96, 8);
  FIELD(lamp_comm_v1, all_reduce, 104, 8);
  FIELD(lamp_comm_v1, broadcast, 112, 8);
  FIELD(lamp_comm_v1, barrier, 120, 8);
  FIELD(lamp_comm_v1, all_reduce_start, 128, 8);
  FIELD(lamp_comm_v1, wait, 136, 8);
  FIELD(lamp_comm_v1, all_gather, 144, 8);
  FIELD(lamp_comm_v1, reduce_scatter, 152, 8);
  FIELD(lamp_comm_v1, create_with_bootstrap, 160, 8); /* 1.3 */
  FIELD(lamp_comm_v1, all_reduce_enqueue, 168, 8);    /* 1.3 */
  FIELD(lamp_comm_v1, wait_stream, 176, 8);           /* 1.3 */
  FIELD(lamp_comm_v1, poll, 184, 8);                  /* 1.3 */
  FIELD(lamp_comm_v1, text_params, 192, 8);           /* 1.4 */
  FIELD(lamp_comm_v1, n_text_params, 200, 4);         /* 1.4 */
  assert_int_equal(sizeof(lamp_comm_v1), 208);
}

/* 1.3: the core's bootstrap, lent to create_with_bootstrap; it grows at the end too. */
static void test_bootstrap(void **state) {
  (void)state;
  FIELD(lamp_bootstrap, struct_size, 0, 4);
  FIELD(lamp_bootstrap, rank, 4, 4);
  FIELD(lamp_bootstrap, size, 8, 4);
  FIELD(lamp_bootstrap, local_rank, 12, 4);
  FIELD(lamp_bootstrap, local_size, 16, 4);
  FIELD(lamp_bootstrap, impl, 24, 8);
  FIELD(lamp_bootstrap, broadcast, 32, 8);
  FIELD(lamp_bootstrap, all_gather, 40, 8);
  FIELD(lamp_bootstrap, barrier, 48, 8);
  assert_int_equal(sizeof(lamp_bootstrap), 56);
}

static void test_optim(void **state) {
  (void)state;
  FIELD(lamp_optim_slot, name, 0, 8);
  FIELD(lamp_optim_slot, dtype, 8, 4);
  assert_int_equal(sizeof(lamp_optim_slot), 16);

  FIELD(lamp_optim_segment, offset, 0, 8);
  FIELD(lamp_optim_segment, count, 8, 8);
  FIELD(lamp_optim_segment, lr_mult, 16, 4);
  FIELD(lamp_optim_segment, decay_mult, 20, 4);
  assert_int_equal(sizeof(lamp_optim_segment), 24);

  FIELD(lamp_optim_step, struct_size, 0, 4);
  FIELD(lamp_optim_step, device, 4, 4);
  FIELD(lamp_optim_step, n, 8, 8);
  FIELD(lamp_optim_step, params, 16, 8);
  FIELD(lamp_optim_step, grads, 24, 8);
  FIELD(lamp_optim_step, slots, 32, 8);
  FIELD(lamp_optim_step, segments, 40, 8);
  FIELD(lamp_optim_step, n_segments, 48, 8);
  FIELD(lamp_optim_step, step, 56, 8);
  FIELD(lamp_optim_step, lr, 64, 8);
  FIELD(lamp_optim_step, grad_scale, 72, 8);
  FIELD(lamp_optim_step, hparams, 80, 8);
  FIELD(lamp_optim_step, stream, 88, 8); /* 1.1 */
  FIELD(lamp_optim_step, weights_out, 96, 8);       /* 1.2 */
  FIELD(lamp_optim_step, weights_out_dtype, 104, 4); /* 1.2 */
  FIELD(lamp_optim_step, tensors, 112, 8);           /* 1.4 */
  FIELD(lamp_optim_step, n_tensors, 120, 8);         /* 1.4 */
  assert_int_equal(sizeof(lamp_optim_step), 128);
  lamp_optim_step v13 = {.struct_size = 112}; /* a 1.3 core's step ends at weights_out_dtype */
  assert_true(LAMP_OPTIM_STEP_HAS(&v13, weights_out_dtype));
  assert_false(LAMP_OPTIM_STEP_HAS(&v13, tensors));
  lamp_optim_step now = {.struct_size = sizeof(lamp_optim_step)};
  assert_true(LAMP_OPTIM_STEP_HAS(&now, n_tensors));

  /* 1.4: the tensor table's element (it cannot grow either). */
  FIELD(lamp_optim_tensor, name, 0, 8);
  FIELD(lamp_optim_tensor, ndim, 8, 4);
  FIELD(lamp_optim_tensor, shape, 16, 8);
  FIELD(lamp_optim_tensor, offset, 24, 8);
  FIELD(lamp_optim_tensor, count, 32, 8);
  FIELD(lamp_optim_tensor, segment, 40, 8);
  assert_int_equal(sizeof(lamp_optim_tensor), 48);

  FIELD(lamp_optim_v1, hdr, 0, 72);
  FIELD(lamp_optim_v1, create, 72, 8);
  FIELD(lamp_optim_v1, destroy, 80, 8);
  FIELD(lamp_optim_v1, slots, 88, 8);
  FIELD(lamp_optim_v1, step, 96, 8);
  FIELD(lamp_optim_v1, caps, 104, 4); /* 1.2 */
  FIELD(lamp_optim_v1, text_params, 112, 8);  /* 1.4 */
  FIELD(lamp_optim_v1, n_text_params, 120, 4); /* 1.4 */
  assert_int_equal(sizeof(lamp_optim_v1), 128);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_constants),     cmocka_unit_test(test_param),
      cmocka_unit_test(test_text_param),
      cmocka_unit_test(test_plugin_header), cmocka_unit_test(test_host),
      cmocka_unit_test(test_precision),     cmocka_unit_test(test_comm),
      cmocka_unit_test(test_bootstrap),     cmocka_unit_test(test_optim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
